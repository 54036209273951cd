// Autograd on NDArrays (see op/autograd.h): the recorded graph and its backward pass.
#include "op/autograd.h"

#include <algorithm>
#include <deque>
#include <cmath>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "base/error.h"
#include "op/imperative.h"
#include "op/param.h"
#include "tensor/detail/ndarray_access.h"

namespace troupe::autograd {

namespace {

// Gradient bytes a backward pass allocates between two fences (see Run).
constexpr std::size_t kBackwardWindowBytes = std::size_t{4} << 20;

thread_local bool training = false;

// An array as a node saw it: the handle (keeping the memory alive) and the writes pushed on its engine
// variable then (the recorded operator's own included).
struct Saved {
  NDArray array;
  std::uint64_t writes = 0;
  bool checked = false;  // the backward pass reads it: a later write in place is an error
};

}  // namespace

// A recorded operation (runner set) or a variable (grad set). Inputs keep their handles, and with them the
// nodes that produced them; outputs are kept without their own node (the node would otherwise keep itself).
struct Node {
  std::shared_ptr<OperatorRunner> runner;
  std::shared_ptr<Function> function;  // a Function's node (runner null)
  std::vector<Saved> inputs, outputs;
  std::vector<NDArray> aux;
  std::size_t visible = 0;
  bool freed = false;
  // A variable: its gradient buffer and request.
  bool variable = false;
  NDArray grad;
  OpReqType req = kNullOp;
};

struct Entry {
  std::shared_ptr<Node> node;
  std::size_t index = 0;
};

bool IsRecording() { return internal::AutogradRecording(); }
bool IsTraining() { return training; }
bool SetRecording(bool recording) { return std::exchange(internal::AutogradRecording(), recording); }
bool SetTraining(bool train) { return std::exchange(training, train); }

RecordScope::RecordScope(bool train_mode)
    : was_recording_(SetRecording(true)), was_training_(SetTraining(train_mode)) {}
RecordScope::~RecordScope() {
  SetRecording(was_recording_);
  SetTraining(was_training_);
}

PauseScope::PauseScope(bool train_mode)
    : was_recording_(SetRecording(false)), was_training_(SetTraining(train_mode)) {}
PauseScope::~PauseScope() {
  SetRecording(was_recording_);
  SetTraining(was_training_);
}

namespace {

void CheckReq(OpReqType req, const char* what) {
  if (req != kWriteTo && req != kAddTo && req != kNullOp) {
    throw Error(std::string(what) + ": the gradient request must be kWriteTo, kAddTo or kNullOp");
  }
}

void MakeVariable(NDArray* var, NDArray grad, OpReqType req) {
  auto node = std::make_shared<Node>();
  node->variable = true;
  node->grad = std::move(grad);
  node->req = req;
  NDArrayAccess::SetEntry(var, std::make_shared<Entry>(Entry{std::move(node), 0}));
}

Saved Save(const NDArray& a, bool checked) {
  Saved s;
  s.array = a;
  NDArrayAccess::SetEntry(&s.array, NDArrayAccess::Entry(a));
  s.writes = a.var()->writes_pushed();
  s.checked = checked;
  return s;
}

}  // namespace

void AttachGrad(NDArray* var, OpReqType req) {
  if (var == nullptr || var->is_none()) throw Error("AttachGrad: the array is empty");
  CheckReq(req, "AttachGrad");
  MakeVariable(var, NDArray::Zeros(var->shape(), var->ctx(), var->dtype(), var->engine()), req);
}

void MarkVariables(const std::vector<NDArray*>& vars, const std::vector<NDArray>& grads,
                   const std::vector<OpReqType>& reqs) {
  if (grads.size() != vars.size() || reqs.size() != vars.size()) {
    throw Error("MarkVariables: " + std::to_string(vars.size()) + " variables, " + std::to_string(grads.size()) +
                " gradient buffers and " + std::to_string(reqs.size()) + " requests; give one of each per variable");
  }
  for (std::size_t i = 0; i < vars.size(); ++i) {
    const std::string what = "MarkVariables: variable " + std::to_string(i);
    if (vars[i] == nullptr || vars[i]->is_none()) throw Error(what + " is empty");
    CheckReq(reqs[i], "MarkVariables");
    if (grads[i].shape() != vars[i]->shape() || grads[i].dtype() != vars[i]->dtype() ||
        grads[i].ctx() != vars[i]->ctx()) {
      throw Error(what + ": the gradient buffer is " + grads[i].shape().ToString() + " " + DTypeName(grads[i].dtype()) +
                  " on " + grads[i].ctx().ToString() + ", the variable " + vars[i]->shape().ToString() + " " +
                  DTypeName(vars[i]->dtype()) + " on " + vars[i]->ctx().ToString());
    }
  }
  for (std::size_t i = 0; i < vars.size(); ++i) MakeVariable(vars[i], grads[i], reqs[i]);
}

NDArray GradOf(const NDArray& var) {
  const auto& e = NDArrayAccess::Entry(var);
  return e && e->node->variable ? e->node->grad : NDArray();
}

bool InGraph(const NDArray& a) { return NDArrayAccess::Entry(a) != nullptr; }

void RecordOp(std::shared_ptr<OperatorRunner> runner, const std::vector<NDArray>& args,
              const std::vector<NDArray>& aux, std::vector<NDArray>* outputs) {
  const OperatorProperty& prop = runner->prop();
  auto node = std::make_shared<Node>();
  node->visible = static_cast<std::size_t>(prop.NumVisibleOutputs());
  // What the backward pass reads (ids: out_grad i, in_data V + i, out_data V + N + i, as OperatorRunner).
  const int nv = static_cast<int>(node->visible), ni = static_cast<int>(args.size());
  std::vector<int> og(static_cast<std::size_t>(nv)), id(args.size()), od(outputs->size());
  for (int i = 0; i < nv; ++i) og[static_cast<std::size_t>(i)] = i;
  for (int i = 0; i < ni; ++i) id[static_cast<std::size_t>(i)] = nv + i;
  for (std::size_t i = 0; i < od.size(); ++i) od[i] = nv + ni + static_cast<int>(i);
  std::unordered_set<int> reads;
  if (prop.HasBackward()) {
    for (int d : prop.DeclareBackwardDependency(og, id, od)) reads.insert(d);
  }
  for (std::size_t i = 0; i < args.size(); ++i) node->inputs.push_back(Save(args[i], reads.count(id[i]) > 0));
  for (std::size_t i = 0; i < outputs->size(); ++i) {
    Saved s = Save((*outputs)[i], reads.count(od[i]) > 0);
    NDArrayAccess::SetEntry(&s.array, nullptr);  // the node is this array's: do not keep it from itself
    node->outputs.push_back(std::move(s));
  }
  node->aux = aux;
  node->runner = std::move(runner);
  for (std::size_t i = 0; i < outputs->size(); ++i) {
    NDArrayAccess::SetEntry(&(*outputs)[i], std::make_shared<Entry>(Entry{node, i}));
  }
}

std::vector<NDArray> Function::Apply(std::shared_ptr<Function> function, const std::vector<NDArray>& inputs) {
  if (function == nullptr) throw Error("autograd::Function::Apply: no function given");
  std::vector<NDArray> outputs;
  {
    PauseScope pause(IsTraining());
    outputs = function->Forward(inputs);
  }
  if (outputs.empty()) throw Error("autograd::Function::Apply: Forward returned no output");
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    for (const NDArray& in : inputs) {
      if (outputs[i].is_none() || outputs[i].SharesChunkWith(in)) {
        throw Error("autograd::Function::Apply: output " + std::to_string(i) +
                    " of Forward is empty or an input's memory; return new arrays");
      }
    }
  }
  if (!IsRecording()) return outputs;
  auto node = std::make_shared<Node>();
  node->function = std::move(function);
  node->visible = outputs.size();
  for (const NDArray& in : inputs) node->inputs.push_back(Save(in, false));
  for (const NDArray& out : outputs) {
    Saved s = Save(out, false);
    NDArrayAccess::SetEntry(&s.array, nullptr);
    node->outputs.push_back(std::move(s));
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    NDArrayAccess::SetEntry(&outputs[i], std::make_shared<Entry>(Entry{node, i}));
  }
  return outputs;
}

