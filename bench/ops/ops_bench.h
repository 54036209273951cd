// The operator benchmark behind `troupe bench ops` (DESIGN.md §5 "Benchmarks").
//
// It measures the dense-layer operators of the op library, run the way the executor runs them (through an
// OperatorRunner, pushed to the engine), against the BLAS products they are made of, each anchor measured in
// the same run, on the same shapes, interleaved with the operator figure it is compared with:
//   fc    FullyConnected forward + backward on float32 CPU arrays: per call, Forward (is_train) then Backward
//         with kWriteTo for the data, weight and bias gradients, then WaitToRead on the output and the three
//         gradients. Anchor: the three sgemm calls of the same shapes (Y = X W^T; dX = dY W; dW = dY^T X;
//         row-major) on std::vector buffers, in the library the operator's products use (oneDNN's dnnl_sgemm,
//         or OpenBLAS with TROUPE_DNNL=0). Shapes (batch, in, out): (64, 784, 128), (128, 1024, 1024),
//         (256, 4096, 1024). Derived: GFLOP/s (6 x batch x in x out per forward + backward) and
//         ratio = anchor time / operator time (1 = the operator adds nothing; the bias add and the bias
//         gradient are in the operator's time only). Check: the output (anchor + bias) and the gradients
//         (the anchor's, and the column sums of dY for the bias) agree with the operator's, relative error
//         < 1e-4.
//   conv  Convolution (2-D, NCHW, stride 1) forward + backward (data, weight and bias gradients, kWriteTo)
//         on float32 CPU arrays, per call as for fc, for a LeNet-sized layer (batch 64, 1 -> 20 channels,
//         28 x 28, kernel 5) and ResNet-18's 3x3 layers (batch 32; 64 channels at 56 x 56, 128 at 28 x 28,
//         256 at 14 x 14, 512 at 7 x 7; pad 1). Anchors: (1) the "sgemm bound": the sgemm calls (as for fc)
//         of its im2col shapes alone, per image and group forward (F x CKK)(CKK x HW), backward-data
//         (CKK x F)(F x HW) and backward-weight (F x HW)(HW x CKK), on std::vector buffers (no im2col,
//         col2im, bias or engine); (2) in a build with oneDNN (and TROUPE_DNNL not 0), the raw oneDNN
//         primitives the operator uses (same algorithm, layouts oneDNN picks), on the NCHW buffers with the
//         reorders their layouts need ("dnnl_raw", the target's anchor: >= 0.95), and on buffers already in
//         their layouts ("dnnl_blocked": what a network that stays blocked could reach). Derived: GFLOP/s
//         (6 x batch x F x CKK x HW per call, every figure) and ratios = anchor time / operator time.
//         Checks: sampled entries of the output, the data gradient and the weight gradient against a direct
//         convolution in double (relative to the sum of the terms' magnitudes, < 1e-4), and the bias
//         gradient against the sums of dY.
//   pool  Pooling forward on float32 CPU arrays (the part of the operator that runs through oneDNN; its
//         backward is troupe's own loop): LeNet's 2x2 max pooling (64 x 20 x 24 x 24), ResNet-18's stem max
//         pooling (3x3, stride 2, pad 1; batch 32 x 64 x 112 x 112) and global average (32 x 512 x 7 x 7).
//         Anchor (a build with oneDNN, TROUPE_DNNL not 0): the raw pooling primitive the operator creates,
//         on the same NCHW buffers. Derived: GB/s (the input read and the output written once) and ratio =
//         anchor time / operator time (target >= 0.95). Checks: every output against its window in double,
//         and equal to the primitive's.
// Every anchor runs one engine function per call on the operator's worker (as the operator: one push and one
// WaitForVar per call), so that both use the same OpenMP team: a second thread's team would make libgomp's
// idle threads sleep after a short spin, and every small parallel region would then wait for wake-ups.
// With --ctx gpu the same layers run on Context::GPU(0) (cuBLAS / cuDNN inside the operators) and only their
// GFLOP/s is reported (no anchor, no ratio); the checks are the same, on the results copied back.
// Every measurement runs untimed first (warm-up, which also sizes the runs to last --min-time seconds or at
// least 3 calls), then --repeat timed runs; the median and the best run are reported (bench/common/measure.h).
// Targets, reported and never asserted: fc ratio >= 0.9, conv ratio >= 0.7 and conv >= 0.95 x dnnl_raw for
// every shape.
//
// The result goes to one pretty-printed JSON file and a table on stdout; progress goes to stderr. The JSON
// also records how busy the machine was (load average at start and end, and the CPU seconds other processes
// used during the run): on a shared machine the Convolution ratios change with it, since the products use
// every BLAS thread and im2col / col2im only one.
//
// Thread-safety: RunOpsBench is meant to be called once at a time (it uses the process-wide engine and
// storage, and times the BLAS library that the engine's workers share).
#pragma once

#include <string>
#include <vector>

#include "bench/common/registry.h"

namespace troupe::bench {

struct OpsBenchOptions {
  // Where the JSON goes (required).
  std::string json_path;
  // Tiny layers, one repetition, short runs: a smoke run for CTest.
  bool quick = false;
  // Timed repetitions per measurement; 0 picks the default (kOpsDefaultRepeat, or 1 with `quick`).
  int repeat = 0;
  // Which workloads to run: any of OpsBenchWorkloads().
  std::vector<std::string> workloads = {"fc", "conv", "pool"};
  // Seconds one timed run should last at least (it also does at least 3 calls); 0 picks 0.2 (0.005 with
  // `quick`).
  double min_time_s = 0;
  // "cpu" (operators against their sgemm anchors) or "gpu" (the operators on GPU 0, GFLOP/s only; fails
  // with a message when the machine has no CUDA device).
  std::string ctx = "cpu";
  // conv: the batch of the ResNet-sized layer; 0 picks 32 (2 with `quick`).
  int resnet_batch = 0;
};

inline constexpr int kOpsDefaultRepeat = 7;
inline constexpr double kOpsDefaultMinTime = 0.2;
inline constexpr int kOpsDefaultResNetBatch = 32;

// The workloads, in the order they run: fc, conv, pool.
const std::vector<std::string>& OpsBenchWorkloads();

// Runs the benchmark. Returns the process exit status: 0 when every in-run check passed, 1 when one failed
// (the JSON then holds "ok": false and the failures) or the JSON could not be written, 2 on bad options
// (and for --ctx gpu on a machine without a CUDA device). Targets that are not met do not change the
// status: they are reported, never asserted.
int RunOpsBench(const OpsBenchOptions& options);

// `troupe bench ops`: the name, options, help and run function above, for the bench registry
// (bench/benchmarks.h).
Benchmark OpsBenchmark();

}  // namespace troupe::bench
