// Whole models against MXNet 1.9.1: every case of data/models/models.json (made by
// data/models/make_model_cases.py with real MXNet, the Gluon model zoo, GluonCV and GluonNLP) is a network as
// MXNet exported it (<name>-symbol.json, loaded through troupe's symbol loader), its inputs and MXNet's
// outputs (<name>-io.params). The parameters are not stored: both sides fill every parameter and auxiliary
// state by the same formula of its name and position (ModelParamValue below, param_value() in the
// generator), so a model of millions of weights costs only its symbol file; image inputs are made the same
// way (formula_inputs). Forward runs in inference mode
// and every output must agree with MXNet's within the case's tolerance relative to the output's largest
// magnitude; detection outputs after NMS may be compared as sets of rows.
//
// TrainStep: the cases of data/models/train.json (made by make_train_cases.py) run one training step's
// forward (is_train: BatchNorm on the batch's statistics, updating its moving ones) and backward through
// SoftmaxOutput, and compare the probabilities, every auxiliary state after the forward and a digest of every
// parameter's gradient (largest magnitude, L2 norm, elements at spread positions) with MXNet's.
//
// GluonResNetV1: troupe's own models::ResNet (graph/models.h) against the model zoo's resnet<depth>_v1: the
// names and shapes of ResNet-50's parameters against MXNet's listing (data/models/resnet50_v1_param_shapes.json),
// and the forward output of every depth against the exported cases above, parameters filled under Gluon's names.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "graph/executor.h"
#include "graph/models.h"
#include "graph/symbol.h"
#include "tensor/ndarray.h"

