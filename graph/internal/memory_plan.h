// The executor's memory planner (internal to graph/): assigns storage to the intermediate arrays of an
// execution sequence.
//
// The caller describes the run as steps in push order (forward nodes, then the backward steps) and, per
// step, the entries it reads and writes. Each entry is an array of a known byte size and type. The planner
// walks the steps once:
//   - an entry gets storage at its first write; an output may instead take the storage of an input the
//     step names as an in-place candidate, when that input is planned, is read by this step once and no
//     later step uses it, and has the same size and type;
//   - otherwise it takes the best-fitting released storage of its type (the smallest one at least its
//     size), else new storage;
//   - storage is released after the last step that reads or writes the entry holding it.
// Dedicated entries (the symbol's outputs, which users read after the run) get storage of their own that is
// never released, reused or taken in place. External entries (arguments, auxiliary states, user gradients,
// head gradients) are not planned.
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "graph/executor.h"

namespace troupe {
namespace graph {

struct PlanEntry {
  enum Kind { kExternal, kPlanned, kDedicated };
  Kind kind = kPlanned;
  std::int64_t bytes = 0;
  int dtype = 0;
};

struct PlanStep {
  std::vector<std::uint32_t> reads;   // entries read (an entry read twice is listed twice)
  std::vector<std::uint32_t> writes;  // entries written (kWriteTo / kAddTo)
  // (read entry, written entry): the written entry may share the read entry's memory.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> inplace;
};

struct MemoryPlan {
  std::vector<int> storage;                 // per entry: storage id, -1 for external (or never written)
  std::vector<bool> inplace;                // per entry: took an input's storage in place
  std::vector<std::int64_t> storage_bytes;  // per storage id: the largest entry assigned to it
  std::vector<int> storage_dtype;           // per storage id
  MemoryPlanStats stats;
};

// plan == false: every planned entry gets storage of its own (no reuse, no in-place).
MemoryPlan PlanMemory(const std::vector<PlanEntry>& entries, const std::vector<PlanStep>& steps, bool plan);

}  // namespace graph
}  // namespace troupe
