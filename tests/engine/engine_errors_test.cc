// Errors in the engine: a function's exception (or an async callback's error) poisons the variables it
// writes; functions touching a poisoned variable are skipped (and poison what they write) unless kNoSkip or
// kDeleteVar; WaitForVar rethrows a variable's error once and clears it; WaitForAll rethrows the first
// error since the previous WaitForAll unless WaitForVar already did; the engine keeps working.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "engine/engine.h"
#include "tests/common/scoped_env.h"
#include "tests/engine/test_util.h"

namespace troupe {
namespace {

using engine_test::AllEngines;
using engine_test::Completer;
using engine_test::EngineParam;
using engine_test::EngineParamName;
using engine_test::kCpu;
using engine_test::MakeEngine;
using engine_test::Mix;
using engine_test::RandomWorkload;
using engine_test::Scaled;
using engine_test::TestSeed;
using engine_test::WaitNoPending;
using engine_test::WorkloadOptions;

// An exception type of the test's own, to check that the engine rethrows the very exception (type and
// message), not a copy sliced to std::exception or wrapped in troupe::Error.
struct TestError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Calls f and returns the message of the TestError it throws; "" when it throws nothing. Any other
// exception type fails the test.
template <class F>
std::string CatchTestError(F&& f) {
  try {
    f();
  } catch (const TestError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected a TestError, got another exception: " << e.what();
    return "<wrong type>";
  } catch (...) {
    ADD_FAILURE() << "expected a TestError, got an exception of another type";
    return "<wrong type>";
  }
  return "";
}

class EngineErrors : public ::testing::TestWithParam<EngineParam> {
 protected:
  void SetUp() override {
    engine_ = MakeEngine(GetParam());
    ASSERT_NE(engine_, nullptr);
  }
  std::string WaitVar(VarHandle v) {
    return CatchTestError([&] { engine_->WaitForVar(v); });
  }
  std::string WaitAll() {
    return CatchTestError([&] { engine_->WaitForAll(); });
  }
  void Throw(const std::string& what, std::vector<VarHandle> reads, std::vector<VarHandle> writes,
             FnProperty prop = FnProperty::kNormal) {
    EXPECT_NO_THROW(engine_->PushSync([what](RunContext) { throw TestError(what); }, kCpu, reads, writes, prop))
        << "a function's exception must not escape from Push";
  }

