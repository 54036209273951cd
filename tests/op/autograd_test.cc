// Autograd on NDArrays (op/autograd.h): gradients against MXNet 1.9.1's mx.autograd on the same inputs
// (tests/op/data/autograd/make_autograd.py: FullyConnected + relu with every input a variable and a head
// gradient, an array used twice, grad_req add over two backward passes, BatchNorm in training mode with its
// hidden outputs, Convolution + max Pooling + softmax with a constant input, a custom Function; second-order
// gradients through Grad's create_graph of the unary operators, dot and compositions, with head gradients,
// in float32 and float64, and a retained graph), NDArray's own arithmetic recorded,
// plus the rules: recording scopes nest and restore, retain_graph, a freed graph, head gradient checks, arrays
// written in place after they were recorded, in-place operations and Invoke into given outputs refused, Grad's
// variables and create_graph's coverage, train_mode, and a node's arrays released as the pass goes.
#include "op/autograd.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "op/imperative.h"
#include "tensor/storage.h"
#include "tests/common/op_test_util.h"

namespace troupe {
namespace {

using test::ExpectError;

std::map<std::string, NDArray> Fixture() {
  std::vector<NDArray> arrays;
  std::vector<std::string> names;
  NDArray::Load(std::string(TROUPE_TEST_DATA_DIR) + "/autograd/autograd.params", &arrays, &names);
  std::map<std::string, NDArray> out;
  for (std::size_t i = 0; i < arrays.size(); ++i) out[names[i]] = arrays[i];
  return out;
}

// |got - want| <= tol * max(1, |want|) element by element (float32 sums in another order than MXNet's);
// float64 arrays are compared in double.
void ExpectClose(const NDArray& got, const NDArray& want, const std::string& what, double tol = 1e-5) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const auto g = got.AsType(DType::kFloat64).ToVector<double>(), w = want.AsType(DType::kFloat64).ToVector<double>();
  double biggest = 0;
  for (double v : w) biggest = std::max(biggest, std::abs(v));
  ASSERT_GT(biggest, 0.0) << what << ": MXNet's gradient is all zero, nothing compared";
  for (std::size_t i = 0; i < g.size(); ++i) {
    EXPECT_NEAR(g[i], w[i], tol * std::max(1.0, std::abs(w[i]))) << what << " [" << i << "]";
  }
}

class AutogradTest : public ::testing::Test {
 protected:
  std::map<std::string, NDArray> f_ = Fixture();
  // The fixture's input as a fresh array (its own engine variable), made a variable when asked.
  NDArray In(const std::string& c, const std::string& name, bool variable = true, OpReqType req = kWriteTo) {
    NDArray a = f_.at(c + ":in:" + name).CopyTo(Context::CPU());
    if (variable) autograd::AttachGrad(&a, req);
    return a;
  }
  void ExpectGrad(const std::string& c, const NDArray& var, const std::string& name, double tol = 1e-5) {
    ExpectClose(autograd::GradOf(var), f_.at(c + ":grad:" + name), c + " d/d" + name, tol);
  }
  // A second-order case of the fixture: f of the variables `names` (sorted, as the fixture's), Grad with
  // create_graph and the case's head gradient (ones when it has none), then Backward from those gradients with
  // the second head gradients: MXNet's first-order gradients, then its second-order ones in the variables'
  // buffers. Grad leaves the buffers alone.
  void SecondOrder(const std::string& c, const std::vector<std::string>& names,
                   const std::function<NDArray(const std::vector<NDArray>&)>& f, double tol = 1e-5) {
    SCOPED_TRACE(c);
    std::vector<NDArray> vars, heads2;
    for (const auto& n : names) vars.push_back(In(c, n));
    const bool heads = f_.count(c + ":head") > 0;
    for (const auto& n : names) {
      if (heads) heads2.push_back(f_.at(c + ":head2:" + n));
    }
    std::vector<NDArray> first;
    {
      autograd::RecordScope record;
      const NDArray y = f(vars);
      first = autograd::Grad({y}, vars, heads ? std::vector<NDArray>{f_.at(c + ":head")} : std::vector<NDArray>{},
                             /*retain_graph=*/true, /*create_graph=*/true);
    }
    ASSERT_EQ(first.size(), names.size());
    for (std::size_t i = 0; i < names.size(); ++i) {
      ExpectClose(first[i], f_.at(c + ":first:" + names[i]), c + " first d/d" + names[i], tol);
      EXPECT_EQ(autograd::GradOf(vars[i]).AsType(DType::kFloat64).ToVector<double>(),
                std::vector<double>(vars[i].shape().Size(), 0.0))
          << "Grad wrote a variable's buffer";
    }
    autograd::Backward(first, heads2);
    for (std::size_t i = 0; i < names.size(); ++i) ExpectGrad(c, vars[i], names[i], tol);
  }
};

NDArray Unary(const char* op, const NDArray& x) { return Invoke(op, {x})[0]; }

TEST_F(AutogradTest, FullyConnectedReluMatchesMXNet) {
  NDArray x = In("fc_relu", "x"), w = In("fc_relu", "w"), b = In("fc_relu", "b");
  NDArray y;
  {
    autograd::RecordScope record;
    const NDArray fc = Invoke("FullyConnected", {x, w, b}, {{"num_hidden", "3"}})[0];
    y = Invoke("Activation", {fc}, {{"act_type", "relu"}})[0];
  }
  autograd::Backward({y}, {f_.at("fc_relu:head")});
  ExpectGrad("fc_relu", x, "x");
  ExpectGrad("fc_relu", w, "w");
  ExpectGrad("fc_relu", b, "b");
}

TEST_F(AutogradTest, AnArrayUsedTwiceSumsItsGradients) {
  NDArray x = In("used_twice", "x");
  NDArray y;
  {
    autograd::RecordScope record;
    y = Invoke("elemwise_add", {Invoke("elemwise_mul", {x, x})[0], x})[0];
  }
  autograd::Backward({y});  // ones
  ExpectGrad("used_twice", x, "x");
}

TEST_F(AutogradTest, GradReqAddAccumulatesOverBackwardCalls) {
  NDArray x = In("grad_add", "x", true, kAddTo);
  const NDArray c = In("grad_add", "c", false);
  for (int i = 0; i < 2; ++i) {
    NDArray y;
    {
      autograd::RecordScope record;
      y = Invoke("elemwise_mul", {x, c})[0];
    }
    autograd::Backward({y}, {f_.at("grad_add:head")});
  }
  ExpectGrad("grad_add", x, "x");
}

TEST_F(AutogradTest, BatchNormInTrainingModeMatchesMXNet) {
  NDArray x = In("batch_norm", "x"), gamma = In("batch_norm", "gamma"), beta = In("batch_norm", "beta");
  NDArray mm = NDArray::Zeros(TShape{3}, Context::CPU()), mv = NDArray::Ones(TShape{3}, Context::CPU());
  NDArray y;
  {
    autograd::RecordScope record;  // training: the batch's statistics
    y = Invoke("tanh", {Invoke("BatchNorm", {x, gamma, beta, mm, mv}, {{"fix_gamma", "false"}})[0]})[0];
  }
  autograd::Backward({y}, {f_.at("batch_norm:head")});
  ExpectGrad("batch_norm", x, "x");
  ExpectGrad("batch_norm", gamma, "gamma");
  ExpectGrad("batch_norm", beta, "beta");
}

TEST_F(AutogradTest, ConvolutionPoolingSoftmaxWithAConstantInput) {
  const NDArray d = In("conv_pool", "data", false);
  NDArray w = In("conv_pool", "w"), b = In("conv_pool", "b");
  NDArray y;
  {
    autograd::RecordScope record;
    const NDArray c = Invoke("Convolution", {d, w, b}, {{"kernel", "(3,3)"}, {"num_filter", "4"}, {"pad", "(1,1)"}})[0];
    const NDArray p = Invoke("Pooling", {c}, {{"kernel", "(2,2)"}, {"stride", "(2,2)"}, {"pool_type", "max"}})[0];
    y = Invoke("softmax", {Invoke("Reshape", {p}, {{"shape", "(2,-1)"}})[0]}, {{"axis", "1"}})[0];
  }
  autograd::Backward({y}, {f_.at("conv_pool:head")});
  ExpectGrad("conv_pool", w, "w");
  ExpectGrad("conv_pool", b, "b");
  EXPECT_TRUE(autograd::GradOf(d).is_none());  // not a variable
}

// MXNet's documented sigmoid Function, its output times a variable: the Function's Backward gives x's gradient.
struct Sigmoid : autograd::Function {
  NDArray y;
  std::vector<NDArray> Forward(const std::vector<NDArray>& in) override {
    EXPECT_FALSE(autograd::IsRecording());  // paused inside
    y = Invoke("sigmoid", {in[0]})[0];
    return {y};
  }
  std::vector<NDArray> Backward(const std::vector<NDArray>& dy) override {
    EXPECT_FALSE(autograd::IsRecording());
    return {dy[0] * y * (y * -1.0 + 1.0)};
  }
};

TEST_F(AutogradTest, ACustomFunctionMatchesMXNet) {
  NDArray x = In("function", "x"), w = In("function", "w");
  NDArray y;
  {
    autograd::RecordScope record;
    y = Invoke("elemwise_mul", {autograd::Function::Apply(std::make_shared<Sigmoid>(), {x})[0], w})[0];
  }
  autograd::Backward({y}, {f_.at("function:head")});
  ExpectGrad("function", x, "x");
  ExpectGrad("function", w, "w");
}

// A Function's mistakes surface as errors: no outputs, an input returned as output, gradients of the wrong
// number or shape.
TEST(AutogradRulesTest, FunctionMistakesAreErrors) {
  struct Returns : autograd::Function {
    std::vector<NDArray> out, grads;
    std::vector<NDArray> Forward(const std::vector<NDArray>&) override { return out; }
    std::vector<NDArray> Backward(const std::vector<NDArray>&) override { return grads; }
  };
  NDArray x = NDArray::Ones(TShape{2}, Context::CPU());
  autograd::AttachGrad(&x);
  auto f = std::make_shared<Returns>();
  ExpectError([&] { autograd::Function::Apply(f, {x}); }, {"no output"});
  f->out = {x};
  ExpectError([&] { autograd::Function::Apply(f, {x}); }, {"output 0", "input's memory"});
  for (const std::vector<NDArray>& bad : {std::vector<NDArray>{}, std::vector<NDArray>{NDArray::Ones(TShape{3}, Context::CPU())}}) {
    f->out = {NDArray::Ones(TShape{2}, Context::CPU())};
    f->grads = bad;
    NDArray y;
    {
      autograd::RecordScope record;
      y = autograd::Function::Apply(f, {x})[0];
    }
    ExpectError([&] { autograd::Backward({y}); }, {"Function"});
  }
}

TEST(AutogradRulesTest, ScopesNestAndRestore) {
  EXPECT_FALSE(autograd::IsRecording());
  EXPECT_FALSE(autograd::IsTraining());
  {
    autograd::RecordScope record;
    EXPECT_TRUE(autograd::IsRecording());
    EXPECT_TRUE(autograd::IsTraining());
    {
      autograd::PauseScope pause;
      EXPECT_FALSE(autograd::IsRecording());
      EXPECT_FALSE(autograd::IsTraining());
      autograd::RecordScope predict(false);
      EXPECT_TRUE(autograd::IsRecording());
      EXPECT_FALSE(autograd::IsTraining());
    }
    EXPECT_TRUE(autograd::IsRecording());
    EXPECT_TRUE(autograd::IsTraining());
  }
  EXPECT_FALSE(autograd::IsRecording());
  EXPECT_FALSE(autograd::IsTraining());
  EXPECT_FALSE(autograd::SetRecording(true));
  EXPECT_TRUE(autograd::SetRecording(false));
}

// Outside a scope nothing is recorded and operators run in predict mode (Dropout passes its input through).
TEST(AutogradRulesTest, UnrecordedCallsHaveNoGraph) {
  NDArray x = NDArray::Full(TShape{4}, 2.0, Context::CPU());
  autograd::AttachGrad(&x);
  const NDArray y = Invoke("elemwise_mul", {x, x})[0];
  ExpectError([&] { autograd::Backward({y}); }, {"head 0", "not computed while recording"});
  {
    autograd::RecordScope record(true);
    // Training mode: each element dropped (0) or kept and scaled by 1 / (1 - p); none passes through as it is.
    for (float v : Invoke("Dropout", {x}, {{"p", "0.5"}})[0].ToVector<float>()) EXPECT_TRUE(v == 0.0f || v == 4.0f) << v;
  }
  EXPECT_EQ(Invoke("Dropout", {x}, {{"p", "0.5"}})[0].ToVector<float>(), std::vector<float>(4, 2.0f));
}

TEST(AutogradRulesTest, RetainGraphAllowsASecondBackwardAndFreeingForbidsIt) {
  NDArray x = NDArray::FromVector<float>({0.5f, -1.0f, 2.0f}, TShape{3});
  autograd::AttachGrad(&x);
  NDArray y;
  {
    autograd::RecordScope record;
    y = Invoke("elemwise_mul", {x, x})[0];
  }
  autograd::Backward({y}, {}, true);
  const auto first = autograd::GradOf(x).ToVector<float>();
  EXPECT_EQ(first, (std::vector<float>{1.0f, -2.0f, 4.0f}));  // 2x
  autograd::Backward({y});  // kWriteTo: the same again, and the graph is freed
  EXPECT_EQ(autograd::GradOf(x).ToVector<float>(), first);
  ExpectError([&] { autograd::Backward({y}); }, {"freed", "retain_graph"});
}

TEST(AutogradRulesTest, HeadGradientsAreChecked) {
  NDArray x = NDArray::Ones(TShape{2, 3}, Context::CPU());
  autograd::AttachGrad(&x);
  NDArray y;
  {
    autograd::RecordScope record;
    y = Invoke("tanh", {x})[0];
  }
  ExpectError([&] { autograd::Backward({y}, {NDArray::Ones(TShape{3}, Context::CPU())}, true); },
              {"head gradient 0", "(3,)", "(2,3)"});
  ExpectError([&] { autograd::Backward({y}, {y, y}, true); }, {"1 heads but 2 head gradients"});
  ExpectError([&] { autograd::Backward({}); }, {"no heads"});
}

TEST(AutogradRulesTest, AnArrayWrittenInPlaceAfterRecordingIsAnError) {
  NDArray x = NDArray::FromVector<float>({1.0f, 2.0f}, TShape{2});
  autograd::AttachGrad(&x);
  NDArray c = NDArray::FromVector<float>({3.0f, 4.0f}, TShape{2});
  NDArray y;
  {
    autograd::RecordScope record;
    y = Invoke("elemwise_mul", {x, c})[0];  // its gradient reads c
  }
  c += 1.0;  // outside the scope: allowed, but the recorded value is gone
  ExpectError([&] { autograd::Backward({y}); }, {"elemwise_mul", "written in place after it was recorded"});
}

// NDArray's own arithmetic, casts and views on graph arrays are recorded as the registered operators: the
// fixture's x * x + x written with operators gives MXNet's gradient, and so does a longer chain through
// Reshape, Slice, At, AsType and scalars (checked against its derivative computed here).
TEST_F(AutogradTest, NDArrayArithmeticIsRecorded) {
  NDArray x = In("used_twice", "x");
  NDArray y;
  {
    autograd::RecordScope record;
    y = x * x + x;
  }
  autograd::Backward({y});
  ExpectGrad("used_twice", x, "x");

  NDArray a = NDArray::FromVector<float>({1, 2, 3, 4, 5, 6}, TShape{6});
  autograd::AttachGrad(&a);
  NDArray z;
  {
    autograd::RecordScope record;
    const NDArray m = a.Reshape(TShape{2, 3});              // [[1 2 3] [4 5 6]]
    const NDArray row = m.At(1) * 2.0 - 1.0;                // 2 a[3..5] - 1
    const NDArray head = m.Slice(0, 1).Reshape(TShape{3});  // a[0..2]
    z = (row * head / 4.0).AsType(DType::kFloat64);         // (2 a[3+i] - 1) a[i] / 4
  }
  EXPECT_EQ(z.dtype(), DType::kFloat64);
  autograd::Backward({z});
  // d/da[i] = (2 a[3+i] - 1) / 4, d/da[3+i] = a[i] / 2.
  EXPECT_EQ(autograd::GradOf(a).ToVector<float>(), (std::vector<float>{1.75f, 2.25f, 2.75f, 0.5f, 1.0f, 1.5f}));
}

TEST(AutogradRulesTest, InPlaceOperationsOnGraphArraysAreRefusedWhileRecording) {
  NDArray x = NDArray::Ones(TShape{2}, Context::CPU());
  autograd::AttachGrad(&x);
  NDArray plain = NDArray::Ones(TShape{2}, Context::CPU());
  autograd::RecordScope record;
  ExpectError([&] { x += 1.0; }, {"in-place operation on an array of a graph"});
  ExpectError([&] { plain *= x; }, {"in-place operation"});  // reads a graph array into an unrecorded value
  ExpectError([&] { x = 0.0; }, {"fill", "in-place"});
  ExpectError([&] { CopyFromTo(plain, x); }, {"CopyFromTo"});
  const NDArray out(TShape{2}, Context::CPU());
  ExpectError([&] { Invoke("tanh", {x}, {}, {out}); }, {"tanh", "returns new arrays only"});
  // Arrays outside any graph are free to use.
  plain += 1.0;
  EXPECT_EQ(plain.ToVector<float>(), std::vector<float>(2, 2.0f));
}

TEST(AutogradRulesTest, MarkVariablesChecksItsArguments) {
  NDArray x = NDArray::Ones(TShape{2}, Context::CPU());
  NDArray g = NDArray::Zeros(TShape{2}, Context::CPU());
  ExpectError([&] { autograd::MarkVariables({&x}, {}, {kWriteTo}); }, {"1 variables, 0 gradient buffers"});
  ExpectError([&] { autograd::MarkVariables({&x}, {NDArray::Zeros(TShape{3}, Context::CPU())}, {kWriteTo}); },
              {"variable 0", "(3,)", "(2,)"});
  autograd::MarkVariables({&x}, {g}, {kWriteTo});
  NDArray y;
  {
    autograd::RecordScope record;
    y = Invoke("elemwise_add", {x, x})[0];
  }
  autograd::Backward({y});
  EXPECT_EQ(g.ToVector<float>(), std::vector<float>(2, 2.0f));  // the given buffer
}

// ---- Grad and higher-order gradients ----

// MXNet 1.9.1's second derivatives of the unary operators, each contracted with a head gradient per pass
// (sin: ones), through Grad's create_graph then Backward.
TEST_F(AutogradTest, SecondOrderUnaryMatchesMXNet) {
  for (const char* op : {"sin", "cos", "exp", "log", "tanh", "sigmoid"}) {
    SecondOrder(op, {"x"}, [op](const std::vector<NDArray>& v) { return Unary(op, v[0]); });
  }
}

// relu is piecewise linear: its first-order gradient is MXNet's, its second is zero (MXNet's too), and the
// mask it multiplies by is a constant of the gradient graph.
TEST_F(AutogradTest, SecondOrderOfReluIsZero) {
  for (const bool activation : {false, true}) {
    NDArray x = In("relu", "x");
    std::vector<NDArray> first;
    {
      autograd::RecordScope record;
      const NDArray y = activation ? Invoke("Activation", {x}, {{"act_type", "relu"}})[0] : Unary("relu", x);
      first = autograd::Grad({y}, {x}, {f_.at("relu:head")}, true, true);
    }
    ExpectClose(first[0], f_.at("relu:first:x"), "relu first");
    autograd::Backward(first, {f_.at("relu:head2:x")});
    EXPECT_EQ(autograd::GradOf(x).ToVector<float>(), f_.at("relu:grad:x").ToVector<float>());
    EXPECT_EQ(autograd::GradOf(x).ToVector<float>(), std::vector<float>(12, 0.0f));
  }
}

// Activation's relu, sigmoid and tanh are the same functions: MXNet 1.9.1 has no second-order gradient for
// Activation, so its unary operators' fixtures are the reference.
TEST_F(AutogradTest, SecondOrderOfActivationMatchesTheUnaryOperators) {
  for (const char* act : {"sigmoid", "tanh"}) {
    SecondOrder(act, {"x"}, [act](const std::vector<NDArray>& v) {
      return Invoke("Activation", {v[0]}, {{"act_type", act}})[0];
    });
  }
}

TEST_F(AutogradTest, SecondOrderCompositionsMatchMXNet) {
  SecondOrder("sin_relu", {"x"}, [](const std::vector<NDArray>& v) { return Unary("sin", Unary("relu", v[0])); });
  SecondOrder("sin_exp", {"x"}, [](const std::vector<NDArray>& v) { return Unary("sin", Unary("exp", v[0])); });
  SecondOrder("tanh_sin_add", {"a", "b"}, [](const std::vector<NDArray>& v) {
    return Unary("tanh", Unary("sin", Invoke("elemwise_add", {v[0], v[1]})[0] + 0.5));
  });
  // MXNet differentiates these with their first-order gradients written out as operators (it has no
  // second-order gradient for dot or elemwise_mul).
  SecondOrder("dot", {"a", "b"}, [](const std::vector<NDArray>& v) { return Invoke("dot", {v[0], v[1]})[0]; });
  SecondOrder("tanh_dot", {"a", "b"}, [](const std::vector<NDArray>& v) {
    return Unary("tanh", Invoke("dot", {v[0], v[1]}, {{"transpose_b", "True"}})[0]);
  });
  SecondOrder("sin_exp_mul", {"x"},
              [](const std::vector<NDArray>& v) { return Unary("sin", v[0]) * Unary("exp", v[0]); });
}

TEST_F(AutogradTest, SecondOrderInFloat64MatchesMXNet) {
  SecondOrder(
      "tanh64", {"x"}, [](const std::vector<NDArray>& v) { return Unary("tanh", v[0]); }, 1e-10);
  SecondOrder(
      "tanh_dot64", {"a", "b"},
      [](const std::vector<NDArray>& v) {
        return Unary("tanh", Invoke("dot", {v[0], v[1]}, {{"transpose_b", "True"}})[0]);
      },
      1e-10);
}

// FullyConnected without bias is the tanh_dot case (dot(a, b^T)); with a zero bias whose second head gradient
// is zero, a's and b's second-order gradients are the same.
TEST_F(AutogradTest, SecondOrderOfFullyConnectedMatchesDot) {
  for (const bool bias : {false, true}) {
    SCOPED_TRACE(bias ? "with bias" : "no bias");
    NDArray a = In("tanh_dot", "a"), b = In("tanh_dot", "b"), c = NDArray::Zeros(TShape{2}, Context::CPU());
    autograd::AttachGrad(&c);
    std::vector<NDArray> vars{a, b}, heads2{f_.at("tanh_dot:head2:a"), f_.at("tanh_dot:head2:b")};
    if (bias) {
      vars.push_back(c);
      heads2.push_back(NDArray::Zeros(TShape{2}, Context::CPU()));
    }
    std::vector<NDArray> first;
    {
      autograd::RecordScope record;
      const Kwargs kw{{"num_hidden", "2"}, {"no_bias", bias ? "False" : "True"}};
      first = autograd::Grad({Unary("tanh", Invoke("FullyConnected", vars, kw)[0])}, vars, {f_.at("tanh_dot:head")},
                             true, true);
    }
    ExpectClose(first[0], f_.at("tanh_dot:first:a"), "first d/da");
    ExpectClose(first[1], f_.at("tanh_dot:first:b"), "first d/db");
    autograd::Backward(first, heads2);
    ExpectGrad("tanh_dot", a, "a");
    ExpectGrad("tanh_dot", b, "b");
  }
}

// Float64 inputs in [lo, hi) of `shape`, from a fixed seed.
NDArray Uniform(std::mt19937* rng, const TShape& shape, double lo = -1.0, double hi = 1.0,
                DType dtype = DType::kFloat64) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(shape.Size()));
  for (double& e : v) e = u(*rng);
  const NDArray a = NDArray::FromVector<double>(v, shape);
  return dtype == DType::kFloat64 ? a : a.AsType(dtype);
}

