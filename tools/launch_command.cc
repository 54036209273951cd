// `troupe launch`: see tools/launch_command.h.
#include "tools/launch_command.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "kvstore/dist.h"
#include "proc/process.h"
#include "proc/signals.h"
#include "tools/cluster_token.h"
#include "tools/launch_remote.h"

namespace troupe::tools {
namespace {

using proc::Process;
using Clock = std::chrono::steady_clock;

constexpr int kStartTimeoutMs = 30000;  // for the scheduler's "listening" line
constexpr int kStopGraceMs = 3000;      // SIGTERM, then SIGKILL after this
constexpr int kRemoteKillAfterS = 3;    // ssh: the remote watchdog's SIGTERM, then SIGKILL after this
constexpr int kRemoteStopMs = 10000;    // ssh, mpirun, srun: how long they get to stop their processes
constexpr int kEndTimeoutMs = 60000;    // for the scheduler and servers once every worker is done

// SIGINT and SIGTERM to launch become a byte on proc's signal pipe, read by the watch loop; SIGPIPE is
// ignored (a child that closed its stdin is no reason to die). False when that cannot be set up.
bool CatchSignals() {
  try {
    proc::CatchTerminationSignals();
    return true;
  } catch (const Error&) {
    return false;
  }
}

std::string HostName() {
  char buf[256] = {};
  return ::gethostname(buf, sizeof buf - 1) == 0 ? std::string(buf) : std::string("?");
}

std::vector<std::string> SplitWords(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

// "troupe launch: worker 1 on HOST (pid 12) exited 1" and its variants.
// `stopped_by`: who stopped it ("launch"), empty when nobody did.
std::string Describe(const std::string& label, const std::string& where, int pid, int status,
                     const std::string& stopped_by) {
  std::string s = "troupe launch: " + label + (where.empty() ? "" : " on " + where) + " (pid " +
                  std::to_string(pid) + ") ";
  if (status < 0) return s + "still running";
  if (!stopped_by.empty()) return s + "stopped by " + stopped_by;
  if (status == 0) return s + "exited 0";
  if (status > 128) return s + "killed by signal " + std::to_string(status - 128);
  // 126 and 127 are what a shell (and proc::Process) report when the command cannot be run at all.
  if (status == 127) return s + "exited 127 (its command was not found, or could not be started)";
  if (status == 126) return s + "exited 126 (its command is not executable)";
  return s + "exited " + std::to_string(status);
}

struct Proc {
  std::unique_ptr<Process> child;
  std::vector<std::string> argv;              // what it runs, to start it again (a server's restart)
  std::map<std::string, std::string> env;
  int restarts = 0;                           // times it was started again
  bool server = false;
  std::string label;  // "scheduler", "server 0", "worker 2", "mpirun"
  std::string where;  // ssh: the host it runs on
  bool worker = false;  // its end is the workers' end (a worker, or the mpirun/srun job)
  bool ssh = false;     // stopped by closing its stdin (the remote watchdog then stops the command)
  bool tasks = false;   // mpirun/srun: the tasks prefix their own lines
  // How launch stops it. srun turns SIGTERM into SIGKILL of its tasks ("forcing job termination"); with
  // --disable-status it forwards SIGINT to them instead, so each task stops its process and says so.
  int stop_signal = SIGTERM;
  bool output_open = true;
  int status = -1;  // -1 running
  bool stopped_by_launch = false;
};

std::string Describe(const Proc& p) {
  if (p.tasks && p.status > 128 && !p.stopped_by_launch) {
    // mpirun's and srun's status is the highest of their tasks' (a task stopped by SIGTERM exits 143), not
    // a signal that ended them.
    return "troupe launch: " + p.label + " (pid " + std::to_string(p.child->pid()) + ") exited " +
           std::to_string(p.status) + " (the highest of its tasks' exit statuses)";
  }
  std::string s = Describe(p.label, p.where, p.child->pid(), p.status, p.stopped_by_launch ? "launch" : "");
  if (p.ssh && p.status == 255 && !p.stopped_by_launch) s += " (ssh could not connect, log in or run the command)";
  return s;
}

void Print(const Proc& p, const std::vector<std::string>& lines) {
  for (const std::string& l : lines) {
    const bool own = p.tasks && (l.rfind("[server ", 0) == 0 || l.rfind("[worker ", 0) == 0 ||
                                 l.rfind("troupe launch: ", 0) == 0);
    if (own) {
      std::printf("%s\n", l.c_str());
    } else {
      std::printf("[%s] %s\n", p.label.c_str(), l.c_str());
    }
  }
  std::fflush(stdout);
}

// Stops every process still running: SIGTERM (ssh: its stdin closed, so the remote watchdog stops the
// command and ssh ends with it), then SIGKILL after the grace period; reaps them all.
void StopAll(std::vector<Proc>& procs) {
  const auto now = Clock::now();
  for (Proc& p : procs) {
    if (p.status < 0) {
      p.stopped_by_launch = true;
      if (p.ssh) {
        p.child->CloseInput();
      } else {
        p.child->Signal(p.stop_signal);
      }
    }
  }
  for (Proc& p : procs) {
    if (p.status >= 0) continue;
    const auto deadline = now + std::chrono::milliseconds(p.ssh || p.tasks ? kRemoteStopMs : kStopGraceMs);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    p.status = p.child->Wait(static_cast<int>(std::max<long long>(left, 0)));
    if (p.status < 0) {
      p.child->Signal(SIGKILL);
      p.status = p.child->Wait(kStopGraceMs);
    }
  }
}

// The checks of the options that need no process; returns 0 or launch's exit status with the message
// printed. Fills *hosts for ssh.
int CheckLauncher(const LaunchOptions& o, std::vector<SshHost>* hosts) {
  const auto usage = [](const std::string& message) {
    std::fprintf(stderr, "troupe launch: %s\n", message.c_str());
    return 2;
  };
  if (o.keep_going && (o.launcher == "mpi" || o.launcher == "slurm")) {
    return usage("--keep-going is for --launcher local or ssh (mpirun and srun stop a job whose task failed)");
  }
  if (o.launcher == "local") {
    if (!o.hostfile.empty()) return usage("-H/--hostfile is for --launcher ssh or mpi");
    return 0;
  }
  if (o.launcher == "ssh") {
    if (o.hostfile.empty()) return usage("--launcher ssh needs -H HOSTFILE (one host or host:port a line)");
    std::ifstream in(o.hostfile);
    if (!in) return usage("cannot read the host file '" + o.hostfile + "'");
    std::stringstream text;
    text << in.rdbuf();
    std::string error;
    *hosts = ParseHostfile(text.str(), &error);
    if (hosts->empty()) return usage("host file '" + o.hostfile + "': " + error);
  }
  if (o.launcher == "slurm" && !o.hostfile.empty()) {
    return usage("--launcher slurm runs on the Slurm allocation; -H/--hostfile is for ssh or mpi");
  }
  const std::string program = o.launcher == "ssh" ? "ssh" : o.launcher == "mpi" ? "mpirun" : "srun";
  if (proc::FindProgram(program).empty()) {
    std::fprintf(stderr, "troupe launch: --launcher %s needs '%s' on PATH, and it is not there\n",
                 o.launcher.c_str(), program.c_str());
    return 1;
  }
  return 0;
}

// The worker command, checked before anything starts when it runs on this machine: a path must be an
// executable file, a name must be on PATH. Returns 0 or 2 with the message printed.
int CheckCommand(const LaunchOptions& o) {
  if (o.launcher != "local") return 0;  // it runs on other hosts, whose files launch cannot see
  const std::string& program = o.command.front();
  const std::string found = proc::FindProgram(program);
  std::error_code ec;
  if (found.empty()) {
    std::fprintf(stderr, "troupe launch: the worker command '%s' is not on PATH (give its path, e.g. ./%s)\n",
                 program.c_str(), program.c_str());
    return 2;
  }
  if (!std::filesystem::exists(found, ec)) {
    std::fprintf(stderr, "troupe launch: the worker command '%s' does not exist\n", program.c_str());
    return 2;
  }
  if (std::filesystem::is_directory(found, ec) || ::access(found.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "troupe launch: the worker command '%s' is not an executable file\n", program.c_str());
    return 2;
  }
  return 0;
}

// True when the worker command is `troupe train` without a distributed KVStore: every worker would then
// train alone, next to servers nobody talks to.
bool TrainsAlone(const std::vector<std::string>& command) {
  if (command.size() < 2 || command[1] != "train") return false;
  if (std::filesystem::path(command[0]).filename() != "troupe") return false;
  for (std::size_t i = 2; i < command.size(); ++i) {
    std::string value;
    if (command[i] == "--kvstore" && i + 1 < command.size()) {
      value = command[i + 1];
    } else if (command[i].rfind("--kvstore=", 0) == 0) {
      value = command[i].substr(10);
    }
    if (value.rfind("dist", 0) == 0) return false;
  }
  return true;
}

constexpr const char* kFormedLine = "troupe scheduler: the cluster formed";
constexpr const char* kHowToJoin =
    "a worker joins the cluster when it creates a distributed KVStore (troupe train: --kvstore dist_sync, "
    "dist_async or dist_device_sync; a program of your own: a KVStore of one of those types)";

}  // namespace

LaunchCommand::LaunchCommand(CLI::App* root) {
  app_ = root->add_subcommand("launch", "Launch a distributed KVStore job: scheduler, servers and workers");
  app_->footer(
      "Starts the scheduler (here) and -s servers (this troupe executable) and -n copies of CMD as workers, "
      "with DMLC_ROLE, DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT, DMLC_NUM_SERVER, DMLC_NUM_WORKER, "
      "DMLC_NODE_HOST (local: --host; ssh: the host's address; mpi, slurm: unset, so a node listens on "
      "127.0.0.1 unless --env DMLC_INTERFACE=IFACE or DMLC_NODE_HOST says otherwise), TROUPE_CLUSTER_TOKEN "
      "(from the environment, else a new random 256-bit one, written to a file only the user can read, "
      "$XDG_RUNTIME_DIR/troupe/HOST_PORT.token or ~/.troupe/tokens/HOST_PORT.token, which 'troupe shell "
      "--connect HOST:PORT' finds by itself and launch removes when it ends) and TROUPE_LAUNCH_INDEX (the worker's index in launch, "
      "0..n-1; its KVStore rank is the scheduler's), and (local, ssh; unless set) TROUPE_HOST_PROCESSES, how "
      "many servers and workers share the node's host, so that each sizes its threads for its share of the "
      "cores. Every line a process prints (stdout and stderr) is shown "
      "as '[worker 1] ...'. When a process fails, launch stops the others and prints one line per process "
      "(mpi, slurm: mpirun/srun stop the job's other tasks and each task prints its own last line); with "
      "--keep-going (local, ssh) the others go on, and the cluster's survivors can be looked at with 'troupe "
      "shell --connect' (the scheduler's address is in its 'listening on' line). A server that dies is "
      "started again (local launcher, --restart-servers times, default 3): servers get ranks "
      "(TROUPE_SERVER_RANK) and checkpoint every TROUPE_KVSTORE_CHECKPOINT_EVERY updates (default here 100) "
      "into TROUPE_KVSTORE_CHECKPOINT_DIR (default a folder of launch's, removed at the end); the restarted "
      "server reloads its checkpoint and the workers resend what it lacks, so the job goes on. Ctrl-C "
      "stops everything. Exit status: 0 when every process exited 0, 1 when one failed, 130 when "
      "interrupted, 2 on bad usage.\n\n"
      "Launchers:\n"
      "  local  every process on this machine.\n"
      "  ssh    servers and workers round robin over the hosts of -H HOSTFILE (a line: host, user@host or "
      "host:port; # comments), through 'ssh -o StrictHostKeyChecking=no -o BatchMode=yes' plus "
      "--launcher-args; each runs in launch's working directory, with the same troupe path (a shared file "
      "system or the same install). The environment goes over ssh's stdin, never on a command line; when "
      "launch stops a process (or ssh dies) the remote command's session gets SIGTERM, then SIGKILL. Set "
      "--host to an address of this machine the hosts reach.\n"
      "  mpi    one 'mpirun -np S+N' job (Open MPI; -H is passed as --hostfile; the variables go with -x); "
      "task rank r < S is server r, the rest are workers; needs mpirun on PATH and troupe at the same path "
      "on every node.\n"
      "  slurm  one 'srun --kill-on-bad-exit=1 --export=ALL --disable-status --ntasks S+N' job, roles from "
      "SLURM_PROCID/SLURM_NTASKS as for mpi; run launch inside an allocation (salloc/sbatch) of at least S+N "
      "tasks (more tasks than CPUs: salloc --overcommit) with --host set to this node's address.\n\n"
      "Examples:\n"
      "  troupe launch -n 2 -s 1 -- ./my_worker --epochs 3\n"
      "  troupe launch -n 4 -s 2 --env OMP_NUM_THREADS=1 -- ./my_worker\n"
      "  troupe launch --launcher ssh -H hosts.txt --host 10.0.0.1 -n 4 -s 2 -- ./my_worker\n"
      "  TROUPE_LAUNCHER_ARGS='-l alice' troupe launch --launcher ssh -H hosts.txt --host 10.0.0.1 -n 2 -- ./w\n"
      "  troupe launch --launcher ssh -H hosts.txt --launcher-args '-i /home/me/.ssh/cluster_key' -n 2 -- ./my_worker\n"
      "  troupe launch --launcher mpi --launcher-args=--oversubscribe -n 2 -s 1 -- ./my_worker\n"
      "  troupe launch --launcher mpi -H mpi_hosts --host 10.0.0.1 --env DMLC_INTERFACE=eth0 -n 8 -s 2 -- ./my_worker\n"
      "  salloc -N 4 troupe launch --launcher slurm --host $(hostname -i) -n 6 -s 2 -- ./my_worker\n\n"
      "Everything after the first word that is not one of launch's options is the worker command (the '--' "
      "before it is optional). Workers that never create a distributed KVStore (e.g. troupe train without "
      "--kvstore dist_sync) each run alone: launch warns when it can tell from the command, and ends the job "
      "with an explanation when every worker ended without joining the cluster.\n");
  app_->add_option("-n,--num-workers", options_.workers, "Workers (copies of CMD)")->required()->check(CLI::Range(1, 10000));
  app_->add_option("-s,--num-servers", options_.servers, "Servers")->check(CLI::Range(1, 10000))->capture_default_str();
  app_->add_option("--launcher", options_.launcher, "Where processes run: local, ssh, mpi or slurm")
      ->check(CLI::IsMember({"local", "ssh", "mpi", "slurm"}))
      ->capture_default_str();
  app_->add_option("-H,--hostfile", options_.hostfile, "ssh: the hosts (required); mpi: mpirun's --hostfile");
  app_->add_option("--launcher-args", options_.launcher_args,
                   "Extra arguments for ssh, mpirun or srun, split at whitespace (default: $TROUPE_LAUNCHER_ARGS; "
                   "local: unused)");
  app_->add_option("--host", options_.host, "Address the scheduler listens on (and local servers)")->capture_default_str();
  app_->add_option("--port", options_.port, "The scheduler's port (0: any free one)")->check(CLI::Range(0, 65535));
  app_->add_option("--env", options_.env, "K=V for every process (repeatable)")->allow_extra_args(false);
  app_->add_flag("--keep-going", options_.keep_going,
                 "local, ssh: when a process fails, leave the others running (launch still exits 1 at the end)");
  app_->add_option("--restart-servers", options_.restart_servers,
                   "local: start a server that died again from its checkpoint, up to N times per server (0: a dead "
                   "server fails the job); the workers resend what its checkpoint lacks")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  // Not ->required(): RunLaunch says what is missing in words of its own, with an example.
  app_->add_option("command", options_.command, "The worker command and its arguments (after --)");
  app_->allow_extras(false);
  // The first positional word starts the worker command: what follows is its own, even when it looks like an
  // option or names a troupe subcommand ("troupe launch -n 2 troupe train --epochs 3" without the '--').
  app_->positionals_at_end();

  // What each task of launch's mpirun/srun job runs; not for people, so hidden from --help.
  task_ = root->add_subcommand("launch-task", "One task of an mpi/slurm launch (started by troupe launch)");
  task_->group("");
  task_->add_option("--launcher", task_options_.launcher)->required()->check(CLI::IsMember({"mpi", "slurm"}));
  task_->add_option("-n,--num-workers", task_options_.workers)->required()->check(CLI::Range(1, 10000));
  task_->add_option("-s,--num-servers", task_options_.servers)->required()->check(CLI::Range(1, 10000));
  task_->add_option("command", task_options_.command)->required();
  task_->allow_extras(false);
  task_->positionals_at_end();
}

bool LaunchCommand::chosen() const { return app_->parsed() || task_->parsed(); }

int LaunchCommand::Run() {
  if (task_->parsed()) {
    return RunLaunchTask(task_options_.launcher, task_options_.servers, task_options_.workers, task_options_.command);
  }
  return RunLaunch(options_);
}

int RunLaunch(const LaunchOptions& o) {
  if (o.command.empty()) {
    std::fprintf(stderr,
                 "troupe launch: name the workers' command after the options, e.g. troupe launch -n 2 -s 1 -- troupe "
                 "train --kvstore dist_sync\n");
    return 2;
  }
  std::vector<SshHost> hosts;
  if (const int status = CheckLauncher(o, &hosts); status != 0) return status;
  if (const int status = CheckCommand(o); status != 0) return status;
  if (TrainsAlone(o.command)) {
    std::fprintf(stderr,
                 "troupe launch: warning: the workers run 'troupe train' without --kvstore dist_sync (or dist_async, "
                 "dist_device_sync): each will train alone on its own copy of the model while the servers stay "
                 "idle. Add --kvstore dist_sync to the worker command to train together.\n");
  }
  std::map<std::string, std::string> env{{"DMLC_PS_ROOT_URI", o.host},
                                         {"DMLC_NUM_SERVER", std::to_string(o.servers)},
                                         {"DMLC_NUM_WORKER", std::to_string(o.workers)}};
  if (o.launcher == "local") env["DMLC_NODE_HOST"] = o.host;
  const char* token = std::getenv("TROUPE_CLUSTER_TOKEN");
  env["TROUPE_CLUSTER_TOKEN"] = token != nullptr && *token != '\0' ? token : NewClusterToken();
  for (const std::string& kv : o.env) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::fprintf(stderr, "troupe launch: --env '%s' is not K=V\n", kv.c_str());
      return 2;
    }
    env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (o.launcher == "ssh") {
    std::string error;
    if (RemoteEnvBlock(env, &error).empty()) {
      std::fprintf(stderr, "troupe launch: --env: %s\n", error.c_str());
      return 2;
    }
  }
  if (!CatchSignals()) {
    std::fprintf(stderr, "troupe launch: cannot create a pipe\n");
    return 1;
  }
  // Restartable servers checkpoint by themselves: into a folder of this launch's unless one is given.
  struct TempDir {
    std::string path;
    ~TempDir() {
      std::error_code ec;
      if (!path.empty()) std::filesystem::remove_all(path, ec);
    }
  } checkpoints;
  const auto given = [&](const char* name) { return env.count(name) != 0 || std::getenv(name) != nullptr; };
  if (o.restart_servers > 0 && o.launcher == "local") {
    if (!given("TROUPE_KVSTORE_CHECKPOINT_DIR")) {
      std::string templ = (std::filesystem::temp_directory_path() / "troupe-launch-XXXXXX").string();
      if (::mkdtemp(templ.data()) == nullptr) {
        std::fprintf(stderr, "troupe launch: cannot create a folder for the servers' checkpoints in %s\n",
                     std::filesystem::temp_directory_path().c_str());
        return 1;
      }
      checkpoints.path = templ;
      env["TROUPE_KVSTORE_CHECKPOINT_DIR"] = templ;
    }
    if (!given("TROUPE_KVSTORE_CHECKPOINT_EVERY")) env["TROUPE_KVSTORE_CHECKPOINT_EVERY"] = "100";
  }

