// Activation, LeakyReLU, BatchNorm, Dropout, softmax/log_softmax, SoftmaxOutput and the regression heads on
// the GPU (cuDNN and CUDA kernels) against the CPU operators, float32 on Context::GPU(0) against float64 on
// the CPU, through OperatorRunner: every output (hidden ones too), the auxiliary states after the call
// (BatchNorm's moving statistics), the gradients with kWriteTo and with kAddTo. Random operators (Dropout,
// rrelu in training) are checked by their mask's statistics and backward = out_grad * mask. Skips without a
// CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "actors/runtime.h"
#include "op/imperative.h"
#include "op/nn/activation/activation.h"
#include "op/nn/batch_norm/batch_norm.h"
#include "op/nn/dropout/dropout.h"
#include "op/nn/leaky_relu/leaky_relu.h"
#include "op/nn/regression_output/regression_output.h"
#include "op/nn/softmax/softmax.h"
#include "tests/common/op_test_util.h"

namespace troupe {
namespace {

using test::HostTensor;
using test::Near;
using test::OpCase;

class ActNormGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Runtime::GpuCount() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  }
};

using Results = test::FwdBwd;

// Forward (is_train from the case), then Backward with kWriteTo and again with kAddTo onto `init`.
Results RunOn(OpCase c, Context ctx, DType dtype, const std::vector<HostTensor>& inputs,
              const std::vector<HostTensor>& aux, const std::vector<HostTensor>& heads,
              const std::vector<HostTensor>& init) {
  c.ctx = ctx;
  c.dtype = dtype;
  return test::RunForwardBackward(c, inputs, heads, {}, {}, aux, init);
}

// Runs the case on both devices with the same inputs and compares everything.
void Compare(const OpCase& c, std::vector<HostTensor> inputs = {}, std::vector<HostTensor> aux = {},
             double tol = 2e-4) {
  std::string label = c.op + " {";
  for (const auto& [k, v] : c.kwargs) label += k + "=" + v + " ";
  SCOPED_TRACE(label + "} train=" + std::to_string(c.is_train));
  auto r = test::MakeRunner(c);
  std::mt19937_64 rng(11);
  if (inputs.empty()) {
    for (const auto& s : r->in_shapes()) inputs.push_back(test::RandomTensor(s, &rng, -2, 2));
  }
  std::vector<HostTensor> heads, init;
  for (int i = 0; i < r->prop().NumVisibleOutputs(); ++i) heads.push_back(test::RandomTensor(r->out_shapes()[i], &rng));
  for (const auto& s : r->in_shapes()) init.push_back(test::RandomTensor(s, &rng));
  const Results cpu = RunOn(c, Context::CPU(), DType::kFloat64, inputs, aux, heads, init);
  const Results gpu = RunOn(c, Context::GPU(0), DType::kFloat32, inputs, aux, heads, init);
  for (std::size_t i = 0; i < cpu.out.size(); ++i) {
    EXPECT_TRUE(Near(gpu.out[i], cpu.out[i], tol, tol, "output " + std::to_string(i)));
  }
  for (std::size_t i = 0; i < cpu.aux.size(); ++i) {
    EXPECT_TRUE(Near(gpu.aux[i], cpu.aux[i], tol, tol, "auxiliary state " + std::to_string(i)));
  }
  for (std::size_t i = 0; i < cpu.grad.size(); ++i) {
    EXPECT_TRUE(Near(gpu.grad[i], cpu.grad[i], tol, tol, "gradient " + std::to_string(i)));
    EXPECT_TRUE(Near(gpu.grad_add[i], cpu.grad_add[i], tol, tol, "kAddTo gradient " + std::to_string(i)));
  }
}

TEST_F(ActNormGpuTest, ActivationMatchesCpu) {
  for (const char* act : {"relu", "sigmoid", "tanh", "softrelu", "softsign"}) {
    Compare(OpCase{"Activation", {{"act_type", act}}, {TShape{4, 37}}});
    Compare(OpCase{"Activation", {{"act_type", act}}, {TShape{2, 3, 8, 8}}});
  }
}

