// Engine semantics beyond the randomized conformance test: version counting, concurrent pushers
// (linearizable per variable, writers exclusive), readers running together, deferred deletion of
// variables and operators, priorities, the kCPUPrioritized lane, two engines at once, shutdown with pending
// work, profiling, and the small public helpers (Context::ToString, FnPropertyName, EngineTypeName).
//
// No test sleeps to let something happen: functions block on Gates the test opens, and every wait is bounded
// and fails the test when the bound is reached.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <condition_variable>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/device.h"
#include "base/error.h"
#include "actors/runtime.h"
#include "engine/engine.h"
#include "tests/engine/test_util.h"

namespace troupe {
namespace {

using namespace std::chrono_literals;
using engine_test::ActorEngines;
using engine_test::AllEngines;
using engine_test::Completer;
using engine_test::EngineParam;
using engine_test::EngineParamName;
using engine_test::Gate;
using engine_test::kCpu;
using engine_test::kLongWait;
using engine_test::MakeEngine;
using engine_test::Mix;
using engine_test::RandomWorkload;
using engine_test::Scaled;
using engine_test::Spin;
using engine_test::TestSeed;
using engine_test::WaitUntil;
using engine_test::WorkloadOptions;

// Opens a gate when the scope ends: declared after the engine, it runs before the engine's destructor, so
// that a failed assertion never leaves a function blocked while the engine shuts down.
struct OpenOnExit {
  Gate& gate;
  ~OpenOnExit() { gate.Open(); }
};

class EngineSemantics : public ::testing::TestWithParam<EngineParam> {
 protected:
  bool naive() const { return GetParam().type == EngineType::kNaive; }
};

// ------------------------------------------------------------------------------------ version counting

// writes_pushed counts a write when it is pushed, before it runs: a function held back by a pending async write
// has its write counted already, while version() has not moved; reads and duplicate writes count as in version().
TEST_P(EngineSemantics, WritesPushedCountsAtThePush) {
  auto engine = MakeEngine(GetParam());
  ASSERT_NE(engine, nullptr);
  VarHandle v = engine->NewVariable();
  VarHandle gate = engine->NewVariable();
  EXPECT_EQ(v->writes_pushed(), 0u);
  engine->PushSync([](RunContext) {}, kCpu, {v}, {});  // a read
  EXPECT_EQ(v->writes_pushed(), 0u);
  if (naive()) {  // functions run inside the push: nothing can be pending
    engine->PushSync([](RunContext) {}, kCpu, {}, {v, v});
    EXPECT_EQ(v->writes_pushed(), 1u);
    EXPECT_EQ(v->version(), 1u);
    return;
  }
  CallbackOnComplete held;
  std::promise<void> started;
  engine->PushAsync(
      [&](RunContext, CallbackOnComplete cb) {
        held = std::move(cb);
        started.set_value();
      },
      kCpu, {}, {gate});
  started.get_future().wait();
  engine->PushSync([](RunContext) {}, kCpu, {gate}, {v, v});  // waits for the gate; one write of v
  EXPECT_EQ(v->writes_pushed(), 1u);
  EXPECT_EQ(v->version(), 0u);
  held();
  engine->WaitForVar(v);
  EXPECT_EQ(v->writes_pushed(), 1u);
  EXPECT_EQ(v->version(), 1u);
}

TEST_P(EngineSemantics, VersionCountsWritesOnly) {
  Completer completer(1);
  auto engine = MakeEngine(GetParam());
  ASSERT_NE(engine, nullptr);
  VarHandle v = engine->NewVariable();
  VarHandle w = engine->NewVariable();
  ASSERT_NE(v, nullptr);
  ASSERT_NE(v, w);
  EXPECT_EQ(v->version(), 0u);

  std::atomic<int> ran{0};
  auto count = [&](RunContext) { ran.fetch_add(1); };
  for (int i = 0; i < 5; ++i) engine->PushSync(count, kCpu, {v}, {});
  engine->PushSync(count, kCpu, {v, v, v}, {});  // duplicate reads
  engine->PushAsync(
      [&](RunContext, CallbackOnComplete cb) {
        ran.fetch_add(1);
        cb();
      },
      kCpu, {v}, {});
  engine->WaitForVar(v);
  EXPECT_EQ(ran.load(), 7);
  EXPECT_EQ(v->version(), 0u) << "reads must leave the version unchanged";

  engine->PushSync(count, kCpu, {}, {v});
  engine->WaitForVar(v);
  EXPECT_EQ(v->version(), 1u);
  engine->PushSync(count, kCpu, {}, {v, v});  // duplicate write: one write
  engine->WaitForVar(v);
  EXPECT_EQ(v->version(), 2u);
  engine->PushSync(count, kCpu, {v}, {v});  // read and written: one write
  engine->WaitForVar(v);
  EXPECT_EQ(v->version(), 3u);
  engine->PushSync(count, kCpu, {v, w}, {v, v});
  engine->WaitForVar(v);
  EXPECT_EQ(v->version(), 4u);
  EXPECT_EQ(w->version(), 0u) << "w was only read";

  // An async write counts when its callback is called (here from another thread).
  engine->PushAsync(
      [&](RunContext, CallbackOnComplete cb) {
        completer.Post([&ran, cb] {
          ran.fetch_add(1);
          cb();
        });
      },
      kCpu, {}, {v, w});
  engine->WaitForVar(v);
  EXPECT_EQ(v->version(), 5u);
  engine->WaitForVar(w);
  EXPECT_EQ(w->version(), 1u);

  // A pre-built operator: each push that writes adds one; a read-only operator adds nothing.
  OprHandle writer = engine->NewOperator([&](RunContext, CallbackOnComplete cb) { ran.fetch_add(1), cb(); }, {w}, {v});
  OprHandle reader =
      engine->NewOperator([&](RunContext, CallbackOnComplete cb) { ran.fetch_add(1), cb(); }, {v, w}, {});
  for (int i = 0; i < 3; ++i) {
    engine->Push(writer, kCpu);
    engine->Push(reader, kCpu);
  }
  engine->DeleteOperator(writer);
  engine->DeleteOperator(reader);
  engine->WaitForAll();
  EXPECT_EQ(v->version(), 8u);
  EXPECT_EQ(w->version(), 1u);
  EXPECT_EQ(ran.load(), 7 + 4 + 1 + 6);

  // Many writes.
  const int n = static_cast<int>(Scaled(1000, 10));
  for (int i = 0; i < n; ++i)
    engine->PushSync(count, kCpu, i % 3 == 0 ? std::vector<VarHandle>{w} : std::vector<VarHandle>{}, {v});
  engine->WaitForVar(v);
  EXPECT_EQ(v->version(), 8u + n);
  EXPECT_EQ(w->version(), 1u);
}

// The same without a blocked worker, many times, for every engine: W0 R0 R9 on one variable.
TEST_P(EngineSemantics, HighPriorityReaderWaitsForEarlierWriter) {
  auto engine = MakeEngine(GetParam());
  ASSERT_NE(engine, nullptr);
  const int reps = static_cast<int>(Scaled(300, 20));
  int bad = 0;
  for (int rep = 0; rep < reps; ++rep) {
    VarHandle v = engine->NewVariable();
    std::mutex mu;
    std::vector<int> order;
    auto fn = [&](int i) {
      return [&, i](RunContext) {
        std::lock_guard<std::mutex> l(mu);
        order.push_back(i);
      };
    };
    engine->PushSync(fn(0), kCpu, {}, {v}, FnProperty::kNormal, 0);
    engine->PushSync(fn(1), kCpu, {v}, {}, FnProperty::kNormal, 0);
    engine->PushSync(fn(2), kCpu, {v}, {}, FnProperty::kNormal, 9);
    engine->WaitForVar(v);
    if ((order.size() != 3 || order[0] != 0) && bad++ < 3)
      ADD_FAILURE() << "W(p0) R(p0) R(p9) on one variable ran as " << ::testing::PrintToString(order);
    engine->DeleteVariable([](RunContext) {}, kCpu, v);
  }
  EXPECT_EQ(bad, 0) << "of " << reps << " repetitions";
}

// A version is visible as soon as WaitForVar returns, and increases by one per write, in order.
TEST_P(EngineSemantics, VersionSeenInsideFunctionsIncreasesInPushOrder) {
  auto engine = MakeEngine(GetParam());
  ASSERT_NE(engine, nullptr);
  VarHandle v = engine->NewVariable();
  const int n = static_cast<int>(Scaled(2000, 20));
  std::vector<std::uint64_t> seen(n, ~0ull);
  for (int i = 0; i < n; ++i) engine->PushSync([&seen, v, i](RunContext) { seen[i] = v->version(); }, kCpu, {}, {v});
  engine->WaitForVar(v);
  EXPECT_EQ(v->version(), static_cast<std::uint64_t>(n));
  int bad = 0;
  for (int i = 0; i < n; ++i)
    if (seen[i] != static_cast<std::uint64_t>(i) && bad++ < 5)
      ADD_FAILURE() << "write " << i << " saw version " << seen[i] << " while running (expected " << i << ")";
  EXPECT_EQ(bad, 0);
}

// ------------------------------------------------------------------------ concurrent pushing threads

// Several threads push interleaved functions on shared variables. Inside each function, per-variable
// counters of active readers and writers check that no reader overlaps a writer and writers never overlap.
// Each function logs (thread, group) on every variable it touches when it starts; a thread's pushes on a
// variable are numbered in groups (each write is its own group; consecutive reads share one), and in the
// log the groups of each thread must appear in non-decreasing order: push order, readers between two
// writers in any order.
void RunConcurrentPushers(Engine* engine, Completer* completer, int threads, int pushes_per_thread,
                          std::uint64_t seed) {
  constexpr int kVars = 6;
  struct Entry {
    int thread;
    std::uint32_t group;
  };
  struct VarState {
    std::atomic<int> readers{0};
    std::atomic<int> writers{0};
    std::mutex mu;
    std::vector<Entry> log;
  };
  struct Access {
    std::vector<std::pair<int, std::uint32_t>> reads, writes;  // (var, group)
  };
  std::array<VarState, kVars> st;
  std::vector<VarHandle> vars;
  for (int i = 0; i < kVars; ++i) vars.push_back(engine->NewVariable());
  std::atomic<std::uint64_t> violations{0}, wait_violations{0};
  std::vector<std::array<std::uint64_t, kVars>> entries(threads), writes(threads);
  std::vector<std::array<std::atomic<std::uint64_t>, kVars>> done(threads);
  for (auto& e : entries) e.fill(0);
  for (auto& w : writes) w.fill(0);

  auto body = [&st, &violations, &done](const Access& a, int t, std::uint64_t work) {
    for (auto& [v, g] : a.writes)
      if (st[v].writers.fetch_add(1) != 0) violations.fetch_add(1);
    for (auto& [v, g] : a.reads) st[v].readers.fetch_add(1);
    for (auto& [v, g] : a.writes)
      if (st[v].readers.load() != 0) violations.fetch_add(1);
    for (auto& [v, g] : a.reads)
      if (st[v].writers.load() != 0) violations.fetch_add(1);
    for (const auto* list : {&a.reads, &a.writes})
      for (auto& [v, g] : *list) {
        std::lock_guard<std::mutex> lock(st[v].mu);
        st[v].log.push_back({t, g});
      }
    std::uint64_t x = Spin(work, work);
    if (x % 7 == 0) std::this_thread::yield();
    for (auto& [v, g] : a.writes)
      if (st[v].writers.load() != 1 || st[v].readers.load() != 0) violations.fetch_add(1);
    for (auto& [v, g] : a.reads)
      if (st[v].writers.load() != 0) violations.fetch_add(1);
    for (auto& [v, g] : a.reads) st[v].readers.fetch_sub(1);
    for (auto& [v, g] : a.writes) st[v].writers.fetch_sub(1);
    for (const auto* list : {&a.reads, &a.writes})
      for (auto& [v, g] : *list) done[t][v].fetch_add(1);
  };

  auto pusher = [&](int t) {
    std::mt19937_64 rng(seed * 1000003 + t);
    std::array<std::uint32_t, kVars> group{};
    std::array<bool, kVars> last_read{};
    std::uniform_real_distribution<double> u(0, 1);
    for (int k = 0; k < pushes_per_thread; ++k) {
      std::vector<int> r, w;
      const int nr = static_cast<int>(rng() % 3), nw = static_cast<int>(rng() % 3);
      for (int i = 0; i < nr; ++i) r.push_back(static_cast<int>(rng() % kVars));
      for (int i = 0; i < nw; ++i) w.push_back(static_cast<int>(rng() % kVars));
      if (r.empty() && w.empty()) r.push_back(static_cast<int>(rng() % kVars));
      if (!w.empty() && u(rng) < 0.1) r.push_back(w[0]);  // read and written
      std::vector<VarHandle> rv, wv;
      for (int i : r) rv.push_back(vars[i]);
      for (int i : w) wv.push_back(vars[i]);
      std::set<int> ws(w.begin(), w.end()), rs;
      for (int i : r)
        if (!ws.count(i)) rs.insert(i);
      Access a;
      for (int v : ws) {
        a.writes.emplace_back(v, ++group[v]);
        last_read[v] = false;
        ++entries[t][v];
        ++writes[t][v];
      }
      for (int v : rs) {
        if (!last_read[v]) ++group[v];
        last_read[v] = true;
        a.reads.emplace_back(v, group[v]);
        ++entries[t][v];
      }
      const std::uint64_t work = 20 + rng() % 200;
      const int priority = static_cast<int>(rng() % 5);
      const double kind = u(rng);
      if (kind < 0.55) {
        engine->PushSync([&body, a, t, work](RunContext) { body(a, t, work); }, kCpu, rv, wv, FnProperty::kNormal,
                         priority);
      } else if (kind < 0.70) {
        engine->PushSync([&body, a, t, work](RunContext) { body(a, t, work); }, kCpu, rv, wv,
                         FnProperty::kCPUPrioritized, priority);
      } else if (kind < 0.85) {
        engine->PushAsync(
            [&body, a, t, work](RunContext, CallbackOnComplete cb) {
              body(a, t, work);
              cb();
            },
            kCpu, rv, wv, FnProperty::kAsync, priority);
      } else {
        engine->PushAsync(
            [&body, completer, a, t, work](RunContext, CallbackOnComplete cb) {
              completer->Post([&body, a, t, work, cb] {
                body(a, t, work);
                cb();
              });
            },
            kCpu, rv, wv, FnProperty::kNormal, priority);
      }
      if (k % 97 == 96) {
        // Everything this thread pushed on v so far has finished when WaitForVar returns.
        const int v = static_cast<int>(rng() % kVars);
        engine->WaitForVar(vars[v]);
        if (done[t][v].load() != entries[t][v]) wait_violations.fetch_add(1);
      }
    }
  };

  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(pusher, t);
  for (auto& th : pool) th.join();
  engine->WaitForAll();

  EXPECT_EQ(violations.load(), 0u) << "a reader overlapped a writer, or two writers overlapped (seed " << seed << ", "
                                   << threads << " threads)";
  EXPECT_EQ(wait_violations.load(), 0u) << "WaitForVar returned before the pusher's earlier functions finished";
  for (int v = 0; v < kVars; ++v) {
    std::vector<std::uint32_t> last(threads, 0);
    std::vector<std::uint64_t> count(threads, 0);
    int reported = 0;
    for (const Entry& e : st[v].log) {
      if (e.group < last[e.thread] && reported++ < 3)
        ADD_FAILURE() << "var " << v << ": thread " << e.thread << "'s function of group " << e.group
                      << " started after one of group " << last[e.thread] << " (out of push order; seed " << seed
                      << ")";
      last[e.thread] = std::max(last[e.thread], e.group);
      ++count[e.thread];
    }
    std::uint64_t total_writes = 0;
    for (int t = 0; t < threads; ++t) {
      EXPECT_EQ(count[t], entries[t][v]) << "var " << v << " thread " << t << ": functions logged vs pushed";
      total_writes += writes[t][v];
    }
    EXPECT_EQ(vars[v]->version(), total_writes) << "var " << v;
  }
}

TEST_P(EngineSemantics, ConcurrentPushersAreLinearizablePerVariable) {
  const std::uint64_t seed = TestSeed();
  for (int threads : {2, 5, 8}) {
    SCOPED_TRACE("threads=" + std::to_string(threads));
    Completer completer(1);
    auto engine = MakeEngine(GetParam());
    ASSERT_NE(engine, nullptr);
    RunConcurrentPushers(engine.get(), &completer, threads, static_cast<int>(Scaled(2000, 40)), seed + threads);
  }
}

// Readers between two writers may run together; with two workers free they must: each of the two readers
// waits (bounded) until the other has started. `writer_pending`: the first writer is still blocked when
// the readers are pushed (they wait in the variable's queue, or get chained behind it), otherwise it has
// finished (WaitForVar) and the readers are granted at once.
void CheckReadersRunTogether(Engine* engine, bool writer_pending) {
  VarHandle v = engine->NewVariable();
  Gate gate;
  if (!writer_pending) gate.Open();
  OpenOnExit open{gate};
  std::atomic<bool> w1_done{false}, a_started{false}, b_started{false}, a_done{false}, b_done{false};
  std::atomic<int> order_errors{0}, timeouts{0};
  std::atomic<bool> a_saw_b{false}, b_saw_a{false};
  engine->PushSync(
      [&](RunContext) {
        if (!gate.WaitFor()) timeouts++;
        w1_done = true;
      },
      kCpu, {}, {v});
  if (!writer_pending) engine->WaitForVar(v);
  engine->PushSync(
      [&](RunContext) {
        if (!w1_done) order_errors++;
        a_started = true;
        a_saw_b = WaitUntil([&] { return b_started.load(); }, 5s);
        a_done = true;
      },
      kCpu, {v}, {});
  engine->PushSync(
      [&](RunContext) {
        if (!w1_done) order_errors++;
        b_started = true;
        b_saw_a = WaitUntil([&] { return a_started.load(); }, 5s);
        b_done = true;
      },
      kCpu, {v}, {});
  engine->PushSync(
      [&](RunContext) {
        if (!a_done || !b_done) order_errors++;
      },
      kCpu, {}, {v});
  gate.Open();
  engine->WaitForAll();
  EXPECT_EQ(order_errors.load(), 0);
  EXPECT_EQ(timeouts.load(), 0);
  EXPECT_TRUE(a_saw_b.load() && b_saw_a.load())
      << "two readers of one variable, with two free workers, never ran at the same time";
  EXPECT_EQ(v->version(), 2u);
}

TEST_P(EngineSemantics, ReadersRunTogether) {
  if (naive() || GetParam().workers < 2) GTEST_SKIP() << "needs the actor engine with >= 2 CPU workers";
  auto engine = MakeEngine(GetParam());
  ASSERT_NE(engine, nullptr);
  CheckReadersRunTogether(engine.get(), /*writer_pending=*/false);
}

TEST_P(EngineSemantics, ReadersQueuedBehindAWriterRunTogether) {
  if (naive() || GetParam().workers < 2) GTEST_SKIP() << "needs the actor engine with >= 2 CPU workers";
  auto engine = MakeEngine(GetParam());
  ASSERT_NE(engine, nullptr);
  CheckReadersRunTogether(engine.get(), /*writer_pending=*/true);
}

// A CPU lane with several workers orders functions shorter than a hand-off on its in-order queue (one
// worker runs them back to back, and their lane groups spare them their completions), and stops once two
// functions in a row run long: readers run together again after that. One long function alone (what a
// preempted short one looks like) does not stop it.
TEST_P(EngineSemantics, ALaneWithSeveralWorkersOrdersShortFunctionsUntilTwoInARowRunLong) {
  if (naive() || GetParam().workers < 2) GTEST_SKIP() << "needs the actor engine with >= 2 CPU workers";
  auto engine = MakeEngine(GetParam());
  ASSERT_NE(engine, nullptr);
  auto in_order_runs = [&] {
    std::uint64_t n = 0;
    for (const DeviceStats& d : engine->Stats().devices) n += d.lanes[static_cast<int>(Lane::kNormal)].executed_in_order;
    return n;
  };
  // A worker counts a function once its Run has returned, which may be after WaitForAll returned.
  auto running = [&] {
    std::size_t n = 0;
    for (const DeviceStats& d : engine->Stats().devices) n += d.lanes[static_cast<int>(Lane::kNormal)].running;
    return n;
  };
  auto settle = [&] {
    engine->WaitForAll();
    return WaitUntil([&] { return running() == 0; }, kLongWait);
  };
  // Ordering starts once a worker has run enough short functions in a row, and applies to what is pushed
  // from then on: push batches of short functions until a whole batch ran in order (bounded).
  VarHandle warm = engine->NewVariable();
  auto order_a_batch = [&] {
    const auto deadline = std::chrono::steady_clock::now() + kLongWait;
    while (std::chrono::steady_clock::now() < deadline) {
      const std::uint64_t was = in_order_runs();
      for (int i = 0; i < 200; ++i) engine->PushSync([](RunContext) {}, kCpu, {}, {warm});
      if (!settle()) return false;
      if (in_order_runs() == was + 200) return true;
    }
    return false;
  };
  ASSERT_TRUE(order_a_batch()) << "short functions did not run on the lane's in-order queue";
  // Readers and writers while the lane orders them. Every 64th round's writer and its first reader run for
  // 6 us each, longer than the bound: two such functions in a row end ordering, so the lane stops and starts
  // again while functions wait in lane groups and behind them.
  constexpr int kReaders = 8;
  const int rounds = static_cast<int>(Scaled(2000, 200));
  VarHandle x = engine->NewVariable();
  std::vector<VarHandle> mine;
  for (int j = 0; j < kReaders; ++j) mine.push_back(engine->NewVariable());
  std::atomic<int> value{-1}, wrong{0};
  std::vector<int> seen(kReaders, -1);  // each written only by functions that write mine[j]
  for (int r = 0; r < rounds; ++r) {
    engine->PushSync(
        [&, r](RunContext) {
          if (r % 64 == 0) {
            const auto until = std::chrono::steady_clock::now() + 6us;
            while (std::chrono::steady_clock::now() < until) {
            }
          }
          value.store(r, std::memory_order_relaxed);
        },
        kCpu, {}, {x});
    for (int j = 0; j < kReaders; ++j) {
      engine->PushSync(
          [&, r, j](RunContext) {
            if (r % 64 == 0 && j == 0) {
              const auto until = std::chrono::steady_clock::now() + 6us;
              while (std::chrono::steady_clock::now() < until) {
              }
            }
            if (value.load(std::memory_order_relaxed) != r || seen[j] != r - 1) wrong++;
            seen[j] = r;
          },
          kCpu, {x}, {mine[j]});
    }
  }
  engine->WaitForAll();
  EXPECT_EQ(wrong.load(), 0) << "a reader saw another round's writer, or its own variable out of order";
  std::atomic<std::uint64_t> sink{0};
  auto push_long = [&] {
    engine->PushSync(
        [&](RunContext) {
          const auto until = std::chrono::steady_clock::now() + 3ms;
          while (std::chrono::steady_clock::now() < until) sink += Spin(100);
        },
        kCpu, {}, {x});
  };
  // The 6 us pairs above may have stopped the ordering last.
  ASSERT_TRUE(order_a_batch()) << "the lane did not order short functions again";
  // One function of a few milliseconds alone keeps the ordering: every short function after it runs in order.
  push_long();
  ASSERT_TRUE(settle());
  const std::uint64_t after_one = in_order_runs();
  constexpr int kShort = 50;
  for (int i = 0; i < kShort; ++i) engine->PushSync([](RunContext) {}, kCpu, {}, {warm});
  ASSERT_TRUE(settle());
  EXPECT_EQ(in_order_runs(), after_one + kShort) << "one long function alone stopped the ordering";
  // Two of them in a row: the worker that ran the second stops it.
  push_long();
  push_long();
  ASSERT_TRUE(settle());
  const std::uint64_t before = in_order_runs();
  CheckReadersRunTogether(engine.get(), /*writer_pending=*/true);
  EXPECT_EQ(in_order_runs(), before) << "functions pushed after two long ones were still ordered";
}

// WaitForVar waits for readers as well as writers, and not for functions on other variables.
TEST_P(EngineSemantics, WaitForVarWaitsForEarlierReadersAndWriters) {
  Completer completer(1);
  auto engine = MakeEngine(GetParam());
  ASSERT_NE(engine, nullptr);
  Gate gate;
  if (naive()) gate.Open();  // the naive engine runs functions inside Push
  OpenOnExit open{gate};
  VarHandle v = engine->NewVariable();
  std::atomic<int> timeouts{0}, readers_done{0};
  std::atomic<bool> writer_done{false};
  engine->PushSync(
      [&](RunContext) {
        if (!gate.WaitFor()) timeouts++;
        writer_done = true;
      },
      kCpu, {}, {v});
  engine->PushSync([&](RunContext) { readers_done++; }, kCpu, {v}, {});
  engine->PushAsync(
      [&](RunContext, CallbackOnComplete cb) {
        completer.Post([&, cb] {
          readers_done++;
          cb();
        });
      },
      kCpu, {v}, {});
  std::atomic<bool> ok{false};
  std::thread waiter([&] {
    engine->WaitForVar(v);
    ok = writer_done.load() && readers_done.load() == 2;
  });
  gate.Open();
  waiter.join();
  EXPECT_TRUE(ok.load()) << "WaitForVar returned before every earlier function on the variable finished";
  EXPECT_EQ(timeouts.load(), 0);
}

// A CPU function that completes through its callback (FnProperty::kAsync) only starts work, so the engine starts it on
// the thread that made it ready, never waking a worker for it: the dependency actor when it grants it, and
// the thread completing the function it waited on. That is how a network answer's thread sends the request
// pushed behind it (a PushPull after a Wait) at once.
TEST_P(EngineSemantics, AnAsyncFunctionWaitingOnAnotherStartsOnTheThreadThatCompletedIt) {
  if (naive()) GTEST_SKIP() << "the naive engine runs every function inside Push";
  auto engine = MakeEngine(GetParam());
  ASSERT_NE(engine, nullptr);
  VarHandle v = engine->NewVariable();
  for (int round = 0; round < 20; ++round) {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<CallbackOnComplete> first;  // guarded by mu
    engine->PushAsync(
        [&](RunContext, CallbackOnComplete cb) {
          std::lock_guard<std::mutex> lock(mu);
          first = cb;
          cv.notify_all();
        },
        kCpu, {}, {v}, FnProperty::kAsync);
    {
      std::unique_lock<std::mutex> lock(mu);
      ASSERT_TRUE(cv.wait_for(lock, kLongWait, [&] { return first.has_value(); })) << "the first function never ran";
    }
    // Pushed while the first one runs: it waits on it (written by both).
    std::thread::id second_ran_on;
    engine->PushAsync(
        [&](RunContext, CallbackOnComplete cb) {
          second_ran_on = std::this_thread::get_id();
          cb();
        },
        kCpu, {}, {v}, FnProperty::kAsync);
    std::thread::id completed_on;
    std::thread completer([&] {
      completed_on = std::this_thread::get_id();
      (*first)();
    });
    completer.join();
    engine->WaitForVar(v);
    EXPECT_EQ(second_ran_on, completed_on) << "round " << round << ": the second function ran on another thread";
  }
  engine->WaitForAll();
}

// With one CPU worker, functions its lane orders behind each other run without reporting each completion to
// the dependency actor (lane groups). A function the lane cannot order behind them (one that completes
// through a callback, one of another priority, one on another CPU device) must still wait for every earlier
// conflicting function, and whatever follows it must wait for it.
TEST_P(EngineSemantics, FunctionsTheLaneCannotOrderWaitForEveryEarlierConflictingFunction) {
  Completer completer(1);
  auto engine = MakeEngine(GetParam());
  ASSERT_NE(engine, nullptr);
  Gate gate;
  if (naive()) gate.Open();  // the naive engine runs functions inside Push
  OpenOnExit open{gate};
  VarHandle v = engine->NewVariable();
  VarHandle u = engine->NewVariable();
  std::atomic<int> ran{0};  // functions on v that ran, in push order when they write v
  std::atomic<int> wrong{0};
  std::atomic<int> timeouts{0};
  // A function pushed after `before` others on v: all of them have run; then it counts itself.
  auto count_run = [&](int before) {
    if (ran.load() != before) wrong++;
    ran++;
  };
  engine->PushSync(
      [&](RunContext) {
        if (!gate.WaitFor()) timeouts++;
        ran++;
      },
      kCpu, {}, {v});
  int pushed = 1;
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 3; ++i) {  // writers and readers the lane orders (readers also write u: one at a time)
      const int before = pushed++;
      engine->PushSync([&, before](RunContext) { count_run(before); }, kCpu, {}, {v});
      const int reader_before = pushed++;
      engine->PushSync([&, reader_before](RunContext) { count_run(reader_before); }, kCpu, {v}, {u});
    }
    const int before = pushed++;
    switch (round) {
      case 0:  // completes through a callback on another thread
        engine->PushAsync(
            [&, before](RunContext, CallbackOnComplete cb) {
              completer.Post([&, before, cb] {
                count_run(before);
                cb();
              });
            },
            kCpu, {}, {v});
        break;
      case 1:  // another priority
        engine->PushSync([&, before](RunContext) { count_run(before); }, kCpu, {}, {v},
                         FnProperty::kNormal, 7);
        break;
      case 2:  // the prioritized CPU lane
        engine->PushSync([&, before](RunContext) { count_run(before); }, kCpu, {}, {v},
                         FnProperty::kCPUPrioritized);
        break;
      default:  // another CPU device
        engine->PushSync([&, before](RunContext) { count_run(before); }, Context::CPU(1), {}, {v});
        break;
    }
  }
  gate.Open();
  engine->WaitForVar(v);
  EXPECT_EQ(ran.load(), pushed);
  engine->WaitForAll();
  EXPECT_EQ(wrong.load(), 0) << "a function ran before an earlier function that conflicts with it had finished";
  EXPECT_EQ(timeouts.load(), 0);
  EXPECT_EQ(v->version(), static_cast<std::uint64_t>(pushed - 12));  // every function but the 12 readers wrote v
}

