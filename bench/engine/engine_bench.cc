// The engine benchmark (see engine_bench.h for what it measures and why).
//
// Layout of this file: small helpers (hashing, the check log, per-thread tallies, the watchdog), the
// workloads on a troupe::Engine, the oneTBB anchors, the harness that runs warm-up + timed repetitions, and
// the report (JSON file, table on stdout).
#include "bench/engine/engine_bench.h"

#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_group.h>
#include <oneapi/tbb/version.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <exception>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "actors/config.h"
#include "bench/common/bench_util.h"
#include "base/context.h"
#include "engine/engine.h"

#ifndef TROUPE_VERSION
#define TROUPE_VERSION "unknown"
#endif

namespace troupe::bench {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

constexpr Context kCpu = Context::CPU(0);
// (b) cycles over this many variables: functions i and i + kIndependentVars write the same one.
constexpr std::int64_t kIndependentVars = 1024;
// (d) draws its read/write sets from this many variables.
constexpr int kRandomVars = 100;
constexpr int kRandomMaxVarsPerFn = 4;
constexpr int kMaxReaders = 1024;
// The targets of the acceptance text.
constexpr double kChainTargetRatio = 2.0;
constexpr double kIndependentTargetRate = 1e6;

double Seconds(Clock::time_point t0, Clock::time_point t1) { return std::chrono::duration<double>(t1 - t0).count(); }

std::uint64_t SplitMix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Order-sensitive combination of two words (used by (d): a wrong order gives a different value).
std::uint64_t Mix(std::uint64_t a, std::uint64_t b) {
  return SplitMix64(a ^ (b * 0x9e3779b97f4a7c15ULL + 0x7f4a7c15ULL + (a << 6) + (a >> 2)));
}

// What the in-run checks found wrong during one run. Fail may be called from any thread (it is only
// reached when something is wrong, so it may allocate); Summary is read after the run has drained.
class CheckLog {
 public:
  void Fail(const std::string& what) {
    if (failures_.fetch_add(1, std::memory_order_relaxed) == 0) {
      std::lock_guard<std::mutex> lock(mu_);
      first_ = what;
    }
  }
  // Empty when every check passed; otherwise the first failure and how many there were.
  std::string Summary() {
    const std::int64_t n = failures_.load(std::memory_order_relaxed);
    if (n == 0) return {};
    std::lock_guard<std::mutex> lock(mu_);
    return n == 1 ? first_ : first_ + " (and " + std::to_string(n - 1) + " more failed checks)";
  }

 private:
  std::atomic<std::int64_t> failures_{0};
  std::mutex mu_;
  std::string first_;
};

// One run's outcome: timed seconds, the number of functions it ran, and the check failures ("" = ok).
struct RunResult {
  double seconds = 0;
  std::int64_t functions = 0;
  std::string error;
};

// Per-thread tallies for workloads whose functions share nothing: each function adds itself to the tally
// of the thread it runs on (so the check touches no shared cache line), and the totals prove that every
// function ran exactly once: count == n and the sum of hash(i) equals the expected sum.
class RunTally {
 public:
  RunTally() : id_(next_id_.fetch_add(1, std::memory_order_relaxed)) {}

  void Add(std::int64_t i) {
    Slot* slot = Local();
    ++slot->count;
    slot->hash_sum += SplitMix64(static_cast<std::uint64_t>(i));
  }

  // Call after the run drained.
  void Verify(std::int64_t n, CheckLog* log) {
    std::int64_t count = 0;
    std::uint64_t sum = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const Slot& s : slots_) {
        count += s.count;
        sum += s.hash_sum;
      }
    }
    std::uint64_t expected = 0;
    for (std::int64_t i = 0; i < n; ++i) expected += SplitMix64(static_cast<std::uint64_t>(i));
    if (count != n) {
      log->Fail(std::to_string(count) + " functions ran, expected " + std::to_string(n));
    } else if (sum != expected) {
      log->Fail("the right number of functions ran, but some ran twice and others never");
    }
  }

 private:
  struct alignas(64) Slot {
    std::int64_t count = 0;
    std::uint64_t hash_sum = 0;
  };

  Slot* Local() {
    // Cached per thread and keyed by a process-unique id, so a later tally at the same address is never
    // mistaken for this one.
    thread_local std::uint64_t cached_id = 0;
    thread_local Slot* cached_slot = nullptr;
    if (cached_id != id_) {
      std::lock_guard<std::mutex> lock(mu_);
      cached_slot = &slots_.emplace_back();  // deque: earlier slots never move
      cached_id = id_;
    }
    return cached_slot;
  }

  static inline std::atomic<std::uint64_t> next_id_{1};
  const std::uint64_t id_;
  std::mutex mu_;
  std::deque<Slot> slots_;
};

struct alignas(64) PaddedCount {
  std::int64_t value = 0;
};
struct alignas(64) PaddedAtomic {
  std::atomic<std::uint64_t> value{0};
};