TEST_F(ActNormGpuTest, LeakyReLUMatchesCpu) {
  for (const Kwargs& kw : std::vector<Kwargs>{{}, {{"act_type", "elu"}, {"slope", "0.7"}}, {{"act_type", "selu"}},
                                              {{"act_type", "gelu"}}}) {
    Compare(OpCase{"LeakyReLU", kw, {TShape{5, 33}}});
  }
  Compare(OpCase{"LeakyReLU", {{"act_type", "prelu"}}, {TShape{4, 3, 5, 5}, TShape{3}}});
  Compare(OpCase{"LeakyReLU", {{"act_type", "prelu"}}, {TShape{4, 7}, TShape{1}}});
  OpCase rr{"LeakyReLU", {{"act_type", "rrelu"}}, {TShape{6, 10}}};
  rr.is_train = false;
  Compare(rr);
}

TEST_F(ActNormGpuTest, RReLUTrainingOnGpuDrawsSlopesInBounds) {
  OpCase c{"LeakyReLU", {{"act_type", "rrelu"}, {"lower_bound", "0.1"}, {"upper_bound", "0.4"}}, {TShape{1000}}};
  std::mt19937_64 rng(5);
  const HostTensor x = test::RandomTensor(TShape{1000}, &rng), head = test::RandomTensor(TShape{1000}, &rng);
  const Results r = RunOn(c, Context::GPU(0), DType::kFloat32, {x}, {}, {head}, {HostTensor(1000, 0.0)});
  double sum = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double m = r.out[1][i];
    ASSERT_GE(m, 0.1 - 1e-6);
    ASSERT_LE(m, 0.4 + 1e-6);
    sum += m;
    const float xf = static_cast<float>(x[i]);
    EXPECT_NEAR(r.out[0][i], xf > 0 ? xf : m * xf, 1e-6);
    EXPECT_NEAR(r.grad[0][i], static_cast<float>(head[i]) * (xf > 0 ? 1.0 : m), 1e-6);
  }
  EXPECT_NEAR(sum / 1000, 0.25, 0.02);  // uniform mean; standard error 0.0027
}

TEST_F(ActNormGpuTest, BatchNormMatchesCpuIncludingMovingStatistics) {
  std::mt19937_64 rng(9);
  struct Case {
    Kwargs kw;
    TShape data;
    std::int64_t ch;
    bool train;
  };
  const std::vector<Case> cases = {
      {{{"fix_gamma", "False"}}, TShape{8, 3, 5, 4}, 3, true},
      {{}, TShape{8, 3, 5, 4}, 3, true},
      {{{"fix_gamma", "False"}, {"axis", "-1"}}, TShape{6, 4, 5}, 5, true},
      {{{"fix_gamma", "False"}, {"momentum", "0.5"}, {"eps", "1e-5"}}, TShape{16, 7}, 7, true},
      {{{"fix_gamma", "False"}}, TShape{8, 3, 5, 4}, 3, false},
      {{{"fix_gamma", "False"}, {"use_global_stats", "True"}}, TShape{8, 3, 5, 4}, 3, true},
      {{{"fix_gamma", "False"}, {"output_mean_var", "True"}}, TShape{4, 3, 2}, 3, true},
  };
  for (const auto& k : cases) {
    OpCase c{"BatchNorm", k.kw, {k.data, TShape{k.ch}, TShape{k.ch}}};
    c.is_train = k.train;
    const std::vector<HostTensor> aux = {test::RandomTensor(TShape{k.ch}, &rng),
                                         test::RandomTensor(TShape{k.ch}, &rng, 0.5, 2.0)};
    Compare(c, {}, aux, 5e-4);
  }
}

