// VarQueue (engine/internal/var_queue.h) alone: no engine, no threads, no CAF. Its grants are compared with
// a sequential model of the rule (two requests of which one writes a common variable run in push order;
// readers between two writers run together) on hand-made cases and on random workloads (seeds logged).
#include "engine/internal/var_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tests/common/test_params.h"

namespace troupe::internal {
namespace {

using test::Scaled;
using test::TestSeed;

struct Req {
  int id = 0;
  std::vector<std::pair<int, bool>> vars;  // (variable, writes), distinct variables
  const void* lane = nullptr;               // in-order executor (the simulation of the engine's use)
  int pending = 0;                          // variables not yet granted
  bool granted_ordered = false;
  bool in_order = false;  // moved into its variables' lane groups (NoteInOrder)
  bool done = false;
};

using Queue = VarQueue<Req>;

// ------------------------------------------------------------------------------------------ hand-made cases

class VarQueueTest : public ::testing::Test {
 protected:
  Req* Make(int id) {
    reqs_.push_back(std::make_unique<Req>());
    reqs_.back()->id = id;
    return reqs_.back().get();
  }
  // Grants at once or enqueues; true when granted.
  bool Acquire(Req* r, bool write) {
    if (q_.CanGrant(write)) {
      q_.Grant(r, write);
      return true;
    }
    q_.Enqueue(r, write, &pool_);
    return false;
  }
  std::vector<int> Release(Req* r, bool write) {
    q_.Release(r, write);
    std::vector<int> granted;
    q_.GrantWaiting(&pool_, [&](Req* g) { granted.push_back(g->id); });
    return granted;
  }