// FullyConnected with a bias (and a 3-D input, flattened or not) against central differences of troupe's own
// first-order gradients (OperatorRunner's), in float64: sum_i <h2_i, d y / d v_i> differentiated by v.
TEST(AutogradGradTest, SecondOrderOfFullyConnectedMatchesFiniteDifferences) {
  std::mt19937 rng(5);
  for (const bool flatten : {true, false}) {
    SCOPED_TRACE(flatten ? "flatten" : "no flatten");
    const Kwargs kw{{"num_hidden", "3"}, {"flatten", flatten ? "True" : "False"}};
    const TShape xs{2, 2, 4}, ws = flatten ? TShape{3, 8} : TShape{3, 4}, ys = flatten ? TShape{2, 3} : TShape{2, 2, 3};
    std::vector<NDArray> v{Uniform(&rng, xs), Uniform(&rng, ws), Uniform(&rng, TShape{3})};
    const NDArray h = Uniform(&rng, ys);
    const std::vector<NDArray> h2{Uniform(&rng, xs), Uniform(&rng, ws), Uniform(&rng, TShape{3})};
    auto contracted = [&](const std::vector<NDArray>& at) {
      std::vector<NDArray> vars;
      for (const NDArray& a : at) vars.push_back(a.CopyTo(Context::CPU()));
      for (NDArray& a : vars) autograd::AttachGrad(&a);
      NDArray y;
      {
        autograd::RecordScope record;
        y = Unary("tanh", Invoke("FullyConnected", vars, kw)[0]);
      }
      const auto g = autograd::Grad({y}, vars, {h});
      double s = 0;
      for (std::size_t i = 0; i < g.size(); ++i) {
        const auto gv = g[i].ToVector<double>(), hv = h2[i].ToVector<double>();
        for (std::size_t j = 0; j < gv.size(); ++j) s += gv[j] * hv[j];
      }
      return s;
    };
    std::vector<NDArray> vars;
    for (const NDArray& a : v) vars.push_back(a.CopyTo(Context::CPU()));
    for (NDArray& a : vars) autograd::AttachGrad(&a);
    {
      autograd::RecordScope record;
      const NDArray y = Unary("tanh", Invoke("FullyConnected", vars, kw)[0]);
      autograd::Backward(autograd::Grad({y}, vars, {h}, true, true), h2);
    }
    const double eps = 1e-6;
    for (std::size_t i = 0; i < v.size(); ++i) {
      const auto base = v[i].ToVector<double>(), got = autograd::GradOf(vars[i]).ToVector<double>();
      for (std::size_t j = 0; j < base.size(); ++j) {
        std::vector<NDArray> up = v, down = v;
        auto bu = base, bd = base;
        bu[j] += eps;
        bd[j] -= eps;
        up[i] = NDArray::FromVector<double>(bu, v[i].shape());
        down[i] = NDArray::FromVector<double>(bd, v[i].shape());
        const double fd = (contracted(up) - contracted(down)) / (2 * eps);
        EXPECT_NEAR(got[j], fd, 1e-6 * std::max(1.0, std::abs(fd))) << "input " << i << " [" << j << "]";
      }
    }
  }
}

