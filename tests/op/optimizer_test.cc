// Optimizers: several steps of "sgd" (plain and with momentum), "nag", "adam", "adagrad" and "rmsprop"
// (plain and centered) compared with reference implementations written here in double precision from
// MXNet's update rules, plus values produced by MXNet 1.9.1 itself; learning-rate schedules ("factor",
// "multifactor", "cosine", with warm-up) against MXNet's sequences; state checkpoints (save, load into a
// fresh optimizer, continue == uninterrupted, schedules included); MXNet 1.9.1's .states files (pickles,
// tests/op/data/states/make_states.py): loaded, continued one step onto MXNet's weights, written back byte
// for byte; malformed pickles; errors. The registered update operators (sgd_update ... mp_nag_mom_update)
// against MXNet 1.9.1's own calls of them (tests/op/data/updates/make_updates.py).
#include "op/optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "op/imperative.h"
#include "op/internal/pickle.h"
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

// MXNet's nag_mom_update as MXNet 1.9.1 runs it in place: the momentum's weight-decay term reads the
// weight already updated (see op/optimizer.h); momentum 0 is sgd_update.
struct RefNag {
  double lr, momentum, wd, rescale, clip;
  Vec mom;
  void Step(Vec* w, const Vec& g) {
    if (mom.empty()) mom.assign(w->size(), 0.0);
    for (std::size_t i = 0; i < w->size(); ++i) {
      double& wi = (*w)[i];
      const double cg = ClipRef(rescale * g[i], clip);
      if (momentum == 0) {
        wi -= lr * (cg + wd * wi);
        continue;
      }
      mom[i] *= momentum;
      const double updated = wi - mom[i] + (momentum + 1) * (mom[i] - lr * (cg + wd * wi));
      mom[i] -= lr * (cg + wd * updated);
      wi = updated;
    }
  }
};

// MXNet's dense AdaGrad (python/mxnet/optimizer/optimizer.py).
struct RefAdaGrad {
  double lr, eps, wd, rescale, clip;
  Vec history;
  void Step(Vec* w, const Vec& g) {
    if (history.empty()) history.assign(w->size(), 0.0);
    for (std::size_t i = 0; i < w->size(); ++i) {
      const double gi = ClipRef(rescale * g[i], clip);
      history[i] += gi * gi;
      (*w)[i] -= lr * (gi / std::sqrt(history[i] + eps) + wd * (*w)[i]);
    }
  }
};

// MXNet's rmsprop_update / rmspropalex_update (centered).
struct RefRmsProp {
  double lr, gamma1, gamma2, epsilon, wd, rescale, clip, clip_weights;
  bool centered;
  Vec n{}, gm{}, delta{};
  void Step(Vec* w, const Vec& g) {
    if (n.empty()) n.assign(w->size(), 0.0), gm.assign(w->size(), 0.0), delta.assign(w->size(), 0.0);
    for (std::size_t i = 0; i < w->size(); ++i) {
      double& wi = (*w)[i];
      const double gi = ClipRef(rescale * g[i] + wd * wi, clip);
      n[i] = (1 - gamma1) * gi * gi + gamma1 * n[i];
      if (centered) {
        gm[i] = (1 - gamma1) * gi + gamma1 * gm[i];
        delta[i] = gamma2 * delta[i] - lr * gi / std::sqrt(n[i] - gm[i] * gm[i] + epsilon);
        wi += delta[i];
      } else {
        wi -= lr * gi / std::sqrt(n[i] + epsilon);
      }
      wi = ClipRef(wi, clip_weights);
    }
  }
};

Vec Random(std::size_t n, std::mt19937_64* rng, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> u(lo, hi);
  Vec v(n);
  for (auto& x : v) x = u(*rng);
  return v;
}

NDArray Make(const Vec& v, DType dtype, const TShape& shape) { return test::ToArray(v, shape, dtype, Context::CPU()); }

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

TEST_P(OptimizerDTypeTest, NagMatchesReference) {
  auto opt = Optimizer::Create({"nag",
                                {{"learning_rate", "0.05"},
                                 {"momentum", "0.9"},
                                 {"wd", "0.01"},
                                 {"rescale_grad", "2"},
                                 {"clip_gradient", "1.5"}}});
  RefNag ref{F(0.05), F(0.9), F(0.01), 2, 1.5, {}};
  CompareSteps(opt.get(), &ref, GetParam(), 11);
  // Without momentum NAG is plain SGD (MXNet calls sgd_update) and keeps no state.
  auto plain = Optimizer::Create({"nag", {{"learning_rate", "0.1"}, {"wd", "0.02"}, {"clip_gradient", "0.5"}}});
  RefNag ref0{F(0.1), 0, F(0.02), 1, 0.5, {}};
  CompareSteps(plain.get(), &ref0, GetParam(), 12);
}

TEST_P(OptimizerDTypeTest, AdaGradMatchesReference) {
  auto defaults = Optimizer::Create({"adagrad", {}});
  EXPECT_FLOAT_EQ(defaults->learning_rate(), 0.01f);
  RefAdaGrad ref{F(0.01), 1e-7, 0, 1, -1, {}};
  CompareSteps(defaults.get(), &ref, GetParam(), 13);
  auto opt = Optimizer::Create({"adagrad",
                                {{"learning_rate", "0.2"},
                                 {"eps", "0.001"},
                                 {"wd", "0.05"},
                                 {"rescale_grad", "0.5"},
                                 {"clip_gradient", "0.6"}}});
  RefAdaGrad ref2{F(0.2), 0.001, F(0.05), 0.5, F(0.6), {}};
  CompareSteps(opt.get(), &ref2, GetParam(), 14);
}

TEST_P(OptimizerDTypeTest, RmsPropMatchesReference) {
  auto defaults = Optimizer::Create({"rmsprop", {}});
  EXPECT_FLOAT_EQ(defaults->learning_rate(), 0.001f);
  RefRmsProp ref{F(0.001), F(0.9), F(0.9), F(1e-8), 0, 1, -1, -1, false};
  CompareSteps(defaults.get(), &ref, GetParam(), 15);
  // Every parameter; clip_weights small enough that some weights end up clipped.
  const Kwargs all = {{"learning_rate", "0.03"}, {"gamma1", "0.8"},      {"gamma2", "0.7"},
                      {"epsilon", "1e-6"},       {"wd", "0.1"},          {"rescale_grad", "0.5"},
                      {"clip_gradient", "0.7"},  {"clip_weights", "0.9"}};
  auto plain = Optimizer::Create({"rmsprop", all});
  RefRmsProp ref2{F(0.03), F(0.8), F(0.7), F(1e-6), F(0.1), 0.5, F(0.7), F(0.9), false};
  CompareSteps(plain.get(), &ref2, GetParam(), 16);
  Kwargs centered_kw = all;
  centered_kw.emplace_back("centered", "True");
  auto centered = Optimizer::Create({"rmsprop", centered_kw});
  RefRmsProp ref3{F(0.03), F(0.8), F(0.7), F(1e-6), F(0.1), 0.5, F(0.7), F(0.9), true};
  CompareSteps(centered.get(), &ref3, GetParam(), 17);
}