// Fires `on_hang` (on its own thread) when a run stays armed longer than the timeout: a hung engine then
// still leaves a JSON file and a non-zero exit instead of a silent CTest timeout.
class Watchdog {
 public:
  Watchdog(double timeout_s, std::function<void(const std::string&)> on_hang)
      : timeout_s_(timeout_s), on_hang_(std::move(on_hang)) {
    if (timeout_s_ > 0) thread_ = std::thread([this] { Loop(); });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void Arm(const std::string& label) {
    if (timeout_s_ <= 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    label_ = label;
    deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
    armed_ = true;
    cv_.notify_all();
  }
  void Disarm() {
    if (timeout_s_ <= 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = false;
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      if (!armed_) {
        cv_.wait(lock);
        continue;
      }
      if (Clock::now() >= deadline_) {
        const std::string label = label_;
        lock.unlock();
        on_hang_(label);  // does not return
        return;
      }
      cv_.wait_until(lock, deadline_);
    }
  }

  const double timeout_s_;
  const std::function<void(const std::string&)> on_hang_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool armed_ = false;
  std::string label_;
  Clock::time_point deadline_;
  std::thread thread_;
};

// ---------------------------------------------------------------------------------------------------
// Workloads on a troupe::Engine. Each run: set up (untimed), push everything, WaitForAll (timed: from the
// first push to WaitForAll's return), then check.

// Waits until the engine is idle, swallowing the errors WaitForAll rethrows (they were reported already).
void Drain(Engine& engine) {
  for (int attempt = 0; attempt < 4; ++attempt) {
    try {
      engine.WaitForAll();
      return;
    } catch (...) {
    }
  }
}

// Times `push_all` + WaitForAll. If the engine throws, the failure goes to `log` and the engine is drained
// before returning, so that no function outlives the state it points to.
template <typename PushAll>
double TimePushes(Engine& engine, CheckLog* log, PushAll&& push_all) {
  const auto t0 = Clock::now();
  try {
    push_all();
    engine.WaitForAll();
  } catch (const std::exception& e) {
    log->Fail(std::string("the engine threw: ") + e.what());
    Drain(engine);
  }
  const double seconds = Seconds(t0, Clock::now());
  engine.TakeProfile();  // with --profile: drops the run's records (untimed), so memory stays flat
  return seconds;
}

void CheckVersion(VarHandle var, std::uint64_t expected, const std::string& what, CheckLog* log) {
  const std::uint64_t got = var->version();
  if (got != expected) {
    log->Fail(what + ": Var::version() is " + std::to_string(got) + " after the run, expected " +
              std::to_string(expected) + " (one per completed write)");
  }
}

// (a) state: functions assert they run in push order. The counter is a plain integer on purpose: every
// function writes the same variable, so the engine orders all accesses to it (and TSan would say if not).
struct ChainState {
  std::int64_t counter = 0;
  CheckLog log;
  void Visit(std::int64_t i) {
    if (counter != i) {
      log.Fail("chain function " + std::to_string(i) + " ran when " + std::to_string(counter) +
               " functions of the chain had run (must be exactly " + std::to_string(i) + ")");
    }
    counter = i + 1;
  }
};

RunResult EngineChain(Engine& engine, VarHandle var, std::int64_t n) {
  ChainState st;
  const std::vector<VarHandle> reads;
  const std::vector<VarHandle> writes{var};
  const std::uint64_t version0 = var->version();
  const double s = TimePushes(engine, &st.log, [&] {
    for (std::int64_t i = 0; i < n; ++i) {
      // Captures 16 bytes: std::function keeps them inline (no allocation by the benchmark itself).
      engine.PushSync([state = &st, i](RunContext) { state->Visit(i); }, kCpu, reads, writes);
    }
  });
  if (st.counter != n) st.log.Fail(std::to_string(st.counter) + " of " + std::to_string(n) + " chain functions ran");
  CheckVersion(var, version0 + n, "chain variable", &st.log);
  return {s, n, st.log.Summary()};
}

// (a') one pre-built operator pushed n times. All pushes are the same function, so "legal order" means
// "never two at once": a busy flag catches an overlap, the final count a lost or extra run.
struct OperatorChainState {
  std::int64_t counter = 0;  // plain: ordered by the engine, as in ChainState
  std::atomic<int> busy{0};
  CheckLog log;
};

RunResult EngineChainOperator(Engine& engine, VarHandle var, std::int64_t n) {
  OperatorChainState st;
  const std::uint64_t version0 = var->version();
  OprHandle op = engine.NewOperator(
      [state = &st](RunContext, CallbackOnComplete done) {
        if (state->busy.load(std::memory_order_relaxed) != 0) {
          state->log.Fail("two pushes of the chain operator ran at the same time");
        }
        state->busy.store(1, std::memory_order_relaxed);
        ++state->counter;
        state->busy.store(0, std::memory_order_relaxed);
        done();
      },
      {}, {var}, FnProperty::kNormal, "bench_chain_operator");
  const double s = TimePushes(engine, &st.log, [&] {
    for (std::int64_t i = 0; i < n; ++i) engine.Push(op, kCpu);
  });
  engine.DeleteOperator(op);
  if (st.counter != n) st.log.Fail(std::to_string(st.counter) + " of " + std::to_string(n) + " operator pushes ran");
  CheckVersion(var, version0 + n, "chain variable", &st.log);
  return {s, n, st.log.Summary()};
}

// (b) function i writes vars[i % 1024]: the k-th function on a variable asserts it is the k-th to run there.
struct IndependentState {
  std::vector<PaddedCount> per_var = std::vector<PaddedCount>(kIndependentVars);
  CheckLog log;
  void Visit(std::int64_t i) {
    PaddedCount& c = per_var[static_cast<std::size_t>(i % kIndependentVars)];
    if (c.value != i / kIndependentVars) {
      log.Fail("function " + std::to_string(i) + " ran out of order on its variable");
    }
    ++c.value;
  }
};

RunResult EngineIndependent(Engine& engine, const std::vector<VarHandle>& vars, std::int64_t n) {
  IndependentState st;
  const std::vector<VarHandle> reads;
  std::vector<std::vector<VarHandle>> writes;
  std::vector<std::uint64_t> version0;
  for (VarHandle v : vars) {
    writes.push_back({v});
    version0.push_back(v->version());
  }
  const double s = TimePushes(engine, &st.log, [&] {
    for (std::int64_t i = 0; i < n; ++i) {
      engine.PushSync([state = &st, i](RunContext) { state->Visit(i); }, kCpu, reads,
                      writes[static_cast<std::size_t>(i % kIndependentVars)]);
    }
  });
  for (std::int64_t v = 0; v < kIndependentVars; ++v) {
    const std::int64_t expected = n / kIndependentVars + (v < n % kIndependentVars ? 1 : 0);
    const auto idx = static_cast<std::size_t>(v);
    if (st.per_var[idx].value != expected) {
      st.log.Fail("variable " + std::to_string(v) + " saw " + std::to_string(st.per_var[idx].value) +
                  " functions, expected " + std::to_string(expected));
    }
    CheckVersion(vars[idx], version0[idx] + static_cast<std::uint64_t>(expected), "variable " + std::to_string(v),
                 &st.log);
  }
  return {s, n, st.log.Summary()};
}

// (b') functions with no variables at all.
RunResult EngineIndependentNoVars(Engine& engine, std::int64_t n) {
  RunTally tally;
  CheckLog log;
  const std::vector<VarHandle> none;
  const double s = TimePushes(engine, &log, [&] {
    for (std::int64_t i = 0; i < n; ++i) {
      engine.PushSync([t = &tally, i](RunContext) { t->Add(i); }, kCpu, none, none);
    }
  });
  tally.Verify(n, &log);
  return {s, n, log.Summary()};
}

// (c) round r: one writer of x (sets value = r + 1), then K readers of x, reader j also writing its own
// private variable p_j. Readers check they see their round's value and no writer at their start or end;
// the writer checks that no writer overlaps it and that all K readers of the previous round have finished.
struct ReaderWriterState {
  explicit ReaderWriterState(int k) : readers(k), reads(static_cast<std::size_t>(k)) {}
  const int readers;
  std::atomic<std::uint64_t> value{0};
  std::atomic<int> writer_active{0};
  std::vector<PaddedAtomic> reads;  // reads[j]: rounds reader j has completed (p_j orders them)
  CheckLog log;

  void Write(std::uint64_t round) {
    if (writer_active.exchange(1, std::memory_order_acq_rel) != 0) {
      log.Fail("writer of round " + std::to_string(round) + " overlapped another writer");
    }
    std::uint64_t done = 0;
    for (const PaddedAtomic& r : reads) done += r.value.load(std::memory_order_acquire);
    if (done != round * static_cast<std::uint64_t>(readers)) {
      log.Fail("writer of round " + std::to_string(round) + " ran when " + std::to_string(done) +
               " reads were done (expected " + std::to_string(round * static_cast<std::uint64_t>(readers)) + ")");
    }
    value.store(round + 1, std::memory_order_relaxed);
    writer_active.store(0, std::memory_order_release);
  }

  void Read(std::uint64_t round, std::size_t j) {
    if (writer_active.load(std::memory_order_acquire) != 0 || value.load(std::memory_order_relaxed) != round + 1) {
      log.Fail("reader " + std::to_string(j) + " of round " + std::to_string(round) + " saw value " +
               std::to_string(value.load()) + " or a running writer at its start (expected " +
               std::to_string(round + 1) + ")");
    }
    if (reads[j].value.load(std::memory_order_relaxed) != round) {
      log.Fail("reader " + std::to_string(j) + " of round " + std::to_string(round) +
               " ran out of order on its private variable");
    }
    reads[j].value.store(round + 1, std::memory_order_release);
    if (writer_active.load(std::memory_order_acquire) != 0 || value.load(std::memory_order_relaxed) != round + 1) {
      log.Fail("a writer ran while reader " + std::to_string(j) + " of round " + std::to_string(round) +
               " was running");
    }
  }
};

RunResult EngineReaderWriter(Engine& engine, VarHandle x, const std::vector<VarHandle>& priv, std::int64_t n) {
  const int k = static_cast<int>(priv.size());
  const std::int64_t rounds = std::max<std::int64_t>(1, n / (k + 1));
  ReaderWriterState st(k);
  const std::vector<VarHandle> none;
  const std::vector<VarHandle> x_only{x};
  std::vector<std::vector<VarHandle>> priv_writes;
  std::vector<std::uint64_t> priv_version0;
  for (VarHandle p : priv) {
    priv_writes.push_back({p});
    priv_version0.push_back(p->version());
  }
  const std::uint64_t x_version0 = x->version();
  const double s = TimePushes(engine, &st.log, [&] {
    for (std::int64_t r = 0; r < rounds; ++r) {
      const auto round = static_cast<std::uint64_t>(r);
      engine.PushSync([state = &st, round](RunContext) { state->Write(round); }, kCpu, none, x_only);
      for (int j = 0; j < k; ++j) {
        // Round and reader packed in one word keeps the capture at 16 bytes (inline in std::function).
        const std::uint64_t code = (round << 10) | static_cast<std::uint64_t>(j);
        engine.PushSync([state = &st, code](RunContext) { state->Read(code >> 10, code & 1023u); }, kCpu, x_only,
                        priv_writes[static_cast<std::size_t>(j)]);
      }
    }
  });
  const auto r_total = static_cast<std::uint64_t>(rounds);
  if (st.value.load() != r_total)
    st.log.Fail("the last writer's value is " + std::to_string(st.value.load()) + ", expected " +
                std::to_string(r_total));
  for (std::size_t j = 0; j < priv.size(); ++j) {
    if (st.reads[j].value.load() != r_total)
      st.log.Fail("reader " + std::to_string(j) + " ran " + std::to_string(st.reads[j].value.load()) +
                  " times, expected " + std::to_string(r_total));
    CheckVersion(priv[j], priv_version0[j] + r_total, "private variable " + std::to_string(j), &st.log);
  }
  CheckVersion(x, x_version0 + r_total, "shared variable", &st.log);
  return {s, rounds * (k + 1), st.log.Summary()};
}

// (d) a random workload and its sequential model, generated once per (seed, n). Like MXNet's RandSumExpr:
// each variable holds a word; function i computes h = hash(i) mixed with the values it reads, then sets every
// variable it writes to Mix(old, h). Any order the engine's rule allows gives the sequential result.
struct RandomFn {
  std::uint8_t count = 0;       // 1..4 distinct variables
  std::uint8_t write_mask = 0;  // bit k: vars[k] is written (else read)
  std::uint8_t vars[kRandomMaxVarsPerFn] = {};
  // Writes to vars[k] pushed before this function: what the variable must have seen when it runs.
  std::uint32_t writes_before[kRandomMaxVarsPerFn] = {};
};

struct RandomPlan {
  std::uint64_t seed = 0;
  std::vector<RandomFn> fns;
  std::vector<std::uint64_t> initial;
  std::vector<std::uint64_t> expected;  // the sequential model's final values
  std::vector<std::uint64_t> writes;    // writes per variable
};

template <typename Load, typename Store>
void ApplyRandomFn(const RandomFn& f, std::int64_t i, Load&& load, Store&& store) {
  std::uint64_t h = SplitMix64(static_cast<std::uint64_t>(i));
  for (int k = 0; k < f.count; ++k) {
    if ((f.write_mask & (1u << k)) == 0) h = Mix(h, load(f.vars[k]));
  }
  for (int k = 0; k < f.count; ++k) {
    if ((f.write_mask & (1u << k)) != 0) store(f.vars[k], Mix(load(f.vars[k]), h));
  }
}

RandomPlan MakeRandomPlan(std::uint64_t seed, std::int64_t n) {
  RandomPlan plan;
  plan.seed = seed;
  std::mt19937_64 rng(seed);
  plan.fns.resize(static_cast<std::size_t>(n));
  for (RandomFn& f : plan.fns) {
    f.count = static_cast<std::uint8_t>(1 + rng() % kRandomMaxVarsPerFn);
    for (int k = 0; k < f.count; ++k) {
      std::uint8_t v;
      bool fresh;
      do {
        v = static_cast<std::uint8_t>(rng() % kRandomVars);
        fresh = std::find(f.vars, f.vars + k, v) == f.vars + k;
      } while (!fresh);
      f.vars[k] = v;
      if (rng() & 1u) f.write_mask = static_cast<std::uint8_t>(f.write_mask | (1u << k));
    }
  }
  plan.initial.resize(kRandomVars);
  for (int v = 0; v < kRandomVars; ++v)
    plan.initial[static_cast<std::size_t>(v)] = SplitMix64(seed ^ (0x1000u + static_cast<std::uint64_t>(v)));
  plan.expected = plan.initial;
  plan.writes.assign(kRandomVars, 0);
  for (std::int64_t i = 0; i < n; ++i) {
    RandomFn& f = plan.fns[static_cast<std::size_t>(i)];
    for (int k = 0; k < f.count; ++k) f.writes_before[k] = static_cast<std::uint32_t>(plan.writes[f.vars[k]]);
    ApplyRandomFn(
        f, i, [&](int v) { return plan.expected[static_cast<std::size_t>(v)]; },
        [&](int v, std::uint64_t x) { plan.expected[static_cast<std::size_t>(v)] = x; });
    for (int k = 0; k < f.count; ++k) {
      if ((f.write_mask & (1u << k)) != 0) ++plan.writes[f.vars[k]];
    }
  }
  return plan;
}

struct RandomState {
  const RandomPlan* plan = nullptr;
  // Atomics (relaxed): a wrong engine then yields a wrong value, which the check reports, not a data race.
  std::vector<PaddedAtomic> values = std::vector<PaddedAtomic>(kRandomVars);
  std::vector<PaddedAtomic> writes_done = std::vector<PaddedAtomic>(kRandomVars);
  CheckLog log;

  void Run(std::int64_t i) {
    const RandomFn& f = plan->fns[static_cast<std::size_t>(i)];
    // Legal order, per function: each variable has seen exactly the writes pushed before this function
    // (a reader after its writer and before the next one; a writer after every earlier writer).
    for (int k = 0; k < f.count; ++k) {
      const std::uint64_t seen = writes_done[f.vars[k]].value.load(std::memory_order_relaxed);
      if (seen != f.writes_before[k]) {
        log.Fail("random function " + std::to_string(i) + " ran when variable " + std::to_string(f.vars[k]) +
                 " (which it " + ((f.write_mask & (1u << k)) != 0 ? "writes" : "reads") + ") had seen " +
                 std::to_string(seen) + " writes; push order requires " + std::to_string(f.writes_before[k]));
      }
    }
    ApplyRandomFn(
        f, i, [&](int v) { return values[static_cast<std::size_t>(v)].value.load(std::memory_order_relaxed); },
        [&](int v, std::uint64_t x) { values[static_cast<std::size_t>(v)].value.store(x, std::memory_order_relaxed); });
    for (int k = 0; k < f.count; ++k) {
      if ((f.write_mask & (1u << k)) != 0) {
        writes_done[f.vars[k]].value.store(f.writes_before[k] + 1u, std::memory_order_relaxed);
      }
    }
  }
};

RunResult EngineRandom(Engine& engine, const std::vector<VarHandle>& vars, const RandomPlan& plan) {
  const auto n = static_cast<std::int64_t>(plan.fns.size());
  RandomState st;
  CheckLog& log = st.log;
  st.plan = &plan;
  std::vector<std::uint64_t> version0;
  for (int v = 0; v < kRandomVars; ++v) {
    st.values[static_cast<std::size_t>(v)].value.store(plan.initial[static_cast<std::size_t>(v)]);
    version0.push_back(vars[static_cast<std::size_t>(v)]->version());
  }
  std::vector<VarHandle> reads;
  std::vector<VarHandle> writes;
  reads.reserve(kRandomMaxVarsPerFn);
  writes.reserve(kRandomMaxVarsPerFn);
  const double s = TimePushes(engine, &log, [&] {
    for (std::int64_t i = 0; i < n; ++i) {
      const RandomFn& f = plan.fns[static_cast<std::size_t>(i)];
      reads.clear();
      writes.clear();
      for (int k = 0; k < f.count; ++k) {
        ((f.write_mask & (1u << k)) != 0 ? writes : reads).push_back(vars[f.vars[k]]);
      }
      engine.PushSync([state = &st, i](RunContext) { state->Run(i); }, kCpu, reads, writes);
    }
  });
  int wrong = 0;
  int first_wrong = -1;
  for (int v = 0; v < kRandomVars; ++v) {
    const auto idx = static_cast<std::size_t>(v);
    if (st.values[idx].value.load() != plan.expected[idx]) {
      if (wrong++ == 0) first_wrong = v;
    }
    CheckVersion(vars[idx], version0[idx] + plan.writes[idx], "variable " + std::to_string(v), &log);
  }
  if (wrong > 0) {
    log.Fail(std::to_string(wrong) + " of " + std::to_string(kRandomVars) +
             " variables differ from the sequential model (the first: variable " + std::to_string(first_wrong) +
             "; seed " + std::to_string(plan.seed) + ", " + std::to_string(n) + " functions)");
  }
  return {s, n, log.Summary()};
}

// ---------------------------------------------------------------------------------------------------
// oneTBB anchors. Each run builds its own graph; nodes are held in a vector of unique_ptr (declared after
// the graph, so they are destroyed first) and destroyed after the clock stopped.
using TbbNode = tbb::flow::continue_node<tbb::flow::continue_msg>;
using tbb::flow::continue_msg;

// (a) dynamic: the flow graph built as the engine must, one node and its edge per pushed function, by the
// pushing thread while the graph already runs. The catch: a continue_node fires when it has received one
// message per predecessor, and make_edge(prev, node) after prev has fired would leave node waiting
// forever (flow graph edges do not replay past messages). So each node is created with one extra
// predecessor, a "release" token from the pusher: pushing function i creates node i (1 + its edge =
// 2 predecessors), makes the edge from node i-1, and only then releases node i-1. Node i-1 therefore can
// not fire before its successor edge exists, every node fires exactly after its predecessor, and the graph
// runs concurrently with construction. Per pushed function: one node, one edge, one try_put — no locks or
// waits added by the benchmark. The price is a lag of one push (node i runs once i+1 is pushed or the
// final release happens), which does not change throughput.
RunResult TbbChainDynamic(std::int64_t n) {
  ChainState st;
  tbb::flow::graph g;
  std::vector<std::unique_ptr<TbbNode>> nodes;
  nodes.reserve(static_cast<std::size_t>(n));
  const auto t0 = Clock::now();
  for (std::int64_t i = 0; i < n; ++i) {
    nodes.push_back(std::make_unique<TbbNode>(g, 1, [state = &st, i](const continue_msg&) {
      state->Visit(i);
      return continue_msg();
    }));
    if (i > 0) {
      TbbNode& prev = *nodes[static_cast<std::size_t>(i - 1)];
      tbb::flow::make_edge(prev, *nodes.back());
      prev.try_put(continue_msg());  // release i-1: its successor edge exists now
    }
  }
  if (n > 0) nodes.back()->try_put(continue_msg());
  g.wait_for_all();
  const double s = Seconds(t0, Clock::now());
  if (st.counter != n) st.log.Fail(std::to_string(st.counter) + " of " + std::to_string(n) + " chain nodes ran");
  return {s, n, st.log.Summary()};
}

// Builds the n-node chain of (a) into `nodes` (node 0 has no predecessor).
void BuildTbbChain(tbb::flow::graph& g, ChainState* st, std::int64_t n, std::vector<std::unique_ptr<TbbNode>>* nodes) {
  nodes->reserve(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    nodes->push_back(std::make_unique<TbbNode>(g, [st, i](const continue_msg&) {
      st->Visit(i);
      return continue_msg();
    }));
    if (i > 0) tbb::flow::make_edge(*(*nodes)[static_cast<std::size_t>(i - 1)], *nodes->back());
  }
}

// (a) build then run: the whole chain is built, then the root is triggered; construction is timed, but it
// can not overlap execution (no function runs before the last one is "pushed").
RunResult TbbChainBuildThenRun(std::int64_t n) {
  ChainState st;
  tbb::flow::graph g;
  std::vector<std::unique_ptr<TbbNode>> nodes;
  const auto t0 = Clock::now();
  BuildTbbChain(g, &st, n, &nodes);
  if (n > 0) nodes.front()->try_put(continue_msg());
  g.wait_for_all();
  const double s = Seconds(t0, Clock::now());
  if (st.counter != n) st.log.Fail(std::to_string(st.counter) + " of " + std::to_string(n) + " chain nodes ran");
  return {s, n, st.log.Summary()};
}

// (a) pre-built: the chain is built before the clock starts; only try_put(root) + wait_for_all is timed.
RunResult TbbChainPrebuilt(std::int64_t n) {
  ChainState st;
  tbb::flow::graph g;
  std::vector<std::unique_ptr<TbbNode>> nodes;
  BuildTbbChain(g, &st, n, &nodes);
  const auto t0 = Clock::now();
  if (n > 0) nodes.front()->try_put(continue_msg());
  g.wait_for_all();
  const double s = Seconds(t0, Clock::now());
  if (st.counter != n) st.log.Fail(std::to_string(st.counter) + " of " + std::to_string(n) + " chain nodes ran");
  return {s, n, st.log.Summary()};
}

// (b) dynamic: one node created and triggered per pushed function.
RunResult TbbIndependentDynamic(std::int64_t n) {
  RunTally tally;
  CheckLog log;
  tbb::flow::graph g;
  std::vector<std::unique_ptr<TbbNode>> nodes;
  nodes.reserve(static_cast<std::size_t>(n));
  const auto t0 = Clock::now();
  for (std::int64_t i = 0; i < n; ++i) {
    nodes.push_back(std::make_unique<TbbNode>(g, [t = &tally, i](const continue_msg&) {
      t->Add(i);
      return continue_msg();
    }));
    nodes.back()->try_put(continue_msg());
  }
  g.wait_for_all();
  const double s = Seconds(t0, Clock::now());
  tally.Verify(n, &log);
  return {s, n, log.Summary()};
}

// (b) pre-built: the n nodes exist before the clock starts; triggering each one and waiting is timed.
RunResult TbbIndependentPrebuilt(std::int64_t n) {
  RunTally tally;
  CheckLog log;
  tbb::flow::graph g;
  std::vector<std::unique_ptr<TbbNode>> nodes;
  nodes.reserve(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    nodes.push_back(std::make_unique<TbbNode>(g, [t = &tally, i](const continue_msg&) {
      t->Add(i);
      return continue_msg();
    }));
  }
  const auto t0 = Clock::now();
  for (auto& node : nodes) node->try_put(continue_msg());
  g.wait_for_all();
  const double s = Seconds(t0, Clock::now());
  tally.Verify(n, &log);
  return {s, n, log.Summary()};
}

// (b) task_group::run of n no-op lambdas (no graph at all).
RunResult TbbTaskGroup(std::int64_t n) {
  RunTally tally;
  CheckLog log;
  tbb::task_group tg;
  const auto t0 = Clock::now();
  for (std::int64_t i = 0; i < n; ++i) tg.run([t = &tally, i] { t->Add(i); });
  tg.wait();
  const double s = Seconds(t0, Clock::now());
  tally.Verify(n, &log);
  return {s, n, log.Summary()};
}

// ---------------------------------------------------------------------------------------------------
// Harness and report.

// How the TBB anchors stand in for the engine (repeated in the JSON "notes" of the workloads they anchor).
constexpr const char* kTbbChainNote =
    "Anchor tbb_flow_graph_dynamic builds the flow graph as the engine must: per pushed function one "
    "continue_node and its edge, created by the pushing thread while the graph already runs, construction timed. "
    "Because a flow-graph edge made after its source fired never delivers (no replay), each node gets one extra "
    "predecessor, a release token: pushing function i creates node i, makes the edge i-1 -> i, and only then "
    "try_puts the token to node i-1; the last node is released before wait_for_all. So no node can fire before its "
    "successor edge exists, each fires after its predecessor, and the graph runs concurrently with construction, "
    "at one node + one edge + one try_put per function and no extra locking (cost: a lag of one push). Also "
    "reported: tbb_flow_graph_build_then_run (all nodes and edges built, then the root triggered; construction "
    "timed but never overlapping execution) and tbb_flow_graph_prebuilt (built before the clock starts; only "
    "try_put(root) + wait_for_all timed). TBB is limited to `workers` threads with tbb::global_control "
    "max_allowed_parallelism (the thread in wait_for_all counts as one); node destruction is not timed.";
constexpr const char* kTbbIndependentNote =
    "Anchor tbb_flow_graph_dynamic: per pushed function one continue_node (no edges) created and try_put, "
    "construction timed; tbb_flow_graph_prebuilt: the N nodes built before the clock starts, try_put of each + "
    "wait_for_all timed; tbb_task_group: task_group::run of N no-op lambdas + wait. TBB is limited to `workers` "
    "threads (global_control max_allowed_parallelism); node destruction is not timed.";

// One workload as reported in the JSON. `group` is what --workloads selects.
struct WorkloadDef {
  const char* name;
  const char* group;
  const char* description;
  const char* unit;
  bool lower_is_better;
  const char* anchor;  // the anchor the ratio is taken against
  const char* notes;
  const char* anchor_notes;  // how the anchors stand in for the engine; may be null
};

const WorkloadDef kWorkloadDefs[] = {
    {"chain", "chain", "(a) dependent chain: N no-op PushSync functions, all writing one variable", "ns/function", true,
     "tbb_flow_graph_dynamic",
     "figure = wall time from the first push to WaitForAll's return / N. Check: function i asserts that exactly i "
     "functions ran before it; Var::version() must grow by N.",
     kTbbChainNote},
    {"chain_operator", "chain",
     "(a) dependent chain, pre-built operator: one NewOperator (writing one variable) pushed N times", "ns/function",
     true, "tbb_flow_graph_dynamic",
     "figure as for chain. Check: no two pushes overlap (busy flag), all N ran, Var::version() grows by N.",
     kTbbChainNote},
    {"independent", "independent", "(b) independent no-op PushSync functions, function i writing variable i mod 1024",
     "functions/s", false, "tbb_flow_graph_dynamic",
     "1024 variables are created up front and cycled over, so functions i and i+1024 write the same variable and "
     "are ordered (every 1024th function depends on an earlier one); the TBB anchors have no edges at all. figure = "
     "N / wall time from the first push to WaitForAll's return. Check: the k-th function of each variable asserts "
     "it runs k-th there; versions grow by the writes.",
     kTbbIndependentNote},
    {"independent_novars", "independent", "(b) independent no-op PushSync functions with no variables at all",
     "functions/s", false, "tbb_flow_graph_dynamic",
     "figure as for independent. Check: per-thread tallies (count and hash sum) prove each function ran exactly "
     "once.",
     kTbbIndependentNote},
    {"reader_writer", "reader_writer",
     "(c) one writer then K readers of one variable, repeated (each reader also writes its own private variable)",
     "ns/function", true, "naive_engine",
     "rounds = N / (K+1); figure = wall time / (rounds * (K+1)). Check: readers see the value their round's writer "
     "wrote and no running writer (at start and end); a writer sees all K reads of the previous round done and no "
     "other writer. No TBB anchor: the anchor is the naive engine (everything inline on the pushing thread).",
     nullptr},
    {"random_mixed", "random_mixed",
     "(d) random mixed workload: N functions reading/writing 1-4 distinct of 100 variables (seeded)", "functions/s",
     false, "naive_engine",
     "like MXNet's RandSumExpr: function i sets h = hash(i) mixed with the values it reads, then each variable it "
     "writes to Mix(old, h); the final values are compared with a sequential model computed from the same seed. "
     "Each variable is read or written with probability 1/2. Anchor: the naive engine.",
     nullptr},
};

const char* const kTbbChainDynamic = "tbb_flow_graph_dynamic";

// A measured series: the figure of every timed repetition plus what failed.
struct Series {
  std::string name;  // "actor", "naive", or an anchor name
  std::optional<int> workers;
  std::optional<int> shards;
  std::string description;
  std::int64_t functions = 0;
  std::vector<double> samples;
  std::vector<std::string> errors;

  bool ok() const { return errors.empty(); }
  std::optional<double> Median() const {
    if (samples.empty()) return std::nullopt;
    std::vector<double> s = samples;
    std::sort(s.begin(), s.end());
    const std::size_t m = s.size() / 2;
    return s.size() % 2 == 1 ? s[m] : (s[m - 1] + s[m]) / 2;
  }
  std::optional<double> Min() const {
    if (samples.empty()) return std::nullopt;
    return *std::min_element(samples.begin(), samples.end());
  }
  std::optional<double> Max() const {
    if (samples.empty()) return std::nullopt;
    return *std::max_element(samples.begin(), samples.end());
  }
};

Json OptNum(std::optional<double> v) { return v ? Json(*v) : Json(nullptr); }
Json OptInt(std::optional<int> v) { return v ? Json(*v) : Json(nullptr); }

std::string Join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) {
    if (!s.empty()) s += ',';
    s += std::to_string(x);
  }
  return s;
}

