// The operator framework: typed parameters, the registry, OperatorRunner's engine path (requests, declared
// backward dependencies, errors), SimpleOp registration, and the gradient-check harness itself.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"
#include "op/imperative.h"
#include "op/operator.h"
#include "op/param.h"
#include "op/simple_op.h"
#include "tests/common/op_test_util.h"

namespace troupe {
namespace {

using test::CheckGradient;
using test::ExpectError;
using test::HostTensor;
using test::OpCase;
using test::RunForward;

// ------------------------------------------------------------------------------------------ parameters
struct DemoParam : Params<DemoParam> {
  int num_hidden = 0;
  bool no_bias = false;
  float slope = 0.25f;
  double eps = 1e-3;
  std::string pool_type;
  TShape kernel;
  std::vector<std::int64_t> axes;
  std::optional<int> axis;
  static void Declare(ParamSchema<DemoParam>& s) {
    s.Field("num_hidden", &DemoParam::num_hidden).LowerBound(1).Describe("Number of hidden units.");
    s.Field("no_bias", &DemoParam::no_bias).Default(false).Describe("Disable the bias.");
    s.Field("slope", &DemoParam::slope).Default(0.25f).Range(0, 1).Describe("Slope.");
    s.Field("eps", &DemoParam::eps).Default(1e-3).Describe("Epsilon.");
    s.Field("pool_type", &DemoParam::pool_type).Default("max").Choices({"max", "avg", "sum"}).Describe("Type.");
    s.Field("kernel", &DemoParam::kernel).Default(TShape{}).Describe("Kernel.");
    s.Field("axes", &DemoParam::axes).Default({}).Describe("Axes.");
    s.Field("axis", &DemoParam::axis).Default(std::nullopt).Describe("Axis.");
  }
};

TEST(Params, DefaultsAndParsing) {
  DemoParam p;
  p.Init({{"num_hidden", "7"}}, "Demo");
  EXPECT_EQ(p.num_hidden, 7);
  EXPECT_FALSE(p.no_bias);
  EXPECT_FLOAT_EQ(p.slope, 0.25f);
  EXPECT_EQ(p.pool_type, "max");
  EXPECT_LE(p.kernel.ndim(), 0);  // the default: no dimensions
  EXPECT_FALSE(p.axis.has_value());

  p.Init({{"num_hidden", " 3 "}, {"no_bias", "True"}, {"slope", "0.5"}, {"eps", "1e-5"}, {"pool_type", "avg"},
          {"kernel", "(3, 3)"}, {"axes", "[-1, 0]"}, {"axis", "-2"}, {"__lr_mult__", "2"}},
         "Demo");
  EXPECT_EQ(p.num_hidden, 3);
  EXPECT_TRUE(p.no_bias);
  EXPECT_FLOAT_EQ(p.slope, 0.5f);
  EXPECT_DOUBLE_EQ(p.eps, 1e-5);
  EXPECT_EQ(p.pool_type, "avg");
  EXPECT_EQ(p.kernel, (TShape{3, 3}));
  EXPECT_EQ(p.axes, (std::vector<std::int64_t>{-1, 0}));
  EXPECT_EQ(p.axis, -2);

  for (const char* text : {"(2,)", "2", "[2]"}) {
    p.Init({{"num_hidden", "1"}, {"kernel", text}}, "Demo");
    EXPECT_EQ(p.kernel, (TShape{2})) << text;
  }
  for (const char* text : {"false", "0", "False"}) {
    p.Init({{"num_hidden", "1"}, {"no_bias", text}}, "Demo");
    EXPECT_FALSE(p.no_bias) << text;
  }
  p.Init({{"num_hidden", "1"}, {"axes", "()"}, {"axis", "None"}}, "Demo");
  EXPECT_TRUE(p.axes.empty());
  EXPECT_FALSE(p.axis.has_value());
}

// Tuples of optional integers (slice's begin/end/step as MXNet writes them): None items, round trips.
TEST(Params, OptionalTuples) {
  using Codec = param_detail::Codec<std::vector<std::optional<std::int64_t>>>;
  const auto v = Codec::Parse("(0, None, -2)");
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0], 0);
  EXPECT_FALSE(v[1].has_value());
  EXPECT_EQ(v[2], -2);
  EXPECT_EQ(Codec::Print(v), "(0, None, -2)");
  EXPECT_EQ(Codec::Print(Codec::Parse("[None]")), "(None,)");
  EXPECT_EQ(Codec::Print(Codec::Parse("3")), "(3,)");
  EXPECT_TRUE(Codec::Parse("()").empty());
  EXPECT_THROW(Codec::Parse("(1,,2)"), std::invalid_argument);
  EXPECT_THROW(param_detail::ParseTuple("(1, None)"), std::invalid_argument);  // plain tuples take no None
}

