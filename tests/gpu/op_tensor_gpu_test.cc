// The tensor operators on a GPU (op/nn/{reshape,concat,elemwise,reduce,embedding}/*.cu) against the CPU implementation: forward outputs and
// input gradients (kWriteTo and kAddTo, in-place where offered) through OperatorRunner on Context::GPU(0),
// float32 (and float64 for a few). Skips without a CUDA device.
#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "actors/runtime.h"
#include "op/imperative.h"
#include "tests/common/op_gpu_compare.h"
#include "tests/common/op_test_util.h"

namespace troupe {
namespace {

using test::HostTensor;
using test::MakeArrays;
using test::MakeRunner;
using test::Near;
using test::OpArrays;
using test::OpCase;
using test::ToArray;
using test::ToHost;

class OpTensorGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Runtime::GpuCount() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  }
};

using test::Uniform;

// Compares GPU with CPU for one case: forward, backward kWriteTo, backward kAddTo.
void Compare(const OpCase& c, std::vector<HostTensor> inputs = {}, const std::vector<OpReqType>& arg_reqs = {}) {
  test::CompareGpuWithCpu(c, std::move(inputs), arg_reqs);
}

constexpr DType kF32 = DType::kFloat32;
constexpr DType kF64 = DType::kFloat64;

TEST_F(OpTensorGpuTest, FlattenAndReshape) {
  Compare({"Flatten", {}, {TShape{2, 3, 4}}, kF32});
  Compare({"Reshape", {{"shape", "(4,0,2)"}}, {TShape{2, 3, 4}}, kF32});
  Compare({"Reshape", {{"shape", "(-4,1,2,-2)"}}, {TShape{2, 3, 4}}, kF64});
  // In place with views on the device: nothing moves.
  OpCase c{"Reshape", {{"shape", "(-1,)"}}, {TShape{3, 4}}, kF32, Context::GPU(0)};
  auto r = MakeRunner(c);
  NDArray x = ToArray(Uniform(TShape{3, 4}, 9, -1, 1), TShape{3, 4}, kF32, Context::GPU(0));
  const HostTensor before = ToHost(x);
  NDArray y = x.Reshape(TShape{12});
  r->Forward(true, {x}, {y}, {}, {kWriteInplace});
  EXPECT_TRUE(Near(ToHost(y), before, 0, 0, "in-place Reshape on the GPU"));
}

TEST_F(OpTensorGpuTest, Concat) {
  Compare({"Concat", {{"num_args", "2"}, {"dim", "0"}}, {TShape{2, 3}, TShape{1, 3}}, kF32});
  Compare({"Concat", {{"num_args", "2"}, {"dim", "1"}}, {TShape{2, 3, 2}, TShape{2, 1, 2}}, kF32});
  Compare({"Concat", {{"num_args", "3"}, {"dim", "2"}}, {TShape{2, 2, 1}, TShape{2, 2, 3}, TShape{2, 2, 2}}, kF32});
  Compare({"Concat", {{"num_args", "2"}, {"dim", "1"}}, {TShape{64, 300}, TShape{64, 700}}, kF64});
}

TEST_F(OpTensorGpuTest, Elementwise) {
  for (const char* op : {"elemwise_add", "elemwise_sub", "elemwise_mul", "elemwise_div"}) {
    const TShape s{33, 65};
    Compare({op, {}, {s, s}, kF32}, {Uniform(s, 1, -1, 1), Uniform(s, 2, 0.5, 1.5)});
  }
  Compare({"elemwise_mul", {}, {TShape{5}, TShape{5}}, kF64});
}

TEST_F(OpTensorGpuTest, Scalar) {
  for (const char* op :
       {"_plus_scalar", "_minus_scalar", "_rminus_scalar", "_mul_scalar", "_div_scalar", "_rdiv_scalar"}) {
    const TShape s{7, 129};
    Compare({op, {{"scalar", "1.5"}}, {s}, kF32}, {Uniform(s, 3, 0.5, 2)});
  }
}