std::string FormatSeconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

std::string FormatFigure(double v) {
  char buf[32];
  if (v >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.3e", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f", v);
  }
  return buf;
}

class EngineBench {
 public:
  explicit EngineBench(const EngineBenchOptions& options) : opt_(options) {}

  int Run();

 private:
  struct WorkloadReport {
    const WorkloadDef* def = nullptr;
    std::vector<Series> results;  // actor and naive
  };
  struct EngineConfigReport {
    std::string engine;
    std::optional<int> workers;
    std::optional<int> shards;
    std::string runtime;
    Json stats;
    std::vector<std::string> errors;
  };

  bool Selected(const std::string& group) const {
    return std::find(opt_.workloads.begin(), opt_.workloads.end(), group) != opt_.workloads.end();
  }
  bool EngineSelected(const std::string& name) const {
    return std::find(opt_.engines.begin(), opt_.engines.end(), name) != opt_.engines.end();
  }

  Series Measure(const std::string& label, const WorkloadDef& def, Series series,
                 const std::function<RunResult(std::int64_t)>& run);
  void RunEngine(EngineType type, std::optional<int> workers, std::optional<int> shards);
  void RunTbb(int workers);
  void AddResult(const std::string& workload, Series series);
  void AddFailure(const std::string& what);

  const WorkloadDef& Def(const std::string& name) const;
  int HeadlineWorkers() const;
  std::vector<const Series*> AnchorsFor(const WorkloadDef& def) const;
  std::optional<double> AnchorValue(const WorkloadDef& def, std::optional<int> workers) const;
  std::optional<double> ActorBest(const WorkloadDef& def, int workers) const;
  Json BuildJson(bool finished, const std::string& hung) const;  // caller holds mu_
  bool WriteJson(bool finished, const std::string& hung);
  void PrintTable() const;