TEST(Params, GetParamsRoundTrips) {
  DemoParam p;
  p.Init({{"num_hidden", "5"}, {"slope", "0.1"}, {"kernel", "(3,)"}, {"axis", "1"}, {"no_bias", "1"}}, "Demo");
  const Kwargs kv = p.GetParams();
  ASSERT_EQ(kv.size(), 8u);
  EXPECT_EQ(kv[0], (std::pair<std::string, std::string>{"num_hidden", "5"}));
  EXPECT_EQ(kv[1].second, "True");
  EXPECT_EQ(kv[2].second, "0.1");
  EXPECT_EQ(kv[5].second, "(3,)");
  DemoParam q;
  q.Init(kv, "Demo");
  EXPECT_EQ(q.num_hidden, 5);
  EXPECT_TRUE(q.no_bias);
  EXPECT_FLOAT_EQ(q.slope, 0.1f);
  EXPECT_EQ(q.kernel, (TShape{3}));
  EXPECT_EQ(q.axis, 1);
}

TEST(Params, ErrorsNameOperatorParameterAndWhatIsAccepted) {
  DemoParam p;
  ExpectError([&] { p.Init({{"num_hidden", "2"}, {"num_hiden", "3"}}, "Demo"); },
              {"Demo", "unknown parameter 'num_hiden'", "num_hidden", "pool_type"});
  ExpectError([&] { p.Init({{"num_hidden", "3x"}}, "Demo"); }, {"Demo", "'num_hidden'", "int >= 1", "'3x'"});
  ExpectError([&] { p.Init({{"num_hidden", "0"}}, "Demo"); }, {"Demo", "'num_hidden'", ">= 1", "'0'"});
  ExpectError([&] { p.Init({{"num_hidden", "1"}, {"slope", "1.5"}}, "Demo"); }, {"Demo", "'slope'", "[0, 1]"});
  ExpectError([&] { p.Init({{"num_hidden", "1"}, {"pool_type", "median"}}, "Demo"); },
              {"Demo", "'pool_type'", "'max', 'avg', 'sum'", "'median'"});
  ExpectError([&] { p.Init({{"num_hidden", "1"}, {"no_bias", "yes"}}, "Demo"); }, {"Demo", "'no_bias'", "boolean"});
  ExpectError([&] { p.Init({{"num_hidden", "1"}, {"kernel", "(3, -1)"}}, "Demo"); }, {"Demo", "'kernel'"});
  ExpectError([&] { p.Init({{"num_hidden", "1"}, {"kernel", "(3, 3"}}, "Demo"); }, {"Demo", "'kernel'"});
  ExpectError([&] { p.Init({{"num_hidden", "99999999999"}}, "Demo"); }, {"Demo", "'num_hidden'"});
  ExpectError([&] { p.Init({}, "Demo"); }, {"Demo", "required parameter 'num_hidden'", "missing"});
}

TEST(Params, DocsListEveryField) {
  const auto docs = DemoParam::Docs();
  ASSERT_EQ(docs.size(), 8u);
  EXPECT_EQ(docs[0].name, "num_hidden");
  EXPECT_TRUE(docs[0].required);
  EXPECT_EQ(docs[0].description, "Number of hidden units.");
  EXPECT_EQ(docs[1].default_value, "False");
  EXPECT_EQ(docs[4].type, "{'max', 'avg', 'sum'}");
  EXPECT_EQ(docs[7].type, "int or None");
}

// ------------------------------------------------------------------------- a test operator: y = w * x
// Scale(data, weight): out = weight[0] * data. Backward reads out_grad, data and weight (not the output):
// the harness hands undeclared entries over as empty blobs, which the operator records.
std::atomic<int> g_saw_output_in_backward{0};

