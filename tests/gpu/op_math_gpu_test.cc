// The operators of op/nn/{unary,binary,dot,layer_norm,reduce,init,ordering,sequence,div_sqrt_dim,indexing}
// with GPU code (their .cu files) against the CPU implementation: every operator name of the two element-wise
// tables (unary::kUnaryDefs, binary::kMathDefs, equal-shape and broadcasting forms), clip, Cast, broadcast_to/
// axis/like, where, add_n, dot, batch_dot, LayerNorm, max/min/prod/nansum/nanprod, the array makers (_zeros,
// _ones, _full, _arange, _contrib_arange_like, shape_array, size_array), argmax, argmin, pick, SequenceMask,
// _contrib_div_sqrt_dim, take, gather_nd and one_hot. Forward outputs and input gradients with kWriteTo and kAddTo
// through OperatorRunner on Context::GPU(0), float32 and float64, broadcast shapes, and forward on the integer types
// the CPU accepts. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "actors/runtime.h"
#include "op/imperative.h"
#include "op/nn/binary/binary.h"
#include "op/nn/unary/unary.h"
#include "tests/common/op_gpu_compare.h"
#include "tests/common/op_test_util.h"

namespace troupe {
namespace {

using test::CompareForwardGpuWithCpu;
using test::CompareGpuWithCpu;
using test::HostTensor;
using test::OpCase;
using test::Uniform;

constexpr DType kF32 = DType::kFloat32;
constexpr DType kF64 = DType::kFloat64;

class OpMathGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Runtime::GpuCount() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  }
};

// Whole numbers in [lo, hi]: ties for maximum/minimum and the comparisons, exact values for integer types.
HostTensor Whole(const TShape& s, std::uint64_t seed, int lo, int hi) {
  HostTensor v = Uniform(s, seed, lo, hi + 1);
  for (auto& x : v) x = std::floor(x);
  return v;
}

// The input range where a unary function and its gradient are finite and well conditioned.
std::pair<double, double> UnaryRange(unary::UnaryOp op) {
  using unary::UnaryOp;
  switch (op) {
    case UnaryOp::kLog:
    case UnaryOp::kLog2:
    case UnaryOp::kLog10:
    case UnaryOp::kLog1p:
    case UnaryOp::kSqrt:
    case UnaryOp::kRsqrt:
    case UnaryOp::kCbrt:
    case UnaryOp::kRcbrt:
    case UnaryOp::kReciprocal:
      return {0.5, 2};
    case UnaryOp::kArcsin:
    case UnaryOp::kArccos:
    case UnaryOp::kArctanh:
      return {-0.9, 0.9};
    case UnaryOp::kArccosh:
      return {1.5, 3};
    case UnaryOp::kFloor:
    case UnaryOp::kCeil:
    case UnaryOp::kRound:
    case UnaryOp::kRint:
    case UnaryOp::kFix:
    case UnaryOp::kTrunc:
      return {-3, 3};
    default:
      return {-1, 1};
  }
}

TEST_F(OpMathGpuTest, EveryUnaryFunction) {
  for (const unary::UnaryDef& d : unary::kUnaryDefs) {
    const auto [lo, hi] = UnaryRange(d.op);
    for (const TShape& s : {TShape{7, 129}, TShape{3}}) {
      CompareGpuWithCpu({d.name, {}, {s}, kF32}, {Uniform(s, 1, lo, hi)});
    }
    CompareGpuWithCpu({d.name, {}, {TShape{5, 11}}, kF64}, {Uniform(TShape{5, 11}, 2, lo, hi)});
    if (unary::AnyType(d.op)) {
      for (DType t : {DType::kInt32, DType::kInt8, DType::kUint8, DType::kInt64}) {
        const int low = t == DType::kUint8 ? 0 : -9;
        CompareForwardGpuWithCpu({d.name, {}, {TShape{4, 9}}, t}, {Whole(TShape{4, 9}, 3, low, 9)});
      }
    }
  }
  // Aliases reach the same GPU code.
  CompareGpuWithCpu({"identity", {}, {TShape{4, 4}}, kF32});
  CompareGpuWithCpu({"stop_gradient", {}, {TShape{4, 4}}, kF32});
}