  EngineBenchOptions opt_;
  std::int64_t n_ = 0;
  std::string started_;
  std::optional<RandomPlan> plan_;
  std::unique_ptr<Watchdog> watchdog_;

  mutable std::mutex mu_;  // guards everything below (the watchdog reads it when a run hangs)
  std::vector<WorkloadReport> workloads_;
  std::map<std::string, std::vector<Series>> tbb_anchors_;  // by workload group
  std::vector<EngineConfigReport> engine_configs_;
  std::vector<std::string> failures_;
};

const WorkloadDef& EngineBench::Def(const std::string& name) const {
  for (const WorkloadDef& d : kWorkloadDefs) {
    if (name == d.name) return d;
  }
  throw std::logic_error("unknown workload " + name);
}

void EngineBench::AddFailure(const std::string& what) {
  std::fprintf(stderr, "[bench engine] CHECK FAILED: %s\n", what.c_str());
  std::lock_guard<std::mutex> lock(mu_);
  failures_.push_back(what);
}

void EngineBench::AddResult(const std::string& workload, Series series) {
  std::lock_guard<std::mutex> lock(mu_);
  for (WorkloadReport& w : workloads_) {
    if (w.def->name == workload) {
      w.results.push_back(std::move(series));
      return;
    }
  }
}

