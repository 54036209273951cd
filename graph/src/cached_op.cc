// CachedOp and RunImperative (graph/cached_op.h).
#include "graph/cached_op.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "base/error.h"
#include "graph/internal/control_flow.h"
#include "graph/internal/graph.h"
#include "op/autograd.h"
#include "op/imperative.h"

namespace troupe {

namespace {

// One bound executor. busy: a call runs on it, or a recorded graph still needs its forward pass.
struct State {
  std::unique_ptr<Executor> exec;
  std::vector<bool> needs_grad;  // per argument
  bool busy = false;
};

}  // namespace

struct CachedOp::Impl : std::enable_shared_from_this<CachedOp::Impl> {
  Symbol symbol;
  CachedOpOptions options;
  std::vector<std::string> inputs, arg_names;
  std::size_t num_args = 0;
  std::mutex mu;
  std::map<std::string, std::vector<std::shared_ptr<State>>> states;  // by signature

  // A free executor of the signature, bound on demand, marked busy and bound to the inputs.
  std::shared_ptr<State> Acquire(const std::vector<NDArray>& in, const std::vector<bool>& needs_grad);
  void Release(const std::string& sig, const std::shared_ptr<State>& s);
  std::vector<NDArray> Run(State& s, const std::vector<NDArray>& in);
  static std::string Signature(const std::vector<NDArray>& in, const std::vector<bool>& needs_grad);
};

namespace {

// The recorded node of one call: its backward pass is the executor's.
class CachedFunction : public autograd::Function {
 public:
  CachedFunction(std::shared_ptr<CachedOp::Impl> op, std::shared_ptr<State> state, std::string sig)
      : op_(std::move(op)), state_(std::move(state)), sig_(std::move(sig)) {}
  ~CachedFunction() override { op_->Release(sig_, state_); }

  std::vector<NDArray> Forward(const std::vector<NDArray>& inputs) override { return op_->Run(*state_, inputs); }

  std::vector<NDArray> Backward(const std::vector<NDArray>& out_grads) override {
    if (backward_done_) {
      throw Error(
          "autograd::Backward: a CachedOp (hybridized block) call can be differentiated once; the graph through it "
          "was already differentiated with retain_graph=true. Record the call again");
    }
    backward_done_ = true;
    state_->exec->Backward(out_grads);
    std::vector<NDArray> grads(op_->inputs.size());
    for (std::size_t i = 0; i < op_->num_args; ++i) {
      if (state_->needs_grad[i]) grads[i] = state_->exec->grad_arrays()[i];
    }
    return grads;
  }

 private:
  std::shared_ptr<CachedOp::Impl> op_;
  std::shared_ptr<State> state_;
  std::string sig_;
  bool backward_done_ = false;
};

}  // namespace

std::string CachedOp::Impl::Signature(const std::vector<NDArray>& in, const std::vector<bool>& needs_grad) {
  std::string sig = in[0].ctx().ToString();
  for (std::size_t i = 0; i < in.size(); ++i) {
    sig += '|';
    sig += std::to_string(static_cast<int>(in[i].dtype()));
    sig += in[i].shape().ToString();
    if (i < needs_grad.size() && needs_grad[i]) sig += 'g';
  }
  return sig;
}

std::shared_ptr<State> CachedOp::Impl::Acquire(const std::vector<NDArray>& in, const std::vector<bool>& needs_grad) {
  const std::string sig = Signature(in, needs_grad);
  std::shared_ptr<State> state;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (options.static_shape) {
      // One signature only: the others' executors go (those held by a graph live on until it is freed).
      for (auto it = states.begin(); it != states.end();) it = it->first == sig ? std::next(it) : states.erase(it);
    }
    for (const auto& s : states[sig]) {
      if (!s->busy) {
        state = s;
        break;
      }
    }
    if (state) state->busy = true;
  }
  const std::vector<NDArray> args(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(num_args));
  const std::vector<NDArray> aux(in.begin() + static_cast<std::ptrdiff_t>(num_args), in.end());
  if (!state) {
    state = std::make_shared<State>();
    state->needs_grad = needs_grad;
    const bool any = std::find(needs_grad.begin(), needs_grad.end(), true) != needs_grad.end();
    std::vector<NDArray> grads;
    std::vector<OpReqType> reqs(num_args, kNullOp);
    if (any) {
      for (std::size_t i = 0; i < num_args; ++i) {
        if (needs_grad[i]) {
          grads.emplace_back(args[i].shape(), args[i].ctx(), args[i].dtype(), args[i].engine());
          reqs[i] = kWriteTo;
        } else {
          grads.emplace_back();
        }
      }
    }
    ExecutorOptions eo = options.executor;
    eo.engine = in[0].engine();
    state->exec = Executor::Bind(symbol, in[0].ctx(), args, grads, reqs, aux, eo);
    state->busy = true;
    std::lock_guard<std::mutex> lock(mu);
    states[sig].push_back(state);
  } else {
    for (std::size_t i = 0; i < args.size(); ++i) state->exec->SetArgArray(i, args[i]);
    for (std::size_t i = 0; i < aux.size(); ++i) state->exec->SetAuxArray(i, aux[i]);
  }
  return state;
}