  const std::string self = proc::SelfExe();
  std::vector<Proc> procs;
  auto start = [&](const std::string& label, std::vector<std::string> argv, std::map<std::string, std::string> e,
                   bool worker) -> Proc& {
    Proc p;
    // die_with_parent: a launch that is killed (SIGKILL, the OOM killer) takes its processes with it.
    p.child = std::make_unique<Process>(label, argv, e, /*merge_stderr=*/true, /*die_with_parent=*/true);
    p.argv = std::move(argv);
    p.env = std::move(e);
    p.label = label;
    p.worker = worker;
    procs.push_back(std::move(p));
    return procs.back();
  };

  // The scheduler first: its port is what everyone else needs.
  auto e = env;
  e["DMLC_ROLE"] = "scheduler";
  e["DMLC_NODE_HOST"] = o.host;
  e["DMLC_PS_ROOT_PORT"] = std::to_string(o.port);
  Proc& scheduler = start("scheduler", {self, "scheduler"}, e, false);
  // Its lines before "listening" (a port in use, a bad setting) are shown: they say why it did not start.
  std::optional<std::string> line;
  for (const auto deadline = Clock::now() + std::chrono::milliseconds(kStartTimeoutMs); !line;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    line = left > 0 ? scheduler.child->ReadLine("", static_cast<int>(left)) : std::nullopt;
    if (!line) break;
    if (line->rfind("troupe scheduler: listening on", 0) != 0) {
      Print(scheduler, {*line});
      line.reset();
    }
  }
  if (!line) {
    // Its output ended (it is exiting: give it a moment to be reaped) or the time ran out (it hangs).
    scheduler.status = scheduler.child->Wait(kStopGraceMs);
    std::fprintf(stderr, "troupe launch: the scheduler did not start (%s)\n",
                 scheduler.status >= 0 ? "it exited; its output is above"
                                               : ("no 'listening' line within " + std::to_string(kStartTimeoutMs) + " ms").c_str());
    StopAll(procs);
    for (const Proc& p : procs) std::fprintf(stderr, "%s\n", Describe(p).c_str());
    return 1;
  }
  Print(scheduler, {*line});
  env["DMLC_PS_ROOT_PORT"] = line->substr(line->rfind(':') + 1);
  // The token goes to a file only the user can read, for `troupe shell --connect` (removed at the end).
  ClusterTokenFile token_file;
  {
    const std::string path = ClusterTokenPath(o.host, std::atoi(env["DMLC_PS_ROOT_PORT"].c_str()));
    if (std::string error = WriteClusterToken(path, env["TROUPE_CLUSTER_TOKEN"]); error.empty()) {
      token_file.Reset(path);
      std::printf("troupe launch: the cluster token is in %s (troupe shell --connect %s:%s reads it)\n", path.c_str(),
                  o.host.c_str(), env["DMLC_PS_ROOT_PORT"].c_str());
    } else {
      std::fprintf(stderr, "troupe launch: warning: %s; troupe shell --connect will need TROUPE_CLUSTER_TOKEN\n",
                   error.c_str());
    }
  }
  const char* env_args = std::getenv("TROUPE_LAUNCHER_ARGS");
  const std::vector<std::string> extra =
      SplitWords(!o.launcher_args.empty() || env_args == nullptr ? o.launcher_args : env_args);
  const auto role_env = [&](bool server, int index) {
    auto r = env;
    r["DMLC_ROLE"] = server ? "server" : "worker";
    if (!server) r["TROUPE_LAUNCH_INDEX"] = std::to_string(index);
    return r;
  };
  // Processes on one host share its cores: each server and worker is told how many run beside it, so that
  // its thread defaults take its share (TROUPE_HOST_PROCESSES) rather than every one the whole machine. ssh
  // goes round robin, so host h runs the nodes h, h + hosts, ...; mpi and slurm place tasks themselves (their
  // CPU binding is what AvailableCores sees).
  const bool share_cores = !given("TROUPE_HOST_PROCESSES");
  const auto on_host = [&](int i) {
    const int nodes = o.servers + o.workers;
    if (o.launcher == "local") return nodes;
    const int h = static_cast<int>(hosts.size());
    return nodes / h + (i % h < nodes % h ? 1 : 0);
  };
  if (o.launcher == "local" || o.launcher == "ssh") {
    char buf[4096];
    const std::string cwd = ::getcwd(buf, sizeof buf) != nullptr ? buf : "/";
    for (int i = 0; i < o.servers + o.workers; ++i) {
      const bool server = i < o.servers;
      const int index = server ? i : i - o.servers;
      const std::string label = (server ? "server " : "worker ") + std::to_string(index);
      const std::vector<std::string> cmd = server ? std::vector<std::string>{self, "server"} : o.command;
      e = role_env(server, index);
      if (share_cores) e["TROUPE_HOST_PROCESSES"] = std::to_string(on_host(i));
      if (o.launcher == "local") {
        if (server) e["TROUPE_SERVER_RANK"] = std::to_string(index);  // a restart takes the same rank
        start(label, cmd, e, !server).server = server;
        continue;
      }
      // ssh, as dmlc-core's ssh tracker: round robin over the hosts.
      const SshHost& h = hosts[static_cast<std::size_t>(i) % hosts.size()];
      e["DMLC_NODE_HOST"] = h.Address();
      std::vector<std::string> argv{"ssh", "-o", "StrictHostKeyChecking=no", "-o", "BatchMode=yes"};
      argv.insert(argv.end(), extra.begin(), extra.end());
      if (h.port > 0) argv.insert(argv.end(), {"-p", std::to_string(h.port)});
      argv.insert(argv.end(), {h.host, RemoteShellCommand(cwd, cmd, kRemoteKillAfterS)});
      Proc& p = start(label, argv, {}, !server);
      p.ssh = true;
      p.where = h.host;
      std::string error;
      p.child->Write(RemoteEnvBlock(e, &error));  // checked above; a failed write shows as ssh's failure
    }
  } else {
    // mpi, slurm: one job of servers + workers tasks; each is `troupe launch-task`, its role from its rank.
    const std::string tasks = std::to_string(o.servers + o.workers);
    std::vector<std::string> argv;
    if (o.launcher == "mpi") {
      argv = {"mpirun"};
      if (!o.hostfile.empty()) argv.insert(argv.end(), {"--hostfile", o.hostfile});
      argv.insert(argv.end(), extra.begin(), extra.end());
      argv.insert(argv.end(), {"-np", tasks});
      for (const auto& kv : env) argv.insert(argv.end(), {"-x", kv.first});  // the name only: values stay off ps
    } else {
      // --export=ALL: the DMLC_* variables and the token travel in srun's environment, and an
      // SLURM_EXPORT_ENV=NONE inherited from 'sbatch --export=NONE' would drop them. --disable-status: a
      // SIGINT (how launch stops srun) goes to the tasks rather than printing their status.
      argv = {"srun", "--kill-on-bad-exit=1", "--export=ALL", "--disable-status"};
      argv.insert(argv.end(), extra.begin(), extra.end());
      argv.insert(argv.end(), {"--ntasks", tasks});
    }
    argv.insert(argv.end(), {self, "launch-task", "--launcher", o.launcher, "-s", std::to_string(o.servers), "-n",
                             std::to_string(o.workers), "--"});
    argv.insert(argv.end(), o.command.begin(), o.command.end());
    Proc& job = start(argv.front(), argv, env, true);
    job.tasks = true;
    if (o.launcher == "slurm") job.stop_signal = SIGINT;
  }
  std::string pids;
  for (const Proc& p : procs) pids += " " + std::to_string(p.child->pid());
  std::printf("troupe launch: started 1 scheduler, %d server%s, %d worker%s (launcher %s); pids%s\n", o.servers,
              o.servers == 1 ? "" : "s", o.workers, o.workers == 1 ? "" : "s", o.launcher.c_str(), pids.c_str());
  std::fflush(stdout);