// The retained gradient graph twice, the retained forward graph once, then the gradient graph without
// retain_graph: it frees the forward graph too (sigmoid's gradient reads its output), as MXNet's does.
TEST_F(AutogradTest, RetainGraphThroughBothGraphsMatchesMXNet) {
  NDArray x = In("retain", "x");
  NDArray y, dx;
  {
    autograd::RecordScope record;
    y = Unary("sigmoid", x);
    dx = autograd::Grad({y}, {x}, {f_.at("retain:head")}, true, true)[0];
  }
  autograd::Backward({dx}, {f_.at("retain:head2:x")}, true);
  ExpectGrad("retain", x, "x");
  autograd::Backward({y}, {f_.at("retain:head")}, true);
  ExpectClose(autograd::GradOf(x), f_.at("retain:grad2:x"), "first order after the second");
  autograd::Backward({dx}, {f_.at("retain:head2:x")});
  ExpectGrad("retain", x, "x");
  ExpectError([&] { autograd::Backward({y}, {f_.at("retain:head")}); }, {"freed", "'sigmoid'"});
  ExpectError([&] { autograd::Backward({dx}); }, {"freed"});
}

// Gradients nest: the third derivative of sin is -cos, of x^3 is 6.
TEST(AutogradGradTest, ThirdOrderGradients) {
  NDArray x = NDArray::FromVector<double>({-1.5, 0.25, 2.0}, TShape{3});
  autograd::AttachGrad(&x);
  for (const bool sine : {true, false}) {
    NDArray d3;
    {
      autograd::RecordScope record;
      const NDArray y = sine ? Unary("sin", x) : Invoke("_power_scalar", {x}, {{"scalar", "3"}})[0];
      const NDArray d1 = autograd::Grad({y}, {x}, {}, true, true)[0];
      const NDArray d2 = autograd::Grad({d1}, {x}, {}, true, true)[0];
      d3 = autograd::Grad({d2}, {x}, {}, true, true)[0];
    }
    const auto got = d3.ToVector<double>();
    const std::vector<double> xv{-1.5, 0.25, 2.0};
    for (std::size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(got[i], sine ? -std::cos(xv[i]) : 6.0, 1e-12) << i;
  }
}

// For every operator create_graph covers, the first-order gradients it records equal those of the operator's
// own backward pass (OperatorRunner::Backward), for every input at once.
TEST(AutogradGradTest, RecordedFirstOrderGradientsEqualTheOperatorsOwn) {
  struct Case {
    std::string op;
    Kwargs kw;
    std::vector<TShape> in;
    double lo = -1.0, hi = 1.0;
  };
  const TShape m{3, 4};
  const std::vector<Case> cases = {
      {"sin", {}, {m}},
      {"cos", {}, {m}},
      {"exp", {}, {m}},
      {"log", {}, {m}, 0.5, 2.0},
      {"square", {}, {m}},
      {"tanh", {}, {m}},
      {"sigmoid", {}, {m}},
      {"relu", {}, {m}},
      {"negative", {}, {m}},
      {"_copy", {}, {m}},
      {"Activation", {{"act_type", "relu"}}, {m}},
      {"Activation", {{"act_type", "sigmoid"}}, {m}},
      {"Activation", {{"act_type", "tanh"}}, {m}},
      {"Activation", {{"act_type", "softrelu"}}, {m}},
      {"elemwise_add", {}, {m, m}},
      {"elemwise_sub", {}, {m, m}},
      {"elemwise_mul", {}, {m, m}},
      {"elemwise_div", {}, {m, m}, 0.5, 2.0},
      {"_plus_scalar", {{"scalar", "0.5"}}, {m}},
      {"_minus_scalar", {{"scalar", "0.5"}}, {m}},
      {"_rminus_scalar", {{"scalar", "0.5"}}, {m}},
      {"_mul_scalar", {{"scalar", "3"}}, {m}},
      {"_div_scalar", {{"scalar", "4"}}, {m}},
      {"_rdiv_scalar", {{"scalar", "2"}}, {m}, 0.5, 2.0},
      {"_power_scalar", {{"scalar", "3"}}, {m}, 0.5, 2.0},
      {"_rpower_scalar", {{"scalar", "2"}}, {m}},
      {"dot", {}, {m, TShape{4, 2}}},
      {"dot", {{"transpose_a", "True"}}, {TShape{4, 3}, TShape{4, 2}}},
      {"dot", {{"transpose_b", "True"}}, {m, TShape{2, 4}}},
      {"dot", {{"transpose_a", "True"}, {"transpose_b", "True"}}, {TShape{4, 3}, TShape{2, 4}}},
      {"FullyConnected", {{"num_hidden", "2"}}, {m, TShape{2, 4}, TShape{2}}},
      {"FullyConnected", {{"num_hidden", "2"}, {"no_bias", "True"}}, {TShape{3, 2, 2}, TShape{2, 4}}},
      {"FullyConnected", {{"num_hidden", "2"}, {"flatten", "False"}}, {TShape{2, 3, 4}, TShape{2, 4}, TShape{2}}},
      {"Reshape", {{"shape", "(4,3)"}}, {m}},
      {"Cast", {{"dtype", "float64"}}, {m}},
  };
  std::vector<std::string> covered;
  std::mt19937 rng(3);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op + (c.kw.empty() ? "" : " " + c.kw[0].first + "=" + c.kw[0].second));
    covered.push_back(c.op);
    std::vector<NDArray> vars;
    for (const TShape& s : c.in) vars.push_back(Uniform(&rng, s, c.lo, c.hi, DType::kFloat32));
    for (NDArray& v : vars) autograd::AttachGrad(&v);
    NDArray y;
    {
      autograd::RecordScope record;
      y = Invoke(c.op, vars, c.kw)[0];
    }
    const NDArray h = Uniform(&rng, y.shape(), -1.0, 1.0, y.dtype());
    const auto own = autograd::Grad({y}, vars, {h}, /*retain_graph=*/true);
    const auto recorded = autograd::Grad({y}, vars, {h}, /*retain_graph=*/true, /*create_graph=*/true);
    for (std::size_t i = 0; i < vars.size(); ++i) {
      ExpectClose(recorded[i], own[i], "input " + std::to_string(i), 1e-6);
    }
  }
  for (const std::string& op : autograd::HigherOrderOperators()) {
    EXPECT_NE(std::find(covered.begin(), covered.end(), op), covered.end()) << op << " has no case here";
  }
}

