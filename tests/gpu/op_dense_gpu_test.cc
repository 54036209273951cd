// FullyConnected, Convolution and Pooling (2-D and 3-D) on the GPU (cuBLAS, cuDNN and the fallback kernels)
// against the CPU operators, float32, through OperatorRunner on Context::GPU(0): forward, backward (kWriteTo)
// and backward accumulation (kAddTo). Skips without a CUDA device.
#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "actors/runtime.h"
#include "op/imperative.h"
#include "tests/common/op_test_util.h"

namespace troupe {
namespace {

using test::HostTensor;
using test::Near;
using test::OpCase;

class DenseGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Runtime::GpuCount() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  }
};

// Outputs, then the gradient of every argument with kWriteTo, then with kAddTo onto `init`.
test::FwdBwd Run(OpCase c, Context ctx, const std::vector<HostTensor>& inputs, const std::vector<HostTensor>& heads,
                 const std::vector<HostTensor>& init) {
  c.ctx = ctx;
  return test::RunForwardBackward(c, inputs, heads, {}, {}, {}, init);
}

// Runs c on the CPU and on GPU 0 with the same random float32 inputs and compares everything.
void Compare(const OpCase& base) {
  std::ostringstream label;
  label << base.op << " {";
  for (const auto& [k, v] : base.kwargs) label << k << "=" << v << " ";
  label << "}";
  SCOPED_TRACE(label.str());
  OpCase c = base;
  c.dtype = DType::kFloat32;
  auto r = test::MakeRunner(c);
  std::mt19937_64 rng(7);
  std::vector<HostTensor> inputs, heads, init;
  for (const auto& s : r->in_shapes()) inputs.push_back(test::RandomTensor(s, &rng));
  for (const auto& s : r->in_shapes()) init.push_back(test::RandomTensor(s, &rng));
  for (const auto& s : r->out_shapes()) heads.push_back(test::RandomTensor(s, &rng));
  const test::FwdBwd cpu = Run(c, Context::CPU(), inputs, heads, init);
  const test::FwdBwd gpu = Run(c, Context::GPU(0), inputs, heads, init);
  const double rtol = 1e-4, atol = 1e-4;
  for (std::size_t i = 0; i < cpu.out.size(); ++i) {
    EXPECT_TRUE(Near(gpu.out[i], cpu.out[i], rtol, atol, "output " + std::to_string(i)));
  }
  const auto args = test::MakeProp(c)->ListArguments();
  for (std::size_t i = 0; i < cpu.grad.size(); ++i) {
    EXPECT_TRUE(Near(gpu.grad[i], cpu.grad[i], rtol, atol, "gradient of " + args[i]));
    EXPECT_TRUE(Near(gpu.grad_add[i], cpu.grad_add[i], rtol, atol, "kAddTo gradient of " + args[i]));
  }
}

TEST_F(DenseGpuTest, FullyConnectedMatchesCpu) {
  Compare({"FullyConnected", {{"num_hidden", "64"}}, {TShape{32, 100}, TShape{}, TShape{}}});
  Compare({"FullyConnected", {{"num_hidden", "10"}}, {TShape{16, 3, 5, 5}, TShape{}, TShape{}}});
  Compare({"FullyConnected", {{"num_hidden", "7"}, {"flatten", "False"}}, {TShape{4, 6, 9}, TShape{}, TShape{}}});
  Compare({"FullyConnected", {{"num_hidden", "33"}, {"no_bias", "True"}}, {TShape{5, 40}, TShape{}}});
  Compare({"FullyConnected", {{"num_hidden", "300"}}, {TShape{257, 64}, TShape{}, TShape{}}});
}