// A schedule drives the updates with num_update = the largest count over all indices (index 1, updated
// every other step, takes the rate of index 0's count), times the index's lr_mult.
TEST_P(OptimizerDTypeTest, ScheduleUsesLargestUpdateCount) {
  const DType dtype = GetParam();
  auto opt = Optimizer::Create({"rmsprop",
                                {{"learning_rate", "0.1"}, {"centered", "true"}},
                                "multifactor",
                                {{"step", "(1, 3)"}, {"factor", "0.5"}}});
  opt->SetMultipliers(1, 0.5f, 1.0f);
  std::mt19937_64 rng(18);
  std::vector<Vec> w = {Random(kShape.Size(), &rng), Random(kShape.Size(), &rng)};
  std::vector<NDArray> weights = {Make(w[0], dtype, kShape), Make(w[1], dtype, kShape)};
  std::vector<RefRmsProp> ref(2, RefRmsProp{0, F(0.9), F(0.9), F(1e-8), 0, 1, -1, -1, true});
  auto rate = [](int n) { return n <= 1 ? 0.1 : n <= 3 ? 0.05 : 0.025; };  // MultiFactorScheduler
  int num_update = 0;
  for (int s = 0; s < kSteps; ++s) {
    for (int i = 0; i < 2; ++i) {
      if (i == 1 && s % 2 == 1) continue;
      const Vec g = Random(kShape.Size(), &rng);
      opt->Update(i, weights[i], Make(g, dtype, kShape));
      if (i == 0) ++num_update;
      ref[i].lr = F(rate(num_update) * (i == 1 ? 0.5 : 1.0));
      ref[i].Step(&w[i], g);
    }
  }
  EXPECT_EQ(opt->num_update(), kSteps);
  EXPECT_FLOAT_EQ(opt->learning_rate(), 0.025f);
  for (int i = 0; i < 2; ++i) EXPECT_LT(MaxRelErr(test::ToHost(weights[i]), w[i]), Tolerance(dtype)) << i;
}

INSTANTIATE_TEST_SUITE_P(DTypes, OptimizerDTypeTest, ::testing::Values(DType::kFloat32, DType::kFloat64),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

// Values produced by MXNet 1.9.1 itself (float32), independent of the rules as read above:
//   c = dict(learning_rate=0.1, wd=0.5, clip_gradient=0.4, rescale_grad=2.0)
//   o = mx.optimizer.Adam(**c)  (resp. SGD(momentum=0.9, **c), NAG(momentum=0.9, **c), NAG(**c),
//       AdaGrad(**c), AdaGrad(eps=0.01, **c), RMSProp(clip_weights=1.5, **c),
//       RMSProp(centered=True, gamma1=0.8, gamma2=0.7, clip_weights=1.5, **c))
//   w = mx.nd.array([1.0, -2.0, 0.25]); st = o.create_state(0, w)
//   for g in [[0.5, 0.3, -0.1], [0.1, -0.6, 0.05], [-0.2, 0.2, 0.3]]: o.update(0, w, mx.nd.array(g), st)
// (NAG with momentum: a rule that took the old weight in the momentum's weight decay would give
// [0.53922, -1.35540, 0.11540] instead.)
TEST(OptimizerTest, MatchesMxnet191) {
  const std::vector<Vec> grads = {{0.5, 0.3, -0.1}, {0.1, -0.6, 0.05}, {-0.2, 0.2, 0.3}};
  struct Case {
    OptimizerConfig config;
    Vec expected;
  };
  const Kwargs common = {{"learning_rate", "0.1"}, {"wd", "0.5"}, {"clip_gradient", "0.4"}, {"rescale_grad", "2"}};
  auto with = [](Kwargs kw, const Kwargs& more) {
    kw.insert(kw.end(), more.begin(), more.end());
    return kw;
  };
  const Kwargs sgd = with(common, {{"momentum", "0.9"}});
  const std::vector<Case> cases = {
      {{"adam", common}, {0.7226980924606323, -1.699998140335083, 0.21950170397758484}},
      {{"sgd", sgd}, {0.6334750056266785, -1.529650092124939, 0.17479375004768372}},
      {{"nag", sgd}, {0.5591238141059875, -1.3758445978164673, 0.11591742932796478}},
      {{"nag", common}, {0.8422750234603882, -1.7528499364852905, 0.18289372324943542}},
      {{"adagrad", common}, {0.7913064360618591, -1.7955598831176758, 0.17482125759124756}},
      {{"adagrad", with(common, {{"eps", "0.01"}})}, {0.79411780834198, -1.7932987213134766, 0.17100191116333008}},
      {{"rmsprop", with(common, {{"clip_weights", "1.5"}})},
       {0.5535635948181152, -1.140856146812439, 0.023074910044670105}},
      {{"rmsprop", with(common, {{"centered", "True"}, {"gamma1", "0.8"}, {"gamma2", "0.7"}, {"clip_weights", "1.5"}})},
       {0.19493642449378967, -0.7561857104301453, 0.18685460090637207}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.config.type + " " + std::to_string(&c - cases.data()));
    auto opt = Optimizer::Create(c.config);
    NDArray w = NDArray::FromVector<float>({1.0f, -2.0f, 0.25f}, TShape{3});
    for (const auto& g : grads) opt->Update(0, w, Make(g, DType::kFloat32, TShape{3}));
    const auto got = w.ToVector<float>();
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], c.expected[i], 2e-6) << i;
  }
}

