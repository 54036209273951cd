// Executor (graph/executor.h) and its memory planner (graph/internal/memory_plan.h).
//
// Forward values are checked against references computed here in plain C++; gradients against central
// differences of the forward pass (float64, so the tolerances are tight); the memory plan against the
// same run without planning (bit-identical outputs and gradients) and against hand-built plans.
#include "graph/executor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "graph/internal/memory_plan.h"
#include "graph/models.h"
#include "graph/symbol.h"
#include "tests/common/op_test_util.h"
#include "tests/common/test_params.h"

namespace troupe {
namespace {

using test::ExpectError;
using test::HostTensor;

// ------------------------------------------------------------------------------------- memory planner

using graph::MemoryPlan;
using graph::PlanEntry;
using graph::PlanMemory;
using graph::PlanStep;

PlanEntry Planned(std::int64_t bytes, int dtype = 0) { return {PlanEntry::kPlanned, bytes, dtype}; }

TEST(MemoryPlanTest, ChainReusesReleasedBuffersAndTakesInputsInPlace) {
  // x (external) -> a -> b -> c -> d, each step reading the previous entry. b may take a's memory in place;
  // c cannot be in place (no option) so it takes new storage; d reuses b's released storage.
  std::vector<PlanEntry> e = {{PlanEntry::kExternal, 64, 0}, Planned(64), Planned(64), Planned(64), Planned(64)};
  std::vector<PlanStep> steps(4);
  steps[0] = {{0}, {1}, {{0, 1}}};  // in place on an external entry: refused
  steps[1] = {{1}, {2}, {{1, 2}}};
  steps[2] = {{2}, {3}, {}};
  steps[3] = {{3}, {4}, {}};
  MemoryPlan p = PlanMemory(e, steps, true);
  EXPECT_EQ(p.storage[0], -1);
  EXPECT_FALSE(p.inplace[1]);
  EXPECT_TRUE(p.inplace[2]);
  EXPECT_EQ(p.storage[2], p.storage[1]);
  EXPECT_NE(p.storage[3], p.storage[2]);
  EXPECT_EQ(p.storage[4], p.storage[2]);  // released after step 2
  EXPECT_EQ(p.stats.naive_bytes, 4 * 64);
  EXPECT_EQ(p.stats.planned_bytes, 2 * 64);
  EXPECT_EQ(p.stats.inplace, 1);
  EXPECT_EQ(p.stats.reused, 1);

  MemoryPlan off = PlanMemory(e, steps, false);
  EXPECT_EQ(off.stats.planned_bytes, 4 * 64);
  EXPECT_EQ(off.stats.inplace, 0);
  EXPECT_EQ(off.stats.reused, 0);
  for (int i = 1; i < 5; ++i) EXPECT_EQ(off.storage[i], i - 1);
}

TEST(MemoryPlanTest, InPlaceNeedsTheLastReaderAndEqualSizes) {
  // a is read by steps 1 and 2: step 1 may not write over it. c differs in size from b.
  std::vector<PlanEntry> e = {Planned(32), Planned(32), Planned(16), Planned(32)};
  std::vector<PlanStep> steps(4);
  steps[0] = {{}, {0}, {}};
  steps[1] = {{0}, {1}, {{0, 1}}};
  steps[2] = {{0, 1}, {2}, {{1, 2}}};
  steps[3] = {{2}, {3}, {{2, 3}}};
  MemoryPlan p = PlanMemory(e, steps, true);
  EXPECT_FALSE(p.inplace[1]);
  EXPECT_FALSE(p.inplace[2]);
  EXPECT_FALSE(p.inplace[3]);
  // 3 (32 bytes) reuses a 32-byte buffer released after step 2 (a's or b's), not c's.
  EXPECT_NE(p.storage[3], p.storage[2]);
  EXPECT_TRUE(p.storage[3] == p.storage[0] || p.storage[3] == p.storage[1]);
  EXPECT_EQ(p.stats.reused, 1);
}

TEST(MemoryPlanTest, DedicatedEntriesAreNeverSharedAndBestFitPicksTheSmallest) {
  std::vector<PlanEntry> e = {Planned(100), Planned(40), {PlanEntry::kDedicated, 40, 0}, Planned(30), Planned(30, 1)};
  std::vector<PlanStep> steps(4);
  steps[0] = {{}, {0, 1}, {}};      // both released at once (never read)
  steps[1] = {{}, {2}, {}};         // dedicated: own storage although 0 and 1 are free
  steps[2] = {{2}, {3}, {{2, 3}}};  // not in place on a dedicated entry; best fit is the 40-byte buffer
  steps[3] = {{}, {4}, {}};         // another dtype: no reuse
  MemoryPlan p = PlanMemory(e, steps, true);
  EXPECT_NE(p.storage[2], p.storage[0]);
  EXPECT_NE(p.storage[2], p.storage[1]);
  EXPECT_FALSE(p.inplace[3]);
  EXPECT_EQ(p.storage[3], p.storage[1]);
  EXPECT_NE(p.storage[4], p.storage[0]);
  EXPECT_EQ(p.stats.planned_bytes, 100 + 40 + 40 + 30);
}

// ------------------------------------------------------------------------------------------- helpers

class ExecutorTest : public ::testing::TestWithParam<test::EngineParam> {
 protected:
  void SetUp() override { engine_ = test::MakeEngine(GetParam()); }
  void TearDown() override {
    if (engine_ != nullptr) engine_->WaitForAll();
    engine_.reset();
  }

  NDArray Array(const HostTensor& v, const TShape& s, DType dtype = DType::kFloat64) {
    NDArray d = NDArray::FromVector<double>(v, s, Context::CPU(), engine_.get());
    return dtype == DType::kFloat64 ? d : d.AsType(dtype);
  }
  NDArray Zeros(const TShape& s, DType dtype = DType::kFloat64) {
    return NDArray::Zeros(s, Context::CPU(), dtype, engine_.get());
  }

