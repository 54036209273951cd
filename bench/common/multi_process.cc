// The clusters and result lines of the multi-process benchmarks: see bench/common/multi_process.h.
#include "bench/common/multi_process.h"

#include <cstdio>
#include <utility>

#include "kvstore/dist.h"

namespace troupe::bench {

ChildCluster::ChildCluster(int servers, int workers, int timeout_ms) {
  std::map<std::string, std::string> env{{"DMLC_PS_ROOT_URI", "127.0.0.1"},
                                         {"DMLC_NUM_SERVER", std::to_string(servers)},
                                         {"DMLC_NUM_WORKER", std::to_string(workers)},
                                         {"TROUPE_CLUSTER_TOKEN", NewClusterToken()}};
  auto e = env;
  e["DMLC_ROLE"] = "scheduler";
  e["DMLC_PS_ROOT_PORT"] = "0";
  const std::string self = proc::SelfExe();
  scheduler_ = std::make_unique<proc::Process>("scheduler", std::vector<std::string>{self}, e);
  const auto line = scheduler_->ReadLine("troupe scheduler: listening on", timeout_ms);
  if (!line) return;
  env["DMLC_PS_ROOT_PORT"] = line->substr(line->rfind(':') + 1);
  e = env;
  e["DMLC_ROLE"] = "server";
  for (int s = 0; s < servers; ++s) {
    servers_.push_back(std::make_unique<proc::Process>("server", std::vector<std::string>{self}, e));
  }
  worker_env_ = env;
  worker_env_["DMLC_ROLE"] = "worker";
  started_ = true;
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