// Learning-rate sequences from MXNet 1.9.1's schedulers, called with num_update = 0, 1, 2, ... as an
// optimizer does:
//   L = mx.lr_scheduler; seq = lambda s, n: [s(i) for i in range(n)]
//   seq(L.FactorScheduler(step=3, factor=0.5, stop_factor_lr=0.01, base_lr=0.1), 16)
//   seq(L.FactorScheduler(step=2, factor=0.9, base_lr=1.0, warmup_steps=3, warmup_begin_lr=0.1), 10)
//   seq(L.MultiFactorScheduler(step=[2, 5, 6], factor=0.1, base_lr=1.0, warmup_steps=2, warmup_begin_lr=0.05,
//                              warmup_mode='constant'), 9)
//   seq(L.CosineScheduler(max_update=10, base_lr=0.5, final_lr=0.05, warmup_steps=3, warmup_begin_lr=0.0), 13)
//   seq(L.CosineScheduler(max_update=4, base_lr=2.0), 6)
// Here learning_rate() is read before each update, whose count then moves num_update on by one.
TEST(OptimizerTest, SchedulesMatchMxnet191) {
  struct Case {
    OptimizerConfig config;
    std::vector<double> expected;
  };
  const std::vector<Case> cases = {
      {{"sgd", {{"learning_rate", "0.1"}}, "factor", {{"step", "3"}, {"factor", "0.5"}, {"stop_factor_lr", "0.01"}}},
       {0.1, 0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025, 0.025, 0.0125, 0.0125, 0.0125, 0.01, 0.01, 0.01}},
      {{"nag",
        {{"momentum", "0.9"}},
        "factor",
        {{"step", "2"}, {"factor", "0.9"}, {"base_lr", "1.0"}, {"warmup_steps", "3"}, {"warmup_begin_lr", "0.1"}}},
       {0.1, 0.4, 0.7, 0.9, 0.9, 0.81, 0.81, 0.7290000000000001, 0.7290000000000001, 0.6561000000000001}},
      {{"adagrad",
        {{"learning_rate", "1"}},
        "multifactor",
        {{"step", "[2, 5, 6]"},
         {"factor", "0.1"},
         {"base_lr", "1"},
         {"warmup_steps", "2"},
         {"warmup_begin_lr", "0.05"},
         {"warmup_mode", "constant"}}},
       {0.05, 0.05, 1.0, 0.1, 0.1, 0.1, 0.010000000000000002, 0.0010000000000000002, 0.0010000000000000002}},
      {{"adam", {}, "cosine", {{"max_update", "10"}, {"base_lr", "0.5"}, {"final_lr", "0.05"}, {"warmup_steps", "3"}}},
       {0.0, 0.16666666666666666, 0.3333333333333333, 0.5, 0.47771799527804426, 0.41528520541821506, 0.3250672101401707,
        0.22493278985982929, 0.13471479458178498, 0.07228200472195573, 0.05, 0.05, 0.05}},
      {{"rmsprop", {{"learning_rate", "2"}}, "cosine", {{"max_update", "4"}}},
       {2.0, 1.7071067811865475, 1.0, 0.29289321881345254, 0.0, 0.0}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.config.type + " " + c.config.lr_scheduler);
    auto opt = Optimizer::Create(c.config);
    NDArray w = NDArray::FromVector<float>({0.5f, -0.5f}, TShape{2});
    const NDArray g = NDArray::FromVector<float>({0.1f, 0.2f}, TShape{2});
    for (std::size_t n = 0; n < c.expected.size(); ++n) {
      EXPECT_EQ(opt->num_update(), static_cast<std::int64_t>(n));
      EXPECT_FLOAT_EQ(opt->learning_rate(), static_cast<float>(c.expected[n])) << "num_update " << n;
      opt->Update(0, w, g);
    }
  }
}

