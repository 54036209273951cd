// A child process for the multi-process benchmarks and tests (kvstore-dist; tests/kvstore's dist process
// test): started with fork/exec, its stdout on a pipe read line by line, its stdin on a pipe, and an exit
// status that can be waited for with a timeout (a pidfd, so no polling). The destructor kills (SIGKILL)
// and reaps a child still running, so nothing outlives its owner.
//
// Thread-safety: none; one thread uses an object.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace troupe::bench {

class ChildProcess {
 public:
  // Runs argv[0] (a path, or a name looked up in PATH) with argv; the environment is this process's with
  // `env` set on top. With `merge_stderr` the child's stderr goes to the same pipe as its stdout. With
  // `die_with_parent` the child gets SIGTERM when this process dies (even by SIGKILL; PR_SET_PDEATHSIG).
  ChildProcess(std::string name, const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
               bool merge_stderr = false, bool die_with_parent = false);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  const std::string& name() const { return name_; }
  // The next stdout line starting with `prefix` (earlier lines are skipped), or nullopt when none came
  // within timeout_ms or stdout ended.
  std::optional<std::string> ReadLine(const std::string& prefix, int timeout_ms);
  // Writes to the child's stdin; false when it could not be written.
  bool Write(const std::string& text);
  // Closes the child's stdin (it reads end of file).
  void CloseInput();
  void Signal(int sig);
  // For a caller that polls many children: the stdout pipe and the exit descriptor (a pidfd, readable once
  // the child has exited), and one read of what stdout has: complete lines are appended to `lines` (a last
  // partial line too once stdout has ended). Returns false once stdout has ended.
  int out_fd() const { return out_; }
  int exit_fd() const { return pidfd_; }
  int pid() const { return pid_; }
  bool ReadSome(std::vector<std::string>* lines);
  // The exit status (128 + signal when killed by one), or -1 while it still runs after timeout_ms.
  int Wait(int timeout_ms);

 private:
  std::string name_;
  int pid_ = -1;
  int out_ = -1, in_ = -1, pidfd_ = -1;
  int status_ = -1;  // -1 running
  std::string buf_;
};

// The path of `program` as exec would find it: itself when it has a slash, else the first executable
// PATH entry of that name; empty when there is none.
std::string FindProgram(const std::string& program);

// True once process `pid` is gone, or a zombie (one reparented to a PID 1 that does not reap stays one).
bool ProcessGone(int pid);

// The path of the running executable (/proc/self/exe), to start copies of it in other roles.
std::string SelfExe();

// A TCP connection to 127.0.0.1:port (blocking connect): its descriptor, or -1 (nothing is left open).
int ConnectLoopback(int port);

// A distributed KVStore cluster's scheduler and servers on loopback as child processes (copies of this
// executable, the roles through DMLC_ROLE), with a random cluster token, for `workers` workers that the
// caller starts with worker_env(). The scheduler and the servers end once every worker has left.
class ChildCluster {
 public:
  // Returns once the scheduler has printed its port (started()), or after timeout_ms without it.
  ChildCluster(int servers, int workers, int timeout_ms);
  ~ChildCluster();  // kills what still runs (ChildProcess)
  bool started() const { return started_; }
  // DMLC_ROLE=worker and the cluster's DMLC_* variables and token.
  const std::map<std::string, std::string>& worker_env() const { return worker_env_; }
  // Waits up to timeout_ms for each of the scheduler and the servers; appends "<role> exited N" (or "did not
  // start") to *failures for each that did not end with status 0.
  void Wait(int timeout_ms, std::vector<std::string>* failures);

 private:
  bool started_ = false;
  std::map<std::string, std::string> worker_env_;
  std::unique_ptr<ChildProcess> scheduler_;
  std::vector<std::unique_ptr<ChildProcess>> servers_;
};

// 32 random hex digits (a cluster token).
std::string RandomHexToken();

// The worker processes of a multi-process benchmark report one line, "RESULT <json>".
// Worker side: prints `result` with result["failures"] = failures; returns the worker's exit status (0 when
// there are no failures, else 1).
int PrintWorkerResult(nlohmann::ordered_json result, const std::vector<std::string>& failures);
// Coordinator side: each worker's result in order (a worker that printed none is left out), with every
// worker's failures, a missing result and a non-zero exit status appended to *failures.
std::vector<nlohmann::ordered_json> CollectWorkerResults(const std::vector<std::unique_ptr<ChildProcess>>& workers,
                                                 int timeout_ms, std::vector<std::string>* failures);

}  // namespace troupe::bench
