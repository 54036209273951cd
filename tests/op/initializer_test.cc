// Initializers: MXNet's name rules, Xavier's fans and distributions checked statistically on large arrays,
// the other rules, reproducibility under ResourceManager::SeedRandom, and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "op/initializer.h"
#include "tensor/resource.h"
#include "tests/common/op_test_util.h"

namespace troupe {
namespace {

using test::ExpectError;

struct Stats {
  double mean = 0, var = 0, max_abs = 0;
  std::size_t n = 0;
};

Stats StatsOf(const std::vector<double>& v) {
  Stats s;
  s.n = v.size();
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(s.n);
  for (double x : v) {
    s.var += (x - s.mean) * (x - s.mean);
    s.max_abs = std::max(s.max_abs, std::abs(x));
  }
  s.var /= static_cast<double>(s.n - 1);
  return s;
}

std::vector<double> Filled(const std::string& init, const Kwargs& kw, const std::string& name, const TShape& shape,
                           DType dtype = DType::kFloat32, double prefill = 7.0) {
  NDArray a = NDArray::Full(shape, prefill, Context::CPU(), dtype);
  (*Initializer::Create(init, kw))(name, &a);
  return test::ToHost(a);
}

bool AllEqual(const std::vector<double>& v, double x) {
  return std::all_of(v.begin(), v.end(), [x](double y) { return y == x; });
}

TEST(InitializerTest, NameRules) {
  const TShape shape{4, 3};
  for (const std::string init : {"xavier", "uniform", "normal", "constant", "zero", "one"}) {
    SCOPED_TRACE(init);
    const Kwargs kw = init == "constant" ? Kwargs{{"value", "2.5"}} : Kwargs{};
    for (const std::string name :
         {"fc1_bias", "bn0_beta", "bn0_moving_mean", "bn0_running_mean", "bias"}) {
      EXPECT_TRUE(AllEqual(Filled(init, kw, name, shape), 0.0)) << name;
    }
    for (const std::string name : {"bn0_gamma", "bn0_moving_var", "bn0_running_var"}) {
      EXPECT_TRUE(AllEqual(Filled(init, kw, name, shape), 1.0)) << name;
    }
    // Weights and any other (non-input) parameter follow the initializer's own rule.
    for (const std::string name : {"fc1_weight", "embed_table"}) {
      const auto v = Filled(init, kw, name, shape);
      if (init == "constant") {
        EXPECT_TRUE(AllEqual(v, 2.5)) << name;
      } else if (init == "zero") {
        EXPECT_TRUE(AllEqual(v, 0.0)) << name;
      } else if (init == "one") {
        EXPECT_TRUE(AllEqual(v, 1.0)) << name;
      } else {
        // Random rules: nothing of the prefill is left, and the values are not all equal.
        EXPECT_TRUE(std::none_of(v.begin(), v.end(), [](double x) { return x == 7.0; })) << name;
        EXPECT_FALSE(AllEqual(v, v[0])) << name;
      }
    }
  }
}

TEST(InitializerTest, InitWeightIgnoresTheName) {
  auto init = Initializer::Create("constant", {{"value", "-3"}});
  NDArray a = NDArray::Zeros(TShape{5}, Context::CPU(), DType::kFloat64);
  init->InitWeight("fc_bias", &a);
  EXPECT_TRUE(AllEqual(a.ToVector<double>(), -3.0));
}

// Xavier over every rnd_type x factor_type on a 4-D convolution weight and a 2-D weight. For a uniform
// (-s, s) sample of n values: the variance is s^2/3 with relative standard error sqrt(0.8/n) (kurtosis 1.8),
// 0.17% at n = 294912, so 1.5% is ~9 standard errors while the factor types differ by >= 33%; no value
// exceeds s and the largest is within 0.1% of s (P(all n below 0.999 s) = 0.9995^n ~ e^-147). For normal
// (0, s): relative standard error of the variance sqrt(2/n) = 0.26%, tolerance 2% (~7.7); the fraction
// within one s is 0.6827 with standard error 0.00086, tolerance 0.006. The mean is within 6 standard errors
// (s_dev / sqrt(n)) of 0.
TEST(InitializerTest, XavierFansAndDistributions) {
  struct Shape {
    TShape shape;
    double fan_in, fan_out;
  };
  const std::vector<Shape> shapes = {{TShape{256, 128, 3, 3}, 128.0 * 9, 256.0 * 9},
                                     {TShape{768, 384}, 384.0, 768.0}};
  for (const auto& sh : shapes) {
    for (const std::string rnd : {"uniform", "gaussian"}) {
      for (const std::string factor : {"avg", "in", "out"}) {
        for (const double magnitude : {3.0, 2.0}) {
          SCOPED_TRACE(sh.shape.ToString() + " " + rnd + " " + factor + " magnitude " + std::to_string(magnitude));
          const double f = factor == "avg" ? (sh.fan_in + sh.fan_out) / 2 : factor == "in" ? sh.fan_in : sh.fan_out;
          const double scale = std::sqrt(magnitude / f);
          Kwargs kw = {{"rnd_type", rnd}, {"factor_type", factor}};
          if (magnitude != 3.0) kw.emplace_back("magnitude", "2");
          const auto v = Filled("xavier", kw, "conv_weight", sh.shape);
          const Stats s = StatsOf(v);
          const double sdev = rnd == "uniform" ? scale / std::sqrt(3.0) : scale;
          EXPECT_LT(std::abs(s.mean), 6 * sdev / std::sqrt(static_cast<double>(s.n)));
          if (rnd == "uniform") {
            EXPECT_NEAR(s.var / (scale * scale / 3), 1.0, 0.015);
            EXPECT_LE(s.max_abs, scale * (1 + 1e-6));  // float rounding of the bound only
            EXPECT_GT(s.max_abs, scale * 0.999);
          } else {
            EXPECT_NEAR(s.var / (scale * scale), 1.0, 0.02);
            const double within =
                static_cast<double>(std::count_if(v.begin(), v.end(), [&](double x) { return std::abs(x) < scale; })) /
                static_cast<double>(v.size());
            EXPECT_NEAR(within, 0.682689, 0.006);
          }
        }
      }
    }
  }
}

// Same statistical reasoning as above, for the "uniform" and "normal" rules, in float64 too.
TEST(InitializerTest, UniformAndNormal) {
  const TShape shape{512, 512};
  for (const DType dtype : {DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    const Stats u = StatsOf(Filled("uniform", {}, "w", shape, dtype));
    EXPECT_NEAR(u.var / (0.07 * 0.07 / 3), 1.0, 0.015);
    EXPECT_LE(u.max_abs, 0.07 * (1 + 1e-6));
    EXPECT_GT(u.max_abs, 0.07 * 0.999);
    const Stats u2 = StatsOf(Filled("uniform", {{"scale", "0.5"}}, "w", shape, dtype));
    EXPECT_NEAR(u2.var / (0.25 / 3), 1.0, 0.015);
    const Stats n = StatsOf(Filled("normal", {}, "w", shape, dtype));
    EXPECT_NEAR(n.var / (0.01 * 0.01), 1.0, 0.02);
    EXPECT_LT(std::abs(n.mean), 6 * 0.01 / 512);
    const Stats n2 = StatsOf(Filled("normal", {{"sigma", "2"}}, "w", shape, dtype));
    EXPECT_NEAR(n2.var / 4, 1.0, 0.02);
  }
}

TEST(InitializerTest, ReproducibleWithSeedRandom) {
  auto init = Initializer::Create("xavier", {{"rnd_type", "gaussian"}});
  auto draw = [&](std::uint64_t seed) {
    ResourceManager::Get()->SeedRandom(seed);
    NDArray a(TShape{32, 16}, Context::CPU());
    NDArray b(TShape{16, 8}, Context::CPU());
    (*init)("fc1_weight", &a);
    (*init)("fc2_weight", &b);
    auto v = a.ToVector<float>();
    const auto w = b.ToVector<float>();
    v.insert(v.end(), w.begin(), w.end());
    return v;
  };
  const auto first = draw(2024);
  EXPECT_EQ(draw(2024), first);
  EXPECT_NE(draw(2025), first);
}

TEST(InitializerTest, Errors) {
  ExpectError([] { Initializer::Create("xavierr"); },
              {"xavierr", "constant, normal, one, ones, uniform, xavier, zero, zeros"});
  EXPECT_EQ(Initializer::ListNames().size(), 8u);
  ExpectError([] { Initializer::Create("xavier", {{"rnd_type", "cauchy"}}); }, {"xavier", "rnd_type"});
  ExpectError([] { Initializer::Create("xavier", {{"factor_type", "sum"}}); }, {"xavier", "factor_type"});
  ExpectError([] { Initializer::Create("uniform", {{"sigma", "1"}}); }, {"uniform", "sigma"});
  ExpectError([] { Initializer::Create("normal", {{"sigma", "-1"}}); }, {"normal", "sigma"});
  ExpectError([] { Initializer::Create("constant"); }, {"constant", "value"});
  ExpectError([] { Initializer::Create("zero", {{"value", "1"}}); }, {"zero", "value"});

  auto xavier = Initializer::Create("xavier");
  NDArray vec = NDArray::Zeros(TShape{10}, Context::CPU());
  ExpectError([&] { (*xavier)("fc_weight", &vec); }, {"fc_weight", "2 dimensions"});
  (*xavier)("fc_bias", &vec);  // a vector bias is fine: its rule is 0
  EXPECT_TRUE(AllEqual(test::ToHost(vec), 0.0));
  ExpectError([&] { (*xavier)("data", &vec); }, {"'data'", "input"});
  ExpectError([&] { (*xavier)("softmax_label", &vec); }, {"softmax_label", "input"});
  NDArray none;
  ExpectError([&] { (*xavier)("fc_weight", &none); }, {"fc_weight"});
  NDArray ints = NDArray::Zeros(TShape{4, 4}, Context::CPU(), DType::kInt32);
  ExpectError([&] { (*xavier)("fc_weight", &ints); }, {"int32"});
}

}  // namespace
}  // namespace troupe