// MXNet 1.9.1, a schedule driving SGD over two indices, index 1 updated every other step:
//   o = mx.optimizer.SGD(learning_rate=0.1, lr_scheduler=L.FactorScheduler(step=2, factor=0.5, base_lr=0.1))
//   w0 = mx.nd.array([1.0, 2.0]); w1 = mx.nd.array([3.0, -1.0]); g = mx.nd.array([1.0, -1.0])
//   for s in range(6): o.update(0, w0, g, None); (o.update(1, w1, g, None) if s % 2 == 0 else None)
//   -> w0 = [0.6499999761581421, 2.3499999046325684], w1 = [2.825000047683716, -0.824999988079071]
TEST(OptimizerTest, ScheduledSgdMatchesMxnet191) {
  auto opt = Optimizer::Create({"sgd", {{"learning_rate", "0.1"}}, "factor", {{"step", "2"}, {"factor", "0.5"}}});
  NDArray w0 = NDArray::FromVector<float>({1.0f, 2.0f}, TShape{2});
  NDArray w1 = NDArray::FromVector<float>({3.0f, -1.0f}, TShape{2});
  const NDArray g = NDArray::FromVector<float>({1.0f, -1.0f}, TShape{2});
  for (int s = 0; s < 6; ++s) {
    opt->Update(0, w0, g);
    if (s % 2 == 0) opt->Update(1, w1, g);
  }
  const auto got0 = w0.ToVector<float>(), got1 = w1.ToVector<float>();
  EXPECT_NEAR(got0[0], 0.6499999761581421, 1e-6);
  EXPECT_NEAR(got0[1], 2.3499999046325684, 1e-6);
  EXPECT_NEAR(got1[0], 2.825000047683716, 1e-6);
  EXPECT_NEAR(got1[1], -0.824999988079071, 1e-6);
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

// UpdateMulti (one engine function for sgd, MXNet's multi_sgd_mom_update) gives bit-identical weights and
// states to Update on each index, for every optimizer, with per-index multipliers and a group that mixes
// dtypes (which sgd splits).
TEST(OptimizerTest, UpdateMultiEqualsUpdateOnEachIndex) {
  for (const std::string type : {"sgd", "nag", "adam"}) {
    for (bool momentum : {false, true}) {
      SCOPED_TRACE(type + (momentum ? " momentum" : ""));
      Kwargs kw = {{"learning_rate", "0.05"}, {"wd", "0.01"}, {"rescale_grad", "0.5"}, {"clip_gradient", "0.8"}};
      if (momentum && type != "adam") kw.emplace_back("momentum", "0.9");
      auto single = Optimizer::Create({type, kw});
      auto multi = Optimizer::Create({type, kw});
      for (Optimizer* o : {single.get(), multi.get()}) o->SetMultipliers(2, 0.5f, 2.0f);
      std::mt19937_64 rng(11);
      const std::vector<DType> dtypes = {DType::kFloat32, DType::kFloat32, DType::kFloat32, DType::kFloat64};
      std::vector<NDArray> ws, wm;
      for (DType d : dtypes) {
        const Vec w = Random(kShape.Size(), &rng);
        ws.push_back(Make(w, d, kShape));
        wm.push_back(Make(w, d, kShape));
      }
      for (int s = 0; s < kSteps; ++s) {
        std::vector<NDArray> gs;
        for (DType d : dtypes) gs.push_back(Make(Random(kShape.Size(), &rng, -2, 2), d, kShape));
        for (int i = 0; i < 4; ++i) single->Update(i, ws[static_cast<std::size_t>(i)], gs[static_cast<std::size_t>(i)]);
        multi->UpdateMulti({0, 1, 2, 3}, wm, gs);
      }
      for (std::size_t i = 0; i < ws.size(); ++i) EXPECT_EQ(test::ToHost(wm[i]), test::ToHost(ws[i])) << i;
      EXPECT_EQ(multi->num_update(), single->num_update());
    }
  }
  auto sgd = Optimizer::Create({"sgd", {{"learning_rate", "0.1"}}});
  EXPECT_EQ(sgd->aggregation_size(), 4);  // MXNet's default (TROUPE_OPTIMIZER_AGGREGATION_SIZE unset in tests)
  EXPECT_EQ(Optimizer::Create({"adam", {}})->aggregation_size(), 1);
  NDArray w = NDArray::Zeros(kShape, Context::CPU(), DType::kFloat32);
  ExpectError([&] { sgd->UpdateMulti({0, 1}, {w}, {w, w}); }, {"sgd", "2 indices, 1 weights and 2 gradients"});
  ExpectError([&] { sgd->UpdateMulti({0, 1}, {w, w}, {w, NDArray::Zeros({3}, Context::CPU(), DType::kFloat32)}); },
              {"index 1", "shape"});
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
  return (::testing::TempDir().empty() ? std::string("/tmp/") : ::testing::TempDir()) + "troupe_opt_" + name + "_" +
         std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + ".states";
}

// Three steps, save, load into a fresh optimizer, three more steps == six uninterrupted steps, exactly
// (same float operations in the same order; Adam's t must carry over or step 4 would differ).
TEST(OptimizerTest, SaveLoadThenContinueEqualsUninterrupted) {
  // The schedules change the rate after the split (num_update 3), so a resumed run that restarted its
  // schedule would differ.
  const std::vector<OptimizerConfig> configs = {
      {"sgd", {{"learning_rate", "0.1"}, {"momentum", "0.9"}, {"wd", "0.01"}}},
      {"adam", {{"learning_rate", "0.01"}, {"wd", "0.01"}}},
      {"nag", {{"learning_rate", "0.1"}, {"momentum", "0.9"}, {"wd", "0.01"}}},
      {"nag", {{"learning_rate", "0.1"}}, "factor", {{"step", "2"}, {"factor", "0.5"}}},
      {"adagrad", {{"learning_rate", "0.1"}, {"wd", "0.01"}}},
      {"rmsprop", {{"learning_rate", "0.01"}, {"clip_weights", "0.8"}}},
      {"rmsprop", {{"learning_rate", "0.01"}, {"centered", "True"}}, "cosine", {{"max_update", "5"}}},
      {"adam", {}, "multifactor", {{"step", "(3, 4)"}, {"factor", "0.5"}, {"base_lr", "0.01"}}},
      {"sgd", {{"momentum", "0.5"}}, "factor", {{"step", "1"}, {"factor", "0.9"}, {"warmup_steps", "4"}}},
  };
  for (const auto& config : configs) {
    SCOPED_TRACE(config.type + " " + config.lr_scheduler + " " + std::to_string(&config - configs.data()));
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
    const std::string path = TempPath(config.type + std::to_string(&config - configs.data()));
    first->SaveStates(path, Optimizer::StatesFormat::kTroupe);
    const std::vector<float> half0 = b0.ToVector<float>(), half1 = b1.ToVector<float>();
    // The file is a plain .params list with the documented names.
    std::vector<NDArray> arrays;
    std::vector<std::string> names;
    NDArray::Load(path, &arrays, &names);
    EXPECT_NE(std::find(names.begin(), names.end(), "0:step"), names.end());
    EXPECT_NE(std::find(names.begin(), names.end(), "3:step"), names.end());
    EXPECT_NE(std::find(names.begin(), names.end(), "optimizer:" + config.type), names.end());

    auto second = Optimizer::Create(config);
    second->LoadStates(path);
    EXPECT_EQ(second->num_update(), kSteps / 2);
    EXPECT_EQ(second->learning_rate(), first->learning_rate());
    for (int s = kSteps / 2; s < kSteps; ++s) {
      second->Update(0, b0, Make(grads[s], DType::kFloat32, kShape));
      second->Update(3, b1, Make(grads[s], DType::kFloat32, TShape{5, 7}));
    }
    EXPECT_EQ(b0.ToVector<float>(), a0.ToVector<float>());
    EXPECT_EQ(b1.ToVector<float>(), a1.ToVector<float>());
    // The loaded states continue onto weights of another engine too (a kvstore server keeps its small keys
    // on a synchronous engine of its own): they move to the weight's engine on its first update.
    EngineConfig naive_config;
    naive_config.type = EngineType::kNaive;
    const auto naive = Engine::Create(naive_config);  // outlives the arrays below
    auto third = Optimizer::Create(config);
    third->LoadStates(path);
    const auto floats = [](const Vec& v) { return std::vector<float>(v.begin(), v.end()); };
    NDArray c0 = NDArray::FromVector(half0, kShape, Context::CPU(), naive.get());
    NDArray c1 = NDArray::FromVector(half1, TShape{5, 7}, Context::CPU(), naive.get());
    for (int s = kSteps / 2; s < kSteps; ++s) {
      third->Update(0, c0, NDArray::FromVector(floats(grads[s]), kShape, Context::CPU(), naive.get()));
      third->Update(3, c1, NDArray::FromVector(floats(grads[s]), TShape{5, 7}, Context::CPU(), naive.get()));
    }
    EXPECT_EQ(c0.ToVector<float>(), a0.ToVector<float>());
    EXPECT_EQ(c1.ToVector<float>(), a1.ToVector<float>());
    std::remove(path.c_str());
  }
}

TEST(OptimizerTest, Errors) {
  ExpectError([] { Optimizer::Create({"adm", {}}); }, {"adm", "adagrad, adam, nag, rmsprop, sgd"});
  EXPECT_EQ(Optimizer::ListTypes(), (std::vector<std::string>{"adagrad", "adam", "nag", "rmsprop", "sgd"}));
  ExpectError([] { Optimizer::Create({"nag", {{"momentum", "fast"}}}); }, {"nag", "momentum"});
  ExpectError([] { Optimizer::Create({"adagrad", {{"epsilon", "0.1"}}}); }, {"adagrad", "epsilon"});
  ExpectError([] { Optimizer::Create({"rmsprop", {{"gamma1", "1.5"}}}); }, {"rmsprop", "gamma1"});
  ExpectError([] { Optimizer::Create({"rmsprop", {{"centered", "maybe"}}}); }, {"rmsprop", "centered"});
  ExpectError([] { Optimizer::Create({"sgd", {{"momentum", "fast"}}}); }, {"sgd", "momentum"});
  ExpectError([] { Optimizer::Create({"adam", {{"beta3", "0.5"}}}); }, {"adam", "beta3"});
  ExpectError([] { Optimizer::Create({"sgd", {{"learning_rate", "-1"}}}); }, {"sgd", "learning_rate"});

  auto opt = Optimizer::Create({"adam", {}});
  NDArray w = NDArray::Zeros(TShape{2, 3}, Context::CPU());
  ExpectError([&] { opt->Update(0, w, NDArray::Zeros(TShape{3, 2}, Context::CPU())); }, {"shape", "(3,2)", "(2,3)"});
  ExpectError(
      [&] {
        opt->Update(0, w, NDArray::Zeros(TShape{2, 3}, Context::CPU(), DType::kFloat64));
      },
      {"dtype", "float64"});
  NDArray wi = NDArray::Zeros(TShape{2}, Context::CPU(), DType::kInt32);
  ExpectError([&] { opt->Update(1, wi, NDArray::Zeros(TShape{2}, Context::CPU(), DType::kInt32)); },
              {"int32", "not supported"});

  // A states file of another optimizer type, or a .params file that is not a states file.
  auto sgd = Optimizer::Create({"sgd", {{"momentum", "0.9"}}});
  sgd->Update(0, w, NDArray::Ones(TShape{2, 3}, Context::CPU()));
  const std::string path = TempPath("sgd_for_adam");
  sgd->SaveStates(path, Optimizer::StatesFormat::kTroupe);
  ExpectError([&] { opt->LoadStates(path); }, {path, "sgd", "adam"});
  NDArray::Save(path, {w}, {"arg:w"});
  ExpectError([&] { opt->LoadStates(path); }, {path});
  std::remove(path.c_str());

  // RMSProp states saved without centering, loaded into a centered configuration.
  auto rms = Optimizer::Create({"rmsprop", {}});
  rms->Update(0, w, NDArray::Ones(TShape{2, 3}, Context::CPU()));
  rms->SaveStates(path, Optimizer::StatesFormat::kTroupe);
  auto rms_centered = Optimizer::Create({"rmsprop", {{"centered", "True"}}});
  rms_centered->LoadStates(path);
  ExpectError(
      [&] {
        rms_centered->Update(0, w, NDArray::Ones(TShape{2, 3}, Context::CPU()));
      },
      {"rmsprop", "index 0", "{n}", "{n, g, delta}"});
  std::remove(path.c_str());

  // Loaded states that do not fit the weight they are used with.
  sgd->SaveStates(path);
  auto other = Optimizer::Create({"sgd", {{"momentum", "0.5"}}});
  other->LoadStates(path);
  ExpectError(
      [&] { other->Update(0, NDArray::Zeros(TShape{4}, Context::CPU()), NDArray::Zeros(TShape{4}, Context::CPU())); },
      {"index 0", "(2,3)", "(4,)"});
  std::remove(path.c_str());
}

TEST(OptimizerTest, ScheduleErrors) {
  EXPECT_EQ(Optimizer::ListLrSchedulers(), (std::vector<std::string>{"cosine", "factor", "multifactor"}));
  auto create = [](const std::string& sched, const Kwargs& params, const Kwargs& opt_params = {}) {
    Optimizer::Create({"sgd", opt_params, sched, params});
  };
  ExpectError([&] { create("cosin", {{"max_update", "5"}}); }, {"cosin", "cosine, factor, multifactor"});
  ExpectError([&] { create("", {{"step", "5"}}); }, {"lr_scheduler", "step"});
  ExpectError([&] { create("factor", {}); }, {"factor", "step"});
  ExpectError([&] { create("factor", {{"step", "0"}}); }, {"factor", "step"});
  ExpectError([&] { create("factor", {{"step", "2"}, {"factor", "1.5"}}); }, {"factor", "1.5"});
  ExpectError([&] { create("factor", {{"step", "2"}, {"stop_lr", "0.1"}}); }, {"factor", "stop_lr"});
  ExpectError([&] { create("multifactor", {{"step", "(5, 3)"}}); }, {"multifactor", "step", "increasing"});
  ExpectError([&] { create("multifactor", {{"step", "()"}}); }, {"multifactor", "step"});
  ExpectError([&] { create("multifactor", {{"step", "(0, 3)"}}); }, {"multifactor", "step"});
  ExpectError([&] { create("cosine", {}); }, {"cosine", "max_update"});
  ExpectError(
      [&] {
        create("cosine", {{"max_update", "3"}, {"warmup_steps", "3"}});
      },
      {"cosine", "max_update", "warmup_steps"});
  ExpectError(
      [&] {
        create("cosine", {{"max_update", "9"}, {"warmup_mode", "exp"}});
      },
      {"cosine", "warmup_mode", "exp"});
  ExpectError([&] { create("cosine", {{"max_update", "9"}, {"warmup_steps", "-1"}}); }, {"cosine", "warmup_steps"});
  ExpectError(
      [&] {
        create("factor", {{"step", "2"}, {"warmup_begin_lr", "0.5"}}, {{"learning_rate", "0.1"}});
      },
      {"factor", "warmup_begin_lr", "base_lr"});
  ExpectError(
      [&] {
        create("factor", {{"step", "2"}, {"base_lr", "0.5"}}, {{"learning_rate", "0.1"}});
      },
      {"factor", "base_lr", "learning_rate"});
  // The same rate given twice is accepted.
  create("factor", {{"step", "2"}, {"base_lr", "0.1"}}, {{"learning_rate", "0.1"}});

  auto opt = Optimizer::Create({"sgd", {}, "factor", {{"step", "2"}}});
  ExpectError([&] { opt->SetLearningRate(0.5f); }, {"factor", "SetLearningRate"});
}

// ---- MXNet's .states (pickles) -------------------------------------------------------------------------

const std::string kStatesDir = std::string(TROUPE_TEST_DATA_DIR) + "/states";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::map<std::string, NDArray> LoadNamed(const std::string& path) {
  std::vector<NDArray> arrays;
  std::vector<std::string> names;
  NDArray::Load(path, &arrays, &names);
  std::map<std::string, NDArray> out;
  for (std::size_t i = 0; i < arrays.size(); ++i) out[names[i]] = arrays[i];
  return out;
}

// make_states.py's optimizers: the module trains with rescale_grad 1/4 and, as MXNet's idx2name does, no
// weight decay on the biases (indices 1 and 3).
struct MXNetStatesCase {
  std::string name;
  OptimizerConfig config;
};

std::vector<MXNetStatesCase> MXNetStatesCases() {
  auto config = [](const std::string& type, Kwargs params) {
    params.emplace_back("wd", "0.001");
    params.emplace_back("rescale_grad", "0.25");
    OptimizerConfig c(type, params);
    c.multipliers = {{1, {1.f, 0.f}}, {3, {1.f, 0.f}}};
    return c;
  };
  return {
      {"sgd", config("sgd", {{"learning_rate", "0.1"}})},
      {"sgd_mom", config("sgd", {{"learning_rate", "0.1"}, {"momentum", "0.9"}})},
      {"nag", config("nag", {{"learning_rate", "0.1"}, {"momentum", "0.9"}})},
      {"adam", config("adam", {{"learning_rate", "0.01"}})},
      {"adagrad", config("adagrad", {{"learning_rate", "0.1"}})},
      {"rmsprop", config("rmsprop", {{"learning_rate", "0.01"}})},
      {"rmsprop_centered", config("rmsprop", {{"learning_rate", "0.01"}, {"centered", "True"}})},
  };
}

// MXNet's Module numbers the states by the position in its parameter list (the symbol's arguments without
// data and label), as troupe's Module does.
const std::vector<std::string> kMlpParams = {"fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias"};

TEST(OptimizerTest, MXNetStatesContinueOntoMXNetsWeights) {
  const auto grads = LoadNamed(kStatesDir + "/grads.params");
  const char* dump = std::getenv("TROUPE_STATES_DUMP");
  for (const auto& c : MXNetStatesCases()) {
    SCOPED_TRACE(c.name);
    const std::string states = kStatesDir + "/" + c.name + "-0001.states";
    auto opt = Optimizer::Create(c.config);
    opt->LoadStates(states);
    EXPECT_EQ(opt->num_update(), 0);  // MXNet's file has no counts; a fresh MXNet optimizer starts at 0 too

    // Written back unchanged: MXNet's bytes exactly.
    const std::string again = TempPath(c.name + "_again.states");
    opt->SaveStates(again);
    EXPECT_EQ(ReadFile(again), ReadFile(states));
    if (dump != nullptr) {
      // For make_states.py --check-troupe: troupe's states as loaded (their arrays must equal MXNet's file's)
      // and, below, after the step (which MXNet must read).
      WriteFile(std::string(dump) + "/" + c.name + "-loaded.states", ReadFile(again));
      WriteFile(std::string(dump) + "/" + c.name + "-loaded.expect", states);
    }
    std::remove(again.c_str());

    auto args = LoadNamed(kStatesDir + "/" + c.name + "-0001.params");
    const auto expected = LoadNamed(kStatesDir + "/" + c.name + "-next.params");
    for (std::size_t i = 0; i < kMlpParams.size(); ++i) {
      opt->Update(static_cast<int>(i), args.at("arg:" + kMlpParams[i]), grads.at(kMlpParams[i]));
    }
    for (const auto& p : kMlpParams) {
      const auto got = args.at("arg:" + p).ToVector<float>();
      const auto want = expected.at("arg:" + p).ToVector<float>();
      ASSERT_EQ(got.size(), want.size()) << p;
      for (std::size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-6) << p << "[" << k << "]";
    }
    if (dump != nullptr) {
      opt->SaveStates(std::string(dump) + "/" + c.name + "-next.states");
    }
  }
}

// multi_precision (make_states.py's mp_sgd_mom): MXNet's (momentum, float32 weight) pairs of float16 weights
// load, write back byte for byte, and continue one update onto MXNet's float16 weights as MXNet's did.
TEST(OptimizerTest, MXNetMultiPrecisionStatesContinueOntoMXNetsWeights) {
  const std::string states = kStatesDir + "/mp_sgd_mom-0001.states";
  const OptimizerConfig config(
      "sgd", {{"learning_rate", "0.1"}, {"momentum", "0.9"}, {"wd", "0.001"}, {"multi_precision", "True"}});
  auto opt = Optimizer::Create(config);
  EXPECT_TRUE(opt->multi_precision());
  opt->LoadStates(states);
  const std::string again = TempPath("mp_again.states");
  opt->SaveStates(again);
  EXPECT_EQ(ReadFile(again), ReadFile(states));
  std::remove(again.c_str());
  auto arrays = LoadNamed(kStatesDir + "/mp_sgd_mom.params");
  for (int i = 0; i < 2; ++i) {
    const std::string n = std::to_string(i);
    NDArray w = arrays.at("w" + n);
    ASSERT_EQ(w.dtype(), DType::kFloat16);
    opt->Update(i, w, arrays.at("g" + n));
    const auto got = w.AsType(DType::kFloat32).ToVector<float>();
    const auto want = arrays.at("next" + n).AsType(DType::kFloat32).ToVector<float>();
    ASSERT_EQ(got.size(), want.size());
    // The float32 weight is updated as MXNet's mp_sgd_mom_update does, then rounded to float16: the same bits.
    for (std::size_t k = 0; k < got.size(); ++k) {
      EXPECT_EQ(got[k], want[k]) << "index " << i << " [" << k << "]";
    }
  }
  // Without multi_precision the pairs are refused, with the hint.
  ExpectError([&] { Optimizer::Create({"sgd", {{"momentum", "0.9"}}})->LoadStates(states); },
              {"index 0", "tuple of 2", "multi_precision=True"});
  ExpectError([&] { Optimizer::Create({"sgd", {{"multi_precision", "maybe"}}}); }, {"multi_precision", "maybe"});
}

// multi_precision from the start: a bfloat16 weight follows the float32 weight's trajectory (it is that
// weight rounded), where updating the bfloat16 weight itself would lose the small steps; the troupe format
// and the pickle both keep the float32 weight.
TEST(OptimizerTest, MultiPrecisionKeepsTheFloat32Weight) {
  for (const char* type : {"sgd", "adam"}) {
    SCOPED_TRACE(type);
    auto mp = Optimizer::Create({type, {{"learning_rate", "0.001"}, {"multi_precision", "True"}}});
    auto ref = Optimizer::Create({type, {{"learning_rate", "0.001"}}});
    NDArray w16 = NDArray::Full(TShape{8}, 1.0, Context::CPU(), DType::kBfloat16);
    NDArray w32 = NDArray::Full(TShape{8}, 1.0, Context::CPU());
    for (int step = 0; step < 20; ++step) {
      NDArray g32 = NDArray::Full(TShape{8}, 0.5, Context::CPU());
      mp->Update(0, w16, g32.AsType(DType::kBfloat16));
      ref->Update(0, w32, g32);
    }
    const auto got = w16.AsType(DType::kFloat32).ToVector<float>();
    const auto want = w32.ToVector<float>();
    for (std::size_t k = 0; k < got.size(); ++k) EXPECT_EQ(got[k], static_cast<float>(bf16_t(want[k]))) << k;
    EXPECT_LT(want[0], 1.0f);  // it moved (by less than bfloat16's step at 1, 2^-7)
    for (auto format : {Optimizer::StatesFormat::kMXNet, Optimizer::StatesFormat::kTroupe}) {
      const std::string path = TempPath(std::string("mp_") + type + ".states");
      mp->SaveStates(path, format);
      auto back = Optimizer::Create({type, {{"learning_rate", "0.001"}, {"multi_precision", "True"}}});
      back->LoadStates(path);
      // The reference continues from its own states saved in the same format (MXNet's drops update counts).
      const std::string ref_path = TempPath(std::string("ref_") + type + ".states");
      ref->SaveStates(ref_path, format);
      auto ref_back = Optimizer::Create({type, {{"learning_rate", "0.001"}}});
      ref_back->LoadStates(ref_path);
      std::remove(ref_path.c_str());
      NDArray w = w16.CopyTo(Context::CPU());
      back->Update(0, w, NDArray::Full(TShape{8}, 0.5, Context::CPU(), DType::kBfloat16));
      NDArray r = w32.CopyTo(Context::CPU());
      ref_back->Update(0, r, NDArray::Full(TShape{8}, 0.5, Context::CPU()));
      const auto a = w.AsType(DType::kFloat32).ToVector<float>();
      const auto b = r.ToVector<float>();
      for (std::size_t k = 0; k < a.size(); ++k) EXPECT_EQ(a[k], static_cast<float>(bf16_t(b[k]))) << k;
      std::remove(path.c_str());
    }
  }
}

TEST(OptimizerTest, MXNetStatesLargeArraysRoundTrip) {
  // Arrays of 64 KiB and more go outside pickle's frames; many indices take several SETITEMS batches
  // (1000 each). What troupe writes, it reads back equal.
  auto opt = Optimizer::Create({"adam", {}});
  std::vector<NDArray> weights;
  for (int i = 0; i < 1003; ++i) {
    const std::int64_t n = i == 0 ? 20000 : (i == 1 ? 9000 : (i % 7) + 1);
    NDArray w = NDArray::Ones(TShape{n}, Context::CPU());
    opt->Update(i, w, NDArray::Ones(TShape{n}, Context::CPU()) * 0.5);
    weights.push_back(w);
  }
  const std::string path = TempPath("large_adam.states");
  opt->SaveStates(path);
  auto back = Optimizer::Create({"adam", {}});
  back->LoadStates(path);
  const std::string again = TempPath("large_adam_again.states");
  back->SaveStates(again);
  EXPECT_EQ(ReadFile(again), ReadFile(path));
  if (const char* dump = std::getenv("TROUPE_STATES_DUMP")) {
    WriteFile(std::string(dump) + "/large_adam.states", ReadFile(path));
  }
  std::remove(path.c_str());
  std::remove(again.c_str());
}

TEST(OptimizerTest, MXNetStatesOfAnotherLayoutAreRefused) {
  const std::string adam = kStatesDir + "/adam-0001.states";
  const std::string mom = kStatesDir + "/sgd_mom-0001.states";
  const std::string plain = kStatesDir + "/sgd-0001.states";
  const std::string rms = kStatesDir + "/rmsprop-0001.states";
  ExpectError([&] { Optimizer::Create({"sgd", {{"momentum", "0.9"}}})->LoadStates(adam); },
              {adam, "index 0", "tuple of 2", "an NDArray (momentum)"});
  ExpectError([&] { Optimizer::Create({"adam", {}})->LoadStates(mom); },
              {mom, "index 0", "holds NDArray", "a tuple of 2 NDArrays (mean, var)"});
  ExpectError([&] { Optimizer::Create({"sgd", {{"momentum", "0.9"}}})->LoadStates(plain); },
              {plain, "index 0", "holds None", "momentum 0 keeps none"});
  ExpectError([&] { Optimizer::Create({"rmsprop", {{"centered", "True"}}})->LoadStates(rms); },
              {rms, "index 0", "tuple of 1", "a tuple of 3 NDArrays (n, g, delta)"});
  // Shapes are checked against the weight at the first update, naming the file.
  auto opt = Optimizer::Create({"adam", {}});
  opt->LoadStates(adam);
  ExpectError([&] { opt->Update(0, NDArray::Zeros(TShape{4}, Context::CPU()), NDArray::Zeros(TShape{4}, Context::CPU())); },
              {"index 0", "(5,3)", "(4,)", adam});
}

TEST(OptimizerTest, MXNetStatesKeyedByName) {
  // MXNet's Module with a KVStore that updates keys the states by parameter name; they load as the indices
  // of those names and are written back with them. (The store's arrays are on cpu_pinned, which loads as
  // cpu(0), so the records differ from MXNet's in the device field; keys and values are the same.)
  const std::string path = kStatesDir + "/sgd_mom-kv-0001.states";
  std::map<int, std::string> names;
  for (std::size_t i = 0; i < kMlpParams.size(); ++i) names[static_cast<int>(i)] = kMlpParams[i];
  auto opt = Optimizer::Create({"sgd", {{"momentum", "0.9"}}});
  opt->LoadStates(path, names);
  const std::string again = TempPath("kv_again.states");
  opt->SaveStates(again, Optimizer::StatesFormat::kMXNet, names);
  const auto ours = internal::ParsePickle(ReadFile(again), again);
  const auto theirs = internal::ParsePickle(ReadFile(path), path);
  ASSERT_EQ(ours->items.size(), theirs->items.size());
  auto values = [](const std::string& record) {
    const NDArray a = NDArray::LoadRawBytes(record.data(), record.size(), "record");
    return std::make_pair(a.shape(), a.ToVector<float>());
  };
  for (std::size_t i = 0; i < theirs->items.size(); i += 2) {
    EXPECT_EQ(ours->items[i]->text, theirs->items[i]->text);
    EXPECT_EQ(values(ours->items[i + 1]->text), values(theirs->items[i + 1]->text)) << theirs->items[i]->text;
  }
  // Index 2 is fc2_weight, (2, 5): a weight of another shape is refused.
  ExpectError([&] { opt->Update(2, NDArray::Zeros(TShape{5, 3}, Context::CPU()), NDArray::Zeros(TShape{5, 3}, Context::CPU())); },
              {"index 2", "(2,5)", "(5,3)", path});
  std::remove(again.c_str());
  // Without the names, or with names that do not include the key, the key is refused, named.
  ExpectError([&] { Optimizer::Create({"sgd", {{"momentum", "0.9"}}})->LoadStates(path); },
              {path, "str 'fc1_weight'", "no parameter names"});
  ExpectError([&] { Optimizer::Create({"sgd", {{"momentum", "0.9"}}})->LoadStates(path, {{0, "w"}}); },
              {path, "str 'fc1_weight'", "(w)"});
}

// A string literal's bytes, zeros included.
template <std::size_t N>
std::string Bytes(const char (&s)[N]) {
  return std::string(s, N - 1);
}

TEST(OptimizerTest, MXNetStatesOfOlderProtocolsRead) {
  // make_states.py re-pickles adam's states with protocols 2 (bytes as _codecs.encode(str, 'latin1'),
  // GLOBAL, BINPUT) and 3 (BINBYTES): they load as the protocol 4 file does.
  const std::string p4 = kStatesDir + "/adam-0001.states";
  for (const char* proto : {"p2", "p3"}) {
    SCOPED_TRACE(proto);
    auto opt = Optimizer::Create({"adam", {}});
    opt->LoadStates(kStatesDir + "/adam-0001." + proto + ".states");
    const std::string again = TempPath(std::string("adam_") + proto + ".states");
    opt->SaveStates(again);
    EXPECT_EQ(ReadFile(again), ReadFile(p4));
    std::remove(again.c_str());
  }
}

TEST(OptimizerTest, MalformedPicklesAreRefused) {
  const std::string good = ReadFile(kStatesDir + "/sgd_mom-0001.states");
  const std::string path = TempPath("bad.states");
  auto load = [&](const std::string& bytes) {
    WriteFile(path, bytes);
    Optimizer::Create({"sgd", {{"momentum", "0.9"}}})->LoadStates(path);
  };
  // Truncated anywhere: a clear error naming the file and a byte offset, never a crash.
  for (std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{11}, std::size_t{60}, good.size() / 2,
                        good.size() - 1}) {
    SCOPED_TRACE(n);
    ExpectError([&] { load(good.substr(0, n)); }, {path, "byte"});
  }
  // Trailing bytes.
  ExpectError([&] { load(good + "x"); }, {path, "follow STOP"});
  // Another global (an arbitrary callable must never be accepted).
  ExpectError([&] { load(Bytes("\x80\x02" "cos\nsystem\n" "X\x02\x00\x00\x00ls\x85R.")); },
              {path, "byte 2", "GLOBAL", "os.system", "does not accept"});
  // An opcode outside the subset (INST, protocol 0's object call), with its offset.
  ExpectError([&] { load(Bytes("\x80\x02(i__main__\nX\n.")); }, {path, "byte 3", "INST (0x69)"});
  // Protocol 0 (Python 2's default).
  ExpectError([&] { load("(dp0\nI0\nNs."); }, {path, "byte 0", "protocol 0 or 1"});
  // Protocol 6 does not exist.
  ExpectError([&] { load(Bytes("\x80\x06}.")); }, {path, "protocol 6"});
  // A memo entry never stored.
  ExpectError([&] { load(Bytes("\x80\x02h\x05.")); }, {path, "memo entry 5"});
  // An NDArray without its handle, and a handle that is not an array record.
  const std::string ndarray_call = Bytes("\x80\x02}K\x00" "cmxnet.ndarray.ndarray\nNDArray\nN\x85R");
  ExpectError([&] { load(ndarray_call + "s."); }, {path, "NDArray without its state"});
  ExpectError([&] { load(ndarray_call + Bytes("}X\x06\x00\x00\x00handleC\x03xyzsbs.")); }, {path, "index 0"});
  // A dict with a str key (a KVStore's string keys are not Module's indices).
  ExpectError([&] { load(Bytes("\x80\x04}\x8c\x01wNs.")); }, {path, "str 'w'", "parameter index"});
  // Tuples nested without end.
  std::string deep = "\x80\x02}K\x00";
  for (int i = 0; i < 100; ++i) deep += "N";
  for (int i = 0; i < 99; ++i) deep += "\x86";
  ExpectError([&] { load(deep + "s."); }, {path, "nested deeper"});
  // A (states, optimizer) pair of dump_optimizer=True: the optimizer's class is refused by name.
  ExpectError([&] { load(Bytes("\x80\x02}cmxnet.optimizer.optimizer\nSGD\n)\x81\x86.")); },
              {path, "mxnet.optimizer.optimizer.SGD", "dump_optimizer"});
  std::remove(path.c_str());
}

