// Autograd on NDArrays (see op/autograd.h): the recorded graph and its backward pass.
#include "op/autograd.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "base/error.h"
#include "op/imperative.h"
#include "tensor/detail/ndarray_access.h"

namespace troupe::autograd {

namespace {

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

void Backward(const std::vector<NDArray>& heads, const std::vector<NDArray>& head_grads, bool retain_graph) {
  if (heads.empty()) throw Error("autograd::Backward: no heads given");
  if (!head_grads.empty() && head_grads.size() != heads.size()) {
    throw Error("autograd::Backward: " + std::to_string(heads.size()) + " heads but " +
                std::to_string(head_grads.size()) + " head gradients; give one per head, or none for ones");
  }
  std::vector<std::shared_ptr<Node>> head_nodes;
  for (std::size_t i = 0; i < heads.size(); ++i) {
    const auto& e = NDArrayAccess::Entry(heads[i]);
    if (!e) {
      throw Error("autograd::Backward: head " + std::to_string(i) +
                  " was not computed while recording and is not a variable: nothing to differentiate");
    }
    if (!head_grads.empty() && head_grads[i].shape() != heads[i].shape()) {
      throw Error("autograd::Backward: head gradient " + std::to_string(i) + " has shape " +
                  head_grads[i].shape().ToString() + ", its head " + heads[i].shape().ToString());
    }
    head_nodes.push_back(e->node);
  }
  const std::vector<std::shared_ptr<Node>> order = Topological(head_nodes);
  // Which nodes lead to a variable that wants a gradient (inputs come first in `order`).
  std::unordered_map<Node*, bool> wanted;
  for (const auto& n : order) {
    if (n->freed) {
      throw Error("autograd::Backward: the graph through " + NodeName(*n) +
                  " was freed by an earlier Backward; record it again, or pass retain_graph=true to the first");
    }
    bool w = n->variable && n->req != kNullOp;
    for (const Saved& in : n->inputs) {
      const auto& e = NDArrayAccess::Entry(in.array);
      w = w || (e && wanted[e->node.get()]);
    }
    wanted[n.get()] = w;
  }
  // Every check before anything is pushed: operators without a backward pass and arrays written since.
  for (const auto& n : order) {
    if (n->variable || n->function || !wanted[n.get()]) continue;
    if (!n->runner->prop().HasBackward()) {
      throw Error("autograd::Backward: operator " + NodeName(*n) +
                  " has no gradient, and a variable's gradient depends on it");
    }
    for (const auto* list : {&n->inputs, &n->outputs}) {
      for (const Saved& s : *list) {
        if (s.checked && s.array.var()->writes_pushed() != s.writes) {
          throw Error("autograd::Backward: an array that operator " + NodeName(*n) +
                      "'s gradient reads was written in place after it was recorded");
        }
      }
    }
  }
  // Backward runs unrecorded (its own arithmetic sums gradients).
  const bool was_recording = SetRecording(false);
  struct Restore {
    bool was;
    ~Restore() { SetRecording(was); }
  } restore{was_recording};

  std::unordered_map<Node*, std::vector<NDArray>> grads;  // per node, per output: the summed gradient
  auto slot = [&](Node* n, std::size_t i) -> NDArray& {
    auto& v = grads[n];
    if (v.size() <= i) v.resize(std::max(i + 1, n->variable ? std::size_t{1} : n->outputs.size()));
    return v[i];
  };
  for (std::size_t i = 0; i < heads.size(); ++i) {
    const auto& e = NDArrayAccess::Entry(heads[i]);
    const NDArray g = head_grads.empty()
                          ? NDArray::Full(heads[i].shape(), 1.0, heads[i].ctx(), heads[i].dtype(), heads[i].engine())
                          : head_grads[i];
    Accumulate(&slot(e->node.get(), e->index), g);
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* n = it->get();
    if (!wanted[n]) continue;
    std::vector<NDArray>& out_grads = grads[n];
    if (n->variable) {
      if (out_grads.empty() || out_grads[0].is_none() || n->req == kNullOp) continue;
      if (n->req == kAddTo) {
        n->grad += out_grads[0];
      } else {
        CopyFromTo(out_grads[0], n->grad);
      }
      continue;
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
      if (n->function) continue;
      const NDArray& x = n->inputs[i].array;
      in_grad[i] = NDArray(x.shape(), x.ctx(), x.dtype(), x.engine());
    }
    if (n->function) {
      in_grad = n->function->Backward(og);
      if (in_grad.size() != n->inputs.size()) {
        throw Error("autograd::Backward: a Function's Backward returned " + std::to_string(in_grad.size()) +
                    " gradients for its " + std::to_string(n->inputs.size()) + " inputs");
      }
      for (std::size_t i = 0; i < in_grad.size(); ++i) {
        if (in_grad[i].is_none()) {
          req[i] = kNullOp;
        } else if (in_grad[i].shape() != n->inputs[i].array.shape()) {
          throw Error("autograd::Backward: a Function's gradient " + std::to_string(i) + " has shape " +
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
    grads.erase(n);  // its output gradients are no longer needed
  }
  if (retain_graph) return;
  for (const auto& n : order) {
    if (n->variable) continue;
    n->freed = true;
    n->inputs.clear();
    n->outputs.clear();
    n->aux.clear();
    n->function.reset();
    // The runner stays: its name is in the error of a later Backward through this node.
  }
}

}  // namespace troupe::autograd
