// ndarray_basics — NDArrays in one small program: least-squares regression by gradient descent.
//
// Every NDArray operation below is pushed to the dependency engine and returns at once; the program's
// thread waits only where it reads a value (ToVector, WaitToRead). Shown: random initialisation from the
// seeded resource manager, Dot (OpenBLAS), elementwise arithmetic with arrays and scalars, in-place updates,
// views (Slice), saving the learned weights to an MXNet-compatible .params file and loading them back,
// and the memory pool's statistics.
//
// Usage: ndarray_basics [--engine actor|naive] [--iters N] [--params FILE]
// Exit status 0 when the learned weights are within 0.05 of the true ones.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tensor/ndarray.h"

using troupe::Context;
using troupe::DType;
using troupe::NDArray;
using troupe::TShape;

int main(int argc, char** argv) {
  troupe::EngineConfig config = troupe::EngineConfig::FromEnv();
  int iters = 200;
  std::string params = "/tmp/troupe_ndarray_basics.params";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--engine" && i + 1 < argc) {
      config.type = std::strcmp(argv[++i], "naive") == 0 ? troupe::EngineType::kNaive : troupe::EngineType::kActor;
    } else if (arg == "--iters" && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else if (arg == "--params" && i + 1 < argc) {
      params = argv[++i];
    } else {
      std::puts("usage: ndarray_basics [--engine actor|naive] [--iters N] [--params FILE]\n"
                "Fits y = X w by gradient descent with NDArrays and saves w as a .params file.");
      return arg == "--help" ? 0 : 2;
    }
  }
  try {
    auto engine = troupe::Engine::Create(config);
    troupe::Engine* e = engine.get();
    const Context cpu = Context::CPU(0);
    troupe::ResourceManager::Get(e)->SeedRandom(2026);

    // Data: 512 samples of 4 features, y = X w_true + noise.
    const int n = 512, d = 4;
    const std::vector<float> w_true = {1.0f, -2.0f, 3.0f, 0.5f};
    NDArray x(TShape({n, d}), cpu, DType::kFloat32, e);
    x.SampleNormal(0, 1);
    NDArray noise(TShape({n, 1}), cpu, DType::kFloat32, e);
    noise.SampleNormal(0, 0.01);
    NDArray y = Dot(x, NDArray::FromVector(w_true, TShape({d, 1}), cpu, e)) + noise;

    // Gradient descent on the mean squared error; nothing below waits until the loss is printed.
    NDArray w(TShape({d, 1}), cpu, DType::kFloat32, e);
    w.SampleUniform(-0.1, 0.1);
    const float lr = 0.1f;
    for (int it = 0; it <= iters; ++it) {
      NDArray residual = Dot(x, w) - y;                     // (n, 1)
      NDArray grad = Dot(x, residual, /*transpose_a=*/true);  // X^T r: (d, 1)
      w -= grad * (lr / n);
      if (it % 50 == 0) {
        NDArray sq = Dot(residual, residual, true);  // r^T r
        std::printf("iter %4d  loss %.6f\n", it, sq.ToVector<float>()[0] / n);
      }
    }
    const std::vector<float> w_fit = w.ToVector<float>();
    std::printf("learned w = [%.3f, %.3f, %.3f, %.3f]   true w = [1, -2, 3, 0.5]\n", w_fit[0], w_fit[1], w_fit[2],
                w_fit[3]);

    // Save in MXNet's format (mx.nd.load reads it back as a dict), then load it again.
    NDArray::Save(params, {w, x.Slice(0, 2)}, {"arg:w", "first_rows"});
    std::vector<NDArray> loaded;
    std::vector<std::string> names;
    NDArray::Load(params, &loaded, &names, nullptr, e);
    std::printf("saved %s: %zu arrays, '%s' %s and '%s' %s\n", params.c_str(), loaded.size(), names[0].c_str(),
                loaded[0].shape().ToString().c_str(), names[1].c_str(), loaded[1].shape().ToString().c_str());
    const bool same = loaded[0].ToVector<float>() == w_fit;

    std::printf("memory pool: %s\n", troupe::Storage::Get()->Stats(cpu).ToString().c_str());
    bool ok = same;
    for (int i = 0; i < d; ++i) ok = ok && std::fabs(w_fit[i] - w_true[i]) < 0.05f;
    std::printf("ndarray demo: %s\n", ok ? "OK" : "FAILED");
    return ok ? 0 : 1;
  } catch (const troupe::Error& err) {
    std::fprintf(stderr, "ndarray_basics: %s\n", err.what());
    return 1;
  }
}
