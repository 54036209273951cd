// Mixed precision: amp::ConvertSymbol (graph/amp.h) and the operators a converted network runs in float16 /
// bfloat16 (amp_cast, amp_multicast, Convolution, BatchNorm, Activation, elemwise_add, Pooling, FullyConnected).
//
// The converted graph is checked node by node (where casts go, what stays float32, the types inference gives),
// and a residual network is trained one step in float32 and converted, from the same arguments: outputs and
// every parameter gradient agree within the half type's rounding, and the gradients arrive as float32 (the
// parameters stay float32 master copies). bfloat16 runs oneDNN's bfloat16 convolutions where the CPU has them;
// float16 runs the float32 kernels on converted copies (FloatStaging).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "graph/amp.h"
#include "graph/executor.h"
#include "graph/models.h"
#include "graph/symbol.h"
#include "op/imperative.h"
#include "tensor/ndarray.h"
#include "tests/common/error_text.h"
#include "tests/common/test_params.h"

namespace troupe {
namespace {

using HostTensor = std::vector<double>;

Symbol Conv(const Symbol& x, int filters, const std::string& name, bool bias = false) {
  Kwargs p{{"kernel", "(3,3)"}, {"pad", "(1,1)"}, {"num_filter", std::to_string(filters)}};
  if (!bias) p.emplace_back("no_bias", "true");
  return Symbol::Create("Convolution", p, std::vector<Symbol>{x}, name);
}
Symbol Op(const std::string& op, const Kwargs& p, const std::vector<Symbol>& in, const std::string& name) {
  return Symbol::Create(op, p, in, name);
}

// conv (bias) -> bn -> relu -> conv -> bn -> + -> relu -> global avg pool -> flatten -> fc -> softmax: one of
// ResNet's blocks, with every operator a converted ResNet runs.
Symbol ResidualNet() {
  Symbol x = Symbol::Variable("data");
  Symbol a = Op("Activation", {{"act_type", "relu"}}, {Op("BatchNorm", {{"fix_gamma", "false"}}, {Conv(x, 16, "c1", true)}, "bn1")}, "r1");
  Symbol b = Op("BatchNorm", {{"fix_gamma", "false"}}, {Conv(a, 16, "c2")}, "bn2");
  Symbol s = Op("Activation", {{"act_type", "relu"}}, {Op("elemwise_add", {}, {a, b}, "add")}, "r2");
  Symbol p = Op("Pooling", {{"global_pool", "true"}, {"pool_type", "avg"}, {"kernel", "(1,1)"}}, {s}, "pool");
  Symbol f = Op("FullyConnected", {{"num_hidden", "10"}}, {Op("Flatten", {}, {p}, "flat")}, "fc");
  return Op("SoftmaxOutput", {}, {f}, "softmax");
}

// name -> operator of every node of `sym` (variables: "").
std::map<std::string, std::string> NodeOps(const Symbol& sym) {
  const std::string json = sym.ToJSON();
  std::map<std::string, std::string> ops;
  // Each node is {"op": "...", "name": "...", ...} in MXNet's JSON.
  std::size_t pos = 0;
  while ((pos = json.find("\"op\": \"", pos)) != std::string::npos) {
    const std::size_t op_end = json.find('"', pos + 7);
    const std::string op = json.substr(pos + 7, op_end - pos - 7);
    const std::size_t name_pos = json.find("\"name\": \"", op_end);
    const std::size_t name_end = json.find('"', name_pos + 9);
    ops[json.substr(name_pos + 9, name_end - name_pos - 9)] = op == "null" ? "" : op;
    pos = name_end;
  }
  return ops;
}

// The type of every output of every node (GetInternals order), by output name.
std::map<std::string, int> InternalTypes(const Symbol& sym, const std::map<std::string, int>& known) {
  const Symbol internals = sym.GetInternals();
  std::vector<int> args, outs, aux;
  std::string why;
  EXPECT_TRUE(internals.InferType(known, &args, &outs, &aux, &why)) << why;
  std::map<std::string, int> types;
  const auto names = internals.ListOutputs();
  for (std::size_t i = 0; i < names.size() && i < outs.size(); ++i) types[names[i]] = outs[i];
  return types;
}

TEST(AmpConvertTest, CastsWhereMxnetsPassDoesAndSharesThem) {
  amp::ConvertOptions o;
  o.target_dtype = DType::kBfloat16;
  const Symbol amp = amp::ConvertSymbol(ResidualNet(), o);
  const auto ops = NodeOps(amp);
  // Convolutions and the fully connected layer read bfloat16: their data and parameters are cast.
  for (const char* cast : {"data_amp_cast_bfloat16", "c1_weight_amp_cast_bfloat16", "c1_bias_amp_cast_bfloat16",
                           "c2_weight_amp_cast_bfloat16", "fc_weight_amp_cast_bfloat16", "fc_bias_amp_cast_bfloat16",
                           "flat_0_amp_cast_bfloat16"}) {
    ASSERT_TRUE(ops.count(cast)) << cast << " missing from " << amp.ToJSON();
    EXPECT_EQ(ops.at(cast), "amp_cast") << cast;
  }
  // Flatten and SoftmaxOutput are float32 operators for bfloat16: their inputs are cast back.
  EXPECT_EQ(ops.count("pool_0_amp_cast_float32"), 1u);
  EXPECT_EQ(ops.count("fc_0_amp_cast_float32"), 1u);
  // BatchNorm, relu, the sum and pooling run in what they get (bfloat16): no casts around them, and
  // BatchNorm's gamma and beta stay float32.
  for (const auto& [name, op] : ops) {
    EXPECT_EQ(name.find("bn1_gamma_amp_cast"), std::string::npos) << name;
    EXPECT_EQ(name.find("r1_0_amp_cast"), std::string::npos) << name;
  }
  EXPECT_EQ(std::count_if(ops.begin(), ops.end(), [](const auto& kv) { return kv.second == "amp_multicast"; }), 0);
  // Types as the graph infers them.
  std::map<std::string, int> known;
  for (const auto& a : amp.ListArguments()) known[a] = 0;
  const auto types = InternalTypes(amp, known);
  const int bf16 = static_cast<int>(DType::kBfloat16), f32 = 0;
  EXPECT_EQ(types.at("c1_output"), bf16);
  EXPECT_EQ(types.at("bn1_output"), bf16);
  EXPECT_EQ(types.at("add_output"), bf16);
  EXPECT_EQ(types.at("pool_output"), bf16);
  EXPECT_EQ(types.at("flat_output"), f32);
  EXPECT_EQ(types.at("fc_output"), bf16);
  EXPECT_EQ(types.at("softmax_output"), f32);
  // Same arguments and auxiliary states as the float32 network, all float32.
  EXPECT_EQ(amp.ListArguments(), ResidualNet().ListArguments());
  EXPECT_EQ(amp.ListAuxiliaryStates(), ResidualNet().ListAuxiliaryStates());
  std::vector<int> args, outs, aux;
  ASSERT_TRUE(amp.InferType(known, &args, &outs, &aux));
  for (int t : args) EXPECT_EQ(t, f32);
  for (int t : aux) EXPECT_EQ(t, f32);
  // The converted symbol is ordinary MXNet JSON.
  EXPECT_EQ(Symbol::FromJSON(amp.ToJSON()).ToJSON(), amp.ToJSON());
}

TEST(AmpConvertTest, WidestTypeOperatorsGetAMulticastWhenTypesAreUnknown) {
  // An elemwise_add of two variables: their types are known only when bound, so one amp_multicast.
  const Symbol sum = Op("elemwise_add", {}, {Symbol::Variable("a"), Symbol::Variable("b")}, "sum");
  amp::ConvertOptions o;
  o.target_dtype = DType::kFloat16;
  const auto ops = NodeOps(amp::ConvertSymbol(sum, o));
  EXPECT_EQ(ops.at("a_amp_multicast"), "amp_multicast");
  // The output is cast back to float32.
  EXPECT_EQ(ops.at("sum_0_amp_cast_float32"), "amp_cast");
}

TEST(AmpConvertTest, ConditionalAndExcludedOperatorsStayFloat32) {
  Symbol x = Symbol::Variable("data");
  Symbol c = Conv(x, 4, "conv");
  Symbol soft = Op("Activation", {{"act_type", "softrelu"}}, {c}, "soft");
  Symbol fc = Op("FullyConnected", {{"num_hidden", "3"}}, {soft}, "fc");
  amp::ConvertOptions o;
  o.target_dtype = DType::kBfloat16;
  o.excluded_sym_names = {"fc"};
  const Symbol amp = amp::ConvertSymbol(fc, o);
  const auto ops = NodeOps(amp);
  EXPECT_EQ(ops.count("conv_0_amp_cast_float32"), 1u);  // softrelu is float32 only
  EXPECT_EQ(ops.count("fc_weight_amp_cast_bfloat16"), 0u);  // excluded: stays float32
  std::map<std::string, int> known;
  for (const auto& a : amp.ListArguments()) known[a] = 0;
  const auto types = InternalTypes(amp, known);
  EXPECT_EQ(types.at("conv_output"), static_cast<int>(DType::kBfloat16));
  EXPECT_EQ(types.at("fc_output"), 0);
}

TEST(AmpConvertTest, RefusesBadListsAndTypes) {
  amp::ConvertOptions o;
  o.target_dtype = DType::kFloat32;
  EXPECT_NE(ErrorText([&] { amp::ConvertSymbol(ResidualNet(), o); }).find("use float16 or bfloat16"), std::string::npos);
  o.target_dtype = DType::kBfloat16;
  o.fp32_ops = std::vector<std::string>{"Convolution"};
  EXPECT_NE(ErrorText([&] { amp::ConvertSymbol(ResidualNet(), o); }).find("'Convolution' is in both"),
            std::string::npos);
  o.fp32_ops.reset();
  o.target_dtype_ops = std::vector<std::string>{"NoSuchOp"};
  EXPECT_NE(ErrorText([&] { amp::ConvertSymbol(ResidualNet(), o); }).find("'NoSuchOp' is in none"), std::string::npos);
}

TEST(AmpOpsTest, AmpCastAndMulticastConvertOnlyFloatTypes) {
  const NDArray f = NDArray::FromVector<float>({1.0f, -2.5f, 3.140625f}, TShape{3});
  const NDArray b = Invoke("amp_cast", {f}, {{"dtype", "bfloat16"}})[0];
  EXPECT_EQ(b.dtype(), DType::kBfloat16);
  EXPECT_EQ(b.AsType(DType::kFloat32).ToVector<float>(), (std::vector<float>{1.0f, -2.5f, 3.140625f}));
  const NDArray i = NDArray::FromVector<std::int32_t>({7, 8, 9}, TShape{3});
  EXPECT_EQ(Invoke("amp_cast", {i}, {{"dtype", "float16"}})[0].dtype(), DType::kInt32);  // unchanged
  // Widest: float32 wins; narrowest: bfloat16 (no float16 among them).
  auto wide = Invoke("amp_multicast", {b, f, i}, {{"num_outputs", "3"}});
  EXPECT_EQ(wide[0].dtype(), DType::kFloat32);
  EXPECT_EQ(wide[1].dtype(), DType::kFloat32);
  EXPECT_EQ(wide[2].dtype(), DType::kInt32);
  auto narrow = Invoke("amp_multicast", {b, f}, {{"num_outputs", "2"}, {"cast_narrow", "true"}});
  EXPECT_EQ(narrow[1].dtype(), DType::kBfloat16);
  EXPECT_EQ(narrow[1].AsType(DType::kFloat32).ToVector<float>(), (std::vector<float>{1.0f, -2.5f, 3.140625f}));
}

TEST(AmpOpsTest, AllFiniteFlagsInfinityAndNanInEveryFloatType) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBfloat16}) {
    SCOPED_TRACE(DTypeName(t));
    const NDArray ok = NDArray::FromVector<float>({1.0f, -3.5e4f, 0.0f}, TShape{3}).AsType(t);
    const NDArray big = NDArray::FromVector<float>({1.0f, -inf, 2.0f}, TShape{3}).AsType(t);
    const NDArray bad = NDArray::FromVector<float>({nan, 1.0f, 2.0f}, TShape{3}).AsType(t);
    EXPECT_EQ(Invoke("all_finite", {ok})[0].ToVector<float>(), std::vector<float>{1.0f});
    EXPECT_EQ(Invoke("all_finite", {big})[0].ToVector<float>(), std::vector<float>{0.0f});
    EXPECT_EQ(Invoke("all_finite", {bad})[0].ToVector<float>(), std::vector<float>{0.0f});
    EXPECT_EQ(Invoke("multi_all_finite", {ok, ok}, {{"num_arrays", "2"}})[0].ToVector<float>(), std::vector<float>{1.0f});
    EXPECT_EQ(Invoke("multi_all_finite", {ok, bad}, {{"num_arrays", "2"}})[0].ToVector<float>(), std::vector<float>{0.0f});
  }
  // 70000 overflows float16 (largest 65504): the cast gives infinity, which all_finite reports.
  const NDArray h = NDArray::FromVector<float>({7e4f}, TShape{1}).AsType(DType::kFloat16);
  EXPECT_EQ(Invoke("all_finite", {h})[0].ToVector<float>(), std::vector<float>{0.0f});
  // init_output false: a finite input leaves the flag as it was (0 stays 0), a non-finite one clears it.
  const NDArray ok = NDArray::FromVector<float>({1.0f}, TShape{1});
  NDArray flag = NDArray::FromVector<float>({0.0f}, TShape{1});
  Invoke("all_finite", {ok}, {{"init_output", "false"}}, {flag});
  EXPECT_EQ(flag.ToVector<float>(), std::vector<float>{0.0f});
  flag = NDArray::FromVector<float>({1.0f}, TShape{1});
  Invoke("all_finite", {ok}, {{"init_output", "false"}}, {flag});
  EXPECT_EQ(flag.ToVector<float>(), std::vector<float>{1.0f});
  Invoke("all_finite", {NDArray::FromVector<float>({inf}, TShape{1})}, {{"init_output", "false"}}, {flag});
  EXPECT_EQ(flag.ToVector<float>(), std::vector<float>{0.0f});
}