struct ScaleParam : Params<ScaleParam> {
  bool fail_on_negative = false;
  static void Declare(ParamSchema<ScaleParam>& s) {
    s.Field("fail_on_negative", &ScaleParam::fail_on_negative).Default(false).Describe("Throw for x < 0.");
  }
};

class ScaleOp : public Operator {
 public:
  explicit ScaleOp(ScaleParam p) : p_(p) {}
  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    const double* x = in[0].dptr_as<double>();
    const double w = in[1].dptr_as<double>()[0];
    double* y = out[0].dptr_as<double>();
    for (std::int64_t i = 0; i < in[0].Size(); ++i) {
      if (p_.fail_on_negative && x[i] < 0) throw Error("TestScale: negative input");
      Assign(&y[i], req[0], w * x[i]);
    }
  }
  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in,
                const std::vector<TBlob>& out, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    if (out[0].dptr != nullptr) ++g_saw_output_in_backward;
    const double* g = out_grad[0].dptr_as<double>();
    const double* x = in[0].dptr_as<double>();
    const double w = in[1].dptr_as<double>()[0];
    double dw = 0;
    for (std::int64_t i = 0; i < in[0].Size(); ++i) {
      if (req[0] != kNullOp) Assign(&in_grad[0].dptr_as<double>()[i], req[0], w * g[i]);
      dw += x[i] * g[i];
    }
    if (req[1] != kNullOp) Assign(in_grad[1].dptr_as<double>(), req[1], dw);
  }

 private:
  ScaleParam p_;
};

class ScaleProp : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override { p_.Init(kwargs, "TestScale"); }
  Kwargs GetParams() const override { return p_.GetParams(); }
  std::vector<std::string> ListArguments() const override { return {"data", "weight"}; }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    AssignShape(in, 1, TShape{1}, "TestScale", "weight");
    if (!(*in)[0].known()) return false;
    out->assign(1, (*in)[0]);
    aux->clear();
    return true;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<ScaleProp>(*this); }
  std::string TypeString() const override { return "TestScale"; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& og, const std::vector<int>& in,
                                             const std::vector<int>&) const override {
    return {og[0], in[0], in[1]};
  }
  std::vector<std::pair<int, void*>> ForwardInplaceOption(const std::vector<int>& in,
                                                          const std::vector<void*>& out) const override {
    return {{in[0], out[0]}};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);
    return std::make_unique<ScaleOp>(p_);
  }

 private:
  ScaleParam p_;
};

TROUPE_REGISTER_OP_PROPERTY(TestScale, ScaleProp)
    .describe("Multiplies data by a one-element weight (a test operator).")
    .add_argument("data", "NDArray-or-Symbol", "Input.")
    .add_argument("weight", "NDArray-or-Symbol", "Scale.")
    .add_arguments(ScaleParam::Docs())
    .add_alias("_test_scale");

TEST(Registry, FindsByNameAndAliasWithDocs) {
  const OperatorInfo* info = OperatorRegistry::Get().Find("TestScale");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(OperatorRegistry::Get().Find("_test_scale"), info);
  EXPECT_EQ(info->description, "Multiplies data by a one-element weight (a test operator).");
  ASSERT_EQ(info->arguments.size(), 2u);
  EXPECT_EQ(info->arguments[1].name, "weight");
  ASSERT_EQ(info->params.size(), 1u);
  EXPECT_EQ(info->params[0].name, "fail_on_negative");
  const auto names = OperatorRegistry::Get().ListNames();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_NE(std::find(names.begin(), names.end(), "TestScale"), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "_test_scale"), names.end());  // aliases are not listed
}

TEST(Registry, UnknownAndDuplicateNamesAreErrors) {
  ExpectError([] { OperatorProperty::Create("TestScal"); }, {"unknown operator 'TestScal'", "TestScale"});
  ExpectError([] { OperatorRegistry::Get().Register("TestScale", nullptr); }, {"'TestScale'", "twice"});
}

