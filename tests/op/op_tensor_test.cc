// The tensor operators (op/nn/{reshape,concat,elemwise,reduce,embedding}/) on the CPU: forward
// results against hand-computed values, central-difference gradient checks (float64, with kAddTo and the
// in-place options), shape inference tables (Reshape's special values from MXNet's documentation) and the
// errors for inconsistent shapes and bad parameters. SimpleOpSmoothL1 is the SimpleOp acceptance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "tests/common/op_test_util.h"
#include "op/imperative.h"
#include "op/nn/common/broadcast.h"
#include "op/nn/concat/concat.h"
#include "op/nn/elemwise/elemwise.h"
#include "op/nn/embedding/embedding.h"
#include "op/nn/reduce/reduce.h"
#include "op/nn/reshape/reshape.h"
#include "op/operator.h"
#include "op/simple_op.h"

namespace troupe {
namespace {

using test::CheckGradient;
using test::ExpectError;
using test::GradCheckOptions;
using test::HostTensor;
using test::InferOutShapes;
using test::MakeArrays;
using test::MakeProp;
using test::MakeRunner;
using test::Near;
using test::OpArrays;
using test::OpCase;
using test::RunForward;
using test::ToArray;
using test::ToHost;

constexpr double kTol = 1e-12;

// Forward then Backward once with given heads; returns the input gradients (see test::RunForwardBackward).
std::vector<HostTensor> RunBackward(const OpCase& c, const std::vector<HostTensor>& inputs,
                                    const std::vector<HostTensor>& heads, std::vector<OpReqType> reqs = {},
                                    const std::vector<HostTensor>& init = {}) {
  return test::RunForwardBackward(c, inputs, heads, std::move(reqs), init).grad;
}

HostTensor Iota(std::int64_t n, double start = 1) {
  HostTensor v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<double>(i);
  return v;
}

HostTensor Uniform(const TShape& s, std::uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  return test::RandomTensor(s, &rng, lo, hi);
}

// ======================================== Flatten ========================================

TEST(OpFlatten, ForwardKeepsTheElementOrder) {
  OpCase c{"Flatten", {}, {TShape{2, 2, 2}}};
  EXPECT_EQ(InferOutShapes(c)[0], (TShape{2, 4}));
  auto out = RunForward(c, {Iota(8)});
  EXPECT_TRUE(Near(out[0], {1, 2, 3, 4, 5, 6, 7, 8}, 0, 0, "Flatten"));
  // The lower-case alias is the same operator.
  OpCase alias{"flatten", {}, {TShape{3, 1, 2}}};
  EXPECT_EQ(InferOutShapes(alias)[0], (TShape{3, 2}));
}

TEST(OpFlatten, ShapeTableAndErrors) {
  const std::vector<std::pair<TShape, TShape>> table = {
      {TShape{2, 3, 4}, TShape{2, 12}}, {TShape{5}, TShape{5, 1}}, {TShape{2, 1, 1, 3}, TShape{2, 3}},
      {TShape{7, 2}, TShape{7, 2}},     {TShape{0, 3}, TShape{0, 3}}};
  for (const auto& [in, want] : table) {
    EXPECT_EQ(InferOutShapes({"Flatten", {}, {in}})[0], want) << in.ToString();
  }
  ExpectError([] { InferOutShapes({"Flatten", {}, {TShape::Scalar()}}); }, {"Flatten", "data"});
  ExpectError([] { MakeProp({"Flatten", {{"bogus", "1"}}, {}}); }, {"Flatten", "bogus"});
}

TEST(OpFlatten, Gradient) {
  GradCheckOptions o;
  // The harness's in-place checks run on views of the input with the output's shape.
  CheckGradient({"Flatten", {}, {TShape{2, 3, 4}}}, o);
  CheckGradient({"Flatten", {}, {TShape{3, 5}}}, o);
  CheckGradient({"Flatten", {}, {TShape{4}}}, o);
}

// In place with views of the same memory (what the executor does): forward writes nothing, backward too.
void CheckReshapeLikeInPlace(const OpCase& c) {
  SCOPED_TRACE(c.op);
  auto r = MakeRunner(c);
  const TShape in_shape = r->in_shapes()[0], out_shape = r->out_shapes()[0];
  NDArray in = ToArray(Uniform(in_shape, 3, -1, 1), in_shape, c.dtype, c.ctx);
  const HostTensor x = ToHost(in);  // the values as stored (rounded for float32)
  NDArray out = in.Reshape(out_shape);
  r->Forward(true, {in}, {out}, {}, {kWriteInplace});
  EXPECT_TRUE(Near(ToHost(out), x, 0, 0, "in-place forward"));
  // kAddTo on a separate output adds.
  NDArray acc = ToArray(HostTensor(x.size(), 1.0), out_shape, c.dtype, c.ctx);
  r->Forward(true, {in}, {acc}, {}, {kAddTo});
  HostTensor want = x;
  for (auto& v : want) v += 1;
  const double tol = c.dtype == DType::kFloat32 ? 1e-6 : kTol;
  EXPECT_TRUE(Near(ToHost(acc), want, tol, tol, "kAddTo forward"));
  // Backward: in_grad on out_grad's memory.
  NDArray og = ToArray(Uniform(out_shape, 4, -1, 1), out_shape, c.dtype, c.ctx);
  const HostTensor g = ToHost(og);
  NDArray ig = og.Reshape(in_shape);
  r->Backward({og}, {in}, {out}, {}, {ig}, {kWriteInplace});
  EXPECT_TRUE(Near(ToHost(ig), g, 0, 0, "in-place backward"));
  // The property offers exactly these options.
  auto prop = MakeProp(c);
  int marker = 0;
  auto fwd = prop->ForwardInplaceOption({0}, {&marker});
  ASSERT_EQ(fwd.size(), 1u);
  EXPECT_EQ(fwd[0].first, 0);
  EXPECT_EQ(fwd[0].second, &marker);
  auto bwd = prop->BackwardInplaceOption({7}, {8}, {9}, {&marker});
  ASSERT_EQ(bwd.size(), 1u);
  EXPECT_EQ(bwd[0].first, 7);
  EXPECT_EQ(bwd[0].second, &marker);
  EXPECT_EQ(prop->DeclareBackwardDependency({7}, {8}, {9}), std::vector<int>{7});
}

TEST(OpFlatten, InPlaceAndAddTo) { CheckReshapeLikeInPlace({"Flatten", {}, {TShape{2, 3, 2}}}); }

// ======================================== Reshape ========================================

TEST(OpReshape, ShapeTableFromMXNetDocs) {
  struct Row {
    TShape in;
    Kwargs kwargs;
    TShape want;
  };
  const std::vector<Row> table = {
      {TShape{2, 3, 4}, {{"shape", "(4,0,2)"}}, TShape{4, 3, 2}},
      {TShape{2, 3, 4}, {{"shape", "(2,0,0)"}}, TShape{2, 3, 4}},
      {TShape{2, 3, 4}, {{"shape", "(6,1,-1)"}}, TShape{6, 1, 4}},
      {TShape{2, 3, 4}, {{"shape", "(3,-1,8)"}}, TShape{3, 1, 8}},
      {TShape{2, 3, 4}, {{"shape", "(-1,)"}}, TShape{24}},
      {TShape{2, 3, 4}, {{"shape", "(-2,)"}}, TShape{2, 3, 4}},
      {TShape{2, 3, 4}, {{"shape", "(2,-2)"}}, TShape{2, 3, 4}},
      {TShape{2, 3, 4}, {{"shape", "(-2,1,1)"}}, TShape{2, 3, 4, 1, 1}},
      {TShape{2, 3, 4}, {{"shape", "(-3,4)"}}, TShape{6, 4}},
      {TShape{2, 3, 4, 5}, {{"shape", "(-3,-3)"}}, TShape{6, 20}},
      {TShape{2, 3, 4}, {{"shape", "(0,-3)"}}, TShape{2, 12}},
      {TShape{2, 3, 4}, {{"shape", "(-3,-2)"}}, TShape{6, 4}},
      {TShape{2, 3, 4}, {{"shape", "(-4,1,2,-2)"}}, TShape{1, 2, 3, 4}},
      {TShape{2, 3, 4}, {{"shape", "(2,-4,-1,3,-2)"}}, TShape{2, 1, 3, 4}},
      {TShape{10, 5, 4}, {{"shape", "(-1,0)"}}, TShape{40, 5}},
      {TShape{10, 5, 4}, {{"shape", "(-1,0)"}, {"reverse", "True"}}, TShape{50, 4}},
      {TShape{2, 3, 4}, {{"shape", "[4, 6]"}}, TShape{4, 6}},
      // The deprecated target_shape / keep_highest form.
      {TShape{2, 3, 4}, {{"target_shape", "(0,4)"}}, TShape{6, 4}},
      {TShape{2, 3, 4}, {{"target_shape", "(9,0)"}, {"keep_highest", "True"}}, TShape{2, 12}},
  };
  for (const auto& row : table) {
    OpCase c{"Reshape", row.kwargs, {row.in}};
    auto out = InferOutShapes(c);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], row.want) << row.in.ToString() << " " << row.kwargs[0].second;
  }
}

