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

#include "bench/common/netns.h"
#include "bench/common/registry.h"
#include "proc/process.h"

namespace troupe::bench {

// The wires a multi-process benchmark runs its clusters over: --net (loopback, netns or both, in one
// command), --net-rate-gbit and --net-latency-us (the shaping of netns; bench/common/netns.h).
struct NetOptions {
  std::vector<std::string> modes = {"loopback"};
  NetShaping shaping;
};
void DeclareNetOptions(NetOptions* o, BenchOptionList* options);
// "netns" requested but namespaces cannot be made here: why (for a usage error before anything runs); else
// empty.
std::string NetUnavailable(const NetOptions& o);

// The nodes a cluster of `servers` servers and `workers` workers takes on a NetnsWire: the scheduler is node
// 0, server s node 1 + s, worker k node 1 + servers + k.
inline int ClusterNodes(int servers, int workers) { return 1 + servers + workers; }

// A distributed KVStore cluster's scheduler and servers as child processes (copies of this executable, the
// roles through DMLC_ROLE), with a random cluster token, for `workers` workers that the caller starts with
// StartWorker. On loopback (wire null) every node listens on 127.0.0.1; on a NetnsWire (of at least
// ClusterNodes(servers, workers) nodes) each process runs in its node's namespace and listens on and
// announces that node's address (DMLC_PS_ROOT_URI, DMLC_NODE_HOST). The scheduler and the servers end once
// every worker has left.
class ChildCluster {
 public:
  // Returns once the scheduler has printed its port (started()), or after timeout_ms without it. Throws
  // troupe::Error when a process cannot be started.
  ChildCluster(int servers, int workers, int timeout_ms, const NetnsWire* wire = nullptr);
  ~ChildCluster();  // kills what still runs (proc::Process)
  bool started() const { return started_; }
  // Starts worker k (0-based) as `argv` with DMLC_ROLE=worker and the cluster's DMLC_* variables and token,
  // in its namespace on a wire.
  std::unique_ptr<proc::Process> StartWorker(int k, const std::vector<std::string>& argv) const;
  // Waits up to timeout_ms for each of the scheduler and the servers; appends "<role> exited N" (or "did not
  // start") to *failures for each that did not end with status 0.
  void Wait(int timeout_ms, std::vector<std::string>* failures);

 private:
  bool started_ = false;
  int servers_count_ = 0;
  const NetnsWire* wire_ = nullptr;
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
