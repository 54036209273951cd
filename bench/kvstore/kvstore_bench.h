// `troupe bench kvstore-local`: parameter synchronisation across the CPU devices of one machine through a
// "local" KVStore, against the memory bandwidth it cannot beat.
//
// push_pull: per device count k (--devices, default 2 and 4; contexts cpu(0) .. cpu(k-1)), a call is one
// round of MXNet's tools/bandwidth/measure.py on a model given as a list of key sizes: for every key i (in
// order, priority -i) Push of the key's k gradients (one per device) then Pull into k weight arrays (one
// per device), and the call ends by waiting for every weight. The model is the trainable parameters of
// ResNet-50 v1 (MXNet Gluon model zoo, 193 arrays) scaled to --model-mib MiB (64 by default).
//
// Bytes moved per call = model bytes x k x 2 (every device pushes the whole model and pulls the whole
// model); GiB/s = that / 2^30 / seconds. MXNet's own figure (measure.py: "GB/sec per gpu" = model bytes x
// 2 x (k-1) / k / seconds / 1e9) is reported beside it.
//
// The anchor (the in-run bound): std::memcpy of the same number of bytes (bytes moved) between two
// touched buffers, as bench/ndarray's memcpy anchor, split into equal parts over as many threads as the
// engine has workers for the k devices (RuntimeConfig::cpu_workers per device x k, or --anchor-threads).
// The ratio is anchor time / push+pull time (1 = the store moves its bytes as fast as memcpy moves them);
// the target is >= 0.5.
//
// In-run checks: every pulled array has its key's size; for the first, middle and last key every element
// of every device's pulled weight equals the sum of the pushed gradients (integer-valued floats, so the sum
// is exact; computed independently on the host); for every other key the first and last element do too.
// The memcpy destination equals its source.
//
// mlp (the second figure): training images/s of the MLP (graph/models.h) through a Module on
// cpu(0), cpu(1) (data-parallel, the parameters synchronised through a "local" KVStore) against the same
// Module on cpu(0) alone, each alternated with the other in the same run. A call is one training step on a
// batch of Fashion-MNIST (--batch-size, preloaded from the t10k files in --mnist-dir): Forward(true),
// Backward, Update (SGD, momentum 0.9), then the timed run waits for the engine. The ratio is the speedup
// (1-device step time / 2-device step time). Checks: the outputs are probabilities (finite, rows sum to
// 1) and, except with --quick, both modules' training accuracy over the preloaded batches after the timed
// steps is above 0.5.
#pragma once

#include <string>
#include <vector>

#include "bench/common/registry.h"

namespace troupe::bench {

struct KVStoreBenchOptions {
  std::string json_path;  // required
  bool quick = false;     // small model (kKVStoreQuickModelMiB), one repetition: a smoke run for CTest
  int repeat = 0;         // timed runs per figure; 0: kKVStoreDefaultRepeat (1 with quick)
  std::vector<int> devices = {2, 4};
  double model_mib = 0;    // 0: kKVStoreDefaultModelMiB (kKVStoreQuickModelMiB with quick)
  int anchor_threads = 0;  // 0: the engine's workers for the devices (cpu_workers x devices)
  std::vector<std::string> workloads = {"push_pull", "mlp"};
  int batch_size = 128;                                         // mlp
  std::string mnist_dir = "/usr/share/datasets/fashion-mnist";  // mlp: the t10k-* .gz files
};

inline constexpr int kKVStoreDefaultRepeat = 5;
inline constexpr double kKVStoreDefaultModelMiB = 64;
inline constexpr double kKVStoreQuickModelMiB = 2;

const std::vector<std::string>& KVStoreBenchWorkloads();
int RunKVStoreBench(const KVStoreBenchOptions& options);

// `troupe bench kvstore-local`: the name, options, help and run function above, for the bench registry
// (bench/benchmarks.h).
Benchmark KVStoreLocalBenchmark();

}  // namespace troupe::bench