TEST(OpReshape, InfersOneUnknownInputDimensionFromTheOutput) {
  auto prop = MakeProp({"Reshape", {{"shape", "(3,4)"}}, {}});
  std::vector<TShape> in{TShape{2, -1}}, out{TShape{3, 4}}, aux;
  EXPECT_TRUE(prop->InferShape(&in, &out, &aux));
  EXPECT_EQ(in[0], (TShape{2, 6}));
  std::vector<TShape> in2{TShape()}, out2, aux2;
  EXPECT_FALSE(prop->InferShape(&in2, &out2, &aux2));
}

TEST(OpReshape, Errors) {
  auto infer = [](TShape in, Kwargs kw) { return [=] { InferOutShapes({"Reshape", kw, {in}}); }; };
  ExpectError(infer(TShape{2, 3, 4}, {{"shape", "(5,-1)"}}), {"Reshape", "'shape'", "(2,3,4)"});
  ExpectError(infer(TShape{2, 3, 4}, {{"shape", "(5,5)"}}), {"Reshape", "'shape'"});
  ExpectError(infer(TShape{2, 3, 4}, {{"shape", "(-1,-1)"}}), {"Reshape", "'shape'", "-1"});
  ExpectError(infer(TShape{2, 3, 4}, {{"shape", "(-4,-1,-1,-2)"}}), {"Reshape", "'shape'"});
  ExpectError(infer(TShape{2, 3, 4}, {{"shape", "(-4,5,-1,-2)"}}), {"Reshape", "'shape'"});
  ExpectError(infer(TShape{2, 3, 4}, {{"shape", "(0,0,0,0)"}}), {"Reshape", "'shape'"});
  ExpectError(infer(TShape{2, 3}, {{"shape", "(-3,-3)"}}), {"Reshape", "'shape'"});
  // Parameters: an invalid special value, a malformed tuple, an unknown key, a malformed bool.
  ExpectError([] { MakeProp({"Reshape", {{"shape", "(2,-5)"}}, {}}); }, {"Reshape", "'shape'", "-5"});
  ExpectError([] { MakeProp({"Reshape", {{"shape", "(2,x)"}}, {}}); }, {"Reshape", "shape"});
  ExpectError([] { MakeProp({"Reshape", {{"shape", "(2,3)"}, {"shap", "1"}}, {}}); }, {"Reshape", "shap"});
  ExpectError([] { MakeProp({"Reshape", {{"shape", "(2,3)"}, {"reverse", "maybe"}}, {}}); }, {"Reshape", "reverse"});
}

TEST(OpReshape, ForwardAndParams) {
  OpCase c{"reshape", {{"shape", "(3,-1)"}}, {TShape{2, 3}}};
  EXPECT_EQ(InferOutShapes(c)[0], (TShape{3, 2}));
  EXPECT_TRUE(Near(RunForward(c, {{1, 2, 3, 4, 5, 6}})[0], {1, 2, 3, 4, 5, 6}, 0, 0, "Reshape"));
  // float32 too.
  c.dtype = DType::kFloat32;
  EXPECT_TRUE(Near(RunForward(c, {{1.5, 2, 3, 4, 5, 6}})[0], {1.5, 2, 3, 4, 5, 6}, 0, 0, "Reshape float32"));
  // Parameters round-trip through GetParams.
  auto p = MakeProp({"Reshape", {{"shape", "(-4,1,2,-2)"}, {"reverse", "1"}}, {}});
  auto q = OperatorProperty::Create("Reshape");
  q->Init(p->GetParams());
  EXPECT_EQ(q->GetParams(), p->GetParams());
  EXPECT_EQ(static_cast<ReshapeProp&>(*q).param().shape, (std::vector<std::int64_t>{-4, 1, 2, -2}));
  EXPECT_TRUE(static_cast<ReshapeProp&>(*q).param().reverse);
}

