// Activation, LeakyReLU, BatchNorm, Dropout, softmax/log_softmax, SoftmaxOutput and the regression heads on
// the CPU: forward against hand-computed values, gradients against central differences (the harness also
// checks kAddTo and in-place), the loss heads' gradients against hand-computed ones, shape inference tables
// and the errors for inconsistent shapes and bad parameters.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "op/nn/activation/activation.h"
#include "op/nn/batch_norm/batch_norm.h"
#include "op/nn/dropout/dropout.h"
#include "op/nn/leaky_relu/leaky_relu.h"
#include "op/nn/regression_output/regression_output.h"
#include "op/nn/softmax/softmax.h"
#include "tensor/resource.h"
#include "tests/common/op_test_util.h"

namespace troupe::test {
namespace {

using ::testing::HasSubstr;

void ExpectBadParam(const std::string& op, const Kwargs& kwargs, const std::string& param) {
  test::ExpectInitError(op, kwargs, {op, param});
}

const HostTensor kActIn = {-2, -0.5, 0, 1.5};

// ================================================================================== Activation
TEST(ActivationTest, ForwardMatchesHandComputedValues) {
  const std::vector<std::pair<std::string, HostTensor>> cases = {
      {"relu", {0, 0, 0, 1.5}},
      {"sigmoid", {0.11920292202211755, 0.3775406687981454, 0.5, 0.8175744761936437}},
      {"tanh", {-0.9640275800758169, -0.46211715726000974, 0.0, 0.9051482536448664}},
      {"softrelu", {0.1269280110429725, 0.4740769841801067, 0.6931471805599453, 1.7014132779827524}},
      {"softsign", {-2.0 / 3, -1.0 / 3, 0, 0.6}},
  };
  for (const auto& [act, want] : cases) {
    for (DType dt : {DType::kFloat64, DType::kFloat32}) {
      OpCase c{"Activation", {{"act_type", act}}, {TShape{4}}, dt};
      const double tol = dt == DType::kFloat64 ? 1e-14 : 1e-6;
      EXPECT_TRUE(Near(RunForward(c, {kActIn})[0], want, tol, tol, act));
    }
  }
}

TEST(ActivationTest, GradientsMatchCentralDifferences) {
  for (const char* act : {"relu", "sigmoid", "tanh", "softrelu", "softsign"}) {
    for (const TShape& s : {TShape{3, 4}, TShape{2, 3, 2}}) {
      CheckGradient(OpCase{"Activation", {{"act_type", act}}, {s}});
    }
  }
}

// Large arrays run in element ranges on the kernel threads (CpuParallelFor): every element of a float32 array
// long enough to be cut (120,000 > 2 x the grain) against the formula in double, forward and backward, and
// backward under kAddTo.
TEST(ActivationTest, LargeArraysAgreeWithTheFormulaEverywhere) {
  const TShape s{3, 40000};
  std::mt19937_64 rng(5);
  const HostTensor x = RandomTensor(s, &rng, -4, 4), head = RandomTensor(s, &rng);
  struct F {
    std::string act;
    double (*f)(double);
    double (*df)(double);
  };
  const std::vector<F> fs = {
      {"relu", [](double v) { return v > 0 ? v : 0; }, [](double v) { return v > 0 ? 1.0 : 0.0; }},
      {"sigmoid", [](double v) { return 1 / (1 + std::exp(-v)); },
       [](double v) { const double y = 1 / (1 + std::exp(-v)); return y * (1 - y); }},
      {"tanh", [](double v) { return std::tanh(v); }, [](double v) { return 1 - std::tanh(v) * std::tanh(v); }},
      {"softrelu", [](double v) { return std::log1p(std::exp(v)); }, [](double v) { return 1 / (1 + std::exp(-v)); }},
      {"softsign", [](double v) { return v / (1 + std::abs(v)); },
       [](double v) { return 1 / ((1 + std::abs(v)) * (1 + std::abs(v))); }},
  };
  for (const F& f : fs) {
    OpCase c{"Activation", {{"act_type", f.act}}, {s}, DType::kFloat32};
    const HostTensor start(x.size(), 0.25);
    const FwdBwd r = RunForwardBackward(c, {x}, {head}, {}, {}, {}, {start});
    HostTensor y(x.size()), g(x.size()), g_add(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double xf = static_cast<float>(x[i]);
      y[i] = f.f(xf);
      g[i] = static_cast<float>(head[i]) * f.df(xf);
      g_add[i] = 0.25 + g[i];
    }
    EXPECT_TRUE(Near(r.out[0], y, 1e-5, 1e-6, f.act + " forward"));
    EXPECT_TRUE(Near(r.grad[0], g, 1e-4, 1e-6, f.act + " backward"));
    EXPECT_TRUE(Near(r.grad_add[0], g_add, 1e-4, 1e-6, f.act + " backward kAddTo"));
  }
}

TEST(ActivationTest, BackwardReadsWhatMXNetReads) {
  auto relu = MakeProp(OpCase{"Activation", {{"act_type", "relu"}}, {TShape{2}}});
  EXPECT_EQ(relu->DeclareBackwardDependency({0}, {1}, {2}), (std::vector<int>{0, 2}));
  EXPECT_EQ(relu->ForwardInplaceOption({1}, {nullptr}).size(), 1u);
  auto softsign = MakeProp(OpCase{"Activation", {{"act_type", "softsign"}}, {TShape{2}}});
  EXPECT_EQ(softsign->DeclareBackwardDependency({0}, {1}, {2}), (std::vector<int>{0, 1}));
  EXPECT_TRUE(softsign->ForwardInplaceOption({1}, {nullptr}).empty());  // backward needs the input
}

TEST(ActivationTest, ShapesAndBadParameters) {
  for (const TShape& s : {TShape{5}, TShape{2, 3}, TShape{2, 3, 4, 5}}) {
    EXPECT_EQ(InferOutShapes(OpCase{"Activation", {{"act_type", "tanh"}}, {s}}), std::vector<TShape>{s});
  }
  EXPECT_TRUE(InferOutShapes(OpCase{"Activation", {{"act_type", "tanh"}}, {TShape()}}).empty());
  ExpectBadParam("Activation", {}, "act_type");  // required
  ExpectBadParam("Activation", {{"act_type", "swish"}}, "act_type");
  ExpectBadParam("Activation", {{"act_type", "relu"}, {"slope", "0.1"}}, "slope");
  // Integer data: a clear error naming the operator, raised where the output is read.
  ExpectError([] { RunForward(OpCase{"Activation", {{"act_type", "relu"}}, {TShape{2}}, DType::kInt32}, {{1, 2}}); },
              {"Activation", "int32"});
}

// =================================================================================== LeakyReLU
TEST(LeakyReLUTest, ForwardMatchesHandComputedValues) {
  const HostTensor x = {-1, 2, -0.5, 1};
  auto run = [&](const Kwargs& kw) { return RunForward(OpCase{"LeakyReLU", kw, {TShape{4}}}, {x})[0]; };
  EXPECT_TRUE(Near(run({}), {-0.25, 2, -0.125, 1}, 1e-15, 1e-15, "leaky default slope"));
  EXPECT_TRUE(Near(run({{"act_type", "leaky"}, {"slope", "0.1"}}), {-0.1, 2, -0.05, 1}, 1e-7, 1e-7, "leaky"));
  EXPECT_TRUE(Near(run({{"act_type", "elu"}, {"slope", "1"}}), {-0.6321205588285577, 2, std::expm1(-0.5), 1}, 1e-14,
                   1e-14, "elu"));
  EXPECT_TRUE(Near(run({{"act_type", "selu"}}), {-1.1113307378125625, 2.101401974710961, 1.0507009873554805 * 1.6732632423543772 * std::expm1(-0.5), 1.0507009873554805},
                   1e-13, 1e-13, "selu"));
  EXPECT_TRUE(Near(RunForward(OpCase{"LeakyReLU", {{"act_type", "gelu"}}, {TShape{3}}}, {{1, -1, 0.5}})[0],
                   {0.8413447460685429, -0.15865525393145707, 0.34573123063700656}, 1e-14, 1e-14, "gelu"));
  // rrelu at inference: the mean slope (0.125 + 0.334) / 2.
  OpCase rr{"LeakyReLU", {{"act_type", "rrelu"}}, {TShape{4}}};
  rr.is_train = false;
  const double s = (0.125 + 0.334) / 2;
  EXPECT_TRUE(Near(RunForward(rr, {x})[0], {-s, 2, -0.5 * s, 1}, 1e-7, 1e-7, "rrelu inference"));
  // prelu: one slope per channel (axis 1) or one shared slope.
  OpCase pr{"LeakyReLU", {{"act_type", "prelu"}}, {TShape{2, 2}, TShape{2}}};
  EXPECT_TRUE(Near(RunForward(pr, {{-1, -2, 3, -4}, {0.5, 0.1}})[0], {-0.5, -0.2, 3, -0.4}, 1e-15, 1e-15, "prelu"));
  OpCase pr1{"LeakyReLU", {{"act_type", "prelu"}}, {TShape{2, 2}, TShape{1}}};
  EXPECT_TRUE(Near(RunForward(pr1, {{-1, -2, 3, -4}, {0.5}})[0], {-0.5, -1, 3, -2}, 1e-15, 1e-15, "prelu shared"));
}

TEST(LeakyReLUTest, GradientsMatchCentralDifferences) {
  for (const Kwargs& kw : std::vector<Kwargs>{{{"act_type", "leaky"}},
                                              {{"act_type", "leaky"}, {"slope", "0.02"}},
                                              {{"act_type", "elu"}, {"slope", "0.7"}},
                                              {{"act_type", "selu"}},
                                              {{"act_type", "gelu"}}}) {
    CheckGradient(OpCase{"LeakyReLU", kw, {TShape{3, 4}}});
  }
  CheckGradient(OpCase{"LeakyReLU", {{"act_type", "prelu"}}, {TShape{2, 3, 2}, TShape{3}}});
  CheckGradient(OpCase{"LeakyReLU", {{"act_type", "prelu"}}, {TShape{3, 2}, TShape{1}}});
  OpCase rr{"LeakyReLU", {{"act_type", "rrelu"}}, {TShape{3, 4}}};
  rr.is_train = false;  // deterministic slope at inference
  CheckGradient(rr);
}

TEST(LeakyReLUTest, RReLUTrainingDrawsSlopesInBoundsAndBackwardUsesThem) {
  OpCase c{"LeakyReLU", {{"act_type", "rrelu"}, {"lower_bound", "0.2"}, {"upper_bound", "0.3"}}, {TShape{64}}};
  std::mt19937_64 rng(7);
  const HostTensor x = RandomTensor(TShape{64}, &rng), head = RandomTensor(TShape{64}, &rng);
  const FwdBwd r = RunForwardBackward(c, {x}, {head});
  const HostTensor& y = r.out[0];
  const HostTensor& mask = r.out[1];
  std::set<double> distinct;
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_GE(mask[i], 0.2 - 1e-12);
    EXPECT_LE(mask[i], 0.3 + 1e-12);
    distinct.insert(mask[i]);
    EXPECT_DOUBLE_EQ(y[i], x[i] > 0 ? x[i] : mask[i] * x[i]);
    EXPECT_DOUBLE_EQ(r.grad[0][i], head[i] * (x[i] > 0 ? 1.0 : mask[i]));
  }
  EXPECT_GT(distinct.size(), 32u);  // random, not one slope
}

TEST(LeakyReLUTest, ShapesAndBadParameters) {
  EXPECT_EQ(InferOutShapes(OpCase{"LeakyReLU", {}, {TShape{2, 3}}}), std::vector<TShape>{TShape({2, 3})});
  EXPECT_EQ(InferOutShapes(OpCase{"LeakyReLU", {{"act_type", "rrelu"}}, {TShape{2, 3}}}),
            (std::vector<TShape>{TShape{2, 3}, TShape{2, 3}}));
  // prelu infers gamma from the channel axis.
  OpCase pr{"LeakyReLU", {{"act_type", "prelu"}}, {TShape{4, 5, 6}, TShape()}};
  auto prop = MakeProp(pr);
  std::vector<TShape> in = pr.in_shapes, out, aux;
  ASSERT_TRUE(prop->InferShape(&in, &out, &aux));
  EXPECT_EQ(in[1], TShape{5});
  EXPECT_EQ(prop->ListArguments(), (std::vector<std::string>{"data", "gamma"}));
  ExpectError([] { InferOutShapes(OpCase{"LeakyReLU", {{"act_type", "prelu"}}, {TShape{4, 5}, TShape{4}}}); },
              {"LeakyReLU", "gamma"});
  ExpectBadParam("LeakyReLU", {{"act_type", "swish"}}, "act_type");
  ExpectBadParam("LeakyReLU", {{"slope", "fast"}}, "slope");
  ExpectBadParam("LeakyReLU", {{"act_type", "rrelu"}, {"lower_bound", "0.5"}, {"upper_bound", "0.1"}}, "lower_bound");
  ExpectBadParam("LeakyReLU", {{"alpha", "1"}}, "alpha");
}

// =================================================================================== BatchNorm
const HostTensor kBnX = {1, 2, 2, 4, 3, 6};  // (3, 2): channel 0 = 1, 2, 3; channel 1 = 2, 4, 6

TEST(BatchNormTest, TrainingForwardNormalisesWithBatchStatisticsAndUpdatesMovingOnes) {
  OpCase c{"BatchNorm", {{"fix_gamma", "False"}}, {TShape{3, 2}, TShape{2}, TShape{2}}};
  std::vector<HostTensor> aux;
  const auto out = RunForward(c, {kBnX, {2, 0.5}, {0.1, -1}}, {{0.5, -0.5}, {1, 2}}, &aux);
  // mean (2, 4), biased variance (2/3, 8/3), eps 1e-3.
  EXPECT_TRUE(Near(out[0], {-2.3476546896530013, -1.612257648147091, 0.1, -1.0, 2.5476546896530015, -0.38774235185290906},
                   1e-13, 1e-13, "output"));
  EXPECT_TRUE(Near(out[1], {2, 4}, 1e-15, 1e-15, "saved mean"));
  EXPECT_TRUE(Near(out[2], {1.2238273448265007, 0.6122576481470909}, 1e-14, 1e-14, "saved inverse std"));
  // moving = moving * 0.9 + batch * 0.1, with the biased batch variance.
  // momentum is a float parameter (as in MXNet): 0.9f is not exactly 0.9.
  EXPECT_TRUE(Near(aux[0], {0.65, -0.05}, 1e-6, 1e-6, "moving_mean"));
  EXPECT_TRUE(Near(aux[1], {0.9 + 0.1 * 2.0 / 3, 1.8 + 0.1 * 8.0 / 3}, 1e-6, 1e-6, "moving_var"));
  // fix_gamma (the default) ignores gamma.
  OpCase f{"BatchNorm", {}, {TShape{3, 2}, TShape{2}, TShape{2}}};
  EXPECT_TRUE(Near(RunForward(f, {kBnX, {2, 0.5}, {0.1, -1}})[0],
                   {-1.1238273448265006, -2.224515296294182, 0.1, -1.0, 1.3238273448265008, 0.22451529629418188}, 1e-13,
                   1e-13, "fix_gamma output"));
}

TEST(BatchNormTest, InferenceAndGlobalStatsUseTheMovingStatistics) {
  const HostTensor want = {1.0995003746877732, -0.11633741155637212, 3.09850112406332, 0.5905926591985302,
                           5.0975018734388655, 1.2975227299534327};
  for (bool global : {false, true}) {
    OpCase c{"BatchNorm", {{"fix_gamma", "False"}, {"use_global_stats", global ? "True" : "False"}},
             {TShape{3, 2}, TShape{2}, TShape{2}}};
    c.is_train = global;  // use_global_stats: the moving statistics even in training
    std::vector<HostTensor> aux;
    const auto out = RunForward(c, {kBnX, {2, 0.5}, {0.1, -1}}, {{0.5, -0.5}, {1, 2}}, &aux);
    EXPECT_TRUE(Near(out[0], want, 1e-13, 1e-13, "output"));
    EXPECT_TRUE(Near(aux[0], {0.5, -0.5}, 0, 0, "moving_mean unchanged"));
    EXPECT_TRUE(Near(aux[1], {1, 2}, 0, 0, "moving_var unchanged"));
  }
}

TEST(BatchNormTest, GradientsMatchCentralDifferences) {
  struct Case {
    Kwargs kw;
    TShape data;
    bool train;
  };
  const std::vector<Case> cases = {
      {{{"fix_gamma", "False"}}, TShape{4, 3}, true},
      {{}, TShape{2, 3, 2, 2}, true},  // fix_gamma: gamma's gradient is 0
      {{{"fix_gamma", "False"}, {"axis", "-1"}}, TShape{2, 2, 3}, true},
      {{{"fix_gamma", "False"}, {"eps", "0.01"}, {"momentum", "0.5"}}, TShape{3, 2, 3}, true},
      {{{"fix_gamma", "False"}, {"use_global_stats", "True"}}, TShape{3, 2, 2}, true},
      {{{"fix_gamma", "False"}}, TShape{3, 2, 2}, false},
  };
  for (const auto& k : cases) {
    const std::int64_t ch = k.data[k.kw.size() > 1 && k.kw[1].first == "axis" ? 2 : 1];
    OpCase c{"BatchNorm", k.kw, {k.data, TShape{ch}, TShape{ch}}};
    c.is_train = k.train;
    GradCheckOptions o;
    o.aux = {HostTensor(static_cast<std::size_t>(ch), 0.2), HostTensor(static_cast<std::size_t>(ch), 1.5)};
    o.rtol = 1e-5;
    o.atol = 1e-6;
    CheckGradient(c, o);
  }
}

// float32 sums each row of a channel in float vector lanes (the rows in double): on images of a ResNet
// layer's proportions, with an offset mean, it agrees with float64 to float32 rounding, forward (output,
// mean, inverse std, moving statistics) and backward, with batch and with moving statistics, with and
// without fix_gamma.
TEST(BatchNormTest, Float32AgreesWithFloat64) {
  struct Case {
    Kwargs kw;
    bool train;
  };
  const std::vector<Case> cases = {
      {{{"fix_gamma", "False"}}, true},
      {{{"fix_gamma", "False"}}, false},
      {{}, false},
      {{{"fix_gamma", "False"}, {"use_global_stats", "True"}, {"eps", "0.01"}}, true},
  };
  std::mt19937_64 rng(5);
  for (const Case& k : cases) {
    OpCase c{"BatchNorm", k.kw, {TShape{6, 5, 15, 13}, TShape{5}, TShape{5}}};
    c.is_train = k.train;
    HostTensor x = test::RandomTensor(c.in_shapes[0], &rng, 2.0, 4.0);
    const std::vector<HostTensor> in = {x, test::RandomTensor(TShape{5}, &rng, 0.5, 1.5),
                                        test::RandomTensor(TShape{5}, &rng)};
    const HostTensor head = test::RandomTensor(c.in_shapes[0], &rng);
    const std::vector<HostTensor> aux = {test::RandomTensor(TShape{5}, &rng, 2.5, 3.5),
                                         test::RandomTensor(TShape{5}, &rng, 0.5, 1.5)};
    const FwdBwd ref = RunForwardBackward(c, in, {head}, {}, {}, aux);
    c.dtype = DType::kFloat32;
    const FwdBwd got = RunForwardBackward(c, in, {head}, {}, {}, aux);
    const std::string what = "case " + std::to_string(&k - cases.data()) + " ";
    for (std::size_t i = 0; i < ref.out.size(); ++i) {
      EXPECT_TRUE(Near(got.out[i], ref.out[i], 1e-5, 1e-5, what + "output " + std::to_string(i)));
    }
    for (std::size_t i = 0; i < ref.aux.size(); ++i) {
      EXPECT_TRUE(Near(got.aux[i], ref.aux[i], 1e-5, 1e-5, what + "moving statistic " + std::to_string(i)));
    }
    for (std::size_t i = 0; i < ref.grad.size(); ++i) {
      EXPECT_TRUE(Near(got.grad[i], ref.grad[i], 1e-4, 1e-4, what + "gradient " + std::to_string(i)));
    }
  }
}

TEST(BatchNormTest, FixGammaGivesZeroGammaGradientAndKeepsAddTo) {
  OpCase c{"BatchNorm", {}, {TShape{3, 2}, TShape{2}, TShape{2}}};
  const FwdBwd r = RunForwardBackward(c, {kBnX, {2, 0.5}, {0.1, -1}}, {{1, 2, 3, 4, 5, 6}},
                                      {kWriteTo, kAddTo, kWriteTo},
                                      {HostTensor(6, 0.0), {7, 8}, {0, 0}});
  EXPECT_TRUE(Near(r.grad[1], {7, 8}, 0, 0, "gamma gradient with fix_gamma (kAddTo keeps it)"));
  EXPECT_TRUE(Near(r.grad[2], {1 + 3 + 5, 2 + 4 + 6}, 1e-12, 1e-12, "beta gradient = sum of out_grad"));
}

TEST(BatchNormTest, ShapesAndBadParameters) {
  struct Row {
    Kwargs kw;
    TShape data;
    std::int64_t ch;
  };
  for (const auto& r : std::vector<Row>{{{}, TShape{2, 3}, 3},
                                        {{}, TShape{2, 3, 4, 5}, 3},
                                        {{{"axis", "-1"}}, TShape{2, 3, 4, 5}, 5},
                                        {{{"axis", "0"}}, TShape{7}, 7}}) {
    OpCase c{"BatchNorm", r.kw, {r.data, TShape(), TShape()}};
    auto prop = MakeProp(c);
    std::vector<TShape> in = c.in_shapes, out, aux;
    ASSERT_TRUE(prop->InferShape(&in, &out, &aux));
    EXPECT_EQ(in[1], TShape{r.ch});
    EXPECT_EQ(in[2], TShape{r.ch});
    EXPECT_EQ(out, (std::vector<TShape>{r.data, TShape{r.ch}, TShape{r.ch}}));
    EXPECT_EQ(aux, (std::vector<TShape>{TShape{r.ch}, TShape{r.ch}}));
  }
  auto prop = MakeProp(OpCase{"BatchNorm", {{"output_mean_var", "True"}}, {}});
  EXPECT_EQ(prop->NumVisibleOutputs(), 3);
  EXPECT_EQ(prop->ListAuxiliaryStates(), (std::vector<std::string>{"moving_mean", "moving_var"}));
  EXPECT_EQ(MakeProp(OpCase{"BatchNorm", {}, {}})->NumVisibleOutputs(), 1);
  ExpectError([] { InferOutShapes(OpCase{"BatchNorm", {}, {TShape{2, 3}, TShape{4}, TShape()}}); }, {"BatchNorm", "gamma"});
  ExpectError([] { InferOutShapes(OpCase{"BatchNorm", {}, {TShape{2, 3}, TShape{3}, TShape{2}}}); }, {"BatchNorm", "beta"});
  ExpectError([] { InferOutShapes(OpCase{"BatchNorm", {{"axis", "2"}}, {TShape{2, 3}, TShape(), TShape()}}); },
              {"BatchNorm", "axis"});
  ExpectBadParam("BatchNorm", {{"momentum", "1.5"}}, "momentum");
  ExpectBadParam("BatchNorm", {{"eps", "small"}}, "eps");
  ExpectBadParam("BatchNorm", {{"eps", "-1"}}, "eps");
  ExpectBadParam("BatchNorm", {{"fix_gamma", "maybe"}}, "fix_gamma");
  ExpectBadParam("BatchNorm", {{"gamma", "1"}}, "gamma");
}

// ===================================================================================== Dropout
TEST(DropoutTest, TrainingMaskKeepsAboutOneMinusPAndScales) {
  for (double p : {0.5, 0.2, 0.9}) {
    OpCase c{"Dropout", {{"p", std::to_string(p)}}, {TShape{100, 100}}};
    const HostTensor x(10000, 3.0);
    const auto out = RunForward(c, {x});
    std::size_t kept = 0;
    const double scale = 1.0 / (1.0 - p);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double m = out[1][i];
      ASSERT_TRUE(m == 0.0 || std::fabs(m - scale) < 1e-6 * scale) << "mask value " << m;
      kept += m != 0.0;
      ASSERT_DOUBLE_EQ(out[0][i], x[i] * m);
    }
    // Binomial(10000, 1 - p): within 5 standard deviations (a false failure about once in 1.7 million runs).
    EXPECT_NEAR(static_cast<double>(kept) / 10000, 1 - p, 5 * std::sqrt(p * (1 - p) / 10000)) << "p = " << p;
  }
}

