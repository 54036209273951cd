// The executor's inference fusion (ExecutorOptions::fuse_inference, op/detail/fusion.h): Convolution [-> BatchNorm]
// -> activation and Convolution [-> BatchNorm] -> elemwise_add [-> activation] run as one oneDNN convolution with
// post-ops (the BatchNorm folded into its weights), the arrays between fused convolutions in oneDNN's blocked
// layout, in executors bound without gradients. Each case binds the same float32 arrays twice, fused and not, and
// compares the outputs within float32 rounding; the cases that must not fuse (other readers, requested outputs,
// gradients, float64, softsign) check that nothing was fused and the results are unchanged. The profiler names
// the fused node.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/profiler.h"
#include "graph/executor.h"
#include "graph/models.h"
#include "graph/symbol.h"
#include "tests/common/op_test_util.h"
#include "tests/common/test_params.h"

namespace troupe {
namespace {

using test::HostTensor;

Symbol Var(const std::string& name) { return Symbol::Variable(name); }
Symbol Conv(const Symbol& x, int filters, const std::string& kernel, const std::string& name, Kwargs extra = {}) {
  Kwargs p{{"kernel", kernel}, {"num_filter", std::to_string(filters)}};
  p.insert(p.end(), extra.begin(), extra.end());
  return Symbol::Create("Convolution", p, std::vector<Symbol>{x}, name);
}
Symbol Relu(const Symbol& x, const std::string& name, const std::string& type = "relu") {
  return Symbol::Create("Activation", {{"act_type", type}}, std::vector<Symbol>{x}, name);
}
Symbol Add(const Symbol& a, const Symbol& b, const std::string& name) {
  return Symbol::Create("elemwise_add", {}, std::vector<Symbol>{a, b}, name);
}
Symbol BatchNorm(const Symbol& x, const std::string& name, Kwargs p = {}) {
  return Symbol::Create("BatchNorm", p, std::vector<Symbol>{x}, name);
}

class FusionTest : public ::testing::TestWithParam<test::EngineParam> {
 protected:
  void SetUp() override { engine_ = test::MakeEngine(GetParam()); }
  void TearDown() override {
    if (engine_ != nullptr) engine_->WaitForAll();
    engine_.reset();
  }

  struct Run {
    std::vector<HostTensor> outputs;
    std::vector<HostTensor> aux;  // the auxiliary states after the runs (BatchNorm's moving statistics)
    std::vector<std::string> fused;
  };

  // Binds `net` (shapes from `data_shapes`, every argument random in [-1, 1] from `seed`) with `fuse`, runs
  // Forward(is_train) twice (the second with other data, so the cached weights and primitives are reused)
  // and returns the outputs of the second run.
  Run Forward(const Symbol& net, const std::map<std::string, TShape>& data_shapes, int fuse, std::uint64_t seed,
              OpReqType req = kNullOp, DType dtype = DType::kFloat32, bool plan = true, int bulk = -1,
              bool is_train = false) {
    std::vector<TShape> arg_shapes, out_shapes, aux_shapes;
    std::string why;
    EXPECT_TRUE(net.InferShape(data_shapes, &arg_shapes, &out_shapes, &aux_shapes, &why)) << why;
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(-1, 1);
    auto random = [&](const TShape& s) {
      HostTensor v(static_cast<std::size_t>(s.Size()));
      for (auto& x : v) x = u(rng);
      return NDArray::FromVector<double>(v, s, Context::CPU(), engine()).AsType(dtype);
    };
    std::vector<NDArray> args, grads, aux;
    for (const auto& s : arg_shapes) {
      args.push_back(random(s));
      grads.push_back(req == kNullOp ? NDArray() : NDArray::Zeros(s, Context::CPU(), dtype, engine()));
    }
    // Auxiliary states (BatchNorm's moving mean and variance) in [0.5, 1.5]: a variance must be positive.
    for (const auto& s : aux_shapes) {
      HostTensor v(static_cast<std::size_t>(s.Size()));
      for (auto& x : v) x = 1 + u(rng) / 2;
      aux.push_back(NDArray::FromVector<double>(v, s, Context::CPU(), engine()).AsType(dtype));
    }
    ExecutorOptions opt;
    opt.engine = engine();
    opt.fuse_inference = fuse;
    opt.plan_memory = plan;
    opt.bulk_max_nodes = bulk;
    auto exec = Executor::Bind(net, Context::CPU(), args, req == kNullOp ? std::vector<NDArray>{} : grads,
                               {req}, aux, opt);
    exec->Forward(is_train);
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (net.ListArguments()[i] == "data" || net.ListArguments()[i] == "res") CopyFromTo(random(args[i].shape()), args[i]);
    }
    exec->Forward(is_train);
    Run r;
    for (const auto& o : exec->outputs()) r.outputs.push_back(o.AsType(DType::kFloat64).ToVector<double>());
    for (const auto& a : aux) r.aux.push_back(a.AsType(DType::kFloat64).ToVector<double>());
    r.fused = exec->fused_nodes();
    return r;
  }