  // Watch: output lines, exits, signals.
  bool failed = false;
  bool formed = false;  // the scheduler said the cluster formed: every server and worker joined
  const auto show_output = [&](Proc& p) {  // one read of what p printed
    std::vector<std::string> lines;
    p.output_open = p.child->ReadSome(&lines);
    if (&p == &procs.front()) {  // the scheduler
      for (const std::string& l : lines) formed = formed || l.rfind(kFormedLine, 0) == 0;
    }
    Print(p, lines);
  };
  Clock::time_point workers_done{};
  for (;;) {
    std::vector<pollfd> fds{{proc::TerminationSignalFd(), POLLIN, 0}};
    for (const Proc& p : procs) {
      if (p.output_open) fds.push_back({p.child->out_fd(), POLLIN, 0});
      if (p.status < 0) fds.push_back({p.child->exit_fd(), POLLIN, 0});
    }
    if (fds.size() == 1) break;  // every process ended and said everything
    ::poll(fds.data(), fds.size(), 500);
    if (const int sig = proc::CaughtTerminationSignal(); sig != 0) {
      std::fprintf(stderr, "troupe launch: interrupted (signal %d); stopping every process\n", sig);
      StopAll(procs);
      for (Proc& p : procs) {
        std::vector<std::string> rest;
        while (p.output_open && p.child->ReadSome(&rest)) {
        }
        Print(p, rest);
        std::fprintf(stderr, "%s\n", Describe(p).c_str());
      }
      return 130;
    }
    for (Proc& p : procs) {
      for (const pollfd& f : fds) {
        if (f.fd == p.child->out_fd() && p.output_open && (f.revents & (POLLIN | POLLHUP)) != 0) {
          show_output(p);
        }
      }
      if (p.status < 0) {
        p.status = p.child->Wait(0);
        if (p.status > 0 && p.server && p.restarts < o.restart_servers && !failed && o.launcher == "local") {
          // Drain what it said, then start it again: it reloads its checkpoint and takes its rank back once
          // the scheduler has seen the old process go; the workers resend what the checkpoint lacks.
          std::vector<std::string> rest;
          while (p.output_open && p.child->ReadSome(&rest)) {
          }
          Print(p, rest);
          ++p.restarts;
          std::fprintf(stderr, "%s; starting it again from its checkpoint (restart %d of %d, --restart-servers)\n",
                       Describe(p).c_str(), p.restarts, o.restart_servers);
          p.child = std::make_unique<Process>(p.label, p.argv, p.env, /*merge_stderr=*/true, /*die_with_parent=*/true);
          p.status = -1;
          p.output_open = true;
          continue;
        }
        if (p.status > 0 && o.keep_going) {
          failed = true;
          std::fprintf(stderr, "%s; the others keep going (--keep-going)\n", Describe(p).c_str());
        } else if (p.status > 0 && !failed) {
          failed = true;
          std::fprintf(stderr, "%s; stopping the others\n", Describe(p).c_str());
          StopAll(procs);
        }
      }
    }
    const bool workers_left = std::any_of(procs.begin(), procs.end(), [](const Proc& p) { return p.worker && p.status < 0; });
    if (!workers_left && workers_done == Clock::time_point{}) {
      workers_done = Clock::now();
      // The scheduler says "formed" before any worker can start, so its line is in the pipe by now: read
      // what the poll above did not see yet before deciding.
      Proc& sched = procs.front();
      for (pollfd f{sched.child->out_fd(), POLLIN, 0}; !formed && sched.output_open && ::poll(&f, 1, 0) == 1;) {
        show_output(sched);
      }
      if (!formed && !failed) {
        // Every worker ended without joining: the scheduler would wait for them until its timeout.
        failed = true;
        std::fprintf(stderr,
                     "troupe launch: every worker ended without joining the cluster, so the servers were never "
                     "used; %s. Stopping the scheduler and servers.\n",
                     kHowToJoin);
        StopAll(procs);
      }
    }
    // Once every worker is done the scheduler ends the cluster; one that does not within the timeout is stopped.
    if (!workers_left && Clock::now() - workers_done > std::chrono::milliseconds(kEndTimeoutMs)) {
      failed = true;
      std::fprintf(stderr, "troupe launch: the scheduler and servers did not end %d ms after the last worker\n",
                   kEndTimeoutMs);
      StopAll(procs);
    }
  }
  for (const Proc& p : procs) {
    if (p.status != 0) failed = true;
  }
  if (failed) {
    for (const Proc& p : procs) std::fprintf(stderr, "%s\n", Describe(p).c_str());
    return 1;
  }
  std::printf("troupe launch: every process exited 0\n");
  return 0;
}

int RunLaunchTask(const std::string& launcher, int servers, int workers, const std::vector<std::string>& command) {
  const std::map<std::string, std::string> env = proc::CurrentEnvironment();
  const TaskRole role = MapTaskRank(launcher, env, servers, workers);
  if (!role.error.empty()) {
    std::fprintf(stderr, "troupe launch-task: %s\n", role.error.c_str());
    return 2;
  }
  if (!CatchSignals()) {
    std::fprintf(stderr, "troupe launch-task: cannot create a pipe\n");
    return 1;
  }
  const bool server = role.role == "server";
  std::map<std::string, std::string> e{{"DMLC_ROLE", role.role}};
  if (!server) e["TROUPE_LAUNCH_INDEX"] = std::to_string(role.index);
  const std::string label = role.role + " " + std::to_string(role.index);
  const std::vector<std::string> argv = server ? std::vector<std::string>{proc::SelfExe(), "server"} : command;
  // die_with_parent: mpirun and srun SIGKILL a task that outlives their grace period; its child goes too.
  Process child(label, argv, e, /*merge_stderr=*/true, /*die_with_parent=*/true);
  bool stopped = false;
  for (bool open = true; open;) {
    pollfd fds[2] = {{proc::TerminationSignalFd(), POLLIN, 0}, {child.out_fd(), POLLIN, 0}};
    ::poll(fds, 2, -1);
    if (proc::CaughtTerminationSignal() != 0 && !stopped) {
      stopped = true;
      child.Signal(SIGTERM);
    }
    if ((fds[1].revents & (POLLIN | POLLHUP)) != 0) {
      std::vector<std::string> lines;
      open = child.ReadSome(&lines);
      for (const std::string& l : lines) std::printf("[%s] %s\n", label.c_str(), l.c_str());
      std::fflush(stdout);
    }
  }
  const int status = child.Wait(-1);
  const std::string by = stopped && status != 0 ? (launcher == "mpi" ? "mpirun" : "srun") : "";
  std::printf("%s (task %d)\n", Describe(label, HostName(), child.pid(), status, by).c_str(), role.rank);
  std::fflush(stdout);
  return status;
}

}  // namespace troupe::tools