TEST(Registry, EveryOperatorHasADescriptionAndDocumentedParameters) {
  for (const auto& name : OperatorRegistry::Get().ListNames()) {
    const OperatorInfo* info = OperatorRegistry::Get().Find(name);
    ASSERT_NE(info, nullptr);
    EXPECT_FALSE(info->description.empty()) << name << " has no description";
    EXPECT_EQ(info->description.find('\n'), std::string::npos) << name << ": the description is one line";
    for (const auto& p : info->params) EXPECT_FALSE(p.description.empty()) << name << "." << p.name;
  }
}

TEST(AssignShapeHelper, MergesUnknownDimsAndNamesTheArgumentOnConflict) {
  std::vector<TShape> shapes{TShape{2, -1}};
  AssignShape(&shapes, 0, TShape{-1, 3}, "Op", "weight");
  EXPECT_EQ(shapes[0], (TShape{2, 3}));
  ExpectError([&] { AssignShape(&shapes, 0, TShape{2, 4}, "FullyConnected", "weight"); },
              {"FullyConnected", "'weight'", "(2,3)", "(2,4)"});
  std::vector<int> types{kTypeUnknown};
  AssignType(&types, 0, 1, "Op", "data");
  EXPECT_EQ(types[0], 1);
  ExpectError([&] { AssignType(&types, 0, 0, "Op", "data"); }, {"Op", "'data'", "float64", "float32"});
}

// ------------------------------------------------------------------------------------ type inference
// Types flow from the known arguments to the unknown ones, the outputs and the auxiliary states; a known
// argument of another type is an error naming the operator and the argument.
TEST(TypeInference, LibraryOperatorsFillUnknownTypesAndNameConflicts) {
  const int f32 = static_cast<int>(DType::kFloat32), f64 = static_cast<int>(DType::kFloat64);
  const int i32 = static_cast<int>(DType::kInt32);
  struct Row {
    std::string op;
    Kwargs kwargs;
    std::vector<int> in;
    std::vector<int> want_in, want_out, want_aux;
  };
  const std::vector<Row> rows = {
      {"FullyConnected", {{"num_hidden", "4"}}, {f64, kTypeUnknown, kTypeUnknown}, {f64, f64, f64}, {f64}, {}},
      {"FullyConnected", {{"num_hidden", "4"}}, {kTypeUnknown, f32, kTypeUnknown}, {f32, f32, f32}, {f32}, {}},
      {"Convolution", {{"kernel", "(3,3)"}, {"num_filter", "2"}, {"no_bias", "True"}}, {f64, kTypeUnknown},
       {f64, f64}, {f64}, {}},
      {"BatchNorm", {}, {f64, kTypeUnknown, kTypeUnknown}, {f64, f64, f64}, {f64, f64, f64}, {f64, f64}},
      {"elemwise_add", {}, {kTypeUnknown, f32}, {f32, f32}, {f32}, {}},
      {"SoftmaxOutput", {}, {f32, kTypeUnknown}, {f32, f32}, {f32}, {}},
      // Embedding: indices may be of any type; the weight and the output have the 'dtype' parameter's.
      {"Embedding", {{"input_dim", "5"}, {"output_dim", "2"}, {"dtype", "float64"}}, {i32, kTypeUnknown},
       {i32, f64}, {f64}, {}},
  };
  for (const auto& row : rows) {
    SCOPED_TRACE(row.op);
    auto p = OperatorProperty::Create(row.op);
    p->Init(row.kwargs);
    std::vector<int> in = row.in, out, aux;
    ASSERT_TRUE(p->InferType(&in, &out, &aux));
    EXPECT_EQ(in, row.want_in);
    EXPECT_EQ(out, row.want_out);
    EXPECT_EQ(aux, row.want_aux);
  }
  auto fc = OperatorProperty::Create("FullyConnected");
  fc->Init({{"num_hidden", "4"}});
  std::vector<int> in{f32, f64, kTypeUnknown}, out, aux;
  ExpectError([&] { fc->InferType(&in, &out, &aux); }, {"FullyConnected", "'weight'", "float64", "float32"});
  std::vector<int> none{kTypeUnknown, kTypeUnknown, kTypeUnknown};
  EXPECT_FALSE(fc->InferType(&none, &out, &aux));  // nothing known yet
}