  Queue::Pool pool_;
  Queue q_;
  std::vector<std::unique_ptr<Req>> reqs_;
};

TEST_F(VarQueueTest, ReadersOnAnIdleVariableRunTogether) {
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(Acquire(Make(i), false)) << i;
  EXPECT_EQ(q_.active_reads(), 5);
  EXPECT_EQ(q_.chain_tail(), nullptr);  // several readers are no chain
}

TEST_F(VarQueueTest, WriterThenReadersThenWriter) {
  Req* w1 = Make(1);
  EXPECT_TRUE(Acquire(w1, true));
  EXPECT_EQ(q_.chain_tail(), w1);
  EXPECT_TRUE(q_.chain_tail_writes());
  std::vector<Req*> readers{Make(2), Make(3), Make(4)};
  for (Req* r : readers) EXPECT_FALSE(Acquire(r, false));
  Req* w2 = Make(5);
  EXPECT_FALSE(Acquire(w2, true));
  Req* r6 = Make(6);
  EXPECT_FALSE(Acquire(r6, false));  // behind a waiting writer, even though no writer is active after w1
  // The writer's release grants every reader up to the next writer, in one batch.
  EXPECT_EQ(Release(w1, true), (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(Release(readers[0], false), std::vector<int>{});
  EXPECT_EQ(Release(readers[2], false), std::vector<int>{});
  EXPECT_EQ(Release(readers[1], false), std::vector<int>{5});  // the last reader lets the writer in
  EXPECT_EQ(Release(w2, true), std::vector<int>{6});
  EXPECT_EQ(Release(r6, false), std::vector<int>{});
  EXPECT_EQ(q_.active(), 0);
  EXPECT_FALSE(q_.has_waiters());
}

TEST_F(VarQueueTest, WritersRunOneAtATimeInPushOrder) {
  std::vector<Req*> w;
  for (int i = 0; i < 4; ++i) w.push_back(Make(i));
  EXPECT_TRUE(Acquire(w[0], true));
  for (int i = 1; i < 4; ++i) EXPECT_FALSE(Acquire(w[i], true));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(Release(w[i], true), std::vector<int>{i + 1});
  EXPECT_EQ(Release(w[3], true), std::vector<int>{});
}

TEST_F(VarQueueTest, ChainHostIsAWriterTailOnly) {
  Req* w = Make(1);
  ASSERT_TRUE(Acquire(w, true));
  EXPECT_EQ(q_.ChainHost(true), w);
  EXPECT_EQ(q_.ChainHost(false), w);  // a reader conflicts with the writer tail: it may follow it
  Req* r = Make(2);
  q_.GrantChained(r, false, /*via_chain=*/true, /*inherit=*/false, /*host_in_lane=*/false);
  EXPECT_EQ(q_.chain_tail(), r);
  EXPECT_FALSE(q_.chain_tail_writes());
  EXPECT_EQ(q_.ChainHost(false), nullptr);  // a reader never chains behind a reader
  EXPECT_EQ(q_.ChainHost(true), r);
  // An inheriting writer takes over r's read hold.
  Req* w3 = Make(3);
  q_.GrantChained(w3, true, true, /*inherit=*/true, false);
  EXPECT_EQ(q_.active_reads(), 0);
  EXPECT_EQ(q_.active_writes(), 2);  // w's and w3's
  EXPECT_EQ(q_.chain_tail(), w3);
  q_.Release(w, true);
  EXPECT_EQ(q_.chain_tail(), w3);
  q_.Release(w3, true);
  EXPECT_EQ(q_.chain_tail(), nullptr);
  EXPECT_EQ(q_.active(), 0);
}

TEST_F(VarQueueTest, OrderedGrantNeedsEveryHolderOnTheSameLaneAndPriority) {
  int lane_a = 0, lane_b = 0;
  Req* w = Make(1);
  ASSERT_TRUE(Acquire(w, true));
  EXPECT_FALSE(q_.CanGrantOrdered(&lane_a, 0));  // w not yet queued on a lane
  EXPECT_EQ(q_.NoteInOrder(w, true, &lane_a, 0), nullptr);
  EXPECT_EQ(q_.active(), 0);  // w left the counts for the lane group
  EXPECT_TRUE(q_.lane_busy());
  EXPECT_TRUE(q_.lane_writes());
  EXPECT_EQ(q_.chain_tail(), w);  // still the tail: a writer may run as its continuation
  EXPECT_TRUE(q_.Conflicts(false));
  EXPECT_TRUE(q_.CanGrantOrdered(&lane_a, 0));
  EXPECT_FALSE(q_.CanGrantOrdered(&lane_b, 0));
  EXPECT_FALSE(q_.CanGrantOrdered(&lane_a, 1));
  EXPECT_FALSE(q_.CanGrantOrdered(nullptr, 0));
  Req* r = Make(2);
  q_.GrantOrdered(false);  // reader r, queued on lane_a behind w
  EXPECT_EQ(q_.active(), 1);
  EXPECT_EQ(q_.chain_tail(), nullptr);
  EXPECT_FALSE(q_.CanGrantOrdered(&lane_a, 0));  // r is granted but not queued yet
  EXPECT_FALSE(q_.InOrderCompatible(&lane_b, 0));
  EXPECT_EQ(q_.NoteInOrder(r, false, &lane_a, 0), w);  // r replaces w as the group's last member
  EXPECT_EQ(q_.lane_last(), r);
  EXPECT_TRUE(q_.CanGrantOrdered(&lane_a, 0));
  Req* waiter = Make(3);
  q_.Enqueue(waiter, true, &pool_);
  EXPECT_FALSE(q_.CanGrantOrdered(&lane_a, 0));  // somebody waits: push order first
  // The front waiter follows by the same rule in GrantWaiting.
  std::vector<std::pair<int, bool>> granted;
  auto grant_waiting = [&] {
    q_.GrantWaiting(
        &pool_, [&](Req* g, bool ordered) { granted.emplace_back(g->id, ordered); },
        [&](const Req*) { return InOrderSlot{&lane_a, 0}; });
  };
  grant_waiting();
  EXPECT_EQ(granted, (std::vector<std::pair<int, bool>>{{3, true}}));
  EXPECT_EQ(q_.active(), 1);
}

TEST_F(VarQueueTest, LaneGroupEndsWhenItsLastMemberHasRun) {
  int lane_a = 0, lane_b = 0;
  Req* w = Make(1);
  Req* r = Make(2);
  ASSERT_TRUE(Acquire(w, true));
  q_.NoteInOrder(w, true, &lane_a, 0);
  q_.GrantOrdered(false);
  q_.NoteInOrder(r, false, &lane_a, 0);
  // A request of another lane waits for the whole group.
  Req* other = Make(3);
  EXPECT_FALSE(Acquire(other, false));
  auto ran = [](Req* x) { return x->done; };
  w->done = true;  // the first member has run, the last has not: the group stands
  EXPECT_EQ(q_.Settle(ran), nullptr);
  EXPECT_TRUE(q_.lane_busy());
  r->done = true;
  EXPECT_EQ(q_.Settle(ran), r);
  EXPECT_TRUE(q_.idle());
  EXPECT_FALSE(q_.lane_writes());
  std::vector<std::pair<int, bool>> granted;
  q_.GrantWaiting(
      &pool_, [&](Req* g, bool ordered) { granted.emplace_back(g->id, ordered); },
      [&](const Req*) { return InOrderSlot{&lane_b, 0}; });
  EXPECT_EQ(granted, (std::vector<std::pair<int, bool>>{{3, false}}));
  // A group of readers lets another lane's reader in at once, but not a writer.
  q_.NoteInOrder(other, false, &lane_b, 0);
  EXPECT_TRUE(q_.CanGrant(false));
  EXPECT_FALSE(q_.CanGrant(true));
  Req* reader = Make(4);
  q_.Grant(reader, false);
  EXPECT_EQ(q_.chain_tail(), nullptr);  // not idle before: the group is no chain behind reader
  q_.Release(reader, false);
  other->done = true;
  EXPECT_EQ(q_.Settle(ran), other);
  EXPECT_TRUE(q_.idle());
}

TEST_F(VarQueueTest, ATailInTheLaneGroupIsClearedWhenTheGroupEnds) {
  int lane_a = 0;
  Req* w = Make(1);
  ASSERT_TRUE(Acquire(w, true));
  q_.NoteInOrder(w, true, &lane_a, 0);
  ASSERT_EQ(q_.ChainHost(true), w);
  // An inheriting continuation of a host in the lane group takes nothing from the counts.
  Req* w2 = Make(2);
  q_.GrantChained(w2, true, /*via_chain=*/true, /*inherit=*/true, /*host_in_lane=*/true);
  EXPECT_EQ(q_.active_writes(), 1);
  EXPECT_EQ(q_.chain_tail(), w2);
  w->done = true;
  EXPECT_EQ(q_.Settle([](Req* x) { return x->done; }), w);
  EXPECT_EQ(q_.chain_tail(), w2);  // w2 is no member: still the tail
  q_.Release(w2, true);
  EXPECT_TRUE(q_.idle());
  EXPECT_EQ(q_.chain_tail(), nullptr);
  // Without the continuation, the group's end clears the tail.
  Req* w3 = Make(3);
  ASSERT_TRUE(Acquire(w3, true));
  q_.NoteInOrder(w3, true, &lane_a, 0);
  w3->done = true;
  EXPECT_EQ(q_.Settle([](Req* x) { return x->done; }), w3);
  EXPECT_EQ(q_.chain_tail(), nullptr);
}

// -------------------------------------------------------------------------------------- random workloads

enum class Pattern { kMixed, kReaderWriter };

// Requests over `num_vars` variables: kMixed draws 1-4 distinct variables, each read or written with
// probability 1/2 (like the engine benchmark's random_mixed); kReaderWriter repeats one writer of variable 0
// then K readers of it, reader j also writing its private variable 1 + j.
std::vector<std::unique_ptr<Req>> MakeRequests(Pattern pattern, int num_vars, int n, std::mt19937_64* rng) {
  std::vector<std::unique_ptr<Req>> reqs;
  const int k = num_vars - 1;
  for (int i = 0; i < n; ++i) {
    auto r = std::make_unique<Req>();
    r->id = i;
    if (pattern == Pattern::kReaderWriter) {
      const int j = i % (k + 1);
      if (j == 0) {
        r->vars = {{0, true}};
      } else {
        r->vars = {{0, false}, {j, true}};
      }
    } else {
      const int count = std::min(num_vars, 1 + static_cast<int>((*rng)() % 4));
      std::set<int> used;
      while (static_cast<int>(used.size()) < count) used.insert(static_cast<int>((*rng)() % num_vars));
      for (int v : used) r->vars.emplace_back(v, ((*rng)() & 1u) != 0);
    }
    reqs.push_back(std::move(r));
  }
  return reqs;
}

// The sequential model: on each variable, request r (pushed) may hold it iff every earlier request on it
// holds it or has completed, and none of the earlier ones that have not completed conflicts with r.
std::set<std::pair<int, int>> ModelGrants(const std::vector<std::unique_ptr<Req>>& reqs, int pushed, int num_vars) {
  std::set<std::pair<int, int>> out;
  for (int v = 0; v < num_vars; ++v) {
    bool prefix_granted = true, active_writer = false, active_any = false;
    for (int i = 0; i < pushed && prefix_granted; ++i) {
      const Req& r = *reqs[i];
      for (auto [var, write] : r.vars) {
        if (var != v) continue;
        if (r.done) break;
        if (write ? active_any : active_writer) {
          prefix_granted = false;
          break;
        }
        out.emplace(i, v);
        active_any = true;
        active_writer = active_writer || write;
      }
    }
  }
  return out;
}

// Drives the queues as a shard does without lanes: grant or enqueue at push, release and GrantWaiting at
// completion; a request runs (and completes) in a random order once all its variables are granted. After
// every step the granted set must equal the model's.
void RunAgainstModel(Pattern pattern, int num_vars, int n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto reqs = MakeRequests(pattern, num_vars, n, &rng);
  std::vector<Queue> queues(static_cast<std::size_t>(num_vars));
  Queue::Pool pool;
  std::set<std::pair<int, int>> granted;  // (request, variable)
  std::vector<Req*> runnable;
  int pushed = 0, completed = 0;
  auto on_grant = [&](Req* r, int v) {
    ASSERT_TRUE(granted.emplace(r->id, v).second) << "request " << r->id << " granted twice on var " << v;
    if (--r->pending == 0) runnable.push_back(r);
  };
  while (completed < n) {
    const bool push = pushed < n && (runnable.empty() || rng() % 3 != 0);
    if (push) {
      Req* r = reqs[static_cast<std::size_t>(pushed++)].get();
      r->pending = static_cast<int>(r->vars.size());
      for (auto [v, write] : r->vars) {
        Queue& q = queues[static_cast<std::size_t>(v)];
        if (q.CanGrant(write)) {
          q.Grant(r, write);
          on_grant(r, v);
        } else {
          q.Enqueue(r, write, &pool);
        }
      }
    } else {
      ASSERT_FALSE(runnable.empty()) << "nothing runnable and nothing left to push: the queues deadlocked";
      const std::size_t pick = rng() % runnable.size();
      Req* r = runnable[pick];
      runnable.erase(runnable.begin() + static_cast<std::ptrdiff_t>(pick));
      r->done = true;
      ++completed;
      for (auto [v, write] : r->vars) {
        granted.erase({r->id, v});
        Queue& q = queues[static_cast<std::size_t>(v)];
        q.Release(r, write);
        q.GrantWaiting(&pool, [&, v = v](Req* g) { on_grant(g, v); });
      }
    }
    if (::testing::Test::HasFatalFailure()) return;
    std::set<std::pair<int, int>> model = ModelGrants(reqs, pushed, num_vars);
    std::set<std::pair<int, int>> active;
    for (const auto& g : granted) active.insert(g);
    ASSERT_EQ(active, model) << "after " << pushed << " pushes and " << completed << " completions (seed " << seed
                             << ")";
  }
  for (const Queue& q : queues) {
    EXPECT_EQ(q.active(), 0);
    EXPECT_FALSE(q.has_waiters());
  }
}

TEST(VarQueueRandom, MixedReadsAndWritesMatchTheSequentialModel) {
  const std::uint64_t seed = TestSeed();
  for (int round = 0; round < 20; ++round) {
    RunAgainstModel(Pattern::kMixed, 2 + round % 6, static_cast<int>(Scaled(400, 60)), seed + round);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(VarQueueRandom, ReaderWriterRoundsMatchTheSequentialModel) {
  const std::uint64_t seed = TestSeed();
  for (int k : {1, 2, 8}) {
    RunAgainstModel(Pattern::kReaderWriter, k + 1, static_cast<int>(Scaled(600, 90)), seed + k);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// The engine's use with in-order lanes, simulated: a fully granted request is dispatched to its lane (a
// FIFO run one at a time) or, without a lane, to a pool run in any order; at dispatch it joins its
// variables' lane groups when all of them allow (NoteInOrder), and is then never released: the groups are
// settled whenever a variable is looked at, and a request that waits behind a group is granted once the
// group's last member has run (the engine's kLaneDone event, simulated by a settle pass after each run). A
// conflicting request is granted by GrantOrdered when its lane orders it behind every holder. Checked when
// each request runs: every earlier conflicting request on each of its variables has completed (the rule),
// and everything eventually runs.
void RunWithLanes(Pattern pattern, int num_vars, int n, int num_lanes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto reqs = MakeRequests(pattern, num_vars, n, &rng);
  std::vector<int> lane_ids(static_cast<std::size_t>(num_lanes));
  for (auto& r : reqs) {  // lane -1: none (e.g. a function that completes through a callback)
    const int lane = static_cast<int>(rng() % static_cast<std::uint64_t>(num_lanes + 1)) - 1;
    r->lane = lane < 0 ? nullptr : &lane_ids[static_cast<std::size_t>(lane)];
  }
  std::vector<Queue> queues(static_cast<std::size_t>(num_vars));
  Queue::Pool pool;
  std::map<const void*, std::deque<Req*>> lanes;
  std::vector<Req*> unordered;
  std::vector<int> revisit;
  int pushed = 0, completed = 0;

  auto dispatch = [&](Req* r) {
    if (r->lane != nullptr) {
      bool compatible = true;
      for (auto [v, w] : r->vars) compatible = compatible && queues[static_cast<std::size_t>(v)].InOrderCompatible(r->lane, 0);
      if (compatible) {
        for (auto [v, w] : r->vars) {
          queues[static_cast<std::size_t>(v)].NoteInOrder(r, w, r->lane, 0);
          revisit.push_back(v);
        }
        r->in_order = true;
      }
    }
    // A request granted behind in-order holders must go to its lane (it is ordered only there).
    ASSERT_TRUE(!r->granted_ordered || r->lane != nullptr);
    if (r->lane != nullptr) {
      lanes[r->lane].push_back(r);
    } else {
      unordered.push_back(r);
    }
  };
  auto grant = [&](Req* r, bool ordered) {
    r->granted_ordered = r->granted_ordered || ordered;
    if (--r->pending == 0) dispatch(r);
  };
  auto grant_waiting = [&](int v) {
    Queue& q = queues[static_cast<std::size_t>(v)];
    q.Settle([](Req* last) { return last->done; });
    q.GrantWaiting(&pool, grant, [](const Req* r) { return InOrderSlot{r->lane, 0}; });
  };
  auto drain_revisit = [&] {
    while (!revisit.empty()) {
      const int v = revisit.back();
      revisit.pop_back();
      grant_waiting(v);
    }
  };
  auto run = [&](Req* r) {
    // The rule, against push order: every earlier conflicting request on r's variables has completed.
    for (auto [v, write] : r->vars) {
      for (int i = 0; i < r->id; ++i) {
        const Req& e = *reqs[static_cast<std::size_t>(i)];
        for (auto [ev, ew] : e.vars) {
          ASSERT_TRUE(ev != v || !(ew || write) || e.done)
              << "request " << r->id << " ran before request " << i << " on var " << v << " (seed " << seed << ")";
        }
      }
    }
    r->done = true;
    ++completed;
    for (auto [v, write] : r->vars) {
      if (!r->in_order) queues[static_cast<std::size_t>(v)].Release(r, write);
      grant_waiting(v);
    }
    drain_revisit();
  };

  while (completed < n) {
    std::vector<const void*> ready_lanes;
    for (auto& [lane, fifo] : lanes) {
      if (!fifo.empty()) ready_lanes.push_back(lane);
    }
    const bool can_run = !ready_lanes.empty() || !unordered.empty();
    if (pushed < n && (!can_run || rng() % 3 != 0)) {
      Req* r = reqs[static_cast<std::size_t>(pushed++)].get();
      r->pending = static_cast<int>(r->vars.size());
      int now = 0;
      for (auto [v, write] : r->vars) {
        Queue& q = queues[static_cast<std::size_t>(v)];
        if (rng() % 2 == 0) q.Settle([](Req* last) { return last->done; });  // the engine settles on every push
        if (q.CanGrant(write)) {
          q.Grant(r, write);
          ++now;
        } else if (q.CanGrantOrdered(r->lane, 0)) {
          q.GrantOrdered(write);
          r->granted_ordered = true;
          ++now;
        } else {
          q.Enqueue(r, write, &pool);
        }
      }
      if (now > 0) {
        r->pending -= now - 1;
        grant(r, false);
      }
      drain_revisit();
    } else {
      ASSERT_TRUE(can_run) << "nothing runnable and nothing left to push: deadlock (seed " << seed << ")";
      const std::size_t pick = rng() % (ready_lanes.size() + unordered.size());
      if (pick < ready_lanes.size()) {
        auto& fifo = lanes[ready_lanes[pick]];
        Req* r = fifo.front();
        fifo.pop_front();
        run(r);
      } else {
        const std::size_t u = pick - ready_lanes.size();
        Req* r = unordered[u];
        unordered.erase(unordered.begin() + static_cast<std::ptrdiff_t>(u));
        run(r);
      }
    }
    if (::testing::Test::HasFatalFailure()) return;
  }
  for (Queue& q : queues) {
    q.Settle([](Req* last) { return last->done; });
    EXPECT_TRUE(q.idle());
    EXPECT_FALSE(q.has_waiters());
  }
}

TEST(VarQueueRandom, InOrderLanesKeepTheRuleOnMixedWorkloads) {
  const std::uint64_t seed = TestSeed();
  for (int round = 0; round < 20; ++round) {
    RunWithLanes(Pattern::kMixed, 2 + round % 6, static_cast<int>(Scaled(600, 90)), 1 + round % 3, seed + round);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(VarQueueRandom, InOrderLanesKeepTheRuleOnReaderWriterRounds) {
  const std::uint64_t seed = TestSeed();
  for (int k : {1, 2, 8}) {
    RunWithLanes(Pattern::kReaderWriter, k + 1, static_cast<int>(Scaled(900, 90)), 1, seed + k);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace troupe::internal