TEST(OpReshape, Gradient) {
  GradCheckOptions o;
  // In place is checked by the harness too (views with the output's shape).
  CheckGradient({"Reshape", {{"shape", "(4,0,2)"}}, {TShape{2, 3, 4}}}, o);
  CheckGradient({"Reshape", {{"shape", "(-3,-2)"}}, {TShape{2, 3, 4}}}, o);
  CheckGradient({"Reshape", {{"shape", "(-4,1,2,-2)"}}, {TShape{2, 3, 4}}}, o);
  CheckGradient({"Reshape", {{"shape", "(-1,)"}}, {TShape{3, 5}}}, o);
  CheckGradient({"Reshape", {{"shape", "(-1,0)"}, {"reverse", "True"}}, {TShape{3, 2, 2}}}, o);
}

TEST(OpReshape, InPlaceAndAddTo) {
  CheckReshapeLikeInPlace({"Reshape", {{"shape", "(4,-1)"}}, {TShape{2, 3, 4}}});
  CheckReshapeLikeInPlace({"Reshape", {{"shape", "(-1,)"}}, {TShape{2, 3}}, DType::kFloat32});
}

// ======================================== Concat ========================================

TEST(OpConcat, ForwardAlongEachDim) {
  // dim 1 (the default): rows are joined.
  OpCase c1{"Concat", {{"num_args", "2"}}, {TShape{2, 2}, TShape{2, 1}}};
  EXPECT_EQ(InferOutShapes(c1)[0], (TShape{2, 3}));
  EXPECT_TRUE(Near(RunForward(c1, {{1, 2, 3, 4}, {5, 6}})[0], {1, 2, 5, 3, 4, 6}, 0, 0, "Concat dim 1"));
  // dim 0: blocks one after the other.
  OpCase c0{"Concat", {{"num_args", "2"}, {"dim", "0"}}, {TShape{1, 2}, TShape{2, 2}}};
  EXPECT_EQ(InferOutShapes(c0)[0], (TShape{3, 2}));
  EXPECT_TRUE(Near(RunForward(c0, {{1, 2}, {3, 4, 5, 6}})[0], {1, 2, 3, 4, 5, 6}, 0, 0, "Concat dim 0"));
  // dim -1 of 3-D inputs, three inputs, float32.
  OpCase c2{"concat", {{"num_args", "3"}, {"dim", "-1"}}, {TShape{2, 1, 1}, TShape{2, 1, 2}, TShape{2, 1, 1}},
            DType::kFloat32};
  EXPECT_EQ(InferOutShapes(c2)[0], (TShape{2, 1, 4}));
  EXPECT_TRUE(Near(RunForward(c2, {{1, 2}, {3, 4, 5, 6}, {7, 8}})[0], {1, 3, 4, 7, 2, 5, 6, 8}, 0, 0, "Concat dim -1"));
  EXPECT_EQ(MakeProp(c2)->ListArguments(), (std::vector<std::string>{"arg0", "arg1", "arg2"}));
}

TEST(OpConcat, BackwardSplitsTheGradient) {
  OpCase c{"Concat", {{"num_args", "2"}}, {TShape{2, 2}, TShape{2, 1}}};
  auto g = RunBackward(c, {{1, 2, 3, 4}, {5, 6}}, {{10, 20, 30, 40, 50, 60}});
  EXPECT_TRUE(Near(g[0], {10, 20, 40, 50}, 0, 0, "arg0 grad"));
  EXPECT_TRUE(Near(g[1], {30, 60}, 0, 0, "arg1 grad"));
  // kNullOp for one argument leaves it alone; kAddTo adds for the other.
  g = RunBackward(c, {{1, 2, 3, 4}, {5, 6}}, {{10, 20, 30, 40, 50, 60}}, {kAddTo, kNullOp}, {{1, 1, 1, 1}, {7, 7}});
  EXPECT_TRUE(Near(g[0], {11, 21, 41, 51}, 0, 0, "arg0 grad (kAddTo)"));
  EXPECT_TRUE(Near(g[1], {7, 7}, 0, 0, "arg1 grad (kNullOp)"));
}

TEST(OpConcat, ShapeTable) {
  struct Row {
    Kwargs kwargs;
    std::vector<TShape> in;
    TShape want;
  };
  const std::vector<Row> table = {
      {{{"num_args", "2"}, {"dim", "0"}}, {TShape{2, 3}, TShape{4, 3}}, TShape{6, 3}},
      {{{"num_args", "2"}}, {TShape{2, 3}, TShape{2, 5}}, TShape{2, 8}},
      {{{"num_args", "3"}, {"dim", "2"}}, {TShape{2, 3, 1}, TShape{2, 3, 2}, TShape{2, 3, 3}}, TShape{2, 3, 6}},
      {{{"num_args", "1"}, {"dim", "0"}}, {TShape{4}}, TShape{4}},
      {{{"num_args", "2"}, {"dim", "-2"}}, {TShape{1, 2, 3}, TShape{1, 4, 3}}, TShape{1, 6, 3}},
      {{{"num_args", "2"}, {"dim", "0"}}, {TShape{0, 2}, TShape{3, 2}}, TShape{3, 2}},
  };
  for (const auto& row : table) {
    auto out = InferOutShapes({"Concat", row.kwargs, row.in});
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], row.want) << row.kwargs[0].second;
  }
}

TEST(OpConcat, FillsUnknownInputShapes) {
  auto prop = MakeProp({"Concat", {{"num_args", "2"}}, {}});
  // One input's size along dim follows from the output.
  std::vector<TShape> in{TShape{2, 3}, TShape{-1, -1}}, out{TShape{2, 5}}, aux;
  EXPECT_TRUE(prop->InferShape(&in, &out, &aux));
  EXPECT_EQ(in[1], (TShape{2, 2}));
  // Without the output, the other dims are filled but the size along dim stays unknown.
  std::vector<TShape> in2{TShape{2, 3}, TShape()}, out2, aux2;
  EXPECT_FALSE(prop->InferShape(&in2, &out2, &aux2));
  EXPECT_EQ(in2[1].ndim(), 2);
  EXPECT_EQ(in2[1][0], 2);
  EXPECT_EQ(in2[1][1], -1);
}