  Completer completer_{1};  // declared before the engine: outlives it
  std::unique_ptr<Engine> engine_;
};

TEST_P(EngineErrors, SyncThrowPoisonsWrittenVarsAndWaitForVarRethrows) {
  VarHandle x = engine_->NewVariable(), y = engine_->NewVariable(), z = engine_->NewVariable();
  Throw("sync boom", {z}, {x, y});
  EXPECT_EQ(WaitVar(x), "sync boom");
  EXPECT_EQ(WaitVar(y), "sync boom") << "every written variable is poisoned";
  EXPECT_EQ(WaitVar(z), "") << "a variable the failed function only read is not poisoned";
  EXPECT_EQ(WaitAll(), "") << "an error rethrown by WaitForVar must not be rethrown by WaitForAll";
}

// Scratch variables (temporary space, generator state) order their users but carry no value between them: a
// failure must not skip every later user of the temporary space.
TEST_P(EngineErrors, AFailureNeverPoisonsAScratchVariable) {
  VarHandle out = engine_->NewVariable(), scratch = engine_->NewVariable(Engine::VarKind::kScratch);
  Throw("failed holding the scratch space", {}, {out, scratch});
  int ran = 0;
  VarHandle later = engine_->NewVariable();
  engine_->PushSync([&](RunContext) { ran = 1; }, kCpu, {}, {later, scratch});
  EXPECT_EQ(WaitVar(later), "") << "a later user of the scratch variable was skipped";
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(WaitVar(scratch), "");
  EXPECT_EQ(WaitVar(out), "failed holding the scratch space") << "the value it wrote is still poisoned";
  // A skipped function (it read a poisoned value) does not poison the scratch variable either.
  Throw("again", {}, {out});
  engine_->PushSync([](RunContext) {}, kCpu, {out}, {later, scratch});
  EXPECT_EQ(WaitVar(later), "again");
  EXPECT_EQ(WaitVar(scratch), "");
  EXPECT_EQ(WaitAll(), "") << "both errors were rethrown by WaitForVar";
}

TEST_P(EngineErrors, ExceptionTypeIsPreserved) {
  VarHandle a = engine_->NewVariable(), b = engine_->NewVariable(), c = engine_->NewVariable();
  engine_->PushSync([](RunContext) { throw Error("troupe error"); }, kCpu, {}, {a});
  engine_->PushSync([](RunContext) { throw 42; }, kCpu, {}, {b});
  engine_->PushSync([](RunContext) { throw std::out_of_range("range"); }, kCpu, {}, {c}, FnProperty::kCPUPrioritized);
  try {
    engine_->WaitForVar(a);
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "troupe error");
  } catch (...) {
    ADD_FAILURE() << "wrong exception type";
  }
  try {
    engine_->WaitForVar(b);
    ADD_FAILURE() << "no exception";
  } catch (int v) {
    EXPECT_EQ(v, 42);
  } catch (...) {
    ADD_FAILURE() << "wrong exception type";
  }
  EXPECT_THROW(engine_->WaitForVar(c), std::out_of_range);
  EXPECT_NO_THROW(engine_->WaitForAll());
}

TEST_P(EngineErrors, AsyncCallbackErrorFromAnotherThread) {
  VarHandle x = engine_->NewVariable(), y = engine_->NewVariable();
  // A thread of the test's own reports the failure once the function has handed it the callback. It starts
  // before the push: the naive engine may wait inside PushAsync until the callback is called.
  std::mutex mu;
  std::condition_variable cv;
  std::optional<CallbackOnComplete> slot;
  std::atomic<bool> called{false};
  std::thread helper([&] {
    std::unique_lock<std::mutex> lock(mu);
    if (!cv.wait_for(lock, engine_test::kLongWait, [&] { return slot.has_value(); })) return;
    CallbackOnComplete cb = *slot;
    lock.unlock();
    called = true;
    cb(std::make_exception_ptr(TestError("async boom")));
  });
  engine_->PushAsync(
      [&](RunContext, CallbackOnComplete cb) {
        {
          std::lock_guard<std::mutex> lock(mu);
          slot = cb;
        }
        cv.notify_all();
      },
      kCpu, {y}, {x});
  EXPECT_EQ(WaitVar(x), "async boom");
  EXPECT_TRUE(called.load()) << "WaitForVar returned before the callback was called";
  helper.join();
  EXPECT_EQ(WaitVar(y), "");
  EXPECT_EQ(WaitAll(), "");

  // Inline error, and an error from the Completer thread.
  engine_->PushAsync([](RunContext, CallbackOnComplete cb) { cb(std::make_exception_ptr(TestError("inline"))); }, kCpu,
                     {}, {x}, FnProperty::kAsync);
  EXPECT_EQ(WaitVar(x), "inline");
  engine_->PushAsync(
      [this](RunContext, CallbackOnComplete cb) {
        completer_.Post([cb] { cb(std::make_exception_ptr(TestError("completer"))); });
      },
      kCpu, {}, {y});
  EXPECT_EQ(WaitAll(), "completer");
  EXPECT_EQ(WaitAll(), "");
}

TEST_P(EngineErrors, PoisonPropagatesAlongAChainAndSkippedFunctionsDoNotRun) {
  VarHandle x = engine_->NewVariable(), y = engine_->NewVariable(), w = engine_->NewVariable();
  VarHandle other = engine_->NewVariable();
  std::atomic<int> b_ran{0}, c_ran{0}, d_ran{0}, other_ran{0};
  const EngineStats before = engine_->Stats();
  Throw("A failed", {}, {x});                                                    // A
  engine_->PushSync([&](RunContext) { b_ran++; }, kCpu, {x}, {y});               // B: skipped, poisons y
  engine_->PushAsync([&](RunContext, CallbackOnComplete cb) { c_ran++, cb(); },  // C: skipped, poisons w
                     kCpu, {y, other}, {w});
  engine_->PushSync([&](RunContext) { d_ran++; }, kCpu, {}, {w});          // D: writes w: skipped
  engine_->PushSync([&](RunContext) { other_ran++; }, kCpu, {}, {other});  // unrelated: runs
  EXPECT_EQ(WaitVar(y), "A failed") << "B must be skipped and poison y with A's error";
  EXPECT_EQ(WaitVar(w), "A failed") << "C must be skipped and poison w with A's error";
  EXPECT_EQ(WaitVar(x), "A failed");
  EXPECT_EQ(WaitVar(other), "");
  EXPECT_EQ(WaitAll(), "");
  EXPECT_EQ(b_ran.load(), 0) << "a function reading a poisoned variable ran";
  EXPECT_EQ(c_ran.load(), 0) << "a function reading a poisoned variable ran";
  EXPECT_EQ(d_ran.load(), 0) << "a function writing a poisoned variable ran";
  EXPECT_EQ(other_ran.load(), 1);
  EXPECT_TRUE(WaitNoPending(*engine_));
  EXPECT_EQ(engine_->Stats().skipped - before.skipped, 3u) << "Stats().skipped counts B, C and D";
  EXPECT_EQ(other->version(), 1u);
}

TEST_P(EngineErrors, NoSkipFunctionRunsOnPoisonedVariable) {
  VarHandle x = engine_->NewVariable(), y = engine_->NewVariable();
  std::atomic<int> ran{0}, async_ran{0};
  Throw("poison", {}, {x});
  engine_->PushSync([&](RunContext) { ran++; }, kCpu, {x}, {y}, FnProperty::kNoSkip);
  engine_->PushAsync(
      [&](RunContext, CallbackOnComplete cb) {
        completer_.Post([&, cb] {
          async_ran++;
          cb();
        });
      },
      kCpu, {x}, {}, FnProperty::kNoSkip);
  (void)CatchTestError([&] { engine_->WaitForVar(y); });  // y's error state is not part of the contract
  EXPECT_EQ(WaitVar(x), "poison");
  EXPECT_EQ(ran.load(), 1) << "a kNoSkip function was skipped";
  EXPECT_EQ(async_ran.load(), 1) << "a kNoSkip async function was skipped";
  try {
    engine_->WaitForAll();
  } catch (...) {
  }
}

TEST_P(EngineErrors, WaitForVarRethrowsOnceThenTheVariableIsUsable) {
  VarHandle x = engine_->NewVariable();
  std::atomic<int> ran{0};
  Throw("once", {}, {x});
  EXPECT_EQ(WaitVar(x), "once");
  EXPECT_EQ(WaitVar(x), "") << "the error must be rethrown once";
  const std::uint64_t version = x->version();
  engine_->PushSync([&](RunContext) { ran++; }, kCpu, {}, {x});
  engine_->PushSync([&](RunContext) { ran++; }, kCpu, {x}, {});
  EXPECT_EQ(WaitVar(x), "");
  EXPECT_EQ(ran.load(), 2) << "a write after the rethrow must run (the poison is cleared)";
  EXPECT_EQ(x->version(), version + 1);
  EXPECT_EQ(WaitAll(), "");
}

TEST_P(EngineErrors, WaitForAllRethrowsTheFirstErrorOnce) {
  VarHandle x = engine_->NewVariable(), y = engine_->NewVariable();
  Throw("first", {}, {x});
  // Runs after "first" (it reads x; kNoSkip so that it runs), then fails too.
  Throw("second", {x}, {y}, FnProperty::kNoSkip);
  EXPECT_EQ(WaitAll(), "first");
  EXPECT_EQ(WaitAll(), "") << "WaitForAll rethrows an error once";
  // Read-only failing function: poisons nothing, so only WaitForAll reports it.
  VarHandle z = engine_->NewVariable();
  Throw("reader failed", {z}, {});
  EXPECT_EQ(WaitVar(z), "");
  EXPECT_EQ(WaitAll(), "reader failed");
  EXPECT_EQ(WaitAll(), "");
}

TEST_P(EngineErrors, ErrorRethrownByWaitForVarIsNotRethrownByWaitForAll) {
  VarHandle x = engine_->NewVariable();
  Throw("seen", {}, {x});
  EXPECT_EQ(WaitVar(x), "seen");
  EXPECT_EQ(WaitAll(), "");
  // Async variant.
  engine_->PushAsync(
      [this](RunContext, CallbackOnComplete cb) {
        completer_.Post([cb] { cb(std::make_exception_ptr(TestError("seen async"))); });
      },
      kCpu, {}, {x});
  EXPECT_EQ(WaitVar(x), "seen async");
  EXPECT_EQ(WaitAll(), "");
}

TEST_P(EngineErrors, OperatorErrorPoisonsAndLaterPushesAreSkipped) {
  VarHandle r = engine_->NewVariable(), w = engine_->NewVariable();
  std::atomic<int> runs{0};
  OprHandle op = engine_->NewOperator(
      [&](RunContext, CallbackOnComplete cb) {
        if (++runs == 2) {
          cb(std::make_exception_ptr(TestError("op push 2")));
        } else {
          cb();
        }
      },
      {r}, {w});
  for (int i = 0; i < 4; ++i) engine_->Push(op, kCpu);
  EXPECT_EQ(WaitVar(w), "op push 2");
  EXPECT_EQ(runs.load(), 2) << "pushes 3 and 4 write a poisoned variable and must be skipped";
  engine_->Push(op, kCpu);
  engine_->DeleteOperator(op);
  EXPECT_EQ(WaitVar(w), "");
  EXPECT_EQ(runs.load(), 3);
  EXPECT_EQ(WaitAll(), "");
}

TEST_P(EngineErrors, DeleteVariableRunsOnPoisonedVariable) {
  VarHandle x = engine_->NewVariable();
  std::atomic<int> deleted{0}, skipped_ran{0};
  Throw("before delete", {}, {x});
  engine_->PushSync([&](RunContext) { skipped_ran++; }, kCpu, {x}, {});
  engine_->DeleteVariable([&](RunContext) { deleted++; }, kCpu, x);
  EXPECT_EQ(WaitAll(), "before delete");
  EXPECT_EQ(deleted.load(), 1) << "kDeleteVar functions are never skipped";
  EXPECT_EQ(skipped_ran.load(), 0);
}

TEST_P(EngineErrors, CallbackCalledTwiceIsHarmless) {
  VarHandle v = engine_->NewVariable();
  std::vector<int> order;
  // Twice inline.
  engine_->PushAsync(
      [&](RunContext, CallbackOnComplete cb) {
        order.push_back(1);
        cb();
        cb();
      },
      kCpu, {}, {v});
  // Twice from another thread, while the function is still running (it joins that thread).
  engine_->PushAsync(
      [&](RunContext, CallbackOnComplete cb) {
        order.push_back(2);
        std::thread t([cb] {
          cb();
          cb();
        });
        t.join();
      },
      kCpu, {}, {v});
  for (int i = 3; i < 40; ++i) engine_->PushSync([&order, i](RunContext) { order.push_back(i); }, kCpu, {v}, {v});
  try {
    engine_->WaitForVar(v);
  } catch (...) {
  }
  try {
    engine_->WaitForAll();
  } catch (...) {
  }
  std::vector<int> expected;
  for (int i = 1; i < 40; ++i) expected.push_back(i);
  EXPECT_EQ(order, expected) << "a second callback call disturbed the order of later functions";
  EXPECT_EQ(v->version(), 39u) << "each function's write counts once";
  // A success, then an error: the second call is ignored or reported, never a crash.
  VarHandle u = engine_->NewVariable();
  std::atomic<int> ran{0};
  engine_->PushAsync(
      [&](RunContext, CallbackOnComplete cb) {
        ran++;
        cb();
        cb(std::make_exception_ptr(TestError("late")));
      },
      kCpu, {}, {u});
  try {
    engine_->WaitForVar(u);
  } catch (...) {
  }
  try {
    engine_->WaitForAll();
  } catch (...) {
  }
  EXPECT_EQ(ran.load(), 1);
  // The engine still works.
  engine_->PushSync([&](RunContext) { ran++; }, kCpu, {}, {v});
  EXPECT_EQ(WaitVar(v), "");
  EXPECT_EQ(ran.load(), 2);
  EXPECT_EQ(v->version(), 40u);
}

// Random functions, some of which fail (sync throw or async callback error), compared with a model of
// poisoning: a function runs iff no variable it touches is poisoned (or it is a kNoSkip reader); a failing
// function poisons what it writes with its error; a skipped one poisons what it writes with one of the
// errors it met. WaitForVar rethrows (and clears) exactly the poisoned variables' errors.
TEST_P(EngineErrors, RandomFailuresMatchPoisonModel) {
  const std::uint64_t seed = TestSeed();
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  constexpr int kVars = 30;
  const std::uint32_t n = static_cast<std::uint32_t>(Scaled(20000, 500));
  std::vector<VarHandle> vars;
  for (int i = 0; i < kVars; ++i) vars.push_back(engine_->NewVariable());
  std::vector<std::uint64_t> values(kVars, 0), model(kVars, 0);
  std::vector<std::set<std::uint32_t>> poison(kVars);  // errors a poisoned variable may hold
  std::vector<std::uint64_t> results(n, 0), model_results(n, 0);
  auto runs = std::make_unique<std::atomic<std::uint32_t>[]>(n);
  std::vector<bool> model_runs(n, false);
  std::uint64_t model_skipped = 0;
  std::set<std::uint32_t> failed;
  int reports = 0;
  const std::uint64_t skipped_before = engine_->Stats().skipped;

  auto check_var = [&](int v, const char* when) {
    const std::string got = WaitVar(vars[v]);
    if (poison[v].empty()) {
      if (!got.empty() && reports++ < 5)
        ADD_FAILURE() << when << ": var " << v << " threw '" << got << "' but is not poisoned (seed " << seed << ")";
    } else {
      bool known = false;
      for (auto e : poison[v]) known |= got == "fn " + std::to_string(e);
      if (!known && reports++ < 5)
        ADD_FAILURE() << when << ": var " << v << " threw '" << got << "', expected the error of one of "
                      << poison[v].size() << " failed functions, e.g. fn " << *poison[v].begin() << " (seed " << seed
                      << ")";
    }
    if (values[v] != model[v] && reports++ < 5)
      ADD_FAILURE() << when << ": var " << v << " has a wrong value (seed " << seed << ")";
    poison[v].clear();
  };

  for (std::uint32_t i = 0; i < n; ++i) {
    std::vector<int> r, w;
    for (int k = static_cast<int>(rng() % 3); k > 0; --k) r.push_back(static_cast<int>(rng() % kVars));
    for (int k = static_cast<int>(rng() % 3); k > 0; --k) w.push_back(static_cast<int>(rng() % kVars));
    if (!w.empty() && u(rng) < 0.1) r.push_back(w[0]);
    std::set<int> ws(w.begin(), w.end()), rs;
    for (int x : r)
      if (!ws.count(x)) rs.insert(x);
    const bool no_skip = ws.empty() && u(rng) < 0.2;  // kNoSkip only for readers (see above)
    // Only writers fail: a failing reader's error reaches WaitForAll alone, which this model leaves out.
    const bool fails = !ws.empty() && u(rng) < 0.01;
    const bool async = u(rng) < 0.3;
    const bool via_completer = async && u(rng) < 0.5;

    // Model.
    std::set<std::uint32_t> met;
    for (int x : rs) met.insert(poison[x].begin(), poison[x].end());
    for (int x : ws) met.insert(poison[x].begin(), poison[x].end());
    const bool skip = !met.empty() && !no_skip;
    if (skip) {
      ++model_skipped;
      for (int x : ws) poison[x].insert(met.begin(), met.end());
    } else {
      model_runs[i] = true;
      if (fails) {
        failed.insert(i);
        for (int x : ws) poison[x] = {i};
      } else {
        std::uint64_t h = Mix(7, i);
        for (int x : rs) h = Mix(h, model[x]);
        model_results[i] = h;
        for (int x : ws) model[x] = Mix(model[x], h);
      }
    }

    // The function: fails before touching any value, otherwise as in the model.
    std::vector<int> rv(rs.begin(), rs.end()), wv(ws.begin(), ws.end());
    auto body = [&values, &results, &runs, i, rv, wv, fails]() -> std::exception_ptr {
      runs[i].fetch_add(1);
      if (fails) return std::make_exception_ptr(TestError("fn " + std::to_string(i)));
      std::uint64_t h = Mix(7, i);
      for (int x : rv) h = Mix(h, values[x]);
      results[i] = h;
      for (int x : wv) values[x] = Mix(values[x], h);
      return nullptr;
    };
    std::vector<VarHandle> reads, writes;
    for (int x : r) reads.push_back(vars[x]);
    for (int x : w) writes.push_back(vars[x]);
    const FnProperty prop = no_skip ? FnProperty::kNoSkip : FnProperty::kNormal;
    if (!async) {
      engine_->PushSync(
          [body](RunContext) {
            if (auto e = body()) std::rethrow_exception(e);
          },
          kCpu, reads, writes, prop, static_cast<int>(i % 4));
    } else if (!via_completer) {
      engine_->PushAsync([body](RunContext, CallbackOnComplete cb) { cb(body()); }, kCpu, reads, writes, prop);
    } else {
      engine_->PushAsync(
          [this, body](RunContext, CallbackOnComplete cb) { completer_.Post([body, cb] { cb(body()); }); }, kCpu, reads,
          writes, prop);
    }

    if (i % 1000 == 999) check_var(static_cast<int>(rng() % kVars), "during the run");
  }
  for (int v = 0; v < kVars; ++v) check_var(v, "at the end");
  // Every error reached some variable; if a skipped function replaced a variable's error by another one,
  // an error may not have been rethrown by WaitForVar, and WaitForAll may report it.
  const std::string all = WaitAll();
  bool known = all.empty();
  for (auto e : failed) known |= all == "fn " + std::to_string(e);
  EXPECT_TRUE(known) << "WaitForAll threw '" << all << "', which no function threw";
  EXPECT_EQ(WaitAll(), "");

  std::size_t bad = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint32_t ran = runs[i].load();
    if ((ran != (model_runs[i] ? 1u : 0u) || results[i] != model_results[i]) && bad++ < 5)
      ADD_FAILURE() << "fn " << i << ": ran " << ran << " times, expected " << model_runs[i] << "; result "
                    << results[i] << " expected " << model_results[i] << " (seed " << seed << ")";
  }
  EXPECT_EQ(bad, 0u) << "functions run or skipped against the model (seed " << seed << ")";
  EXPECT_TRUE(WaitNoPending(*engine_));
  EXPECT_EQ(engine_->Stats().skipped - skipped_before, model_skipped);