namespace {

// NDArray's own operations, recorded as registered operators (tensor/detail/ndarray_access.h).
NDArray InvokeForNDArray(const char* op, const std::vector<NDArray>& inputs,
                         const std::vector<std::pair<std::string, std::string>>& kwargs) {
  return Invoke(op, inputs, kwargs)[0];
}
[[maybe_unused]] const bool kHooked = (internal::AutogradInvokeHook() = &InvokeForNDArray, true);

// The nodes reachable from the heads through recorded inputs, each after every node it reads from. The
// shared pointers keep every node alive while a Backward that frees the graph clears their inputs.
std::vector<std::shared_ptr<Node>> Topological(const std::vector<std::shared_ptr<Node>>& heads) {
  std::vector<std::shared_ptr<Node>> order;
  std::unordered_set<Node*> seen;
  std::vector<std::pair<std::shared_ptr<Node>, std::size_t>> stack;
  for (const auto& h : heads) {
    if (!seen.insert(h.get()).second) continue;
    stack.push_back({h, 0});
    while (!stack.empty()) {
      auto& [n, next] = stack.back();
      if (next < n->inputs.size()) {
        const auto& e = NDArrayAccess::Entry(n->inputs[next++].array);
        if (e && seen.insert(e->node.get()).second) stack.push_back({e->node, 0});
        continue;
      }
      order.push_back(n);
      stack.pop_back();
    }
  }
  return order;
}

void Accumulate(NDArray* acc, const NDArray& g) {
  if (acc->is_none()) {
    *acc = g;
  } else {
    *acc = *acc + g;
  }
}

std::string NodeName(const Node& n) {
  if (n.variable) return "a variable";
  return n.function ? std::string("a Function") : "'" + n.runner->name() + "'";
}

}  // namespace