  // Fused and unfused forward passes agree within float32 rounding; returns the fused node names.
  // With `is_train` (an inference bind driven with Forward(true)) also the auxiliary states after the runs.
  // `tolerance` relative to the output's largest magnitude: 1e-5 for post-ops, more with a folded BatchNorm
  // (its weights rounded to float32 once more, the normalisation applied before the sums instead of after).
  std::vector<std::string> ExpectSameAsUnfused(const Symbol& net, const std::map<std::string, TShape>& shapes,
                                               const std::string& what, bool plan = true, int bulk = -1,
                                               bool is_train = false, double tolerance = 1e-5) {
    const std::uint64_t seed = test::TestSeed();
    Run off = Forward(net, shapes, 0, seed, kNullOp, DType::kFloat32, plan, bulk, is_train);
    Run on = Forward(net, shapes, 1, seed, kNullOp, DType::kFloat32, plan, bulk, is_train);
    EXPECT_TRUE(off.fused.empty()) << what;
    EXPECT_EQ(on.outputs.size(), off.outputs.size()) << what;
    std::vector<HostTensor> on_all = on.outputs, off_all = off.outputs;
    if (is_train) {
      on_all.insert(on_all.end(), on.aux.begin(), on.aux.end());
      off_all.insert(off_all.end(), off.aux.begin(), off.aux.end());
    }
    for (std::size_t k = 0; k < on_all.size() && k < off_all.size(); ++k) {
      const HostTensor& a = on_all[k];
      const HostTensor& b = off_all[k];
      EXPECT_EQ(a.size(), b.size()) << what;
      if (a.size() != b.size()) continue;
      double scale = 0;
      for (double x : b) scale = std::max(scale, std::abs(x));
      double worst = 0;
      for (std::size_t i = 0; i < a.size(); ++i) {
        const double err = std::abs(a[i] - b[i]);
        worst = std::max(worst, err);
        // float32 rounding of sums of a few dozen products (the algorithms may differ: Winograd or direct).
        EXPECT_LE(err, tolerance * (scale + 1)) << what << ": output " << k << " [" << i << "]: fused " << a[i]
                                            << ", unfused " << b[i];
      }
      std::cout << "[fusion] " << what << ": output " << k << " max |fused - unfused| " << worst << " (scale "
                << scale << ")" << std::endl;
    }
    return on.fused;
  }

