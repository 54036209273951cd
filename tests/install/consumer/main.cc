// Uses the installed headers both ways (<troupe/engine/engine.h> and "engine/engine.h"), a header at its old
// path (a forwarding header) and one at its new path, the engine and NDArrays; and the distributed KVStore's
// public header, which must compile without CAF or Cap'n Proto.
#include <troupe/engine/engine.h>
#include <troupe/kvstore/dist.h>
#include <troupe/ops/ndarray.h>

#include <cstdio>

#include "actors/context.h"  // an old path: a forwarding header, kept for one release
#include "base/error.h"

int main() {
  auto engine = troupe::Engine::Create(troupe::EngineConfig{});
  troupe::VarHandle v = engine->NewVariable();
  int x = 0;
  for (int i = 0; i < 100; ++i) engine->PushSync([&](troupe::RunContext) { x += 2; }, troupe::Context::CPU(0), {}, {v});
  engine->WaitForVar(v);
  std::printf("consumer: x=%d version=%llu\n", x, static_cast<unsigned long long>(v->version()));
  troupe::NDArray a = troupe::NDArray::Ones(troupe::TShape({2, 2}), troupe::Context::CPU(0), troupe::DType::kFloat32,
                                            engine.get());
  const std::vector<float> dot = troupe::Dot(a, a * 3).ToVector<float>();
  std::printf("consumer: dot=[%g %g %g %g]\n", dot[0], dot[1], dot[2], dot[3]);
  troupe::DistConfig dist;
  dist.num_workers = 0;
  bool refused = false;
  try {
    dist.Validate();
  } catch (const std::exception&) {
    refused = true;  // a cluster of no workers is a configuration error
  }
  std::printf("consumer: dist config with no workers refused=%d\n", refused ? 1 : 0);
  return x == 200 && v->version() == 100 && dot == std::vector<float>(4, 6.f) && refused ? 0 : 1;
}