namespace troupe {
namespace {

const std::string kModelsDir = std::string(TROUPE_TEST_DATA_DIR) + "/models";

// n well-spread numbers in [-1, 1) for `name`: SplitMix64 of the position i and a hash of the name, exact
// integer arithmetic on both sides (make_model_cases.py's _u must stay the same formula). A plain
// multiplicative sequence was too regular: its rows summed to nearly nothing and deep nets lost the input.
double SpreadValue(const std::string& name, std::int64_t i) {
  std::uint64_t h = 0;
  for (std::size_t k = 0; k < name.size(); ++k) h = (h + (k + 1) * static_cast<unsigned char>(name[k])) % 997;
  std::uint64_t z = static_cast<std::uint64_t>(i) + h * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z = z ^ (z >> 31);
  return static_cast<double>(z >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

// The value of element i of the parameter or auxiliary state `name` with shape `shape`: SpreadValue scaled
// by the kind of array so that activations stay of order one (He's variance 2 / fan_in for weights; the
// generator's param_value).
double ModelParamValue(const std::string& name, const TShape& shape, std::int64_t i) {
  const double u = SpreadValue(name, i);
  auto ends_with = [&](const char* s) {
    const std::string t(s);
    return name.size() >= t.size() && name.compare(name.size() - t.size(), t.size(), t) == 0;
  };
  if (ends_with("var")) return 0.75 + 0.25 * u;  // moving/running variance: positive
  if (ends_with("gamma")) return 1.0 + 0.1 * u;
  if (ends_with("beta") || ends_with("bias") || ends_with("mean")) return 0.01 * u;
  if (shape.ndim() >= 2 && shape[0] > 0) {
    const double fan_in = static_cast<double>(shape.Size() / shape[0]);
    return u * std::sqrt(6.0 / std::max(1.0, fan_in));  // variance 2 / fan_in
  }
  return 0.1 * u;
}

struct ModelCase {
  nlohmann::json spec;
};
void PrintTo(const ModelCase& c, std::ostream* os) { *os << c.spec["name"].get<std::string>(); }

std::vector<ModelCase> ListModels() {
  std::vector<ModelCase> out;
  const std::string index = kModelsDir + "/models.json";
  if (!std::filesystem::exists(index)) return out;
  std::ifstream f(index);
  const nlohmann::json j = nlohmann::json::parse(f);
  for (const auto& c : j["cases"]) out.push_back({c});
  return out;
}

std::string CaseName(const testing::TestParamInfo<ModelCase>& info) {
  std::string n = info.param.spec["name"];
  for (char& ch : n) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return n;
}

std::vector<double> AsDoubles(const NDArray& a) {
  NDArray d = a.dtype() == DType::kFloat64 ? a : a.AsType(DType::kFloat64);
  return d.ToVector<double>();
}

// Rows (last dimension) of a (..., k) array, sorted: for outputs whose row order is not defined (boxes of
// equal score after NMS).
std::vector<std::vector<double>> SortedRows(const std::vector<double>& v, std::int64_t k) {
  std::vector<std::vector<double>> rows;
  for (std::size_t i = 0; i + static_cast<std::size_t>(k) <= v.size(); i += static_cast<std::size_t>(k)) {
    rows.emplace_back(v.begin() + static_cast<std::ptrdiff_t>(i), v.begin() + static_cast<std::ptrdiff_t>(i + k));
  }
  std::sort(rows.begin(), rows.end());
  return rows;
}

class MxnetModelCase : public testing::TestWithParam<ModelCase> {};

TEST_P(MxnetModelCase, AgreesWithMxnet) {
  const nlohmann::json& c = GetParam().spec;
  const std::string name = c["name"];
  const double rtol = c.value("rtol", 1e-4);
  Symbol sym = Symbol::Load(kModelsDir + "/" + name + "-symbol.json");

  std::vector<NDArray> io;
  std::vector<std::string> io_names;
  NDArray::Load(kModelsDir + "/" + name + "-io.params", &io, &io_names);
  std::map<std::string, NDArray> given;
  for (std::size_t i = 0; i < io.size(); ++i) given[io_names[i]] = io[i];

  // Image inputs the generator made with its input_value(): computed here from name and shape, not stored.
  if (c.contains("formula_inputs")) {
    for (const auto& [input, dims] : c["formula_inputs"].items()) {
      const TShape shape(dims.get<std::vector<std::int64_t>>());
      std::vector<float> v(static_cast<std::size_t>(shape.Size()));
      for (std::int64_t i = 0; i < shape.Size(); ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(SpreadValue(input, i));
      given["in:" + input] = NDArray::FromVector<float>(v, shape, Context::CPU());
    }
  }
  std::map<std::string, TShape> known;
  for (const auto& [k, v] : given) {
    if (k.rfind("in:", 0) == 0) known[k.substr(3)] = v.shape();
  }
  std::vector<TShape> arg_shapes, out_shapes, aux_shapes;
  std::string why;
  ASSERT_TRUE(sym.InferShape(known, &arg_shapes, &out_shapes, &aux_shapes, &why)) << why;
  std::map<std::string, int> known_types;
  for (const auto& [k, v] : given) {
    if (k.rfind("in:", 0) == 0) known_types[k.substr(3)] = static_cast<int>(v.dtype());
  }
  std::vector<int> arg_types, out_types, aux_types;
  ASSERT_TRUE(sym.InferType(known_types, &arg_types, &out_types, &aux_types, &why)) << why;

  auto fill = [](const std::string& n, const TShape& s, int type) {
    std::vector<double> v(static_cast<std::size_t>(s.Size()));
    for (std::int64_t i = 0; i < s.Size(); ++i) v[static_cast<std::size_t>(i)] = ModelParamValue(n, s, i);
    NDArray d = NDArray::FromVector<double>(v, s, Context::CPU());
    return type == static_cast<int>(DType::kFloat64) ? d : d.AsType(static_cast<DType>(type));
  };
  const auto arg_names = sym.ListArguments();
  std::vector<NDArray> args;
  for (std::size_t i = 0; i < arg_names.size(); ++i) {
    auto it = given.find("in:" + arg_names[i]);
    args.push_back(it != given.end() ? it->second.CopyTo(Context::CPU()) : fill(arg_names[i], arg_shapes[i], arg_types[i]));
  }
  const auto aux_names = sym.ListAuxiliaryStates();
  std::vector<NDArray> aux;
  for (std::size_t i = 0; i < aux_names.size(); ++i) aux.push_back(fill(aux_names[i], aux_shapes[i], aux_types[i]));

  auto exe = Executor::Bind(sym, Context::CPU(), args, {}, {kNullOp}, aux);
  exe->Forward(false);
  const int n_out = c["outputs"];
  ASSERT_EQ(exe->outputs().size(), static_cast<std::size_t>(n_out));
  const auto sorted = c.value("sorted_rows", std::vector<int>{});
  for (int k = 0; k < n_out; ++k) {
    const NDArray want = given.at("out:" + std::to_string(k));
    const NDArray& got = exe->outputs()[static_cast<std::size_t>(k)];
    ASSERT_EQ(got.shape(), want.shape()) << name << " output " << k;
    std::vector<double> g = AsDoubles(got), w = AsDoubles(want);
    if (std::find(sorted.begin(), sorted.end(), k) != sorted.end()) {
      const std::int64_t cols = want.shape()[want.shape().ndim() - 1];
      auto gs = SortedRows(g, cols), ws = SortedRows(w, cols);
      g.clear();
      w.clear();
      for (const auto& r : gs) g.insert(g.end(), r.begin(), r.end());
      for (const auto& r : ws) w.insert(w.end(), r.begin(), r.end());
    }
    // The scale is the largest finite magnitude; equal values (infinities included: a box decoded from an
    // overflowing offset) agree, and NaN agrees with NaN.
    double scale = 0;
    for (double x : w) {
      if (std::isfinite(x)) scale = std::max(scale, std::abs(x));
    }
    int bad = 0;
    double worst = 0;
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i]))) continue;
      const double err = std::abs(g[i] - w[i]);
      worst = std::max(worst, err / std::max(scale, 1e-30));
      if (!(err <= rtol * scale) && ++bad <= 5) {
        ADD_FAILURE() << name << " output " << k << "[" << i << "]: troupe " << g[i] << ", MXNet " << w[i]
                      << " (scale " << scale << ")";
      }
    }
    EXPECT_EQ(bad, 0) << name << " output " << k << ": " << bad << " of " << w.size()
                      << " values differ; worst error " << worst << " of the largest magnitude";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, MxnetModelCase, testing::ValuesIn(ListModels()), CaseName);

// Every element of `got` within rtol * scale of `want` (scale: want's largest magnitude, at least `floor`).
void ExpectClose(const std::vector<double>& got, const std::vector<double>& want, double rtol, double floor,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = floor;
  for (double x : want) scale = std::max(scale, std::abs(x));
  int bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!(std::abs(got[i] - want[i]) <= rtol * scale) && ++bad <= 3) {
      ADD_FAILURE() << what << "[" << i << "]: troupe " << got[i] << ", MXNet " << want[i] << " (scale " << scale << ")";
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << want.size() << " values differ";
}

// --- models::ResNet (graph/models.h) against the Gluon model zoo's resnet<depth>_v1 --------------------------

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Gluon's names (prefix resnetv10_, as in the exported cases) of the parameters and auxiliary states of
// models::ResNet, keyed by troupe's names. Gluon numbers the convolutions and BatchNorms of the stem and of each
// stage in the order its blocks create them (a block's body, then its shortcut), which is the order of troupe's
// ListArguments; the fully connected layer is dense0, moving_mean / moving_var are running_mean / running_var.
std::map<std::string, std::string> GluonResNetNames(const Symbol& net) {
  static const std::vector<std::pair<std::string, std::string>> kSuffixes = {
      {"_weight", "_weight"}, {"_bias", "_bias"}, {"_gamma", "_gamma"}, {"_beta", "_beta"},
      {"_moving_mean", "_running_mean"}, {"_moving_var", "_running_var"}};
  std::map<std::string, std::string> layers;  // troupe's layer -> Gluon's
  std::map<std::string, int> convs, bns;      // per stage ("" for the stem)
  std::map<std::string, std::string> out;
  auto names = net.ListArguments();
  for (const auto& a : net.ListAuxiliaryStates()) names.push_back(a);
  for (const std::string& n : names) {
    if (n == "data" || n == "softmax_label") continue;
    const auto suffix =
        std::find_if(kSuffixes.begin(), kSuffixes.end(), [&](const auto& s) { return EndsWith(n, s.first); });
    if (suffix == kSuffixes.end()) {
      ADD_FAILURE() << "unexpected parameter name " << n;
      continue;
    }
    const std::string layer = n.substr(0, n.size() - suffix->first.size());
    if (!layers.count(layer)) {
      const std::string stage = layer.rfind("stage", 0) == 0 ? layer.substr(0, layer.find('_') + 1) : "";
      if (layer == "fc") {
        layers[layer] = "dense0";
      } else if (suffix->first == "_weight") {
        layers[layer] = stage + "conv" + std::to_string(convs[stage]++);
      } else {
        layers[layer] = stage + "batchnorm" + std::to_string(bns[stage]++);
      }
    }
    out[n] = "resnetv10_" + layers[layer] + suffix->second;
  }
  return out;
}

// Every parameter and auxiliary state of models::ResNet(50, 1000, false) has the name (in Gluon's naming) and
// the shape of Gluon's resnet50_v1 with 1000 classes, listed by MXNet 1.9.1 (make_model_cases.py
// --param-shapes), in the same order, and the trained elements add up to Gluon's count.
TEST(GluonResNetV1, ResNet50ParametersAreGluons) {
  std::ifstream f(kModelsDir + "/resnet50_v1_param_shapes.json");
  ASSERT_TRUE(f) << kModelsDir << "/resnet50_v1_param_shapes.json";
  const nlohmann::json listing = nlohmann::json::parse(f);
  const Symbol net = models::ResNet(50, 1000, false);
  std::vector<TShape> arg_shapes, out_shapes, aux_shapes;
  ASSERT_TRUE(net.InferShape({{"data", TShape{1, 3, 224, 224}}}, &arg_shapes, &out_shapes, &aux_shapes));
  const auto gluon = GluonResNetNames(net);
  // troupe's parameters then its auxiliary states, in Gluon's names, against Gluon's trained and untrained lists.
  std::vector<std::pair<std::string, TShape>> trained, states, want_trained, want_states;
  const auto args = net.ListArguments(), aux = net.ListAuxiliaryStates();
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] != "data" && args[i] != "softmax_label") trained.emplace_back(gluon.at(args[i]), arg_shapes[i]);
  }
  for (std::size_t i = 0; i < aux.size(); ++i) states.emplace_back(gluon.at(aux[i]), aux_shapes[i]);
  std::int64_t count = 0;
  for (const auto& p : listing["params"]) {
    const TShape shape(p[1].get<std::vector<std::int64_t>>());
    (p[2].get<bool>() ? want_trained : want_states).emplace_back(p[0].get<std::string>(), shape);
    if (p[2].get<bool>()) count += shape.Size();
  }
  EXPECT_EQ(trained, want_trained);
  EXPECT_EQ(states, want_states);
  EXPECT_EQ(count, listing["trained_count"].get<std::int64_t>());
  // 53 convolution weights, 32 biases (the two 1x1 body convolutions of 16 blocks), 53 BatchNorms (gamma and
  // beta), fc (weight and bias); and each BatchNorm's two moving statistics.
  EXPECT_EQ(trained.size(), 193u);
  EXPECT_EQ(states.size(), 106u);
  EXPECT_EQ(out_shapes.at(0), (TShape{1, 1000}));
}