TEST_F(OpMathGpuTest, UnaryFloatOnlyFunctionsRejectIntegersOnBothDevices) {
  OpCase c{"exp", {}, {TShape{3}}, DType::kInt32, Context::GPU(0)};
  test::ExpectError([&] { test::RunForward(c, {{1, 2, 3}}); }, {"exp", "int32"});
}

// Inputs for a binary function: (lhs, rhs) over shapes l and r.
std::vector<HostTensor> BinaryInputs(binary::BinaryMath op, const TShape& l, const TShape& r, bool negative_divisor) {
  using binary::BinaryMath;
  switch (op) {
    case BinaryMath::kPower:
      return {Uniform(l, 4, 0.5, 2), Uniform(r, 5, -1.5, 1.5)};
    case BinaryMath::kMod:
      return {Uniform(l, 4, -3, 3), negative_divisor ? Uniform(r, 5, -1.5, -0.5) : Uniform(r, 5, 0.5, 1.5)};
    case BinaryMath::kHypot:
      return {Uniform(l, 4, -2, 2), Uniform(r, 5, -2, 2)};
    default:
      return {Whole(l, 4, -2, 2), Whole(r, 5, -2, 2)};  // ties for maximum/minimum, equal elements
  }
}

TEST_F(OpMathGpuTest, EveryBinaryFunctionEqualShapes) {
  for (const binary::MathDef& d : binary::kMathDefs) {
    for (const TShape& s : {TShape{33, 65}, TShape{1}}) {
      CompareGpuWithCpu({d.elemwise, {}, {s, s}, kF32}, BinaryInputs(d.op, s, s, false));
    }
    CompareGpuWithCpu({d.elemwise, {}, {TShape{6, 7}, TShape{6, 7}}, kF64},
                      BinaryInputs(d.op, TShape{6, 7}, TShape{6, 7}, true));
    // Gradient only where wanted: lhs alone, rhs alone.
    CompareGpuWithCpu({d.elemwise, {}, {TShape{4, 5}, TShape{4, 5}}, kF64},
                      BinaryInputs(d.op, TShape{4, 5}, TShape{4, 5}, false), {kWriteTo, kNullOp});
    CompareGpuWithCpu({d.elemwise, {}, {TShape{4, 5}, TShape{4, 5}}, kF64},
                      BinaryInputs(d.op, TShape{4, 5}, TShape{4, 5}, false), {kNullOp, kWriteTo});
  }
}

TEST_F(OpMathGpuTest, EveryBinaryFunctionBroadcasting) {
  const std::vector<std::pair<TShape, TShape>> patterns = {
      {TShape{2, 3, 4}, TShape{1, 3, 1}}, {TShape{2, 1}, TShape{1, 3}}, {TShape{3, 4}, TShape{3, 4}},
      {TShape{2, 3}, TShape{3}},          {TShape{1}, TShape{4, 5}},    {TShape{64, 1, 33}, TShape{1, 50, 33}}};
  for (const binary::MathDef& d : binary::kMathDefs) {
    for (const auto& [l, r] : patterns)
      CompareGpuWithCpu({d.broadcast, {}, {l, r}, kF32}, BinaryInputs(d.op, l, r, false));
    CompareGpuWithCpu({d.broadcast, {}, {TShape{2, 1, 4}, TShape{3, 1}}, kF64},
                      BinaryInputs(d.op, TShape{2, 1, 4}, TShape{3, 1}, true));
  }
}

