// Uses the installed headers both ways (<troupe/engine/engine.h> and "engine/engine.h") and the engine.
#include <troupe/engine/engine.h>

#include <cstdio>

#include "actors/context.h"

int main() {
  auto engine = troupe::Engine::Create(troupe::EngineConfig{});
  troupe::VarHandle v = engine->NewVariable();
  int x = 0;
  for (int i = 0; i < 100; ++i) engine->PushSync([&](troupe::RunContext) { x += 2; }, troupe::Context::CPU(0), {}, {v});
  engine->WaitForVar(v);
  std::printf("consumer: x=%d version=%llu\n", x, static_cast<unsigned long long>(v->version()));
  return x == 200 && v->version() == 100 ? 0 : 1;
}