// Forward numerics of every depth against the model zoo's exported cases (resnet<depth>_v1, 10 classes,
// 1x3x32x32, the same formula parameters and input as MxnetModelCase): troupe's logits (fc_output) within
// the cases' default 1e-4 of MXNet's largest output. The exported symbols' arguments must be exactly the
// Gluon names of troupe's, with the same shapes.
TEST(GluonResNetV1, ForwardAgreesWithGluonForEveryDepth) {
  for (int depth : {18, 34, 50, 101, 152}) {
    const std::string name = "resnet" + std::to_string(depth) + "_v1";
    SCOPED_TRACE(name);
    const Symbol full = models::ResNet(depth, 10, false);
    const Symbol internals = full.GetInternals();
    const auto outputs = internals.ListOutputs();
    const auto fc = std::find(outputs.begin(), outputs.end(), "fc_output");
    ASSERT_NE(fc, outputs.end());
    const Symbol net = internals[static_cast<std::size_t>(fc - outputs.begin())];
    const Symbol exported = Symbol::Load(kModelsDir + "/" + name + "-symbol.json");
    const TShape data_shape{1, 3, 32, 32};
    std::vector<TShape> arg_shapes, out_shapes, aux_shapes, g_arg_shapes, g_aux_shapes;
    ASSERT_TRUE(net.InferShape({{"data", data_shape}}, &arg_shapes, &out_shapes, &aux_shapes));
    ASSERT_TRUE(exported.InferShape({{"data", data_shape}}, &g_arg_shapes, &out_shapes, &g_aux_shapes));
    std::map<std::string, TShape> gluon_shapes;
    const auto g_args = exported.ListArguments(), g_aux = exported.ListAuxiliaryStates();
    for (std::size_t i = 0; i < g_args.size(); ++i) gluon_shapes[g_args[i]] = g_arg_shapes[i];
    for (std::size_t i = 0; i < g_aux.size(); ++i) gluon_shapes[g_aux[i]] = g_aux_shapes[i];

    const auto gluon = GluonResNetNames(net);
    std::map<std::string, TShape> mapped_shapes{{"data", data_shape}};
    auto value = [&](const std::string& n, const TShape& s) {
      const std::string& g = gluon.at(n);
      mapped_shapes[g] = s;
      std::vector<double> v(static_cast<std::size_t>(s.Size()));
      for (std::int64_t i = 0; i < s.Size(); ++i) v[static_cast<std::size_t>(i)] = ModelParamValue(g, s, i);
      return NDArray::FromVector<double>(v, s, Context::CPU()).AsType(DType::kFloat32);
    };
    const auto arg_names = net.ListArguments(), aux_names = net.ListAuxiliaryStates();
    std::vector<NDArray> args, aux;
    for (std::size_t i = 0; i < arg_names.size(); ++i) {
      if (arg_names[i] == "data") {
        std::vector<float> v(static_cast<std::size_t>(data_shape.Size()));
        for (std::int64_t j = 0; j < data_shape.Size(); ++j) {
          v[static_cast<std::size_t>(j)] = static_cast<float>(SpreadValue("data", j));
        }
        args.push_back(NDArray::FromVector<float>(v, data_shape, Context::CPU()));
      } else {
        args.push_back(value(arg_names[i], arg_shapes[i]));
      }
    }
    for (std::size_t i = 0; i < aux_names.size(); ++i) aux.push_back(value(aux_names[i], aux_shapes[i]));
    ASSERT_EQ(mapped_shapes, gluon_shapes);

    std::vector<NDArray> io;
    std::vector<std::string> io_names;
    NDArray::Load(kModelsDir + "/" + name + "-io.params", &io, &io_names);
    const auto out = std::find(io_names.begin(), io_names.end(), "out:0");
    ASSERT_NE(out, io_names.end());
    auto exe = Executor::Bind(net, Context::CPU(), args, {}, {kNullOp}, aux);
    exe->Forward(false);
    ASSERT_EQ(exe->outputs().at(0).shape(), (TShape{1, 10}));
    ExpectClose(AsDoubles(exe->outputs()[0]), AsDoubles(io[static_cast<std::size_t>(out - io_names.begin())]), 1e-4, 0,
                name + " logits");
  }
}