TEST_F(DenseGpuTest, ConvolutionMatchesCpu) {
  Compare({"Convolution", {{"kernel", "(5,5)"}, {"num_filter", "20"}}, {TShape{8, 1, 28, 28}, TShape{}, TShape{}}});
  Compare({"Convolution", {{"kernel", "(3,3)"}, {"num_filter", "16"}, {"pad", "(1,1)"}},
           {TShape{4, 8, 14, 14}, TShape{}, TShape{}}});
  Compare({"Convolution", {{"kernel", "(3,3)"}, {"num_filter", "8"}, {"stride", "(2,2)"}, {"pad", "(1,1)"}},
           {TShape{2, 4, 9, 9}, TShape{}, TShape{}}});
  Compare({"Convolution", {{"kernel", "(3,3)"}, {"num_filter", "6"}, {"dilate", "(2,2)"}, {"no_bias", "True"}},
           {TShape{2, 3, 10, 10}, TShape{}}});
  Compare({"Convolution", {{"kernel", "(3,3)"}, {"num_filter", "8"}, {"num_group", "4"}, {"pad", "(1,1)"}},
           {TShape{2, 8, 7, 7}, TShape{}, TShape{}}});
  Compare({"Convolution", {{"kernel", "(1,1)"}, {"num_filter", "12"}}, {TShape{3, 6, 5, 5}, TShape{}, TShape{}}});
  Compare({"Convolution", {{"kernel", "(2,3)"}, {"num_filter", "4"}, {"stride", "(1,2)"}, {"pad", "(0,1)"}},
           {TShape{2, 2, 6, 8}, TShape{}, TShape{}}});
  // 3-D (cuDNN's N-d descriptors).
  Compare({"Convolution", {{"kernel", "(3,3,3)"}, {"num_filter", "8"}, {"pad", "(1,1,1)"}},
           {TShape{2, 4, 6, 7, 5}, TShape{}, TShape{}}});
  Compare({"Convolution", {{"kernel", "(2,3,2)"}, {"num_filter", "6"}, {"stride", "(2,1,2)"}, {"dilate", "(1,2,1)"},
                           {"num_group", "3"}, {"no_bias", "True"}},
           {TShape{2, 6, 7, 8, 7}, TShape{}}});
  Compare({"Convolution", {{"kernel", "(1,1,1)"}, {"num_filter", "5"}}, {TShape{3, 4, 3, 4, 5}, TShape{}, TShape{}}});
}

TEST_F(DenseGpuTest, PoolingMatchesCpu) {
  const TShape s{2, 3, 9, 9};
  for (const char* type : {"max", "avg", "sum"}) {
    for (const char* conv : {"valid", "full"}) {
      for (const char* off : {"False", "True"}) {
        Compare({"Pooling", {{"kernel", "(2,2)"}, {"stride", "(2,2)"}, {"pool_type", type}, {"pooling_convention", conv},
                             {"cudnn_off", off}},
                 {s}});
        Compare({"Pooling", {{"kernel", "(3,3)"}, {"stride", "(2,2)"}, {"pad", "(1,1)"}, {"pool_type", type},
                             {"pooling_convention", conv}, {"cudnn_off", off}},
                 {s}});
      }
    }
    Compare({"Pooling", {{"global_pool", "True"}, {"pool_type", type}}, {TShape{2, 4, 7, 5}}});
  }
  Compare({"Pooling", {{"kernel", "(3,3)"}, {"pad", "(1,1)"}, {"pool_type", "avg"}, {"count_include_pad", "False"}},
           {TShape{2, 2, 6, 6}}});
  // 3-D: cuDNN's N-d pooling and the kernels.
  const TShape s3{2, 3, 7, 6, 7};
  for (const char* type : {"max", "avg", "sum"}) {
    for (const char* conv : {"valid", "full"}) {
      for (const char* off : {"False", "True"}) {
        Compare({"Pooling", {{"kernel", "(3,2,3)"}, {"stride", "(2,2,2)"}, {"pad", "(1,0,1)"}, {"pool_type", type},
                             {"pooling_convention", conv}, {"cudnn_off", off}},
                 {s3}});
      }
    }
    Compare({"Pooling", {{"global_pool", "True"}, {"pool_type", type}}, {TShape{2, 4, 3, 5, 4}}});
  }
  Compare({"Pooling", {{"kernel", "(3,3,3)"}, {"pad", "(1,1,1)"}, {"pool_type", "avg"}, {"count_include_pad", "False"}},
           {TShape{1, 2, 5, 6, 5}}});
}

}  // namespace
}  // namespace troupe
