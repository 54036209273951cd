// The engine benchmark behind `troupe bench engine` (DESIGN.md §5 "Benchmarks", §7 "Performance notes").
//
// It measures the dependency engine on four workloads, each with an untimed warm-up run of the same size,
// timed repetitions, and an in-run check that every function ran, exactly once and in an order the engine's
// rule allows:
//   (a) chain          N no-op functions writing one variable (PushSync; and one NewOperator pushed N times)
//   (b) independent    N no-op functions, each writing one of 1024 variables (and a variant with no variables)
//   (c) reader_writer  one writer then K readers of one variable, repeated
//   (d) random_mixed   N functions reading/writing 1-4 of 100 variables, checked against a sequential model
// on the actor engine (for every cpu_workers x dependency_shards combination asked for) and on the naive
// engine. In the same run it measures the anchor: oneTBB flow graph (and task_group) on (a) and (b), with TBB
// limited to the same number of threads as the actor engine's workers.
//
// The result goes to one pretty-printed JSON file and a table on stdout; progress goes to stderr.
//
// Thread-safety: RunEngineBench is meant to be called once at a time (it owns the engines it creates and
// changes TBB's global parallelism limit while it runs).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/common/registry.h"

namespace troupe::bench {

struct EngineBenchOptions {
  // Where the JSON goes (required).
  std::string json_path;
  // Functions per workload run; 0 picks the default (kDefaultFunctions, or kQuickFunctions with `quick`).
  std::int64_t functions = 0;
  // RuntimeConfig::cpu_workers values to sweep (the actor engine); TBB runs once per value.
  std::vector<int> workers = {1, 2};
  // RuntimeConfig::dependency_shards values to sweep (the actor engine).
  std::vector<int> shards = {1};
  // Readers per writer in (c).
  int readers = 8;
  // Timed repetitions per measurement; 0 picks the default (kDefaultRepeat, or 1 with `quick`).
  int repeat = 0;
  // Tiny sizes: a smoke run for CTest.
  bool quick = false;
  // Seed of (d)'s random workload; 0 draws one (printed and written to the JSON).
  std::uint64_t seed = 0;
  // Which engines/anchors to run: any of "actor", "naive", "tbb".
  std::vector<std::string> engines = {"actor", "naive", "tbb"};
  // Which workload groups to run: any of EngineBenchWorkloadGroups().
  std::vector<std::string> workloads = {"chain", "independent", "reader_writer", "random_mixed"};
  // A single run (warm-up or repetition) that takes longer than this is reported as hung: the JSON is
  // written with "ok": false and the process exits with status 3. 0 disables the watchdog.
  double run_timeout_s = 300;
  // Records every function's begin/end (Engine::SetProfiling, what the profiler does) during the runs; the
  // records are dropped after each run, outside the timed part. Compare with a run without it for the
  // profiler's overhead.
  bool profile = false;
};

inline constexpr std::int64_t kDefaultFunctions = 200000;
inline constexpr std::int64_t kQuickFunctions = 2000;
inline constexpr int kDefaultRepeat = 5;

// The workload groups, in the order they run: chain, independent, reader_writer, random_mixed.
const std::vector<std::string>& EngineBenchWorkloadGroups();

// Runs the benchmark. Returns the process exit status: 0 when every in-run check passed, 1 when one failed
// (the JSON then holds "ok": false and the failures), 2 on bad options. Targets that are not met do not
// change the status: they are reported, never asserted.
int RunEngineBench(const EngineBenchOptions& options);

// `troupe bench engine`: the name, options, help and run function above, for the bench registry
// (bench/benchmarks.h).
Benchmark EngineBenchmark();

}  // namespace troupe::bench
