// Operators against MXNet 1.9.1, one case at a time: every case of data/ops/<family>.json (made by
// data/ops/make_op_cases.py with real MXNet) is a one-operator symbol as MXNet's tojson() wrote it, with its
// inputs, MXNet's outputs, the head gradients and MXNet's input gradients (data/ops/<family>.params). The
// case loads through troupe's symbol loader, binds on the CPU, runs Forward(is_train) and Backward, and
// every output and gradient must agree with MXNet's: forward within 1e-5 relative, backward within 1e-4
// (a case may state a looser bound for an operator whose float32 sums reassociate), integer outputs
// exactly.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "graph/executor.h"
#include "graph/symbol.h"
#include "tensor/ndarray.h"

namespace troupe {
namespace {

const std::string kOpsDir = std::string(TROUPE_TEST_DATA_DIR) + "/ops";

struct OpCaseRef {
  std::string family;
  nlohmann::json spec;
};
void PrintTo(const OpCaseRef& c, std::ostream* os) { *os << c.family << "/" << c.spec["name"].get<std::string>(); }

std::vector<OpCaseRef> ListCases() {
  std::vector<OpCaseRef> cases;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(kOpsDir)) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& p : files) {
    std::ifstream f(p);
    nlohmann::json j = nlohmann::json::parse(f);
    for (const auto& c : j["cases"]) cases.push_back({p.stem().string(), c});
  }
  return cases;
}

std::string CaseName(const testing::TestParamInfo<OpCaseRef>& info) {
  std::string n = info.param.family + "_" + info.param.spec["name"].get<std::string>();
  for (char& ch : n) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return n;
}

// The arrays of each family's .params, by name; loaded once per family and released before the process
// exits (the arrays' engine must outlive them).
std::map<std::string, std::map<std::string, NDArray>>& Loaded() {
  static std::map<std::string, std::map<std::string, NDArray>> loaded;
  return loaded;
}
class ReleaseArrays : public testing::Environment {
 public:
  void TearDown() override { Loaded().clear(); }
};
[[maybe_unused]] testing::Environment* const kReleaseArrays = testing::AddGlobalTestEnvironment(new ReleaseArrays);

const std::map<std::string, NDArray>& FamilyArrays(const std::string& family) {
  auto& loaded = Loaded();
  auto it = loaded.find(family);
  if (it != loaded.end()) return it->second;
  std::vector<NDArray> arrays;
  std::vector<std::string> names;
  NDArray::Load(kOpsDir + "/" + family + ".params", &arrays, &names);
  std::map<std::string, NDArray>& m = loaded[family];
  for (std::size_t i = 0; i < arrays.size(); ++i) m.emplace(names[i], arrays[i]);
  return m;
}

std::vector<double> AsDoubles(const NDArray& a) {
  NDArray d = a.dtype() == DType::kFloat64 ? a : a.AsType(DType::kFloat64);
  return d.ToVector<double>();
}

bool IsFloat(DType t) { return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16; }

// got against want: same dtype and shape; floats within rtol relative (atol near zero), integers exactly.
void ExpectClose(const NDArray& got, const NDArray& want, double rtol, const std::string& what) {
  ASSERT_EQ(static_cast<int>(got.dtype()), static_cast<int>(want.dtype())) << what << ": dtype";
  ASSERT_EQ(got.shape(), want.shape()) << what << ": shape";
  const std::vector<double> g = AsDoubles(got), w = AsDoubles(want);
  const bool exact = !IsFloat(want.dtype());
  const double atol = want.dtype() == DType::kFloat64 ? 1e-12 : 1e-6;
  int bad = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const bool same_nan = std::isnan(g[i]) && std::isnan(w[i]);
    const bool ok = exact ? g[i] == w[i] : same_nan || g[i] == w[i] || std::abs(g[i] - w[i]) <= atol + rtol * std::abs(w[i]);
    if (!ok && ++bad <= 5) ADD_FAILURE() << what << "[" << i << "]: troupe " << g[i] << ", MXNet " << w[i];
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << w.size() << " values differ";
}

class MxnetOpCase : public testing::TestWithParam<OpCaseRef> {};

TEST_P(MxnetOpCase, AgreesWithMxnet) {
  const OpCaseRef& c = GetParam();
  const std::string name = c.spec["name"];
  const auto& arrays = FamilyArrays(c.family);
  auto array = [&](const std::string& key) -> NDArray {
    auto it = arrays.find(name + "/" + key);
    if (it == arrays.end()) throw Error("no array " + name + "/" + key + " in " + c.family + ".params");
    return it->second;
  };
  const double rtol = c.spec.value("rtol", 1e-5);
  const double grad_rtol = c.spec.value("grad_rtol", 1e-4);

  Symbol sym = Symbol::FromJSON(c.spec["symbol"].get<std::string>());
  const std::vector<std::string> arg_names = sym.ListArguments();
  std::map<std::string, bool> wants_grad;
  for (const auto& a : c.spec["args"]) wants_grad[a["name"]] = a["grad"];
  std::vector<NDArray> args, grads;
  std::vector<OpReqType> req;
  for (const std::string& n : arg_names) {
    ASSERT_TRUE(wants_grad.count(n)) << "troupe lists argument " << n << " that MXNet did not";
    NDArray a = array("arg:" + n).CopyTo(Context::CPU());
    args.push_back(a);
    if (wants_grad[n]) {
      grads.push_back(NDArray::Zeros(a.shape(), Context::CPU(), a.dtype()));
      req.push_back(kWriteTo);
    } else {
      grads.push_back(NDArray());
      req.push_back(kNullOp);
    }
  }
  ASSERT_EQ(arg_names.size(), wants_grad.size());
  const bool backward = c.spec["backward"];
  std::unique_ptr<Executor> exe =
      backward ? Executor::Bind(sym, Context::CPU(), args, grads, req, {})
               : Executor::Bind(sym, Context::CPU(), args, {}, {kNullOp}, {});
  exe->Forward(true);
  const int n_out = c.spec["outputs"];
  ASSERT_EQ(exe->outputs().size(), static_cast<std::size_t>(n_out));
  for (int i = 0; i < n_out; ++i) {
    ExpectClose(exe->outputs()[i], array("out:" + std::to_string(i)), rtol, name + " output " + std::to_string(i));
  }
  if (!backward) return;
  std::vector<NDArray> heads;
  for (int i = 0; i < n_out; ++i) heads.push_back(array("ograd:" + std::to_string(i)));
  exe->Backward(heads);
  for (std::size_t k = 0; k < arg_names.size(); ++k) {
    if (req[k] == kNullOp) continue;
    ExpectClose(exe->grad_arrays()[k], array("grad:" + arg_names[k]), grad_rtol,
                name + " gradient of " + arg_names[k]);
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, MxnetOpCase, testing::ValuesIn(ListCases()), CaseName);

}  // namespace
}  // namespace troupe