// ---- The update operators ------------------------------------------------------------------------------

// make_updates.py's cases: each operator called through Invoke on MXNet's inputs gives MXNet's output and
// mutated states. In place (out = weight, as the optimizers call them) or into another array. float32 and
// float64 to within a few ulps (MXNet's kernels contract some products differently); the mp_* outputs are
// float16 and must be MXNet's bits, their float32 weights within a few ulps.
TEST(UpdateOperatorTest, MatchMXNetsOwnCalls) {
  const std::string dir = std::string(TROUPE_TEST_DATA_DIR) + "/updates";
  std::ifstream in(dir + "/updates.json");
  ASSERT_TRUE(in.good());
  const auto cases = nlohmann::json::parse(in);
  auto arrays = LoadNamed(dir + "/updates.params");
  ASSERT_GE(cases.size(), 14u);
  std::set<std::string> ops;
  for (const auto& c : cases) {
    const std::string name = c.at("case"), op = c.at("op");
    SCOPED_TRACE(name);
    ops.insert(op);
    Kwargs kwargs;
    for (const auto& [k, v] : c.at("kwargs").items()) kwargs.emplace_back(k, v.get<std::string>());
    std::vector<NDArray> inputs;
    for (const auto& n : c.at("inputs")) inputs.push_back(arrays.at(name + ":in:" + n.get<std::string>()).CopyTo(Context::CPU()));
    const NDArray& want_out = arrays.at(name + ":out");
    NDArray out = c.at("in_place").get<bool>() ? inputs[0] : NDArray(want_out.shape(), Context::CPU(), want_out.dtype());
    Invoke(op, inputs, kwargs, {out});
    auto close = [&](const NDArray& got, const NDArray& want, const std::string& what, double ulps) {
      ASSERT_EQ(got.dtype(), want.dtype()) << what;
      const auto g = got.AsType(DType::kFloat64).ToVector<double>();
      const auto w = want.AsType(DType::kFloat64).ToVector<double>();
      ASSERT_EQ(g.size(), w.size()) << what;
      const double eps = want.dtype() == DType::kFloat64 ? 0x1p-52 : 0x1p-23;
      for (std::size_t i = 0; i < g.size(); ++i) {
        EXPECT_LE(std::abs(g[i] - w[i]), ulps * eps * std::max(1.0, std::abs(w[i]))) << what << " [" << i << "]";
      }
    };
    const bool half = want_out.dtype() == DType::kFloat16;
    close(out, want_out, "output", half ? 0 : 4);
    const auto names = c.at("inputs");
    for (const auto& m : c.at("mutated")) {
      const std::string n = m.get<std::string>();
      std::size_t k = 0;
      while (names.at(k).get<std::string>() != n) ++k;
      close(inputs[k], arrays.at(name + ":after:" + n), n, 4);
    }
  }
  EXPECT_EQ(ops.size(), 9u);  // every registered update operator
}