TEST_F(ActNormGpuTest, DropoutOnGpuKeepsAboutOneMinusPAndBackwardIsOutGradTimesMask) {
  for (double p : {0.5, 0.1}) {
    OpCase c{"Dropout", {{"p", std::to_string(p)}}, {TShape{200, 100}}};
    std::mt19937_64 rng(13);
    const HostTensor x = test::RandomTensor(TShape{200, 100}, &rng), head = test::RandomTensor(TShape{200, 100}, &rng);
    const HostTensor init = test::RandomTensor(TShape{200, 100}, &rng);
    const Results r = RunOn(c, Context::GPU(0), DType::kFloat32, {x}, {}, {head}, {init});
    std::size_t kept = 0;
    const double scale = 1.0 / (1.0 - p);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double m = r.out[1][i];
      ASSERT_TRUE(m == 0 || std::fabs(m - scale) < 1e-5) << m;
      kept += m != 0;
      ASSERT_EQ(r.out[0][i], static_cast<double>(static_cast<float>(x[i]) * static_cast<float>(m)));
      ASSERT_EQ(r.grad[0][i], static_cast<double>(static_cast<float>(head[i]) * static_cast<float>(m)));
      ASSERT_NEAR(r.grad_add[0][i], static_cast<float>(init[i]) + static_cast<float>(head[i]) * m, 1e-5);
    }
    EXPECT_NEAR(static_cast<double>(kept) / x.size(), 1 - p, 0.02) << "p = " << p;
  }
  // Inference is the identity; axes share the mask.
  OpCase inf{"Dropout", {{"p", "0.5"}}, {TShape{4, 5}}};
  inf.is_train = false;
  Compare(inf);
  OpCase ax{"Dropout", {{"p", "0.5"}, {"axes", "(1,)"}}, {TShape{64, 8}}};
  const Results r = RunOn(ax, Context::GPU(0), DType::kFloat32, {HostTensor(512, 1.0)}, {}, {HostTensor(512, 1.0)},
                        {HostTensor(512, 0.0)});
  ASSERT_EQ(r.out[1].size(), 64u);
  for (int row = 0; row < 64; ++row) {
    for (int k = 0; k < 8; ++k) ASSERT_EQ(r.out[0][row * 8 + k], r.out[1][row]);
  }
}

TEST_F(ActNormGpuTest, SoftmaxFamilyMatchesCpu) {
  for (const char* op : {"softmax", "log_softmax"}) {
    Compare(OpCase{op, {}, {TShape{7, 13}}});
    Compare(OpCase{op, {{"axis", "0"}}, {TShape{7, 13}}});
    Compare(OpCase{op, {{"axis", "1"}, {"temperature", "3"}}, {TShape{3, 300, 4}}});
    Compare(OpCase{op, {}, {TShape{2, 2000}}});  // a long row: the block reduction
  }
}

TEST_F(ActNormGpuTest, SoftmaxOutputMatchesCpu) {
  std::mt19937_64 rng(21);
  std::uniform_int_distribution<int> cls(-1, 9);
  auto labels = [&](std::size_t n) {
    HostTensor l(n);
    for (auto& v : l) v = cls(rng);
    return l;
  };
  const HostTensor x = test::RandomTensor(TShape{16, 10}, &rng, -3, 3);
  for (const Kwargs& kw : std::vector<Kwargs>{{},
                                              {{"normalization", "batch"}, {"grad_scale", "2"}},
                                              {{"use_ignore", "True"}, {"normalization", "valid"}},
                                              {{"smooth_alpha", "0.1"}},
                                              {{"out_grad", "True"}}}) {
    Compare(OpCase{"SoftmaxOutput", kw, {TShape{16, 10}, TShape{16}}}, {x, labels(16)});
  }
  const HostTensor xm = test::RandomTensor(TShape{4, 10, 3, 3}, &rng);
  Compare(OpCase{"SoftmaxOutput", {{"multi_output", "True"}, {"use_ignore", "True"}},
                 {TShape{4, 10, 3, 3}, TShape{4, 3, 3}}},
          {xm, labels(36)});
  Compare(OpCase{"SoftmaxOutput", {{"preserve_shape", "True"}}, {TShape{4, 3, 10}, TShape{4, 3}}},
          {test::RandomTensor(TShape{4, 3, 10}, &rng), labels(12)});
  Compare(OpCase{"SoftmaxOutput", {}, {TShape{16, 10}, TShape{16, 10}}},
          {x, test::RandomTensor(TShape{16, 10}, &rng, 0, 1)});  // probabilities as labels
}