TEST_F(OpMathGpuTest, BinaryFunctionsOnIntegers) {
  for (const binary::MathDef& d : binary::kMathDefs) {
    for (DType t : {DType::kInt32, DType::kInt64, DType::kInt8, DType::kUint8}) {
      const int low = t == DType::kUint8 ? 0 : -5;
      const TShape l{3, 4}, r{1, 4};
      // rhs: non-zero divisors and small positive exponents (a negative power of 0 is infinite, which has no
      // integer value to agree on).
      CompareForwardGpuWithCpu({d.broadcast, {}, {l, r}, t}, {Whole(l, 6, low, 5), Whole(r, 7, 1, 3)});
      CompareForwardGpuWithCpu({d.elemwise, {}, {l, l}, t}, {Whole(l, 6, low, 5), Whole(l, 8, 1, 3)});
    }
  }
}

TEST_F(OpMathGpuTest, Clip) {
  for (DType t : {kF32, kF64}) {
    CompareGpuWithCpu({"clip", {{"a_min", "-0.5"}, {"a_max", "0.25"}}, {TShape{17, 31}}, t});
  }
  CompareForwardGpuWithCpu({"clip", {{"a_min", "-3"}, {"a_max", "4"}}, {TShape{20}}, DType::kInt32},
                           {Whole(TShape{20}, 9, -9, 9)});
}

// Cast's output has another type than its input: OperatorRunner directly, forward and backward, kWriteTo and
// kAddTo (the head has the output's type, the gradient the input's).
std::vector<HostTensor> RunCast(const std::string& to, DType from, Context ctx) {
  const TShape s{6, 7};
  OpCase c{"Cast", {{"dtype", to}}, {s}, from, ctx};
  auto r = test::MakeRunner(c);
  const DType out_type = static_cast<DType>(r->out_types()[0]);
  NDArray x = test::ToArray(Uniform(s, 10, -300, 300), s, from, ctx);
  NDArray y = NDArray::Zeros(s, ctx, out_type);
  r->Forward(true, {x}, {y}, {}, {kWriteTo});
  NDArray y_add = test::ToArray(Whole(s, 11, -3, 3), s, out_type, ctx);
  r->Forward(true, {x}, {y_add}, {}, {kAddTo});
  NDArray head = test::ToArray(Uniform(s, 12, -100, 100), s, out_type, ctx);
  NDArray g = NDArray::Zeros(s, ctx, from);
  r->Backward({head}, {x}, {y}, {}, {g}, {kWriteTo});
  NDArray g_add = test::ToArray(Whole(s, 13, -3, 3), s, from, ctx);
  r->Backward({head}, {x}, {y}, {}, {g_add}, {kAddTo});
  return {test::ToHost(y), test::ToHost(y_add), test::ToHost(g), test::ToHost(g_add)};
}

TEST_F(OpMathGpuTest, Cast) {
  const char* what[] = {"forward kWriteTo", "forward kAddTo", "backward kWriteTo", "backward kAddTo"};
  for (const char* to : {"float32", "float64", "float16", "bfloat16", "int32", "int64", "int8", "uint8", "bool"}) {
    for (DType from : {kF32, kF64, DType::kInt32}) {
      SCOPED_TRACE(std::string("Cast ") + DTypeName(from) + " to " + to);
      const auto cpu = RunCast(to, from, Context::CPU());
      const auto gpu = RunCast(to, from, Context::GPU(0));
      for (std::size_t i = 0; i < cpu.size(); ++i) EXPECT_TRUE(test::Near(gpu[i], cpu[i], 0, 0, what[i]));
    }
  }
}