TEST(DropoutTest, BackwardIsOutGradTimesMaskExactly) {
  for (DType dt : {DType::kFloat64, DType::kFloat32}) {
    OpCase c{"Dropout", {{"p", "0.3"}}, {TShape{8, 16}}, dt};
    std::mt19937_64 rng(3);
    const HostTensor x = RandomTensor(TShape{8, 16}, &rng), head = RandomTensor(TShape{8, 16}, &rng);
    const HostTensor init = RandomTensor(TShape{8, 16}, &rng);
    const FwdBwd w = RunForwardBackward(c, {x}, {head});
    const FwdBwd a = RunForwardBackward(c, {x}, {head}, {kAddTo}, {init});
    std::size_t dropped = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(w.grad[0][i], dt == DType::kFloat64 ? head[i] * w.out[1][i]
                                                    : static_cast<double>(static_cast<float>(head[i]) *
                                                                          static_cast<float>(w.out[1][i])));
      const double ga = a.grad[0][i] - (dt == DType::kFloat64 ? init[i] : static_cast<double>(static_cast<float>(init[i])));
      EXPECT_NEAR(ga, head[i] * a.out[1][i], 1e-5);
      dropped += w.out[1][i] == 0;
    }
    EXPECT_GT(dropped, 0u);
    EXPECT_LT(dropped, x.size());
  }
}