TEST_P(EngineSemantics, WaitForVarDoesNotWaitForUnrelatedFunctions) {
  if (naive()) GTEST_SKIP() << "the naive engine runs functions inside Push";
  auto engine = MakeEngine(GetParam());
  ASSERT_NE(engine, nullptr);
  Gate gate;
  OpenOnExit open{gate};
  VarHandle u = engine->NewVariable(), v = engine->NewVariable();
  std::atomic<int> timeouts{0};
  std::atomic<bool> v_written{false}, wait_returned{false};
  engine->PushSync(
      [&](RunContext) {
        if (!gate.WaitFor()) timeouts++;
      },
      kCpu, {}, {u});
  engine->PushSync([&](RunContext) { v_written = true; }, kCpu, {}, {v}, FnProperty::kNormal);
  std::thread waiter([&] {
    engine->WaitForVar(v);
    wait_returned = true;
  });
  // With two or more workers, v's function runs on another worker while u's blocks one; with a single
  // worker it waits behind the blocker, so the check needs >= 2 workers.
  if (GetParam().workers >= 2) {
    EXPECT_TRUE(WaitUntil([&] { return wait_returned.load(); }, 10s))
        << "WaitForVar(v) waited for a blocked function that only touches another variable";
    EXPECT_TRUE(v_written.load());
  }
  gate.Open();
  waiter.join();
  engine->WaitForAll();
  EXPECT_TRUE(v_written.load());
  EXPECT_EQ(timeouts.load(), 0);
}