TEST(OpConcat, Errors) {
  ExpectError([] { InferOutShapes({"Concat", {{"num_args", "2"}}, {TShape{2, 3}, TShape{3, 3}}}); },
              {"Concat", "'arg1'", "(3,3)"});
  ExpectError([] {
    InferOutShapes({"Concat", {{"num_args", "3"}, {"dim", "0"}}, {TShape{2, 3}, TShape{2, 3}, TShape{1, 4}}});
  },
              {"Concat", "'arg2'"});
  ExpectError([] { InferOutShapes({"Concat", {{"num_args", "2"}}, {TShape{2, 3}, TShape{2, 3, 1}}}); },
              {"Concat", "'arg1'"});
  ExpectError([] { InferOutShapes({"Concat", {{"num_args", "2"}, {"dim", "2"}}, {TShape{2, 3}, TShape{2, 3}}}); },
              {"Concat", "'dim'"});
  ExpectError([] { MakeProp({"Concat", {{"num_args", "0"}}, {}}); }, {"Concat", "num_args"});
  ExpectError([] { MakeProp({"Concat", {}, {}}); }, {"Concat", "num_args"});
  ExpectError([] { MakeProp({"Concat", {{"num_args", "2"}, {"dim", "one"}}, {}}); }, {"Concat", "dim"});
  ExpectError([] { MakeProp({"Concat", {{"num_args", "2"}, {"axis", "1"}}, {}}); }, {"Concat", "axis"});
  // An output that does not match the inputs.
  auto prop = MakeProp({"Concat", {{"num_args", "2"}}, {}});
  std::vector<TShape> in{TShape{2, 3}, TShape{2, 3}}, out{TShape{2, 7}}, aux;
  ExpectError([&] { prop->InferShape(&in, &out, &aux); }, {"Concat", "'output'"});
}

TEST(OpConcat, Gradient) {
  CheckGradient({"Concat", {{"num_args", "2"}, {"dim", "0"}}, {TShape{2, 3}, TShape{1, 3}}});
  CheckGradient({"Concat", {{"num_args", "2"}, {"dim", "1"}}, {TShape{2, 3, 2}, TShape{2, 1, 2}}});
  CheckGradient({"Concat", {{"num_args", "3"}, {"dim", "2"}}, {TShape{2, 2, 1}, TShape{2, 2, 3}, TShape{2, 2, 2}}});
  CheckGradient({"Concat", {{"num_args", "2"}, {"dim", "-1"}}, {TShape{3}, TShape{2}}});
}

// ======================================== elemwise_* ========================================

TEST(OpElemwise, ForwardHandComputed) {
  const HostTensor a{1, 2, 3, 4}, b{5, 6, 8, 2};
  const std::vector<std::pair<std::string, HostTensor>> cases = {
      {"elemwise_add", {6, 8, 11, 6}},
      {"elemwise_sub", {-4, -4, -5, 2}},
      {"elemwise_mul", {5, 12, 24, 8}},
      {"elemwise_div", {0.2, 1.0 / 3.0, 0.375, 2}},
      {"_plus", {6, 8, 11, 6}},
      {"_add", {6, 8, 11, 6}},
      {"_sub", {-4, -4, -5, 2}},
      {"_Minus", {-4, -4, -5, 2}},
      {"_mul", {5, 12, 24, 8}},
      {"_Div", {0.2, 1.0 / 3.0, 0.375, 2}},
  };
  for (const auto& [op, want] : cases) {
    OpCase c{op, {}, {TShape{2, 2}, TShape{2, 2}}};
    EXPECT_TRUE(Near(RunForward(c, {a, b})[0], want, 1e-15, 0, op));
    c.dtype = DType::kFloat32;
    EXPECT_TRUE(Near(RunForward(c, {a, b})[0], want, 1e-7, 0, op + " float32"));
  }
}

TEST(OpElemwise, GradientsAndInPlace) {
  for (const char* op : {"elemwise_add", "elemwise_sub", "elemwise_mul", "elemwise_div"}) {
    for (const TShape& s : {TShape{3, 4}, TShape{2, 3, 2}, TShape{5}}) {
      GradCheckOptions o;
      o.inputs = {Uniform(s, 11, -1, 1), Uniform(s, 12, 0.5, 1.5)};  // rhs away from 0 for div
      CheckGradient({op, {}, {s, s}}, o);
    }
  }
}

TEST(OpElemwise, ShapesAndErrors) {
  EXPECT_EQ(InferOutShapes({"elemwise_mul", {}, {TShape{2, 3}, TShape{2, 3}}})[0], (TShape{2, 3}));
  auto prop = MakeProp({"elemwise_add", {}, {}});
  std::vector<TShape> in{TShape(), TShape{4, 1}}, out, aux;
  EXPECT_TRUE(prop->InferShape(&in, &out, &aux));  // one operand decides the other's shape
  EXPECT_EQ(in[0], (TShape{4, 1}));
  ExpectError([] { InferOutShapes({"elemwise_add", {}, {TShape{2, 3}, TShape{3, 2}}}); }, {"elemwise_add", "rhs"});
  ExpectError([] { MakeProp({"elemwise_sub", {{"scalar", "1"}}, {}}); }, {"elemwise_sub", "scalar"});
  // Integers add as MXNet adds them, float16 in float rounded once; a type the operator has no loop for
  // (bool) is refused with a message naming the operator and the type.
  NDArray i = NDArray::FromVector<std::int32_t>({7, -2}, TShape{2}, Context::CPU());
  EXPECT_EQ(Invoke("elemwise_add", {i, i})[0].ToVector<std::int32_t>(), (std::vector<std::int32_t>{14, -4}));
  NDArray h = NDArray::FromVector<float>({1.5f, 2049.0f}, TShape{2}, Context::CPU()).AsType(DType::kFloat16);
  EXPECT_EQ(Invoke("elemwise_add", {h, h})[0].AsType(DType::kFloat32).ToVector<float>(),
            (std::vector<float>{3.0f, 4096.0f}));  // 2049 is 2048 in float16
  NDArray x = NDArray::Zeros(TShape{2}, Context::CPU(), DType::kBool);
  ExpectError([&] { Invoke("elemwise_add", {x, x})[0].WaitToRead(); }, {"elemwise_add", "bool"});
}

// ======================================== *_scalar ========================================

