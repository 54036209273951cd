// Autograd on NDArrays (op/autograd.h): gradients against MXNet 1.9.1's mx.autograd on the same inputs
// (tests/op/data/autograd/make_autograd.py: FullyConnected + relu with every input a variable and a head
// gradient, an array used twice, grad_req add over two backward passes, BatchNorm in training mode with its
// hidden outputs, Convolution + max Pooling + softmax with a constant input, a custom Function), NDArray's own
// arithmetic recorded,
// plus the rules: recording scopes nest and restore, retain_graph, a freed graph, head gradient checks, arrays
// written in place after they were recorded, in-place operations and Invoke into given outputs refused.
#include "op/autograd.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "op/imperative.h"
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

// |got - want| <= 1e-5 * max(1, |want|) element by element (float32 sums in another order than MXNet's).
void ExpectClose(const NDArray& got, const NDArray& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const auto g = got.ToVector<float>(), w = want.ToVector<float>();
  double biggest = 0;
  for (float v : w) biggest = std::max(biggest, std::abs(static_cast<double>(v)));
  ASSERT_GT(biggest, 0.0) << what << ": MXNet's gradient is all zero, nothing compared";
  for (std::size_t i = 0; i < g.size(); ++i) {
    EXPECT_NEAR(g[i], w[i], 1e-5 * std::max(1.0, std::abs(static_cast<double>(w[i])))) << what << " [" << i << "]";
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
  void ExpectGrad(const std::string& c, const NDArray& var, const std::string& name) {
    ExpectClose(autograd::GradOf(var), f_.at(c + ":grad:" + name), c + " d/d" + name);
  }
};

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

}  // namespace
}  // namespace troupe