// ---------------------------------------------------------------------------------- deferred deletion

TEST_P(EngineSemantics, DeleteVariableRunsAfterEveryEarlierFunction) {
  Completer completer(1);
  auto engine = MakeEngine(GetParam());
  ASSERT_NE(engine, nullptr);
  Gate gate;
  if (naive()) gate.Open();
  OpenOnExit open{gate};
  VarHandle v = engine->NewVariable(), u = engine->NewVariable(), other = engine->NewVariable();
  std::atomic<int> finished_v{0}, finished_u{0}, timeouts{0}, deletes{0}, seen_v{-1}, seen_u{-1};
  std::atomic<int> bad_ctx{0};
  // v: a blocked writer, two readers (one async, completed from another thread), a writer.
  engine->PushSync(
      [&](RunContext) {
        if (!gate.WaitFor()) timeouts++;
        finished_v++;
      },
      kCpu, {}, {v});
  engine->PushSync([&](RunContext) { finished_v++; }, kCpu, {v, other}, {});
  engine->PushAsync(
      [&](RunContext, CallbackOnComplete cb) {
        completer.Post([&, cb] {
          finished_v++;
          cb();
        });
      },
      kCpu, {v}, {});
  engine->PushSync([&](RunContext) { finished_v++; }, kCpu, {}, {v});
  engine->DeleteVariable(
      [&](RunContext rctx) {
        if (!(rctx.ctx == kCpu)) bad_ctx++;
        seen_v = finished_v.load();
        deletes++;
      },
      kCpu, v);
  // u: a reader that is running (blocked) when the delete is pushed.
  engine->PushSync(
      [&](RunContext) {
        if (!gate.WaitFor()) timeouts++;
        finished_u++;
      },
      kCpu, {u}, {});
  engine->DeleteVariable(
      [&](RunContext) {
        seen_u = finished_u.load();
        deletes++;
      },
      kCpu, u);
  if (!naive()) {
    EXPECT_EQ(deletes.load(), 0) << "a delete function ran while an earlier function was blocked";
  }
  // Other variables keep working.
  engine->PushSync([](RunContext) {}, kCpu, {}, {other});
  gate.Open();
  engine->WaitForAll();
  EXPECT_EQ(deletes.load(), 2);
  EXPECT_EQ(seen_v.load(), 4) << "DeleteVariable's function ran before every earlier function on the var finished";
  EXPECT_EQ(seen_u.load(), 1) << "DeleteVariable's function ran before an earlier reader finished";
  EXPECT_EQ(timeouts.load(), 0);
  EXPECT_EQ(bad_ctx.load(), 0);
  EXPECT_EQ(other->version(), 1u);
}