TEST(DropoutTest, InferenceAndZeroPAreTheIdentity) {
  std::mt19937_64 rng(4);
  const HostTensor x = RandomTensor(TShape{5, 6}, &rng);
  OpCase inference{"Dropout", {{"p", "0.7"}}, {TShape{5, 6}}};
  inference.is_train = false;
  auto out = RunForward(inference, {x});
  EXPECT_EQ(out[0], x);
  EXPECT_EQ(out[1], HostTensor(30, 1.0));
  OpCase zero{"Dropout", {{"p", "0"}}, {TShape{5, 6}}};
  EXPECT_EQ(RunForward(zero, {x})[0], x);
  // mode='always' drops at inference too; p = 1 drops everything.
  OpCase always{"Dropout", {{"p", "0.5"}, {"mode", "always"}}, {TShape{5, 6}}};
  always.is_train = false;
  out = RunForward(always, {x});
  EXPECT_NE(out[0], x);
  OpCase all{"Dropout", {{"p", "1"}}, {TShape{5, 6}}};
  EXPECT_EQ(RunForward(all, {x})[0], HostTensor(30, 0.0));
  // The identity cases pass the full gradient check (kAddTo, in-place forward and backward included).
  CheckGradient(zero);
  CheckGradient(inference);
}

TEST(DropoutTest, AxesShareTheMaskAndSeedsReproduce) {
  OpCase c{"Dropout", {{"p", "0.5"}, {"axes", "(1,)"}}, {TShape{6, 10}}};
  const HostTensor x(60, 1.0);
  ResourceManager::Get()->SeedRandom(42);
  const auto a = RunForward(c, {x});
  ASSERT_EQ(a[1].size(), 6u);  // mask (6, 1)
  for (int r = 0; r < 6; ++r) {
    for (int k = 0; k < 10; ++k) EXPECT_EQ(a[0][r * 10 + k], a[1][r]) << r << "," << k;
  }
  ResourceManager::Get()->SeedRandom(42);
  EXPECT_EQ(RunForward(c, {x})[1], a[1]);
  OpCase big{"Dropout", {{"p", "0.5"}}, {TShape{64}}};
  ResourceManager::Get()->SeedRandom(1);
  const auto m1 = RunForward(big, {HostTensor(64, 1.0)})[1];
  const auto m2 = RunForward(big, {HostTensor(64, 1.0)})[1];
  EXPECT_NE(m1, m2);  // the generator moves on between calls
}

