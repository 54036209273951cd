// `troupe launch` with the ssh, mpi and slurm launchers (tools/launch_command.h), end to end: a real DMLC
// cluster on 127.0.0.1 with tests/kvstore/dist_node as the workers.
//   - ssh: a real sshd (Debian openssh-server) that the test starts on a free loopback port, with a
//     throwaway host key and user key in a temporary directory; launch logs in with `-i KEY`. A job runs
//     and every process exits 0; a failing worker stops the job (non-zero, a line per process); SIGINT to
//     launch leaves no remote process behind (checked by the pids the workers print). Skips (with the
//     reason) when sshd or ssh-keygen is not installed or sshd cannot start here.
//   - mpi: Open MPI's mpirun, oversubscribed on this machine (1 scheduler in launch, 1 server + 2 workers
//     as tasks): the job exits 0 with every task's lines prefixed; a failing worker makes it non-zero.
//     Skips without mpirun.
//   - slurm: without srun on PATH, a clear error; a job under a stand-in srun script (no Slurm here).
//   - the ssh launcher's usage errors: no host file, an unreadable one, an empty one.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "proc/process.h"
#include "proc/socket.h"

namespace troupe {
namespace {

namespace fs = std::filesystem;

constexpr int kTimeoutMs = 120000;

using Lines = std::vector<std::string>;

// Runs `troupe launch ARGS` with `env` on top of this process's; returns (exit status, every line it printed).
std::pair<int, Lines> Launch(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {}) {
  std::vector<std::string> argv{TROUPE_CLI_PATH, "launch"};
  argv.insert(argv.end(), args.begin(), args.end());
  proc::Process launch("troupe launch", argv, env, /*merge_stderr=*/true);
  Lines lines;
  while (launch.ReadSome(&lines)) {
  }
  for (const auto& l : lines) std::printf("%s\n", l.c_str());
  return {launch.Wait(kTimeoutMs), lines};
}

int Count(const Lines& lines, const std::string& needle) {
  int n = 0;
  for (const auto& l : lines) n += l.find(needle) != std::string::npos ? 1 : 0;
  return n;
}

// Waits for `ready` up to `timeout_ms`, checking every 10 ms: for sshd's port to accept connections, for
// which there is no event to wait on (sshd -D prints nothing when it listens).
template <typename F>
bool WaitUntil(F ready, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!ready()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

bool Accepts(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// Runs a command to its end; returns its exit status and prints its output when it failed.
int Run(const std::vector<std::string>& argv) {
  proc::Process p(argv[0], argv, {}, /*merge_stderr=*/true);
  Lines lines;
  while (p.ReadSome(&lines)) {
  }
  const int status = p.Wait(kTimeoutMs);
  if (status != 0) {
    for (const auto& l : lines) std::printf("%s: %s\n", argv[0].c_str(), l.c_str());
  }
  return status;
}

void Write(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

// An sshd on a free loopback port, logging in this user with a throwaway key; stopped and its files removed
// at the end. `skip` says why it could not start (the test then skips).
class Sshd {
 public:
  Sshd() {
    char tmpl[] = "/tmp/troupe-sshd-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) {
      skip_ = "cannot create a temporary directory";
      return;
    }
    dir_ = tmpl;
    const std::string sshd = "/usr/sbin/sshd";
    if (::access(sshd.c_str(), X_OK) != 0 || proc::FindProgram("ssh-keygen").empty() ||
        proc::FindProgram("ssh").empty()) {
      skip_ = "sshd, ssh or ssh-keygen is not installed (Debian openssh-server, openssh-client)";
      return;
    }
    // As root sshd needs its privilege separation directory.
    if (::geteuid() == 0 && !fs::exists("/run/sshd")) {
      std::error_code ec;
      fs::create_directories("/run/sshd", ec);
    }
    for (const char* key : {"host_key", "user_key"}) {
      if (Run({"ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", (dir_ / key).string()}) != 0) {
        skip_ = "ssh-keygen failed";
        return;
      }
    }
    fs::copy_file(dir_ / "user_key.pub", dir_ / "authorized_keys");
    port_ = proc::FreeLoopbackPort();
    {
      std::ifstream host_pub(dir_ / "host_key.pub");
      std::string key((std::istreambuf_iterator<char>(host_pub)), std::istreambuf_iterator<char>());
      Write(dir_ / "known_hosts", "[127.0.0.1]:" + std::to_string(port_) + " " + key);
    }
    // sshd refuses group/world-writable paths (StrictModes is off for the key files, not for itself).
    fs::permissions(dir_, fs::perms::owner_all);
    Write(dir_ / "sshd_config", "Port " + std::to_string(port_) +
                                    "\nListenAddress 127.0.0.1\n"
                                    "HostKey " +
                                    (dir_ / "host_key").string() + "\nAuthorizedKeysFile " +
                                    (dir_ / "authorized_keys").string() + "\nPidFile " + (dir_ / "sshd.pid").string() +
                                    "\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n"
                                    "KbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
                                    "PermitRootLogin prohibit-password\nLogLevel ERROR\n");
    if (Run({sshd, "-t", "-f", (dir_ / "sshd_config").string()}) != 0) {
      skip_ = "sshd -t refuses the test's configuration (see its output above)";
      return;
    }
    server_ = std::make_unique<proc::Process>(
        "sshd", std::vector<std::string>{sshd, "-D", "-e", "-f", (dir_ / "sshd_config").string()},
        std::map<std::string, std::string>{}, /*merge_stderr=*/true);
    if (!WaitUntil([&] { return server_->Wait(0) >= 0 || Accepts(port_); }, 30000) || server_->Wait(0) >= 0) {
      skip_ = "sshd did not start (exit " + std::to_string(server_->Wait(0)) + ")";
      return;
    }
    Write(dir_ / "hosts", "# test hosts\n127.0.0.1:" + std::to_string(port_) +
                              "\n\n127.0.0.1:" + std::to_string(port_) + "  # twice: round robin\n");
    // Can this user log in? (A locked account, or a login shell that is missing, would stop every test.)
    std::vector<std::string> probe{"ssh"};
    for (const auto& a : SshArgs()) probe.push_back(a);
    probe.insert(probe.end(), {"-o", "BatchMode=yes", "-p", std::to_string(port_), "127.0.0.1", "true"});
    if (Run(probe) != 0) skip_ = "this user cannot log in to the test's sshd (see ssh's output above)";
  }
  ~Sshd() {
    server_.reset();  // SIGKILL and reap
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  const std::string& skip() const { return skip_; }
  std::string hostfile() const { return (dir_ / "hosts").string(); }
  std::vector<std::string> SshArgs() const {
    return {"-F", "/dev/null",
            "-i", (dir_ / "user_key").string(),
            "-o", "UserKnownHostsFile=" + (dir_ / "known_hosts").string(),
            "-o", "LogLevel=ERROR"};
  }
  std::string LauncherArgs() const {
    std::string s;
    for (const auto& a : SshArgs()) s += (s.empty() ? "" : " ") + a;
    return s;
  }

 private:
  fs::path dir_;
  int port_ = 0;
  std::string skip_;
  std::unique_ptr<proc::Process> server_;
};

class LaunchSsh : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { sshd_ = new Sshd(); }
  static void TearDownTestSuite() {
    delete sshd_;
    sshd_ = nullptr;
  }
  void SetUp() override {
    if (!sshd_->skip().empty()) GTEST_SKIP() << sshd_->skip();
  }
  // launch's options for the test's sshd; `job` follows them.
  static std::vector<std::string> Args(const std::vector<std::string>& job = {}) {
    std::vector<std::string> args{"--launcher",         "ssh", "-H", sshd_->hostfile(), "--launcher-args",
                                  sshd_->LauncherArgs()};
    args.insert(args.end(), job.begin(), job.end());
    return args;
  }
  static Sshd* sshd_;
};
Sshd* LaunchSsh::sshd_ = nullptr;

std::string FailingWorker() {
  return std::string("if [ \"$TROUPE_LAUNCH_INDEX\" = 1 ]; then echo failing on purpose; exit 1; fi; exec ") +
         TROUPE_DIST_NODE + " any_workers";
}

TEST_F(LaunchSsh, JobRunsAndEveryProcessExitsZero) {
  const auto [status, lines] = Launch(Args({"-n", "2", "-s", "1", "--", TROUPE_DIST_NODE, "any_workers"}));
  EXPECT_EQ(status, 0);
  EXPECT_EQ(Count(lines, "of 2: 3 rounds exact"), 2) << "every worker's rounds were exact";
  for (const char* who : {"[worker 0]", "[worker 1]", "[server 0]", "[scheduler]"}) {
    EXPECT_GE(Count(lines, who), 1) << who << "'s output is shown with its prefix";
  }
  EXPECT_EQ(Count(lines, "troupe launch: every process exited 0"), 1);
}

TEST_F(LaunchSsh, AFailingWorkerStopsTheJob) {
  const auto [status, lines] = Launch(Args({"-n", "2", "-s", "1", "--", "sh", "-c", FailingWorker()}));
  EXPECT_EQ(status, 1);
  EXPECT_EQ(Count(lines, "[worker 1] failing on purpose"), 1);
  EXPECT_GE(Count(lines, "troupe launch: worker 1 on 127.0.0.1 (pid"), 1);
  // The summary: one line per process (the failed one is named twice: when it failed and in the summary).
  EXPECT_EQ(Count(lines, "stopped by launch") + Count(lines, ") exited"), 4 + 1);
}

// Starts `troupe launch ARGS -- <2 workers that print their pid and sleep>`, sends it SIGINT once both
// run, and checks that it exits 130 and that both workers are gone.
void InterruptLeavesNoWorkerBehind(const std::vector<std::string>& args,
                                   const std::map<std::string, std::string>& env) {
  std::vector<std::string> argv{TROUPE_CLI_PATH, "launch"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"-n", "2", "-s", "1", "--", "sh", "-c", "echo pid $$; exec sleep 1000"});
  proc::Process launch("troupe launch", argv, env, /*merge_stderr=*/true);
  std::vector<int> pids;
  for (int w = 0; w < 2; ++w) {
    const auto line = launch.ReadLine("[worker ", kTimeoutMs);
    ASSERT_TRUE(line.has_value());
    ASSERT_NE(line->find("] pid "), std::string::npos) << *line;
    pids.push_back(std::stoi(line->substr(line->find("] pid ") + 6)));
  }
  for (int pid : pids) EXPECT_FALSE(proc::ProcessGone(pid)) << "the worker " << pid << " runs";
  launch.Signal(SIGINT);
  EXPECT_EQ(launch.Wait(kTimeoutMs), 130);
  for (int pid : pids) EXPECT_TRUE(proc::ProcessGone(pid)) << "worker process " << pid << " is still there";
}

TEST_F(LaunchSsh, SigintLeavesNoRemoteProcessBehind) {
  // launch waits for ssh, and ssh ends once the remote shell has stopped and reaped its command.
  InterruptLeavesNoWorkerBehind(Args(), {});
}

TEST(LaunchSshUsage, HostFileErrors) {
  const auto run = [](const std::vector<std::string>& extra) {
    std::vector<std::string> args{"--launcher", "ssh", "-n", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--", "true"});
    return Launch(args);
  };
  auto [status, lines] = run({});
  EXPECT_EQ(status, 2);
  EXPECT_EQ(Count(lines, "needs -H HOSTFILE"), 1);
  std::tie(status, lines) = run({"-H", "/no/such/hostfile"});
  EXPECT_EQ(status, 2);
  EXPECT_EQ(Count(lines, "cannot read the host file '/no/such/hostfile'"), 1);
  char tmpl[] = "/tmp/troupe-hosts-XXXXXX";
  const int fd = ::mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  ::close(fd);
  Write(tmpl, "# nobody\n\n");
  std::tie(status, lines) = run({"-H", tmpl});
  ::unlink(tmpl);
  EXPECT_EQ(status, 2);
  EXPECT_EQ(Count(lines, "no hosts"), 1);
}

// mpirun refuses root unless told; oversubscribed: 3 tasks on 2 cores.
const std::map<std::string, std::string> kMpiEnv{{"OMPI_ALLOW_RUN_AS_ROOT", "1"},
                                                 {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}};

TEST(LaunchMpi, JobRunsAndEveryTaskExitsZero) {
  if (proc::FindProgram("mpirun").empty()) GTEST_SKIP() << "no mpirun on PATH (Debian openmpi-bin)";
  const auto [status, lines] = Launch({"--launcher", "mpi", "--launcher-args", "--oversubscribe", "-n", "2", "-s", "1",
                                       "--", TROUPE_DIST_NODE, "any_workers"},
                                      kMpiEnv);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(Count(lines, "of 2: 3 rounds exact"), 2) << "every worker's rounds were exact";
  for (const char* who : {"[worker 0]", "[worker 1]", "[server 0]", "[scheduler]"}) {
    EXPECT_GE(Count(lines, who), 1) << who << "'s output is shown with its prefix";
  }
  EXPECT_EQ(Count(lines, "[mpirun] [worker"), 0) << "task lines are not prefixed twice";
  EXPECT_EQ(Count(lines, ") exited 0 (task "), 3) << "every task says how it ended";
  EXPECT_EQ(Count(lines, "troupe launch: every process exited 0"), 1);
}

TEST(LaunchMpi, AFailingWorkerFailsTheJob) {
  if (proc::FindProgram("mpirun").empty()) GTEST_SKIP() << "no mpirun on PATH (Debian openmpi-bin)";
  const auto [status, lines] = Launch({"--launcher", "mpi", "--launcher-args", "--oversubscribe", "-n", "2", "-s", "1",
                                       "--", "sh", "-c", FailingWorker()},
                                      kMpiEnv);
  EXPECT_EQ(status, 1);
  EXPECT_EQ(Count(lines, "[worker 1] failing on purpose"), 1);
  EXPECT_EQ(Count(lines, "troupe launch: worker 1 on "), 1);
  EXPECT_GE(Count(lines, "troupe launch: mpirun (pid"), 1);
  EXPECT_GE(Count(lines, "troupe launch: scheduler (pid"), 1);
}

TEST(LaunchMpi, SigintLeavesNoTaskBehind) {
  if (proc::FindProgram("mpirun").empty()) GTEST_SKIP() << "no mpirun on PATH (Debian openmpi-bin)";
  // mpirun passes launch's SIGTERM on to the tasks, and each task to its worker.
  InterruptLeavesNoWorkerBehind({"--launcher", "mpi", "--launcher-args", "--oversubscribe"}, kMpiEnv);
}

TEST(LaunchSlurm, WithoutSrunIsAClearError) {
  const auto [status, lines] = Launch({"--launcher", "slurm", "-n", "2", "--", "true"}, {{"PATH", "/nonexistent"}});
  EXPECT_EQ(status, 1);
  EXPECT_EQ(Count(lines, "--launcher slurm needs 'srun' on PATH"), 1);
  EXPECT_EQ(Launch({"--launcher", "slurm", "-H", "hosts", "-n", "2", "--", "true"}).first, 2)
      << "a host file is not for slurm";
  const auto [keep_status, keep_lines] = Launch({"--launcher", "slurm", "--keep-going", "-n", "2", "--", "true"});
  EXPECT_EQ(keep_status, 2);
  EXPECT_EQ(Count(keep_lines, "--keep-going is for --launcher local or ssh"), 1);
}

// Without Slurm: a stand-in srun (a shell script) starts --ntasks copies of the command with SLURM_PROCID
// and SLURM_NTASKS, as srun does, so that launch's slurm path (its srun command line, launch-task's roles
// from Slurm's variables) runs end to end. srun's own behaviour (placement, --kill-on-bad-exit, --export,
// signals) is tested through a real single-node Slurm by tests/launch/slurm/run_slurm_test.sh (label slurm).
TEST(LaunchSlurm, JobRunsUnderAStandInSrun) {
  char tmpl[] = "/tmp/troupe-srun-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const fs::path dir = tmpl;
  Write(dir / "srun",
        "#!/bin/sh\n"
        "[ \"$1\" = --kill-on-bad-exit=1 ] || { echo \"srun stand-in: unexpected $1\"; exit 9; }\n"
        "while [ \"$1\" != --ntasks ]; do shift; done\n"
        "n=$2; shift 2; i=0; pids=; status=0\n"
        "while [ $i -lt $n ]; do SLURM_PROCID=$i SLURM_NTASKS=$n \"$@\" & pids=\"$pids $!\"; i=$((i+1)); done\n"
        "for p in $pids; do wait $p || status=$?; done\n"
        "exit $status\n");
  fs::permissions(dir / "srun", fs::perms::owner_all);
  const char* path = std::getenv("PATH");
  const auto [status, lines] =
      Launch({"--launcher", "slurm", "-n", "2", "-s", "1", "--", TROUPE_DIST_NODE, "any_workers"},
             {{"PATH", dir.string() + ":" + (path != nullptr ? path : "/usr/bin:/bin")}});
  std::error_code ec;
  fs::remove_all(dir, ec);
  EXPECT_EQ(status, 0);
  EXPECT_EQ(Count(lines, "of 2: 3 rounds exact"), 2) << "every worker's rounds were exact";
  for (const char* who : {"[worker 0]", "[worker 1]", "[server 0]", "[scheduler]"}) {
    EXPECT_GE(Count(lines, who), 1) << who << "'s output is shown with its prefix";
  }
  EXPECT_EQ(Count(lines, ") exited 0 (task "), 3) << "every task says how it ended";
}

TEST(LaunchTask, WithoutARankIsAClearError) {
  proc::Process task("launch-task",
                           {TROUPE_CLI_PATH, "launch-task", "--launcher", "slurm", "-n", "1", "-s", "1", "--", "true"},
                           {{"SLURM_PROCID", ""}}, /*merge_stderr=*/true);
  const auto line = task.ReadLine("troupe launch-task:", kTimeoutMs);
  ASSERT_TRUE(line.has_value());
  EXPECT_NE(line->find("SLURM_PROCID"), std::string::npos) << *line;
  EXPECT_EQ(task.Wait(kTimeoutMs), 2);
}

}  // namespace
}  // namespace troupe