// The operators that run half-precision arrays as float32 on converted copies (FloatStaging): each one's
// output on bfloat16 and float16 inputs is its float32 output on the same (half-representable) values,
// rounded once.
TEST(AmpOpsTest, StagedOperatorsComputeHalfTypesAsFloat32) {
  std::mt19937_64 rng(test::TestSeed());
  std::uniform_real_distribution<float> u(-1, 1);
  const auto random = [&](const TShape& s) {
    std::vector<float> v(static_cast<std::size_t>(s.Size()));
    for (auto& x : v) x = static_cast<float>(bf16_t(u(rng)));  // exact in both half types
    return NDArray::FromVector<float>(v, s);
  };
  struct Case {
    std::string op;
    Kwargs kwargs;
    std::vector<NDArray> in;
  };
  const std::vector<Case> cases = {
      {"dot", {}, {random(TShape{3, 5}), random(TShape{5, 4})}},
      {"batch_dot", {{"transpose_b", "true"}}, {random(TShape{2, 3, 5}), random(TShape{2, 4, 5})}},
      {"FullyConnected", {{"num_hidden", "4"}}, {random(TShape{3, 6}), random(TShape{4, 6}), random(TShape{4})}},
      {"LayerNorm", {}, {random(TShape{3, 8}), random(TShape{8}), random(TShape{8})}},
      {"softmax", {{"axis", "1"}}, {random(TShape{3, 8})}},
      {"log_softmax", {}, {random(TShape{3, 8})}},
      {"Pooling", {{"kernel", "(2,2)"}, {"pool_type", "avg"}}, {random(TShape{2, 3, 4, 4})}},
  };
  for (const Case& c : cases) {
    const std::vector<float> ref = Invoke(c.op, c.in, c.kwargs)[0].ToVector<float>();
    for (DType t : {DType::kBfloat16, DType::kFloat16}) {
      SCOPED_TRACE(c.op + " in " + DTypeName(t));
      std::vector<NDArray> in;
      for (const NDArray& a : c.in) in.push_back(a.AsType(t));
      const NDArray out = Invoke(c.op, in, c.kwargs)[0];
      ASSERT_EQ(out.dtype(), t);
      const std::vector<float> got = out.AsType(DType::kFloat32).ToVector<float>();
      ASSERT_EQ(got.size(), ref.size());
      for (std::size_t i = 0; i < ref.size(); ++i) {
        const float rounded = t == DType::kBfloat16 ? static_cast<float>(bf16_t(ref[i])) : static_cast<float>(half_t(ref[i]));
        EXPECT_EQ(got[i], rounded) << i;
      }
    }
  }
}