  // The suite's engine; the process engine where none was made (the profiler keeps the last engine it
  // recorded, so it records the process engine, which outlives the tests).
  Engine* engine() { return engine_ != nullptr ? engine_.get() : Engine::Get(); }
  std::unique_ptr<Engine> engine_;
};

class FusionProfilerTest : public FusionTest {
 protected:
  void SetUp() override {}
};

using Names = std::vector<std::string>;

TEST_P(FusionTest, ConvolutionAndReluFuseWithOddShapesStridesPadsAndGroups) {
  struct Case {
    std::string what;
    Kwargs extra;
    std::string kernel;
    int filters;
    TShape data;
  };
  const std::vector<Case> cases = {
      {"3x3 pad 1 bias", {{"pad", "(1, 1)"}}, "(3, 3)", 5, TShape{2, 3, 7, 9}},
      {"3x3 pad 1 wide (Winograd)", {{"pad", "(1, 1)"}, {"no_bias", "True"}}, "(3, 3)", 32, TShape{1, 16, 11, 13}},
      {"3x2 stride 2", {{"stride", "(2, 2)"}}, "(3, 2)", 7, TShape{3, 5, 9, 8}},
      {"5x5 stride (2, 3) pad (2, 1)", {{"stride", "(2, 3)"}, {"pad", "(2, 1)"}}, "(5, 5)", 4, TShape{1, 2, 13, 10}},
      {"3x3 groups 2 no bias", {{"num_group", "2"}, {"no_bias", "True"}, {"pad", "(1, 1)"}}, "(3, 3)", 6,
       TShape{2, 4, 6, 5}},
      {"depthwise groups 8", {{"num_group", "8"}, {"pad", "(1, 1)"}}, "(3, 3)", 8, TShape{1, 8, 7, 7}},
      {"1x1", {}, "(1, 1)", 9, TShape{2, 6, 5, 3}},
      {"3x3 dilate 2", {{"dilate", "(2, 2)"}, {"pad", "(2, 2)"}}, "(3, 3)", 3, TShape{1, 3, 9, 9}},
  };
  for (const Case& c : cases) {
    Symbol net = Relu(Conv(Var("data"), c.filters, c.kernel, "conv1", c.extra), "relu1");
    EXPECT_EQ(ExpectSameAsUnfused(net, {{"data", c.data}}, c.what), Names{"conv1+relu1"}) << c.what;
  }
}

TEST_P(FusionTest, SigmoidTanhAndSoftreluFuseAsRelu) {
  // MXNet's _sg_mkldnn_conv fuses these activations too (oneDNN's logistic, tanh and soft_relu post-ops); they
  // agree with the Activation operator within float32 rounding. LeNet's tanh included.
  const std::map<std::string, TShape> data{{"data", TShape{2, 3, 9, 8}}};
  const std::map<std::string, TShape> shapes{{"data", TShape{2, 3, 9, 8}}, {"res", TShape{2, 6, 7, 6}}};
  for (const std::string act : {"sigmoid", "tanh", "softrelu"}) {
    Symbol conv = Conv(Var("data"), 6, "(3, 3)", "conv");
    EXPECT_EQ(ExpectSameAsUnfused(Relu(conv, act, act), data, act), Names{"conv+" + act}) << act;
    Symbol block = Relu(Add(BatchNorm(conv, "bn", {{"fix_gamma", "False"}}), Var("res"), "add"), act, act);
    EXPECT_EQ(ExpectSameAsUnfused(block, shapes, act + " after bn and add", true, -1, false, 1e-4),
              Names{"conv+bn+add+" + act})
        << act;
    // Driven with Forward(true): the batch's statistics, the activation applied after them.
    EXPECT_EQ(ExpectSameAsUnfused(block, shapes, act + " Forward(true)", true, -1, true, 1e-4),
              Names{"conv+bn+add+" + act})
        << act;
  }
}

// ResNet's basic block without BatchNorm: relu(conv2(relu(conv1(x))) + shortcut), the shortcut the block's
// input or its 1x1 projection.
Symbol Block(const Symbol& x, int filters, int stride, bool project, const std::string& n, bool add_conv_first) {
  const std::string st = "(" + std::to_string(stride) + ", " + std::to_string(stride) + ")";
  Symbol body = Relu(Conv(x, filters, "(3, 3)", n + "_conv1", {{"pad", "(1, 1)"}, {"stride", st}}), n + "_relu1");
  body = Conv(body, filters, "(3, 3)", n + "_conv2", {{"pad", "(1, 1)"}});
  Symbol shortcut = project ? Conv(x, filters, "(1, 1)", n + "_sc", {{"stride", st}, {"no_bias", "True"}}) : x;
  Symbol sum = add_conv_first ? Add(body, shortcut, n + "_add") : Add(shortcut, body, n + "_add");
  return Relu(sum, n + "_relu");
}

TEST_P(FusionTest, ResidualBlocksFuseTheSumAndTheRelu) {
  // Widths 8 and 12 keep every array NCHW; 16 and 32 (multiples of the channel block) keep the arrays between
  // the fused convolutions in oneDNN's blocked layout.
  for (const auto& [w1, w2] : {std::pair{8, 12}, std::pair{16, 32}}) {
  for (bool conv_first : {true, false}) {
    const std::string order = std::to_string(w1) + "/" + std::to_string(w2) + " " +
                              (conv_first ? "add(conv, shortcut)" : "add(shortcut, conv)");
    Symbol x = Relu(Conv(Var("data"), w1, "(3, 3)", "conv0", {{"pad", "(1, 1)"}}), "relu0");
    Symbol net = Block(Block(x, w1, 1, false, "u1", conv_first), w2, 2, true, "u2", conv_first);
    for (bool plan : {true, false}) {
      for (int bulk : {1, -1}) {
        const std::string what = order + (plan ? " planned" : " unplanned") + (bulk == 1 ? " unbulked" : "");
        const Names fused = ExpectSameAsUnfused(net, {{"data", TShape{2, 5, 9, 7}}}, what, plan, bulk);
        // The projection's 1x1 convolution is the sum of u2 when its add reads it second... either way one
        // convolution per add is fused with it: the one whose output only the add reads (both here, the
        // first in topological order wins).
        ASSERT_EQ(fused.size(), 5u) << what;
        EXPECT_EQ(fused[0], "conv0+relu0");
        EXPECT_EQ(fused[1], "u1_conv1+u1_relu1");
        EXPECT_EQ(fused[2], "u1_conv2+u1_add+u1_relu");
        EXPECT_EQ(fused[3], "u2_conv1+u2_relu1");
        EXPECT_TRUE(fused[4] == "u2_conv2+u2_add+u2_relu" || fused[4] == "u2_sc+u2_add+u2_relu") << fused[4];
      }
    }
  }
  }
}

TEST_P(FusionTest, ConvolutionAndSumWithoutReluAndAnArgumentAsTheAddend) {
  // The addend is an argument bound before the convolution's data in ListArguments order ("res" first).
  Symbol net = Add(Var("res"), Conv(Var("data"), 4, "(3, 3)", "conv", {{"pad", "(1, 1)"}}), "plus");
  ASSERT_EQ(net.ListArguments()[0], "res");
  EXPECT_EQ(ExpectSameAsUnfused(net, {{"data", TShape{2, 3, 6, 6}}, {"res", TShape{2, 4, 6, 6}}}, "conv+add"),
            Names{"conv+plus"});
  // Both addends convolutions: the first in topological order takes the other as its addend.
  Symbol two = Relu(Add(Conv(Var("data"), 4, "(1, 1)", "a"), Conv(Var("data"), 4, "(3, 3)", "b", {{"pad", "(1, 1)"}}),
                        "sum"),
                    "r");
  EXPECT_EQ(ExpectSameAsUnfused(two, {{"data", TShape{1, 3, 5, 5}}}, "conv+conv"), Names{"a+sum+r"});
}

TEST_P(FusionTest, IntermediatesWithOtherReadersOrRequestedAsOutputsAreNotFused) {
  const std::map<std::string, TShape> shapes{{"data", TShape{2, 3, 6, 6}}};
  Symbol conv = Conv(Var("data"), 4, "(3, 3)", "conv");
  // The convolution's output is also an output of the symbol.
  EXPECT_TRUE(ExpectSameAsUnfused(Symbol::Group({Relu(conv, "relu"), conv}), shapes, "conv is an output").empty());
  // The convolution's output has a second reader.
  EXPECT_TRUE(ExpectSameAsUnfused(Add(Relu(conv, "relu"), conv, "add"), shapes, "conv read twice").empty());
  // The sum is read by the relu and by another node: conv + add fuse, the relu stays.
  Symbol sum = Add(conv, Var("res"), "add");
  EXPECT_EQ(ExpectSameAsUnfused(Symbol::Group({Relu(sum, "relu"), sum}),
                                {{"data", TShape{2, 3, 6, 6}}, {"res", TShape{2, 4, 4, 4}}}, "sum is an output"),
            Names{"conv+add"});
  // softsign has no post-op: not fused.
  EXPECT_TRUE(ExpectSameAsUnfused(Relu(conv, "softsign", "softsign"), shapes, "softsign").empty());
}

TEST_P(FusionTest, TrainingBindsFloat64AndTheSwitchAreNeverFused) {
  Symbol net = Relu(Conv(Var("data"), 4, "(3, 3)", "conv1"), "relu1");
  const std::map<std::string, TShape> shapes{{"data", TShape{2, 3, 6, 6}}};
  const std::uint64_t seed = test::TestSeed();
  // Bound with gradients: never fused, whichever Forward.
  for (bool is_train : {false, true}) {
    Run train = Forward(net, shapes, 1, seed, kWriteTo, DType::kFloat32, true, -1, is_train);
    EXPECT_TRUE(train.fused.empty());
    Run ref = Forward(net, shapes, 0, seed, kWriteTo, DType::kFloat32, true, -1, is_train);
    EXPECT_EQ(train.outputs, ref.outputs);
  }
  EXPECT_TRUE(Forward(net, shapes, 1, seed, kNullOp, DType::kFloat64).fused.empty());
  EXPECT_TRUE(Forward(net, shapes, 0, seed).fused.empty());
  // An inference bind driven with Forward(true) runs the fused node too (no training behaviour in it).
  Run on = Forward(net, shapes, 1, seed, kNullOp, DType::kFloat32, true, -1, true);
  Run off = Forward(net, shapes, 0, seed, kNullOp, DType::kFloat32, true, -1, true);
  EXPECT_EQ(on.fused, Names{"conv1+relu1"});
  ASSERT_EQ(on.outputs.size(), 1u);
  for (std::size_t i = 0; i < on.outputs[0].size(); ++i) EXPECT_NEAR(on.outputs[0][i], off.outputs[0][i], 1e-5);
}

TEST_F(FusionProfilerTest, TheProfilerNamesTheFusedNode) {
  Symbol net = Relu(Add(Conv(Var("data"), 4, "(3, 3)", "conv2", {{"pad", "(1, 1)"}}),
                        Relu(Conv(Var("data"), 4, "(3, 3)", "conv1", {{"pad", "(1, 1)"}}), "relu1"), "add2"),
                    "relu2");
  for (int bulk : {1, -1}) {
    Profiler::Get().Start(engine());
    Run r = Forward(net, {{"data", TShape{1, 3, 6, 6}}}, 1, test::TestSeed(), kNullOp, DType::kFloat32, true, bulk);
    engine()->WaitForAll();
    Profiler::Get().Stop();
    const std::string trace = Profiler::Get().TraceJson();
    EXPECT_EQ(r.fused, (Names{"conv1+relu1", "conv2+add2+relu2"}));
    EXPECT_NE(trace.find("\"conv1+relu1\""), std::string::npos) << "bulk " << bulk << ": " << trace.substr(0, 2000);
    EXPECT_NE(trace.find("\"conv2+add2+relu2\""), std::string::npos) << "bulk " << bulk;
    EXPECT_EQ(trace.find("\"Convolution\""), std::string::npos) << "bulk " << bulk;
    EXPECT_NE(Profiler::Get().AggregateTable().find("conv2+add2+relu2"), std::string::npos) << "bulk " << bulk;
  }
}

TEST_P(FusionTest, BatchNormFoldsIntoTheConvolutionWithAndWithoutPostOps) {
  struct Case {
    std::string what;
    Kwargs conv, bn;
  };
  const std::vector<Case> cases = {
      {"no bias, fix_gamma (defaults)", {{"no_bias", "True"}, {"pad", "(1, 1)"}}, {}},
      {"bias, gamma used, eps 1e-5", {{"pad", "(1, 1)"}}, {{"fix_gamma", "False"}, {"eps", "1e-5"}}},
      {"stride 2, groups 2, use_global_stats", {{"stride", "(2, 2)"}, {"num_group", "2"}},
       {{"fix_gamma", "False"}, {"use_global_stats", "True"}}},
      {"axis -3, wide (Winograd)", {{"no_bias", "True"}, {"pad", "(1, 1)"}}, {{"axis", "-3"}, {"fix_gamma", "False"}}},
  };
  for (const Case& c : cases) {
    const bool wide = c.what.find("wide") != std::string::npos;
    const std::map<std::string, TShape> shapes{{"data", wide ? TShape{1, 16, 11, 13} : TShape{2, 4, 9, 7}}};
    Symbol bn = BatchNorm(Conv(Var("data"), wide ? 32 : 6, "(3, 3)", "conv", c.conv), "bn", c.bn);
    EXPECT_EQ(ExpectSameAsUnfused(bn, shapes, c.what + ": conv+bn", true, -1, false, 1e-4), Names{"conv+bn"});
    EXPECT_EQ(ExpectSameAsUnfused(Relu(bn, "relu"), shapes, c.what + ": conv+bn+relu", true, -1, false, 1e-4),
              Names{"conv+bn+relu"});
    std::vector<TShape> args, outs, aux;
    std::string why;
    ASSERT_TRUE(bn.InferShape(shapes, &args, &outs, &aux, &why)) << why;
    std::map<std::string, TShape> with_res = shapes;
    with_res["res"] = outs[0];
    EXPECT_EQ(ExpectSameAsUnfused(Relu(Add(bn, Var("res"), "add"), "relu"), with_res, c.what + ": conv+bn+add+relu",
                                  true, -1, false, 1e-4),
              Names{"conv+bn+add+relu"});
  }
}

TEST_P(FusionTest, AFoldedBatchNormDrivenWithForwardTrueUsesTheBatchStatistics) {
  // An inference bind run with Forward(true): the batch's statistics, and the moving ones updated, exactly as
  // the unfused BatchNorm does (use_global_stats keeps the moving ones).
  for (const Kwargs& bn : {Kwargs{}, Kwargs{{"fix_gamma", "False"}, {"momentum", "0.7"}},
                           Kwargs{{"use_global_stats", "True"}, {"fix_gamma", "False"}}}) {
    Symbol net = Relu(Add(BatchNorm(Conv(Var("data"), 5, "(3, 3)", "conv", {{"pad", "(1, 1)"}}), "bn", bn), Var("res"),
                          "add"),
                      "relu");
    const std::string what = bn.empty() ? "defaults" : bn[0].first + "=" + bn[0].second;
    EXPECT_EQ(ExpectSameAsUnfused(net, {{"data", TShape{3, 2, 6, 5}}, {"res", TShape{3, 5, 6, 5}}}, what, true, -1,
                                  true, 1e-4),
              Names{"conv+bn+add+relu"});
  }
}

TEST_P(FusionTest, BatchNormWithItsStatisticsReadOrAfterANonConvolutionIsNotFolded) {
  const std::map<std::string, TShape> shapes{{"data", TShape{2, 3, 6, 6}}};
  Symbol conv = Conv(Var("data"), 4, "(3, 3)", "conv");
  // output_mean_var: the statistics are outputs of the symbol.
  Symbol stats = BatchNorm(conv, "bn", {{"output_mean_var", "True"}});
  EXPECT_TRUE(ExpectSameAsUnfused(stats, shapes, "statistics are outputs").empty());
  // The convolution read by the BatchNorm and by a relu: nothing folds (the relu fuses neither).
  EXPECT_TRUE(ExpectSameAsUnfused(Symbol::Group({BatchNorm(conv, "bn"), Relu(conv, "relu")}), shapes, "two readers")
                  .empty());
  // A BatchNorm after a relu stays.
  EXPECT_TRUE(ExpectSameAsUnfused(BatchNorm(Relu(Var("data"), "relu"), "bn"), shapes, "after a relu").empty());
}

TEST_P(FusionTest, ResNet18FoldsEveryBatchNorm) {
  // troupe's ResNet-18 (CIFAR stem): every BatchNorm follows a convolution and folds into it (the stem's
  // convolution has none, and two readers: it stays). Compared on the logits (the fully connected layer's
  // output; the probabilities of random weights are saturated), within float32 rounding.
  const Symbol full = models::ResNet(18, 10, true);
  const Symbol internals = full.GetInternals();
  const std::vector<std::string> names = internals.ListOutputs();
  const auto fc = std::find(names.begin(), names.end(), "fc_output");
  ASSERT_NE(fc, names.end());
  const Symbol net = internals[static_cast<std::size_t>(fc - names.begin())];
  int bns = 0;
  for (const auto& a : net.ListArguments()) bns += a.size() > 6 && a.compare(a.size() - 6, 6, "_gamma") == 0;
  const Names fused =
      ExpectSameAsUnfused(net, {{"data", TShape{2, 3, 8, 8}}}, "resnet18 logits", true, -1, false, 1e-4);
  // Driven with Forward(true): the batch's statistics, the blocked arrays reordered around each BatchNorm.
  EXPECT_EQ(ExpectSameAsUnfused(net, {{"data", TShape{2, 3, 8, 8}}}, "resnet18 logits, Forward(true)", true, -1, true,
                                1e-4),
            fused);
  EXPECT_EQ(bns, 19);
  EXPECT_EQ(static_cast<int>(fused.size()), bns);
  for (const auto& f : fused) EXPECT_NE(f.find("bn"), std::string::npos) << f;
}

INSTANTIATE_TEST_SUITE_P(Engines, FusionTest,
                         ::testing::Values(test::EngineParam{EngineType::kActor, 2, 0},
                                           test::EngineParam{EngineType::kNaive, 1, 0}),
                         test::EngineParamName);

}  // namespace
}  // namespace troupe