TEST_F(OpMathGpuTest, BroadcastToAxisLike) {
  for (DType t : {kF32, kF64}) {
    CompareGpuWithCpu({"broadcast_to", {{"shape", "(2,3,4)"}}, {TShape{1, 3, 1}}, t});
    CompareGpuWithCpu({"broadcast_to", {{"shape", "(0,5,0)"}}, {TShape{2, 1, 3}}, t});
    CompareGpuWithCpu({"broadcast_axis", {{"axis", "(0,2)"}, {"size", "(2,4)"}}, {TShape{1, 3, 1}}, t});
    CompareGpuWithCpu({"broadcast_axes", {{"axis", "-1"}, {"size", "7"}}, {TShape{5, 1}}, t});
    CompareGpuWithCpu({"broadcast_like", {}, {TShape{1, 3, 1}, TShape{2, 3, 4}}, t});
    CompareGpuWithCpu(
        {"broadcast_like", {{"lhs_axes", "(0,)"}, {"rhs_axes", "(1,)"}}, {TShape{1, 3}, TShape{4, 5}}, t});
  }
  CompareGpuWithCpu({"broadcast_to", {{"shape", "(64,1000)"}}, {TShape{64, 1}}, kF32});
  CompareForwardGpuWithCpu({"broadcast_to", {{"shape", "(3,4)"}}, {TShape{1, 4}}, DType::kInt32},
                           {Whole(TShape{1, 4}, 12, -9, 9)});
}

TEST_F(OpMathGpuTest, Where) {
  for (DType t : {kF32, kF64}) {
    const TShape s{6, 9};
    CompareGpuWithCpu({"where", {}, {s, s, s}, t}, {Whole(s, 13, 0, 1), Uniform(s, 14, -1, 1), Uniform(s, 15, -1, 1)});
    // A 1-D condition picks whole rows.
    CompareGpuWithCpu({"where", {}, {TShape{6}, s, s}, t},
                      {Whole(TShape{6}, 16, 0, 1), Uniform(s, 17, -1, 1), Uniform(s, 18, -1, 1)});
    CompareGpuWithCpu({"where", {}, {s, s, s}, t}, {Whole(s, 19, 0, 1), Uniform(s, 20, -1, 1), Uniform(s, 21, -1, 1)},
                      {kNullOp, kNullOp, kWriteTo});
  }
  const TShape s{4, 5};
  CompareForwardGpuWithCpu({"where", {}, {s, s, s}, DType::kInt32},
                           {Whole(s, 22, 0, 1), Whole(s, 23, -9, 9), Whole(s, 24, -9, 9)});
}

TEST_F(OpMathGpuTest, AddN) {
  for (DType t : {kF32, kF64}) {
    CompareGpuWithCpu({"add_n", {{"num_args", "3"}}, {TShape{17, 9}, TShape{17, 9}, TShape{17, 9}}, t});
    CompareGpuWithCpu({"add_n", {{"num_args", "1"}}, {TShape{5}}, t});
    CompareGpuWithCpu({"ElementWiseSum", {{"num_args", "2"}}, {TShape{300, 70}, TShape{300, 70}}, t}, {},
                      {kWriteTo, kNullOp});
  }
  const TShape s{8};
  CompareForwardGpuWithCpu({"add_n", {{"num_args", "2"}}, {s, s}, DType::kInt8},
                           {Whole(s, 25, -9, 9), Whole(s, 26, -9, 9)});
}

// dot and batch_dot: cuBLAS against the CPU's sgemm/dgemm, every transpose combination, forward and both
// gradients (products of up to 100 terms: float32 within 1e-4).
TEST_F(OpMathGpuTest, DotAndBatchDot) {
  for (const char* ta : {"False", "True"}) {
    for (const char* tb : {"False", "True"}) {
      const Kwargs kw{{"transpose_a", ta}, {"transpose_b", tb}};
      const bool a_t = std::string(ta) == "True", b_t = std::string(tb) == "True";
      for (DType t : {kF32, kF64}) {
        const double tol = t == kF32 ? 1e-4 : 1e-12;
        CompareGpuWithCpu(
            {"dot", kw, {a_t ? TShape{100, 7} : TShape{7, 100}, b_t ? TShape{9, 100} : TShape{100, 9}}, t}, {}, {},
            tol);
        CompareGpuWithCpu(
            {"batch_dot",
             kw,
             {a_t ? TShape{3, 2, 5, 6} : TShape{3, 2, 6, 5}, b_t ? TShape{3, 2, 4, 5} : TShape{3, 2, 5, 4}},
             t},
            {}, {}, tol);
      }
    }
  }
  // dot of higher-rank arrays and of two vectors; one gradient only.
  CompareGpuWithCpu({"dot", {}, {TShape{2, 3, 4}, TShape{4, 5}}, kF64});
  CompareGpuWithCpu({"dot", {{"transpose_a", "True"}}, {TShape{4, 2, 3}, TShape{4, 5}}, kF64});
  CompareGpuWithCpu({"dot", {}, {TShape{6}, TShape{6}}, kF64});
  CompareGpuWithCpu({"batch_dot", {}, {TShape{4, 3, 2}, TShape{4, 2, 5}}, kF32}, {}, {kNullOp, kWriteTo}, 1e-5);
}