TEST(AmpOpsTest, BatchNormKeepsItsParametersInFloat32ForHalfData) {
  auto bn = OperatorProperty::Create("BatchNorm");
  bn->Init({});
  std::vector<int> in{static_cast<int>(DType::kBfloat16), kTypeUnknown, kTypeUnknown}, out, aux;
  ASSERT_TRUE(bn->InferType(&in, &out, &aux));
  EXPECT_EQ(in, (std::vector<int>{12, 0, 0}));
  EXPECT_EQ(out, (std::vector<int>{12, 0, 0}));
  EXPECT_EQ(aux, (std::vector<int>{0, 0}));
}

// One training step (Forward(true) + Backward) of `net` with the given arguments and auxiliary states.
struct Step {
  HostTensor probs;
  std::map<std::string, HostTensor> grads;  // by argument name
  std::map<std::string, DType> grad_types;
  std::map<std::string, HostTensor> aux;
};

Step RunStep(const Symbol& net, const std::map<std::string, HostTensor>& values, const std::map<std::string, TShape>& shapes,
             Engine* engine) {
  std::vector<TShape> arg_shapes, out_shapes, aux_shapes;
  EXPECT_TRUE(net.InferShape(shapes, &arg_shapes, &out_shapes, &aux_shapes));
  const auto names = net.ListArguments(), aux_names = net.ListAuxiliaryStates();
  std::vector<NDArray> args, grads, aux;
  std::vector<OpReqType> req;
  for (std::size_t i = 0; i < names.size(); ++i) {
    args.push_back(NDArray::FromVector<double>(values.at(names[i]), arg_shapes[i], Context::CPU(), engine)
                       .AsType(DType::kFloat32));
    const bool input = names[i] == "data" || names[i] == "softmax_label";
    req.push_back(input ? kNullOp : kWriteTo);
    grads.push_back(input ? NDArray() : NDArray::Zeros(arg_shapes[i], Context::CPU(), DType::kFloat32, engine));
  }
  for (std::size_t i = 0; i < aux_names.size(); ++i) {
    aux.push_back(NDArray::FromVector<double>(values.at(aux_names[i]), aux_shapes[i], Context::CPU(), engine)
                      .AsType(DType::kFloat32));
  }
  ExecutorOptions opt;
  opt.engine = engine;
  auto exec = Executor::Bind(net, Context::CPU(), args, grads, req, aux, opt);
  exec->Forward(true);
  exec->Backward();
  Step s;
  s.probs = exec->outputs()[0].AsType(DType::kFloat64).ToVector<double>();
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (req[i] == kNullOp) continue;
    s.grads[names[i]] = exec->grad_arrays()[i].AsType(DType::kFloat64).ToVector<double>();
    s.grad_types[names[i]] = exec->grad_arrays()[i].dtype();
  }
  for (std::size_t i = 0; i < aux_names.size(); ++i) s.aux[aux_names[i]] = aux[i].AsType(DType::kFloat64).ToVector<double>();
  return s;
}