// Many short-lived variables: create, use, delete (ASan checks for leaks and use after free).
TEST_P(EngineSemantics, DeleteVariableChurn) {
  auto engine = MakeEngine(GetParam());
  ASSERT_NE(engine, nullptr);
  VarHandle keep = engine->NewVariable();
  const int n = static_cast<int>(Scaled(3000, 50));
  std::atomic<int> ran{0}, deleted{0}, first_errors{0}, reader_errors{0}, writer_errors{0}, delete_errors{0};
  std::vector<std::unique_ptr<std::atomic<int>>> state;
  for (int i = 0; i < n; ++i) state.push_back(std::make_unique<std::atomic<int>>(0));
  for (int i = 0; i < n; ++i) {
    VarHandle v = engine->NewVariable();  // handles of deleted variables may be reused
    std::atomic<int>* s = state[i].get();
    engine->PushSync([&, s](RunContext) { first_errors += s->exchange(1) != 0, ran++; }, kCpu, {keep}, {v});
    engine->PushSync([&, s](RunContext) { reader_errors += s->load() != 1, ran++; }, kCpu, {v}, {});
    engine->PushSync([&, s](RunContext) { writer_errors += s->exchange(2) != 1, ran++; }, kCpu, {v}, {v},
                     FnProperty::kCPUPrioritized);
    engine->DeleteVariable([&, s](RunContext) { delete_errors += s->load() != 2, deleted++; }, kCpu, v);
    if (i % 64 == 0) engine->PushSync([&](RunContext) { ran++; }, kCpu, {}, {keep});
  }
  engine->WaitForAll();
  EXPECT_EQ(deleted.load(), n);
  EXPECT_EQ(ran.load(), 3 * n + (n + 63) / 64);
  EXPECT_EQ(first_errors.load(), 0) << "a function ran before the first writer of its (fresh) variable";
  EXPECT_EQ(reader_errors.load(), 0) << "a reader ran before the writer pushed before it, or after the next writer";
  EXPECT_EQ(writer_errors.load(), 0) << "a kCPUPrioritized read-write ran before the earlier functions on its var";
  EXPECT_EQ(delete_errors.load(), 0) << "a delete function ran before the functions pushed before it";
  EXPECT_EQ(keep->version(), static_cast<std::uint64_t>((n + 63) / 64));
}

