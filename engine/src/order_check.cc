#include "engine/internal/order_check.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "engine/internal/opr_block.h"

namespace troupe::internal {
namespace {

struct Entry {
  const OprBlock* b;
  std::uint64_t id;
  bool write;
  bool done;
};
struct State {
  std::mutex mu;
  std::unordered_map<const ActorVar*, std::deque<Entry>> vars;
};
State& S() {
  static State* s = new State;
  return *s;
}
void Describe(const char* what, const OprBlock* b, std::uint64_t id, bool write) {
  std::fprintf(stderr,
               "  %s: '%s' id %llu %s lane %d prio %d prop %d in_order_lane %p counted %d ordered_grant %d "
               "shards %d\n",
               what, b->opr ? b->opr->name.c_str() : "?", static_cast<unsigned long long>(id),
               write ? "writes" : "reads", static_cast<int>(b->lane), b->priority,
               b->opr ? static_cast<int>(b->opr->prop) : -1, b->in_order_lane, b->in_order_counted,
               b->ordered_grant, b->opr ? b->opr->num_shards : -1);
}

}  // namespace

const bool OrderCheck::enabled_ = [] {
  const char* e = std::getenv("TROUPE_ENGINE_CHECK_ORDER");
  return e != nullptr && e[0] == '1';
}();

std::uint64_t OrderCheck::NewId() {
  static std::atomic<std::uint64_t> next{0};
  return next.fetch_add(1, std::memory_order_relaxed) + 1;
}

void OrderCheck::Pushed(const ActorVar* v, const OprBlock* b, bool write) {
  std::lock_guard<std::mutex> lock(S().mu);
  S().vars[v].push_back(Entry{b, b->check_id, write, false});
}

namespace {
template <class F>
void ForEachVarOf(const OprBlock* b, F&& f) {
  for (const ActorVar* v : b->opr->const_vars) f(v);
  for (const ActorVar* v : b->opr->mutable_vars) f(v);
}
}  // namespace

void OrderCheck::Started(const OprBlock* b) {
  std::lock_guard<std::mutex> lock(S().mu);
  ForEachVarOf(b, [b](const ActorVar* v) {
    auto it = S().vars.find(v);
    if (it == S().vars.end()) return;
    const std::deque<Entry>& q = it->second;
    std::size_t i = 0;
    while (i < q.size() && q[i].id != b->check_id) ++i;
    if (i == q.size()) return;
    for (std::size_t j = 0; j < i; ++j) {
      if (!q[j].done && (q[j].write || q[i].write)) {
        std::fprintf(stderr, "troupe: OrderCheck: a function started before a conflicting earlier one finished\n");
        Describe("started", b, q[i].id, q[i].write);
        Describe("earlier", q[j].b, q[j].id, q[j].write);
        std::abort();
      }
    }
  });
}

void OrderCheck::Finished(const OprBlock* b) {
  std::lock_guard<std::mutex> lock(S().mu);
  ForEachVarOf(b, [b](const ActorVar* v) {
    auto it = S().vars.find(v);
    if (it == S().vars.end()) return;
    std::deque<Entry>& q = it->second;
    for (Entry& e : q) {
      if (e.id == b->check_id) e.done = true;
    }
    while (!q.empty() && q.front().done) q.pop_front();
    if (q.empty()) S().vars.erase(it);
  });
}

}  // namespace troupe::internal
