// Control-flow operators (_foreach, _while_loop, _cond) against MXNet 1.9.1 (data/control_flow/
// make_control_flow.py): symbols MXNet saved, run by troupe's Executor and by CachedOp under autograd, give
// MXNet's outputs and gradients; they survive a JSON round trip; a loop runs again with other inputs; bad
// subgraphs and parameters are errors naming the node.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "graph/cached_op.h"
#include "graph/control_flow.h"
#include "graph/executor.h"
#include "graph/symbol.h"
#include "op/autograd.h"
#include "tests/common/op_test_util.h"

namespace troupe {
namespace {

using test::ExpectCloseArrays;
using test::ExpectError;

const std::string kDir = std::string(TROUPE_TEST_DATA_DIR) + "/control_flow";

struct Case {
  std::string name;
  double tol = 1e-5;
  std::map<std::size_t, std::int64_t> defined_rows;  // output -> rows MXNet defines (the steps taken)
};

std::vector<Case> LoadCases() {
  std::ifstream f(kDir + "/cases.json");
  const nlohmann::json j = nlohmann::json::parse(f);
  std::vector<Case> cases;
  for (const auto& c : j) {
    Case k;
    k.name = c["name"];
    k.tol = c["dtype"] == "float64" ? 1e-10 : 1e-5;
    for (const auto& [out, rows] : c["defined_rows"].items()) k.defined_rows[std::stoul(out)] = rows.get<std::int64_t>();
    cases.push_back(k);
  }
  return cases;
}

const std::map<std::string, NDArray>& Fixtures() {
  static const auto fx = test::LoadNamed(kDir + "/control_flow.params");
  return fx;
}

NDArray Fx(const std::string& key) {
  auto it = Fixtures().find(key);
  if (it == Fixtures().end()) throw Error("no fixture " + key);
  return it->second.CopyTo(Context::CPU());
}

// Head gradient k of a case; zeros for an output MXNet's reference has none for (a while_loop's step outputs
// when it takes no step).
NDArray Head(const Case& c, std::size_t k, const NDArray& output) {
  const std::string key = c.name + ":head:" + std::to_string(k);
  if (Fixtures().count(key) != 0) return Fx(key);
  return NDArray::Zeros(output.shape(), output.ctx(), output.dtype());
}

// Output k against MXNet's: the rows MXNet defines; the rows after them (steps not taken) are zeros.
void ExpectOutput(const Case& c, std::size_t k, const NDArray& got) {
  const std::string what = c.name + " output " + std::to_string(k);
  const auto rows = c.defined_rows.find(k);
  NDArray want, mine = got;
  if (rows != c.defined_rows.end()) {
    ASSERT_GE(got.shape()[0], rows->second) << what;
    if (rows->second < got.shape()[0]) {
      const auto rest = got.Slice(rows->second, got.shape()[0]).AsType(DType::kFloat64).ToVector<double>();
      for (double v : rest) EXPECT_EQ(v, 0.0) << what << ": a row after the steps taken";
    }
    if (rows->second == 0) return;
    mine = got.Slice(0, rows->second);
    want = Fx(c.name + ":out:" + std::to_string(k)).Slice(0, rows->second);
  } else {
    want = Fx(c.name + ":out:" + std::to_string(k));
  }
  ExpectCloseArrays(mine, want, what, c.tol);
}

// A gradient against MXNet's; where MXNet's is all zero (an input only steps not taken read), ours must be too.
void ExpectGrad(const Case& c, const NDArray& got, const std::string& arg) {
  const NDArray want = Fx(c.name + ":grad:" + arg);
  const auto w = want.AsType(DType::kFloat64).ToVector<double>();
  if (std::all_of(w.begin(), w.end(), [](double v) { return v == 0.0; })) {
    ASSERT_EQ(got.shape(), want.shape()) << arg;
    for (double v : got.AsType(DType::kFloat64).ToVector<double>()) EXPECT_EQ(v, 0.0) << c.name << " gradient of " << arg;
    return;
  }
  ExpectCloseArrays(got, want, c.name + " gradient of " + arg, c.tol);
}

class ControlFlowCase : public ::testing::TestWithParam<Case> {};

TEST_P(ControlFlowCase, ExecutorMatchesMXNet) {
  const Case& c = GetParam();
  const Symbol sym = Symbol::Load(kDir + "/" + c.name + "-symbol.json");
  const auto names = sym.ListArguments();
  std::vector<NDArray> args, grads;
  for (const auto& n : names) {
    args.push_back(Fx(c.name + ":in:" + n));
    grads.push_back(NDArray(args.back().shape(), Context::CPU(), args.back().dtype()));
  }
  auto exec = Executor::Bind(sym, Context::CPU(), args, grads, {kWriteTo}, {});
  // Twice: the second pass runs on the executors the first one bound.
  for (int pass = 0; pass < 2; ++pass) {
    SCOPED_TRACE("pass " + std::to_string(pass));
    exec->Forward(true);
    std::vector<NDArray> heads;
    for (std::size_t k = 0; k < exec->outputs().size(); ++k) heads.push_back(Head(c, k, exec->outputs()[k]));
    exec->Backward(heads);
    for (std::size_t k = 0; k < exec->outputs().size(); ++k) ExpectOutput(c, k, exec->outputs()[k]);
    for (std::size_t i = 0; i < names.size(); ++i) {
      ExpectGrad(c, exec->grad_arrays()[i], names[i]);
    }
  }
  // Inference (no gradients) gives the same outputs.
  auto infer = Executor::Bind(sym, Context::CPU(), args, {}, {kNullOp}, {});
  infer->Forward(false);
  for (std::size_t k = 0; k < infer->outputs().size(); ++k) ExpectOutput(c, k, infer->outputs()[k]);
}

TEST_P(ControlFlowCase, CachedOpUnderAutogradMatchesMXNet) {
  const Case& c = GetParam();
  const Symbol sym = Symbol::Load(kDir + "/" + c.name + "-symbol.json");
  CachedOp op(sym);
  std::vector<NDArray> in;
  for (const auto& n : op.ListInputs()) {
    in.push_back(Fx(c.name + ":in:" + n));
    autograd::AttachGrad(&in.back());
  }
  std::vector<NDArray> out;
  {
    autograd::RecordScope record;
    out = op(in);
  }
  std::vector<NDArray> heads;
  for (std::size_t k = 0; k < out.size(); ++k) heads.push_back(Head(c, k, out[k]));
  autograd::Backward(out, heads);
  for (std::size_t k = 0; k < out.size(); ++k) ExpectOutput(c, k, out[k]);
  for (std::size_t i = 0; i < in.size(); ++i) {
    ExpectGrad(c, autograd::GradOf(in[i]), op.ListInputs()[i]);
  }
}

TEST_P(ControlFlowCase, JsonRoundTripKeepsTheSubgraphs) {
  const Case& c = GetParam();
  const Symbol sym = Symbol::Load(kDir + "/" + c.name + "-symbol.json");
  const Symbol back = Symbol::FromJSON(sym.ToJSON());
  EXPECT_EQ(back.ToJSON(), sym.ToJSON());
  EXPECT_EQ(back.ListArguments(), sym.ListArguments());
  std::vector<NDArray> args;
  for (const auto& n : back.ListArguments()) args.push_back(Fx(c.name + ":in:" + n));
  auto exec = Executor::Bind(back, Context::CPU(), args, {}, {kNullOp}, {});
  exec->Forward(true);
  for (std::size_t k = 0; k < exec->outputs().size(); ++k) ExpectOutput(c, k, exec->outputs()[k]);
}

INSTANTIATE_TEST_SUITE_P(MXNetFixtures, ControlFlowCase, ::testing::ValuesIn(LoadCases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

Case CaseNamed(const std::string& name) {
  for (const Case& c : LoadCases()) {
    if (c.name == name) return c;
  }
  throw Error("no case " + name);
}

// The usual training binding: the sequence without a gradient (kNullOp), the weights and the initial state with
// one: the weights' gradients are MXNet's.
TEST(ControlFlowTest, ForeachWithoutDataGradient) {
  const Case c = CaseNamed("foreach_rnn");
  const Symbol sym = Symbol::Load(kDir + "/foreach_rnn-symbol.json");
  const auto names = sym.ListArguments();
  std::vector<NDArray> args, grads;
  std::vector<OpReqType> reqs;
  for (const auto& n : names) {
    args.push_back(Fx(c.name + ":in:" + n));
    reqs.push_back(n == "data" ? kNullOp : kWriteTo);
    grads.push_back(n == "data" ? NDArray() : NDArray(args.back().shape(), Context::CPU(), args.back().dtype()));
  }
  auto exec = Executor::Bind(sym, Context::CPU(), args, grads, reqs, {});
  exec->Forward(true);
  std::vector<NDArray> heads;
  for (std::size_t k = 0; k < exec->outputs().size(); ++k) heads.push_back(Fx(c.name + ":head:" + std::to_string(k)));
  exec->Backward(heads);
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] != "data") ExpectCloseArrays(exec->grad_arrays()[i], Fx(c.name + ":grad:" + names[i]), names[i]);
  }
}

// The same loop with a state that makes the condition fail at once, then hold for every step: the number of
// steps follows the inputs from one Forward to the next.
TEST(ControlFlowTest, WhileLoopStepsFollowTheInputs) {
  const Symbol sym = Symbol::Load(kDir + "/while_counter-symbol.json");
  const auto names = sym.ListArguments();  // i, s, x, w
  ASSERT_EQ(names.front(), "i");
  std::vector<NDArray> args;
  for (const auto& n : names) args.push_back(Fx("while_counter:in:" + n));
  auto exec = Executor::Bind(sym, Context::CPU(), args, {}, {kNullOp}, {});
  for (float start : {4.0f, 7.0f, -10.0f}) {
    SCOPED_TRACE("i starts at " + std::to_string(start));
    NDArray i = args[0];
    i = start;
    exec->Forward(false);
    const std::int64_t steps = std::max<std::int64_t>(0, std::min<std::int64_t>(8, static_cast<std::int64_t>(5 - start)));
    // The counter ends at max(start, 5) unless max_iterations (8) stops it first.
    EXPECT_EQ(exec->outputs()[1].ToVector<float>()[0], start + static_cast<float>(steps));
    const auto rows = exec->outputs()[0].ToVector<float>();
    const std::size_t row = 6;  // elements per step output
    for (std::size_t r = 0; r < 8; ++r) {
      bool any = false;
      for (std::size_t e = 0; e < row; ++e) any = any || rows[r * row + e] != 0.0f;
      EXPECT_EQ(any, static_cast<std::int64_t>(r) < steps) << "row " << r;
    }
  }
}

// RunImperative (a block before it is hybridized) runs a control-flow node as one CachedOp call: same results.
TEST(ControlFlowTest, RunImperativeRunsTheNode) {
  const Symbol sym = Symbol::Load(kDir + "/foreach_rnn-symbol.json");
  std::vector<NDArray> in;
  for (const auto& n : sym.ListArguments()) {
    in.push_back(Fx("foreach_rnn:in:" + n));
    autograd::AttachGrad(&in.back());
  }
  std::vector<NDArray> out;
  {
    autograd::RecordScope record;
    out = RunImperative(sym, in);
  }
  std::vector<NDArray> heads;
  for (std::size_t k = 0; k < out.size(); ++k) heads.push_back(Fx("foreach_rnn:head:" + std::to_string(k)));
  autograd::Backward(out, heads);
  for (std::size_t k = 0; k < out.size(); ++k) {
    ExpectCloseArrays(out[k], Fx("foreach_rnn:out:" + std::to_string(k)), "output " + std::to_string(k));
  }
  const auto names = sym.ListArguments();
  for (std::size_t i = 0; i < in.size(); ++i) {
    ExpectCloseArrays(autograd::GradOf(in[i]), Fx("foreach_rnn:grad:" + names[i]), "gradient of " + names[i]);
  }
}

Symbol Op(const std::string& op, const std::vector<Symbol>& in, const Kwargs& params = {}) {
  return Symbol::Create(op, params, in);
}

// Binds `sym` to the case's inputs by name, runs forward and backward with its head gradients, and compares
// with MXNet's outputs and gradients.
void ExpectBuiltMatches(const Symbol& sym, const Case& c) {
  const auto names = sym.ListArguments();
  std::vector<NDArray> args, grads;
  for (const auto& n : names) {
    args.push_back(Fx(c.name + ":in:" + n));
    grads.push_back(NDArray(args.back().shape(), Context::CPU(), args.back().dtype()));
  }
  auto exec = Executor::Bind(sym, Context::CPU(), args, grads, {kWriteTo}, {});
  exec->Forward(true);
  std::vector<NDArray> heads;
  for (std::size_t k = 0; k < exec->outputs().size(); ++k) heads.push_back(Head(c, k, exec->outputs()[k]));
  exec->Backward(heads);
  for (std::size_t k = 0; k < exec->outputs().size(); ++k) ExpectOutput(c, k, exec->outputs()[k]);
  for (std::size_t i = 0; i < names.size(); ++i) ExpectGrad(c, exec->grad_arrays()[i], names[i]);
}

// The builders of graph/control_flow.h make the loops of the fixtures' MXNet scripts: the same results.
TEST(ControlFlowTest, BuiltForeachIsMXNets) {
  const Symbol w = Symbol::Variable("w"), u = Symbol::Variable("u"), b = Symbol::Variable("b");
  const Symbol loop = Foreach(
      [&](const std::vector<Symbol>& x, const std::vector<Symbol>& h) {
        const Symbol next = Op("tanh", {Op("broadcast_add", {Op("elemwise_add", {Op("dot", {x[0], w}), Op("dot", {h[0], u})}), b})});
        return LoopStep{{Op("_mul_scalar", {next}, {{"scalar", "2"}})}, {next}};
      },
      {Symbol::Variable("data")}, {Symbol::Variable("h0")});
  ASSERT_EQ(loop.NumOutputs(), 2u);
  ExpectBuiltMatches(loop, CaseNamed("foreach_rnn"));
  // Saved and loaded: the same node.
  EXPECT_EQ(Symbol::FromJSON(loop.ToJSON()).ToJSON(), loop.ToJSON());
}

TEST(ControlFlowTest, BuiltWhileLoopIsMXNets) {
  const Symbol x = Symbol::Variable("x"), w = Symbol::Variable("w");
  const Symbol loop = WhileLoop(
      [](const std::vector<Symbol>& v) { return Op("_lesser_scalar", {v[0]}, {{"scalar", "5"}}); },
      [&](const std::vector<Symbol>& v) {
        const Symbol s2 = Op("elemwise_add", {Op("elemwise_mul", {v[1], w}), x});
        return LoopStep{{Op("sin", {s2})}, {Op("_plus_scalar", {v[0]}, {{"scalar", "1"}}), s2}};
      },
      {Symbol::Variable("i"), Symbol::Variable("s")}, 8);
  ExpectBuiltMatches(loop, CaseNamed("while_counter"));
}

TEST(ControlFlowTest, BuiltCondIsMXNets) {
  const Symbol a = Symbol::Variable("a"), b = Symbol::Variable("b");
  const Symbol pred = Op("_greater_scalar", {Op("sum", {a})}, {{"scalar", "0"}});
  const Symbol branch = Cond(
      pred, [&] { return std::vector<Symbol>{Op("_plus_scalar", {Op("elemwise_mul", {a, b})}, {{"scalar", "1"}})}; },
      [&] { return std::vector<Symbol>{Op("elemwise_sub", {Op("exp", {a}), b})}; });
  ExpectBuiltMatches(branch, CaseNamed("cond_then"));
  ExpectBuiltMatches(branch, CaseNamed("cond_else"));
}

TEST(ControlFlowTest, BuilderErrors) {
  const Symbol x = Symbol::Variable("x"), s = Symbol::Variable("s");
  ExpectError([&] { Foreach([](auto&, auto& st) { return LoopStep{{st[0]}, {st[0]}}; }, {x}, {s}, "f"); },
              {"Foreach 'f'", "data row 0"});
  ExpectError([&] { Foreach([](auto& r, auto&) { return LoopStep{{r[0]}, {}}; }, {x}, {s}, "f"); },
              {"Foreach 'f'", "returns 0 states for 1"});
  ExpectError([&] { Foreach([](auto& r, auto&) { return LoopStep{{r[0]}, {}}; }, {}, {}, "f"); }, {"no data"});
  ExpectError(
      [&] {
        WhileLoop([](auto& v) { return v[0]; }, [](auto& v) { return LoopStep{{v[0]}, {v[0]}}; }, {x}, 0, "w");
      },
      {"WhileLoop 'w'", "max_iterations"});
  ExpectError([&] { Cond(x, [&] { return std::vector<Symbol>{x}; }, [] { return std::vector<Symbol>{}; }, "c"); },
              {"Cond 'c'", "same number"});
}

TEST(ControlFlowTest, BadNodesAreErrors) {
  // A control-flow node built without its subgraph cannot infer anything.
  const Symbol bare = Symbol::Create("_foreach",
                                     {{"num_args", "2"}, {"num_outputs", "1"}, {"num_out_data", "1"},
                                      {"in_data_locs", "[0]"}, {"in_state_locs", "[]"}, {"remain_locs", "[]"}},
                                     {Symbol::Variable("x")}, "loop");
  ExpectError([&] { Executor::SimpleBind(bare, Context::CPU(), {{"x", TShape{3, 2}}}, kNullOp); },
              {"loop", "_foreach", "no body"});
  // Locations that do not place every input.
  ExpectError(
      [] {
        Symbol::Create("_foreach",
                       {{"num_args", "3"}, {"num_outputs", "1"}, {"num_out_data", "1"}, {"in_data_locs", "[0]"},
                        {"in_state_locs", "[]"}, {"remain_locs", "[]"}},
                       {Symbol::Variable("x"), Symbol::Variable("y")});
      },
      {"_foreach", "num_args - 1"});
  // A subgraph whose input count disagrees with the node's: edit a saved file.
  std::ifstream f(kDir + "/cond_then-symbol.json");
  std::string json((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const std::string from = "\"then_input_locs\": \"[1, 2]\"";
  const auto at = json.find(from);
  ASSERT_NE(at, std::string::npos) << "the fixture changed: no " << from;
  json.replace(at, from.size(), "\"then_input_locs\": \"[1]\"");
  ExpectError([&] { Symbol::FromJSON(json); }, {"_cond", "then_branch", "inputs"});
}

}  // namespace
}  // namespace troupe