// LayerNorm: statistics (hidden or visible outputs), output and the three gradients, along the last axis and
// an inner one.
TEST_F(OpMathGpuTest, LayerNorm) {
  for (DType t : {kF32, kF64}) {
    CompareGpuWithCpu({"LayerNorm", {}, {TShape{4, 8, 16}, TShape{16}, TShape{16}}, t});
    CompareGpuWithCpu({"LayerNorm", {{"axis", "1"}, {"eps", "0.001"}}, {TShape{3, 5, 4}, TShape{5}, TShape{5}}, t});
    CompareGpuWithCpu({"_npx_layer_norm", {{"output_mean_var", "True"}}, {TShape{6, 33}, TShape{33}, TShape{33}}, t});
    CompareGpuWithCpu({"LayerNorm", {}, {TShape{7, 10}, TShape{10}, TShape{10}}, t}, {}, {kWriteTo, kNullOp, kNullOp});
    CompareGpuWithCpu({"LayerNorm", {}, {TShape{7, 10}, TShape{10}, TShape{10}}, t}, {}, {kNullOp, kWriteTo, kWriteTo});
  }
  CompareGpuWithCpu({"LayerNorm", {}, {TShape{512, 768}, TShape{768}, TShape{768}}, kF32});
}

// The reductions (reduce.cu) beyond sum and mean (op_tensor_gpu_test): max and min with ties (every tied
// element gets the gradient), prod, nansum and nanprod with NaNs, and every one on integers.
TEST_F(OpMathGpuTest, Reductions) {
  const std::vector<std::pair<Kwargs, TShape>> settings = {
      {{}, TShape{3, 4}},
      {{{"axis", "2"}}, TShape{2, 3, 4}},
      {{{"axis", "(1,)"}, {"keepdims", "True"}}, TShape{2, 5, 2}},
      {{{"axis", "(0,1)"}, {"exclude", "True"}}, TShape{2, 3, 4}},
      {{{"axis", "1"}}, TShape{50, 64}},
  };
  for (const auto& [kw, s] : settings) {
    for (DType t : {kF32, kF64}) {
      for (const char* op : {"max", "min", "max_axis", "min_axis"})
        CompareGpuWithCpu({op, kw, {s}, t}, {Whole(s, 27, -3, 3)});
      CompareGpuWithCpu({"prod", kw, {s}, t}, {Uniform(s, 28, 0.5, 1.5)});
      HostTensor with_nan = Uniform(s, 29, 0.5, 1.5);
      for (std::size_t i = 0; i < with_nan.size(); i += 5) with_nan[i] = std::nan("");
      CompareGpuWithCpu({"nansum", kw, {s}, t}, {with_nan});
      CompareGpuWithCpu({"nanprod", kw, {s}, t}, {with_nan});
    }
    for (const char* op : {"sum", "max", "min", "prod", "nansum", "nanprod"}) {
      for (DType t : {DType::kInt32, DType::kInt64, DType::kInt8, DType::kUint8}) {
        CompareForwardGpuWithCpu({op, kw, {s}, t}, {Whole(s, 30, 0, 1)});  // sums and products fit int8
      }
    }
  }
}

