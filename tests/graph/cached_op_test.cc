// CachedOp and RunImperative (graph/cached_op.h): a symbol run as one imperative operator gives the
// executor's outputs and, recorded, the same gradients as the symbol run operator by operator through
// autograd; outputs survive later calls; a CachedOp used twice in one graph; BatchNorm's moving statistics
// updated in training mode only; executors kept per signature as static_alloc / static_shape say; errors.
#include "graph/cached_op.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "graph/symbol.h"
#include "op/autograd.h"
#include "tests/common/op_test_util.h"

namespace troupe {
namespace {

using test::ExpectCloseArrays;
using test::ExpectError;

NDArray Random(const TShape& shape, double lo = -1, double hi = 1) {
  NDArray a(shape, Context::CPU());
  a.SampleUniform(lo, hi);
  return a;
}

// data (4, 6) -> FullyConnected(5) -> tanh -> FullyConnected(3): arguments data, w1, b1, w2, b2.
Symbol Mlp() {
  Symbol x = Symbol::Variable("data");
  Symbol h = Symbol::Create("FullyConnected", {{"num_hidden", "5"}},
                            {x, Symbol::Variable("w1"), Symbol::Variable("b1")}, "fc1");
  h = Symbol::Create("Activation", {{"act_type", "tanh"}}, {h}, "act");
  return Symbol::Create("FullyConnected", {{"num_hidden", "3"}},
                        {h, Symbol::Variable("w2"), Symbol::Variable("b2")}, "fc2");
}

std::vector<NDArray> MlpInputs() {
  return {Random({4, 6}), Random({5, 6}), Random({5}), Random({3, 5}), Random({3})};
}

TEST(CachedOpTest, ForwardIsTheExecutorsAndOutputsSurviveLaterCalls) {
  const Symbol net = Mlp();
  CachedOp op(net);
  EXPECT_EQ(op.ListInputs(), (std::vector<std::string>{"data", "w1", "b1", "w2", "b2"}));
  std::vector<NDArray> in = MlpInputs();
  const NDArray y = op(in)[0];
  auto exec = Executor::Bind(net, Context::CPU(), in, {}, {kNullOp}, {});
  exec->Forward(false);
  ExpectCloseArrays(y, exec->outputs()[0], "output");
  const auto first = y.ToVector<float>();
  // A second call with other data runs on the same executor (bound by reference) and leaves y alone.
  std::vector<NDArray> in2 = in;
  in2[0] = Random({4, 6});
  const NDArray y2 = op(in2)[0];
  EXPECT_EQ(op.num_executors(), 1u);
  EXPECT_EQ(y.ToVector<float>(), first);
  auto exec2 = Executor::Bind(net, Context::CPU(), in2, {}, {kNullOp}, {});
  exec2->Forward(false);
  ExpectCloseArrays(y2, exec2->outputs()[0], "second output");
  // The same as the symbol run operator by operator.
  ExpectCloseArrays(RunImperative(net, in2)[0], exec2->outputs()[0], "RunImperative");
}

TEST(CachedOpTest, RecordedGradientsEqualTheOperatorByOperatorOnes) {
  const Symbol net = Mlp();
  CachedOp op(net);
  const std::vector<NDArray> base = MlpInputs();
  const NDArray head = Random({4, 3});
  // The reference: the symbol's operators recorded one by one. The data is a constant (no gradient).
  std::vector<NDArray> ref;
  for (const NDArray& a : base) ref.push_back(a.CopyTo(Context::CPU()));
  for (std::size_t i = 1; i < ref.size(); ++i) autograd::AttachGrad(&ref[i]);
  {
    autograd::RecordScope record;
    NDArray y = RunImperative(net, ref)[0];
    autograd::Backward({y}, {head});
  }
  std::vector<NDArray> in;
  for (const NDArray& a : base) in.push_back(a.CopyTo(Context::CPU()));
  for (std::size_t i = 1; i < in.size(); ++i) autograd::AttachGrad(&in[i]);
  NDArray y;
  {
    autograd::RecordScope record;
    y = op(in)[0];
  }
  autograd::Backward({y}, {head});
  for (std::size_t i = 1; i < in.size(); ++i) {
    ExpectCloseArrays(autograd::GradOf(in[i]), autograd::GradOf(ref[i]), op.ListInputs()[i]);
  }
  // The data was not in a graph: no gradient was bound for it.
  EXPECT_TRUE(autograd::GradOf(in[0]).is_none());
  // The graph is freed: the executor is free for the next call, which reuses it.
  {
    autograd::RecordScope record;
    y = op(in)[0];
  }
  EXPECT_EQ(op.num_executors(), 1u);
  autograd::Backward({y}, {head});
}

// f(x) = tanh(FullyConnected(x, w, no_bias)), (3, 4) -> (3, 4); z = f(f(x)) uses the CachedOp twice.
TEST(CachedOpTest, UsedTwiceInOneGraphBindsASecondExecutor) {
  Symbol f = Symbol::Create("FullyConnected", {{"num_hidden", "4"}, {"no_bias", "true"}},
                            {Symbol::Variable("x"), Symbol::Variable("w")}, "fc");
  f = Symbol::Create("Activation", {{"act_type", "tanh"}}, {f}, "act");
  for (bool static_alloc : {false, true}) {
    SCOPED_TRACE(static_alloc ? "static_alloc" : "dynamic");
    CachedOpOptions opts;
    opts.static_alloc = static_alloc;
    CachedOp op(f, opts);
    const NDArray x0 = Random({3, 4}), w0 = Random({4, 4});
    NDArray x = x0.CopyTo(Context::CPU()), w = w0.CopyTo(Context::CPU());
    NDArray rx = x0.CopyTo(Context::CPU()), rw = w0.CopyTo(Context::CPU());
    for (NDArray* a : {&x, &w, &rx, &rw}) autograd::AttachGrad(a);
    NDArray z, rz;
    {
      autograd::RecordScope record;
      z = op({op({x, w})[0], w})[0];
      rz = RunImperative(f, {RunImperative(f, {rx, rw})[0], rw})[0];
    }
    EXPECT_EQ(op.num_executors(), 2u);  // both calls' forward passes are held by the graph
    ExpectCloseArrays(z, rz, "z");
    autograd::Backward({z, rz});
    ExpectCloseArrays(autograd::GradOf(x), autograd::GradOf(rx), "dx");
    ExpectCloseArrays(autograd::GradOf(w), autograd::GradOf(rw), "dw (both uses summed)");
    // Freed graph: static_alloc keeps both executors, otherwise one stays.
    EXPECT_EQ(op.num_executors(), static_alloc ? 2u : 1u);
  }
}

TEST(CachedOpTest, BatchNormUpdatesItsMovingStatisticsInTrainingModeOnly) {
  Symbol bn = Symbol::Create("BatchNorm", {{"fix_gamma", "false"}, {"momentum", "0.5"}},
                             {Symbol::Variable("data"), Symbol::Variable("gamma"), Symbol::Variable("beta"),
                              Symbol::Variable("moving_mean"), Symbol::Variable("moving_var")}, "bn");
  CachedOp op(bn);
  EXPECT_EQ(op.ListInputs(), (std::vector<std::string>{"data", "gamma", "beta", "moving_mean", "moving_var"}));
  const NDArray data = Random({6, 3, 2, 2}, 1, 3);
  NDArray gamma = NDArray::Ones({3}, Context::CPU()), beta = NDArray::Zeros({3}, Context::CPU());
  NDArray mean = NDArray::Zeros({3}, Context::CPU()), var = NDArray::Ones({3}, Context::CPU());
  // Predicting: normalised with the moving statistics (0, 1): the output is the data (up to eps).
  NDArray y = op({data, gamma, beta, mean, var})[0];
  ExpectCloseArrays(y, data, "prediction with mean 0, var 1", 1e-3);
  EXPECT_EQ(mean.ToVector<float>(), std::vector<float>(3, 0.0f));
  // Training: the batch's statistics, and the moving mean moves halfway to the batch mean (about 2). The
  // gradient of gamma equals the one of BatchNorm recorded as one imperative call.
  NDArray rgamma = gamma.CopyTo(Context::CPU());
  NDArray rmean = mean.CopyTo(Context::CPU()), rvar = var.CopyTo(Context::CPU());
  autograd::AttachGrad(&gamma);
  autograd::AttachGrad(&rgamma);
  const NDArray head = Random({6, 3, 2, 2});
  NDArray ry;
  {
    autograd::RecordScope record;
    y = op({data, gamma, beta, mean, var})[0];
    ry = RunImperative(bn, {data, rgamma, beta, rmean, rvar})[0];
  }
  autograd::Backward({y, ry}, {head, head});
  for (float m : mean.ToVector<float>()) EXPECT_GT(m, 0.5f);
  ExpectCloseArrays(mean, rmean, "moving mean");
  ExpectCloseArrays(y, ry, "training output");
  ExpectCloseArrays(autograd::GradOf(gamma), autograd::GradOf(rgamma), "dgamma");
}

TEST(CachedOpTest, StaticShapeKeepsOneSignature) {
  const Symbol net = Mlp();
  CachedOp dynamic(net);
  CachedOpOptions opts;
  opts.static_shape = true;
  CachedOp fixed(net, opts);
  std::vector<NDArray> in = MlpInputs();
  dynamic(in);
  fixed(in);
  in[0] = Random({7, 6});  // another batch size
  const NDArray y = fixed(in)[0];
  dynamic(in);
  EXPECT_EQ(y.shape(), (TShape{7, 3}));
  EXPECT_EQ(dynamic.num_executors(), 2u);
  EXPECT_EQ(fixed.num_executors(), 1u);
}

TEST(CachedOpTest, ErrorsNameTheInput) {
  const Symbol net = Mlp();
  ExpectError([&] { CachedOp empty{Symbol()}; }, {"empty"});
  CachedOpOptions bad;
  bad.data_indices = {0};
  bad.param_indices = {1, 7};
  ExpectError([&] { CachedOp(net, bad); }, {"7", "out of range"});
  bad.param_indices = {0};
  ExpectError([&] { CachedOp(net, bad); }, {"'data'", "twice"});
  CachedOp op(net);
  std::vector<NDArray> in = MlpInputs();
  ExpectError([&] { op({in[0]}); }, {"expected 5 inputs", "w1"});
  in[2] = NDArray();
  ExpectError([&] { op(in); }, {"'b1'", "empty"});
  in = MlpInputs();
  in[1] = Random({5, 7});
  ExpectError([&] { op(in); }, {"w1"});
  ExpectError([&] { RunImperative(net, {in[0]}); }, {"5 arguments", "1 inputs"});
  // A second backward through one recorded call (retain_graph) is refused, not silently wrong.
  in = MlpInputs();
  autograd::AttachGrad(&in[1]);
  NDArray y;
  {
    autograd::RecordScope record;
    y = op(in)[0];
  }
  autograd::Backward({y}, {}, /*retain_graph=*/true);
  ExpectError([&] { autograd::Backward({y}); }, {"CachedOp", "once"});
  // The suite ends with the first Backward's work possibly still running: the process-wide engine finishes it
  // when main ends, before oneDNN's kernels go (a crash at exit otherwise).
}

}  // namespace
}  // namespace troupe
