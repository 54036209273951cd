// The matrix operators (op/nn/matrix: transpose, SwapAxis, expand_dims, squeeze, reshape_like, reverse, tile,
// repeat, slice, slice_axis, slice_like, SliceChannel, stack) on a GPU (matrix.cu) against the CPU
// implementation: forward outputs and input gradients with kWriteTo and kAddTo through OperatorRunner on
// Context::GPU(0), float32 and float64, forward under kAddTo, in-place forms, and forward on the other element
// types (the copy moves bits of any type). Skips without a CUDA device.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "actors/runtime.h"
#include "tests/common/op_gpu_compare.h"
#include "tests/common/op_test_util.h"

namespace troupe {
namespace {

using test::CompareForwardAddToGpuWithCpu;
using test::CompareGpuWithCpu;
using test::HostTensor;
using test::OpCase;
using test::Uniform;

class OpMatrixGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Runtime::GpuCount() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  }
};

// Every operator, in each parameter form that builds another plan (negative steps, zero-stride repeats,
// hidden gradients of shape-only arguments).
std::vector<OpCase> Cases() {
  return {
      {"transpose", {}, {TShape{3, 4, 5}}},
      {"transpose", {{"axes", "(2, 0, 1)"}}, {TShape{3, 4, 5}}},
      {"transpose", {}, {TShape{64, 300}}},
      {"SwapAxis", {{"dim1", "1"}, {"dim2", "-1"}}, {TShape{2, 3, 4, 5}}},
      {"swapaxes", {{"dim1", "0"}, {"dim2", "2"}}, {TShape{2, 3, 4}}},
      {"expand_dims", {{"axis", "1"}}, {TShape{3, 4}}},
      {"squeeze", {}, {TShape{2, 1, 3, 1}}},
      {"squeeze", {{"axis", "(-1,)"}}, {TShape{2, 1, 3, 1}}},
      {"reshape_like", {}, {TShape{2, 6}, TShape{3, 4}}},
      {"reshape_like", {{"lhs_begin", "1"}}, {TShape{2, 12}, TShape{3, 4}}},
      {"reverse", {{"axis", "1"}}, {TShape{3, 4, 5}}},
      {"flip", {{"axis", "(0, 2)"}}, {TShape{3, 4, 5}}},
      {"tile", {{"reps", "(2, 3)"}}, {TShape{3, 4}}},
      {"tile", {{"reps", "(2, 1, 3)"}}, {TShape{5, 2}}},
      {"tile", {{"reps", "(40, 50)"}}, {TShape{7, 3}}},
      {"repeat", {{"repeats", "3"}}, {TShape{2, 3}}},
      {"repeat", {{"repeats", "2"}, {"axis", "-2"}}, {TShape{4, 3, 2}}},
      {"repeat", {{"repeats", "64"}, {"axis", "0"}}, {TShape{5, 33}}},
      {"slice", {{"begin", "(1, None)"}, {"end", "(3, -1)"}}, {TShape{4, 5, 2}}},
      {"slice", {{"begin", "(None, -1)"}, {"end", "(None, 0)"}, {"step", "(-2, -2)"}}, {TShape{5, 6}}},
      {"crop", {{"begin", "(0, 2)"}, {"end", "(2, 5)"}, {"step", "(1, 2)"}}, {TShape{3, 7}}},
      {"slice_axis", {{"axis", "1"}, {"begin", "1"}, {"end", "3"}}, {TShape{2, 4, 3}}},
      {"slice_axis", {{"axis", "-1"}, {"begin", "-2"}, {"end", "None"}}, {TShape{2, 4, 3}}},
      {"slice_like", {}, {TShape{4, 5}, TShape{2, 3}}},
      {"slice_like", {{"axes", "(1,)"}}, {TShape{4, 5, 6}, TShape{2, 3, 4}}},
      {"SliceChannel", {{"num_outputs", "3"}}, {TShape{2, 6, 2}}},
      {"split", {{"num_outputs", "2"}, {"axis", "0"}, {"squeeze_axis", "True"}}, {TShape{2, 3, 4}}},
      {"stack", {{"num_args", "3"}, {"axis", "1"}}, {TShape{2, 3}, TShape{2, 3}, TShape{2, 3}}},
      {"stack", {{"num_args", "2"}, {"axis", "-1"}}, {TShape{4, 5}, TShape{4, 5}}},
  };
}

TEST_F(OpMatrixGpuTest, EveryOperatorMatchesCpu) {
  for (OpCase c : Cases()) {
    for (DType t : {DType::kFloat32, DType::kFloat64}) {
      c.dtype = t;
      CompareGpuWithCpu(c);
    }
  }
}

TEST_F(OpMatrixGpuTest, GradientOfOneArgumentOnly) {
  OpCase c{"stack", {{"num_args", "2"}, {"axis", "0"}}, {TShape{3, 4}, TShape{3, 4}}, DType::kFloat32};
  CompareGpuWithCpu(c, {}, {kNullOp, kWriteTo});
  OpCase t{"tile", {{"reps", "(3, 2)"}}, {TShape{2, 2}}, DType::kFloat64};
  CompareGpuWithCpu(t, {}, {kWriteTo});
}

// Forward under kAddTo, for every case, on both devices.
TEST_F(OpMatrixGpuTest, ForwardAddTo) {
  for (OpCase c : Cases()) {
    c.dtype = DType::kFloat64;
    CompareForwardAddToGpuWithCpu(c);
  }
}

// The copy moves any element type: forward on the integer, half and bool types equals the CPU's.
TEST_F(OpMatrixGpuTest, OtherElementTypes) {
  for (DType t :
       {DType::kInt32, DType::kInt64, DType::kInt8, DType::kUint8, DType::kFloat16, DType::kBfloat16, DType::kBool}) {
    for (OpCase c : Cases()) {
      c.dtype = t;
      SCOPED_TRACE(c.op + " " + DTypeName(t));
      std::vector<HostTensor> inputs;
      std::uint64_t seed = 1;
      for (const auto& s : c.in_shapes) {
        HostTensor v = Uniform(s, seed++, 0, 100);
        for (auto& x : v) x = static_cast<double>(static_cast<int>(x));
        inputs.push_back(v);
      }
      test::CompareForwardGpuWithCpu(c, inputs, 0);
    }
  }
}

// In place (expand_dims, squeeze and reshape_like offer it): nothing moves on the device.
TEST_F(OpMatrixGpuTest, InPlaceSameData) {
  OpCase c{"expand_dims", {{"axis", "0"}}, {TShape{3, 4}}, DType::kFloat32, Context::GPU(0)};
  auto r = test::MakeRunner(c);
  NDArray x = test::ToArray(Uniform(TShape{3, 4}, 9, -1, 1), TShape{3, 4}, DType::kFloat32, Context::GPU(0));
  const HostTensor before = test::ToHost(x);
  NDArray y = x.Reshape(TShape{1, 3, 4});
  r->Forward(true, {x}, {y}, {}, {kWriteInplace});
  EXPECT_TRUE(test::Near(test::ToHost(y), before, 0, 0, "in-place expand_dims on the GPU"));
}

}  // namespace
}  // namespace troupe