TEST_P(EngineSemantics, DeleteOperatorRunsEveryEarlierPush) {
  Completer completer(1);
  auto engine = MakeEngine(GetParam());
  ASSERT_NE(engine, nullptr);
  Gate gate;
  if (naive()) gate.Open();
  OpenOnExit open{gate};
  VarHandle r = engine->NewVariable(), w = engine->NewVariable();
  std::atomic<int> runs{0}, ro_runs{0}, async_runs{0}, timeouts{0}, order_errors{0};
  constexpr int kPushes = 6;
  // A writing operator whose first push blocks.
  OprHandle op = engine->NewOperator(
      [&](RunContext, CallbackOnComplete cb) {
        if (runs.load() == 0 && !gate.WaitFor()) timeouts++;
        runs++;
        cb();
      },
      {r}, {w, w}, FnProperty::kNormal, "blocking_writer");
  // A read-only operator: its pushes may run together.
  OprHandle ro = engine->NewOperator(
      [&](RunContext, CallbackOnComplete cb) {
        ro_runs++;
        cb();
      },
      {r, w}, {}, FnProperty::kNormal, "reader");
  // An operator completed from another thread.
  OprHandle as = engine->NewOperator(
      [&](RunContext, CallbackOnComplete cb) {
        completer.Post([&, cb] {
          if (runs.load() != kPushes) order_errors++;  // pushed after every push of op on w
          async_runs++;
          cb();
        });
      },
      {w}, {r}, FnProperty::kAsync, "async_writer");
  for (int i = 0; i < kPushes; ++i) {
    engine->Push(op, kCpu, i);
    engine->Push(ro, kCpu);
  }
  engine->DeleteOperator(op);
  for (int i = 0; i < kPushes; ++i) engine->Push(as, kCpu);
  engine->DeleteOperator(ro);
  engine->DeleteOperator(as);
  if (!naive()) {
    EXPECT_EQ(runs.load(), 0) << "the first push of the operator is still blocked";
  }
  OprHandle unused = engine->NewOperator([](RunContext, CallbackOnComplete cb) { cb(); }, {}, {w});
  engine->DeleteOperator(unused);  // never pushed
  gate.Open();
  engine->WaitForAll();
  EXPECT_EQ(runs.load(), kPushes);
  EXPECT_EQ(ro_runs.load(), kPushes);
  EXPECT_EQ(async_runs.load(), kPushes);
  EXPECT_EQ(order_errors.load(), 0);
  EXPECT_EQ(timeouts.load(), 0);
  EXPECT_EQ(w->version(), static_cast<std::uint64_t>(kPushes));
  EXPECT_EQ(r->version(), static_cast<std::uint64_t>(kPushes));
  // The variables outlive the operators.
  engine->PushSync([](RunContext) {}, kCpu, {r}, {w});
  engine->WaitForVar(w);
  EXPECT_EQ(w->version(), static_cast<std::uint64_t>(kPushes) + 1);
}