// The array-making operators (init.cu): every one, several element types, and forward under kAddTo.
TEST_F(OpMathGpuTest, ArrayMakers) {
  for (DType t : {kF32, kF64, DType::kInt32, DType::kInt64, DType::kInt8, DType::kUint8, DType::kFloat16,
                  DType::kBfloat16, DType::kBool}) {
    const std::string dt = DTypeName(t);
    CompareForwardGpuWithCpu({"_zeros", {{"shape", "(3,4)"}, {"dtype", dt}}, {}, t}, {});
    CompareForwardGpuWithCpu({"_ones", {{"shape", "(5,)"}, {"dtype", dt}}, {}, t}, {});
    CompareForwardGpuWithCpu({"_full", {{"shape", "(2,3,2)"}, {"value", "7"}, {"dtype", dt}}, {}, t}, {});
    CompareForwardGpuWithCpu(
        {"_arange", {{"start", "2"}, {"stop", "11"}, {"step", "1.5"}, {"repeat", "2"}, {"dtype", dt}}, {}, t}, {});
  }
  CompareForwardGpuWithCpu({"_arange", {{"start", "5"}}, {}, kF32}, {});
  for (DType t : {kF32, kF64}) {
    CompareGpuWithCpu({"_contrib_arange_like", {{"start", "1"}, {"step", "0.5"}}, {TShape{3, 4}}, t});
    CompareGpuWithCpu({"_contrib_arange_like", {{"axis", "1"}, {"repeat", "2"}}, {TShape{3, 4}}, t});
  }
  CompareForwardGpuWithCpu({"shape_array", {}, {TShape{2, 3, 5}}, DType::kInt64}, {Whole(TShape{2, 3, 5}, 31, 0, 9)});
  CompareForwardGpuWithCpu({"size_array", {}, {TShape{2, 3, 5}}, DType::kInt64}, {Whole(TShape{2, 3, 5}, 32, 0, 9)});
  // Forward under kAddTo: the value is added in double.
  std::vector<HostTensor> added;
  for (Context ctx : {Context::CPU(), Context::GPU(0)}) {
    OpCase c{"_full", {{"shape", "(4,5)"}, {"value", "0.25"}, {"dtype", "float32"}}, {}, kF32, ctx};
    auto r = test::MakeRunner(c);
    NDArray out = test::ToArray(Uniform(TShape{4, 5}, 33, -1, 1), TShape{4, 5}, kF32, ctx);
    r->Forward(true, {}, {out}, {}, {kAddTo});
    added.push_back(test::ToHost(out));
  }
  EXPECT_TRUE(test::Near(added[1], added[0], 0, 0, "_full under kAddTo"));
}

// argmax, argmin and pick (ordering.cu): ties (the first wins), every axis form, pick's clip and wrap modes
// with out-of-range indices, gradients (pick's to the picked element, none to the index), integer types.
TEST_F(OpMathGpuTest, ArgExtremesAndPick) {
  const TShape s{4, 5, 6};
  for (DType t : {kF32, kF64}) {
    for (const char* op : {"argmax", "argmin"}) {
      for (const Kwargs& kw :
           std::vector<Kwargs>{{}, {{"axis", "1"}}, {{"axis", "-1"}, {"keepdims", "True"}}, {{"axis", "0"}}}) {
        CompareGpuWithCpu({op, kw, {s}, t}, {Whole(s, 34, -2, 2)});
      }
    }
    for (const char* mode : {"clip", "wrap"}) {
      CompareGpuWithCpu({"pick", {{"axis", "1"}, {"mode", mode}}, {s, TShape{4, 6}}, t},
                        {Uniform(s, 35, -1, 1), Whole(TShape{4, 6}, 36, -7, 11)});
      CompareGpuWithCpu({"pick", {{"axis", "-1"}, {"keepdims", "True"}, {"mode", mode}}, {s, TShape{4, 5}}, t},
                        {Uniform(s, 37, -1, 1), Whole(TShape{4, 5}, 38, -2, 8)});
    }
    CompareGpuWithCpu({"pick", {{"axis", "0"}}, {s, TShape{5, 6}}, t},
                      {Uniform(s, 39, -1, 1), Whole(TShape{5, 6}, 40, 0, 3)}, {kWriteTo, kNullOp});
  }
  for (DType t : {DType::kInt32, DType::kInt64, DType::kInt8, DType::kUint8}) {
    CompareForwardGpuWithCpu({"argmax", {{"axis", "2"}}, {s}, t}, {Whole(s, 41, 0, 9)});
    CompareForwardGpuWithCpu({"argmin", {}, {s}, t}, {Whole(s, 42, 0, 9)});
    CompareForwardGpuWithCpu({"pick", {{"axis", "1"}}, {s, TShape{4, 6}}, t},
                             {Whole(s, 43, 0, 9), Whole(TShape{4, 6}, 44, 0, 4)});
  }
}