// make_train_cases.py's digest of a gradient: largest magnitude, L2 norm, then up to 61 elements at
// np.unique(np.linspace(0, n - 1, min(61, n)).astype(int64)).
std::vector<double> GradientDigest(const NDArray& g) {
  const std::vector<double> v = AsDoubles(g);
  double absmax = 0, sq = 0;
  for (double x : v) {
    absmax = std::max(absmax, std::abs(x));
    sq += x * x;
  }
  std::vector<double> d{absmax, std::sqrt(sq)};
  const std::int64_t n = static_cast<std::int64_t>(v.size());
  const std::int64_t k = std::min<std::int64_t>(61, n);
  std::int64_t last = -1;
  for (std::int64_t j = 0; j < k; ++j) {
    // NumPy's linspace: start + j * step, step = (n - 1) / (k - 1), truncated toward zero by astype.
    const double step = k > 1 ? static_cast<double>(n - 1) / static_cast<double>(k - 1) : 0.0;
    const auto pos = j == k - 1 && k > 1 ? n - 1 : static_cast<std::int64_t>(static_cast<double>(j) * step);
    if (pos != last) d.push_back(v[static_cast<std::size_t>(pos)]);
    last = pos;
  }
  return d;
}

std::vector<nlohmann::json> ListTrainCases() {
  std::vector<nlohmann::json> out;
  const std::string index = kModelsDir + "/train.json";
  if (!std::filesystem::exists(index)) return out;
  std::ifstream f(index);
  const nlohmann::json j = nlohmann::json::parse(f);
  for (const auto& c : j["cases"]) out.push_back(c);
  return out;
}