Series EngineBench::Measure(const std::string& label, const WorkloadDef& def, Series series,
                            const std::function<RunResult(std::int64_t)>& run) {
  std::fprintf(stderr, "[bench engine] %-36s %-19s ", label.c_str(), def.name);
  std::fflush(stderr);
  for (int rep = -1; rep < opt_.repeat; ++rep) {  // rep -1: the warm-up
    const std::string run_label =
        label + " " + def.name + (rep < 0 ? " warm-up" : " repetition " + std::to_string(rep + 1));
    watchdog_->Arm(run_label);
    RunResult r;
    try {
      r = run(n_);
    } catch (const std::exception& e) {
      r.error = std::string("threw: ") + e.what();
    }
    watchdog_->Disarm();
    if (r.functions > 0) series.functions = r.functions;
    if (!r.error.empty()) {
      series.errors.push_back(run_label + ": " + r.error);
      continue;
    }
    if (rep < 0) continue;
    const double figure = def.lower_is_better ? r.seconds * 1e9 / static_cast<double>(r.functions)
                                              : static_cast<double>(r.functions) / r.seconds;
    series.samples.push_back(figure);
  }
  if (const auto median = series.Median()) {
    std::fprintf(stderr, "median %10s  min %10s  max %10s %s\n", FormatFigure(*median).c_str(),
                 FormatFigure(*series.Min()).c_str(), FormatFigure(*series.Max()).c_str(), def.unit);
  } else {
    std::fprintf(stderr, "no valid sample\n");
  }
  for (const std::string& e : series.errors) AddFailure(e);
  return series;
}

