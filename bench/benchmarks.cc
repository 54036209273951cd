// The list of the workloads of `troupe bench`: see bench/benchmarks.h.
#include "bench/benchmarks.h"

#include "bench/engine/engine_bench.h"
#include "bench/io/io_bench.h"
#include "bench/kvstore/kvstore_bench.h"
#include "bench/kvstore/kvstore_dist_bench.h"
#include "bench/ndarray/ndarray_bench.h"
#include "bench/nn/nn_bench.h"
#include "bench/ops/ops_bench.h"
#include "bench/train/train_bench.h"
#include "bench/train/train_dist_bench.h"

namespace troupe::bench {

std::vector<Benchmark> AllBenchmarks() {
  return {EngineBenchmark(), NDArrayBenchmark(),      OpsBenchmark(),         IoBenchmark(),
          TrainBenchmark(),  KVStoreLocalBenchmark(), KVStoreDistBenchmark(), TrainDistBenchmark(),
          NNBenchmark()};
}

}  // namespace troupe::bench