// SequenceMask (sequence.cu) with and without lengths, on both sequence axes, lengths beyond the ends and of
// another type than the data's (the length gets no gradient); _contrib_div_sqrt_dim (div_sqrt_dim.cu).
TEST_F(OpMathGpuTest, SequenceMaskAndDivSqrtDim) {
  for (DType t : {kF32, kF64}) {
    const TShape d{5, 4, 3};
    CompareGpuWithCpu({"SequenceMask", {}, {d}, t});
    for (const char* axis : {"0", "1"}) {
      const std::int64_t batch = std::string(axis) == "0" ? 4 : 5;
      HostTensor len = Whole(TShape{batch}, 45, -1, 7);
      CompareGpuWithCpu(
          {"SequenceMask", {{"use_sequence_length", "True"}, {"value", "-2.5"}, {"axis", axis}}, {d, TShape{batch}}, t},
          {Uniform(d, 46, -1, 1), len});
      CompareGpuWithCpu(
          {"_npx_sequence_mask", {{"use_sequence_length", "True"}, {"axis", axis}}, {d, TShape{batch}}, t},
          {Uniform(d, 47, -1, 1), len}, {kWriteTo, kNullOp});
    }
    CompareGpuWithCpu({"_contrib_div_sqrt_dim", {}, {TShape{2, 3, 16}}, t});
  }
  // Lengths of another type than the data's (OperatorRunner infers the data's type when unknown; give int32).
  for (Context ctx : {Context::CPU(), Context::GPU(0)}) {
    SCOPED_TRACE(ctx.ToString());
    auto prop = OperatorProperty::Create("SequenceMask");
    prop->Init({{"use_sequence_length", "True"}, {"axis", "1"}});
    OperatorRunner r(std::shared_ptr<const OperatorProperty>(std::move(prop)), ctx, {TShape{2, 4}, TShape{2}},
                     {static_cast<int>(kF32), static_cast<int>(DType::kInt32)});
    NDArray x = test::ToArray({1, 2, 3, 4, 5, 6, 7, 8}, TShape{2, 4}, kF32, ctx);
    NDArray len = test::ToArray({3, 1}, TShape{2}, DType::kInt32, ctx);
    NDArray y = NDArray::Zeros(TShape{2, 4}, ctx, kF32);
    r.Forward(true, {x, len}, {y}, {});
    EXPECT_TRUE(test::Near(test::ToHost(y), {1, 2, 3, 0, 5, 0, 0, 0}, 0, 0, "SequenceMask with int32 lengths"));
  }
}