// ----------------------------------------------------------------------------------------- priorities

class EnginePriority : public ::testing::TestWithParam<EngineParam> {
 protected:
  // The actor engine with one CPU worker: a blocked function holds the only worker, so that what is pushed
  // next waits in the lane's ready queue.
  void SetUp() override {
    if (GetParam().type == EngineType::kNaive) GTEST_SKIP() << "the naive engine runs functions inside Push";
    engine_ = MakeEngine(GetParam());
    ASSERT_NE(engine_, nullptr);
  }
  // Pushes a function on a fresh variable that blocks the worker until gate_ opens.
  void Block() {
    VarHandle b = engine_->NewVariable();
    engine_->PushSync(
        [this](RunContext) {
          started_.store(true);
          started_.notify_all();
          if (!gate_.WaitFor()) timeouts_++;
        },
        kCpu, {}, {b});
    ASSERT_TRUE(WaitUntil([&] { return started_.load(); })) << "the blocker never started";
  }
  void TearDown() override {
    gate_.Open();
    if (engine_) engine_->WaitForAll();
    EXPECT_EQ(timeouts_.load(), 0);
  }

  Gate gate_;
  std::atomic<bool> started_{false};
  std::atomic<int> timeouts_{0};
  std::unique_ptr<Engine> engine_;
};

TEST_P(EnginePriority, HighPriorityRunsBeforeLowWhenBothQueued) {
  ASSERT_NO_FATAL_FAILURE(Block());
  std::mutex mu;
  std::vector<int> order;
  VarHandle lo = engine_->NewVariable(), hi = engine_->NewVariable();
  engine_->PushSync(
      [&](RunContext) {
        std::lock_guard<std::mutex> l(mu);
        order.push_back(0);
      },
      kCpu, {}, {lo}, FnProperty::kNormal, 0);
  engine_->PushSync(
      [&](RunContext) {
        std::lock_guard<std::mutex> l(mu);
        order.push_back(10);
      },
      kCpu, {}, {hi}, FnProperty::kNormal, 10);
  const bool queued = WaitUntil([&] { return engine_test::QueuedOn(*engine_, kCpu, Lane::kNormal) == 2; }, 20s);
  gate_.Open();
  ASSERT_TRUE(queued) << "the two functions never showed as queued on cpu(0)'s normal lane (Stats().devices), "
                      << "queued=" << engine_test::QueuedOn(*engine_, kCpu, Lane::kNormal);
  engine_->WaitForAll();
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0], 10) << "the low-priority function ran before the high-priority one";
  EXPECT_EQ(order[1], 0);
}

TEST_P(EnginePriority, QueuedFunctionsRunByPriorityThenPushOrder) {
  if (GetParam().shards > 0) GTEST_SKIP() << "push order of independent functions across shards is not defined";
  ASSERT_NO_FATAL_FAILURE(Block());
  const std::vector<int> priorities = {0, 5, 10, -3, 5, 7, 0};
  std::mutex mu;
  std::vector<int> order;
  for (int i = 0; i < static_cast<int>(priorities.size()); ++i) {
    VarHandle v = engine_->NewVariable();
    engine_->PushSync(
        [&, i](RunContext) {
          std::lock_guard<std::mutex> l(mu);
          order.push_back(i);
        },
        kCpu, {}, {v}, FnProperty::kNormal, priorities[i]);
  }
  const bool queued =
      WaitUntil([&] { return engine_test::QueuedOn(*engine_, kCpu, Lane::kNormal) == priorities.size(); }, 20s);
  gate_.Open();
  ASSERT_TRUE(queued) << "queued=" << engine_test::QueuedOn(*engine_, kCpu, Lane::kNormal);
  engine_->WaitForAll();
  EXPECT_EQ(order, (std::vector<int>{2, 5, 1, 4, 0, 6, 3}));
}

// kCPUPrioritized runs on its own lane: it is not stuck behind a blocked normal-lane worker.
TEST_P(EnginePriority, PrioritizedLaneRunsWhileNormalLaneIsBusy) {
  ASSERT_NO_FATAL_FAILURE(Block());
  std::atomic<bool> ran{false};
  VarHandle v = engine_->NewVariable();
  engine_->PushSync([&](RunContext rctx) { ran = rctx.ctx == kCpu; }, kCpu, {}, {v}, FnProperty::kCPUPrioritized);
  EXPECT_TRUE(WaitUntil([&] { return ran.load(); }, 20s))
      << "a kCPUPrioritized function waited for the busy normal lane";
  EXPECT_FALSE(gate_.IsOpen());
}

// A priority does not let a function overtake one it depends on.
TEST_P(EnginePriority, PriorityNeverBreaksDependencies) {
  ASSERT_NO_FATAL_FAILURE(Block());
  VarHandle v = engine_->NewVariable();
  std::mutex mu;
  std::vector<int> order;
  for (int i = 0; i < 8; ++i)
    engine_->PushSync(
        [&, i](RunContext) {
          std::lock_guard<std::mutex> l(mu);
          order.push_back(i);
        },
        kCpu, {}, {v}, FnProperty::kNormal, i * 10);
  gate_.Open();
  engine_->WaitForVar(v);
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
}

// Readers and writers of one variable queued with priorities: a high-priority reader behind a queued
// reader must still wait for the writer before both (W0 R0 R9 ...).
TEST_P(EnginePriority, PriorityNeverLetsAReaderOvertakeAWriter) {
  ASSERT_NO_FATAL_FAILURE(Block());
  VarHandle v = engine_->NewVariable();
  std::mutex mu;
  std::vector<int> order;
  // (is_write, priority): groups W0 | R1 R2 | W3 | R4 R5 | W6
  const std::vector<std::pair<bool, int>> fns = {{true, 0},  {false, 0},  {false, 9}, {true, 5},
                                                 {false, 1}, {false, 10}, {true, 0}};
  for (int i = 0; i < static_cast<int>(fns.size()); ++i) {
    auto fn = [&, i](RunContext) {
      std::lock_guard<std::mutex> l(mu);
      order.push_back(i);
    };
    if (fns[i].first) {
      engine_->PushSync(fn, kCpu, {}, {v}, FnProperty::kNormal, fns[i].second);
    } else {
      engine_->PushSync(fn, kCpu, {v}, {}, FnProperty::kNormal, fns[i].second);
    }
  }
  gate_.Open();
  engine_->WaitForVar(v);
  const std::vector<int> group = {0, 1, 1, 2, 3, 3, 4};
  ASSERT_EQ(order.size(), fns.size());
  for (std::size_t k = 1; k < order.size(); ++k)
    EXPECT_LE(group[order[k - 1]], group[order[k]])
        << "function " << order[k] << " ran after function " << order[k - 1] << " although pushed before it on a "
        << "variable one of them writes (run order: " << ::testing::PrintToString(order) << ")";
}

INSTANTIATE_TEST_SUITE_P(Engines, EnginePriority,
                         ::testing::Values(EngineParam{EngineType::kActor, 1, 0}, EngineParam{EngineType::kActor, 1, 4},
                                           EngineParam{EngineType::kNaive, 1, 0}),
                         EngineParamName);