TEST(DropoutTest, ShapesAndBadParameters) {
  EXPECT_EQ(InferOutShapes(OpCase{"Dropout", {}, {TShape{2, 3}}}), (std::vector<TShape>{TShape{2, 3}, TShape{2, 3}}));
  EXPECT_EQ(InferOutShapes(OpCase{"Dropout", {{"axes", "(0, 2)"}}, {TShape{2, 3, 4}}}),
            (std::vector<TShape>{TShape{2, 3, 4}, TShape{1, 3, 1}}));
  EXPECT_EQ(MakeProp(OpCase{"Dropout", {}, {}})->NumVisibleOutputs(), 1);
  ExpectError([] { InferOutShapes(OpCase{"Dropout", {{"axes", "(3,)"}}, {TShape{2, 3}}}); }, {"Dropout", "axes"});
  ExpectBadParam("Dropout", {{"p", "1.5"}}, "'p'");
  ExpectBadParam("Dropout", {{"p", "half"}}, "'p'");
  ExpectBadParam("Dropout", {{"mode", "sometimes"}}, "mode");
  ExpectBadParam("Dropout", {{"rate", "0.1"}}, "rate");
}

// ============================================================================ softmax, log_softmax
TEST(SoftmaxTest, ForwardMatchesHandComputedValues) {
  EXPECT_TRUE(Near(RunForward(OpCase{"softmax", {}, {TShape{3}}}, {{1, 2, 3}})[0],
                   {0.09003057317038046, 0.24472847105479764, 0.6652409557748218}, 1e-14, 1e-15, "softmax"));
  EXPECT_TRUE(Near(RunForward(OpCase{"log_softmax", {}, {TShape{3}}}, {{1, 2, 3}})[0],
                   {-2.40760596444438, -1.4076059644443804, -0.40760596444438046}, 1e-14, 1e-15, "log_softmax"));
  EXPECT_TRUE(Near(RunForward(OpCase{"softmax", {{"temperature", "2"}}, {TShape{3}}}, {{1, 2, 3}})[0],
                   {0.1863237232258476, 0.3071958857184984, 0.506480391055654}, 1e-14, 1e-15, "temperature 2"));
  // axis 0 of [[1, -1], [4, 0]]: columns (1, 4) and (-1, 0).
  EXPECT_TRUE(Near(RunForward(OpCase{"softmax", {{"axis", "0"}}, {TShape{2, 2}}}, {{1, -1, 4, 0}})[0],
                   {0.04742587317756679, 0.2689414213699951, 0.9525741268224334, 0.7310585786300049}, 1e-14, 1e-15,
                   "axis 0"));
  // Large inputs do not overflow (the maximum is subtracted).
  const auto big = RunForward(OpCase{"softmax", {}, {TShape{2}}, DType::kFloat32}, {{1000, 1000}})[0];
  EXPECT_TRUE(Near(big, {0.5, 0.5}, 1e-7, 1e-7, "large inputs"));
}