// Grad returns new arrays and leaves the variables' buffers alone (whatever their request); a variable the
// heads do not depend on gets zeros; a head that is itself a variable gets a copy of its head gradient.
TEST(AutogradGradTest, GradReturnsNewArraysAndLeavesBuffersAlone) {
  NDArray x = NDArray::FromVector<float>({1.0f, 2.0f}, TShape{2});
  NDArray unused = NDArray::Ones(TShape{3}, Context::CPU());
  autograd::AttachGrad(&x, kNullOp);
  autograd::AttachGrad(&unused);
  NDArray y;
  {
    autograd::RecordScope record;
    y = x * x;
  }
  const NDArray h = NDArray::FromVector<float>({1.0f, -1.0f}, TShape{2});
  const auto g = autograd::Grad({y}, {x, unused, x}, {h}, true);
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g[0].ToVector<float>(), (std::vector<float>{2.0f, -4.0f}));
  EXPECT_EQ(g[1].ToVector<float>(), std::vector<float>(3, 0.0f));
  EXPECT_EQ(g[2].ToVector<float>(), g[0].ToVector<float>());
  EXPECT_EQ(autograd::GradOf(x).ToVector<float>(), std::vector<float>(2, 0.0f));
  EXPECT_EQ(autograd::GradOf(unused).ToVector<float>(), std::vector<float>(3, 0.0f));
  const auto self = autograd::Grad({x}, {x}, {h});
  EXPECT_FALSE(self[0].SharesChunkWith(h));
  EXPECT_EQ(self[0].ToVector<float>(), h.ToVector<float>());
}