TEST(OpScalar, ForwardHandComputed) {
  const HostTensor x{1, 2, -4, 0.5};
  const std::vector<std::pair<std::string, HostTensor>> cases = {
      {"_plus_scalar", {3, 4, -2, 2.5}},   {"_minus_scalar", {-1, 0, -6, -1.5}}, {"_rminus_scalar", {1, 0, 6, 1.5}},
      {"_mul_scalar", {2, 4, -8, 1}},      {"_div_scalar", {0.5, 1, -2, 0.25}},  {"_rdiv_scalar", {2, 1, -0.5, 4}},
      {"_PlusScalar", {3, 4, -2, 2.5}},    {"_RMinusScalar", {1, 0, 6, 1.5}},    {"_RDivScalar", {2, 1, -0.5, 4}},
      {"_MinusScalar", {-1, 0, -6, -1.5}}, {"_MulScalar", {2, 4, -8, 1}},        {"_DivScalar", {0.5, 1, -2, 0.25}},
  };
  for (const auto& [op, want] : cases) {
    OpCase c{op, {{"scalar", "2"}}, {TShape{4}}};
    EXPECT_TRUE(Near(RunForward(c, {x})[0], want, 1e-15, 0, op));
    c.dtype = DType::kFloat32;
    EXPECT_TRUE(Near(RunForward(c, {x})[0], want, 1e-7, 0, op + " float32"));
  }
}

TEST(OpScalar, GradientsAndErrors) {
  for (const char* op :
       {"_plus_scalar", "_minus_scalar", "_rminus_scalar", "_mul_scalar", "_div_scalar", "_rdiv_scalar"}) {
    for (const char* s : {"2.5", "-0.75"}) {
      GradCheckOptions o;
      o.inputs = {Uniform(TShape{3, 4}, 5, 0.5, 2)};  // away from 0 for _rdiv_scalar
      CheckGradient({op, {{"scalar", s}}, {TShape{3, 4}}}, o);
    }
  }
  ExpectError([] { MakeProp({"_plus_scalar", {}, {}}); }, {"_plus_scalar", "scalar"});
  ExpectError([] { MakeProp({"_mul_scalar", {{"scalar", "two"}}, {}}); }, {"_mul_scalar", "scalar"});
  ExpectError([] { MakeProp({"_mul_scalar", {{"scalar", "2"}, {"axis", "1"}}, {}}); }, {"_mul_scalar", "axis"});
}

// ======================================== broadcast_* ========================================

TEST(OpBroadcast, ForwardHandComputed) {
  const HostTensor a{1, 2, 3, 4, 5, 6};  // (2,3)
  struct Row {
    std::string op;
    TShape rhs_shape;
    HostTensor rhs, want;
  };
  const std::vector<Row> rows = {
      {"broadcast_add", TShape{1, 3}, {10, 20, 30}, {11, 22, 33, 14, 25, 36}},
      {"broadcast_plus", TShape{3}, {10, 20, 30}, {11, 22, 33, 14, 25, 36}},
      {"broadcast_sub", TShape{2, 1}, {1, 2}, {0, 1, 2, 2, 3, 4}},
      {"broadcast_minus", TShape{1, 1}, {1}, {0, 1, 2, 3, 4, 5}},
      {"broadcast_mul", TShape{2, 1}, {10, 20}, {10, 20, 30, 80, 100, 120}},
      {"broadcast_div", TShape{1, 3}, {1, 2, 4}, {1, 1, 0.75, 4, 2.5, 1.5}},
      {"broadcast_add", TShape{2, 3}, {1, 1, 1, 1, 1, 1}, {2, 3, 4, 5, 6, 7}},
  };
  for (const auto& r : rows) {
    OpCase c{r.op, {}, {TShape{2, 3}, r.rhs_shape}};
    EXPECT_EQ(InferOutShapes(c)[0], (TShape{2, 3})) << r.op;
    EXPECT_TRUE(Near(RunForward(c, {a, r.rhs})[0], r.want, 1e-15, 0, r.op + " " + r.rhs_shape.ToString()));
  }
  // Both operands broadcast: (2,1) * (1,3) -> (2,3), float32.
  OpCase both{"broadcast_mul", {}, {TShape{2, 1}, TShape{1, 3}}, DType::kFloat32};
  EXPECT_TRUE(Near(RunForward(both, {{2, 3}, {1, 10, 100}})[0], {2, 20, 200, 3, 30, 300}, 0, 0, "outer product"));
}

TEST(OpBroadcast, BackwardSumsOverBroadcastDims) {
  // d/d lhs of sum(head * (lhs + rhs)) with lhs (2,3), rhs (1,3): rhs grad sums the heads over rows.
  OpCase c{"broadcast_add", {}, {TShape{2, 3}, TShape{1, 3}}};
  auto g = RunBackward(c, {{1, 2, 3, 4, 5, 6}, {0, 0, 0}}, {{1, 2, 3, 4, 5, 6}});
  EXPECT_TRUE(Near(g[0], {1, 2, 3, 4, 5, 6}, 0, 0, "lhs grad"));
  EXPECT_TRUE(Near(g[1], {5, 7, 9}, 0, 0, "rhs grad"));
  // mul with rhs (2,1): rhs grad[i] = sum_j head[i,j] * lhs[i,j].
  OpCase m{"broadcast_mul", {}, {TShape{2, 3}, TShape{2, 1}}};
  g = RunBackward(m, {{1, 2, 3, 4, 5, 6}, {10, 100}}, {{1, 1, 1, 1, 0, 2}});
  EXPECT_TRUE(Near(g[0], {10, 10, 10, 100, 0, 200}, 0, 0, "lhs grad"));
  EXPECT_TRUE(Near(g[1], {6, 16}, 0, 0, "rhs grad"));
}

TEST(OpBroadcast, ShapeTableAndErrors) {
  const std::vector<std::tuple<TShape, TShape, TShape>> table = {
      {TShape{2, 3, 4}, TShape{1, 3, 1}, TShape{2, 3, 4}}, {TShape{1}, TShape{2, 3}, TShape{2, 3}},
      {TShape{4, 1}, TShape{1, 5}, TShape{4, 5}},          {TShape{3, 1, 2}, TShape{4, 1}, TShape{3, 4, 2}},
      {TShape{5}, TShape{5}, TShape{5}},
  };
  for (const auto& [l, r, want] : table) {
    EXPECT_EQ(InferOutShapes({"broadcast_sub", {}, {l, r}})[0], want) << l.ToString() << " " << r.ToString();
  }
  ExpectError([] { InferOutShapes({"broadcast_add", {}, {TShape{2, 3}, TShape{3, 2}}}); },
              {"broadcast_add", "'lhs'", "'rhs'", "(2,3)", "(3,2)"});
  ExpectError([] { InferOutShapes({"broadcast_div", {}, {TShape{4}, TShape{3}}}); }, {"broadcast_div", "'rhs'"});
}

