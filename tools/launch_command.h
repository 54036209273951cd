// `troupe launch`: starts a distributed KVStore cluster — the scheduler, the servers and the workers (a
// command of the user's) — with the DMLC_* variables and a cluster token, and watches it: every line the
// processes print is shown prefixed with their role and index; when one fails the others are stopped and a
// one-line summary per process is printed; Ctrl-C (SIGINT or SIGTERM to launch) stops them all.
//
// Launchers (the scheduler always runs in launch's machine, as dmlc-core's tracker does):
//   - local: the servers and workers are processes on this machine;
//   - ssh: each server and worker runs on a host of the host file (round robin) through the system `ssh`;
//     its environment goes over ssh's stdin, and closing that stdin stops it (tools/launch_remote.h);
//   - mpi / slurm: one `mpirun` / `srun` job of servers + workers tasks, each running the hidden
//     `troupe launch-task`, which takes its role from its rank (MapTaskRank), runs it, and prefixes its
//     output.
//
// Thread-safety: none needed; used from main() only.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace troupe::tools {

struct LaunchOptions {
  int workers = 1;
  int servers = 1;
  std::string launcher = "local";
  std::string host = "127.0.0.1";  // where the scheduler and servers listen (DMLC_PS_ROOT_URI, DMLC_NODE_HOST)
  int port = 0;                    // the scheduler's port; 0 = any free one
  std::vector<std::string> env;    // K=V given to every process
  std::string hostfile;            // ssh: the hosts; mpi: mpirun's --hostfile
  std::string launcher_args;       // extra arguments for ssh / mpirun / srun, split at whitespace
  std::vector<std::string> command;  // the worker command
  bool keep_going = false;           // local, ssh: a failed process does not stop the others
  int restart_servers = 3;           // local: times a dead server is started again from its checkpoint
};

// Runs the job; returns launch's exit status: 0 when every process exited 0, 1 when one failed, 130 after
// SIGINT/SIGTERM, 2 on bad options.
int RunLaunch(const LaunchOptions& options);

// `troupe launch-task` (hidden): one task of an mpirun/srun job started by RunLaunch. Takes its role from
// its rank (MapTaskRank; `launcher` is "mpi" or "slurm"), runs `troupe server` or the worker command with
// DMLC_ROLE (and TROUPE_LAUNCH_INDEX), prints its lines prefixed with '[worker 1] ', passes SIGTERM/SIGINT
// on, prints a last line with its exit status, and returns that status (2 when it has no role).
int RunLaunchTask(const std::string& launcher, int servers, int workers, const std::vector<std::string>& command);

class LaunchCommand {
 public:
  explicit LaunchCommand(CLI::App* root);
  bool chosen() const;
  int Run();

 private:
  CLI::App* app_ = nullptr;
  CLI::App* task_ = nullptr;  // the hidden launch-task
  LaunchOptions options_;
  LaunchOptions task_options_;
};

}  // namespace troupe::tools