// ---- Gradients as recorded operators (create_graph) ----
//
// With create_graph, a node's input gradients are computed by invoking registered operators while the thread
// records, so the gradients join the graph and can be differentiated again. Each entry below writes one
// operator's gradient that way; the first-order path (OperatorRunner::Backward) stays the definition the
// entries are tested against.

namespace {

// What a gradient formula reads. in and out carry their graph entries (out: this node's own), so that the
// formula's operators differentiate through them.
struct GradArgs {
  std::vector<NDArray> og;   // one per visible output
  std::vector<NDArray> in;   // one per argument
  std::vector<NDArray> out;  // every output
  std::vector<bool> need;    // per argument: whether its gradient is wanted
  Kwargs params;             // the operator's parameters, as GetParams prints them

  std::string Param(const std::string& key, const std::string& fallback = "") const {
    for (const auto& [k, v] : params) {
      if (k == key) return v;
    }
    return fallback;
  }
  bool Flag(const std::string& key) const { return param_detail::ParseBool(Param(key, "false")); }
};

NDArray Call1(const char* op, const std::vector<NDArray>& in, const Kwargs& kwargs = {}) {
  return Invoke(op, in, kwargs)[0];
}
NDArray Mul(const NDArray& a, const NDArray& b) { return Call1("elemwise_mul", {a, b}); }
NDArray Neg(const NDArray& a) { return Call1("negative", {a}); }
NDArray WithScalar(const char* op, const NDArray& a, const std::string& scalar) {
  return Call1(op, {a}, {{"scalar", scalar}});
}
NDArray WithScalar(const char* op, const NDArray& a, double scalar) {
  return WithScalar(op, a, param_detail::PrintReal(scalar));
}
double ScalarOf(const GradArgs& a) { return param_detail::ParseReal(a.Param("scalar", "0")); }

// 1 where x > 0, else 0, as a constant: the derivative of the step is zero wherever it is defined.
NDArray PositiveMask(const NDArray& x) {
  PauseScope pause(IsTraining());
  return WithScalar("_greater_scalar", x, 0.0);
}

std::vector<NDArray> TanhGrad(const GradArgs& a) {  // og (1 - y^2)
  return {Mul(a.og[0], WithScalar("_rminus_scalar", Mul(a.out[0], a.out[0]), 1.0))};
}
std::vector<NDArray> SigmoidGrad(const GradArgs& a) {  // og y (1 - y)
  return {Mul(a.og[0], Mul(a.out[0], WithScalar("_rminus_scalar", a.out[0], 1.0)))};
}
std::vector<NDArray> ReluGrad(const GradArgs& a) { return {Mul(a.og[0], PositiveMask(a.in[0]))}; }
std::vector<NDArray> PassThrough(const GradArgs& a) { return {a.og[0]}; }
std::vector<NDArray> Negated(const GradArgs& a) { return {Neg(a.og[0])}; }

// op(A) op(B) of 2-D operands: each gradient is one more dot with transpose flags.
std::vector<NDArray> DotGrad(const GradArgs& a) {
  const bool ta = a.Flag("transpose_a"), tb = a.Flag("transpose_b");
  const NDArray &A = a.in[0], &B = a.in[1], &g = a.og[0];
  auto dot = [](const NDArray& l, const NDArray& r, bool tl, bool tr) {
    return Call1("dot", {l, r}, {{"transpose_a", tl ? "True" : "False"}, {"transpose_b", tr ? "True" : "False"}});
  };
  std::vector<NDArray> out(2);
  if (a.need[0]) out[0] = ta ? dot(B, g, tb, true) : dot(g, B, false, !tb);
  if (a.need[1]) out[1] = tb ? dot(g, A, true, ta) : dot(A, g, !ta, false);
  return out;
}

std::string Dims(const TShape& s) {
  std::vector<std::int64_t> d;
  for (int i = 0; i < s.ndim(); ++i) d.push_back(s[i]);
  return param_detail::PrintTuple(d);
}

// y = x2 w^T + b with x2 = x as (rows, in) and y as (rows, hidden), whether flatten folds x's trailing
// dimensions or its leading ones.
std::vector<NDArray> FullyConnectedGrad(const GradArgs& a) {
  const NDArray &x = a.in[0], &w = a.in[1];
  const std::int64_t hidden = w.shape()[0], in = w.shape()[1], rows = x.shape().Size() / in;
  const NDArray og2 = Call1("Reshape", {a.og[0]}, {{"shape", Dims(TShape{rows, hidden})}});
  std::vector<NDArray> out(a.in.size());
  if (a.need[0]) {
    out[0] = Call1("Reshape", {Call1("dot", {og2, w})}, {{"shape", Dims(x.shape())}});
  }
  if (a.need[1]) {
    const NDArray x2 = Call1("Reshape", {x}, {{"shape", Dims(TShape{rows, in})}});
    out[1] = Call1("dot", {og2, x2}, {{"transpose_a", "True"}});
  }
  if (a.in.size() > 2 && a.need[2]) {  // the column sums of og2, as a product with a constant row of ones
    const NDArray ones = NDArray::Full(TShape{1, rows}, 1.0, x.ctx(), x.dtype(), x.engine());
    out[2] = Call1("Reshape", {Call1("dot", {ones, og2})}, {{"shape", Dims(TShape{hidden})}});
  }
  return out;
}

struct HigherOrder {
  std::vector<NDArray> (*grad)(const GradArgs&);
  // Why this node's parameters or shapes are not covered; empty when they are. May be null (always covered).
  std::string (*unsupported)(const OperatorRunner&) = nullptr;
};

std::string ParamOf(const OperatorRunner& r, const std::string& key) {
  for (const auto& [k, v] : r.prop().GetParams()) {
    if (k == key) return v;
  }
  return "";
}

const std::unordered_map<std::string, HigherOrder>& HigherOrderTable() {
  static const std::unordered_map<std::string, HigherOrder> table = {
      {"sin", {[](const GradArgs& a) -> std::vector<NDArray> { return {Mul(a.og[0], Call1("cos", {a.in[0]}))}; }}},
      {"cos", {[](const GradArgs& a) -> std::vector<NDArray> { return {Neg(Mul(a.og[0], Call1("sin", {a.in[0]})))}; }}},
      {"exp", {[](const GradArgs& a) -> std::vector<NDArray> { return {Mul(a.og[0], a.out[0])}; }}},
      {"log", {[](const GradArgs& a) -> std::vector<NDArray> {
         return {Call1("elemwise_div", {a.og[0], a.in[0]})};
       }}},
      {"square", {[](const GradArgs& a) -> std::vector<NDArray> {
         return {Mul(a.og[0], WithScalar("_mul_scalar", a.in[0], 2.0))};
       }}},
      {"tanh", {TanhGrad}},
      {"sigmoid", {SigmoidGrad}},
      {"relu", {ReluGrad}},
      {"negative", {Negated}},
      {"_copy", {PassThrough}},
      {"Activation",
       {[](const GradArgs& a) -> std::vector<NDArray> {
          const std::string act = a.Param("act_type");
          if (act == "relu") return ReluGrad(a);
          if (act == "sigmoid") return SigmoidGrad(a);
          if (act == "tanh") return TanhGrad(a);
          return {Mul(a.og[0], Call1("sigmoid", {a.in[0]}))};  // softrelu: log(1 + e^x)' = sigmoid(x)
        },
        [](const OperatorRunner& r) -> std::string {
          const std::string act = ParamOf(r, "act_type");
          if (act == "relu" || act == "sigmoid" || act == "tanh" || act == "softrelu") return "";
          return "act_type " + act + " is not covered (relu, sigmoid, tanh and softrelu are)";
        }}},
      {"elemwise_add", {[](const GradArgs& a) -> std::vector<NDArray> {
         return {a.og[0], a.og[0]};
       }}},
      {"elemwise_sub", {[](const GradArgs& a) -> std::vector<NDArray> {
         return {a.og[0], a.need[1] ? Neg(a.og[0]) : NDArray()};
       }}},
      {"elemwise_mul", {[](const GradArgs& a) -> std::vector<NDArray> {
         return {a.need[0] ? Mul(a.og[0], a.in[1]) : NDArray(), a.need[1] ? Mul(a.og[0], a.in[0]) : NDArray()};
       }}},
      {"elemwise_div", {[](const GradArgs& a) -> std::vector<NDArray> {  // a / b: og / b and -og a / b^2
         const NDArray da = Call1("elemwise_div", {a.og[0], a.in[1]});
         return {da, a.need[1] ? Neg(Call1("elemwise_div", {Mul(da, a.in[0]), a.in[1]})) : NDArray()};
       }}},
      {"_plus_scalar", {PassThrough}},
      {"_minus_scalar", {PassThrough}},
      {"_rminus_scalar", {Negated}},
      {"_mul_scalar", {[](const GradArgs& a) -> std::vector<NDArray> {
         return {WithScalar("_mul_scalar", a.og[0], a.Param("scalar"))};
       }}},
      {"_div_scalar", {[](const GradArgs& a) -> std::vector<NDArray> {
         return {WithScalar("_div_scalar", a.og[0], a.Param("scalar"))};
       }}},
      {"_rdiv_scalar", {[](const GradArgs& a) -> std::vector<NDArray> {  // s / x: -og y / x
         return {Neg(Call1("elemwise_div", {Mul(a.og[0], a.out[0]), a.in[0]}))};
       }}},
      {"_power_scalar", {[](const GradArgs& a) -> std::vector<NDArray> {  // x^s: og s x^(s-1)
         const double s = ScalarOf(a);
         return {Mul(a.og[0], WithScalar("_mul_scalar", WithScalar("_power_scalar", a.in[0], s - 1.0), s))};
       }}},
      {"_rpower_scalar", {[](const GradArgs& a) -> std::vector<NDArray> {  // s^x: og y log(s)
         return {Mul(a.og[0], WithScalar("_mul_scalar", a.out[0], std::log(ScalarOf(a))))};
       }}},
      {"dot",
       {DotGrad,
        [](const OperatorRunner& r) -> std::string {
          if (r.in_shapes()[0].ndim() == 2 && r.in_shapes()[1].ndim() == 2) return "";
          return "operands " + r.in_shapes()[0].ToString() + " and " + r.in_shapes()[1].ToString() +
                 " are not both 2-D";
        }}},
      {"FullyConnected", {FullyConnectedGrad}},
      {"Reshape", {[](const GradArgs& a) -> std::vector<NDArray> {
         return {Call1("Reshape", {a.og[0]}, {{"shape", Dims(a.in[0].shape())}})};
       }}},
      {"Cast", {[](const GradArgs& a) -> std::vector<NDArray> {
         return {Call1("Cast", {a.og[0]}, {{"dtype", DTypeName(a.in[0].dtype())}})};
       }}},
  };
  return table;
}

// Empty when create_graph can differentiate through the node, otherwise the error's text.
std::string HigherOrderGap(const Node& n) {
  if (n.function) return "a Function has no higher-order gradient (its Backward runs unrecorded)";
  const auto& table = HigherOrderTable();
  const auto it = table.find(n.runner->name());
  if (it == table.end()) return "operator '" + n.runner->name() + "' has no higher-order gradient";
  const std::string why = it->second.unsupported ? it->second.unsupported(*n.runner) : "";
  return why.empty() ? why : "operator '" + n.runner->name() + "' has no higher-order gradient here: " + why;
}

void Release(Node* n) {
  if (n->variable) return;
  n->freed = true;
  n->inputs.clear();
  n->outputs.clear();
  n->aux.clear();
  n->function.reset();
  // The runner stays: its name is in the error of a later Backward through this node.
}

}  // namespace