  // Binds `sym` with float64 arrays holding `values` (by argument name; every argument must be given),
  // gradients where `req` (or req_by_name) asks, and aux states from `aux` (by name).
  std::unique_ptr<Executor> BindValues(const Symbol& sym, const std::map<std::string, HostTensor>& values,
                                       const std::map<std::string, TShape>& shapes, OpReqType req,
                                       const std::map<std::string, OpReqType>& req_by_name = {},
                                       const std::map<std::string, HostTensor>& aux_values = {}, bool plan = true) {
    std::vector<NDArray> args, grads, aux;
    std::vector<OpReqType> reqs;
    for (const auto& name : sym.ListArguments()) {
      args.push_back(Array(values.at(name), shapes.at(name)));
      auto it = req_by_name.find(name);
      reqs.push_back(it != req_by_name.end() ? it->second : req);
      grads.push_back(reqs.back() == kNullOp ? NDArray() : Zeros(shapes.at(name)));
    }
    for (const auto& name : sym.ListAuxiliaryStates()) aux.push_back(Array(aux_values.at(name), shapes.at(name)));
    ExecutorOptions opt;
    opt.plan_memory = plan;
    opt.engine = engine_.get();
    opt.bulk_max_nodes = bulk_max_nodes_;
    return Executor::Bind(sym, Context::CPU(), args, grads, reqs, aux, opt);
  }

  std::unique_ptr<Engine> engine_;
  int bulk_max_nodes_ = -1;  // BindValues' ExecutorOptions::bulk_max_nodes
};

HostTensor Random(std::int64_t n, std::mt19937_64* rng, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> u(lo, hi);
  HostTensor v(static_cast<std::size_t>(n));
  for (auto& x : v) x = u(*rng);
  return v;
}

Symbol Var(const std::string& name) { return Symbol::Variable(name); }
// Positional inputs spelled out: a braced list of two symbols also matches Create's by-name overload.
Symbol Op(const std::string& op, const Kwargs& params, const std::vector<Symbol>& inputs, const std::string& name) {
  return Symbol::Create(op, params, inputs, name);
}
Symbol FC(const Symbol& x, int hidden, const std::string& name) {
  return Symbol::Create("FullyConnected", {{"num_hidden", std::to_string(hidden)}}, {x}, name);
}
Symbol Act(const Symbol& x, const std::string& type, const std::string& name) {
  return Symbol::Create("Activation", {{"act_type", type}}, {x}, name);
}

// y = x W^T + b for x (n, k), W (h, k), b (h).
HostTensor RefFC(const HostTensor& x, const HostTensor& w, const HostTensor& b, int n, int k, int h) {
  HostTensor y(static_cast<std::size_t>(n * h));
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < h; ++j) {
      double s = b[j];
      for (int t = 0; t < k; ++t) s += x[i * k + t] * w[j * k + t];
      y[i * h + j] = s;
    }
  }
  return y;
}

void ExpectNear(const HostTensor& got, const HostTensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << " [" << i << "]";
  }
}

// --------------------------------------------------------------------------------------------- forward

TEST_P(ExecutorTest, ForwardOfFullyConnectedAndActivationMatchesReference) {
  std::mt19937_64 rng(test::TestSeed());
  Symbol net = Act(FC(Var("data"), 4, "fc1"), "relu", "relu1");
  const int n = 3, k = 5, h = 4;
  std::map<std::string, TShape> shapes = {{"data", {n, k}}, {"fc1_weight", {h, k}}, {"fc1_bias", {h}}};
  std::map<std::string, HostTensor> v = {
      {"data", Random(n * k, &rng)}, {"fc1_weight", Random(h * k, &rng)}, {"fc1_bias", Random(h, &rng)}};
  HostTensor want = RefFC(v["data"], v["fc1_weight"], v["fc1_bias"], n, k, h);
  for (auto& y : want) y = std::max(0.0, y);
  for (bool plan : {true, false}) {
    auto exec = BindValues(net, v, shapes, kNullOp, {}, {}, plan);
    exec->Forward(false);
    ASSERT_EQ(exec->outputs().size(), 1u);
    EXPECT_EQ(exec->outputs()[0].shape(), TShape({n, h}));
    ExpectNear(exec->outputs()[0].ToVector<double>(), want, 1e-12, plan ? "planned" : "unplanned");
    // Changing an argument through arg_dict changes the next forward.
    NDArray x = exec->arg_dict().at("data");
    HostTensor x2 = Random(n * k, &rng);
    x.SyncCopyFromCPU(x2.data(), x2.size() * sizeof(double));
    exec->Forward(false);
    HostTensor want2 = RefFC(x2, v["fc1_weight"], v["fc1_bias"], n, k, h);
    for (auto& y : want2) y = std::max(0.0, y);
    ExpectNear(exec->outputs()[0].ToVector<double>(), want2, 1e-12, "after changing data");
  }
}