TEST(SoftmaxTest, GradientsMatchCentralDifferences) {
  for (const char* op : {"softmax", "log_softmax"}) {
    for (const Kwargs& kw : std::vector<Kwargs>{{}, {{"axis", "0"}}, {{"axis", "1"}, {"temperature", "2.5"}}}) {
      CheckGradient(OpCase{op, kw, {TShape{2, 3, 2}}});
    }
    CheckGradient(OpCase{op, {}, {TShape{5}}});
  }
}

TEST(SoftmaxTest, ShapesTypesAndBadParameters) {
  EXPECT_EQ(InferOutShapes(OpCase{"softmax", {{"axis", "-2"}}, {TShape{2, 3}}}), std::vector<TShape>{TShape({2, 3})});
  ExpectError([] { InferOutShapes(OpCase{"softmax", {{"axis", "2"}}, {TShape{2, 3}}}); }, {"softmax", "axis"});
  ExpectError([] { InferOutShapes(OpCase{"log_softmax", {{"axis", "-3"}}, {TShape{2, 3}}}); }, {"log_softmax", "axis"});
  auto p = MakeProp(OpCase{"softmax", {{"dtype", "float64"}}, {}});
  std::vector<int> in{kTypeUnknown}, out, aux;
  ASSERT_TRUE(p->InferType(&in, &out, &aux));
  EXPECT_EQ(out, std::vector<int>{static_cast<int>(DType::kFloat64)});
  std::vector<int> in32{static_cast<int>(DType::kFloat32)};
  ASSERT_TRUE(p->InferType(&in32, &out, &aux));  // dtype is the output's type only, as in MXNet
  EXPECT_EQ(out, std::vector<int>{static_cast<int>(DType::kFloat64)});
  ExpectBadParam("softmax", {{"dtype", "int8"}}, "dtype");
  ExpectBadParam("softmax", {{"temperature", "0"}}, "temperature");
  ExpectBadParam("log_softmax", {{"use_length", "True"}}, "use_length");  // MXNet's log_softmax has no length
  ExpectBadParam("log_softmax", {{"axis", "x"}}, "axis");
  ExpectBadParam("softmax", {{"axes", "1"}}, "axes");
}