// ------------------------------------------------------------------------------------ OperatorRunner
TEST(OperatorRunner, ForwardBackwardThroughTheEngine) {
  OpCase c{"TestScale", {}, {TShape{2, 3}, TShape{1}}};
  const HostTensor x{1, -2, 3, 4, 5, -6};
  const auto out = RunForward(c, {x, {2.0}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], (HostTensor{2, -4, 6, 8, 10, -12}));

  g_saw_output_in_backward = 0;
  CheckGradient(c);
  EXPECT_EQ(g_saw_output_in_backward.load(), 0) << "undeclared out_data reached Backward";
}

TEST(OperatorRunner, InfersShapesAndChecksArrays) {
  auto prop = std::shared_ptr<OperatorProperty>(OperatorProperty::Create("TestScale"));
  prop->Init({});
  OperatorRunner r(prop, Context::CPU(), {TShape{4}, TShape{}}, {1, kTypeUnknown});
  EXPECT_EQ(r.in_shapes()[1], (TShape{1}));
  EXPECT_EQ(r.out_shapes()[0], (TShape{4}));
  EXPECT_EQ(r.in_types()[1], 1);
  NDArray x = NDArray::Zeros(TShape{5}, Context::CPU(), DType::kFloat64);
  NDArray w = NDArray::Zeros(TShape{1}, Context::CPU(), DType::kFloat64);
  NDArray y = NDArray::Zeros(TShape{4}, Context::CPU(), DType::kFloat64);
  ExpectError([&] { r.Forward(false, {x, w}, {y}, {}); }, {"TestScale", "'data'", "(5,)", "(4,)"});
  NDArray x32 = NDArray::Zeros(TShape{4}, Context::CPU(), DType::kFloat32);
  ExpectError([&] { r.Forward(false, {x32, w}, {y}, {}); }, {"TestScale", "'data'", "float32", "float64"});
  ExpectError([&] { r.Forward(false, {w}, {y}, {}); }, {"TestScale", "inputs"});
  ExpectError([&] { OperatorRunner(prop, Context::CPU(), {TShape{}, TShape{}}, {1, 1}); },
              {"TestScale", "cannot infer shapes", "'data'"});
  ExpectError([&] { OperatorRunner(prop, Context::CPU(), {TShape{3}, TShape{2}}, {1, 1}); },
              {"TestScale", "'weight'", "(2,)", "(1,)"});
}

TEST(OperatorRunner, ErrorInForwardSurfacesWhereTheUserWaits) {
  NDArray x = NDArray::FromVector<double>({1, -1}, TShape{2});
  NDArray w = NDArray::FromVector<double>({3}, TShape{1});
  auto out = Invoke("TestScale", {x, w}, {{"fail_on_negative", "True"}});
  ASSERT_EQ(out.size(), 1u);
  ExpectError([&] { out[0].WaitToRead(); }, {"negative input"});
  // The process goes on; a good call afterwards works.
  auto ok = Invoke("_test_scale", {x, w});
  EXPECT_EQ(ok[0].ToVector<double>(), (std::vector<double>{3, -3}));
}

TEST(OperatorRunner, InvokeChecksInputsAndHonoursAddTo) {
  NDArray x = NDArray::FromVector<double>({1, 2}, TShape{2});
  NDArray w = NDArray::FromVector<double>({3}, TShape{1});
  ExpectError([&] { Invoke("TestScale", {x}); }, {"TestScale", "expected 2 input arrays", "data, weight"});
  ExpectError([&] { Invoke("TestScale", {x, w}, {{"bogus", "1"}}); }, {"TestScale", "'bogus'"});
  ExpectError([&] { Invoke("NoSuchOp", {x}); }, {"unknown operator 'NoSuchOp'"});
  NDArray acc = NDArray::FromVector<double>({10, 20}, TShape{2});
  Invoke("TestScale", {x, w}, {}, {acc}, kAddTo);
  EXPECT_EQ(acc.ToVector<double>(), (std::vector<double>{13, 26}));
}

TEST(OperatorRunner, GpuContextWithoutImplementationIsAClearError) {
  auto prop = std::shared_ptr<OperatorProperty>(OperatorProperty::Create("TestScale"));
  prop->Init({});
  ExpectError([&] { OperatorRunner(prop, Context::GPU(0), {TShape{2}, TShape{1}}, {1, 1}); }, {"TestScale", "gpu(0)"});
}

