// engine_basics — the dependency engine's API in one small program (and troupe's demo for now).
//
// It builds a small DAG, the way MXNet's seed describes the engine: functions declare the variables they
// read (const_vars) and write (mutable_vars), and the engine runs them in an order that respects those
// declarations, in parallel where it may. Then it shows an asynchronous function completing from another
// thread, a pre-built operator pushed several times, priorities, and how an error travels: the failing
// function poisons what it writes, dependents are skipped, and WaitForVar rethrows the error once.
//
// Usage: engine_basics [--engine actor|naive] [--workers N]
// At the end it prints the profile: which function ran on which thread and lane, in time order.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"

using troupe::CallbackOnComplete;
using troupe::Context;
using troupe::Engine;
using troupe::EngineConfig;
using troupe::EngineType;
using troupe::FnProperty;
using troupe::RunContext;
using troupe::VarHandle;

namespace {

void Usage() {
  std::puts("usage: engine_basics [--engine actor|naive] [--workers N]\n"
            "Pushes a small DAG to troupe's dependency engine and prints what ran where.");
}

}  // namespace

int main(int argc, char** argv) {
  EngineConfig config;
  config.type = EngineType::kActor;
  config.runtime.cpu_workers = 2;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--engine" && i + 1 < argc) {
      std::string t = argv[++i];
      if (t != "actor" && t != "naive") {
        std::fprintf(stderr, "engine_basics: unknown engine '%s' (use actor or naive)\n", t.c_str());
        return 2;
      }
      config.type = t == "naive" ? EngineType::kNaive : EngineType::kActor;
    } else if (a == "--workers" && i + 1 < argc) {
      config.runtime.cpu_workers = std::atoi(argv[++i]);
      if (config.runtime.cpu_workers < 1) {
        std::fprintf(stderr, "engine_basics: --workers needs a number >= 1\n");
        return 2;
      }
    } else if (a == "--help" || a == "-h") {
      Usage();
      return 0;
    } else {
      std::fprintf(stderr, "engine_basics: unknown argument '%s'\n", a.c_str());
      Usage();
      return 2;
    }
  }

  auto engine = Engine::Create(config);
  engine->SetProfiling(true);
  std::printf("engine: %s, cpu workers: %d\n", troupe::EngineTypeName(engine->type()), config.runtime.cpu_workers);

  // The DAG:   a = 1    b = 2          (independent: may run in parallel)
  //            c = a + b               (waits for both)
  //            d = c * 10, e = c * 100 (both only read c: may run together)
  //            c += 1                  (writes c: runs after d and e have read it)
  double a = 0, b = 0, c = 0, d = 0, e = 0;
  VarHandle va = engine->NewVariable(), vb = engine->NewVariable(), vc = engine->NewVariable();
  VarHandle vd = engine->NewVariable(), ve = engine->NewVariable();
  const Context cpu = Context::CPU(0);
  engine->PushSync([&](RunContext) { a = 1; }, cpu, {}, {va}, FnProperty::kNormal, 0, "a=1");
  engine->PushSync([&](RunContext) { b = 2; }, cpu, {}, {vb}, FnProperty::kNormal, 0, "b=2");
  engine->PushSync([&](RunContext) { c = a + b; }, cpu, {va, vb}, {vc}, FnProperty::kNormal, 0, "c=a+b");
  engine->PushSync([&](RunContext) { d = c * 10; }, cpu, {vc}, {vd}, FnProperty::kNormal, 0, "d=c*10");
  engine->PushSync([&](RunContext) { e = c * 100; }, cpu, {vc}, {ve}, FnProperty::kNormal, 0, "e=c*100");
  engine->PushSync([&](RunContext) { c += 1; }, cpu, {}, {vc}, FnProperty::kNormal, 0, "c+=1");

  // An asynchronous function: it hands its work to another thread and returns at once; the engine
  // considers it finished when the callback runs.
  std::thread helper;
  engine->PushAsync(
      [&](RunContext, CallbackOnComplete done) {
        helper = std::thread([&, done] {
          d += 0.5;
          done();
        });
      },
      cpu, {}, {vd}, FnProperty::kAsync, 0, "d+=0.5 (async)");

  // A pre-built operator pushed three times, and a prioritised function.
  int pushes = 0;
  VarHandle vcount = engine->NewVariable();
  auto op = engine->NewOperator(
      [&](RunContext, CallbackOnComplete done) {
        ++pushes;
        done();
      },
      {}, {vcount}, FnProperty::kNormal, "count");
  for (int i = 0; i < 3; ++i) engine->Push(op, cpu);
  engine->DeleteOperator(op);  // freed once its three pushes have run
  engine->PushSync([](RunContext) {}, cpu, {}, {}, FnProperty::kCPUPrioritized, 10, "prioritised");

  engine->WaitForVar(vd);
  helper.join();
  engine->WaitForAll();
  std::printf("a=%g b=%g c=%g d=%g e=%g pushes=%d   (expected a=1 b=2 c=4 d=30.5 e=300 pushes=3)\n", a, b, c, d,
              e, pushes);
  std::printf("versions: a=%llu c=%llu d=%llu   (writes to each)\n", (unsigned long long)va->version(),
              (unsigned long long)vc->version(), (unsigned long long)vd->version());

  // Errors travel as values: x's function throws, y depends on x and is skipped, and WaitForVar(y)
  // rethrows x's error — once. The engine keeps working.
  VarHandle vx = engine->NewVariable(), vy = engine->NewVariable();
  bool y_ran = false, y_error = false, x_error = false;
  engine->PushSync([](RunContext) { throw troupe::Error("sensor x unplugged"); }, cpu, {}, {vx},
                   FnProperty::kNormal, 0, "x=read()");
  engine->PushSync([&](RunContext) { y_ran = true; }, cpu, {vx}, {vy}, FnProperty::kNormal, 0, "y=f(x)");
  try {
    engine->WaitForVar(vy);
    std::puts("error demo: no error?!");
  } catch (const troupe::Error& err) {
    y_error = true;
    std::printf("error demo: WaitForVar(y) rethrew \"%s\"; y's function ran: %s\n", err.what(), y_ran ? "yes" : "no");
  }
  try {
    engine->WaitForVar(vx);
    std::puts("error demo: no error for x?!");
  } catch (const troupe::Error&) {
    x_error = true;
    std::puts("error demo: WaitForVar(x) rethrew it for x as well (each poisoned variable reports once)");
  }
  engine->WaitForAll();

  auto profile = engine->TakeProfile();
  std::sort(profile.begin(), profile.end(), [](const auto& l, const auto& r) { return l.begin_ns < r.begin_ns; });
  const std::int64_t t0 = profile.empty() ? 0 : profile.front().begin_ns;
  std::puts("\nwhat ran where (µs since the first function started):");
  std::printf("  %-16s %-8s %-6s %-8s %10s %10s\n", "function", "device", "thread", "lane", "begin", "end");
  for (const auto& r : profile) {
    static const char* kLanes[] = {"normal", "priority", "copy_in", "copy_out"};
    std::printf("  %-16s %-8s %-6d %-8s %10.1f %10.1f\n", r.name.c_str(), r.ctx.ToString().c_str(), r.thread_id,
                kLanes[r.lane & 3], (r.begin_ns - t0) / 1e3, (r.end_ns - t0) / 1e3);
  }
  const bool ok = a == 1 && b == 2 && c == 4 && d == 30.5 && e == 300 && pushes == 3 && !y_ran && y_error && x_error;
  std::printf("\n%s\n", ok ? "engine demo: OK" : "engine demo: WRONG RESULT");
  return ok ? 0 : 1;
}