TEST(AutogradGradTest, GradOnArraysThatAreNotVariablesIsAnError) {
  NDArray x = NDArray::Ones(TShape{2}, Context::CPU());
  autograd::AttachGrad(&x);
  const NDArray plain = NDArray::Ones(TShape{2}, Context::CPU());
  NDArray mid, y;
  {
    autograd::RecordScope record;
    mid = Unary("sin", x);
    y = Unary("cos", mid);
  }
  ExpectError([&] { autograd::Grad({y}, {plain}, {}, true); }, {"autograd::Grad", "array 0", "not a variable"});
  ExpectError([&] { autograd::Grad({y}, {x, mid}, {}, true); }, {"array 1", "not a variable"});
  ExpectError([&] { autograd::Grad({y}, {}, {}, true); }, {"no variables"});
  EXPECT_EQ(autograd::Grad({y}, {x})[0].ToVector<float>().size(), 2u);  // the graph is still there
}

// create_graph through an operator, parameter or rank the table does not cover, or a Function, is an error at
// the call, before anything is pushed: the graph stays, and a first-order Grad through it still works.
TEST(AutogradGradTest, CreateGraphThroughAnUncoveredOperatorIsAnError) {
  NDArray x = NDArray::FromVector<float>({0.1f, 0.2f, 0.3f, 0.4f}, TShape{2, 2});
  autograd::AttachGrad(&x);
  struct Case {
    std::function<NDArray()> f;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {[&] { return Unary("sin", Unary("arcsin", x)); },
       {"create_graph", "operator 'arcsin' has no higher-order gradient"}},
      {[&] {
         return Invoke("Activation", {x}, {{"act_type", "softsign"}})[0];
       },
       {"'Activation'", "act_type softsign"}},
      {[&] {
         return Invoke("dot", {x.Reshape(TShape{1, 2, 2}), x})[0];
       },
       {"'dot'", "(1,2,2)", "not both 2-D"}},
      {[&] { return autograd::Function::Apply(std::make_shared<Sigmoid>(), {x})[0]; },
       {"a Function has no higher-order"}},
  };
  for (const Case& c : cases) {
    NDArray y;
    {
      autograd::RecordScope record;
      y = c.f();
    }
    ExpectError([&] { autograd::Grad({y}, {x}, {}, false, true); }, c.parts);
    EXPECT_EQ(autograd::Grad({y}, {x})[0].ToVector<float>().size(), 4u);  // not freed by the failed call
  }
  // An uncovered operator off the way to the variables is no obstacle.
  NDArray y;
  {
    autograd::RecordScope record;
    y = Unary("sin", x) + Unary("arcsin", NDArray::Full(TShape{2, 2}, 0.5, Context::CPU()));
  }
  EXPECT_EQ(autograd::Grad({y}, {x}, {}, false, true)[0].ToVector<float>().size(), 4u);
}

