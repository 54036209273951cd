// Optimizers: several steps of "sgd" (plain and with momentum) and "adam" compared with reference
// implementations written here in double precision from MXNet's update rules, plus a few values produced by
// MXNet 1.9.1 itself; state checkpoints (save, load into a fresh optimizer, continue == uninterrupted);
// errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "ops/optimizer.h"
#include "tests/common/op_test_util.h"

namespace troupe {
namespace {

using test::ExpectError;
using Vec = std::vector<double>;

// The parameters as the optimizer sees them: it keeps most as float (as MXNet's kernels do), so the
// references use the same float-rounded values; Adam's beta1, beta2 and epsilon are kept as double (MXNet's
// Python computes the bias correction in double), and lr * lr_mult, wd * wd_mult are float products.
double F(double v) { return static_cast<double>(static_cast<float>(v)); }

double ClipRef(double g, double c) { return c < 0 ? g : std::max(-c, std::min(c, g)); }

// MXNet's sgd_update / sgd_mom_update (src/operator/optimizer_op-inl.h), in double.
struct RefSgd {
  double lr, momentum, wd, rescale, clip;
  Vec mom;
  void Step(Vec* w, const Vec& g) {
    if (mom.empty()) mom.assign(w->size(), 0.0);
    for (std::size_t i = 0; i < w->size(); ++i) {
      const double gi = ClipRef(rescale * g[i], clip) + wd * (*w)[i];
      if (momentum == 0) {
        (*w)[i] -= lr * gi;
      } else {
        mom[i] = momentum * mom[i] - lr * gi;
        (*w)[i] += mom[i];
      }
    }
  }
};

// MXNet's Adam (python/mxnet/optimizer/optimizer.py + adam_update): bias corrections folded into the step
// size with t the update count of the index; the kernel clips after adding weight decay.
struct RefAdam {
  double lr, beta1, beta2, epsilon, wd, rescale, clip;
  Vec m{}, v{};
  int t = 0;
  void Step(Vec* w, const Vec& g) {
    if (m.empty()) m.assign(w->size(), 0.0), v.assign(w->size(), 0.0);
    ++t;
    const double lr_t = lr * std::sqrt(1 - std::pow(beta2, t)) / (1 - std::pow(beta1, t));
    for (std::size_t i = 0; i < w->size(); ++i) {
      const double gi = ClipRef(rescale * g[i] + wd * (*w)[i], clip);
      m[i] = beta1 * m[i] + (1 - beta1) * gi;
      v[i] = beta2 * v[i] + (1 - beta2) * gi * gi;
      (*w)[i] -= lr_t * m[i] / (std::sqrt(v[i]) + epsilon);
    }
  }
};

Vec Random(std::size_t n, std::mt19937_64* rng, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> u(lo, hi);
  Vec v(n);
  for (auto& x : v) x = u(*rng);
  return v;
}

NDArray Make(const Vec& v, DType dtype, const TShape& shape) {
  return test::ToArray(v, shape, dtype, Context::CPU());
}

// Largest |a - b| / (1 + |b|).
double MaxRelErr(const Vec& a, const Vec& b) {
  double e = 0;
  for (std::size_t i = 0; i < a.size(); ++i) e = std::max(e, std::abs(a[i] - b[i]) / (1 + std::abs(b[i])));
  return e;
}

// float32 keeps ~7 digits and the reference is exact in double: 6 steps of O(1) values accumulate a few
// ulps (1e-7 each), far below 1e-5. float64 computes the same formulas; only rounding order differs.
double Tolerance(DType d) { return d == DType::kFloat32 ? 2e-5 : 1e-12; }

constexpr int kSteps = 6;
const TShape kShape{7, 5};

class OptimizerDTypeTest : public ::testing::TestWithParam<DType> {};

// Runs kSteps updates of one weight through `opt` and `ref`, with gradients large enough that clipping
// (where on) cuts some of them.
template <typename Ref>
void CompareSteps(Optimizer* opt, Ref* ref, DType dtype, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Vec w = Random(kShape.Size(), &rng);
  NDArray weight = Make(w, dtype, kShape);
  for (int s = 0; s < kSteps; ++s) {
    const Vec g = Random(kShape.Size(), &rng, -2, 2);
    opt->Update(0, weight, Make(g, dtype, kShape));
    ref->Step(&w, g);
  }
  const double err = MaxRelErr(test::ToHost(weight), w);
  EXPECT_LT(err, Tolerance(dtype)) << DTypeName(dtype);
}

TEST_P(OptimizerDTypeTest, SgdPlainMatchesReference) {
  auto opt = Optimizer::Create({"sgd", {{"learning_rate", "0.1"}}});
  RefSgd ref{F(0.1), 0, 0, 1, -1, {}};
  CompareSteps(opt.get(), &ref, GetParam(), 1);
}

TEST_P(OptimizerDTypeTest, SgdWithWdRescaleClipMatchesReference) {
  auto opt = Optimizer::Create(
      {"sgd", {{"learning_rate", "0.1"}, {"wd", "0.01"}, {"rescale_grad", "0.5"}, {"clip_gradient", "0.3"}}});
  RefSgd ref{F(0.1), 0, F(0.01), 0.5, F(0.3), {}};
  CompareSteps(opt.get(), &ref, GetParam(), 2);
}

TEST_P(OptimizerDTypeTest, SgdMomentumMatchesReference) {
  auto opt = Optimizer::Create({"sgd",
                                {{"learning_rate", "0.05"},
                                 {"momentum", "0.9"},
                                 {"wd", "0.001"},
                                 {"rescale_grad", "2"},
                                 {"clip_gradient", "1.5"}}});
  RefSgd ref{F(0.05), F(0.9), F(0.001), 2, 1.5, {}};
  CompareSteps(opt.get(), &ref, GetParam(), 3);
}

TEST_P(OptimizerDTypeTest, AdamDefaultsMatchReference) {
  auto opt = Optimizer::Create({"adam", {}});
  EXPECT_FLOAT_EQ(opt->learning_rate(), 0.001f);
  RefAdam ref{F(0.001), 0.9, 0.999, 1e-8, 0, 1, -1};
  CompareSteps(opt.get(), &ref, GetParam(), 4);
}

TEST_P(OptimizerDTypeTest, AdamWithAllParametersMatchesReference) {
  auto opt = Optimizer::Create({"adam",
                                {{"learning_rate", "0.01"},
                                 {"beta1", "0.8"},
                                 {"beta2", "0.99"},
                                 {"epsilon", "1e-6"},
                                 {"wd", "0.1"},
                                 {"rescale_grad", "0.5"},
                                 {"clip_gradient", "0.4"}}});
  RefAdam ref{F(0.01), 0.8, 0.99, 1e-6, F(0.1), 0.5, F(0.4)};
  CompareSteps(opt.get(), &ref, GetParam(), 5);
}

// Per-index multipliers, and Adam's t counted per index: index 1 is updated every other step, so its bias
// correction lags index 0's.
TEST_P(OptimizerDTypeTest, MultipliersAndPerIndexStepCounts) {
  const DType dtype = GetParam();
  for (const std::string type : {"sgd", "adam"}) {
    SCOPED_TRACE(type);
    Kwargs kw = {{"learning_rate", "0.02"}, {"wd", "0.1"}};
    if (type == "sgd") kw.emplace_back("momentum", "0.5");
    auto opt = Optimizer::Create({type, kw});
    opt->SetMultipliers(1, 2.0f, 0.0f);
    opt->SetMultipliers(2, 0.5f, 3.0f);
    std::mt19937_64 rng(6);
    std::vector<Vec> w(3);
    std::vector<NDArray> weights;
    std::vector<RefSgd> sgd;
    std::vector<RefAdam> adam;
    const double lr_mult[3] = {1, 2, 0.5}, wd_mult[3] = {1, 0, 3};
    for (int i = 0; i < 3; ++i) {
      w[i] = Random(kShape.Size(), &rng);
      weights.push_back(Make(w[i], dtype, kShape));
      sgd.push_back(RefSgd{F(0.02) * lr_mult[i], 0.5, F(F(0.1) * wd_mult[i]), 1, -1, {}});
      adam.push_back(RefAdam{F(0.02) * lr_mult[i], 0.9, 0.999, 1e-8, F(F(0.1) * wd_mult[i]), 1, -1});
    }
    for (int s = 0; s < kSteps; ++s) {
      for (int i = 0; i < 3; ++i) {
        if (i == 1 && s % 2 == 1) continue;
        const Vec g = Random(kShape.Size(), &rng);
        opt->Update(i, weights[i], Make(g, dtype, kShape));
        if (type == "sgd") {
          sgd[i].Step(&w[i], g);
        } else {
          adam[i].Step(&w[i], g);
        }
      }
    }
    for (int i = 0; i < 3; ++i) EXPECT_LT(MaxRelErr(test::ToHost(weights[i]), w[i]), Tolerance(dtype)) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, OptimizerDTypeTest, ::testing::Values(DType::kFloat32, DType::kFloat64),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

// Values produced by MXNet 1.9.1 itself (float32), independent of the rules as read above:
//   o = mx.optimizer.Adam(learning_rate=0.1, wd=0.5, clip_gradient=0.4, rescale_grad=2.0)  (resp. SGD with
//   momentum=0.9); w = mx.nd.array([1.0, -2.0, 0.25]); st = o.create_state(0, w)
//   for g in [[0.5, 0.3, -0.1], [0.1, -0.6, 0.05], [-0.2, 0.2, 0.3]]: o.update(0, w, mx.nd.array(g), st)
TEST(OptimizerTest, MatchesMxnet191) {
  const std::vector<Vec> grads = {{0.5, 0.3, -0.1}, {0.1, -0.6, 0.05}, {-0.2, 0.2, 0.3}};
  struct Case {
    OptimizerConfig config;
    Vec expected;
  };
  const Kwargs common = {{"learning_rate", "0.1"}, {"wd", "0.5"}, {"clip_gradient", "0.4"}, {"rescale_grad", "2"}};
  Kwargs sgd = common;
  sgd.emplace_back("momentum", "0.9");
  const std::vector<Case> cases = {
      {{"adam", common}, {0.7226980924606323, -1.699998140335083, 0.21950170397758484}},
      {{"sgd", sgd}, {0.6334750056266785, -1.529650092124939, 0.17479375004768372}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.config.type);
    auto opt = Optimizer::Create(c.config);
    NDArray w = NDArray::FromVector<float>({1.0f, -2.0f, 0.25f}, TShape{3});
    for (const auto& g : grads) opt->Update(0, w, Make(g, DType::kFloat32, TShape{3}));
    const auto got = w.ToVector<float>();
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], c.expected[i], 2e-6) << i;
  }
}

TEST(OptimizerTest, SetLearningRateAppliesToLaterUpdates) {
  auto opt = Optimizer::Create({"sgd", {{"learning_rate", "0.5"}}});
  EXPECT_FLOAT_EQ(opt->learning_rate(), 0.5f);
  NDArray w = NDArray::FromVector<double>({1.0, 2.0}, TShape{2});
  const NDArray g = NDArray::FromVector<double>({1.0, -1.0}, TShape{2});
  opt->Update(0, w, g);  // w = (0.5, 2.5)
  opt->SetLearningRate(0.25f);
  opt->Update(0, w, g);  // w = (0.25, 2.75)
  const auto got = w.ToVector<double>();
  EXPECT_DOUBLE_EQ(got[0], 0.25);
  EXPECT_DOUBLE_EQ(got[1], 2.75);
  EXPECT_EQ(opt->config().type, "sgd");
}

TEST(OptimizerTest, GradientThatIsTheWeightItself) {
  // grad aliases weight: the update must read the gradient as it was (w -= lr * w).
  auto opt = Optimizer::Create({"sgd", {{"learning_rate", "0.5"}}});
  NDArray w = NDArray::FromVector<double>({2.0, -4.0}, TShape{2});
  opt->Update(0, w, w);
  const auto got = w.ToVector<double>();
  EXPECT_DOUBLE_EQ(got[0], 1.0);
  EXPECT_DOUBLE_EQ(got[1], -2.0);
}

std::string TempPath(const std::string& name) {
  return (::testing::TempDir().empty() ? std::string("/tmp/") : ::testing::TempDir()) + "troupe_opt_" + name +
         "_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + ".states";
}

// Three steps, save, load into a fresh optimizer, three more steps == six uninterrupted steps, exactly
// (same float operations in the same order; Adam's t must carry over or step 4 would differ).
TEST(OptimizerTest, SaveLoadThenContinueEqualsUninterrupted) {
  const std::vector<OptimizerConfig> configs = {
      {"sgd", {{"learning_rate", "0.1"}, {"momentum", "0.9"}, {"wd", "0.01"}}},
      {"adam", {{"learning_rate", "0.01"}, {"wd", "0.01"}}},
  };
  for (const auto& config : configs) {
    SCOPED_TRACE(config.type);
    std::mt19937_64 rng(7);
    std::vector<Vec> grads;
    for (int s = 0; s < kSteps; ++s) grads.push_back(Random(kShape.Size(), &rng));
    const Vec w0 = Random(kShape.Size(), &rng);

    auto straight = Optimizer::Create(config);
    NDArray a0 = Make(w0, DType::kFloat32, kShape), a1 = Make(w0, DType::kFloat32, TShape{5, 7});
    for (int s = 0; s < kSteps; ++s) {
      straight->Update(0, a0, Make(grads[s], DType::kFloat32, kShape));
      straight->Update(3, a1, Make(grads[s], DType::kFloat32, TShape{5, 7}));
    }

    auto first = Optimizer::Create(config);
    NDArray b0 = Make(w0, DType::kFloat32, kShape), b1 = Make(w0, DType::kFloat32, TShape{5, 7});
    for (int s = 0; s < kSteps / 2; ++s) {
      first->Update(0, b0, Make(grads[s], DType::kFloat32, kShape));
      first->Update(3, b1, Make(grads[s], DType::kFloat32, TShape{5, 7}));
    }
    const std::string path = TempPath(config.type);
    first->SaveStates(path);
    // The file is a plain .params list with the documented names.
    std::vector<NDArray> arrays;
    std::vector<std::string> names;
    NDArray::Load(path, &arrays, &names);
    EXPECT_NE(std::find(names.begin(), names.end(), "0:step"), names.end());
    EXPECT_NE(std::find(names.begin(), names.end(), "3:step"), names.end());
    EXPECT_NE(std::find(names.begin(), names.end(), "optimizer:" + config.type), names.end());

    auto second = Optimizer::Create(config);
    second->LoadStates(path);
    for (int s = kSteps / 2; s < kSteps; ++s) {
      second->Update(0, b0, Make(grads[s], DType::kFloat32, kShape));
      second->Update(3, b1, Make(grads[s], DType::kFloat32, TShape{5, 7}));
    }
    EXPECT_EQ(b0.ToVector<float>(), a0.ToVector<float>());
    EXPECT_EQ(b1.ToVector<float>(), a1.ToVector<float>());
    std::remove(path.c_str());
  }
}

TEST(OptimizerTest, Errors) {
  ExpectError([] { Optimizer::Create({"adm", {}}); }, {"adm", "adam, sgd"});
  EXPECT_EQ(Optimizer::ListTypes(), (std::vector<std::string>{"adam", "sgd"}));
  ExpectError([] { Optimizer::Create({"sgd", {{"momentum", "fast"}}}); }, {"sgd", "momentum"});
  ExpectError([] { Optimizer::Create({"adam", {{"beta3", "0.5"}}}); }, {"adam", "beta3"});
  ExpectError([] { Optimizer::Create({"sgd", {{"learning_rate", "-1"}}}); }, {"sgd", "learning_rate"});

  auto opt = Optimizer::Create({"adam", {}});
  NDArray w = NDArray::Zeros(TShape{2, 3}, Context::CPU());
  ExpectError([&] { opt->Update(0, w, NDArray::Zeros(TShape{3, 2}, Context::CPU())); }, {"shape", "(3,2)", "(2,3)"});
  ExpectError([&] { opt->Update(0, w, NDArray::Zeros(TShape{2, 3}, Context::CPU(), DType::kFloat64)); },
              {"dtype", "float64"});
  NDArray wi = NDArray::Zeros(TShape{2}, Context::CPU(), DType::kInt32);
  ExpectError([&] { opt->Update(1, wi, NDArray::Zeros(TShape{2}, Context::CPU(), DType::kInt32)); },
              {"int32", "not supported"});

  // A states file of another optimizer type, or a .params file that is not a states file.
  auto sgd = Optimizer::Create({"sgd", {{"momentum", "0.9"}}});
  sgd->Update(0, w, NDArray::Ones(TShape{2, 3}, Context::CPU()));
  const std::string path = TempPath("sgd_for_adam");
  sgd->SaveStates(path);
  ExpectError([&] { opt->LoadStates(path); }, {path, "sgd", "adam"});
  NDArray::Save(path, {w}, {"arg:w"});
  ExpectError([&] { opt->LoadStates(path); }, {path});
  std::remove(path.c_str());

  // Loaded states that do not fit the weight they are used with.
  sgd->SaveStates(path);
  auto other = Optimizer::Create({"sgd", {{"momentum", "0.5"}}});
  other->LoadStates(path);
  ExpectError([&] { other->Update(0, NDArray::Zeros(TShape{4}, Context::CPU()), NDArray::Zeros(TShape{4}, Context::CPU())); },
              {"index 0", "(2,3)", "(4,)"});
  std::remove(path.c_str());
}

}  // namespace
}  // namespace troupe
