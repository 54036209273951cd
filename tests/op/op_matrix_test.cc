// The shape and index ("matrix") operators (op/nn/matrix/) on the CPU, beside their MXNet cases in
// tests/graph/data/ops/cases_matrix.py: what those cannot show. Central-difference gradients with kAddTo and
// the in-place options (float64), forward under kAddTo, integer element types, hand-computed results,
// aliases, parameter text, the errors for bad parameters and shapes, and the error for a GPU context.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/gpu_module.h"
#include "op/nn/matrix/matrix.h"
#include "op/operator.h"
#include "tests/common/op_test_util.h"

namespace troupe {
namespace {

using test::CheckGradient;
using test::ExpectError;
using test::ExpectInitError;
using test::HostTensor;
using test::InferOutShapes;
using test::MakeArrays;
using test::MakeRunner;
using test::Near;
using test::OpCase;
using test::RunForward;
using test::ToHost;

HostTensor Iota(std::int64_t n, double start = 0) {
  HostTensor v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<double>(i);
  return v;
}

// One case per operator and parameter form, each with every argument's gradient checked.
std::vector<OpCase> GradientCases() {
  return {
      {"transpose", {}, {TShape{2, 3, 4}}},
      {"transpose", {{"axes", "(1, 2, 0)"}}, {TShape{2, 3, 4}}},
      {"SwapAxis", {{"dim1", "0"}, {"dim2", "-1"}}, {TShape{2, 3, 4}}},
      {"expand_dims", {{"axis", "-1"}}, {TShape{2, 3}}},
      {"squeeze", {}, {TShape{1, 3, 1}}},
      {"squeeze", {{"axis", "(0,)"}}, {TShape{1, 3, 1}}},
      {"reverse", {{"axis", "(0, 2)"}}, {TShape{2, 3, 4}}},
      {"tile", {{"reps", "(2, 1, 3)"}}, {TShape{3, 2}}},
      {"tile", {{"reps", "(2,)"}}, {TShape{2, 2, 3}}},
      {"repeat", {{"repeats", "3"}}, {TShape{2, 3}}},
      {"repeat", {{"repeats", "2"}, {"axis", "-2"}}, {TShape{2, 3, 2}}},
      {"slice", {{"begin", "(None, 1)"}, {"end", "(-1, None)"}}, {TShape{4, 5}}},
      {"slice", {{"begin", "(None, -1)"}, {"end", "(None, 0)"}, {"step", "(-2, -2)"}}, {TShape{5, 6}}},
      {"slice_axis", {{"axis", "1"}, {"begin", "-3"}, {"end", "-1"}}, {TShape{2, 4, 3}}},
      {"SliceChannel", {{"num_outputs", "3"}, {"axis", "-1"}, {"squeeze_axis", "True"}}, {TShape{2, 4, 3}}},
      {"SliceChannel", {{"num_outputs", "2"}}, {TShape{2, 4, 3}}},
      {"stack", {{"num_args", "3"}, {"axis", "1"}}, {TShape{2, 3}, TShape{2, 3}, TShape{2, 3}}},
      {"slice_like", {{"axes", "(0, -1)"}}, {TShape{4, 3, 5}, TShape{2, 2, 3}}},
      {"reshape_like", {{"lhs_begin", "1"}}, {TShape{2, 12}, TShape{3, 4}}},
  };
}

TEST(OpMatrix, GradientsAddToAndInPlace) {
  // slice_like and reshape_like take only a shape from their second argument: its gradient is zero, which
  // central differences confirm like any other.
  for (const OpCase& c : GradientCases()) CheckGradient(c);
}

// Forward under kAddTo adds the result to what the outputs hold, for every operator.
TEST(OpMatrix, ForwardAddTo) {
  for (const OpCase& c : GradientCases()) {
    SCOPED_TRACE(c.op);
    auto r = MakeRunner(c);
    std::vector<HostTensor> in;
    for (const auto& s : r->in_shapes()) in.push_back(Iota(s.Size(), 1));
    const std::vector<HostTensor> want = RunForward(c, in);
    test::OpArrays a = MakeArrays(*r, c, in, {});
    for (auto& o : a.out) o = test::ToArray(HostTensor(static_cast<std::size_t>(o.shape().Size()), 10.0), o.shape(),
                                            c.dtype, c.ctx);
    r->Forward(true, a.in, a.out, a.aux, std::vector<OpReqType>(a.out.size(), kAddTo));
    for (std::size_t i = 0; i < a.out.size(); ++i) {
      HostTensor w = want[i];
      for (auto& v : w) v += 10;
      EXPECT_TRUE(Near(ToHost(a.out[i]), w, 0, 0, "kAddTo output " + std::to_string(i)));
    }
  }
}

TEST(OpMatrix, HandComputed) {
  // (2, 3) = [[0 1 2] [3 4 5]]
  EXPECT_EQ(RunForward({"transpose", {}, {TShape{2, 3}}}, {Iota(6)})[0], (HostTensor{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(RunForward({"reverse", {{"axis", "1"}}, {TShape{2, 3}}}, {Iota(6)})[0], (HostTensor{2, 1, 0, 5, 4, 3}));
  EXPECT_EQ(RunForward({"tile", {{"reps", "(1, 2)"}}, {TShape{2, 3}}}, {Iota(6)})[0],
            (HostTensor{0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}));
  EXPECT_EQ(RunForward({"repeat", {{"repeats", "2"}, {"axis", "0"}}, {TShape{2, 3}}}, {Iota(6)})[0],
            (HostTensor{0, 1, 2, 0, 1, 2, 3, 4, 5, 3, 4, 5}));
  EXPECT_EQ(RunForward({"repeat", {{"repeats", "2"}}, {TShape{2, 2}}}, {Iota(4)})[0],
            (HostTensor{0, 0, 1, 1, 2, 2, 3, 3}));
  // x[::-1, 3:0:-2] of (2, 5)
  EXPECT_EQ(RunForward({"slice", {{"begin", "(None, 3)"}, {"end", "(None, 0)"}, {"step", "(-1, -2)"}},
                        {TShape{2, 5}}},
                       {Iota(10)})[0],
            (HostTensor{8, 6, 3, 1}));
  EXPECT_EQ(RunForward({"stack", {{"num_args", "2"}, {"axis", "-1"}}, {TShape{2}, TShape{2}}}, {Iota(2), Iota(2, 5)})[0],
            (HostTensor{0, 5, 1, 6}));
  const auto parts = RunForward({"split", {{"num_outputs", "2"}, {"axis", "0"}}, {TShape{2, 2}}}, {Iota(4)});
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1], (HostTensor{2, 3}));
  // Gradients where several outputs come from one input (summed) or none does (zero).
  const auto tile = test::RunForwardBackward({"tile", {{"reps", "(3,)"}}, {TShape{2}}}, {Iota(2)},
                                             {HostTensor{1, 2, 3, 4, 5, 6}});
  EXPECT_EQ(tile.grad[0], (HostTensor{9, 12}));
  const auto sl = test::RunForwardBackward({"slice_axis", {{"axis", "0"}, {"begin", "1"}, {"end", "None"}}, {TShape{3}}},
                                           {Iota(3)}, {HostTensor{7, 8}});
  EXPECT_EQ(sl.grad[0], (HostTensor{0, 7, 8}));
}

// Data movement accepts any element type: integers are copied exactly, kAddTo adds in the type.
TEST(OpMatrix, IntegerTypes) {
  for (DType t : {DType::kInt32, DType::kInt64, DType::kUint8, DType::kInt8}) {
    SCOPED_TRACE(DTypeName(t));
    OpCase c{"transpose", {{"axes", "(1, 0)"}}, {TShape{2, 3}}, t};
    EXPECT_EQ(RunForward(c, {Iota(6)})[0], (HostTensor{0, 3, 1, 4, 2, 5}));
    OpCase s{"slice", {{"begin", "(None,)"}, {"end", "(None,)"}, {"step", "(-1,)"}}, {TShape{4}}, t};
    EXPECT_EQ(RunForward(s, {Iota(4)})[0], (HostTensor{3, 2, 1, 0}));
    auto r = MakeRunner(c);
    test::OpArrays a = MakeArrays(*r, c, {Iota(6)}, {});
    a.out[0] = test::ToArray(HostTensor(6, 1.0), a.out[0].shape(), t, c.ctx);
    r->Forward(true, a.in, a.out, a.aux, {kAddTo});
    EXPECT_EQ(ToHost(a.out[0]), (HostTensor{1, 4, 2, 5, 3, 6}));
  }
}

TEST(OpMatrix, ShapesFromMXNet) {
  auto out = [](const OpCase& c) { return InferOutShapes(c); };
  EXPECT_EQ(out({"transpose", {}, {TShape{2, 3, 4}}})[0], (TShape{4, 3, 2}));
  EXPECT_EQ(out({"expand_dims", {{"axis", "-3"}}, {TShape{2, 3}}})[0], (TShape{1, 2, 3}));
  EXPECT_EQ(out({"squeeze", {}, {TShape{1, 1}}})[0], (TShape{1}));  // at least one dimension stays
  EXPECT_EQ(out({"squeeze", {{"axis", "()"}}, {TShape{1, 2}}})[0], (TShape{1, 2}));
  EXPECT_EQ(out({"tile", {{"reps", "(2, 2)"}}, {TShape{3}}})[0], (TShape{2, 6}));
  EXPECT_EQ(out({"tile", {{"reps", "()"}}, {TShape{2, 3}}})[0], (TShape{2, 3}));
  EXPECT_EQ(out({"repeat", {{"repeats", "0"}, {"axis", "1"}}, {TShape{2, 3}}})[0], (TShape{0}));
  EXPECT_EQ(out({"slice", {{"begin", "(1,)"}, {"end", "(0,)"}}, {TShape{2, 3}}})[0], (TShape{0, 3}));
  EXPECT_EQ(out({"slice", {{"begin", "(-10,)"}, {"end", "(10,)"}}, {TShape{2, 3}}})[0], (TShape{2, 3}));
  EXPECT_EQ(out({"slice", {{"begin", "(None,)"}, {"end", "(None,)"}, {"step", "(-2,)"}}, {TShape{5}}})[0], (TShape{3}));
  EXPECT_EQ(out({"reshape_like", {{"lhs_begin", "0"}, {"lhs_end", "2"}, {"rhs_begin", "1"}, {"rhs_end", "2"}},
                 {TShape{3, 5}, TShape{1, 15, 4}}})[0],
            (TShape{15}));
  EXPECT_EQ(out({"SliceChannel", {{"num_outputs", "3"}, {"axis", "0"}, {"squeeze_axis", "1"}}, {TShape{3}}})[2],
            TShape::Scalar());
  EXPECT_EQ(out({"stack", {{"num_args", "2"}, {"axis", "2"}}, {TShape{2, 3}, TShape{2, 3}}})[0], (TShape{2, 3, 2}));
}

// Shapes inferred from the output back to the input (MXNet's shape functions run both ways): what a graph
// needs when only a later node fixes a shape.
TEST(OpMatrix, ShapesFromTheOutputBack) {
  auto back = [](const std::string& op, const Kwargs& params, std::vector<TShape> out, TShape in = TShape()) {
    auto p = OperatorProperty::Create(op);
    p->Init(params);
    std::vector<TShape> ins{in}, aux;
    const bool known = p->InferShape(&ins, &out, &aux);
    EXPECT_EQ(known, ins[0].known()) << op;
    return ins[0];
  };
  EXPECT_EQ(back("transpose", {}, {TShape{4, 3, 2}}), (TShape{2, 3, 4}));
  EXPECT_EQ(back("transpose", {{"axes", "(1, 2, 0)"}}, {TShape{3, 4, 2}}), (TShape{2, 3, 4}));
  TShape partial = TShape::Filled(3, -1);
  partial[0] = 2;
  EXPECT_EQ(back("transpose", {{"axes", "(1, 2, 0)"}}, {TShape{3, 4, 2}}, partial), (TShape{2, 3, 4}));
  EXPECT_EQ(back("expand_dims", {{"axis", "1"}}, {TShape{2, 1, 3}}), (TShape{2, 3}));
  EXPECT_EQ(back("expand_dims", {{"axis", "-1"}}, {TShape{2, 3, 1}}), (TShape{2, 3}));
  EXPECT_EQ(back("SliceChannel", {{"num_outputs", "2"}, {"axis", "1"}}, {TShape{2, 3}, TShape()}), (TShape{2, 6}));
  EXPECT_EQ(back("SliceChannel", {{"num_outputs", "3"}, {"axis", "-1"}, {"squeeze_axis", "True"}},
                 {TShape(), TShape{2, 4}, TShape()}),
            (TShape{2, 4, 3}));
  // A contradiction between the two sides is the usual shape error.
  ExpectError([&] { back("expand_dims", {{"axis", "0"}}, {TShape{1, 2, 3}}, TShape{2, 4}); },
              {"expand_dims", "(1,2,3)", "(1,2,4)"});
}

TEST(OpMatrix, Errors) {
  auto shape_error = [](const OpCase& c, const std::vector<std::string>& parts) {
    SCOPED_TRACE(c.op);
    ExpectError([&] { InferOutShapes(c); }, parts);
  };
  shape_error({"transpose", {{"axes", "(0, 0, 1)"}}, {TShape{2, 3, 4}}}, {"transpose", "'axes'", "permutation"});
  shape_error({"transpose", {{"axes", "(0, -1, 1)"}}, {TShape{2, 3, 4}}}, {"transpose", "'axes'"});
  shape_error({"transpose", {{"axes", "(1, 0)"}}, {TShape{2, 3, 4}}}, {"transpose", "3 dimensions"});
  shape_error({"SwapAxis", {{"dim1", "3"}}, {TShape{2, 3, 4}}}, {"SwapAxis", "'dim1'", "[-3, 3)"});
  shape_error({"expand_dims", {{"axis", "4"}}, {TShape{2, 3, 4}}}, {"expand_dims", "'axis'", "[-4, 4)"});
  shape_error({"squeeze", {{"axis", "1"}}, {TShape{1, 3}}}, {"squeeze", "size is 3"});
  shape_error({"reverse", {{"axis", "-1"}}, {TShape{2, 3}}}, {"reverse", "'axis'", "[0, 2)"});
  shape_error({"repeat", {{"repeats", "2"}, {"axis", "2"}}, {TShape{2, 3}}}, {"repeat", "'axis'"});
  shape_error({"slice", {{"begin", "(0, 0, 0)"}, {"end", "(1, 1, 1)"}}, {TShape{2, 3}}}, {"slice", "'begin'"});
  shape_error({"slice_axis", {{"axis", "1"}, {"begin", "2"}, {"end", "1"}}, {TShape{2, 3}}},
              {"slice_axis", "begin 2 and end 1"});
  shape_error({"slice_axis", {{"axis", "1"}, {"begin", "0"}, {"end", "5"}}, {TShape{2, 3}}}, {"slice_axis", "size 3"});
  shape_error({"slice_like", {}, {TShape{2, 3}, TShape{2}}}, {"slice_like", "different numbers of dimensions"});
  shape_error({"slice_like", {}, {TShape{2, 3}, TShape{3, 3}}}, {"slice_like", "longer"});
  shape_error({"SliceChannel", {{"num_outputs", "2"}}, {TShape{2, 3}}}, {"SliceChannel", "num_outputs=2"});
  shape_error({"SliceChannel", {{"num_outputs", "2"}, {"axis", "0"}, {"squeeze_axis", "True"}}, {TShape{4, 3}}},
              {"SliceChannel", "squeeze_axis"});
  shape_error({"stack", {{"num_args", "2"}}, {TShape{2, 3}, TShape{3, 2}}}, {"stack", "'arg1'"});
  shape_error({"reshape_like", {}, {TShape{2, 3}, TShape{4}}}, {"reshape_like", "elements"});
  ExpectInitError("slice", {{"begin", "(0, 0)"}, {"end", "(1,)"}}, {"slice", "same length"});
  ExpectInitError("slice", {{"begin", "(0,)"}, {"end", "(1,)"}, {"step", "(0,)"}}, {"slice", "'step'", "cannot be 0"});
  ExpectInitError("tile", {{"reps", "(0, 2)"}}, {"tile", "'reps'", ">= 1"});
  ExpectInitError("repeat", {{"repeats", "-1"}}, {"repeat", "'repeats'"});
  ExpectInitError("slice_axis", {{"axis", "0"}, {"begin", "0"}}, {"slice_axis", "'end'"});
}

TEST(OpMatrix, AliasesAndParams) {
  const std::vector<std::pair<std::string, std::string>> aliases = {
      {"swapaxes", "SwapAxis"}, {"flip", "reverse"}, {"crop", "slice"}, {"split", "SliceChannel"}};
  for (const auto& [alias, name] : aliases) EXPECT_EQ(OperatorProperty::Create(alias)->TypeString(), name);
  auto p = OperatorProperty::Create("slice");
  p->Init({{"begin", "(0, None)"}, {"end", "(None, -1)"}, {"step", "[1,None]"}});
  EXPECT_EQ(p->GetParams(), (Kwargs{{"begin", "(0, None)"}, {"end", "(None, -1)"}, {"step", "(1, None)"}}));
  auto s = OperatorProperty::Create("SliceChannel");
  s->Init({{"num_outputs", "3"}});
  EXPECT_EQ(s->ListOutputs(), (std::vector<std::string>{"output0", "output1", "output2"}));
  auto st = OperatorProperty::Create("stack");
  st->Init({{"num_args", "2"}});
  EXPECT_EQ(st->ListArguments(), (std::vector<std::string>{"arg0", "arg1"}));
}

// The GPU code (matrix.cu) is registered for every matrix operator in a build with CUDA; without it, a GPU
// context is a troupe::Error naming the operator. tests/gpu/op_matrix_gpu_test runs them on a device.
TEST(OpMatrix, GpuCodeIsRegisteredWithCuda) {
  for (const char* op : {"transpose", "SwapAxis", "expand_dims", "squeeze", "reshape_like", "reverse", "tile",
                         "repeat", "slice", "slice_axis", "slice_like", "SliceChannel", "stack"}) {
    EXPECT_EQ(HasGpuImplementation(op), GpuModuleBuilt()) << op;
  }
  if (!GpuModuleBuilt()) {
    auto p = OperatorProperty::Create("transpose");
    p->Init({});
    ExpectError([&] { p->CreateOperator(Context::GPU(0)); }, {"transpose"});
  }
}

}  // namespace
}  // namespace troupe
