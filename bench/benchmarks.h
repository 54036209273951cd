// Every workload of `troupe bench`, in the order `troupe bench --help` lists them. The list is explicit
// (bench/benchmarks.cc calls each workload's XxxBenchmark()) rather than filled by static registrars: a
// registrar in a static library is dropped by the linker unless something references its object file,
// and the order of static initialisers across files is unspecified, while the help order is not.
// To add a workload: a folder bench/<workload>/ with its library and a `Benchmark XxxBenchmark()` that
// declares it (bench/common/registry.h), linked into troupe_bench (bench/CMakeLists.txt) and added to the
// list in bench/benchmarks.cc.
//
// Thread-safety: AllBenchmarks() may be called from any thread; each call builds a new list.
#pragma once

#include <vector>

#include "bench/common/registry.h"

namespace troupe::bench {

std::vector<Benchmark> AllBenchmarks();

}  // namespace troupe::bench
