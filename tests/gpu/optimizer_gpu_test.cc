// Optimizer updates on a GPU (op/src/optimizer.cu) against the same updates on the CPU: every optimizer,
// with momentum, weight decay, rescaling and clipping, float32 and float64, several steps (the states are
// made on the weight's device); and the multi-tensor sgd path. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "actors/runtime.h"
#include "tensor/ndarray.h"
#include "op/optimizer.h"

namespace troupe {
namespace {

constexpr Context kGpu = Context::GPU(0);
constexpr Context kCpu = Context::CPU(0);

class OptimizerGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Runtime::GpuCount() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  }
};

std::vector<double> Random(std::size_t n, std::mt19937_64* rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = u(*rng);
  return v;
}

NDArray Make(const std::vector<double>& v, DType dtype, Context ctx) {
  NDArray a = NDArray::FromVector<double>(v, TShape({static_cast<std::int64_t>(v.size())}));
  return (dtype == DType::kFloat64 ? a : a.AsType(dtype)).CopyTo(ctx);
}

// Largest |a - b| / (1 + |b|).
double MaxRelErr(const NDArray& a, const NDArray& b) {
  const auto va = a.AsType(DType::kFloat64).CopyTo(kCpu).ToVector<double>();
  const auto vb = b.AsType(DType::kFloat64).CopyTo(kCpu).ToVector<double>();
  double e = 0;
  for (std::size_t i = 0; i < va.size(); ++i) e = std::max(e, std::abs(va[i] - vb[i]) / (1 + std::abs(vb[i])));
  return e;
}

TEST_F(OptimizerGpuTest, EveryOptimizerMatchesTheCpu) {
  const std::vector<OptimizerConfig> configs = {
      {"sgd", {{"learning_rate", "0.1"}, {"wd", "0.01"}, {"rescale_grad", "0.5"}, {"clip_gradient", "0.6"}}},
      {"sgd", {{"learning_rate", "0.1"}, {"momentum", "0.9"}, {"wd", "0.01"}, {"clip_gradient", "0.6"}}},
      {"nag", {{"learning_rate", "0.1"}, {"momentum", "0.9"}, {"wd", "0.01"}}},
      {"adam", {{"learning_rate", "0.01"}, {"wd", "0.01"}, {"clip_gradient", "1.5"}}},
      {"adagrad", {{"learning_rate", "0.1"}, {"wd", "0.01"}}},
      {"rmsprop", {{"learning_rate", "0.01"}, {"clip_weights", "0.9"}}},
      {"rmsprop", {{"learning_rate", "0.01"}, {"centered", "true"}, {"wd", "0.01"}}},
  };
  for (const auto& config : configs) {
    for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
      SCOPED_TRACE(config.type + " " + DTypeName(dtype));
      auto on_cpu = Optimizer::Create(config);
      auto on_gpu = Optimizer::Create(config);
      std::mt19937_64 rng(5);
      const auto w0 = Random(4099, &rng, -1, 1);
      NDArray wc = Make(w0, dtype, kCpu), wg = Make(w0, dtype, kGpu);
      for (int step = 0; step < 5; ++step) {
        const auto g = Random(w0.size(), &rng, -2, 2);
        on_cpu->Update(0, wc, Make(g, dtype, kCpu));
        on_gpu->Update(0, wg, Make(g, dtype, kGpu));
      }
      EXPECT_EQ(wg.ctx(), kGpu);
      // The GPU contracts multiply-adds into FMAs and rounds sqrt and division its own way.
      EXPECT_LT(MaxRelErr(wg, wc), dtype == DType::kFloat32 ? 1e-5 : 1e-12);
    }
  }
}

TEST_F(OptimizerGpuTest, MultiTensorSgdOnTheGpuMatchesOneByOne) {
  auto multi = Optimizer::Create({"sgd", {{"learning_rate", "0.1"}, {"momentum", "0.9"}}});
  auto single = Optimizer::Create({"sgd", {{"learning_rate", "0.1"}, {"momentum", "0.9"}}});
  std::mt19937_64 rng(7);
  std::vector<NDArray> wm, ws;
  for (int i = 0; i < 3; ++i) {
    const auto w = Random(1000 + 17 * i, &rng, -1, 1);
    wm.push_back(Make(w, DType::kFloat32, kGpu));
    ws.push_back(Make(w, DType::kFloat32, kGpu));
  }
  for (int step = 0; step < 3; ++step) {
    std::vector<NDArray> gs;
    for (const auto& w : wm) gs.push_back(Make(Random(static_cast<std::size_t>(w.Size()), &rng, -1, 1), DType::kFloat32, kGpu));
    multi->UpdateMulti({0, 1, 2}, wm, gs);
    for (int i = 0; i < 3; ++i) single->Update(i, ws[static_cast<std::size_t>(i)], gs[static_cast<std::size_t>(i)]);
  }
  for (std::size_t i = 0; i < wm.size(); ++i) EXPECT_EQ(MaxRelErr(wm[i], ws[i]), 0.0) << i;
}

}  // namespace
}  // namespace troupe