// =============================================================================== SoftmaxOutput
// softmax of each row of `x` (rows of n) minus the one-hot label, as the test computes it.
HostTensor SoftmaxMinusOneHot(const HostTensor& x, int n, const std::vector<int>& labels) {
  HostTensor g(x.size());
  for (std::size_t r = 0; r < x.size() / n; ++r) {
    double mx = -INFINITY, s = 0;
    for (int k = 0; k < n; ++k) mx = std::max(mx, x[r * n + k]);
    for (int k = 0; k < n; ++k) s += std::exp(x[r * n + k] - mx);
    for (int k = 0; k < n; ++k) g[r * n + k] = std::exp(x[r * n + k] - mx) / s - (k == labels[r] ? 1 : 0);
  }
  return g;
}

const HostTensor kSoX = {1, 2, 3, 0.5, -1, 2};  // (2, 3)

TEST(SoftmaxOutputTest, ForwardIsSoftmaxAndBackwardIsSoftmaxMinusOneHot) {
  OpCase c{"SoftmaxOutput", {}, {TShape{2, 3}, TShape{2}}};
  const HostTensor heads(6, 123.0);  // ignored by the loss head
  const FwdBwd r = RunForwardBackward(c, {kSoX, {2, 0}}, {heads}, {kWriteTo, kWriteTo}, {HostTensor(6, 0.0), {5, 5}});
  EXPECT_TRUE(Near(HostTensor(r.out[0].begin(), r.out[0].begin() + 3),
                   {0.09003057317038046, 0.24472847105479764, 0.6652409557748218}, 1e-14, 1e-15, "row 0"));
  EXPECT_TRUE(Near(r.grad[0], SoftmaxMinusOneHot(kSoX, 3, {2, 0}), 1e-14, 1e-15, "gradient"));
  EXPECT_TRUE(Near(r.grad[1], {0, 0}, 0, 0, "label gradient"));
  // Hand values of row 0: (0.0900, 0.2447, 0.6652 - 1).
  EXPECT_NEAR(r.grad[0][2], 0.6652409557748218 - 1, 1e-14);
}

