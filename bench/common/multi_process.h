// What the multi-process benchmarks (kvstore-dist, train-dist) share on top of troupe::proc: a KVStore
// cluster's scheduler and servers as copies of this executable, and the "RESULT <json>" line each worker
// process reports to the coordinating process.
//
// Thread-safety: none; one thread uses an object. The free functions keep no state.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "proc/process.h"

namespace troupe::bench {

// A distributed KVStore cluster's scheduler and servers on loopback as child processes (copies of this
// executable, the roles through DMLC_ROLE), with a random cluster token, for `workers` workers that the
// caller starts with worker_env(). The scheduler and the servers end once every worker has left.
class ChildCluster {
 public:
  // Returns once the scheduler has printed its port (started()), or after timeout_ms without it. Throws
  // troupe::Error when a process cannot be started.
  ChildCluster(int servers, int workers, int timeout_ms);
  ~ChildCluster();  // kills what still runs (proc::Process)
  bool started() const { return started_; }
  // DMLC_ROLE=worker and the cluster's DMLC_* variables and token.
  const std::map<std::string, std::string>& worker_env() const { return worker_env_; }
  // Waits up to timeout_ms for each of the scheduler and the servers; appends "<role> exited N" (or "did not
  // start") to *failures for each that did not end with status 0.
  void Wait(int timeout_ms, std::vector<std::string>* failures);

 private:
  bool started_ = false;
  std::map<std::string, std::string> worker_env_;
  std::unique_ptr<proc::Process> scheduler_;
  std::vector<std::unique_ptr<proc::Process>> servers_;
};

// The worker processes of a multi-process benchmark report one line, "RESULT <json>".
// Worker side: prints `result` with result["failures"] = failures; returns the worker's exit status (0 when
// there are no failures, else 1).
int PrintWorkerResult(nlohmann::ordered_json result, const std::vector<std::string>& failures);
// Coordinator side: each worker's result in order (a worker that printed none is left out), with every
// worker's failures, a missing result and a non-zero exit status appended to *failures.
std::vector<nlohmann::ordered_json> CollectWorkerResults(const std::vector<std::unique_ptr<proc::Process>>& workers,
                                                         int timeout_ms, std::vector<std::string>* failures);

}  // namespace troupe::bench