// -------------------------------------------------------------------------------- several engines

void RunTwoEngines(const EngineParam& a, const EngineParam& b, std::uint64_t seed) {
  Completer completer(2);
  auto ea = MakeEngine(a), eb = MakeEngine(b);
  ASSERT_NE(ea, nullptr);
  ASSERT_NE(eb, nullptr);
  WorkloadOptions options;
  options.num_vars = 50;
  options.num_functions = Scaled(15000, 300);
  std::thread ta([&] {
    WorkloadOptions o = options;
    o.seed = seed;
    RandomWorkload(ea.get(), &completer, o).Run();
  });
  std::thread tb([&] {
    WorkloadOptions o = options;
    o.seed = seed + 1;
    RandomWorkload(eb.get(), &completer, o).Run();
  });
  ta.join();
  tb.join();
}

TEST_P(EngineSemantics, TwoEnginesUsedConcurrently) { RunTwoEngines(GetParam(), GetParam(), TestSeed()); }

TEST(EngineSemanticsMixed, ActorAndNaiveEnginesUsedConcurrently) {
  RunTwoEngines({EngineType::kActor, 2, 0}, {EngineType::kNaive, 1, 0}, TestSeed());
}

// A function pushed to one engine does not wait for another engine's blocked function.
TEST(EngineSemanticsMixed, EnginesAreIndependent) {
  auto a = MakeEngine({EngineType::kActor, 1, 0});
  auto b = MakeEngine({EngineType::kActor, 1, 0});
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  Gate gate;
  OpenOnExit open{gate};
  std::atomic<bool> started{false};
  std::atomic<int> timeouts{0};
  VarHandle va = a->NewVariable(), vb = b->NewVariable();
  a->PushSync(
      [&](RunContext) {
        started = true;
        if (!gate.WaitFor()) timeouts++;
      },
      kCpu, {}, {va});
  ASSERT_TRUE(WaitUntil([&] { return started.load(); }));
  std::atomic<bool> ran{false};
  b->PushSync([&](RunContext) { ran = true; }, kCpu, {}, {vb});
  b->WaitForVar(vb);  // returns although engine a's only worker is blocked
  EXPECT_TRUE(ran.load());
  EXPECT_EQ(vb->version(), 1u);
  gate.Open();
  a->WaitForAll();
  EXPECT_EQ(va->version(), 1u);
  EXPECT_EQ(timeouts.load(), 0);
}

// ------------------------------------------------------------------------------------------- shutdown

// Destroying an engine with work pending: no crash, no hang, no leak (ASan), no function after the
// destructor returns, and what ran respected the order (a prefix of each variable's chain).
TEST_P(EngineSemantics, DestroyWithPendingWork) {
  constexpr int kVars = 4;
  std::array<std::atomic<std::uint64_t>, kVars> next{};
  std::atomic<std::uint64_t> ran{0}, order_errors{0}, ran_after_destroy{0};
  std::atomic<bool> destroyed{false};
  const std::uint64_t n = Scaled(10000, 200);
  {
    auto engine = MakeEngine(GetParam());
    ASSERT_NE(engine, nullptr);
    std::vector<VarHandle> vars;
    for (int i = 0; i < kVars; ++i) vars.push_back(engine->NewVariable());
    std::array<std::uint64_t, kVars> pushed{};
    auto fn_for = [&](int v, std::uint64_t index) {
      return [&, v, index](RunContext) {
        if (destroyed.load()) ran_after_destroy++;
        if (next[v].load() != index) order_errors++;
        Spin(300 + index % 500);
        next[v].store(index + 1);
        ran++;
      };
    };
    for (std::uint64_t i = 0; i < n; ++i) {
      const int v = static_cast<int>(i % kVars);
      const int r = static_cast<int>((i / kVars) % kVars);
      auto fn = fn_for(v, pushed[v]++);
      if (i % 10 == 3) {
        engine->PushAsync([fn](RunContext rctx, CallbackOnComplete cb) { fn(rctx), cb(); }, kCpu, {vars[r]}, {vars[v]},
                          FnProperty::kAsync, static_cast<int>(i % 3));
      } else {
        engine->PushSync(fn, kCpu, {vars[r]}, {vars[v]},
                         i % 17 == 0 ? FnProperty::kCPUPrioritized : FnProperty::kNormal, static_cast<int>(i % 5));
      }
    }
    // An operator deleted while its pushes are pending, and a variable deleted while functions on it are.
    OprHandle op = engine->NewOperator(
        [&](RunContext, CallbackOnComplete cb) {
          if (destroyed.load()) ran_after_destroy++;
          cb();
        },
        {vars[0]}, {vars[1]});
    for (int i = 0; i < 3; ++i) engine->Push(op, kCpu);
    engine->DeleteOperator(op);
    engine->DeleteVariable(
        [&](RunContext) {
          if (destroyed.load()) ran_after_destroy++;
        },
        kCpu, vars[3]);
    engine.reset();  // without waiting
    destroyed = true;
  }
  EXPECT_LE(ran.load(), n);
  EXPECT_EQ(order_errors.load(), 0u) << "functions ran out of order during shutdown";
  EXPECT_EQ(ran_after_destroy.load(), 0u) << "a function ran after the engine's destructor returned";
}

// Functions queued behind a running blocker when the engine is destroyed; the blocker is released from
// another thread once the main thread is about to destroy the engine.
TEST_P(EngineSemantics, DestroyWithFunctionsQueuedBehindBlocker) {
  Gate gate;
  if (naive()) gate.Open();
  std::atomic<bool> started{false}, about_to_destroy{false}, destroyed{false};
  std::atomic<int> timeouts{0}, ran_after_destroy{0}, order_errors{0};
  std::atomic<std::uint64_t> ran{0};
  std::thread releaser;
  {
    auto engine = MakeEngine(GetParam());
    ASSERT_NE(engine, nullptr);
    VarHandle v = engine->NewVariable(), u = engine->NewVariable();
    engine->PushSync(
        [&](RunContext) {
          started = true;
          if (!gate.WaitFor()) timeouts++;
        },
        kCpu, {}, {v});
    ASSERT_TRUE(WaitUntil([&] { return started.load(); }));
    const std::uint64_t n = Scaled(2000, 50);
    std::uint64_t index = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      if (i % 4 == 0) {
        engine->PushSync(
            [&, idx = index++](RunContext) {
              if (destroyed.load()) ran_after_destroy++;
              if (ran.load() != idx) order_errors++;
              ran++;
            },
            kCpu, {u}, {v});
      } else {
        engine->PushSync(
            [&](RunContext) {
              if (destroyed.load()) ran_after_destroy++;
            },
            kCpu, {v}, {u}, FnProperty::kNormal, static_cast<int>(i % 7));
      }
    }
    releaser = std::thread([&] {
      if (!WaitUntil([&] { return about_to_destroy.load(); })) timeouts++;
      gate.Open();
    });
    about_to_destroy = true;
    engine.reset();
    destroyed = true;
  }
  releaser.join();
  EXPECT_EQ(timeouts.load(), 0) << "the blocker was not released (the destructor did not return?)";
  EXPECT_EQ(ran_after_destroy.load(), 0);
  EXPECT_EQ(order_errors.load(), 0);
}

TEST_P(EngineSemantics, CreateAndDestroyRepeatedly) {
  const int n = static_cast<int>(Scaled(10, 3));
  for (int i = 0; i < n; ++i) {
    auto engine = MakeEngine(GetParam());
    ASSERT_NE(engine, nullptr);
    if (i % 2 == 1) {
      VarHandle v = engine->NewVariable();
      std::atomic<int> ran{0};
      engine->PushSync([&](RunContext) { ran++; }, kCpu, {}, {v});
      engine->WaitForVar(v);
      EXPECT_EQ(ran.load(), 1);
    }
  }
}