void EngineBench::RunEngine(EngineType type, std::optional<int> workers, std::optional<int> shards) {
  EngineConfigReport cfg_report;
  cfg_report.engine = EngineTypeName(type);
  cfg_report.workers = workers;
  cfg_report.shards = shards;
  std::string label = cfg_report.engine;
  if (workers) label += " w=" + std::to_string(*workers);
  if (shards) label += " s=" + std::to_string(*shards);

  std::unique_ptr<Engine> engine;
  try {
    EngineConfig config;
    config.type = type;
    // TROUPE_* variables (e.g. TROUPE_WORKER_SPIN_US) still apply; the swept values override them. The
    // resolved config goes to the JSON, so a run is never silently different.
    config.runtime = RuntimeConfig{}.WithEnv();
    if (workers) config.runtime.cpu_workers = *workers;
    if (shards) config.runtime.dependency_shards = *shards;
    cfg_report.runtime = config.runtime.Resolved().ToString();
    engine = Engine::Create(config);
    if (opt_.profile) engine->SetProfiling(true);
  } catch (const std::exception& e) {
    const std::string what = label + ": could not create the engine: " + e.what();
    cfg_report.errors.push_back(what);
    AddFailure(what);
    std::lock_guard<std::mutex> lock(mu_);
    engine_configs_.push_back(std::move(cfg_report));
    return;
  }
  Engine& e = *engine;

  Series proto;
  proto.name = cfg_report.engine;
  proto.workers = workers;
  proto.shards = shards;

  auto new_vars = [&e](std::size_t count) {
    std::vector<VarHandle> vars;
    for (std::size_t i = 0; i < count; ++i) vars.push_back(e.NewVariable());
    return vars;
  };
  auto delete_vars = [&e](const std::vector<VarHandle>& vars) {
    for (VarHandle v : vars) e.DeleteVariable([](RunContext) {}, kCpu, v);
    Drain(e);
  };

  if (Selected("chain")) {
    const std::vector<VarHandle> var = new_vars(1);
    AddResult("chain", Measure(label, Def("chain"), proto, [&](std::int64_t n) { return EngineChain(e, var[0], n); }));
    AddResult("chain_operator", Measure(label, Def("chain_operator"), proto,
                                        [&](std::int64_t n) { return EngineChainOperator(e, var[0], n); }));
    delete_vars(var);
  }
  if (Selected("independent")) {
    const std::vector<VarHandle> vars = new_vars(kIndependentVars);
    AddResult("independent",
              Measure(label, Def("independent"), proto, [&](std::int64_t n) { return EngineIndependent(e, vars, n); }));
    AddResult("independent_novars", Measure(label, Def("independent_novars"), proto,
                                            [&](std::int64_t n) { return EngineIndependentNoVars(e, n); }));
    delete_vars(vars);
  }
  if (Selected("reader_writer")) {
    const std::vector<VarHandle> x = new_vars(1);
    const std::vector<VarHandle> priv = new_vars(static_cast<std::size_t>(opt_.readers));
    AddResult("reader_writer", Measure(label, Def("reader_writer"), proto,
                                       [&](std::int64_t n) { return EngineReaderWriter(e, x[0], priv, n); }));
    delete_vars(x);
    delete_vars(priv);
  }
  if (Selected("random_mixed")) {
    const std::vector<VarHandle> vars = new_vars(kRandomVars);
    AddResult("random_mixed",
              Measure(label, Def("random_mixed"), proto, [&](std::int64_t) { return EngineRandom(e, vars, *plan_); }));
    delete_vars(vars);
  }

  // Nothing the benchmark pushes throws, so nothing may have been skipped, and nothing may be left pending.
  try {
    const EngineStats stats = e.Stats();
    cfg_report.stats = {{"pushed", stats.pushed},
                        {"completed", stats.completed},
                        {"skipped", stats.skipped},
                        {"pending", stats.pending}};
    if (stats.skipped != 0 || stats.pending != 0) {
      const std::string what = label + ": engine stats after the run: skipped=" + std::to_string(stats.skipped) +
                               " pending=" + std::to_string(stats.pending) + " (both must be 0)";
      cfg_report.errors.push_back(what);
      AddFailure(what);
    }
  } catch (const std::exception& ex) {
    cfg_report.stats = {{"error", ex.what()}};
  }
  engine.reset();  // stop its threads before the next configuration runs
  std::lock_guard<std::mutex> lock(mu_);
  engine_configs_.push_back(std::move(cfg_report));
}

void EngineBench::RunTbb(int workers) {
  // TBB may use `workers` threads in all (the thread calling wait_for_all included), like the actor engine's
  // `workers` CPU worker threads.
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(workers));
  const std::string suffix = " w=" + std::to_string(workers);
  auto anchor = [&](const char* group, const char* name, const char* description, const char* workload,
                    RunResult (*fn)(std::int64_t)) {
    Series proto;
    proto.name = name;
    proto.workers = workers;
    proto.description = description;
    Series s = Measure(name + suffix, Def(workload), proto, [fn](std::int64_t n) { return fn(n); });
    std::lock_guard<std::mutex> lock(mu_);
    tbb_anchors_[group].push_back(std::move(s));
  };
  if (Selected("chain")) {
    anchor("chain", kTbbChainDynamic,
           "one continue_node and its edge per pushed function, built by the pushing thread while the graph runs; "
           "node i-1 is released (an extra predecessor token) only after node i's edge exists; construction timed",
           "chain", TbbChainDynamic);
    anchor("chain", "tbb_flow_graph_build_then_run",
           "all N nodes and edges built, then the root triggered; construction timed, no overlap with execution",
           "chain", TbbChainBuildThenRun);
    anchor("chain", "tbb_flow_graph_prebuilt",
           "chain built before the clock starts; only try_put(root) + wait_for_all timed", "chain", TbbChainPrebuilt);
  }
  if (Selected("independent")) {
    anchor("independent", kTbbChainDynamic,
           "one continue_node (no edges) created and try_put per pushed function; construction timed", "independent",
           TbbIndependentDynamic);
    anchor("independent", "tbb_flow_graph_prebuilt",
           "N nodes built before the clock starts; try_put of each + wait_for_all timed", "independent",
           TbbIndependentPrebuilt);
    anchor("independent", "tbb_task_group", "task_group::run of N no-op lambdas + wait", "independent", TbbTaskGroup);
  }
}

int EngineBench::HeadlineWorkers() const {
  // The largest swept worker count that fits the machine (the acceptance targets speak of "2 cores").
  const int cores = AvailableCores();
  int best = -1;
  for (int w : opt_.workers) {
    if (w <= cores) best = std::max(best, w);
  }
  if (best < 0) best = *std::min_element(opt_.workers.begin(), opt_.workers.end());
  return best;
}

std::vector<const Series*> EngineBench::AnchorsFor(const WorkloadDef& def) const {
  std::vector<const Series*> out;
  const auto it = tbb_anchors_.find(def.group);
  if (it != tbb_anchors_.end()) {
    for (const Series& s : it->second) out.push_back(&s);
  }
  return out;
}

std::optional<double> EngineBench::AnchorValue(const WorkloadDef& def, std::optional<int> workers) const {
  const std::string anchor = def.anchor;
  if (anchor == "naive_engine") {
    for (const WorkloadReport& w : workloads_) {
      if (w.def != &def) continue;
      for (const Series& s : w.results) {
        if (s.name == "naive") return s.ok() ? s.Median() : std::nullopt;
      }
    }
    return std::nullopt;
  }
  for (const Series* s : AnchorsFor(def)) {
    if (s->name == anchor && s->workers == workers) return s->ok() ? s->Median() : std::nullopt;
  }
  return std::nullopt;
}

std::optional<double> EngineBench::ActorBest(const WorkloadDef& def, int workers) const {
  std::optional<double> best;
  for (const WorkloadReport& w : workloads_) {
    if (w.def != &def) continue;
    for (const Series& s : w.results) {
      // A series with a failed check has no trustworthy figure: it never enters a ratio or a target.
      if (s.name != "actor" || s.workers != workers || !s.ok()) continue;
      const auto m = s.Median();
      if (!m) continue;
      if (!best || (def.lower_is_better ? *m < *best : *m > *best)) best = m;
    }
  }
  return best;
}

// One series as JSON: an engine result ({"engine", "workers", "shards", ...}) or an anchor ({"name",
// "workers", "description", ...}).
Json SeriesJson(const Series& s, bool anchor) {
  Json j;
  if (anchor) {
    j["name"] = s.name;
    j["workers"] = OptInt(s.workers);
    j["description"] = s.description;
  } else {
    j["engine"] = s.name;
    j["workers"] = OptInt(s.workers);
    j["shards"] = OptInt(s.shards);
  }
  j["functions"] = s.functions;
  j["value"] = OptNum(s.Median());
  j["min"] = OptNum(s.Min());
  j["max"] = OptNum(s.Max());
  // max / min of the samples: how noisy the figure is (1 = perfectly steady).
  j["spread"] = (s.Min() && *s.Min() > 0) ? Json(*s.Max() / *s.Min()) : Json(nullptr);
  j["samples"] = s.samples;
  j["ok"] = s.ok();
  j["errors"] = s.errors;
  return j;
}