// take (indexing.cu) in its three modes along several axes, with repeated and out-of-range indices (the
// gradient sums repeats), an out-of-range index under 'raise' an error on the device too; one_hot into several
// types with indices outside [0, depth).
TEST_F(OpMathGpuTest, TakeAndOneHot) {
  const TShape a{4, 5, 3};
  for (DType t : {kF32, kF64}) {
    for (const char* mode : {"clip", "wrap"}) {
      for (const char* axis : {"0", "1", "-1"}) {
        const std::int64_t n = a[(std::stoi(axis) + 3) % 3];
        const TShape idx{2, 6};
        CompareGpuWithCpu({"take", {{"axis", axis}, {"mode", mode}}, {a, idx}, t},
                          {Uniform(a, 48, -1, 1), Whole(idx, 49, -static_cast<int>(n) - 2, static_cast<int>(n) + 2)});
      }
    }
    CompareGpuWithCpu({"take", {{"axis", "1"}, {"mode", "raise"}}, {a, TShape{7}}, t},
                      {Uniform(a, 50, -1, 1), Whole(TShape{7}, 51, 0, 4)}, {kWriteTo, kNullOp});
    CompareGpuWithCpu({"_npi_take", {}, {TShape{300, 16}, TShape{64}}, t},
                      {Uniform(TShape{300, 16}, 52, -1, 1), Whole(TShape{64}, 53, 0, 20)});
  }
  test::ExpectError(
      [] {
        test::RunForward({"take", {{"mode", "raise"}}, {TShape{3, 2}, TShape{2}}, kF32, Context::GPU(0)},
                         {{1, 2, 3, 4, 5, 6}, {1, 3}});
      },
      {"take", "out of bounds", "raise"});
  CompareForwardGpuWithCpu({"take", {{"axis", "1"}}, {a, TShape{3}}, DType::kInt32},
                           {Whole(a, 54, -9, 9), Whole(TShape{3}, 55, 0, 4)});
  for (const char* dtype : {"float32", "float64", "int32", "uint8"}) {
    const TShape idx{3, 4};
    const OpCase c{"one_hot",
                   {{"depth", "5"}, {"on_value", "2.5"}, {"off_value", "-1"}, {"dtype", dtype}},
                   {idx},
                   DTypeFromName(dtype)};
    // The indices have the output's type here (OpCase gives every argument one type).
    CompareForwardGpuWithCpu(c, {Whole(idx, 56, -2, 6)});
  }
  CompareGpuWithCpu({"_npx_one_hot", {{"depth", "4"}}, {TShape{6}}, kF32}, {Whole(TShape{6}, 57, -1, 4)});
}

// gather_nd (indexing.cu): negative indices, repeats (the gradient sums them), a partial index (M < ndim) and a
// full one, integer data; an out-of-range index is an error on the device too.
TEST_F(OpMathGpuTest, GatherNd) {
  const TShape data{4, 5, 3};
  HostTensor idx = Whole(TShape{2, 6}, 58, -4, 3);  // row 0: axis 0 (size 4)
  for (std::size_t i = 6; i < 12; ++i) idx[i] = std::floor(Uniform(TShape{1}, 59 + i, -5, 5)[0]);  // axis 1
  for (DType t : {kF32, kF64}) {
    CompareGpuWithCpu({"gather_nd", {}, {data, TShape{2, 6}}, t}, {Uniform(data, 60, -1, 1), idx});
    CompareGpuWithCpu({"_npx_gather_nd", {}, {data, TShape{3, 2, 2}}, t},
                      {Uniform(data, 61, -1, 1), {0, -1, 3, 1, 4, 0, -5, 2, 1, 2, -3, 0}}, {kWriteTo, kNullOp});
  }
  CompareForwardGpuWithCpu({"gather_nd", {}, {data, TShape{2, 6}}, DType::kInt32}, {Whole(data, 62, -9, 9), idx});
  test::ExpectError(
      [] {
        test::RunForward({"gather_nd", {}, {TShape{3, 2}, TShape{1, 2}}, kF32, Context::GPU(0)},
                         {{1, 2, 3, 4, 5, 6}, {0, 3}});
      },
      {"gather_nd", "out of bounds", "axis 0"});
}

}  // namespace
}  // namespace troupe