TEST(OpBroadcast, Gradients) {
  const std::vector<std::pair<TShape, TShape>> patterns = {
      {TShape{2, 3, 4}, TShape{1, 3, 1}}, {TShape{2, 1}, TShape{1, 3}}, {TShape{3, 4}, TShape{3, 4}},
      {TShape{2, 3}, TShape{3}},          {TShape{1}, TShape{2, 2}},
  };
  for (const char* op : {"broadcast_add", "broadcast_sub", "broadcast_mul", "broadcast_div"}) {
    for (const auto& [l, r] : patterns) {
      GradCheckOptions o;
      o.inputs = {Uniform(l, 21, -1, 1), Uniform(r, 22, 0.5, 1.5)};
      CheckGradient({op, {}, {l, r}}, o);
    }
  }
}

// ======================================== sum / mean ========================================

TEST(OpReduce, ForwardHandComputed) {
  const HostTensor x{1, 2, 3, 4, 5, 6};  // (2,3)
  struct Row {
    std::string op;
    Kwargs kwargs;
    TShape want_shape;
    HostTensor want;
  };
  const std::vector<Row> rows = {
      {"sum", {}, TShape{1}, {21}},
      {"sum", {{"axis", "()"}}, TShape{1}, {21}},
      {"sum", {{"axis", "0"}}, TShape{3}, {5, 7, 9}},
      {"sum", {{"axis", "1"}}, TShape{2}, {6, 15}},
      {"sum_axis", {{"axis", "-1"}, {"keepdims", "True"}}, TShape{2, 1}, {6, 15}},
      {"sum", {{"axis", "(0,)"}, {"exclude", "True"}}, TShape{2}, {6, 15}},
      {"sum", {{"axis", "(0,1)"}}, TShape{1}, {21}},
      {"sum", {{"keepdims", "1"}}, TShape{1, 1}, {21}},
      {"mean", {{"axis", "0"}}, TShape{3}, {2.5, 3.5, 4.5}},
      {"mean", {}, TShape{1}, {3.5}},
      {"mean", {{"axis", "1"}, {"keepdims", "True"}}, TShape{2, 1}, {2, 5}},
      {"mean", {{"axis", "1"}, {"exclude", "True"}, {"keepdims", "True"}}, TShape{1, 3}, {2.5, 3.5, 4.5}},
  };
  for (const auto& r : rows) {
    OpCase c{r.op, r.kwargs, {TShape{2, 3}}};
    const std::string what = r.op + (r.kwargs.empty() ? "" : " " + r.kwargs[0].second);
    EXPECT_EQ(InferOutShapes(c)[0], r.want_shape) << what;
    EXPECT_TRUE(Near(RunForward(c, {x})[0], r.want, 1e-15, 0, what));
  }
  // (2,2,2) = 1..8 summed over axes 0 and 2: j=0 -> 1+2+5+6, j=1 -> 3+4+7+8.
  OpCase c3{"sum", {{"axis", "(0,2)"}}, {TShape{2, 2, 2}}, DType::kFloat32};
  EXPECT_TRUE(Near(RunForward(c3, {Iota(8)})[0], {14, 22}, 0, 0, "sum axis (0,2)"));
}

TEST(OpReduce, BackwardBroadcastsTheGradient) {
  OpCase s{"sum", {{"axis", "1"}}, {TShape{2, 3}}};
  auto g = RunBackward(s, {Iota(6)}, {{1, 2}});
  EXPECT_TRUE(Near(g[0], {1, 1, 1, 2, 2, 2}, 0, 0, "sum grad"));
  OpCase m{"mean", {{"axis", "0"}}, {TShape{2, 3}}};
  g = RunBackward(m, {Iota(6)}, {{2, 4, 6}});
  EXPECT_TRUE(Near(g[0], {1, 2, 3, 1, 2, 3}, 1e-15, 0, "mean grad"));
}

TEST(OpReduce, ShapeTable) {
  struct Row {
    std::string op;
    Kwargs kwargs;
    TShape in, want;
  };
  const std::vector<Row> rows = {
      {"sum", {{"axis", "(1,)"}}, TShape{2, 3, 4}, TShape{2, 4}},
      {"sum", {{"axis", "(-1,0)"}}, TShape{2, 3, 4}, TShape{3}},
      {"sum", {{"axis", "(1,)"}, {"keepdims", "True"}}, TShape{2, 3, 4}, TShape{2, 1, 4}},
      {"sum", {{"axis", "(1,)"}, {"exclude", "True"}}, TShape{2, 3, 4}, TShape{3}},
      {"sum", {{"axis", "(1,)"}, {"exclude", "True"}, {"keepdims", "True"}}, TShape{2, 3, 4}, TShape{1, 3, 1}},
      {"mean", {{"axis", "None"}}, TShape{2, 3, 4}, TShape{1}},
      {"mean", {{"axis", "None"}, {"keepdims", "True"}}, TShape{2, 3, 4}, TShape{1, 1, 1}},
      {"mean", {{"axis", "(0,1,2)"}, {"exclude", "True"}}, TShape{2, 3, 4}, TShape{2, 3, 4}},
      {"sum", {{"axis", "0"}}, TShape{5}, TShape{1}},
  };
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    EXPECT_EQ(InferOutShapes({r.op, r.kwargs, {r.in}})[0], r.want) << i;
  }
}

TEST(OpReduce, Errors) {
  ExpectError([] { InferOutShapes({"sum", {{"axis", "2"}}, {TShape{2, 3}}}); }, {"sum", "'axis'", "2"});
  ExpectError([] { InferOutShapes({"mean", {{"axis", "-3"}}, {TShape{2, 3}}}); }, {"mean", "'axis'"});
  ExpectError([] { InferOutShapes({"sum", {{"axis", "(0,-2)"}}, {TShape{2, 3}}}); }, {"sum", "'axis'", "twice"});
  ExpectError([] { MakeProp({"sum", {{"keepdims", "maybe"}}, {}}); }, {"sum", "keepdims"});
  ExpectError([] { MakeProp({"mean", {{"axis", "(1,x)"}}, {}}); }, {"mean", "axis"});
  ExpectError([] { MakeProp({"mean", {{"dims", "1"}}, {}}); }, {"mean", "dims"});
  ExpectError([] { InferOutShapes({"sum_axis", {}, {TShape::Scalar()}}); }, {"sum", "data"});
}