// The default lists for `target` with `ops` moved to the target type's list.
amp::ConvertOptions OptionsWith(DType target, const std::vector<std::string>& ops) {
  amp::ConvertOptions o;
  o.target_dtype = target;
  if (ops.empty()) return o;
  o.target_dtype_ops = amp::ListLp16Ops(target);
  o.fp32_ops = amp::ListFp32Ops(target);
  for (const std::string& op : ops) {
    o.target_dtype_ops->push_back(op);
    std::erase(*o.fp32_ops, op);
  }
  return o;
}

class AmpTrainTest : public ::testing::TestWithParam<test::EngineParam> {
 protected:
  void SetUp() override { engine_ = test::MakeEngine(GetParam()); }
  void TearDown() override {
    if (engine_ != nullptr) engine_->WaitForAll();
    engine_.reset();
  }
  Engine* engine() { return engine_.get(); }

  // A step of the float32 network and of its conversion to `target` agree within `tol`, as the relative
  // L2 error |got - ref| / |ref| of each array: probabilities, every parameter gradient, BatchNorm's moving
  // statistics. c1_bias's gradient is zero in exact arithmetic (BatchNorm removes any shift of its input):
  // it must stay below `tol` relative to c1_weight's.
  void ExpectStepMatchesFloat32(DType target, double tol, Symbol net = ResidualNet(),
                                const std::vector<std::string>& target_ops = {}) {
    const Symbol amp = amp::ConvertSymbol(net, OptionsWith(target, target_ops));
    const std::map<std::string, TShape> shapes{{"data", TShape{4, 3, 8, 8}}, {"softmax_label", TShape{4}}};
    std::vector<TShape> arg_shapes, out_shapes, aux_shapes;
    ASSERT_TRUE(net.InferShape(shapes, &arg_shapes, &out_shapes, &aux_shapes));
    const std::uint64_t seed = test::TestSeed();
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(-1, 1);
    std::map<std::string, HostTensor> values;
    const auto names = net.ListArguments(), aux_names = net.ListAuxiliaryStates();
    for (std::size_t i = 0; i < names.size(); ++i) {
      HostTensor v(static_cast<std::size_t>(arg_shapes[i].Size()));
      // Weights of unit gain (uniform with variance 1 / fan-in), gammas near 1, small shifts: the values of
      // a network that trains, not of one whose logits saturate the softmax.
      const std::string& n = names[i];
      const auto ends = [&](const std::string& tail) {
        return n.size() >= tail.size() && n.compare(n.size() - tail.size(), tail.size(), tail) == 0;
      };
      const double fan_in = arg_shapes[i].ndim() > 1 ? static_cast<double>(arg_shapes[i].Size() / arg_shapes[i][0]) : 1;
      for (std::size_t k = 0; k < v.size(); ++k) {
        if (n == "softmax_label") {
          v[k] = static_cast<double>((k * 7) % 10);
        } else if (ends("_weight")) {
          v[k] = u(rng) * std::sqrt(3.0 / fan_in);
        } else if (ends("_gamma")) {
          v[k] = 1 + 0.1 * u(rng);
        } else if (ends("_beta") || ends("_bias")) {
          v[k] = 0.1 * u(rng);
        } else {
          v[k] = u(rng);
        }
      }
      values[names[i]] = v;
    }
    for (std::size_t i = 0; i < aux_names.size(); ++i) {
      HostTensor v(static_cast<std::size_t>(aux_shapes[i].Size()));
      for (auto& x : v) x = 1 + u(rng) / 2;
      values[aux_names[i]] = v;
    }
    // Every value representable in the half type, so both networks start from the same numbers: the
    // differences are then the roundings inside the converted network only, and a relu's mask or a max
    // pool's choice cannot differ because an input was rounded across zero or past a neighbour.
    for (auto& [name, v] : values) {
      for (double& x : v) {
        x = target == DType::kBfloat16 ? static_cast<float>(bf16_t(static_cast<float>(x)))
                                       : static_cast<float>(half_t(static_cast<float>(x)));
      }
    }
    const Step ref = RunStep(net, values, shapes, engine());
    const Step got = RunStep(amp, values, shapes, engine());
    const auto norm = [](const HostTensor& v) {
      double s = 0;
      for (double x : v) s += x * x;
      return std::sqrt(s);
    };
    const auto close = [&](const HostTensor& a, const HostTensor& b, const std::string& what) {
      ASSERT_EQ(a.size(), b.size()) << what;
      HostTensor diff(a.size());
      for (std::size_t i = 0; i < a.size(); ++i) diff[i] = a[i] - b[i];
      ASSERT_GT(norm(a), 1e-6) << what << ": all zero, nothing compared";
      EXPECT_LE(norm(diff) / norm(a), tol) << what << " (" << DTypeName(target) << ", seed " << seed << ")";
    };
    close(ref.probs, got.probs, "softmax output");
    ASSERT_EQ(ref.grads.size(), got.grads.size());
    for (const auto& [name, g] : ref.grads) {
      EXPECT_EQ(got.grad_types.at(name), DType::kFloat32) << name;
      if (name == "c1_bias" && norm(ref.grads.at(name)) < 1e-4 * norm(ref.grads.at("c1_weight"))) {
        EXPECT_LE(norm(got.grads.at(name)), tol * norm(ref.grads.at("c1_weight"))) << name;
        continue;
      }
      close(g, got.grads.at(name), "gradient of " + name);
    }
    for (const auto& [name, a] : ref.aux) close(a, got.aux.at(name), "auxiliary state " + name);
  }