TEST_F(ActNormGpuTest, RegressionHeadsMatchCpu) {
  for (const char* op : {"LinearRegressionOutput", "LogisticRegressionOutput", "MAERegressionOutput"}) {
    Compare(OpCase{op, {{"grad_scale", "0.5"}}, {TShape{9, 4}, TShape{9, 4}}});
    Compare(OpCase{op, {}, {TShape{9, 1}, TShape{9}}});
  }
}

// In-place forward (output over the input, kWriteInplace) and backward (input gradient over the output
// gradient) on the GPU give the out-of-place results: cuDNN's activation and the softmax row kernels read
// before they write.
TEST_F(ActNormGpuTest, InPlaceForwardAndBackwardMatchOutOfPlace) {
  const std::vector<OpCase> cases = {
      OpCase{"Activation", {{"act_type", "relu"}}, {TShape{3, 50}}},
      OpCase{"Activation", {{"act_type", "sigmoid"}}, {TShape{3, 50}}},
      OpCase{"Activation", {{"act_type", "softrelu"}}, {TShape{3, 50}}},
      OpCase{"LeakyReLU", {{"act_type", "elu"}}, {TShape{3, 50}}},
      OpCase{"softmax", {{"axis", "0"}}, {TShape{3, 50}}},
      OpCase{"log_softmax", {}, {TShape{3, 50}}},
      OpCase{"Dropout", {{"p", "0"}}, {TShape{3, 50}}},
  };
  for (OpCase c : cases) {
    SCOPED_TRACE(c.op + (c.kwargs.empty() ? std::string() : " " + c.kwargs.front().second));
    c.ctx = Context::GPU(0);
    c.dtype = DType::kFloat32;
    auto r = test::MakeRunner(c);
    std::mt19937_64 rng(17);
    const HostTensor x = test::RandomTensor(c.in_shapes[0], &rng, -2, 2), head = test::RandomTensor(c.in_shapes[0], &rng);
    // Out of place.
    test::OpArrays a = test::MakeArrays(*r, c, {x}, {});
    r->Forward(true, a.in, a.out, a.aux);
    NDArray h = test::ToArray(head, c.in_shapes[0], c.dtype, c.ctx);
    NDArray g = NDArray::Zeros(c.in_shapes[0], c.ctx, c.dtype);
    r->Backward({h}, a.in, a.out, a.aux, {g}, {kWriteTo});
    // In place: the output on the input's memory, then the gradient on the head's.
    test::OpArrays b = test::MakeArrays(*r, c, {x}, {});
    std::vector<OpReqType> req(b.out.size(), kWriteTo);
    b.out[0] = b.in[0];
    req[0] = kWriteInplace;
    r->Forward(true, b.in, b.out, b.aux, req);
    NDArray h2 = test::ToArray(head, c.in_shapes[0], c.dtype, c.ctx);
    r->Backward({h2}, b.in, b.out, b.aux, {h2}, {kWriteInplace});
    EXPECT_TRUE(Near(test::ToHost(b.out[0]), test::ToHost(a.out[0]), 1e-6, 1e-7, "in-place forward"));
    EXPECT_TRUE(Near(test::ToHost(h2), test::ToHost(g), 1e-6, 1e-7, "in-place backward"));
  }
}

}  // namespace
}  // namespace troupe
