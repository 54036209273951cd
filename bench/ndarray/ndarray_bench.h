// The NDArray benchmark behind `troupe bench ndarray` (DESIGN.md §5 "Benchmarks").
//
// It measures the NDArray layer against the plain library calls it is built on, each anchor measured in the
// same run, on the same shapes, interleaved with the NDArray figure it is compared with:
//   dot    C = Dot(A, B) on float32 n x n CPU arrays (push + WaitToRead per call), and Dot into an existing
//          array, against a direct cblas_sgemm (CblasRowMajor, NoTrans, NoTrans) on std::vector buffers,
//          called on the benchmark's thread with the same OpenBLAS thread count as the engine's workers use;
//          derived: GFLOP/s (2 n^3 / t). Check: the NDArray result equals the anchor's (relative error
//          < 1e-4) and a few entries agree with a double-precision reference.
//   add    C = A + B and A += B on float32 CPU arrays (push + WaitToRead per call) against memcpy of the same
//          operand size; derived: GB/s of bytes touched (3 x size for the add, 2 x size for memcpy).
//          Check: every value of C (and of the in-place A) is what the host computes.
//   alloc  Storage::Alloc + Free of one size, repeated, on an independent Storage (exact and round pools),
//          against malloc + free of the same size, each with and without touching the memory (one byte per
//          4 KiB page); and, after every size was measured so (its leftovers change what malloc does),
//          constructing + destroying an NDArray of that size (engine variable and deferred free included;
//          at most 16384 per run, WaitForAll at the end). Derived: ns per alloc/free pair. Check: the pool
//          served every timed allocation from its cache (hits == allocations - 1, the one miss being the
//          untimed warm-up), and no NDArray block is left in use once the engine is idle.
// Every measurement runs untimed first (warm-up, which also sizes the runs to last --min-time seconds or at
// least 3 calls), then --repeat timed runs; the median and the best run are reported. A run that takes 5x
// longer than its warm-up said it would is cut short (after at least 3 calls).
//
// The result goes to one pretty-printed JSON file and a table on stdout; progress goes to stderr.
//
// Thread-safety: RunNDArrayBench is meant to be called once at a time (it uses the process-wide engine and
// storage, and times the BLAS library that the engine's workers share).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/common/registry.h"

namespace troupe::bench {

struct NDArrayBenchOptions {
  // Where the JSON goes (required).
  std::string json_path;
  // Tiny sizes, one repetition, short runs: a smoke run for CTest.
  bool quick = false;
  // Timed repetitions per measurement; 0 picks the default (kNDArrayDefaultRepeat, or 1 with `quick`).
  int repeat = 0;
  // Which workloads to run: any of NDArrayBenchWorkloads().
  std::vector<std::string> workloads = {"dot", "add", "alloc"};
  // dot: matrix sizes n (n x n times n x n); empty picks {256, 1024} ({64} with `quick`).
  std::vector<int> sizes;
  // add: bytes per operand; empty picks 1 MiB, 16 MiB, 64 MiB (64 KiB with `quick`). Multiples of 4.
  std::vector<std::int64_t> add_bytes;
  // alloc: block sizes in bytes; empty picks 4 KiB, 64 KiB, 1 MiB, 16 MiB, 64 MiB (4 KiB, 1 MiB with `quick`).
  std::vector<std::int64_t> alloc_bytes;
  // Seconds one timed run should last at least (it also does at least 3 calls); 0 picks 0.2 (0.005 with
  // `quick`).
  double min_time_s = 0;
};

inline constexpr int kNDArrayDefaultRepeat = 7;
inline constexpr double kNDArrayDefaultMinTime = 0.2;

// The workloads, in the order they run: dot, add, alloc.
const std::vector<std::string>& NDArrayBenchWorkloads();

// Runs the benchmark. Returns the process exit status: 0 when every in-run check passed, 1 when one failed
// (the JSON then holds "ok": false and the failures) or the JSON could not be written, 2 on bad options.
// Targets that are not met do not change the status: they are reported, never asserted.
int RunNDArrayBench(const NDArrayBenchOptions& options);

// `troupe bench ndarray`: the name, options, help and run function above, for the bench registry
// (bench/benchmarks.h).
Benchmark NDArrayBenchmark();

}  // namespace troupe::bench