TEST(SoftmaxOutputTest, NormalizationGradScaleIgnoreAndSmoothing) {
  const HostTensor base = SoftmaxMinusOneHot(kSoX, 3, {2, 0});
  auto grad = [&](const Kwargs& kw, const HostTensor& label) {
    return RunForwardBackward(OpCase{"SoftmaxOutput", kw, {TShape{2, 3}, TShape{2}}}, {kSoX, label}, {HostTensor(6, 1.0)})
        .grad[0];
  };
  HostTensor want = base;
  for (auto& v : want) v *= 2;
  EXPECT_TRUE(Near(grad({{"grad_scale", "2"}}, {2, 0}), want, 1e-14, 1e-15, "grad_scale"));
  want = base;
  for (auto& v : want) v /= 2;
  EXPECT_TRUE(Near(grad({{"normalization", "batch"}}, {2, 0}), want, 1e-14, 1e-15, "batch"));
  // use_ignore: row 1 (label -1) gets nothing; 'valid' divides by the one label left.
  want = base;
  for (int k = 3; k < 6; ++k) want[k] = 0;
  EXPECT_TRUE(Near(grad({{"use_ignore", "True"}}, {2, -1}), want, 1e-14, 1e-15, "use_ignore"));
  EXPECT_TRUE(Near(grad({{"use_ignore", "True"}, {"normalization", "valid"}}, {2, -1}), want, 1e-14, 1e-15, "valid"));
  // ignore_label 1 and labels (2, 1): the same rows (row 1 ignored, one valid label).
  EXPECT_TRUE(Near(grad({{"use_ignore", "True"}, {"normalization", "valid"}, {"ignore_label", "1"}}, {2, 1}), want,
                   1e-14, 1e-15, "valid with ignore_label 1"));
  // 'valid' without ignored labels divides by both.
  HostTensor half = base;
  for (auto& v : half) v /= 2;
  EXPECT_TRUE(Near(grad({{"normalization", "valid"}}, {2, 0}), half, 1e-14, 1e-15, "valid, none ignored"));
  // Smoothing 0.3 over 3 classes: the true class targets 0.7, the others 0.15.
  HostTensor sm = base;
  const std::vector<int> lab = {2, 0};
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < 3; ++k) sm[r * 3 + k] += (k == lab[r] ? 1.0 : 0.0) - (k == lab[r] ? 0.7 : 0.15);
  }
  EXPECT_TRUE(Near(grad({{"smooth_alpha", "0.3"}}, {2, 0}), sm, 1e-6, 1e-7, "smooth_alpha"));
}

TEST(SoftmaxOutputTest, MultiOutputPreserveShapeSoftLabelsOutGradAndAddTo) {
  // multi_output: data (1, 3, 2): softmax over axis 1 for each of the 2 positions; label (1, 2).
  const HostTensor x = {1, 0.5, 2, -1, 3, 2};  // position 0: (1, 2, 3); position 1: (0.5, -1, 2)
  const FwdBwd m = RunForwardBackward(OpCase{"SoftmaxOutput", {{"multi_output", "True"}}, {TShape{1, 3, 2}, TShape{1, 2}}},
                                      {x, {2, 0}}, {HostTensor(6, 1.0)});
  const HostTensor rows = SoftmaxMinusOneHot(kSoX, 3, {2, 0});  // the same numbers, transposed
  for (int k = 0; k < 3; ++k) {
    EXPECT_NEAR(m.grad[0][k * 2], rows[k], 1e-14);
    EXPECT_NEAR(m.grad[0][k * 2 + 1], rows[3 + k], 1e-14);
  }
  EXPECT_NEAR(m.out[0][4], 0.6652409557748218, 1e-14);
  // preserve_shape: (1, 2, 3) with labels (1, 2).
  const FwdBwd p = RunForwardBackward(OpCase{"SoftmaxOutput", {{"preserve_shape", "True"}}, {TShape{1, 2, 3}, TShape{1, 2}}},
                                      {kSoX, {2, 0}}, {HostTensor(6, 1.0)});
  EXPECT_TRUE(Near(p.grad[0], rows, 1e-14, 1e-15, "preserve_shape"));
  // Probability labels of the data's shape: softmax - label.
  const HostTensor prob = {0.2, 0.3, 0.5, 1, 0, 0};
  const FwdBwd s = RunForwardBackward(OpCase{"SoftmaxOutput", {}, {TShape{2, 3}, TShape{2, 3}}}, {kSoX, prob},
                                      {HostTensor(6, 1.0)});
  for (int j = 0; j < 6; ++j) EXPECT_NEAR(s.grad[0][j], s.out[0][j] - prob[j], 1e-14) << j;
  // out_grad=True multiplies by the incoming gradient.
  const HostTensor head = {1, 2, 3, 4, 5, 6};
  const FwdBwd o = RunForwardBackward(OpCase{"SoftmaxOutput", {{"out_grad", "True"}}, {TShape{2, 3}, TShape{2}}},
                                      {kSoX, {2, 0}}, {head});
  for (int j = 0; j < 6; ++j) EXPECT_NEAR(o.grad[0][j], rows[j] * head[j], 1e-13) << j;
  // kAddTo adds to what is there; the label's kAddTo gradient is left alone.
  const FwdBwd a = RunForwardBackward(OpCase{"SoftmaxOutput", {}, {TShape{2, 3}, TShape{2}}}, {kSoX, {2, 0}},
                                      {HostTensor(6, 1.0)}, {kAddTo, kAddTo}, {HostTensor(6, 10.0), {3, 4}});
  for (int j = 0; j < 6; ++j) EXPECT_NEAR(a.grad[0][j], 10 + rows[j], 1e-13) << j;
  EXPECT_EQ(a.grad[1], (HostTensor{3, 4}));
}

