// Shared helpers for the engine suites: engine parameters, test sizes and seeds from the environment,
// bounded waits (no sleeps), a helper thread that completes async functions, and the randomized workload
// that is compared with a sequential model (MXNet's RandSumExpr, generalised).
//
// Environment:
//   TROUPE_TEST_SEED       seed of every randomized test (default: random; always printed as "seed=...")
//   TROUPE_TEST_SCALE      multiplier on test sizes (default 1; the TSan pass uses 0.05)
//   TROUPE_TEST_FUNCTIONS  function count of the conformance test (default 100000 x scale)
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "actors/config.h"
#include "base/context.h"
#include "base/error.h"
#include "engine/engine.h"
#include "tests/common/test_params.h"

namespace troupe {
namespace engine_test {

using namespace std::chrono_literals;

using namespace ::troupe::test;  // sizes, seeds and engine parameters (tests/common/test_params.h)

inline constexpr Context kCpu = Context::CPU(0);

// ------------------------------------------------------------------------------------ synchronisation
// A one-shot gate: functions wait on it (bounded), the test opens it.
class Gate {
 public:
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  bool IsOpen() const {
    std::lock_guard<std::mutex> lock(mu_);
    return open_;
  }
  // Returns false when the gate did not open within `timeout`.
  bool WaitFor(std::chrono::milliseconds timeout = kLongWait) const {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return open_; });
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool open_ = false;
};

// Condition polling with std::this_thread::yield(), bounded by `timeout`. Returns whether pred became true.
template <class Pred>
bool WaitUntil(Pred pred, std::chrono::milliseconds timeout = kLongWait) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return pred();
    std::this_thread::yield();
  }
  return true;
}

// Threads the tests spawn to run closures later (async functions' completions). Declare it before the
// engine so that it outlives it. The destructor runs what is still queued, then joins.
class Completer {
 public:
  explicit Completer(int threads = 1) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~Completer() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  Completer(const Completer&) = delete;
  Completer& operator=(const Completer&) = delete;

  void Post(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(fn));
    }
    cv_.notify_one();
  }

 private:
  void Loop() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      fn();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// ------------------------------------------------------------------------------------------------ misc
// A non-commutative 64-bit mixing function (splitmix64 finaliser over an asymmetric combination).
inline std::uint64_t Mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a * 0x9E3779B97F4A7C15ULL + (b ^ 0xD1B54A32D192ED03ULL) + (a >> 29);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Some CPU work that the optimiser cannot remove.
inline std::uint64_t Spin(std::uint64_t iterations, std::uint64_t x = 1) {
  for (std::uint64_t i = 0; i < iterations; ++i) x = Mix(x, i);
  return x;
}

// Sum of lane `lane`'s queued count over every device entry for `ctx`.
inline std::size_t QueuedOn(const Engine& engine, Context ctx, Lane lane) {
  std::size_t n = 0;
  for (const auto& d : engine.Stats().devices)
    if (d.ctx == ctx) n += d.lanes[static_cast<int>(lane)].queued;
  return n;
}

// Waits (bounded) until the engine reports no pending function; Stats may lag a WaitForAll by a little.
inline bool WaitNoPending(const Engine& engine) {
  return WaitUntil([&] { return engine.Stats().pending == 0; }, 10s);
}

// --------------------------------------------------------------------------- randomized workload
struct WorkloadOptions {
  std::size_t num_vars = 100;
  std::size_t num_functions = 10000;
  std::uint64_t seed = 1;
  int max_reads = 4;
  int max_writes = 3;
  double p_async = 0.25;        // PushAsync (otherwise PushSync) for functions that are not operator pushes
  double p_async_inline = 0.3;  // of the async ones: callback called inline (otherwise from the Completer)
  double p_new_op = 0.02;       // a new pre-built operator (pushed 2..5 times, then deleted)
  double p_op_push = 0.08;      // a further push of a live operator
  double p_prioritized = 0.05;  // kCPUPrioritized
  double p_other_cpu = 0.05;    // run on cpu(1) instead of cpu(0)
  double p_hot = 0.3;           // pick a variable among the first few (long chains, big reader groups)
  std::size_t checks = 20;      // WaitForVar checks against the model while pushing
};