Json EngineBench::BuildJson(bool finished, const std::string& hung) const {
  const int hw = HeadlineWorkers();
  Json root;
  root["benchmark"] = "engine";
  root["troupe_version"] = TROUPE_VERSION;
  root["started"] = started_;
  root["finished"] = finished;
  root["machine"] = {{"cores", AvailableCores()},
                     {"hardware_concurrency", std::thread::hardware_concurrency()},
                     {"cpu_model", CpuModel()},
                     {"tbb_version", TBB_runtime_version()},
                     {"compiler", __VERSION__}};
  root["config"] = {
      {"functions", n_},
      {"warmup", "one untimed run of the same size before the timed repetitions"},
      {"repeat", opt_.repeat},
      {"workers", opt_.workers},
      {"shards", opt_.shards},
      {"readers", opt_.readers},
      {"quick", opt_.quick},
      {"profile", opt_.profile},
      {"seed", plan_ ? Json(plan_->seed) : Json(opt_.seed)},
      {"engines", opt_.engines},
      {"workloads", opt_.workloads},
      {"independent_vars", kIndependentVars},
      {"random_vars", kRandomVars},
      {"headline_workers", hw},
      {"tbb_threads", "tbb::global_control max_allowed_parallelism = workers (the waiting thread included)"},
      {"value", "median of the timed repetitions; min and max alongside"}};
  Json configs = Json::array();
  for (const EngineConfigReport& c : engine_configs_) {
    configs.push_back({{"engine", c.engine},
                       {"workers", OptInt(c.workers)},
                       {"shards", OptInt(c.shards)},
                       {"runtime", c.runtime},
                       {"stats", c.stats},
                       {"errors", c.errors}});
  }
  root["engine_configs"] = configs;

  Json workloads = Json::array();
  for (const WorkloadReport& w : workloads_) {
    const WorkloadDef& def = *w.def;
    Json j;
    j["name"] = def.name;
    j["description"] = def.description;
    j["unit"] = def.unit;
    j["lower_is_better"] = def.lower_is_better;
    j["functions"] = n_;
    Json results = Json::array();
    for (const Series& s : w.results) results.push_back(SeriesJson(s, false));
    j["results"] = results;

    Json anchors = Json::array();
    for (const Series* s : AnchorsFor(def)) anchors.push_back(SeriesJson(*s, true));
    for (const Series& s : w.results) {
      if (s.name == "naive") {
        anchors.push_back({{"name", "naive_engine"},
                           {"description", "the naive engine (same figure as its entry in results)"},
                           {"value", OptNum(s.Median())},
                           {"min", OptNum(s.Min())}});
      }
    }
    j["anchors"] = anchors;

    const bool anchor_per_workers = std::string(def.anchor) != "naive_engine";
    const auto anchor_value = AnchorValue(def, hw);
    j["anchor"] = {{"name", def.anchor},
                   {"workers", anchor_per_workers ? Json(hw) : Json(nullptr)},
                   {"value", OptNum(anchor_value)}};
    const auto actor = ActorBest(def, hw);
    j["actor_best"] = {{"workers", hw}, {"value", OptNum(actor)}};
    j["ratio"] = (actor && anchor_value && *anchor_value > 0) ? Json(*actor / *anchor_value) : Json(nullptr);
    j["ratio_meaning"] =
        std::string("actor / anchor: the actor engine's median ") + def.unit +
        " (best over shards, workers=" + std::to_string(hw) + ") divided by the anchor's (" + def.anchor + "). " +
        (def.lower_is_better ? "Lower is better: < 1 means the actor engine takes less time per function."
                             : "Higher is better: > 1 means the actor engine runs more functions per second.") +
        " Series with a failed in-run check are left out (null when nothing is left).";
    Json ratios = Json::array();
    for (const Series& s : w.results) {
      if (s.name != "actor") continue;
      const auto a = AnchorValue(def, s.workers);
      const auto m = s.ok() ? s.Median() : std::nullopt;
      ratios.push_back({{"workers", OptInt(s.workers)},
                        {"shards", OptInt(s.shards)},
                        {"anchor", def.anchor},
                        {"ratio", (a && m && *a > 0) ? Json(*m / *a) : Json(nullptr)}});
    }
    j["ratios"] = ratios;
    j["notes"] = def.anchor_notes != nullptr ? std::string(def.notes) + " " + def.anchor_notes : std::string(def.notes);
    workloads.push_back(j);
  }
  root["workloads"] = workloads;

  // The acceptance targets (reported, never asserted).
  Json targets = Json::array();
  for (const WorkloadReport& w : workloads_) {
    const std::string name = w.def->name;
    if (name == "chain") {
      const auto actor = ActorBest(*w.def, hw);
      const auto anchor = AnchorValue(*w.def, hw);
      const std::optional<double> ratio =
          (actor && anchor && *anchor > 0) ? std::optional<double>(*actor / *anchor) : std::nullopt;
      targets.push_back(
          {{"name", "chain <= 2x tbb"},
           {"description", "(a) actor ns/function on the 'chain' workload (PushSync) <= 2 x tbb_flow_graph_dynamic's"},
           {"workers", hw},
           {"threshold", kChainTargetRatio},
           {"ratio", OptNum(ratio)},
           {"met", ratio.has_value() && *ratio <= kChainTargetRatio}});
    } else if (name == "independent") {
      const auto actor = ActorBest(*w.def, hw);
      targets.push_back({{"name", "independent >= 1e6 fn/s"},
                         {"description", "(b) actor functions/s on the 'independent' workload >= 1,000,000 on 2 cores"},
                         {"workers", hw},
                         {"cores", AvailableCores()},
                         {"threshold", kIndependentTargetRate},
                         {"value", OptNum(actor)},
                         {"met", actor.has_value() && *actor >= kIndependentTargetRate}});
    }
  }
  root["targets"] = targets;
  Json failures = failures_;
  if (!hung.empty())
    failures.push_back("hung: " + hung + " did not finish within " + FormatSeconds(opt_.run_timeout_s));
  root["failures"] = failures;
  root["ok"] = failures.empty() && finished;
  return root;
}

bool EngineBench::WriteJson(bool finished, const std::string& hung) {
  std::string text;
  {
    std::lock_guard<std::mutex> lock(mu_);
    text = BuildJson(finished, hung).dump(2) + "\n";
  }
  std::ofstream out(opt_.json_path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    std::fprintf(stderr, "troupe bench engine: could not write %s\n", opt_.json_path.c_str());
    return false;
  }
  return true;
}

void EngineBench::PrintTable() const {
  std::lock_guard<std::mutex> lock(mu_);
  const int hw = HeadlineWorkers();
  std::printf("troupe bench engine: %lld functions per run, %d timed repetitions (value = median), machine: %d cores\n",
              static_cast<long long>(n_), opt_.repeat, AvailableCores());
  for (const WorkloadReport& w : workloads_) {
    const WorkloadDef& def = *w.def;
    std::printf("\n%s  [%s, %s is better]\n", def.name, def.unit, def.lower_is_better ? "lower" : "higher");
    std::printf("  %-32s %7s %6s %12s %12s %12s  %s\n", "engine / anchor", "workers", "shards", "median", "min", "max",
                "check");
    auto row = [](const Series& s) {
      const auto cell = [](std::optional<double> v) { return v ? FormatFigure(*v) : std::string("-"); };
      std::printf("  %-32s %7s %6s %12s %12s %12s  %s\n", s.name.c_str(),
                  s.workers ? std::to_string(*s.workers).c_str() : "-",
                  s.shards ? std::to_string(*s.shards).c_str() : "-", cell(s.Median()).c_str(), cell(s.Min()).c_str(),
                  cell(s.Max()).c_str(), s.ok() ? "ok" : "FAILED");
    };
    for (const Series& s : w.results) row(s);
    for (const Series* s : AnchorsFor(def)) row(*s);
    const auto actor = ActorBest(def, hw);
    const auto anchor = AnchorValue(def, hw);
    if (actor && anchor && *anchor > 0) {
      std::printf("  ratio actor/%s (workers=%d): %.3f\n", def.anchor, hw, *actor / *anchor);
    } else {
      std::printf("  ratio actor/%s (workers=%d): n/a\n", def.anchor, hw);
    }
  }
  std::printf("\ntargets (workers=%d):\n", hw);
  const Json j = BuildJson(true, "");
  for (const Json& t : j["targets"]) {
    std::string figure = t.contains("ratio") ? "ratio " : "value ";
    const Json& v = t.contains("ratio") ? t["ratio"] : t["value"];
    if (v.is_null()) {
      figure += "n/a";
    } else if (t.contains("ratio")) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.3f (<= %.1f)", v.get<double>(), t["threshold"].get<double>());
      figure += buf;
    } else {
      figure += FormatFigure(v.get<double>()) + " (>= " + FormatFigure(t["threshold"].get<double>()) + ")";
    }
    std::printf("  %-28s %-34s %s\n", t["name"].get<std::string>().c_str(), figure.c_str(),
                t["met"].get<bool>() ? "met" : "NOT met");
  }
  std::printf("\nin-run checks: %s\n", failures_.empty() ? "all passed" : "FAILED (see stderr and the JSON)");
  std::fflush(stdout);
}