TEST_P(ExecutorTest, GroupedOutputsAndInternalEntriesAreAllComputed) {
  // Group(fc1, tanh(fc1), fc2(tanh(fc1))): an output that other nodes also read keeps its own buffer.
  std::mt19937_64 rng(test::TestSeed());
  Symbol fc1 = FC(Var("data"), 3, "fc1");
  Symbol t = Act(fc1, "tanh", "tanh1");
  Symbol fc2 = FC(t, 2, "fc2");
  Symbol net = Symbol::Group({fc1, t, fc2});
  const int n = 2, k = 4;
  std::map<std::string, TShape> shapes = {
      {"data", {n, k}}, {"fc1_weight", {3, k}}, {"fc1_bias", {3}}, {"fc2_weight", {2, 3}}, {"fc2_bias", {2}}};
  std::map<std::string, HostTensor> v;
  for (const auto& [name, s] : shapes) v[name] = Random(s.Size(), &rng);
  auto exec = BindValues(net, v, shapes, kNullOp);
  exec->Forward(false);
  HostTensor y1 = RefFC(v["data"], v["fc1_weight"], v["fc1_bias"], n, k, 3);
  HostTensor y2 = y1;
  for (auto& y : y2) y = std::tanh(y);
  HostTensor y3 = RefFC(y2, v["fc2_weight"], v["fc2_bias"], n, 3, 2);
  ASSERT_EQ(exec->outputs().size(), 3u);
  ExpectNear(exec->outputs()[0].ToVector<double>(), y1, 1e-12, "fc1");
  ExpectNear(exec->outputs()[1].ToVector<double>(), y2, 1e-12, "tanh1");
  ExpectNear(exec->outputs()[2].ToVector<double>(), y3, 1e-12, "fc2");
}

// ------------------------------------------------------------------------------------------- gradients

// Central differences of loss(executor outputs) for every element of every argument in `names`.
std::map<std::string, HostTensor> NumericGradients(Executor* eval, const std::vector<std::string>& names,
                                                   const std::function<double(const std::vector<NDArray>&)>& loss,
                                                   double eps = 1e-6) {
  std::map<std::string, HostTensor> out;
  for (const auto& name : names) {
    NDArray a = eval->arg_dict().at(name);
    HostTensor x = a.ToVector<double>();
    HostTensor g(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double x0 = x[i];
      x[i] = x0 + eps;
      a.SyncCopyFromCPU(x.data(), x.size() * sizeof(double));
      eval->Forward(false);
      const double lp = loss(eval->outputs());
      x[i] = x0 - eps;
      a.SyncCopyFromCPU(x.data(), x.size() * sizeof(double));
      eval->Forward(false);
      const double lm = loss(eval->outputs());
      x[i] = x0;
      g[i] = (lp - lm) / (2 * eps);
    }
    a.SyncCopyFromCPU(x.data(), x.size() * sizeof(double));
    out[name] = g;
  }
  return out;
}

struct TwoLayer {
  Symbol net;
  std::map<std::string, TShape> shapes;
  std::map<std::string, HostTensor> values;
};

TwoLayer MakeTwoLayer(std::mt19937_64* rng, bool softmax) {
  TwoLayer t;
  const int n = 3, k = 4, h = 5, c = 3;
  Symbol fc2 = FC(Act(FC(Var("data"), h, "fc1"), "tanh", "act1"), c, "fc2");
  t.net = softmax ? Op("SoftmaxOutput", {}, {fc2, Var("label")}, "softmax") : fc2;
  t.shapes = {{"data", {n, k}}, {"fc1_weight", {h, k}}, {"fc1_bias", {h}}, {"fc2_weight", {c, h}}, {"fc2_bias", {c}}};
  if (softmax) t.shapes["label"] = TShape({n});
  for (const auto& [name, s] : t.shapes) t.values[name] = Random(s.Size(), rng);
  if (softmax) t.values["label"] = {0, 2, 1};
  return t;
}