// Pushes random functions over random variables and compares the result with a sequential model.
//
// Model: every variable holds a uint64. Function i with read set R (deduplicated, minus its writes) and
// write set W (deduplicated) computes h = Mix(..Mix(Mix(K, i), value(r0))..., value(rk)) over R in increasing
// variable order, records h as its result, and sets value(w) = Mix(value(w), h) for each w in W (increasing
// order). The outcome is a deterministic function of the push sequence iff the engine honours the rule.
// Also checked: each function ran exactly once, each variable's version() == number of functions that wrote
// it, WaitForVar(v) in the middle of the push sequence sees v's model value, and the RunContext.
//
// Only EXPECT_* are used, so Run() may be called from any thread.
class RandomWorkload {
 public:
  RandomWorkload(Engine* engine, Completer* completer, WorkloadOptions options)
      : engine_(engine), completer_(completer), opt_(options), rng_(options.seed) {}

  void Run();

 private:
  struct FnSpec {
    std::vector<std::uint32_t> reads;   // sorted, unique, disjoint from writes
    std::vector<std::uint32_t> writes;  // sorted, unique
  };
  struct OpSpec {
    FnSpec spec;
    std::unique_ptr<std::uint32_t[]> fn_index;  // function index of each push, written before the push
    int pushes_planned = 0;
    int pushes_done = 0;
    int next_run = 0;  // touched only inside the operator's function (serialised by its writes)
    OprHandle handle = nullptr;
    Context ctx;
  };

  std::uint32_t PickVar() {
    std::uniform_real_distribution<double> u(0, 1);
    std::size_t hot = std::min<std::size_t>(5, opt_.num_vars);
    if (u(rng_) < opt_.p_hot) return static_cast<std::uint32_t>(rng_() % hot);
    return static_cast<std::uint32_t>(rng_() % opt_.num_vars);
  }

  // Random raw lists (with duplicates, and variables both read and written) and their canonical spec.
  void RandomLists(std::vector<VarHandle>* reads, std::vector<VarHandle>* writes, FnSpec* spec, bool need_write) {
    std::uniform_int_distribution<int> nr(0, opt_.max_reads), nw(need_write ? 1 : 0, opt_.max_writes);
    std::vector<std::uint32_t> r, w;
    int n_reads = nr(rng_), n_writes = nw(rng_);
    for (int i = 0; i < n_reads; ++i) r.push_back(PickVar());
    for (int i = 0; i < n_writes; ++i) w.push_back(PickVar());
    std::uniform_real_distribution<double> u(0, 1);
    if (!w.empty() && u(rng_) < 0.15) r.push_back(w[rng_() % w.size()]);  // read and written
    if (!w.empty() && u(rng_) < 0.10) w.push_back(w[rng_() % w.size()]);  // written twice
    if (!r.empty() && u(rng_) < 0.10) r.push_back(r[rng_() % r.size()]);  // read twice
    std::shuffle(r.begin(), r.end(), rng_);
    std::shuffle(w.begin(), w.end(), rng_);
    for (auto i : r) reads->push_back(vars_[i]);
    for (auto i : w) writes->push_back(vars_[i]);
    spec->writes = w;
    std::sort(spec->writes.begin(), spec->writes.end());
    spec->writes.erase(std::unique(spec->writes.begin(), spec->writes.end()), spec->writes.end());
    std::sort(r.begin(), r.end());
    r.erase(std::unique(r.begin(), r.end()), r.end());
    for (auto i : r)
      if (!std::binary_search(spec->writes.begin(), spec->writes.end(), i)) spec->reads.push_back(i);
  }

  // Runs function `index` on the real values (called by the engine).
  void Body(std::uint32_t index, const FnSpec& spec, RunContext rctx, Context expected) {
    if (!(rctx.ctx == expected) || rctx.stream != nullptr) bad_run_context_.fetch_add(1);
    std::uint64_t h = Mix(0x5EED, index);
    for (auto r : spec.reads) h = Mix(h, values_[r]);
    results_[index] = h;
    for (auto w : spec.writes) values_[w] = Mix(values_[w], h);
    runs_[index].fetch_add(1, std::memory_order_relaxed);
  }