TEST(SoftmaxOutputTest, ShapesAliasAndBadParameters) {
  auto label_of = [](const Kwargs& kw, const TShape& d, const TShape& l = TShape()) {
    OpCase c{"SoftmaxOutput", kw, {d, l}};
    auto p = MakeProp(c);
    std::vector<TShape> in = c.in_shapes, out, aux;
    EXPECT_TRUE(p->InferShape(&in, &out, &aux));
    EXPECT_EQ(out, std::vector<TShape>{d});
    return in[1];
  };
  EXPECT_EQ(label_of({}, TShape{4, 10}), TShape{4});
  EXPECT_EQ(label_of({{"multi_output", "True"}}, TShape{4, 10, 5, 6}), (TShape{4, 5, 6}));
  EXPECT_EQ(label_of({{"preserve_shape", "True"}}, TShape{4, 5, 10}), (TShape{4, 5}));
  EXPECT_EQ(label_of({}, TShape{4, 10}, TShape{-1, -1}), (TShape{4, 10}));  // probabilities
  ExpectError([] { InferOutShapes(OpCase{"SoftmaxOutput", {}, {TShape{4, 10}, TShape{5}}}); }, {"SoftmaxOutput", "label"});
  ExpectError([] { InferOutShapes(OpCase{"SoftmaxOutput", {{"multi_output", "True"}}, {TShape{4, 10, 3}, TShape{4, 10}}}); },
              {"SoftmaxOutput", "label"});
  // MXNet's deprecated name.
  const OperatorInfo* info = OperatorRegistry::Get().Find("Softmax");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->name, "SoftmaxOutput");
  EXPECT_FALSE(info->description.empty());
  EXPECT_EQ(OperatorProperty::Create("Softmax")->TypeString(), "SoftmaxOutput");
  ExpectBadParam("SoftmaxOutput", {{"normalization", "mean"}}, "normalization");
  ExpectBadParam("SoftmaxOutput", {{"grad_scale", "big"}}, "grad_scale");
  ExpectBadParam("SoftmaxOutput", {{"smooth_alpha", "-0.1"}}, "smooth_alpha");
  ExpectBadParam("SoftmaxOutput", {{"num_hidden", "3"}}, "num_hidden");
}

// ============================================================================ regression heads
TEST(RegressionOutputTest, ForwardAndHandComputedGradients) {
  const HostTensor x = {0, 1, -2, 0.5, 2, -1};  // (2, 3)
  const HostTensor label = {1, 1, 0, 0, 1, -1};
  // Linear: identity; gradient (out - label) * grad_scale / 3 (num_output = 6 / 2).
  const FwdBwd lin = RunForwardBackward(OpCase{"LinearRegressionOutput", {{"grad_scale", "1.5"}}, {TShape{2, 3}, TShape{2, 3}}},
                                        {x, label}, {HostTensor(6, 9.0)}, {kWriteTo, kWriteTo}, {HostTensor(6, 0.0), HostTensor(6, 4.0)});
  EXPECT_EQ(lin.out[0], x);
  EXPECT_TRUE(Near(lin.grad[0], {-0.5, 0, -1, 0.25, 0.5, 0}, 1e-7, 1e-7, "linear gradient"));
  EXPECT_EQ(lin.grad[1], HostTensor(6, 0.0));
  // Logistic: sigmoid; gradient (sigmoid - label) / 3.
  const FwdBwd lg = RunForwardBackward(OpCase{"LogisticRegressionOutput", {}, {TShape{2, 3}, TShape{2, 3}}}, {x, label},
                                       {HostTensor(6, 1.0)});
  EXPECT_TRUE(Near(lg.out[0], {0.5, 0.7310585786300049, 0.11920292202211755, 0.6224593312018546, 0.8807970779778823, 0.2689414213699951},
                   1e-14, 1e-15, "sigmoid"));
  for (int j = 0; j < 6; ++j) EXPECT_NEAR(lg.grad[0][j], (lg.out[0][j] - label[j]) / 3, 1e-15) << j;
  // MAE: sign(out - label) / 3; kAddTo accumulates.
  const FwdBwd mae = RunForwardBackward(OpCase{"MAERegressionOutput", {}, {TShape{2, 3}, TShape{2, 3}}}, {x, {1, 0, 0, 0, 3, -2}},
                                        {HostTensor(6, 1.0)}, {kAddTo, kNullOp}, {HostTensor(6, 1.0), HostTensor(6, 0.0)});
  EXPECT_TRUE(Near(mae.grad[0], {1 - 1.0 / 3, 1 + 1.0 / 3, 1 - 1.0 / 3, 1 + 1.0 / 3, 1 - 1.0 / 3, 1 + 1.0 / 3}, 1e-15, 1e-15,
                   "mae"));
  // (n, 1) data with (n,) labels: num_output 1.
  const FwdBwd col = RunForwardBackward(OpCase{"LinearRegressionOutput", {}, {TShape{3, 1}, TShape()}}, {{1, 2, 3}, {0, 2, 5}},
                                        {HostTensor(3, 1.0)});
  EXPECT_TRUE(Near(col.grad[0], {1, 0, -2}, 0, 0, "(n, 1) data"));
}

TEST(RegressionOutputTest, ShapesAndBadParameters) {
  auto label_of = [](const std::string& op, const TShape& d, const TShape& l = TShape()) {
    OpCase c{op, {}, {d, l}};
    std::vector<TShape> in = c.in_shapes, out, aux;
    EXPECT_TRUE(MakeProp(c)->InferShape(&in, &out, &aux));
    EXPECT_EQ(out, std::vector<TShape>{d});
    return in[1];
  };
  EXPECT_EQ(label_of("LinearRegressionOutput", TShape{5, 1}), TShape{5});
  EXPECT_EQ(label_of("LogisticRegressionOutput", TShape{5, 3}), (TShape{5, 3}));
  EXPECT_EQ(label_of("MAERegressionOutput", TShape{5, 3}, TShape{5, 3, 1}), (TShape{5, 3, 1}));  // same size: accepted
  ExpectError([] { InferOutShapes(OpCase{"LinearRegressionOutput", {}, {TShape{2, 3}, TShape{3, 2}}}); },
              {"LinearRegressionOutput", "label"});
  ExpectError([] { InferOutShapes(OpCase{"LogisticRegressionOutput", {}, {TShape{2, 3}, TShape{2}}}); },
              {"LogisticRegressionOutput", "label"});
  ExpectBadParam("LinearRegressionOutput", {{"grad_scale", "x"}}, "grad_scale");
  ExpectBadParam("MAERegressionOutput", {{"scale", "1"}}, "scale");
  for (const char* op : {"LinearRegressionOutput", "LogisticRegressionOutput", "MAERegressionOutput", "softmax",
                         "log_softmax", "Activation", "LeakyReLU", "BatchNorm", "Dropout", "SoftmaxOutput"}) {
    const OperatorInfo* info = OperatorRegistry::Get().Find(op);
    ASSERT_NE(info, nullptr) << op;
    EXPECT_FALSE(info->description.empty()) << op;
    EXPECT_FALSE(info->arguments.empty()) << op;
  }
}

}  // namespace
}  // namespace troupe::test