void CachedOp::Impl::Release(const std::string& sig, const std::shared_ptr<State>& s) {
  std::lock_guard<std::mutex> lock(mu);
  s->busy = false;
  if (options.static_alloc) return;
  auto it = states.find(sig);
  if (it == states.end()) return;
  auto& v = it->second;
  const auto idle = std::count_if(v.begin(), v.end(), [](const auto& x) { return !x->busy; });
  if (idle > 1) v.erase(std::find(v.begin(), v.end(), s));
}

std::vector<NDArray> CachedOp::Impl::Run(State& s, const std::vector<NDArray>& in) {
  s.exec->Forward(autograd::IsTraining());
  std::vector<NDArray> out;
  for (const NDArray& o : s.exec->outputs()) out.push_back(o.CopyTo(in[0].ctx()));
  return out;
}

CachedOp::CachedOp(Symbol symbol, CachedOpOptions options) : impl_(std::make_shared<Impl>()) {
  if (symbol.empty()) throw Error("CachedOp: the symbol is empty");
  impl_->arg_names = symbol.ListArguments();
  impl_->num_args = impl_->arg_names.size();
  impl_->inputs = impl_->arg_names;
  for (const auto& a : symbol.ListAuxiliaryStates()) impl_->inputs.push_back(a);
  const int n = static_cast<int>(impl_->inputs.size());
  std::set<int> seen;
  for (const auto* list : {&options.data_indices, &options.param_indices}) {
    for (int i : *list) {
      if (i < 0 || i >= n) {
        throw Error("CachedOp: data/param index " + std::to_string(i) + " is out of range: the symbol has " +
                    std::to_string(n) + " inputs");
      }
      if (!seen.insert(i).second) {
        throw Error("CachedOp: input " + std::to_string(i) + " ('" + impl_->inputs[static_cast<std::size_t>(i)] +
                    "') is listed twice in data_indices / param_indices");
      }
    }
  }
  impl_->symbol = std::move(symbol);
  impl_->options = std::move(options);
}

CachedOp::~CachedOp() = default;

const Symbol& CachedOp::symbol() const { return impl_->symbol; }
const std::vector<std::string>& CachedOp::ListInputs() const { return impl_->inputs; }

std::size_t CachedOp::num_executors() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::size_t n = 0;
  for (const auto& [sig, v] : impl_->states) n += v.size();
  return n;
}