std::vector<std::string> HigherOrderOperators() {
  std::vector<std::string> names;
  for (const auto& [name, entry] : HigherOrderTable()) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

namespace {

// The backward pass of Backward (variables null: every variable's buffer) and Grad (the gradients of
// *variables, returned).
std::vector<NDArray> Run(const char* who, const std::vector<NDArray>& heads, const std::vector<NDArray>& head_grads,
                         const std::vector<NDArray>* variables, bool retain_graph, bool create_graph, bool train_mode) {
  const std::string me = who;
  if (heads.empty()) throw Error(me + ": no heads given");
  if (!head_grads.empty() && head_grads.size() != heads.size()) {
    throw Error(me + ": " + std::to_string(heads.size()) + " heads but " + std::to_string(head_grads.size()) +
                " head gradients; give one per head, or none for ones");
  }
  std::vector<std::shared_ptr<Node>> head_nodes;
  for (std::size_t i = 0; i < heads.size(); ++i) {
    const auto& e = NDArrayAccess::Entry(heads[i]);
    if (!e) {
      throw Error(me + ": head " + std::to_string(i) +
                  " was not computed while recording and is not a variable: nothing to differentiate");
    }
    if (!head_grads.empty() && head_grads[i].shape() != heads[i].shape()) {
      throw Error(me + ": head gradient " + std::to_string(i) + " has shape " + head_grads[i].shape().ToString() +
                  ", its head " + heads[i].shape().ToString());
    }
    head_nodes.push_back(e->node);
  }
  // Grad's variables: each must be one (MXNet differentiates with respect to variables only).
  std::unordered_set<Node*> targets;
  if (variables != nullptr) {
    if (variables->empty()) throw Error(me + ": no variables given");
    for (std::size_t i = 0; i < variables->size(); ++i) {
      const auto& e = NDArrayAccess::Entry((*variables)[i]);
      if (!e || !e->node->variable) {
        throw Error(me + ": array " + std::to_string(i) + " of the variables is not a variable; give it a gradient " +
                    "buffer with AttachGrad or MarkVariables before recording what uses it");
      }
      targets.insert(e->node.get());
    }
  }
  const std::vector<std::shared_ptr<Node>> order = Topological(head_nodes);
  // Which nodes lead to a variable that wants a gradient (inputs come first in `order`).
  std::unordered_map<Node*, bool> wanted;
  for (const auto& n : order) {
    if (n->freed) {
      throw Error(me + ": the graph through " + NodeName(*n) +
                  " was freed by an earlier backward pass; record it again, or pass retain_graph=true to the first");
    }
    bool w = variables != nullptr ? targets.count(n.get()) > 0 : n->variable && n->req != kNullOp;
    for (const Saved& in : n->inputs) {
      const auto& e = NDArrayAccess::Entry(in.array);
      w = w || (e && wanted[e->node.get()]);
    }
    wanted[n.get()] = w;
  }
  // Every check before anything is pushed: operators without a (higher-order) gradient and arrays written
  // since. With create_graph, a gradient formula may read any array the node saved.
  for (const auto& n : order) {
    if (n->variable || !wanted[n.get()]) continue;
    if (create_graph) {
      const std::string gap = HigherOrderGap(*n);
      if (!gap.empty()) throw Error(me + " with create_graph: " + gap + ", and a variable's gradient depends on it");
    }
    if (n->function) continue;
    if (!n->runner->prop().HasBackward()) {
      throw Error(me + ": operator " + NodeName(*n) + " has no gradient, and a variable's gradient depends on it");
    }
    for (const auto* list : {&n->inputs, &n->outputs}) {
      for (const Saved& s : *list) {
        if ((s.checked || create_graph) && s.array.var()->writes_pushed() != s.writes) {
          throw Error(me + ": an array that operator " + NodeName(*n) +
                      "'s gradient reads was written in place after it was recorded");
        }
      }
    }
  }
  // The pass records only with create_graph (otherwise its own arithmetic, summing gradients, must not join a
  // graph), in the mode asked for.
  const bool was_recording = SetRecording(create_graph), was_training = SetTraining(train_mode);
  struct Restore {
    bool recording, training;
    ~Restore() {
      SetRecording(recording);
      SetTraining(training);
    }
  } restore{was_recording, was_training};

  std::unordered_map<Node*, std::vector<NDArray>> grads;  // per node, per output: the summed gradient
  std::unordered_map<Node*, NDArray> found;               // Grad: per variable node, its gradient
  auto slot = [&](Node* n, std::size_t i) -> NDArray& {
    auto& v = grads[n];
    if (v.size() <= i) v.resize(std::max(i + 1, n->variable ? std::size_t{1} : n->outputs.size()));
    return v[i];
  };
  // One node's backward: pushes its input gradients, adds them to its inputs' slots and returns them.
  auto step = [&](const std::shared_ptr<Node>& node) -> std::vector<NDArray> {
    Node* n = node.get();
    std::vector<NDArray>& out_grads = grads[n];
    if (n->variable) {
      if (out_grads.empty() || out_grads[0].is_none()) return {};
      if (variables != nullptr) {
        found[n] = out_grads[0];
      } else if (n->req == kAddTo) {
        n->grad += out_grads[0];
      } else if (n->req == kWriteTo) {
        CopyFromTo(out_grads[0], n->grad);
      }
      return {};
    }
    out_grads.resize(n->outputs.size());
    std::vector<NDArray> og(n->visible), in_data, out_data, in_grad(n->inputs.size());
    for (std::size_t i = 0; i < n->visible; ++i) {
      const NDArray& out = n->outputs[i].array;
      og[i] = out_grads[i].is_none() ? NDArray::Zeros(out.shape(), out.ctx(), out.dtype(), out.engine()) : out_grads[i];
    }
    for (const Saved& s : n->inputs) in_data.push_back(s.array);
    for (const Saved& s : n->outputs) out_data.push_back(s.array);
    std::vector<OpReqType> req(n->inputs.size(), kNullOp);
    for (std::size_t i = 0; i < n->inputs.size(); ++i) {
      const auto& e = NDArrayAccess::Entry(n->inputs[i].array);
      if (!e || !wanted[e->node.get()]) continue;
      req[i] = kWriteTo;
      if (n->function || create_graph) continue;
      const NDArray& x = n->inputs[i].array;
      in_grad[i] = NDArray(x.shape(), x.ctx(), x.dtype(), x.engine());
    }
    if (create_graph) {
      GradArgs args;
      args.og = og;
      args.in = in_data;  // with their entries
      for (std::size_t i = 0; i < out_data.size(); ++i) {
        NDArray y = out_data[i];
        NDArrayAccess::SetEntry(&y, std::make_shared<Entry>(Entry{node, i}));
        args.out.push_back(std::move(y));
      }
      for (OpReqType r : req) args.need.push_back(r != kNullOp);
      args.params = n->runner->prop().GetParams();
      in_grad = HigherOrderTable().at(n->runner->name()).grad(args);
      in_grad.resize(n->inputs.size());
      for (std::size_t i = 0; i < in_grad.size(); ++i) {
        if (req[i] == kNullOp) continue;
        if (in_grad[i].is_none() || in_grad[i].shape() != n->inputs[i].array.shape()) {
          throw Error(me + " with create_graph: the recorded gradient of " + NodeName(*n) + "'s input " +
                      std::to_string(i) + " is missing or of the wrong shape");
        }
      }
    } else if (n->function) {
      in_grad = n->function->Backward(og);
      if (in_grad.size() != n->inputs.size()) {
        throw Error(me + ": a Function's Backward returned " + std::to_string(in_grad.size()) + " gradients for its " +
                    std::to_string(n->inputs.size()) + " inputs");
      }
      for (std::size_t i = 0; i < in_grad.size(); ++i) {
        if (in_grad[i].is_none()) {
          req[i] = kNullOp;
        } else if (in_grad[i].shape() != n->inputs[i].array.shape()) {
          throw Error(me + ": a Function's gradient " + std::to_string(i) + " has shape " +
                      in_grad[i].shape().ToString() + ", its input " + n->inputs[i].array.shape().ToString());
        }
      }
    } else {
      n->runner->Backward(og, in_data, out_data, n->aux, in_grad, req);
    }
    for (std::size_t i = 0; i < n->inputs.size(); ++i) {
      if (req[i] == kNullOp) continue;
      const auto& e = NDArrayAccess::Entry(n->inputs[i].array);
      Accumulate(&slot(e->node.get(), e->index), in_grad[i]);
    }
    return in_grad;
  };

  for (std::size_t i = 0; i < heads.size(); ++i) {
    const auto& e = NDArrayAccess::Entry(heads[i]);
    const NDArray g = head_grads.empty()
                          ? NDArray::Full(heads[i].shape(), 1.0, heads[i].ctx(), heads[i].dtype(), heads[i].engine())
                          : head_grads[i];
    Accumulate(&slot(e->node.get(), e->index), g);
  }
  // Each node's input gradients are allocated when it is pushed, and memory goes back to the pool once the
  // functions reading it have run. Pushed all at once, the pass would allocate every gradient before the engine
  // freed any. So once the gradients pushed since the last fence reach kBackwardWindowBytes, the pass pushes a
  // fence (an empty function reading them, writing a scratch variable) and waits for the fence before: it stays
  // about two windows of gradient memory ahead of the engine, while a pass of small arrays never waits. It holds
  // the window's gradients only until their fence is pushed (their variables must live until then).
  Engine* engine = heads[0].engine();
  std::vector<NDArray> window;
  std::deque<VarHandle> fences;
  std::size_t window_bytes = 0;
  Context fence_ctx = heads[0].ctx();
  auto fence = [&] {
    std::vector<VarHandle> reads;
    for (const NDArray& g : window) reads.push_back(g.var());
    std::sort(reads.begin(), reads.end());
    reads.erase(std::unique(reads.begin(), reads.end()), reads.end());
    VarHandle f = engine->NewVariable(Engine::VarKind::kScratch);
    engine->PushSync([](RunContext) {}, fence_ctx, reads, {f}, FnProperty::kNormal, 0, "autograd:fence");
    fences.push_back(f);
    window.clear();
    window_bytes = 0;
    while (fences.size() > 1) {
      engine->WaitForVar(fences.front());
      engine->DeleteVariable([](RunContext) {}, fence_ctx, fences.front());
      fences.pop_front();
    }
  };
  struct DropFences {
    Engine* engine;
    Context ctx;
    std::deque<VarHandle>* fences;
    ~DropFences() {
      for (VarHandle f : *fences) engine->DeleteVariable([](RunContext) {}, ctx, f);
    }
  } drop_fences{engine, fence_ctx, &fences};
  try {
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      if (wanted[it->get()]) {
        for (const NDArray& g : step(*it)) {
          if (g.is_none() || g.engine() != engine) continue;
          window.push_back(g);
          window_bytes += static_cast<std::size_t>(g.shape().Size()) * DTypeSize(g.dtype());
        }
        if (window_bytes >= kBackwardWindowBytes) fence();
      }
      grads.erase(it->get());  // its output gradients are no longer needed
      // Without retain_graph the node's saved arrays go now, not at the end of the pass: the pushed backward
      // holds what it reads until it has run, and nothing later in the pass reads them.
      if (!retain_graph) Release(it->get());
    }
  } catch (...) {
    // A pass without retain_graph consumes the graph even when it fails part-way.
    if (!retain_graph) {
      for (const auto& n : order) Release(n.get());
    }
    throw;
  }
  if (variables == nullptr) return {};
  std::vector<NDArray> out;
  for (const NDArray& v : *variables) {
    const auto& e = NDArrayAccess::Entry(v);
    NDArray g = found.count(e->node.get()) ? found[e->node.get()] : NDArray();
    if (g.is_none()) {  // the heads do not depend on it
      g = NDArray::Zeros(v.shape(), v.ctx(), v.dtype(), v.engine());
    } else {
      // A new array, never a head gradient the caller passed in (the gradient of a head that is the variable).
      for (const NDArray& hg : head_grads) {
        if (g.SharesChunkWith(hg)) {
          g = create_graph ? Call1("_copy", {g}) : g.CopyTo(g.ctx());
          break;
        }
      }
    }
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace

void Backward(const std::vector<NDArray>& heads, const std::vector<NDArray>& head_grads, bool retain_graph,
              bool train_mode) {
  Run("autograd::Backward", heads, head_grads, nullptr, retain_graph, false, train_mode);
}

std::vector<NDArray> Grad(const std::vector<NDArray>& heads, const std::vector<NDArray>& variables,
                          const std::vector<NDArray>& head_grads, bool retain_graph, bool create_graph,
                          bool train_mode) {
  return Run("autograd::Grad", heads, head_grads, &variables, retain_graph, create_graph, train_mode);
}

}  // namespace troupe::autograd