TEST_P(ExecutorTest, GradientsOfTwoLayerNetworkMatchCentralDifferences) {
  std::mt19937_64 rng(test::TestSeed());
  TwoLayer t = MakeTwoLayer(&rng, false);
  HostTensor head = Random(3 * 3, &rng);
  const std::vector<std::string> params = {"data", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias"};
  auto eval = BindValues(t.net, t.values, t.shapes, kNullOp);
  auto loss = [&](const std::vector<NDArray>& outs) {
    HostTensor y = outs[0].ToVector<double>();
    double l = 0;
    for (std::size_t i = 0; i < y.size(); ++i) l += y[i] * head[i];
    return l;
  };
  auto numeric = NumericGradients(eval.get(), params, loss);
  for (bool plan : {true, false}) {
    auto exec = BindValues(t.net, t.values, t.shapes, kWriteTo, {}, {}, plan);
    exec->Forward(true);
    exec->Backward({Array(head, {3, 3})});
    for (const auto& name : params) {
      ExpectNear(exec->grad_dict().at(name).ToVector<double>(), numeric[name], 1e-6, name);
    }
  }
}

TEST_P(ExecutorTest, GradientsThroughSoftmaxOutputMatchCrossEntropy) {
  std::mt19937_64 rng(test::TestSeed());
  TwoLayer t = MakeTwoLayer(&rng, true);
  const std::vector<std::string> params = {"data", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias"};
  auto eval = BindValues(t.net, t.values, t.shapes, kNullOp);
  const HostTensor label = t.values["label"];
  auto loss = [&](const std::vector<NDArray>& outs) {
    HostTensor p = outs[0].ToVector<double>();
    double l = 0;
    for (std::size_t i = 0; i < label.size(); ++i) l -= std::log(p[i * 3 + static_cast<std::size_t>(label[i])]);
    return l;
  };
  auto numeric = NumericGradients(eval.get(), params, loss);
  auto exec = BindValues(t.net, t.values, t.shapes, kWriteTo, {{"label", kNullOp}});
  EXPECT_TRUE(exec->grad_arrays()[exec->symbol().ListArguments().size() - 1].is_none());  // label is last
  EXPECT_EQ(exec->grad_dict().count("label"), 0u);
  exec->Forward(true);
  exec->Backward();  // SoftmaxOutput ignores the head gradient
  for (const auto& name : params) {
    ExpectNear(exec->grad_dict().at(name).ToVector<double>(), numeric[name], 1e-6, name);
  }
}

TEST_P(ExecutorTest, AddToAccumulatesAndNullOpLeavesArraysAlone) {
  std::mt19937_64 rng(test::TestSeed());
  TwoLayer t = MakeTwoLayer(&rng, false);
  HostTensor head = Random(9, &rng);
  // Reference gradients with kWriteTo.
  auto ref = BindValues(t.net, t.values, t.shapes, kWriteTo);
  ref->Forward(true);
  ref->Backward({Array(head, {3, 3})});
  std::map<std::string, HostTensor> want;
  for (const auto& [name, g] : ref->grad_dict()) want[name] = g.ToVector<double>();

  const auto names = t.net.ListArguments();
  std::vector<NDArray> args, grads;
  std::vector<OpReqType> reqs;
  std::map<std::string, HostTensor> init;
  for (const auto& name : names) {
    args.push_back(Array(t.values[name], t.shapes[name]));
    init[name] = Random(t.shapes[name].Size(), &rng);
    grads.push_back(Array(init[name], t.shapes[name]));
    reqs.push_back(name == "fc1_weight" ? kNullOp : name == "data" ? kWriteTo : kAddTo);
  }
  ExecutorOptions opt;
  opt.engine = engine_.get();
  auto exec = Executor::Bind(t.net, Context::CPU(), args, grads, reqs, {}, opt);
  EXPECT_EQ(exec->grad_req(), reqs);
  for (int round = 1; round <= 2; ++round) {
    exec->Forward(true);
    exec->Backward({Array(head, {3, 3})});
    for (std::size_t i = 0; i < names.size(); ++i) {
      const auto& name = names[i];
      HostTensor got = grads[i].ToVector<double>();
      HostTensor expect = init[name];
      if (reqs[i] == kWriteTo) expect = want[name];
      if (reqs[i] == kAddTo) {
        for (std::size_t j = 0; j < expect.size(); ++j) expect[j] += round * want[name][j];
      }
      ExpectNear(got, expect, 1e-12, name + " round " + std::to_string(round));
    }
  }
  EXPECT_TRUE(exec->grad_arrays()[1].is_none());  // fc1_weight: kNullOp
}

TEST_P(ExecutorTest, AVariableUsedTwiceSumsItsGradientContributions) {
  std::mt19937_64 rng(test::TestSeed());
  const int n = 6;
  HostTensor x = Random(n, &rng), w = Random(n, &rng), head = Random(n, &rng);
  Symbol X = Var("x"), W = Var("w");
  // x*x + x*w: x is read twice by one node and by a second node; w once.
  Symbol sq = Op("elemwise_mul", {}, {X, X}, "sq");
  Symbol xw = Op("elemwise_mul", {}, {X, W}, "xw");
  Symbol sum = Op("elemwise_add", {}, {sq, xw}, "sum");
  // ... and an intermediate (sum) read twice: out = sum + sum.
  Symbol out = Op("elemwise_add", {}, {sum, sum}, "out");
  std::map<std::string, TShape> shapes = {{"x", {n}}, {"w", {n}}};
  for (OpReqType req : {kWriteTo, kAddTo}) {
    for (bool plan : {true, false}) {
      auto exec = BindValues(out, {{"x", x}, {"w", w}}, shapes, req, {}, {}, plan);
      exec->Forward(true);
      exec->Backward({Array(head, {n})});
      HostTensor y = exec->outputs()[0].ToVector<double>();
      HostTensor gx = exec->grad_dict().at("x").ToVector<double>(), gw = exec->grad_dict().at("w").ToVector<double>();
      for (int i = 0; i < n; ++i) {
        EXPECT_NEAR(y[i], 2 * (x[i] * x[i] + x[i] * w[i]), 1e-12);
        EXPECT_NEAR(gx[i], 2 * head[i] * (2 * x[i] + w[i]), 1e-12) << "req " << req << " plan " << plan;
        EXPECT_NEAR(gw[i], 2 * head[i] * x[i], 1e-12);
      }
    }
  }
  // x + x with the default head (ones): gradient 2.
  Symbol twice = Op("elemwise_add", {}, {X, X}, "twice");
  auto exec = BindValues(twice, {{"x", x}}, {{"x", {n}}}, kWriteTo);
  exec->Forward(true);
  exec->Backward();
  for (double g : exec->grad_dict().at("x").ToVector<double>()) EXPECT_EQ(g, 2.0);
}

TEST_P(ExecutorTest, AVariableThatIsAlsoAnOutputGetsItsHeadGradient) {
  // Group(x, x*w): dx = head0 + head1 * w, with kWriteTo and kAddTo.
  std::mt19937_64 rng(test::TestSeed());
  const int n = 5;
  HostTensor x = Random(n, &rng), w = Random(n, &rng), h0 = Random(n, &rng), h1 = Random(n, &rng);
  Symbol X = Var("x");
  Symbol net = Symbol::Group({X, Op("elemwise_mul", {}, {X, Var("w")}, "xw")});
  for (OpReqType req : {kWriteTo, kAddTo}) {
    auto exec = BindValues(net, {{"x", x}, {"w", w}}, {{"x", {n}}, {"w", {n}}}, req);
    exec->Forward(true);
    EXPECT_EQ(exec->outputs()[0].ToVector<double>(), x);
    exec->Backward({Array(h0, {n}), Array(h1, {n})});
    HostTensor gx = exec->grad_dict().at("x").ToVector<double>();
    for (int i = 0; i < n; ++i) EXPECT_NEAR(gx[i], h0[i] + h1[i] * w[i], 1e-12) << "req " << req;
  }
}

TEST_P(ExecutorTest, OutputAlsoReadByAnotherNodeGetsBothGradients) {
  // Group(h, fc2(h)) with h = tanh(fc1(x)): h's gradient is its head gradient plus fc2's contribution.
  std::mt19937_64 rng(test::TestSeed());
  Symbol h = Act(FC(Var("data"), 3, "fc1"), "tanh", "act1");
  Symbol net = Symbol::Group({h, FC(h, 2, "fc2")});
  std::map<std::string, TShape> shapes = {
      {"data", {2, 4}}, {"fc1_weight", {3, 4}}, {"fc1_bias", {3}}, {"fc2_weight", {2, 3}}, {"fc2_bias", {2}}};
  std::map<std::string, HostTensor> v;
  for (const auto& [name, s] : shapes) v[name] = Random(s.Size(), &rng);
  HostTensor h0 = Random(6, &rng), h1 = Random(4, &rng);
  auto eval = BindValues(net, v, shapes, kNullOp);
  auto loss = [&](const std::vector<NDArray>& outs) {
    HostTensor a = outs[0].ToVector<double>(), b = outs[1].ToVector<double>();
    double l = 0;
    for (std::size_t i = 0; i < a.size(); ++i) l += a[i] * h0[i];
    for (std::size_t i = 0; i < b.size(); ++i) l += b[i] * h1[i];
    return l;
  };
  auto numeric = NumericGradients(eval.get(), {"data", "fc1_weight", "fc2_weight"}, loss);
  auto exec = BindValues(net, v, shapes, kWriteTo);
  exec->Forward(true);
  exec->Backward({Array(h0, {2, 3}), Array(h1, {2, 2})});
  for (const auto& [name, g] : numeric) ExpectNear(exec->grad_dict().at(name).ToVector<double>(), g, 1e-6, name);
}

TEST_P(ExecutorTest, BackwardSkipsNodesWithoutAPathToARequestedGradient) {
  std::mt19937_64 rng(test::TestSeed());
  TwoLayer t = MakeTwoLayer(&rng, false);
  HostTensor head = Random(9, &rng);
  bulk_max_nodes_ = 1;  // counts the functions of single operators
  auto pushes_of_backward = [&](const std::map<std::string, OpReqType>& req_by_name) {
    auto exec = BindValues(t.net, t.values, t.shapes, kNullOp, req_by_name);
    exec->Forward(true);
    NDArray h = Array(head, {3, 3});
    h.WaitToRead();
    engine_->WaitForAll();
    const auto before = engine_->Stats().pushed;
    exec->Backward({h});
    const auto pushed = engine_->Stats().pushed - before;
    engine_->WaitForAll();
    return pushed;
  };
  // Only fc2's parameters: fc2's backward alone; every parameter: fc2, act1 and fc1.
  const auto only_fc2 = pushes_of_backward({{"fc2_weight", kWriteTo}, {"fc2_bias", kWriteTo}});
  const auto all = pushes_of_backward({{"fc1_weight", kWriteTo}, {"fc2_weight", kWriteTo}, {"fc2_bias", kWriteTo}});
  EXPECT_EQ(all, only_fc2 + 2);
}

TEST_P(ExecutorTest, BatchNormUpdatesAuxiliaryStatesInTrainingOnly) {
  const int n = 4, c = 2;
  HostTensor x = {1, -2, 3, 0.5, -1, 4, 2, 1.5};  // (4, 2): channel 0 = 1, 3, -1, 2; channel 1 = -2, .5, 4, 1.5
  HostTensor gamma = {1.5, -0.5}, beta = {0.25, 1}, mm = {0.5, -1}, mv = {2, 0.25};
  Symbol bn =
      Symbol::Create("BatchNorm", {{"fix_gamma", "false"}, {"momentum", "0.5"}, {"eps", "0.001"}}, {Var("data")}, "bn");
  ASSERT_EQ(bn.ListAuxiliaryStates(), (std::vector<std::string>{"bn_moving_mean", "bn_moving_var"}));
  std::map<std::string, TShape> shapes = {
      {"data", {n, c}}, {"bn_gamma", {c}}, {"bn_beta", {c}}, {"bn_moving_mean", {c}}, {"bn_moving_var", {c}}};
  auto exec = BindValues(bn, {{"data", x}, {"bn_gamma", gamma}, {"bn_beta", beta}}, shapes, kWriteTo,
                         {{"data", kNullOp}}, {{"bn_moving_mean", mm}, {"bn_moving_var", mv}});
  // Inference: moving statistics, aux untouched.
  exec->Forward(false);
  HostTensor y = exec->outputs()[0].ToVector<double>();
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < c; ++j) {
      EXPECT_NEAR(y[i * c + j], (x[i * c + j] - mm[j]) / std::sqrt(mv[j] + 1e-3) * gamma[j] + beta[j], 1e-12);
    }
  }
  ExpectNear(exec->aux_dict().at("bn_moving_mean").ToVector<double>(), mm, 0, "moving mean after inference");
  // Training: batch statistics, aux moved half way towards them.
  exec->Forward(true);
  exec->Backward();
  y = exec->outputs()[0].ToVector<double>();
  HostTensor mean(c, 0), var(c, 0);
  for (int j = 0; j < c; ++j) {
    for (int i = 0; i < n; ++i) mean[j] += x[i * c + j] / n;
    for (int i = 0; i < n; ++i) var[j] += (x[i * c + j] - mean[j]) * (x[i * c + j] - mean[j]) / n;
    for (int i = 0; i < n; ++i) {
      EXPECT_NEAR(y[i * c + j], (x[i * c + j] - mean[j]) / std::sqrt(var[j] + 1e-3) * gamma[j] + beta[j], 1e-12);
    }
  }
  HostTensor mm2 = exec->aux_arrays()[0].ToVector<double>(), mv2 = exec->aux_arrays()[1].ToVector<double>();
  for (int j = 0; j < c; ++j) {
    EXPECT_NEAR(mm2[j], 0.5 * mm[j] + 0.5 * mean[j], 1e-12);
    EXPECT_NEAR(mv2[j], 0.5 * mv[j] + 0.5 * var[j], 1e-12);
  }
  // d(sum y)/d beta = n per channel; d(sum y)/d gamma = sum of the normalised values = 0.
  HostTensor gb = exec->grad_dict().at("bn_beta").ToVector<double>();
  HostTensor gg = exec->grad_dict().at("bn_gamma").ToVector<double>();
  for (int j = 0; j < c; ++j) {
    EXPECT_NEAR(gb[j], n, 1e-12);
    EXPECT_NEAR(gg[j], 0, 1e-9);
  }
}