std::vector<NDArray> CachedOp::operator()(const std::vector<NDArray>& inputs) {
  Impl& m = *impl_;
  if (inputs.size() != m.inputs.size()) {
    std::string names;
    for (const auto& a : m.inputs) names += (names.empty() ? "" : ", ") + a;
    throw Error("CachedOp: expected " + std::to_string(m.inputs.size()) + " inputs (" + names + "), got " +
                std::to_string(inputs.size()));
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::string what = "CachedOp: input '" + m.inputs[i] + "'";
    if (inputs[i].is_none()) throw Error(what + " is an empty NDArray");
    if (inputs[i].ctx() != inputs[0].ctx() || inputs[i].engine() != inputs[0].engine()) {
      throw Error(what + " is on " + inputs[i].ctx().ToString() + " or another engine than the first input (" +
                  inputs[0].ctx().ToString() + "); give every input on one device and engine");
    }
  }
  std::vector<bool> needs_grad(m.num_args, false);
  bool record = false;
  if (autograd::IsRecording()) {
    for (std::size_t i = 0; i < m.num_args; ++i) {
      needs_grad[i] = autograd::InGraph(inputs[i]);
      record = record || needs_grad[i];
    }
  }
  std::shared_ptr<State> state = m.Acquire(inputs, needs_grad);
  const std::string sig = Impl::Signature(inputs, needs_grad);
  if (record) {
    auto fn = std::make_shared<CachedFunction>(impl_, state, sig);
    return autograd::Function::Apply(std::move(fn), inputs);
  }
  struct Done {
    Impl& m;
    const std::string& sig;
    const std::shared_ptr<State>& s;
    ~Done() { m.Release(sig, s); }
  } done{m, sig, state};
  return m.Run(*state, inputs);
}

namespace {

// A control-flow node (graph/internal/control_flow.h) runs its subgraphs through an executor: called
// imperatively, it is a CachedOp of the node alone (recorded as one call while the thread records).
std::vector<NDArray> RunControlFlowNode(const graph::Node& node, const std::vector<NDArray>& in) {
  auto alone = std::make_shared<graph::Node>(node);
  for (std::size_t i = 0; i < alone->inputs.size(); ++i) {
    alone->inputs[i] = {graph::detail::MakeVariable("data" + std::to_string(i), {}), 0};
  }
  std::vector<graph::NodeEntry> outs;
  for (std::uint32_t k = 0; k < alone->num_visible_outputs(); ++k) outs.push_back({alone, k});
  CachedOp op{Symbol(std::move(outs))};
  return op(in);
}

}  // namespace

std::vector<NDArray> RunImperative(const Symbol& symbol, const std::vector<NDArray>& inputs) {
  const graph::IndexedGraph g = graph::IndexGraph(symbol.outputs());
  const std::size_t na = g.arg_nodes.size(), nx = g.aux_nodes.size();
  if (inputs.size() != na + nx) {
    throw Error("RunImperative: the symbol has " + std::to_string(na) + " arguments and " + std::to_string(nx) +
                " auxiliary states, got " + std::to_string(inputs.size()) + " inputs");
  }
  std::vector<std::vector<NDArray>> values(g.nodes.size());
  for (std::size_t k = 0; k < na; ++k) values[g.arg_nodes[k]] = {inputs[k]};
  for (std::size_t k = 0; k < nx; ++k) values[g.aux_nodes[k]] = {inputs[na + k]};
  for (std::uint32_t n = 0; n < g.nodes.size(); ++n) {
    const graph::Node* node = g.nodes[n];
    if (node->is_variable()) continue;
    std::vector<NDArray> in;
    for (const auto& e : g.inputs[n]) {
      const auto& v = values[e.node];
      if (e.index >= v.size()) {
        throw Error("RunImperative: node '" + node->name + "' reads hidden output " + std::to_string(e.index) +
                    " of node '" + g.nodes[e.node]->name + "', which an imperative call does not return");
      }
      in.push_back(v[e.index]);
    }
    try {
      values[n] = graph::AsControlFlow(*node->op) != nullptr ? RunControlFlowNode(*node, in) : Invoke(node->op, in);
    } catch (const Error& err) {
      throw Error("RunImperative: node '" + node->name + "': " + err.what());
    }
  }
  std::vector<NDArray> out;
  for (const auto& h : g.heads) {
    if (h.index >= values[h.node].size()) {
      throw Error("RunImperative: output " + std::to_string(out.size()) + " is hidden output " +
                  std::to_string(h.index) + " of node '" + g.nodes[h.node]->name + "'");
    }
    out.push_back(values[h.node][h.index]);
  }
  return out;
}

}  // namespace troupe