// ------------------------------------------------------------------------------------------ profiling

TEST_P(EngineSemantics, ProfilingRecordsNamedFunctions) {
  auto engine = MakeEngine(GetParam());
  ASSERT_NE(engine, nullptr);
  VarHandle v = engine->NewVariable();
  engine->SetProfiling(true);
  for (int i = 0; i < 5; ++i)
    engine->PushSync([](RunContext) { Spin(100); }, kCpu, {}, {v}, FnProperty::kNormal, 0, "prof_on");
  engine->WaitForAll();
  engine->SetProfiling(false);
  for (int i = 0; i < 3; ++i) engine->PushSync([](RunContext) {}, kCpu, {}, {v}, FnProperty::kNormal, 0, "prof_off");
  OprHandle op =
      engine->NewOperator([](RunContext, CallbackOnComplete cb) { cb(); }, {}, {v}, FnProperty::kNormal, "prof_op");
  engine->Push(op, kCpu, 0, /*profiling=*/true);
  engine->Push(op, kCpu, 0, /*profiling=*/true);
  engine->Push(op, kCpu, 0, /*profiling=*/false);
  engine->DeleteOperator(op);
  engine->WaitForAll();
  std::map<std::string, int> count;
  int bad = 0;
  for (const ProfileRecord& r : engine->TakeProfile()) {
    count[r.name]++;
    if (r.begin_ns > r.end_ns || !(r.ctx == kCpu)) bad++;
  }
  EXPECT_EQ(count["prof_on"], 5);
  EXPECT_EQ(count["prof_off"], 0) << "recorded while profiling was off";
  EXPECT_EQ(count["prof_op"], 2) << "Push(op, ..., profiling=true) records that push even while off";
  EXPECT_EQ(bad, 0) << "records with end < begin or the wrong context";
  std::size_t again = 0;
  for (const ProfileRecord& r : engine->TakeProfile()) again += r.name.rfind("prof_", 0) == 0;
  EXPECT_EQ(again, 0u) << "TakeProfile must clear what it returned";
}

INSTANTIATE_TEST_SUITE_P(Engines, EngineSemantics, ::testing::ValuesIn(AllEngines()), EngineParamName);

// ------------------------------------------------------------------------------- small public helpers

TEST(EngineHelpers, ContextToString) {
  EXPECT_EQ(Context::CPU(0).ToString(), "cpu(0)");
  EXPECT_EQ(Context::CPU(3).ToString(), "cpu(3)");
  EXPECT_EQ(Context::GPU(1).ToString(), "gpu(1)");
  EXPECT_EQ(Context::CPUPinned(0).ToString(), "cpu_pinned(0)");
  EXPECT_EQ(Context{}.ToString(), "cpu(0)");
  EXPECT_TRUE(Context::GPU(0).is_gpu());
  EXPECT_FALSE(Context::CPU(0).is_gpu());
  EXPECT_NE(Context::CPU(0), Context::CPU(1));
  EXPECT_NE(Context::CPU(0), Context::GPU(0));
}

TEST(EngineHelpers, ContextParse) {
  EXPECT_EQ(Context::Parse("cpu"), Context::CPU(0));
  EXPECT_EQ(Context::Parse("cpu:2"), Context::CPU(2));
  EXPECT_EQ(Context::Parse("gpu"), Context::GPU(0));
  EXPECT_EQ(Context::Parse("gpu:1"), Context::GPU(1));
  EXPECT_EQ(Context::Parse("cpu_pinned:0"), Context::CPUPinned(0));
  for (const Context c : {Context::CPU(3), Context::GPU(1), Context::CPUPinned(0)}) {
    EXPECT_EQ(Context::Parse(c.ToString()), c);
  }
  for (const char* bad : {"", "gpu:", "gpu:-1", "gpu:x", "gpu: 1", "tpu:0", "gpu(1", "gpu()", "GPU:0", "gpu:12345"}) {
    try {
      Context::Parse(bad);
      ADD_FAILURE() << "'" << bad << "' parsed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos) << e.what();
    }
  }
}

TEST(EngineHelpers, FnPropertyNames) {
  const std::vector<std::pair<FnProperty, std::string>> names = {{FnProperty::kNormal, "kNormal"},
                                                                 {FnProperty::kCopyFromGPU, "kCopyFromGPU"},
                                                                 {FnProperty::kCopyToGPU, "kCopyToGPU"},
                                                                 {FnProperty::kCPUPrioritized, "kCPUPrioritized"},
                                                                 {FnProperty::kAsync, "kAsync"},
                                                                 {FnProperty::kDeleteVar, "kDeleteVar"},
                                                                 {FnProperty::kGPUPrioritized, "kGPUPrioritized"},
                                                                 {FnProperty::kNoSkip, "kNoSkip"}};
  for (const auto& [prop, name] : names) {
    ASSERT_NE(FnPropertyName(prop), nullptr);
    EXPECT_EQ(std::string(FnPropertyName(prop)), name);
  }
}

TEST(EngineHelpers, EngineTypeNames) {
  EXPECT_STREQ(EngineTypeName(EngineType::kActor), "actor");
  EXPECT_STREQ(EngineTypeName(EngineType::kNaive), "naive");
}

TEST(EngineHelpers, GpuPushThrowsWithoutGpu) {
  if (Runtime::GpuCount() > 0) GTEST_SKIP() << "this machine has a GPU";
  auto engine = MakeEngine({EngineType::kActor, 1, 0});
  ASSERT_NE(engine, nullptr);
  VarHandle v = engine->NewVariable();
  std::atomic<int> ran{0};
  EXPECT_THROW(engine->PushSync([&](RunContext) { ran++; }, Context::GPU(0), {}, {v}), Error);
  EXPECT_THROW(engine->PushAsync([&](RunContext, CallbackOnComplete cb) { ran++, cb(); }, Context::GPU(0), {v}, {}),
               Error);
  OprHandle op = engine->NewOperator([&](RunContext, CallbackOnComplete cb) { ran++, cb(); }, {}, {v});
  EXPECT_THROW(engine->Push(op, Context::GPU(0)), Error);
  try {
    engine->PushSync([](RunContext) {}, Context::GPU(0), {}, {v}, FnProperty::kCopyToGPU);
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    std::string what = e.what();
    std::transform(what.begin(), what.end(), what.begin(), [](unsigned char c) { return std::tolower(c); });
    EXPECT_NE(what.find("gpu"), std::string::npos) << "the message should name the device: " << e.what();
  }
  // Nothing was pushed: the variable is neither poisoned nor written, and still usable.
  EXPECT_NO_THROW(engine->WaitForVar(v));
  EXPECT_EQ(ran.load(), 0);
  EXPECT_EQ(v->version(), 0u);
  engine->Push(op, kCpu);
  engine->DeleteOperator(op);
  engine->PushSync([&](RunContext) { ran++; }, kCpu, {}, {v});
  EXPECT_NO_THROW(engine->WaitForAll());
  EXPECT_EQ(ran.load(), 2);
  EXPECT_EQ(v->version(), 2u);
}

TEST(EngineHelpers, EngineGetReturnsTheProcessEngine) {
  Engine* e = Engine::Get();
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(Engine::Get(), e);
  const char* t = std::getenv("TROUPE_ENGINE");
  const EngineType expected = t != nullptr && std::strcmp(t, "naive") == 0 ? EngineType::kNaive : EngineType::kActor;
  EXPECT_EQ(e->type(), expected);
  VarHandle v = e->NewVariable();
  std::atomic<int> ran{0};
  e->PushSync([&](RunContext) { ran++; }, kCpu, {}, {v});
  e->WaitForVar(v);
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(v->version(), 1u);
  e->DeleteVariable([](RunContext) {}, kCpu, v);
  e->WaitForAll();
}

}  // namespace
}  // namespace troupe
