// The clusters and result lines of the multi-process benchmarks: see bench/common/multi_process.h.
#include "bench/common/multi_process.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "base/error.h"
#include "kvstore/dist.h"

namespace troupe::bench {

void DeclareNetOptions(NetOptions* o, BenchOptionList* options) {
  options
      ->Add("--net", &o->modes,
            "The wire between the processes: loopback (127.0.0.1), netns (each process in a network namespace "
            "of its own, veth pairs to a bridge, shaped by tc; needs root; made and removed by the run), or "
            "both (loopback,netns: both in one command)")
      .Delimiter(',')
      .Choices({"loopback", "netns"})
      .TypeName("LIST")
      .ShowDefault();
  options
      ->Add("--net-rate-gbit", &o->shaping.rate_gbit,
            "netns: the rate of each process's link per direction, Gbit/s (tbf; 0 = unshaped)")
      .Range(0.0, 400.0)
      .TypeName("G")
      .ShowDefault();
  options
      ->Add("--net-latency-us", &o->shaping.latency_us,
            "netns: one-way latency added to what each process sends, us (netem; where the kernel has no netem "
            "the run says so and goes on with rate shaping only; 0 = none)")
      .Range(0.0, 1e6)
      .TypeName("US")
      .ShowDefault();
}

std::string NetUnavailable(const NetOptions& o) {
  if (std::find(o.modes.begin(), o.modes.end(), "netns") == o.modes.end()) return {};
  return NetnsWire::Unavailable();
}

ChildCluster::ChildCluster(int servers, int workers, int timeout_ms, const NetnsWire* wire)
    : servers_count_(servers), wire_(wire) {
  if (wire != nullptr && wire->nodes() < ClusterNodes(servers, workers)) {
    throw Error("a cluster of " + std::to_string(servers) + " servers and " + std::to_string(workers) +
                " workers needs " + std::to_string(ClusterNodes(servers, workers)) + " nodes on the wire");
  }
  const std::string root = wire != nullptr ? wire->Address(0) : "127.0.0.1";
  std::map<std::string, std::string> env{{"DMLC_PS_ROOT_URI", root},
                                         {"DMLC_NUM_SERVER", std::to_string(servers)},
                                         {"DMLC_NUM_WORKER", std::to_string(workers)},
                                         {"TROUPE_CLUSTER_TOKEN", NewClusterToken()}};
  // The servers and workers share this machine's cores, as under `troupe launch` (docs/settings.md).
  if (std::getenv("TROUPE_HOST_PROCESSES") == nullptr) env["TROUPE_HOST_PROCESSES"] = std::to_string(servers + workers);
  auto start = [&](const std::string& name, int node, std::map<std::string, std::string> e) {
    std::vector<std::string> argv{proc::SelfExe()};
    if (wire != nullptr) {
      e["DMLC_NODE_HOST"] = wire->Address(node);
      argv = wire->Wrap(node, argv);
    }
    return std::make_unique<proc::Process>(name, argv, e);
  };
  auto e = env;
  e["DMLC_ROLE"] = "scheduler";
  e["DMLC_PS_ROOT_PORT"] = "0";
  scheduler_ = start("scheduler", 0, e);
  const auto line = scheduler_->ReadLine("troupe scheduler: listening on", timeout_ms);
  if (!line) return;
  env["DMLC_PS_ROOT_PORT"] = line->substr(line->rfind(':') + 1);
  e = env;
  e["DMLC_ROLE"] = "server";
  for (int s = 0; s < servers; ++s) servers_.push_back(start("server", 1 + s, e));
  worker_env_ = env;
  worker_env_["DMLC_ROLE"] = "worker";
  started_ = true;
}

std::unique_ptr<proc::Process> ChildCluster::StartWorker(int k, const std::vector<std::string>& argv) const {
  if (wire_ == nullptr) return std::make_unique<proc::Process>("worker", argv, worker_env_);
  const int node = 1 + servers_count_ + k;
  auto env = worker_env_;
  env["DMLC_NODE_HOST"] = wire_->Address(node);
  return std::make_unique<proc::Process>("worker", wire_->Wrap(node, argv), env);
}

ChildCluster::~ChildCluster() = default;

void ChildCluster::Wait(int timeout_ms, std::vector<std::string>* failures) {
  if (!started_) {
    failures->push_back("the scheduler did not start");
    return;
  }
  for (auto& s : servers_) {
    if (const int st = s->Wait(timeout_ms); st != 0) failures->push_back("a server exited " + std::to_string(st));
  }
  if (const int st = scheduler_->Wait(timeout_ms); st != 0) {
    failures->push_back("the scheduler exited " + std::to_string(st));
  }
}

int PrintWorkerResult(nlohmann::ordered_json result, const std::vector<std::string>& failures) {
  result["failures"] = failures;
  std::printf("RESULT %s\n", result.dump().c_str());
  std::fflush(stdout);
  return failures.empty() ? 0 : 1;
}

std::vector<nlohmann::ordered_json> CollectWorkerResults(const std::vector<std::unique_ptr<proc::Process>>& workers,
                                                         int timeout_ms, std::vector<std::string>* failures) {
  std::vector<nlohmann::ordered_json> results;
  for (const auto& w : workers) {
    const auto line = w->ReadLine("RESULT ", timeout_ms);
    if (!line) {
      failures->push_back("a worker printed no result");
    } else {
      results.push_back(nlohmann::ordered_json::parse(line->substr(7)));
      for (const auto& f : results.back()["failures"]) failures->push_back(f.get<std::string>());
    }
    if (const int st = w->Wait(timeout_ms); st != 0) failures->push_back("a worker exited " + std::to_string(st));
  }
  return results;
}

}  // namespace troupe::bench