// ---------------------------------------------------------------------------------------- memory plan

struct RunResult {
  std::vector<std::vector<float>> outputs, grads;
  MemoryPlanStats stats;
};

RunResult RunModel(const Symbol& net, const TShape& data_shape, bool plan, Engine* engine, std::uint64_t seed,
                   int bulk_max_nodes = -1, std::uint64_t* pushed = nullptr) {
  ExecutorOptions opt;
  opt.plan_memory = plan;
  opt.engine = engine;
  opt.bulk_max_nodes = bulk_max_nodes;
  auto exec = Executor::SimpleBind(net, Context::CPU(), {{"data", data_shape}}, kWriteTo,
                                   {{"data", kNullOp}, {"softmax_label", kNullOp}}, opt);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-0.1f, 0.1f);
  for (auto& [name, a] : exec->arg_dict()) {
    std::vector<float> v(static_cast<std::size_t>(a.Size()));
    if (name == "softmax_label") {
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 10);
    } else {
      for (auto& x : v) x = name == "data" ? u(rng) * 10 : u(rng);
    }
    a.SyncCopyFromCPU(v.data(), v.size() * sizeof(float));
  }
  RunResult r;
  engine->WaitForAll();
  const std::uint64_t pushed_before = engine->Stats().pushed;
  for (int step = 0; step < 2; ++step) {
    exec->Forward(true);
    exec->Backward();
  }
  if (pushed != nullptr) *pushed = engine->Stats().pushed - pushed_before;
  for (const auto& o : exec->outputs()) r.outputs.push_back(o.ToVector<float>());
  for (const auto& g : exec->grad_arrays()) {
    if (!g.is_none()) r.grads.push_back(g.ToVector<float>());
  }
  r.stats = exec->memory_stats();
  return r;
}