 private:
  std::unique_ptr<Engine> engine_;
};

// Single layers: every operator family of a converted CNN, its step against float32's. The errors are the half
// type's rounding of each operator's outputs (sums run in float32): relative L2 errors measured here up to
// 6.5e-3 for bfloat16 (8 bits of mantissa) and 8e-4 for float16 (11 bits). Max pooling is the exception:
// outputs of a window that round to the same half value tie, and the gradient goes to the first of them where
// float32 chose another (measured up to 8e-2 for bfloat16, rarely for float16 too: 4.7e-2 once).
std::vector<std::pair<std::string, Symbol>> LayerNets() {
  const Symbol x = Symbol::Variable("data");
  const auto head = [](const Symbol& h) {
    return Op("SoftmaxOutput", {}, {Op("FullyConnected", {{"num_hidden", "10"}}, {h}, "fc")}, "softmax");
  };
  const auto pool = [](const Symbol& h, const std::string& type) {
    return Op("Pooling", {{"global_pool", "true"}, {"pool_type", type}, {"kernel", "(1,1)"}}, {h}, "pool");
  };
  const Symbol c1 = Conv(x, 16, "c1", true);
  return {{"convolution", head(c1)},
          {"convolution + relu", head(Op("Activation", {{"act_type", "relu"}}, {c1}, "r1"))},
          {"convolution + batch norm", head(Op("BatchNorm", {{"fix_gamma", "false"}}, {c1}, "bn1"))},
          {"convolution + avg pool", head(pool(c1, "avg"))},
          {"convolution + max pool", head(Op("Pooling", {{"pool_type", "max"}, {"kernel", "(2,2)"}, {"stride", "(2,2)"}}, {c1}, "pool"))},
          {"convolution + tanh", head(Op("Activation", {{"act_type", "tanh"}}, {c1}, "t1"))},
          {"convolution + deconvolution",
           head(Op("Deconvolution", {{"kernel", "(4,4)"}, {"stride", "(2,2)"}, {"pad", "(1,1)"}, {"num_filter", "8"}, {"no_bias", "false"}},
                   {c1}, "d1"))}};
}