// The same rule in every precision: a bfloat16 weight through mp_sgd_mom_update is the float32 operator's
// weight rounded once, and the float32 weight and momentum are the float32 operator's exactly.
TEST(UpdateOperatorTest, MultiPrecisionIsTheFloat32RuleRounded) {
  const Kwargs kw = {{"lr", "0.05"}, {"momentum", "0.9"}, {"wd", "0.001"}, {"rescale_grad", "0.5"}};
  std::vector<float> w(2500), g(2500), mom(2500);  // more than one chunk
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  for (auto* v : {&w, &g, &mom}) {
    for (float& x : *v) x = u(rng);
  }
  const TShape shape{2500};
  NDArray w16 = NDArray::FromVector(w, shape).AsType(DType::kBfloat16);
  NDArray g16 = NDArray::FromVector(g, shape).AsType(DType::kBfloat16);
  NDArray w32 = w16.AsType(DType::kFloat32), mom_mp = NDArray::FromVector(mom, shape);
  NDArray ref_w = w32.CopyTo(Context::CPU()), ref_mom = mom_mp.CopyTo(Context::CPU());
  for (int step = 0; step < 3; ++step) {
    Invoke("mp_sgd_mom_update", {w16, g16, mom_mp, w32}, kw, {w16});
    Invoke("sgd_mom_update", {ref_w, g16.AsType(DType::kFloat32), ref_mom}, kw, {ref_w});
  }
  EXPECT_EQ(w32.ToVector<float>(), ref_w.ToVector<float>());
  EXPECT_EQ(mom_mp.ToVector<float>(), ref_mom.ToVector<float>());
  EXPECT_EQ(w16.AsType(DType::kFloat32).ToVector<float>(), ref_w.AsType(DType::kBfloat16).AsType(DType::kFloat32).ToVector<float>());
}

TEST(UpdateOperatorTest, BadInputsAreErrors) {
  const TShape s{4};
  const NDArray w = NDArray::Full(s, 1.0, Context::CPU()), g = NDArray::Full(s, 1.0, Context::CPU());
  ExpectError([&] { Invoke("sgd_update", {w, g}, {}); }, {"sgd_update", "lr"});
  ExpectError([&] { Invoke("sgd_mom_update", {w, g, NDArray::Full(TShape{5}, 0.0, Context::CPU())}, {{"lr", "0.1"}}); },
              {"sgd_mom_update", "mom", "(5,)", "(4,)"});
  const NDArray h = w.AsType(DType::kFloat16);
  ExpectError([&] { Invoke("sgd_update", {h, h}, {{"lr", "0.1"}}); }, {"float16", "mp_"});
  ExpectError([&] { Invoke("mp_sgd_update", {h, w, w}, {{"lr", "0.1"}}); }, {"mp_sgd_update", "grad", "float32"});
  // The float32 weight of an mp_ operator must be float32.
  ExpectError([&] { Invoke("mp_sgd_update", {h, h, h}, {{"lr", "0.1"}}); }, {"mp_sgd_update", "weight32"});
}

}  // namespace
}  // namespace troupe
