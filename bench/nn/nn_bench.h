// The module API benchmark behind `troupe bench nn`: what the imperative path costs per recorded operator.
//
// The network: `layers` Dense(width, relu) blocks then Dense(classes) and softmax cross-entropy, on a batch of
// `batch` rows of `width` features: tiny arrays, so that a step's time is the per-operator overhead
// (creating the operator, inferring shapes, pushing to the engine, recording the node, and the backward pass
// through it), not arithmetic. One call: record the forward pass and the loss, autograd::Backward, and wait for
// the engine. Two figures, interleaved: the block run operator by operator ("imperative": 2 * layers + 2
// operators for the Dense blocks, 4 for the loss, each recorded) and hybridized (block and loss as CachedOps).
// Derived: microseconds per recorded operator = imperative step / recorded operators. The anchor is MXNet
// 1.9.1's Gluon on the same network, not hybridized (bench/nn/mxnet/imperative_overhead.py, run separately:
// MXNet is never a dependency of the build), which prints the same figure.
//
// Check: the two figures' losses agree (the same parameters) within 1e-5, and the imperative gradient of the
// first layer's weight equals the hybridized one.
//
// Thread-safety: RunNNBench is called once at a time (the process-wide engine).
#pragma once

#include <string>

#include "bench/common/registry.h"

namespace troupe::bench {

struct NNBenchOptions {
  std::string json_path;  // required
  bool quick = false;     // one short run: a smoke run for CTest
  int repeat = 0;         // timed runs per figure; 0: kNNDefaultRepeat (1 with quick)
  int layers = 20;
  int width = 16;
  int batch = 4;
};

inline constexpr int kNNDefaultRepeat = 5;

int RunNNBench(const NNBenchOptions& options);
Benchmark NNBenchmark();

}  // namespace troupe::bench