TEST(OpReduce, Gradients) {
  const std::vector<std::pair<Kwargs, TShape>> settings = {
      {{}, TShape{2, 3}},
      {{{"axis", "1"}}, TShape{2, 3, 4}},
      {{{"axis", "(0,2)"}, {"keepdims", "True"}}, TShape{2, 3, 2}},
      {{{"axis", "-1"}, {"exclude", "True"}}, TShape{3, 2, 2}},
      {{{"axis", "0"}}, TShape{4}},
  };
  for (const char* op : {"sum", "mean"}) {
    for (const auto& [kw, s] : settings) CheckGradient({op, kw, {s}});
  }
}

// ======================================== Embedding ========================================

TEST(OpEmbedding, ForwardLooksUpClippedRows) {
  // weight[i][j] = 10 i + j for 4 rows of 3; indices are truncated and clamped into [0, 3].
  HostTensor w;
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 3; ++j) w.push_back(10 * i + j);
  }
  OpCase c{"Embedding", {{"input_dim", "4"}, {"output_dim", "3"}}, {TShape{2, 3}, TShape{4, 3}}};
  EXPECT_EQ(InferOutShapes(c)[0], (TShape{2, 3, 3}));
  auto out = RunForward(c, {{0, 3, 1.7, -2, 9, 2}, w});
  EXPECT_TRUE(Near(out[0], {0, 1, 2, 30, 31, 32, 10, 11, 12, 0, 1, 2, 30, 31, 32, 20, 21, 22}, 0, 0, "Embedding"));
  c.dtype = DType::kFloat32;
  out = RunForward(c, {{0, 3, 1.7, -2, 9, 2}, w});
  EXPECT_TRUE(Near(out[0], {0, 1, 2, 30, 31, 32, 10, 11, 12, 0, 1, 2, 30, 31, 32, 20, 21, 22}, 0, 0, "float32"));
}