// A deconvolution computes in the half type where the lists put it: float16's list has it; bfloat16's (MXNet's)
// keeps it float32, unless target_dtype_ops names it.
TEST(AmpConvertTest, DeconvolutionRunsInTheHalfType) {
  const auto nets = LayerNets();
  const Symbol net = nets.back().second;
  ASSERT_EQ(nets.back().first, "convolution + deconvolution");
  for (DType t : {DType::kBfloat16, DType::kFloat16}) {
    SCOPED_TRACE(DTypeName(t));
    const Symbol internals = amp::ConvertSymbol(net, OptionsWith(t, {"Deconvolution"})).GetInternals();
    const auto outs = internals.ListOutputs();
    const auto at = std::find(outs.begin(), outs.end(), "d1_output");
    ASSERT_NE(at, outs.end());
    // Every argument float32, as a module binds them (the parameters stay float32 under AMP).
    const Symbol d1 = internals[static_cast<std::size_t>(at - outs.begin())];
    std::map<std::string, int> known;
    for (const std::string& a : d1.ListArguments()) known[a] = static_cast<int>(DType::kFloat32);
    std::vector<int> args, types, aux;
    ASSERT_TRUE(d1.InferType(known, &args, &types, &aux));
    EXPECT_EQ(types.at(0), static_cast<int>(t));
  }
}