TEST(AutogradGradTest, GradTwiceThroughAFreedGraphIsAnError) {
  NDArray x = NDArray::FromVector<float>({0.5f, -1.0f}, TShape{2});
  autograd::AttachGrad(&x);
  NDArray y;
  {
    autograd::RecordScope record;
    y = Unary("tanh", x);
  }
  autograd::Grad({y}, {x}, {}, true);
  autograd::Grad({y}, {x});  // frees it
  ExpectError([&] { autograd::Grad({y}, {x}); }, {"autograd::Grad", "freed", "'tanh'", "retain_graph"});
  ExpectError([&] { autograd::Grad({y}, {x}, {}, false, true); }, {"freed"});
  ExpectError([&] { autograd::Backward({y}); }, {"autograd::Backward", "freed"});
}

// train_mode is the mode during the backward pass: a Function's Backward sees it (operators' own backward
// passes do not read it).
TEST(AutogradGradTest, TrainModeIsTheModeOfTheBackwardPass) {
  struct Mode : autograd::Function {
    bool* seen;
    explicit Mode(bool* s) : seen(s) {}
    std::vector<NDArray> Forward(const std::vector<NDArray>& in) override { return {in[0] * 2.0}; }
    std::vector<NDArray> Backward(const std::vector<NDArray>& dy) override {
      *seen = autograd::IsTraining();
      return {dy[0] * 2.0};
    }
  };
  NDArray x = NDArray::Ones(TShape{2}, Context::CPU());
  autograd::AttachGrad(&x);
  for (const bool train : {false, true}) {
    for (const bool grad : {false, true}) {
      bool seen = !train;
      NDArray y;
      {
        autograd::RecordScope record(!train);  // the forward pass's mode is not the backward's
        y = autograd::Function::Apply(std::make_shared<Mode>(&seen), {x})[0];
      }
      if (grad) {
        autograd::Grad({y}, {x}, {}, false, false, train);
      } else {
        autograd::Backward({y}, {}, false, train);
      }
      EXPECT_EQ(seen, train) << (grad ? "Grad" : "Backward");
      EXPECT_FALSE(autograd::IsTraining());  // restored
    }
  }
}