// ------------------------------------------------------------------------------------------- SimpleOp
// cube(x) * scalar, written with the chained registration; gradient from the input (UnaryGradT2).
void CubeForward(const TBlob& src, const EnvArguments& env, TBlob* ret, OpReqType req, RunContext) {
  DTypeSwitch(src.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      const T* x = src.dptr_as<T>();
      T* y = ret->dptr_as<T>();
      for (std::int64_t i = 0; i < src.Size(); ++i) Assign(&y[i], req, static_cast<T>(env.scalar * x[i] * x[i] * x[i]));
    } else {
      throw Error("test_cube: floating point only");
    }
  });
}
void CubeBackward(const OutputGrad& g, const Input0& in, const EnvArguments& env, TBlob* in_grad, OpReqType req,
                  RunContext) {
  const double* x = in.data.dptr_as<double>();
  const double* dy = g.data.dptr_as<double>();
  double* dx = in_grad->dptr_as<double>();
  for (std::int64_t i = 0; i < in.data.Size(); ++i) Assign(&dx[i], req, dy[i] * 3 * env.scalar * x[i] * x[i]);
}

TROUPE_REGISTER_SIMPLE_OP(_test_cube)
    .set_function(DeviceType::kCPU, CubeForward, kInplaceInOut)
    .set_gradient(DeviceType::kCPU, CubeBackward)
    .set_enable_scalar(true, "the factor")
    .describe("scalar * x^3 (a test simple operator)");

TEST(SimpleOp, RegisteredAsOperatorAndNDArrayFunction) {
  const OperatorInfo* info = OperatorRegistry::Get().Find("_test_cube");
  ASSERT_NE(info, nullptr);
  EXPECT_TRUE(info->simple_op);
  EXPECT_EQ(info->description, "scalar * x^3 (a test simple operator)");
  ASSERT_EQ(info->params.size(), 1u);
  EXPECT_EQ(info->params[0].name, "scalar");
  EXPECT_EQ(info->params[0].description, "the factor");
  ASSERT_EQ(info->arguments.size(), 1u);

  NDArray x = NDArray::FromVector<double>({1, -2, 0.5}, TShape{3});
  auto y = Invoke("_test_cube", {x}, {{"scalar", "2"}});
  EXPECT_EQ(y[0].ToVector<double>(), (std::vector<double>{2, -16, 0.25}));
  ExpectError([&] { Invoke("_test_cube", {x}); }, {"_test_cube", "'scalar'", "missing"});
  ExpectError([&] { Invoke("_test_cube", {x}, {{"scalar", "two"}}); }, {"_test_cube", "'scalar'", "'two'"});
  ExpectError([&] { Invoke("_test_cube", {x}, {{"scalar", "1"}, {"axis", "1"}}); }, {"_test_cube", "'axis'"});
}

TEST(SimpleOp, PropertyFollowsTheRegistration) {
  auto p = OperatorProperty::Create("_test_cube");
  p->Init({{"scalar", "1.5"}});
  EXPECT_EQ(p->GetParams(), (Kwargs{{"scalar", "1.5"}}));
  EXPECT_EQ(p->ListArguments(), (std::vector<std::string>{"data"}));
  // Backward reads out_grad and the input, not the output.
  EXPECT_EQ(p->DeclareBackwardDependency({0}, {1}, {2}), (std::vector<int>{0, 1}));
  int out_id = 0;
  auto inplace = p->ForwardInplaceOption({7}, {&out_id});
  ASSERT_EQ(inplace.size(), 1u);
  EXPECT_EQ(inplace[0].first, 7);
  EXPECT_EQ(inplace[0].second, &out_id);
  std::vector<TShape> in{TShape{2, 3}}, out, aux;
  ASSERT_TRUE(p->InferShape(&in, &out, &aux));
  EXPECT_EQ(out[0], (TShape{2, 3}));
}

TEST(SimpleOp, GradientPassesTheNumericCheck) {
  CheckGradient({"_test_cube", {{"scalar", "0.7"}}, {TShape{2, 5}}});
  CheckGradient({"_test_cube", {{"scalar", "-2"}}, {TShape{7}}});
}

}  // namespace
}  // namespace troupe
