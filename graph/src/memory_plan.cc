// The executor's memory planner (graph/internal/memory_plan.h).
#include "graph/internal/memory_plan.h"

#include <algorithm>
#include <map>
#include <string>

#include "base/error.h"

namespace troupe {
namespace graph {

MemoryPlan PlanMemory(const std::vector<PlanEntry>& entries, const std::vector<PlanStep>& steps, bool plan) {
  const std::size_t n = entries.size();
  MemoryPlan out;
  out.storage.assign(n, -1);
  out.inplace.assign(n, false);

  auto check_id = [&](std::uint32_t e) {
    if (e >= n) throw Error("memory planner: entry " + std::to_string(e) + " out of range");
  };
  // Last step that uses each entry (-1: never used).
  std::vector<int> last_use(n, -1);
  for (std::size_t s = 0; s < steps.size(); ++s) {
    for (auto e : steps[s].reads) check_id(e), last_use[e] = static_cast<int>(s);
    for (auto e : steps[s].writes) check_id(e), last_use[e] = static_cast<int>(s);
  }

  for (const auto& e : entries) {
    if (e.kind != PlanEntry::kExternal) out.stats.naive_bytes += e.bytes;
  }

  // Free storage per type, by size (best fit: the smallest at least the size asked for).
  std::map<int, std::multimap<std::int64_t, int>> free_by_type;
  auto new_storage = [&](const PlanEntry& pe) {
    out.storage_bytes.push_back(pe.bytes);
    out.storage_dtype.push_back(pe.dtype);
    return static_cast<int>(out.storage_bytes.size()) - 1;
  };

  for (std::size_t s = 0; s < steps.size(); ++s) {
    const PlanStep& step = steps[s];
    std::vector<std::uint32_t> given_away;  // inputs whose storage an output took this step
    for (auto w : step.writes) {
      const PlanEntry& pe = entries[w];
      if (pe.kind == PlanEntry::kExternal || out.storage[w] >= 0) continue;
      if (!plan || pe.kind == PlanEntry::kDedicated) {
        out.storage[w] = new_storage(pe);
        continue;
      }
      bool done = false;
      for (const auto& [r, w2] : step.inplace) {
        if (w2 != w) continue;
        check_id(r);
        const PlanEntry& re = entries[r];
        if (re.kind != PlanEntry::kPlanned || out.storage[r] < 0) continue;
        if (last_use[r] != static_cast<int>(s)) continue;  // someone reads it later
        if (std::count(step.reads.begin(), step.reads.end(), r) != 1) continue;
        if (std::count(step.writes.begin(), step.writes.end(), r) != 0) continue;
        if (std::find(given_away.begin(), given_away.end(), r) != given_away.end()) continue;
        if (re.bytes != pe.bytes || re.dtype != pe.dtype) continue;
        out.storage[w] = out.storage[r];
        out.inplace[w] = true;
        given_away.push_back(r);
        ++out.stats.inplace;
        done = true;
        break;
      }
      if (done) continue;
      auto& pool = free_by_type[pe.dtype];
      auto it = pool.lower_bound(pe.bytes);
      if (it != pool.end()) {
        out.storage[w] = it->second;
        pool.erase(it);
        ++out.stats.reused;
      } else {
        out.storage[w] = new_storage(pe);
      }
    }
    if (!plan) continue;
    // Release what this step used last (each entry once; storage given away now belongs to the output).
    std::vector<std::uint32_t> used(step.reads);
    used.insert(used.end(), step.writes.begin(), step.writes.end());
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    for (auto e : used) {
      if (entries[e].kind != PlanEntry::kPlanned || out.storage[e] < 0) continue;
      if (last_use[e] != static_cast<int>(s)) continue;
      if (std::find(given_away.begin(), given_away.end(), e) != given_away.end()) continue;
      const int sid = out.storage[e];
      free_by_type[out.storage_dtype[sid]].emplace(out.storage_bytes[sid], sid);
    }
  }

  for (auto b : out.storage_bytes) out.stats.planned_bytes += b;
  return out;
}

}  // namespace graph
}  // namespace troupe