// Without retain_graph a node's saved arrays (and a Function's object) are released as soon as its gradient
// is pushed: by the time the backward pass reaches the first Function of a chain, the second is gone.
TEST(AutogradGradTest, ANodeIsReleasedAsSoonAsItsGradientIsPushed) {
  struct Double : autograd::Function {
    std::weak_ptr<autograd::Function> later;
    int* alive_later = nullptr;  // set for the first: whether the later node's Function was alive at its Backward
    std::vector<NDArray> Forward(const std::vector<NDArray>& in) override { return {in[0] * 2.0}; }
    std::vector<NDArray> Backward(const std::vector<NDArray>& dy) override {
      if (alive_later != nullptr) *alive_later = later.expired() ? 0 : 1;
      return {dy[0] * 2.0};
    }
  };
  for (const bool retain : {false, true}) {
    NDArray x = NDArray::Ones(TShape{2}, Context::CPU());
    autograd::AttachGrad(&x);
    int alive = -1;
    NDArray y;
    {
      auto first = std::make_shared<Double>(), second = std::make_shared<Double>();
      first->later = second;
      first->alive_later = &alive;
      autograd::RecordScope record;
      y = autograd::Function::Apply(second, autograd::Function::Apply(first, {x}))[0];
    }
    autograd::Backward({y}, {}, retain);
    EXPECT_EQ(alive, retain ? 1 : 0) << (retain ? "retained" : "freed");
    EXPECT_EQ(autograd::GradOf(x).ToVector<float>(), std::vector<float>(2, 4.0f));
  }
}