TEST(MxnetTrainStep, ForwardAndBackwardAgreeWithMxnet) {
  const auto cases = ListTrainCases();
  ASSERT_FALSE(cases.empty()) << kModelsDir << "/train.json";
  for (const nlohmann::json& c : cases) {
    const std::string name = c["name"];
    SCOPED_TRACE(name);
    const TShape data_shape(c["data"].get<std::vector<std::int64_t>>());
    Symbol net = Symbol::Create("SoftmaxOutput", {}, {Symbol::Load(kModelsDir + "/" + name + "-symbol.json")}, "softmax");
    std::vector<NDArray> ref;
    std::vector<std::string> ref_names;
    NDArray::Load(kModelsDir + "/" + name + "-train.params", &ref, &ref_names);
    std::map<std::string, NDArray> want;
    for (std::size_t i = 0; i < ref.size(); ++i) want[ref_names[i]] = ref[i];

    std::vector<TShape> arg_shapes, out_shapes, aux_shapes;
    std::string why;
    ASSERT_TRUE(net.InferShape({{"data", data_shape}}, &arg_shapes, &out_shapes, &aux_shapes, &why)) << why;
    const DType dtype = c.value("dtype", "float32") == "float64" ? DType::kFloat64 : DType::kFloat32;
    auto fill = [dtype](const std::string& n, const TShape& s) {
      std::vector<double> v(static_cast<std::size_t>(s.Size()));
      for (std::int64_t i = 0; i < s.Size(); ++i) v[static_cast<std::size_t>(i)] = ModelParamValue(n, s, i);
      NDArray d = NDArray::FromVector<double>(v, s, Context::CPU());
      return dtype == DType::kFloat64 ? d : d.AsType(dtype);
    };
    const auto arg_names = net.ListArguments();
    std::vector<NDArray> args, grads;
    std::vector<OpReqType> req;
    for (std::size_t i = 0; i < arg_names.size(); ++i) {
      const std::string& n = arg_names[i];
      if (n == "data") {
        std::vector<float> v(static_cast<std::size_t>(data_shape.Size()));
        for (std::int64_t j = 0; j < data_shape.Size(); ++j) {
          v[static_cast<std::size_t>(j)] = static_cast<float>(SpreadValue("data", j));
        }
        NDArray d = NDArray::FromVector<float>(v, data_shape, Context::CPU());  // float32 values, as MXNet's
        args.push_back(dtype == DType::kFloat32 ? d : d.AsType(dtype));
      } else if (n == "softmax_label") {
        args.push_back(want.at("in:softmax_label").AsType(dtype));
      } else {
        args.push_back(fill(n, arg_shapes[i]));
      }
      const bool param = n != "data" && n != "softmax_label";
      grads.push_back(param ? NDArray::Zeros(arg_shapes[i], Context::CPU(), dtype) : NDArray());
      req.push_back(param ? kWriteTo : kNullOp);
    }
    const auto aux_names = net.ListAuxiliaryStates();
    std::vector<NDArray> aux;
    for (std::size_t i = 0; i < aux_names.size(); ++i) aux.push_back(fill(aux_names[i], aux_shapes[i]));

    auto exe = Executor::Bind(net, Context::CPU(), args, grads, req, aux);
    exe->Forward(true);
    exe->Backward();
    // float32: rounding differences of the two sides' kernels grow through a deep network's backward (a ReLU
    // whose input is near 0 passes the gradient on one side only); float64 leaves them no room.
    const double rtol = dtype == DType::kFloat64 ? 1e-9 : 1e-4, grad_rtol = dtype == DType::kFloat64 ? 1e-9 : 1e-3;
    ExpectClose(AsDoubles(exe->outputs()[0]), AsDoubles(want.at("out:0")), rtol, 0, "probabilities");
    for (std::size_t i = 0; i < aux_names.size(); ++i) {
      ExpectClose(AsDoubles(exe->aux_arrays()[i]), AsDoubles(want.at("aux:" + aux_names[i])), rtol, 0, aux_names[i]);
    }
    for (std::size_t i = 0; i < arg_names.size(); ++i) {
      if (req[i] == kNullOp) continue;
      const std::vector<double> w = AsDoubles(want.at("grad:" + arg_names[i]));
      // Relative to the gradient's largest magnitude (w[0]; the norm w[1] is at most sqrt(n) times it).
      std::vector<double> g = GradientDigest(exe->grad_arrays()[i]);
      ExpectClose(g, w, grad_rtol, 1e-12, "gradient of " + arg_names[i]);
    }
  }
}
// A data directory without models.json has no cases; that is not an error of the suite.
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(MxnetModelCase);

}  // namespace
}  // namespace troupe