TEST(OpEmbedding, IntegerIndicesThroughInvoke) {
  NDArray data = NDArray::FromVector<std::int32_t>({2, 0, 5}, TShape{3});
  NDArray weight = NDArray::FromVector<float>({1, 2, 3, 4, 5, 6}, TShape{3, 2});
  auto out = Invoke("Embedding", {data, weight}, {{"input_dim", "3"}, {"output_dim", "2"}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape(), (TShape{3, 2}));
  EXPECT_EQ(out[0].dtype(), DType::kFloat32);
  EXPECT_EQ(out[0].ToVector<float>(), (std::vector<float>{5, 6, 1, 2, 5, 6}));
}

TEST(OpEmbedding, BackwardScatterAddsRows) {
  OpCase c{"Embedding", {{"input_dim", "4"}, {"output_dim", "2"}}, {TShape{3}, TShape{4, 2}}};
  const HostTensor w(8, 0.5);
  // Rows 1, 1 and 3: row 1 gets the first two heads' sum.
  auto g = RunBackward(c, {{1, 1, 3}, w}, {{1, 2, 3, 4, 5, 6}}, {kWriteTo, kWriteTo}, {{9, 9, 9}, HostTensor(8, 7)});
  EXPECT_TRUE(Near(g[1], {0, 0, 4, 6, 0, 0, 5, 6}, 0, 0, "weight grad (kWriteTo zeroes first)"));
  EXPECT_TRUE(Near(g[0], {0, 0, 0}, 0, 0, "data grad is zero"));
  g = RunBackward(c, {{1, 1, 3}, w}, {{1, 2, 3, 4, 5, 6}}, {kNullOp, kAddTo}, {{9, 9, 9}, HostTensor(8, 1)});
  EXPECT_TRUE(Near(g[1], {1, 1, 5, 7, 1, 1, 6, 7}, 0, 0, "weight grad (kAddTo)"));
  EXPECT_TRUE(Near(g[0], {9, 9, 9}, 0, 0, "data grad untouched (kNullOp)"));
}

TEST(OpEmbedding, Gradient) {
  for (const auto& [data_shape, in_dim, out_dim] :
       std::vector<std::tuple<TShape, int, int>>{{TShape{5}, 4, 3}, {TShape{2, 3}, 3, 2}, {TShape{2, 2, 2}, 6, 1}}) {
    OpCase c{"Embedding", {{"input_dim", std::to_string(in_dim)}, {"output_dim", std::to_string(out_dim)}},
             {data_shape, TShape{in_dim, out_dim}}};
    GradCheckOptions o;
    HostTensor idx(static_cast<std::size_t>(data_shape.Size()));
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<double>((i * 7) % (in_dim + 1));  // + one clipped
    o.inputs = {idx, Uniform(TShape{in_dim, out_dim}, 31, -1, 1)};
    o.check = {1};  // the data gradient is zero almost everywhere and undefined at integers
    CheckGradient(c, o);
  }
}

TEST(OpEmbedding, ShapesTypesAndErrors) {
  OpCase c{"Embedding", {{"input_dim", "10"}, {"output_dim", "4"}}, {TShape{2, 5}, TShape()}};
  auto prop = MakeProp(c);
  std::vector<TShape> in = c.in_shapes, out, aux;
  EXPECT_TRUE(prop->InferShape(&in, &out, &aux));
  EXPECT_EQ(in[1], (TShape{10, 4}));
  EXPECT_EQ(out[0], (TShape{2, 5, 4}));
  // Types: weight and output follow the known one, else the dtype parameter; data keeps its own.
  std::vector<int> ti{static_cast<int>(DType::kInt32), kTypeUnknown}, to, ta;
  EXPECT_TRUE(prop->InferType(&ti, &to, &ta));
  EXPECT_EQ(ti[0], static_cast<int>(DType::kInt32));
  EXPECT_EQ(ti[1], static_cast<int>(DType::kFloat32));
  EXPECT_EQ(to[0], static_cast<int>(DType::kFloat32));
  auto p64 = MakeProp({"Embedding", {{"input_dim", "10"}, {"output_dim", "4"}, {"dtype", "float64"}}, {}});
  std::vector<int> ti2{static_cast<int>(DType::kFloat32), kTypeUnknown}, to2, ta2;
  EXPECT_TRUE(p64->InferType(&ti2, &to2, &ta2));
  EXPECT_EQ(to2[0], static_cast<int>(DType::kFloat64));

  ExpectError([] {
    InferOutShapes({"Embedding", {{"input_dim", "10"}, {"output_dim", "4"}}, {TShape{3}, TShape{9, 4}}});
  },
              {"Embedding", "'weight'"});
  ExpectError([] { MakeProp({"Embedding", {{"input_dim", "0"}, {"output_dim", "4"}}, {}}); },
              {"Embedding", "input_dim"});
  ExpectError([] { MakeProp({"Embedding", {{"input_dim", "3"}}, {}}); }, {"Embedding", "output_dim"});
  ExpectError([] { MakeProp({"Embedding", {{"input_dim", "3"}, {"output_dim", "x"}}, {}}); },
              {"Embedding", "output_dim"});
  ExpectError([] { MakeProp({"Embedding", {{"input_dim", "3"}, {"output_dim", "2"}, {"dtype", "complex"}}, {}}); },
              {"Embedding", "dtype"});
  ExpectError([] { MakeProp({"Embedding", {{"input_dim", "3"}, {"output_dim", "2"}, {"sparse_grad", "True"}}, {}}); },
              {"Embedding", "sparse_grad"});
  ExpectError([] { MakeProp({"Embedding", {{"input_dim", "3"}, {"output_dim", "2"}, {"vocab", "3"}}, {}}); },
              {"Embedding", "vocab"});
}

// ======================================== smooth_l1 (SimpleOp acceptance) ========================================

TEST(SimpleOpSmoothL1, WorksAsAnNDArrayFunction) {
  // sigma = 1: 0.5 x^2 for |x| < 1, |x| - 0.5 beyond.
  NDArray x = NDArray::FromVector<double>({-2, -0.5, 0, 0.25, 1.5}, TShape{5});
  auto out = Invoke("smooth_l1", {x}, {{"scalar", "1"}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape(), (TShape{5}));
  EXPECT_TRUE(Near(out[0].ToVector<double>(), {1.5, 0.125, 0, 0.03125, 1.0}, 1e-15, 0, "smooth_l1 sigma=1"));
  // sigma = 2: the kink moves to |x| = 0.25; 0.5 * 4 * x^2 inside, |x| - 0.125 outside. float32.
  NDArray y = NDArray::FromVector<float>({-1, 0.1f, 0.3f, 0.2f}, TShape{2, 2});
  auto out2 = Invoke("smooth_l1", {y}, {{"scalar", "2"}});
  EXPECT_TRUE(Near(ToHost(out2[0]), {0.875, 0.02, 0.175, 0.08}, 1e-6, 0, "smooth_l1 sigma=2"));
  // Into a given output with kAddTo.
  NDArray acc = NDArray::FromVector<double>({1, 1, 1, 1, 1}, TShape{5});
  Invoke("smooth_l1", {x}, {{"scalar", "1"}}, {acc}, kAddTo);
  EXPECT_TRUE(Near(acc.ToVector<double>(), {2.5, 1.125, 1, 1.03125, 2.0}, 1e-15, 0, "smooth_l1 kAddTo"));
  ExpectError([&] { Invoke("smooth_l1", {x}); }, {"smooth_l1", "scalar"});
}

TEST(SimpleOpSmoothL1, IsRegisteredWithItsDocs) {
  const OperatorInfo* info = OperatorRegistry::Get().Find("smooth_l1");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->name, "smooth_l1");
  EXPECT_TRUE(info->simple_op);
  EXPECT_NE(info->description.find("Smooth L1"), std::string::npos) << info->description;
  ASSERT_EQ(info->arguments.size(), 1u);
  EXPECT_EQ(info->arguments[0].name, "data");
  bool found = false;
  for (const auto& p : info->params) {
    if (p.name != "scalar") continue;
    found = true;
    EXPECT_TRUE(p.required);
    EXPECT_EQ(p.type, "float");
    EXPECT_FALSE(p.description.empty());
  }
  EXPECT_TRUE(found) << "no 'scalar' parameter doc";
  const auto names = OperatorRegistry::Get().ListNames();
  EXPECT_NE(std::find(names.begin(), names.end(), "smooth_l1"), names.end());
}

TEST(SimpleOpSmoothL1, GradientPassesTheNumericCheck) {
  // Inputs kept away from the kinks at |x| = 1/sigma^2.
  for (const auto& [sigma, xs] : std::vector<std::pair<std::string, HostTensor>>{
           {"1", {-2, -0.5, 0.3, 0.7, 1.6, -1.3}},
           {"2", {-1, -0.2, 0.1, 0.4, 0.05, -0.6}},
           {"0.5", {-5, -1, 0, 2, 4.5, 3.9}}}) {
    GradCheckOptions o;
    o.inputs = {xs};
    CheckGradient({"smooth_l1", {{"scalar", sigma}}, {TShape{2, 3}}}, o);
  }
  // Hand-computed gradient for sigma = 1: sign(x) outside, x inside, times the head.
  auto g = RunBackward({"smooth_l1", {{"scalar", "1"}}, {TShape{4}}}, {{-2, -0.5, 0.3, 3}}, {{1, 2, 3, 4}});
  EXPECT_TRUE(Near(g[0], {-1, -1, 0.9, 4}, 1e-15, 0, "smooth_l1 gradient"));
}

TEST(SimpleOpSmoothL1, ReportsItsInplaceOptions) {
  auto prop = MakeProp({"smooth_l1", {{"scalar", "1"}}, {}});
  int out = 0, grad = 0;
  auto fwd = prop->ForwardInplaceOption({0}, {&out});
  ASSERT_EQ(fwd.size(), 1u);
  EXPECT_EQ(fwd[0].first, 0);
  EXPECT_EQ(fwd[0].second, &out);
  auto bwd = prop->BackwardInplaceOption({10}, {20}, {30}, {&grad});
  ASSERT_EQ(bwd.size(), 1u);
  EXPECT_EQ(bwd[0].first, 10);
  EXPECT_EQ(bwd[0].second, &grad);
  // Backward reads out_grad and the input (UnaryGradT2), not the output.
  EXPECT_EQ(prop->DeclareBackwardDependency({10}, {20}, {30}), (std::vector<int>{10, 20}));
  // In place on NDArrays: the output over the input.
  OpCase c{"smooth_l1", {{"scalar", "1"}}, {TShape{3}}};
  auto r = MakeRunner(c);
  NDArray x = NDArray::FromVector<double>({-3, 0.5, 2}, TShape{3});
  r->Forward(false, {x}, {x}, {}, {kWriteInplace});
  EXPECT_TRUE(Near(x.ToVector<double>(), {2.5, 0.125, 1.5}, 1e-15, 0, "in-place smooth_l1"));
}

}  // namespace
}  // namespace troupe