TEST_P(AmpTrainTest, EachLayerMatchesFloat32WithinItsRounding) {
  for (const auto& [what, net] : LayerNets()) {
    SCOPED_TRACE(what);
    const bool max_pool = what == "convolution + max pool";
    // bfloat16's lists keep Deconvolution float32: moved, so that its bfloat16 path is what is compared.
    ExpectStepMatchesFloat32(DType::kBfloat16, max_pool ? 0.15 : 1.5e-2, net, {"Deconvolution"});
    ExpectStepMatchesFloat32(DType::kFloat16, max_pool ? 0.15 : 2e-3, net);
  }
}

// The residual block: an array with two consumers (its gradient summed in the half type), the sum, two batch
// normalisations, a relu after the sum. A relu's mask can differ where the rounded sum crosses zero, and the
// parameters before a batch normalisation get gradients that are small differences of large terms (its
// backward pass subtracts the batch means), which magnifies the rounding: relative L2 errors measured up to
// 9.4e-2 for bfloat16 and 6.4e-2 for float16 on the convolutions' weights, against 1 or more for a lost or
// doubled contribution.
TEST_P(AmpTrainTest, ResidualBlockMatchesFloat32WithinItsRounding) {
  ExpectStepMatchesFloat32(DType::kBfloat16, 0.2);
  ExpectStepMatchesFloat32(DType::kFloat16, 0.15);
}

INSTANTIATE_TEST_SUITE_P(Engines, AmpTrainTest,
                         ::testing::Values(test::EngineParam{EngineType::kActor, 2, 0},
                                           test::EngineParam{EngineType::kNaive, 1, 0}),
                         test::EngineParamName);

}  // namespace
}  // namespace troupe
