// `troupe launch`: starts a distributed KVStore cluster — the scheduler, the servers and the workers (a
// command of the user's) — with the DMLC_* variables and a cluster token, and watches it: every line the
// processes print is shown prefixed with their role and index; when one fails the others are stopped and a
// one-line summary per process is printed; Ctrl-C (SIGINT or SIGTERM to launch) stops them all.
//
// Launchers: `local` (processes on this machine). ssh, mpi and slurm are issue 9's remaining work and
// are refused with a clear message until then.
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
  std::vector<std::string> command;  // the worker command
};

// Runs the job; returns launch's exit status: 0 when every process exited 0, 1 when one failed, 130 after
// SIGINT/SIGTERM, 2 on bad options.
int RunLaunch(const LaunchOptions& options);

class LaunchCommand {
 public:
  explicit LaunchCommand(CLI::App* root);
  bool chosen() const;
  int Run() { return RunLaunch(options_); }

 private:
  CLI::App* app_ = nullptr;
  LaunchOptions options_;
};

}  // namespace troupe::tools
