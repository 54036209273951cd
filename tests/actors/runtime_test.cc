// The runtime: embedding in a caller's caf::actor_system, the one config of thread counts, and the errors
// a user gets for bad settings or devices that do not exist.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "actors/config.h"
#include "actors/device.h"
#include "actors/runtime.h"
#include "caf/all.hpp"
#include "engine/engine.h"
#include "tests/common/scoped_env.h"
#include "tests/engine/test_util.h"

namespace troupe {
namespace {

using push_atom = caf::atom_constant<caf::atom("push")>;

// An application actor that, for each request, pushes a function to troupe's engine and answers once the
// function has run: the application keeps its own actors and uses troupe through the same actor system.
caf::behavior Pusher(caf::event_based_actor* self, Engine* engine, VarHandle var, int* counter) {
  return {
      [=](push_atom, int amount) -> caf::result<int> {
        auto rp = self->make_response_promise<int>();
        engine->PushAsync(
            [=](RunContext, CallbackOnComplete done) mutable {
              *counter += amount;
              rp.deliver(*counter);
              done();
            },
            Context::CPU(0), {}, {var}, FnProperty::kNormal, 0, "from_caf_actor");
        return rp;
      },
  };
}

TEST(Runtime, EngineRunsInsideTheCallersActorSystem) {
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", size_t{2});
  caf::actor_system system{cfg};
  {
    EngineConfig ec;
    ec.actor_system = &system;
    ec.runtime.cpu_workers = 2;
    auto engine = Engine::Create(ec);
    VarHandle v = engine->NewVariable();
    int counter = 0;
    auto pusher = system.spawn(Pusher, engine.get(), v, &counter);
    caf::scoped_actor self{system};
    int last = 0;
    for (int i = 1; i <= 20; ++i) {
      self->request(pusher, caf::infinite, push_atom::value, i)
          .receive([&](int value) { last = value; },
                   [&](caf::error& err) { FAIL() << "request failed: " << system.render(err); });
    }
    EXPECT_EQ(last, 210);  // 1 + ... + 20, each step answered after the engine ran it
    engine->WaitForVar(v);
    EXPECT_EQ(v->version(), 20u);
    self->send_exit(pusher, caf::exit_reason::user_shutdown);
  }
  // The engine is gone; the caller's system keeps working.
  caf::scoped_actor self{system};
  // (An argument, because CAF 0.17 dereferences a null pointer for argument-less spawns: see wakeable.cc.)
  auto echo = system.spawn([](int step) -> caf::behavior { return {[step](int x) { return x + step; }}; }, 1);
  int answer = 0;
  self->request(echo, caf::infinite, 41).receive([&](int x) { answer = x; }, [](caf::error&) {});
  EXPECT_EQ(answer, 42);
  self->send_exit(echo, caf::exit_reason::user_shutdown);
}

TEST(Runtime, OwnsItsSystemWhenNoneIsGiven) {
  auto rt = Runtime::Create(RuntimeConfig{});
  EXPECT_TRUE(rt->owns_system());
  const RuntimeConfig& c = rt->config();
  EXPECT_GE(c.cpu_workers, 1);
  EXPECT_GE(c.blas_threads, 1);
  EXPECT_GE(c.scheduler_threads, 1);
  EXPECT_LE(c.cpu_workers * c.blas_threads, std::max(AvailableCores(), c.cpu_workers));
  Device* cpu = rt->GetDevice(Context::CPU(0));
  EXPECT_EQ(cpu, rt->GetDevice(Context::CPU(0)));  // one device per context
  EXPECT_NE(cpu, rt->GetDevice(Context::CPU(1)));  // cpu(1) is a distinct device
}

TEST(Runtime, MissingGpuIsAClearError) {
  if (Runtime::GpuCount() > 0) GTEST_SKIP() << "this machine has a GPU";
  auto rt = Runtime::Create(RuntimeConfig{});
  try {
    rt->GetDevice(Context::GPU(0));
    FAIL() << "no error for a GPU that does not exist";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gpu(0)"), std::string::npos) << e.what();
  }
}

// A lane with several workers runs its in-order tasks (Task::in_order) one at a time in submission order,
// and its other tasks beside them: the first in-order task waits until a task submitted after every in-order
// one has run, which only another worker can do while the in-order queue is held.
TEST(Runtime, InOrderTasksOfALaneWithSeveralWorkersRunOneAtATimeInSubmissionOrder) {
  using engine_test::WaitUntil;
  RuntimeConfig rc;
  rc.cpu_workers = 2;
  auto rt = Runtime::Create(rc);
  Device* cpu = rt->GetDevice(Context::CPU(0));

  struct FnTask final : Task {
    std::function<void()> fn;
    void Run(const RunContext&, const WorkerInfo&) override { fn(); }
  };
  constexpr int kInOrder = 200;
  std::vector<FnTask> tasks(kInOrder + 1);
  std::atomic<int> running_in_order{0}, overlaps{0}, next{0}, out_of_order{0}, done{0};
  std::atomic<bool> other_ran{false}, first_saw_other{false};
  for (int i = 0; i < kInOrder; ++i) {
    tasks[i].in_order = true;
    tasks[i].fn = [&, i] {
      if (running_in_order.fetch_add(1) != 0) overlaps++;
      if (i == 0) first_saw_other = WaitUntil([&] { return other_ran.load(); });
      if (next.fetch_add(1) != i) out_of_order++;
      running_in_order.fetch_sub(1);
      done++;
    };
  }
  tasks[kInOrder].fn = [&] {
    other_ran = true;
    done++;
  };
  for (int i = 0; i < kInOrder; ++i) cpu->Submit(&tasks[i], Lane::kNormal);
  cpu->Submit(&tasks[kInOrder], Lane::kNormal);
  ASSERT_TRUE(WaitUntil([&] { return done.load() == kInOrder + 1; })) << "the lane did not run every task";
  EXPECT_TRUE(first_saw_other.load()) << "no other worker ran a task while an in-order task ran";
  EXPECT_EQ(overlaps.load(), 0) << "two in-order tasks ran at the same time";
  EXPECT_EQ(out_of_order.load(), 0) << "in-order tasks ran out of submission order";
  // A worker counts a task once its Run has returned, just after the task's own count.
  auto lane_stats = [&] { return rt->Stats()[0].lanes[static_cast<int>(Lane::kNormal)]; };
  EXPECT_TRUE(WaitUntil([&] { return lane_stats().executed == kInOrder + 1; }));
  EXPECT_EQ(lane_stats().executed, static_cast<std::uint64_t>(kInOrder + 1));
  EXPECT_EQ(lane_stats().executed_in_order, static_cast<std::uint64_t>(kInOrder));
}

TEST(RuntimeConfigTest, ResolvedFillsDefaultsAndRejectsNonsense) {
  RuntimeConfig c = RuntimeConfig{}.Resolved();
  EXPECT_GE(c.cpu_workers, 1);
  EXPECT_GE(c.worker_spin_us, 0);
  RuntimeConfig bad;
  bad.dependency_shards = 0;
  EXPECT_THROW(bad.Resolved(), Error);
  bad = RuntimeConfig{};
  bad.cpu_workers = -3;
  EXPECT_THROW(bad.Resolved(), Error);
}

using test::ScopedEnv;

TEST(RuntimeConfigTest, ProcessesSharingTheHostShareItsCores) {
  RuntimeConfig alone;
  alone.cpu_workers = 1;
  RuntimeConfig shared = alone;
  shared.host_processes = 4 * AvailableCores();  // more processes than cores: one thread each, never zero
  EXPECT_EQ(shared.Resolved().blas_threads, 1);
  EXPECT_EQ(alone.Resolved().blas_threads, AvailableCores());
  shared.host_processes = 2;
  EXPECT_EQ(shared.Resolved().blas_threads, std::max(1, AvailableCores() / 2));
  EXPECT_EQ(DefaultBlasThreads(2, 1, 2), std::max(1, AvailableCores() / 4));
  {
    ScopedEnv h("TROUPE_HOST_PROCESSES", "3");
    EXPECT_EQ(RuntimeConfig{}.WithEnv().host_processes, 3);
  }
  {
    ScopedEnv h("TROUPE_HOST_PROCESSES", "0");
    EXPECT_THROW((void)RuntimeConfig{}.WithEnv(), Error);
  }
}

TEST(RuntimeConfigTest, EnvironmentOverridesAndNamesBadValues) {
  {
    ScopedEnv w("TROUPE_CPU_WORKERS", "3");
    EXPECT_EQ(RuntimeConfig{}.WithEnv().cpu_workers, 3);
  }
  {
    ScopedEnv w("TROUPE_CPU_WORKERS", "many");
    try {
      (void)RuntimeConfig{}.WithEnv();
      FAIL() << "no error for TROUPE_CPU_WORKERS=many";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("TROUPE_CPU_WORKERS"), std::string::npos) << e.what();
    }
  }
  {
    ScopedEnv e("TROUPE_ENGINE", "quantum");
    EXPECT_THROW(EngineConfig::FromEnv(), Error);
  }
  {
    ScopedEnv e("TROUPE_ENGINE", "naive");
    EXPECT_EQ(EngineConfig::FromEnv().type, EngineType::kNaive);
  }
}

TEST(EngineGet, ProcessDefaultEngineWorks) {
  Engine* e = Engine::Get();
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e, Engine::Get());
  VarHandle v = e->NewVariable();
  int x = 0;
  e->PushSync([&](RunContext) { x = 7; }, Context::CPU(0), {}, {v});
  e->WaitForVar(v);
  EXPECT_EQ(x, 7);
}

}  // namespace
}  // namespace troupe