  // The variables are clean again: a write to each runs.
  std::atomic<int> ran{0};
  for (auto v : vars) engine_->PushSync([&](RunContext) { ran++; }, kCpu, {}, {v});
  EXPECT_EQ(WaitAll(), "");
  EXPECT_EQ(ran.load(), kVars);
}

TEST_P(EngineErrors, EngineKeepsWorkingAfterErrors) {
  VarHandle x = engine_->NewVariable(), y = engine_->NewVariable();
  for (int i = 0; i < 10; ++i) Throw("burst " + std::to_string(i), {y}, {x});
  engine_->PushAsync([](RunContext, CallbackOnComplete cb) { cb(std::make_exception_ptr(TestError("async"))); }, kCpu,
                     {}, {y});
  EXPECT_EQ(WaitVar(x), "burst 0");
  EXPECT_EQ(WaitVar(y), "async");
  EXPECT_EQ(WaitAll(), "");
  WorkloadOptions options;
  options.num_vars = 40;
  options.num_functions = Scaled(10000, 300);
  options.seed = TestSeed();
  RandomWorkload(engine_.get(), &completer_, options).Run();
  std::atomic<int> ran{0};
  engine_->PushSync([&](RunContext) { ran++; }, kCpu, {y}, {x});
  EXPECT_EQ(WaitVar(x), "");
  EXPECT_EQ(ran.load(), 1);
}

INSTANTIATE_TEST_SUITE_P(Engines, EngineErrors, ::testing::ValuesIn(AllEngines()), EngineParamName);

// Engine::Create and the configuration reject bad input with a troupe::Error naming the setting.
using test::ScopedEnv;

TEST(EngineConfigErrors, BadEnvironmentValuesNameTheVariable) {
  for (auto [name, value] : std::vector<std::pair<const char*, const char*>>{
           {"TROUPE_ENGINE", "threaded"}, {"TROUPE_CPU_WORKERS", "many"}, {"TROUPE_CPU_WORKERS", "-3"}}) {
    ScopedEnv env(name, value);
    try {
      (void)EngineConfig::FromEnv().runtime.Resolved();
      ADD_FAILURE() << name << "=" << value << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << "message: " << e.what();
    }
  }
}

TEST(EngineConfigErrors, CreateRejectsBadRuntimeConfig) {
  EngineConfig config;
  config.type = EngineType::kActor;
  config.runtime.cpu_workers = -1;
  EXPECT_THROW(Engine::Create(config), Error);
  config.runtime.cpu_workers = 1;
  config.runtime.dependency_shards = -2;
  EXPECT_THROW(Engine::Create(config), Error);
}

}  // namespace
}  // namespace troupe