// The memory itself: on an engine that runs each function as it is pushed (naive), the saved arrays of the
// nodes the pass has been through are back in the pool when it reaches the first node of a chain of tanh.
// (The actor engine frees them as soon as their pushed gradients have run; the calling thread allocates
// gradients as it pushes, so how much that lowers the peak depends on how far it runs ahead.)
TEST(AutogradGradTest, SavedArraysAreFreedDuringThePass) {
  EngineConfig config;
  config.type = EngineType::kNaive;
  const std::unique_ptr<Engine> engine = Engine::Create(config);  // outlives the arrays below
  struct Probe : autograd::Function {
    std::uint64_t* in_use;
    explicit Probe(std::uint64_t* u) : in_use(u) {}
    std::vector<NDArray> Forward(const std::vector<NDArray>& in) override { return {in[0] * 1.0}; }
    std::vector<NDArray> Backward(const std::vector<NDArray>& dy) override {
      *in_use = Storage::Get()->Stats(Context::CPU()).bytes_in_use;
      return {dy[0] * 1.0};
    }
  };
  const std::uint64_t mib = std::uint64_t{1} << 20;
  for (const bool retain : {false, true}) {
    Engine::Get()->WaitForAll();  // nothing of the default engine's still to free
    std::uint64_t after_forward = 0, at_probe = 0;
    {
      NDArray x = NDArray::Full(TShape{1 << 18}, 0.1, Context::CPU(), DType::kFloat32, engine.get());  // 1 MiB
      autograd::AttachGrad(&x);
      NDArray y;
      {
        autograd::RecordScope record;
        y = autograd::Function::Apply(std::make_shared<Probe>(&at_probe), {x})[0];
        for (int i = 0; i < 8; ++i) y = Unary("tanh", y);
      }
      after_forward = Storage::Get()->Stats(Context::CPU()).bytes_in_use;
      autograd::Backward({y}, {}, retain);
    }
    if (retain) {
      EXPECT_GE(at_probe, after_forward) << "the retained graph keeps its arrays";
    } else {
      EXPECT_LE(at_probe + 6 * mib, after_forward) << "the tanh outputs are still held";
    }
  }
}

// One call of each operator family the other fixtures leave out (tests/op/data/autograd/make_families.py:
// reductions, broadcasting, layout, joining and splitting, batch_dot, take, clip, the loss outputs, tiling,
// slicing, normalisation, padding, upsampling, where), recorded through Invoke with every non-integer input a
// variable and a head gradient per output: outputs and gradients equal MXNet 1.9.1's.
TEST(AutogradFamiliesTest, EveryFamilyMatchesMXNet) {
  const std::string dir = std::string(TROUPE_TEST_DATA_DIR) + "/autograd/";
  std::ifstream file(dir + "families.json");
  ASSERT_TRUE(file) << dir << "families.json";
  const nlohmann::json index = nlohmann::json::parse(file);
  std::vector<NDArray> arrays;
  std::vector<std::string> names;
  NDArray::Load(dir + "families.params", &arrays, &names);
  std::map<std::string, NDArray> f;
  for (std::size_t i = 0; i < arrays.size(); ++i) f[names[i]] = arrays[i];
  int cases = 0;
  for (const auto& c : index.at("cases")) {
    const std::string name = c.at("name");
    SCOPED_TRACE(name);
    Kwargs kwargs;
    for (const auto& [k, v] : c.at("kwargs").items()) kwargs.emplace_back(k, v.get<std::string>());
    std::vector<NDArray> in;
    std::vector<std::size_t> variables;
    for (std::size_t i = 0; i < c.at("inputs").size(); ++i) {
      NDArray a = f.at(name + ":in:" + std::to_string(i)).CopyTo(Context::CPU());
      if (!c.at("inputs")[i].at("integer").get<bool>()) {
        autograd::AttachGrad(&a);
        variables.push_back(i);
      }
      in.push_back(a);
    }
    std::vector<NDArray> out, heads;
    {
      autograd::RecordScope record;
      out = Invoke(c.at("op").get<std::string>(), in, kwargs);
    }
    ASSERT_EQ(out.size(), c.at("outputs").get<std::size_t>());
    for (std::size_t k = 0; k < out.size(); ++k) {
      heads.push_back(f.at(name + ":head:" + std::to_string(k)));
      ExpectClose(out[k], f.at(name + ":out:" + std::to_string(k)), name + " output " + std::to_string(k));
    }
    autograd::Backward(out, heads);
    for (std::size_t i : variables) {
      const NDArray want = f.at(name + ":grad:" + std::to_string(i));
      const auto w = want.ToVector<float>();
      if (std::all_of(w.begin(), w.end(), [](float v) { return v == 0; })) {
        // No gradient for this input (LinearRegressionOutput's label): zeros here too.
        EXPECT_EQ(autograd::GradOf(in[i]).ToVector<float>(), w) << name << " d/d input " << i;
        continue;
      }
      ExpectClose(autograd::GradOf(in[i]), want, name + " d/d input " + std::to_string(i));
    }
    ++cases;
  }
  EXPECT_GE(cases, 29);
}

// On the default (actor) engine, where the calling thread pushes faster than the workers run: a backward pass
// through a chain of 96 sin nodes on 1 MiB arrays keeps to a few windows of gradients beyond what the forward
// pass holds, rather than allocating most of the 96 gradients before the engine frees them.
TEST(AutogradGradTest, ABackwardPassKeepsFewGradientsInFlight) {
  const std::uint64_t mib = std::uint64_t{1} << 20;
  const int chain = 96;
  Engine::Get()->WaitForAll();
  NDArray x = NDArray::Full(TShape{1 << 18}, 0.1, Context::CPU());  // 1 MiB
  autograd::AttachGrad(&x);
  NDArray y;
  {
    autograd::RecordScope record;
    y = x;
    for (int i = 0; i < chain; ++i) y = Unary("sin", y);
  }
  y.WaitToRead();
  Storage* storage = Storage::Get().get();
  storage->ResetPeak(Context::CPU());
  const std::uint64_t before = storage->Stats(Context::CPU()).bytes_in_use;
  autograd::Backward({y});
  autograd::GradOf(x).WaitToRead();
  const std::uint64_t extra = storage->Stats(Context::CPU()).peak_bytes_in_use - before;
  EXPECT_LE(extra, 32 * mib) << "the pass held " << extra / mib << " MiB beyond the forward pass's arrays";
  // And the gradient is right: d/dx of sin applied 32 times.
  double v = 0.1, d = 1;
  for (int i = 0; i < chain; ++i) {
    d *= std::cos(v);
    v = std::sin(v);
  }
  EXPECT_NEAR(autograd::GradOf(x).ToVector<float>()[7], d, 1e-5 * std::max(1.0, std::abs(d)));
}

}  // namespace
}  // namespace troupe