int EngineBench::Run() {
  // Validate (the CLI checks these too; a library caller may not).
  auto bad = [](const std::string& what) {
    std::fprintf(stderr, "troupe bench engine: %s\n", what.c_str());
    return 2;
  };
  if (opt_.json_path.empty()) return bad("--json FILE is required");
  if (opt_.functions < 0) return bad("--functions must be positive");
  if (opt_.repeat < 0) return bad("--repeat must be positive");
  if (opt_.workers.empty() || *std::min_element(opt_.workers.begin(), opt_.workers.end()) < 1) {
    return bad("--workers needs one or more counts >= 1");
  }
  if (opt_.shards.empty() || *std::min_element(opt_.shards.begin(), opt_.shards.end()) < 1) {
    return bad("--shards needs one or more counts >= 1");
  }
  if (opt_.readers < 1 || opt_.readers > kMaxReaders)
    return bad("--readers must be in 1.." + std::to_string(kMaxReaders));
  for (const std::string& e : opt_.engines) {
    if (e != "actor" && e != "naive" && e != "tbb") return bad("unknown engine '" + e + "' (known: actor, naive, tbb)");
  }
  for (const std::string& w : opt_.workloads) {
    const auto& groups = EngineBenchWorkloadGroups();
    if (std::find(groups.begin(), groups.end(), w) == groups.end()) {
      return bad("unknown workload '" + w + "' (known: chain, independent, reader_writer, random_mixed)");
    }
  }
  n_ = opt_.functions > 0 ? opt_.functions : (opt_.quick ? kQuickFunctions : kDefaultFunctions);
  if (opt_.repeat == 0) opt_.repeat = opt_.quick ? 1 : kDefaultRepeat;
  {
    // Fail before minutes of measuring if the file can not be written.
    std::ofstream probe(opt_.json_path, std::ios::trunc);
    if (!probe) return bad("can not write " + opt_.json_path);
  }
  started_ = UtcNow();
  for (const WorkloadDef& d : kWorkloadDefs) {
    if (Selected(d.group)) workloads_.push_back({&d, {}});
  }
  if (Selected("random_mixed")) {
    std::uint64_t seed = opt_.seed;
    while (seed == 0) seed = (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    plan_ = MakeRandomPlan(seed, n_);
  }
  std::fprintf(stderr,
               "[bench engine] %lld functions per run, warm-up + %d repetitions, workers {%s}, shards {%s}, "
               "readers %d, seed %s, %d cores (%s)\n",
               static_cast<long long>(n_), opt_.repeat, Join(opt_.workers).c_str(), Join(opt_.shards).c_str(),
               opt_.readers, plan_ ? std::to_string(plan_->seed).c_str() : "-", AvailableCores(), CpuModel().c_str());

  watchdog_ = std::make_unique<Watchdog>(opt_.run_timeout_s, [this](const std::string& label) {
    std::fprintf(stderr, "\n[bench engine] HUNG: %s did not finish within %s; writing %s and exiting\n", label.c_str(),
                 FormatSeconds(opt_.run_timeout_s).c_str(), opt_.json_path.c_str());
    WriteJson(false, label);
    std::fflush(nullptr);
    std::_Exit(3);  // the hung run's threads can not be joined
  });

  if (EngineSelected("naive")) RunEngine(EngineType::kNaive, std::nullopt, std::nullopt);
  for (int w : opt_.workers) {
    if (EngineSelected("tbb")) RunTbb(w);
    if (EngineSelected("actor")) {
      for (int s : opt_.shards) RunEngine(EngineType::kActor, w, s);
    }
  }
  watchdog_.reset();

  const bool written = WriteJson(true, "");
  PrintTable();
  std::fprintf(stderr, "[bench engine] wrote %s\n", opt_.json_path.c_str());
  std::lock_guard<std::mutex> lock(mu_);
  return (failures_.empty() && written) ? 0 : 1;
}

}  // namespace

const std::vector<std::string>& EngineBenchWorkloadGroups() {
  static const std::vector<std::string> kGroups = {"chain", "independent", "reader_writer", "random_mixed"};
  return kGroups;
}

int RunEngineBench(const EngineBenchOptions& options) {
  EngineBench bench(options);
  return bench.Run();
}

// --- `troupe bench engine`: its declaration (bench/common/registry.h) ---------------------------------
namespace {

constexpr const char* kEngineBenchmarkDescription =
    "Measure the dependency engine. Four workloads, each run once untimed (warm-up) and then --repeat times, "
    "every run with an in-run check that all functions ran exactly once and in an order the engine's rule "
    "allows: (a) chain: a dependent chain of no-op pushes (PushSync, and one pre-built NewOperator pushed N "
    "times), in ns per function; (b) independent: no-op pushes writing one of 1024 variables (and with no "
    "variables), in functions per second; (c) reader_writer: one writer then K readers of a variable, "
    "repeated, in ns per function; (d) random_mixed: random read/write sets over 100 variables, compared "
    "with a sequential model, in functions per second. They run on the actor engine for every --workers x "
    "--shards value, on the naive engine, and, in the same run, the anchor: a oneTBB flow graph (built one "
    "node and edge per pushed function, and pre-built) and a task_group, limited to the same number of "
    "threads. The JSON holds every figure, the anchor's, their ratio and the targets ((a) <= 2x TBB, "
    "(b) >= 1e6 functions/s). Progress goes to stderr, a table to stdout. Exit status: 0 when every check "
    "passed, 1 when one failed (the JSON says which, with \"ok\": false), 2 on bad usage, 3 when a run hung "
    "longer than --timeout.";

constexpr const char* kEngineBenchmarkExamples =
    "Examples:\n"
    "  troupe bench engine --json engine.json\n"
    "      the full run (about 10-30 s on 2 cores)\n"
    "  troupe bench engine --quick --json /tmp/smoke.json\n"
    "      tiny sizes: checks that the harness and the in-run checks pass\n"
    "  troupe bench engine --workers 1,2,4 --shards 1,2 --repeat 7 --json sweep.json\n"
    "      sweep worker and dependency-shard counts of the actor engine\n"
    "  troupe bench engine --engines actor,tbb --workloads chain --functions 1000000 --json chain.json\n"
    "      only the chain, only the actor engine and its TBB anchor\n"
    "  TROUPE_WORKER_SPIN_US=0 troupe bench engine --json nospin.json\n"
    "      TROUPE_* settings apply to the engines (the resolved config is in the JSON)";

void DeclareEngineBenchmarkOptions(EngineBenchOptions* o, BenchOptionList* options) {
  options->Add("--json", &o->json_path, "Write the results to FILE (pretty-printed JSON)").Required().TypeName("FILE");
  options
      ->Add("--functions", &o->functions,
            "Functions per workload run (default " + std::to_string(kDefaultFunctions) + ", " +
                std::to_string(kQuickFunctions) + " with --quick)")
      .Positive()
      .TypeName("N");
  options->Add("--workers", &o->workers, "Actor engine cpu_workers values to sweep; TBB gets the same thread counts")
      .Delimiter(',')
      .Range(1, 1024)
      .TypeName("LIST")
      .ShowDefault();
  options->Add("--shards", &o->shards, "RuntimeConfig::dependency_shards values to sweep")
      .Delimiter(',')
      .Range(1, 1024)
      .TypeName("LIST")
      .ShowDefault();
  options->Add("--readers", &o->readers, "Readers per writer in the reader_writer workload")
      .Range(1, 1024)
      .TypeName("K")
      .ShowDefault();
  options
      ->Add("--repeat", &o->repeat,
            "Timed repetitions per measurement; the median is reported, with min and max (default " +
                std::to_string(kDefaultRepeat) + ", 1 with --quick)")
      .Range(1, 1000)
      .TypeName("R");
  options->Add("--quick", &o->quick, "Tiny sizes, one repetition: a smoke run for CTest");
  options->Add("--profile", &o->profile,
               "Record every function's begin/end as the profiler does (compare with a run without it)");
  options->Add("--seed", &o->seed, "Seed of the random_mixed workload (default: drawn, printed and stored)")
      .TypeName("S");
  options->Add("--engines", &o->engines, "What to run: any of actor, naive, tbb")
      .Delimiter(',')
      .Choices({"actor", "naive", "tbb"})
      .TypeName("LIST")
      .ShowDefault();
  options->Add("--workloads", &o->workloads, "Which workloads: any of chain, independent, reader_writer, random_mixed")
      .Delimiter(',')
      .Choices(EngineBenchWorkloadGroups())
      .TypeName("LIST")
      .ShowDefault();
  options
      ->Add("--timeout", &o->run_timeout_s,
            "Seconds one run may take before it is reported as hung (JSON written, exit 3); 0: no limit")
      .NonNegative()
      .TypeName("SEC")
      .ShowDefault();
}

}  // namespace

Benchmark EngineBenchmark() {
  return MakeBenchmark<EngineBenchOptions>(
      "engine", "The dependency engine against a oneTBB flow graph",
      std::string(kEngineBenchmarkDescription) + "\n\n" + kEngineBenchmarkExamples + "\n",
      &DeclareEngineBenchmarkOptions, &RunEngineBench);
}

}  // namespace troupe::bench