TEST_F(OpTensorGpuTest, Broadcast) {
  const std::vector<std::pair<TShape, TShape>> patterns = {
      {TShape{2, 3, 4}, TShape{1, 3, 1}}, {TShape{2, 1}, TShape{1, 3}}, {TShape{3, 4}, TShape{3, 4}},
      {TShape{2, 3}, TShape{3}},          {TShape{64, 1, 33}, TShape{1, 50, 33}}};
  for (const char* op : {"broadcast_add", "broadcast_sub", "broadcast_mul", "broadcast_div"}) {
    for (const auto& [l, r] : patterns) {
      Compare({op, {}, {l, r}, kF32}, {Uniform(l, 4, -1, 1), Uniform(r, 5, 0.5, 1.5)});
    }
  }
}

TEST_F(OpTensorGpuTest, SumAndMean) {
  const std::vector<std::pair<Kwargs, TShape>> settings = {
      {{}, TShape{2, 3}},
      {{{"axis", "1"}}, TShape{2, 3, 4}},
      {{{"axis", "(0,2)"}, {"keepdims", "True"}}, TShape{2, 3, 2}},
      {{{"axis", "-1"}, {"exclude", "True"}}, TShape{3, 2, 2}},
      {{{"axis", "1"}}, TShape{64, 1000}},
      {{{"axis", "0"}}, TShape{1000, 64}},
  };
  for (const char* op : {"sum", "mean"}) {
    for (const auto& [kw, s] : settings) Compare({op, kw, {s}, kF32});
  }
  Compare({"sum", {{"axis", "(1,)"}}, {TShape{4, 5, 6}}, kF64});
}

TEST_F(OpTensorGpuTest, Embedding) {
  for (DType t : {kF32, kF64}) {
    const TShape data{4, 25};
    HostTensor idx(100);
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<double>((i * 7) % 13) - 1.0;  // -1 and 11 clip
    OpCase c{"Embedding", {{"input_dim", "11"}, {"output_dim", "16"}}, {data, TShape{11, 16}}, t};
    Compare(c, {idx, Uniform(TShape{11, 16}, 6, -1, 1)}, {kWriteTo, kWriteTo});
    Compare(c, {idx, Uniform(TShape{11, 16}, 7, -1, 1)}, {kNullOp, kWriteTo});
  }
}

TEST_F(OpTensorGpuTest, SmoothL1AndInPlace) {
  Compare({"smooth_l1", {{"scalar", "1"}}, {TShape{10, 20}}, kF32}, {Uniform(TShape{10, 20}, 8, -3, 3)});
  Compare({"smooth_l1", {{"scalar", "2"}}, {TShape{10, 20}}, kF64}, {Uniform(TShape{10, 20}, 9, -1, 1)});
  // The NDArray function form on the device, and in place.
  NDArray x = NDArray::FromVector<float>({-2, -0.5f, 0, 0.25f, 1.5f}, TShape{5}).CopyTo(Context::GPU(0));
  auto out = Invoke("smooth_l1", {x}, {{"scalar", "1"}});
  EXPECT_EQ(out[0].ctx(), Context::GPU(0));
  EXPECT_TRUE(Near(ToHost(out[0]), {1.5, 0.125, 0, 0.03125, 1.0}, 1e-7, 0, "smooth_l1 on the GPU"));
  OpCase c{"elemwise_add", {}, {TShape{5}, TShape{5}}, kF32, Context::GPU(0)};
  auto r = MakeRunner(c);
  NDArray a = NDArray::FromVector<float>({1, 2, 3, 4, 5}, TShape{5}).CopyTo(Context::GPU(0));
  NDArray b = NDArray::FromVector<float>({10, 20, 30, 40, 50}, TShape{5}).CopyTo(Context::GPU(0));
  r->Forward(false, {a, b}, {a}, {}, {kWriteInplace});
  EXPECT_TRUE(Near(ToHost(a), {11, 22, 33, 44, 55}, 0, 0, "in-place elemwise_add on the GPU"));
}

}  // namespace
}  // namespace troupe