void CheckPlanOnOff(const std::string& model, const Symbol& net, const TShape& data_shape, Engine* engine) {
  const std::uint64_t seed = test::TestSeed();
  RunResult on = RunModel(net, data_shape, true, engine, seed);
  RunResult off = RunModel(net, data_shape, false, engine, seed);
  EXPECT_EQ(on.outputs, off.outputs) << model;  // bit-identical
  EXPECT_EQ(on.grads, off.grads) << model;
  EXPECT_FALSE(on.grads.empty());
  EXPECT_LT(on.stats.planned_bytes, on.stats.naive_bytes) << model;
  EXPECT_EQ(off.stats.planned_bytes, off.stats.naive_bytes) << model;
  EXPECT_EQ(on.stats.naive_bytes, off.stats.naive_bytes) << model;
  EXPECT_GT(on.stats.inplace + on.stats.reused, 0) << model;
  std::cout << "[memory plan] " << model << " data " << data_shape.ToString() << ": naive " << on.stats.naive_bytes
            << " bytes, planned " << on.stats.planned_bytes << " bytes ("
            << 100.0 * static_cast<double>(on.stats.planned_bytes) / static_cast<double>(on.stats.naive_bytes)
            << "%), in place " << on.stats.inplace << ", reused " << on.stats.reused << std::endl;
}

TEST_P(ExecutorTest, PlannedMemoryGivesBitIdenticalResultsForMlp) {
  CheckPlanOnOff("MLP", models::MLP(), TShape({8, 784}), engine_.get());
}

TEST_P(ExecutorTest, PlannedMemoryGivesBitIdenticalResultsForLeNet) {
  CheckPlanOnOff("LeNet", models::LeNet(), TShape({4, 1, 28, 28}), engine_.get());
}

// Bulk execution: the same results with every segment length, and fewer engine functions.
void CheckBulk(const std::string& model, const Symbol& net, const TShape& data_shape, Engine* engine) {
  const std::uint64_t seed = test::TestSeed();
  std::uint64_t pushed_one = 0, pushed_three = 0, pushed_default = 0;
  RunResult one = RunModel(net, data_shape, true, engine, seed, 1, &pushed_one);
  RunResult three = RunModel(net, data_shape, true, engine, seed, 3, &pushed_three);
  RunResult whole = RunModel(net, data_shape, true, engine, seed, -1, &pushed_default);
  EXPECT_EQ(one.outputs, three.outputs) << model;  // bit-identical
  EXPECT_EQ(one.grads, three.grads) << model;
  EXPECT_EQ(one.outputs, whole.outputs) << model;
  EXPECT_EQ(one.grads, whole.grads) << model;
  EXPECT_LT(pushed_three, pushed_one) << model;
  EXPECT_LT(pushed_default, pushed_three) << model;
  std::cout << "[bulk] " << model << ": engine functions for 2 x (Forward, Backward): " << pushed_one
            << " one per operator, " << pushed_three << " with segments of 3, " << pushed_default
            << " with the default" << std::endl;
}