  // Applies function `index` to the model (called by the pushing thread, in push order).
  void Model(std::uint32_t index, const FnSpec& spec) {
    std::uint64_t h = Mix(0x5EED, index);
    for (auto r : spec.reads) h = Mix(h, model_values_[r]);
    model_results_[index] = h;
    for (auto w : spec.writes) {
      model_values_[w] = Mix(model_values_[w], h);
      ++model_writes_[w];
    }
  }

  Engine* engine_;
  Completer* completer_;
  WorkloadOptions opt_;
  std::mt19937_64 rng_;
  std::vector<VarHandle> vars_;
  std::vector<std::uint64_t> values_, model_values_, model_writes_;
  std::vector<std::uint64_t> results_, model_results_;
  std::unique_ptr<std::atomic<std::uint32_t>[]> runs_;
  std::vector<FnSpec> specs_;  // sized up front: functions hold pointers into it
  std::atomic<std::uint64_t> bad_run_context_{0};
};

inline void RandomWorkload::Run() {
  const std::size_t n_vars = opt_.num_vars, n_fns = opt_.num_functions;
  for (std::size_t i = 0; i < n_vars; ++i) vars_.push_back(engine_->NewVariable());
  for (auto v : vars_) EXPECT_EQ(v->version(), 0u);
  values_.assign(n_vars, 0);
  model_values_.assign(n_vars, 0);
  for (std::size_t i = 0; i < n_vars; ++i) values_[i] = model_values_[i] = Mix(opt_.seed, i);
  model_writes_.assign(n_vars, 0);
  results_.assign(n_fns, 0);
  model_results_.assign(n_fns, 0);
  runs_ = std::make_unique<std::atomic<std::uint32_t>[]>(n_fns);
  specs_.resize(n_fns);

  std::vector<std::unique_ptr<OpSpec>> ops;  // every operator ever made (owned until the end)
  std::vector<OpSpec*> live;                 // operators with pushes left
  std::uniform_real_distribution<double> u(0, 1);
  std::uniform_int_distribution<int> prio(-5, 10);
  const std::size_t check_every = opt_.checks > 0 ? std::max<std::size_t>(1, n_fns / (opt_.checks + 1)) : 0;
  int model_mismatch_reports = 0;

  for (std::uint32_t index = 0; index < n_fns; ++index) {
    const double r = u(rng_);
    const int priority = prio(rng_);
    const Context ctx = u(rng_) < opt_.p_other_cpu ? Context::CPU(1) : Context::CPU(0);
    if (r < opt_.p_new_op || (r < opt_.p_new_op + opt_.p_op_push && !live.empty())) {
      OpSpec* op;
      if (r < opt_.p_new_op) {
        auto owned = std::make_unique<OpSpec>();
        op = owned.get();
        ops.push_back(std::move(owned));
        std::vector<VarHandle> reads, writes;
        // An operator writes at least one variable, so its pushes are serialised and next_run is exact.
        RandomLists(&reads, &writes, &op->spec, /*need_write=*/true);
        op->pushes_planned = 2 + static_cast<int>(rng_() % 4);
        op->fn_index = std::make_unique<std::uint32_t[]>(op->pushes_planned);
        op->ctx = ctx;
        FnProperty prop = u(rng_) < opt_.p_prioritized ? FnProperty::kCPUPrioritized : FnProperty::kNormal;
        const bool inline_cb = u(rng_) < 0.5;
        op->handle = engine_->NewOperator(
            [this, op, inline_cb](RunContext rctx, CallbackOnComplete cb) {
              const std::uint32_t fn = op->fn_index[op->next_run++];
              if (inline_cb || completer_ == nullptr) {
                Body(fn, op->spec, rctx, op->ctx);
                cb();
              } else {
                completer_->Post([this, op, fn, rctx, cb] {
                  Body(fn, op->spec, rctx, op->ctx);
                  cb();
                });
              }
            },
            reads, writes, prop, "random_op");
        live.push_back(op);
      } else {
        op = live[rng_() % live.size()];
      }
      op->fn_index[op->pushes_done++] = index;
      Model(index, op->spec);
      engine_->Push(op->handle, op->ctx, priority);
      if (op->pushes_done == op->pushes_planned) {
        engine_->DeleteOperator(op->handle);  // deferred: earlier pushes still run
        live.erase(std::find(live.begin(), live.end(), op));
      }
    } else {
      FnSpec* spec = &specs_[index];
      std::vector<VarHandle> reads, writes;
      RandomLists(&reads, &writes, spec, /*need_write=*/false);
      Model(index, *spec);
      const bool prioritized = u(rng_) < opt_.p_prioritized;
      if (u(rng_) < opt_.p_async) {
        const bool inline_cb = completer_ == nullptr || u(rng_) < opt_.p_async_inline;
        FnProperty prop =
            prioritized ? FnProperty::kCPUPrioritized : (u(rng_) < 0.5 ? FnProperty::kAsync : FnProperty::kNormal);
        engine_->PushAsync(
            [this, index, spec, ctx, inline_cb](RunContext rctx, CallbackOnComplete cb) {
              if (inline_cb) {
                Body(index, *spec, rctx, ctx);
                cb();
              } else {
                completer_->Post([this, index, spec, ctx, rctx, cb] {
                  Body(index, *spec, rctx, ctx);
                  cb();
                });
              }
            },
            ctx, reads, writes, prop, priority, "random_async");
      } else {
        FnProperty prop = prioritized ? FnProperty::kCPUPrioritized : FnProperty::kNormal;
        engine_->PushSync([this, index, spec, ctx](RunContext rctx) { Body(index, *spec, rctx, ctx); }, ctx, reads,
                          writes, prop, priority, "random_sync");
      }
    }

    if (check_every > 0 && (index + 1) % check_every == 0) {
      // Everything pushed so far on v has finished: v holds its model value (only this thread pushes).
      const std::uint32_t v = PickVar();
      engine_->WaitForVar(vars_[v]);
      if (values_[v] != model_values_[v] || vars_[v]->version() != model_writes_[v]) {
        if (model_mismatch_reports++ < 5)
          ADD_FAILURE() << "after WaitForVar(var " << v << ") at function " << index << " (seed " << opt_.seed
                        << "): value " << values_[v] << " expected " << model_values_[v] << ", version "
                        << vars_[v]->version() << " expected " << model_writes_[v];
      }
    }
  }
  for (OpSpec* op : live) engine_->DeleteOperator(op->handle);
  live.clear();
  engine_->WaitForAll();

  std::size_t bad = 0;
  for (std::size_t i = 0; i < n_fns; ++i) {
    const std::uint32_t runs = runs_[i].load();
    if ((runs != 1 || results_[i] != model_results_[i]) && bad++ < 5)
      ADD_FAILURE() << "function " << i << " (seed " << opt_.seed << "): ran " << runs << " times, result "
                    << results_[i] << " expected " << model_results_[i]
                    << " (it read a variable before or after the function it had to follow)";
  }
  EXPECT_EQ(bad, 0u) << "functions with a wrong result or run count (seed " << opt_.seed << ")";
  std::size_t bad_vars = 0;
  for (std::size_t v = 0; v < n_vars; ++v) {
    if (values_[v] != model_values_[v] && bad_vars++ < 5)
      ADD_FAILURE() << "var " << v << " (seed " << opt_.seed << "): value " << values_[v] << " expected "
                    << model_values_[v];
    EXPECT_EQ(vars_[v]->version(), model_writes_[v]) << "version of var " << v << " (seed " << opt_.seed << ")";
  }
  EXPECT_EQ(bad_vars, 0u) << "variables with a wrong final value (seed " << opt_.seed << ")";
  EXPECT_EQ(bad_run_context_.load(), 0u) << "functions run with a wrong RunContext";

  std::atomic<std::size_t> deleted{0};
  for (auto v : vars_) engine_->DeleteVariable([&deleted](RunContext) { deleted.fetch_add(1); }, kCpu, v);
  vars_.clear();
  engine_->WaitForAll();
  EXPECT_EQ(deleted.load(), n_vars);
}

}  // namespace engine_test
}  // namespace troupe
