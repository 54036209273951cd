// `troupe bench <workload>`: the benchmark command group of the troupe tool.
//
// Each workload is a subcommand backed by a library in bench/<workload>/ (today: `engine`, from
// bench/engine/, `ndarray`, from bench/ndarray/, `ops`, from bench/ops/, `io`, from bench/io/, `train`,
// from bench/train/, `kvstore-local` and `kvstore-dist`, from bench/kvstore/). To add one: link its library into the
// `troupe` target (tools/CMakeLists.txt), then add a Workload entry in BenchCommand's constructor with its
// options, description and examples.
//
// Thread-safety: none needed; used from main() only.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "bench/engine/engine_bench.h"
#include "bench/io/io_bench.h"
#include "bench/kvstore/kvstore_bench.h"
#include "bench/kvstore/kvstore_dist_bench.h"
#include "bench/ndarray/ndarray_bench.h"
#include "bench/ops/ops_bench.h"
#include "bench/train/train_bench.h"
#include "bench/train/train_dist_bench.h"

namespace CLI {
class App;
}

namespace troupe::tools {

class BenchCommand {
 public:
  // Adds the `bench` subcommand and its workloads to `root`.
  explicit BenchCommand(CLI::App* root);

  // True when the command line chose `troupe bench ...`.
  bool chosen() const;
  // Runs the chosen workload and returns the process exit status: the workload's own (0 ok, 1 a failed
  // in-run check), or 2 when no workload or an unknown one was named.
  int Run();

  // Names of the workloads, in help order.
  std::vector<std::string> WorkloadNames() const;

 private:
  struct Workload {
    std::string name;
    CLI::App* app = nullptr;
    std::function<int()> run;
  };

  CLI::App* app_ = nullptr;
  std::vector<Workload> workloads_;
  bench::EngineBenchOptions engine_options_;
  bench::NDArrayBenchOptions ndarray_options_;
  bench::OpsBenchOptions ops_options_;
  bench::IoBenchOptions io_options_;
  bench::TrainBenchOptions train_options_;
  bench::KVStoreBenchOptions kvstore_options_;
  bench::KVStoreDistBenchOptions kvstore_dist_options_;
  bench::TrainDistBenchOptions train_dist_options_;
};

}  // namespace troupe::tools