TEST_P(ExecutorTest, BulkExecutionGivesBitIdenticalResultsWithFewerFunctionsForMlp) {
  CheckBulk("MLP", models::MLP(), TShape({8, 784}), engine_.get());
}

TEST_P(ExecutorTest, BulkExecutionGivesBitIdenticalResultsWithFewerFunctionsForLeNet) {
  CheckBulk("LeNet", models::LeNet(), TShape({4, 1, 28, 28}), engine_.get());
}

// An operator that fails at run time (not at bind time) when its input's first element is negative.
class FailIfNegativeOp : public Operator {
 public:
  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    const float* x = in[0].dptr_as<float>();
    if (x[0] < 0) throw Error("TestFailIfNegative: the first element is negative");
    float* y = out[0].dptr_as<float>();
    for (std::int64_t i = 0; i < in[0].Size(); ++i) Assign(y + i, req[0], x[i]);
  }
  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    const float* g = out_grad[0].dptr_as<float>();
    float* d = in_grad[0].dptr_as<float>();
    for (std::int64_t i = 0; i < in_grad[0].Size(); ++i) Assign(d + i, req[0], g[i]);
  }
};

class FailIfNegativeProp : public OperatorProperty {
 public:
  void Init(const Kwargs&) override {}
  Kwargs GetParams() const override { return {}; }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    if (!(*in)[0].known()) return false;
    out->assign(1, (*in)[0]);
    aux->clear();
    return true;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<FailIfNegativeProp>(*this); }
  std::string TypeString() const override { return "TestFailIfNegative"; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& og, const std::vector<int>&,
                                             const std::vector<int>&) const override {
    return {og[0]};
  }
  std::unique_ptr<Operator> CreateOperator(Context) const override { return std::make_unique<FailIfNegativeOp>(); }
};

TROUPE_REGISTER_OP_PROPERTY(TestFailIfNegative, FailIfNegativeProp)
    .describe("Test operator: copies its input, failing at run time when the first element is negative.")
    .add_argument("data", "NDArray", "Input.");

TEST_P(ExecutorTest, AnErrorInsideABulkSegmentSurfacesAtTheOutputsAsWithoutBulking) {
  // fc1 -> fail -> fc2 -> relu: one segment with the default length, four functions without bulking.
  Symbol net = Act(FC(Op("TestFailIfNegative", {}, {FC(Var("data"), 4, "fc1")}, "fail"), 3, "fc2"), "relu", "relu");
  for (int bulk : {-1, 1}) {
    ExecutorOptions opt;
    opt.engine = engine_.get();
    opt.bulk_max_nodes = bulk;
    auto exec = Executor::SimpleBind(net, Context::CPU(), {{"data", {2, 5}}}, kWriteTo, {}, opt);
    auto args = exec->arg_dict();
    args.at("fc1_weight") = 0.0;
    args.at("fc1_bias") = -1.0;  // fc1's output is -1 everywhere: the operator fails
    exec->Forward(true);
    ExpectError([&] { exec->outputs()[0].WaitToRead(); }, {"TestFailIfNegative", "negative"});
    // Backward reads the poisoned arrays: the gradients carry the error too.
    exec->Backward({NDArray::Ones({2, 3}, Context::CPU(), DType::kFloat32, engine_.get())});
    ExpectError([&] { exec->grad_dict().at("fc2_weight").WaitToRead(); }, {"TestFailIfNegative"});
    // The other gradients' functions (skipped, poisoned) may still be finishing: WaitForAll may report the
    // same error once more (and only that one), before the next iteration or TearDown.
    try {
      engine_->WaitForAll();
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("TestFailIfNegative"), std::string::npos) << e.what();
    }
  }
}

TEST_P(ExecutorTest, FlattenOfAnArgumentIsAViewAndNothingWritesIntoTheArgument) {
  // data -> Flatten -> relu -> fc: relu may run in place on its input, but with planning that input is the
  // data argument itself (a view), which must keep its values.
  Symbol net = FC(Act(Op("Flatten", {}, {Var("data")}, "flat"), "relu", "relu"), 2, "fc");
  ExecutorOptions opt;
  opt.engine = engine_.get();
  for (bool plan : {true, false}) {
    opt.plan_memory = plan;
    auto exec = Executor::SimpleBind(net, Context::CPU(), {{"data", {2, 3, 2}}}, kWriteTo, {}, opt);
    const std::vector<float> x = {-1, 2, -3, 4, -5, 6, 7, -8, 9, -10, 11, -12};
    auto args = exec->arg_dict();
    args.at("data").SyncCopyFromCPU(x.data(), x.size() * sizeof(float));
    args.at("fc_weight") = 1.0;
    args.at("fc_bias") = 0.0;
    exec->Forward(true);
    exec->Backward({NDArray::Ones({2, 2}, Context::CPU(), DType::kFloat32, engine_.get())});
    const std::vector<float> y = exec->outputs()[0].ToVector<float>();
    const std::vector<float> g = exec->grad_dict().at("data").ToVector<float>();
    for (int r = 0; r < 2; ++r) {
      float want = 0;
      for (int k = 0; k < 6; ++k) want += std::max(x[r * 6 + k], 0.0f);
      EXPECT_EQ(y[r * 2], want) << "plan " << plan;
      EXPECT_EQ(y[r * 2 + 1], want) << "plan " << plan;
    }
    for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(g[i], x[i] > 0 ? 2.0f : 0.0f) << "plan " << plan;
    EXPECT_EQ(args.at("data").ToVector<float>(), x) << "plan " << plan;
    if (plan) {
      EXPECT_GE(exec->memory_stats().inplace, 1);
    }
  }
}

TEST_P(ExecutorTest, SimpleBindAllocatesEverythingFromTheDataShape) {
  ExecutorOptions opt;
  opt.engine = engine_.get();
  Symbol net = Op("SoftmaxOutput", {},
                  {FC(Symbol::Create("BatchNorm", {}, {Act(FC(Var("data"), 6, "fc1"), "relu", "r1")}, "bn1"), 3, "fc2"),
                   Var("softmax_label")},
                  "softmax");
  auto exec = Executor::SimpleBind(net, Context::CPU(), {{"data", {5, 7}}}, kWriteTo, {{"data", kNullOp}}, opt);
  auto args = exec->arg_dict();
  EXPECT_EQ(args.at("fc1_weight").shape(), TShape({6, 7}));
  EXPECT_EQ(args.at("softmax_label").shape(), TShape({5}));
  EXPECT_EQ(exec->aux_dict().at("bn1_moving_var").shape(), TShape({6}));
  EXPECT_EQ(exec->grad_dict().count("data"), 0u);
  EXPECT_EQ(exec->grad_dict().count("softmax_label"), 1u);
  EXPECT_EQ(exec->grad_dict().at("fc2_weight").shape(), TShape({3, 6}));
  EXPECT_EQ(exec->outputs()[0].shape(), TShape({5, 3}));
  EXPECT_EQ(exec->ctx(), Context::CPU());
  // All zero arguments: the softmax of zeros is uniform.
  exec->Forward(false);
  for (float p : exec->outputs()[0].ToVector<float>()) EXPECT_FLOAT_EQ(p, 1.0f / 3);
}

// -------------------------------------------------------------------------------------------- errors

TEST_P(ExecutorTest, BindErrorsNameTheArgument) {
  Symbol net = Act(FC(Var("data"), 4, "fc1"), "relu", "relu1");
  ExecutorOptions opt;
  opt.engine = engine_.get();
  NDArray x = Zeros({2, 3}), w = Zeros({4, 3}), b = Zeros({4});
  ExpectError(
      [&] {
        Executor::Bind(net, Context::CPU(), {x, w}, {}, {}, {}, opt);
      },
      {"expected 3 argument arrays", "fc1_bias"});
  ExpectError(
      [&] {
        Executor::Bind(net, Context::CPU(), {x, NDArray(), b}, {}, {}, {}, opt);
      },
      {"fc1_weight", "missing"});
  ExpectError(
      [&] {
        Executor::Bind(net, Context::CPU(), {x, Zeros({3, 3}), b}, {}, {}, {}, opt);
      },
      {"fc1_weight", "(3,3)", "(4,3)"});
  ExpectError([&] { Executor::Bind(net, Context::CPU(), {x, w, Zeros({5})}, {}, {}, {}, opt); }, {"fc1_bias"});
  ExpectError(
      [&] {
        Executor::Bind(net, Context::CPU(), {x, w, b}, {Zeros({2, 3}), Zeros({4, 3}), Zeros({5})}, {kWriteTo}, {}, opt);
      },
      {"gradient of argument 'fc1_bias'", "(5,)"});
  ExpectError(
      [&] {
        Executor::Bind(net, Context::CPU(), {x, w, b}, {x, NDArray(), b}, {kWriteTo}, {}, opt);
      },
      {"fc1_weight", "missing"});
  ExpectError([&] { Executor::Bind(net, Context::CPU(), {x, w, b}, {}, {}, {b}, opt); }, {"auxiliary"});
  ExpectError([&] { Executor::SimpleBind(net, Context::CPU(), {}, kWriteTo, {}, opt); }, {"SimpleBind"});
  ExpectError(
      [&] {
        Executor::SimpleBind(net, Context::CPU(), {{"data", {2, 3}}}, kWriteTo, {{"nope", kNullOp}}, opt);
      },
      {"nope"});
}

TEST_P(ExecutorTest, BackwardErrors) {
  Symbol net = FC(Var("data"), 2, "fc1");
  ExecutorOptions opt;
  opt.engine = engine_.get();
  auto no_grad = Executor::SimpleBind(net, Context::CPU(), {{"data", {3, 4}}}, kNullOp, {}, opt);
  no_grad->Forward(true);
  ExpectError([&] { no_grad->Backward(); }, {"without gradients"});

  auto exec = Executor::SimpleBind(net, Context::CPU(), {{"data", {3, 4}}}, kWriteTo, {}, opt);
  ExpectError([&] { exec->Backward(); }, {"call Forward first"});
  // After a prediction-mode forward pass, its gradient (FullyConnected's does not depend on the mode).
  exec->Forward(false);
  exec->Backward({NDArray::Ones({3, 2}, Context::CPU(), DType::kFloat32, engine_.get())});
  for (float g : exec->grad_dict().at("fc1_bias").ToVector<float>()) EXPECT_EQ(g, 3.0f);
  exec->Forward(true);
  ExpectError([&] { exec->Backward({Zeros({3, 3}, DType::kFloat32)}); }, {"head gradient 0", "fc1_output", "(3,3)"});
  ExpectError([&] { exec->Backward({Zeros({3, 2}), Zeros({3, 2})}); }, {"expected 1 head gradient"});
  exec->Backward({NDArray::Ones({3, 2}, Context::CPU(), DType::kFloat32, engine_.get())});
  // d(sum y)/d bias = batch size.
  for (float g : exec->grad_dict().at("fc1_bias").ToVector<float>()) EXPECT_EQ(g, 3.0f);
  ExpectError([&] { exec->Backward(); }, {"call Forward first"});  // once per forward
}

INSTANTIATE_TEST_SUITE_P(Engines, ExecutorTest,
                         ::testing::Values(test::EngineParam{EngineType::kActor, 2, 0},
                                           test::EngineParam{EngineType::kNaive, 1, 0}),
                         test::EngineParamName);

}  // namespace
}  // namespace troupe
