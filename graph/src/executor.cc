// Executor (graph/executor.h): a Symbol bound to a device and to arrays, run node by node through
// OperatorRunner, with the intermediate arrays placed by the memory planner (internal/memory_plan.h).
//
// Entries of the plan: 0..N-1 are the forward entries of the indexed graph (node outputs), N..2N-1 their
// gradients (entry e's gradient is N + e), then temporaries for an input used twice by one node.
#include "graph/executor.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "actors/config.h"
#include "base/error.h"
#include "engine/profiler.h"
#include "graph/internal/control_flow.h"
#include "graph/internal/graph.h"
#include "graph/internal/memory_plan.h"
#include "op/detail/fusion.h"
#include "op/imperative.h"

namespace troupe {

namespace {

std::string JoinNames(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

const char* ReqName(OpReqType r) {
  switch (r) {
    case kNullOp:
      return "kNullOp";
    case kWriteTo:
      return "kWriteTo";
    case kWriteInplace:
      return "kWriteInplace";
    case kAddTo:
      return "kAddTo";
  }
  return "?";
}

void* IndexPtr(std::size_t i) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(i + 1)); }
std::size_t PtrIndex(void* p) { return static_cast<std::size_t>(reinterpret_cast<std::uintptr_t>(p)) - 1; }

}  // namespace

struct Executor::Impl {
  Symbol symbol;
  Context ctx;
  Engine* engine = nullptr;
  ExecutorOptions options;
  float loss_scale = 1.0f;  // SetLossScale: OpContext::loss_scale of the backward calls
  graph::IndexedGraph g;
  std::vector<std::string> arg_names, aux_names;

  std::vector<NDArray> args, grads, aux, outputs;
  std::vector<OpReqType> reqs;

  std::uint32_t num_entries = 0;  // forward entries (N)
  std::vector<TShape> shape;      // per plan entry
  std::vector<int> dtype;         // per plan entry
  std::vector<NDArray> arr;       // per plan entry: its array (views of planned storage, or external arrays)
  std::vector<std::unique_ptr<OperatorRunner>> runners;  // per node; null for variables and control flow
  // Per control-flow node (graph/internal/control_flow.h): its runner, and whether the backward pass runs it.
  std::vector<std::unique_ptr<graph::ControlFlowRunner>> flow;
  std::vector<char> flow_backward;

  // Forward: per operator node, in topological order.
  struct FwdStep {
    std::uint32_t node = 0;
    std::vector<std::uint32_t> in, aux, out;  // plan entries
    std::vector<OpReqType> req;
  };
  std::vector<FwdStep> fwd;

  // Backward, in push order.
  struct BwStep {
    enum Kind { kHead, kNode, kAdd } kind = kNode;
    // kHead: head `head` contributes to gradient entry `dst` (copied when `first`, else added).
    std::size_t head = 0;
    std::uint32_t dst = 0;
    bool first = false;
    // kAdd: dst += src (an input used twice by one node).
    std::uint32_t src = 0;
    // kNode
    std::uint32_t node = 0;
    std::vector<int> out_grad, in_data, out_data;  // plan entries, -1 where not read
    std::vector<std::uint32_t> aux;
    std::vector<int> in_grad;  // plan entries, -1 for kNullOp
    std::vector<OpReqType> req;
  };
  std::vector<BwStep> bwd;
  // Per backward step: a node that writes an argument's gradient (its bulk segment ends there). Filled by the
  // first Backward: the gradient arrays are fixed from Bind on.
  std::vector<char> bwd_writes_grad;
  bool need_backward = false;
  // Gradient entries that alias head `i`'s gradient (head index -> plan entry), set per Backward call.
  std::vector<std::pair<std::size_t, std::uint32_t>> head_alias;
  std::vector<NDArray> ones;                // default head gradients, per head
  std::vector<std::size_t> zero_fill_args;  // kWriteTo arguments that no node contributes to

  graph::MemoryPlan plan;
  // The inference fusion pass (FuseForInference): the rewritten graph's outputs (they own its new nodes),
  // and per node of g whether it is a fused one (its profiler name is then the node's name).
  std::vector<graph::NodeEntry> fused_graph;
  std::vector<char> is_fused;
  std::vector<std::string> fused_names;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> argument_views;  // (output entry, argument entry)
  std::vector<NDArray> storage;
  bool forward_done = false;

  // Binds plan entry e (an argument's or auxiliary state's) to `a`, with the views of it and the outputs.
  void Rebind(std::uint32_t e, const NDArray& a) {
    arr[e] = a;
    for (const auto& [out, in] : argument_views) {
      if (in == e) arr[out] = a.Reshape(shape[out]);
    }
    for (std::size_t k = 0; k < g.heads.size(); ++k) outputs[k] = arr[g.entry_id(g.heads[k])];
  }
  // SetArgArray / SetAuxArray: entry i of `bound` (variables `nodes`, named `names`) becomes `a`.
  void SetBound(const char* what, std::vector<NDArray>& bound, const std::vector<std::string>& names,
                const std::vector<std::uint32_t>& nodes, std::size_t i, const NDArray& a) {
    if (i >= bound.size()) throw Error(std::string(what) + " " + std::to_string(i) + " of " + std::to_string(bound.size()));
    CheckSame(bound[i], a, std::string(what) + " '" + names[i] + "'");
    bound[i] = a;
    Rebind(g.entry_id(nodes[i], 0), a);
  }
  void CheckSame(const NDArray& have, const NDArray& a, const std::string& what) const {
    if (a.is_none() || a.shape() != have.shape() || a.dtype() != have.dtype() || a.ctx() != have.ctx() ||
        a.engine() != have.engine()) {
      throw Error(what + ": the new array must have the bound one's shape " + have.shape().ToString() + ", type " +
                  DTypeName(have.dtype()) + ", device " + have.ctx().ToString() + " and engine" +
                  (a.is_none() ? std::string(" (it is empty)")
                               : ", it has " + a.shape().ToString() + " " + DTypeName(a.dtype()) + " on " +
                                     a.ctx().ToString()));
    }
  }

  std::string NodeDesc(std::uint32_t n) const {
    const graph::Node* node = g.nodes[n];
    return "node '" + node->name + "' (" + (node->is_variable() ? std::string("variable") : node->op->TypeString()) +
           ")";
  }

  // Collects prepared operator calls and pushes them in segments of up to bulk_max_nodes (bulk execution).
  class Bulk {
   public:
    explicit Bulk(const Impl& m) : m_(m) {}
    void Add(OperatorRunner::Call call, const OperatorRunner& runner, const std::string* name = nullptr) {
      calls_.push_back(std::move(call));
      names_.push_back(name != nullptr ? name : &runner.name());
      if (calls_.size() >= static_cast<std::size_t>(m_.options.bulk_max_nodes)) Flush();
    }
    void Flush() {
      if (calls_.empty()) return;
      if (calls_.size() == 1) {
        OperatorRunner::Call& c = calls_[0];
        m_.engine->PushSync(std::move(c.fn), m_.ctx, c.const_vars, c.mutable_vars, FnProperty::kNormal, 0,
                            names_[0]->c_str());
      } else {
        std::vector<VarHandle> reads, writes;
        std::vector<SyncFn> fns;
        std::string name = "bulk:";
        for (std::size_t i = 0; i < calls_.size(); ++i) {
          OperatorRunner::Call& c = calls_[i];
          reads.insert(reads.end(), c.const_vars.begin(), c.const_vars.end());
          writes.insert(writes.end(), c.mutable_vars.begin(), c.mutable_vars.end());
          fns.push_back(std::move(c.fn));
          name += (i == 0 ? "" : ",") + *names_[i];
        }
        // The engine removes duplicates, and a variable both read and written counts as written. While the
        // profiler runs, each operator of the segment is a span of its own (the aggregate counts operators).
        std::vector<std::string> op_names;
        if (Profiler::on()) {
          for (const std::string* n : names_) op_names.push_back(*n);
        }
        m_.engine->PushSync(
            [fns = std::move(fns), op_names = std::move(op_names)](RunContext rctx) {
              for (std::size_t i = 0; i < fns.size(); ++i) {
                if (op_names.empty()) {
                  fns[i](rctx);
                } else {
                  const ProfileScope span("operator", op_names[i].c_str());
                  fns[i](rctx);
                }
              }
            },
            m_.ctx, reads, writes, FnProperty::kNormal, 0, name.c_str());
      }
      calls_.clear();
      names_.clear();
    }

   private:
    const Impl& m_;
    std::vector<OperatorRunner::Call> calls_;
    std::vector<const std::string*> names_;
  };

  void Build();
  void BuildRunners();
  void BindControlFlow(std::uint32_t n, const graph::ControlFlowProperty& op, std::vector<TShape> in_shapes,
                       std::vector<int> in_types);
  bool FuseForInference();
  // The visible outputs' shapes of node n as inference over the whole graph finds them, from the bound
  // arguments and auxiliary states (consumers fill in what a producer leaves open); empty when it knows
  // none. The inference runs once, on first need.
  std::vector<TShape> OutputShapesFromGraph(std::uint32_t n);
  std::optional<std::map<std::pair<const graph::Node*, std::uint32_t>, TShape>> graph_shapes;
  void BuildBackward(std::vector<graph::PlanEntry>* pe, std::vector<graph::PlanStep>* steps);
};

// ------------------------------------------------------------------------------------------------ binding

void Executor::Impl::BuildRunners() {
  const std::uint32_t N = g.num_entries;
  num_entries = N;
  shape.assign(2 * N, TShape());
  dtype.assign(2 * N, kTypeUnknown);
  arr.assign(2 * N, NDArray());
  runners.resize(g.nodes.size());
  flow.resize(g.nodes.size());
  flow_backward.assign(g.nodes.size(), 0);
  for (std::size_t k = 0; k < g.arg_nodes.size(); ++k) {
    const std::uint32_t e = g.entry_id(g.arg_nodes[k], 0);
    arr[e] = args[k];
  }
  for (std::size_t k = 0; k < g.aux_nodes.size(); ++k) {
    const std::uint32_t e = g.entry_id(g.aux_nodes[k], 0);
    arr[e] = aux[k];
  }
  for (std::uint32_t n = 0; n < g.nodes.size(); ++n) {
    const graph::Node* node = g.nodes[n];
    if (node->is_variable()) {
      const std::uint32_t e = g.entry_id(n, 0);
      if (arr[e].is_none()) {
        throw Error("Bind: variable '" + node->name + "' is neither an argument nor an auxiliary state of the symbol");
      }
      shape[e] = arr[e].shape();
      dtype[e] = static_cast<int>(arr[e].dtype());
      continue;
    }
    const std::size_t na = node->num_arguments();
    std::vector<TShape> in_shapes;
    std::vector<int> in_types;
    for (std::size_t i = 0; i < na; ++i) {
      const std::uint32_t e = g.entry_id(g.inputs[n][i]);
      in_shapes.push_back(shape[e]);
      in_types.push_back(dtype[e]);
    }
    if (const graph::ControlFlowProperty* cf = graph::AsControlFlow(*node->op)) {
      BindControlFlow(n, *cf, in_shapes, in_types);
      continue;
    }
    try {
      try {
        runners[n] = std::make_unique<OperatorRunner>(node->op, ctx, in_shapes, in_types, engine);
      } catch (const Error&) {
        // An output shape only the consumers tell (MXNet 1.x's 0 dimensions: an RNN's begin state made by
        // _zeros(shape=(2, 0, 100))): try again with what whole-graph inference knows of the outputs.
        std::vector<TShape> hint = OutputShapesFromGraph(n);
        if (hint.empty()) throw;
        runners[n] = std::make_unique<OperatorRunner>(node->op, ctx, in_shapes, in_types, engine, hint);
      }
    } catch (const Error& err) {
      // Name the bound argument whose shape the operator rejects, when one can be pinned down: leave it out
      // and see what the operator infers for it from the others.
      for (std::size_t i = 0; i < na; ++i) {
        const auto& src = g.inputs[n][i];
        if (!g.nodes[src.node]->is_variable()) continue;
        std::vector<TShape> s = in_shapes, o, a;
        s[i] = TShape();
        bool ok = false;
        try {
          ok = node->op->InferShape(&s, &o, &a);
        } catch (const Error&) {
          ok = false;
        }
        if (ok && s[i].known() && s[i] != in_shapes[i]) {
          throw Error("Bind: argument '" + g.nodes[src.node]->name + "' has shape " + in_shapes[i].ToString() +
                      " but " + NodeDesc(n) + " needs " + s[i].ToString() + " (from the shapes of its other inputs)");
        }
      }
      throw Error("Bind: " + NodeDesc(n) + ": " + err.what());
    }
    const OperatorRunner& r = *runners[n];
    for (std::size_t j = 0; j < node->num_outputs(); ++j) {
      const std::uint32_t e = g.entry_id(n, static_cast<std::uint32_t>(j));
      shape[e] = r.out_shapes()[j];
      dtype[e] = r.out_types()[j];
    }
    const auto aux_names_op = node->op->ListAuxiliaryStates();
    if (node->inputs.size() != na + aux_names_op.size() || g.inputs[n].size() != na + aux_names_op.size()) {
      throw Error("Bind: " + NodeDesc(n) + " has " + std::to_string(g.inputs[n].size()) +
                  " inputs but its operator takes " + std::to_string(na + aux_names_op.size()));
    }
    for (std::size_t k = 0; k < aux_names_op.size(); ++k) {
      const std::uint32_t e = g.entry_id(g.inputs[n][na + k]);
      if (shape[e] != r.aux_shapes()[k]) {
        throw Error("Bind: auxiliary state '" + g.nodes[g.inputs[n][na + k].node]->name + "' has shape " +
                    shape[e].ToString() + " but " + NodeDesc(n) + " needs " + r.aux_shapes()[k].ToString());
      }
      if (dtype[e] != r.aux_types()[k]) {
        throw Error("Bind: auxiliary state '" + g.nodes[g.inputs[n][na + k].node]->name + "' has type " +
                    DTypeName(static_cast<DType>(dtype[e])) + " but " + NodeDesc(n) + " needs " +
                    DTypeName(static_cast<DType>(r.aux_types()[k])));
      }
    }
  }
}

// A control-flow node: its outputs' shapes and types through its subgraphs, and its runner.
void Executor::Impl::BindControlFlow(std::uint32_t n, const graph::ControlFlowProperty& op, std::vector<TShape> in_shapes,
                                     std::vector<int> in_types) {
  std::vector<TShape> out_shapes, aux_shapes;
  std::vector<int> out_types, aux_types;
  try {
    if (!op.InferShape(&in_shapes, &out_shapes, &aux_shapes)) {
      throw Error("the shapes of its outputs do not follow from its inputs' through its subgraphs");
    }
    if (!op.InferType(&in_types, &out_types, &aux_types)) {
      throw Error("the types of its outputs do not follow from its inputs' through its subgraphs");
    }
  } catch (const Error& err) {
    throw Error("Bind: " + NodeDesc(n) + ": " + err.what());
  }
  for (std::uint32_t j = 0; j < g.nodes[n]->num_outputs(); ++j) {
    const std::uint32_t e = g.entry_id(n, j);
    shape[e] = out_shapes.at(j);
    dtype[e] = out_types.at(j);
  }
  flow[n] = op.CreateRunner(ctx, engine);
}

std::vector<TShape> Executor::Impl::OutputShapesFromGraph(std::uint32_t n) {
  if (!graph_shapes.has_value()) {
    graph_shapes.emplace();
    std::map<std::string, TShape> known;
    for (std::uint32_t i = 0; i < g.nodes.size(); ++i) {
      if (g.nodes[i]->is_variable() && shape[g.entry_id(i, 0)].known()) known[g.nodes[i]->name] = shape[g.entry_id(i, 0)];
    }
    const Symbol internals = symbol.GetInternals();
    std::vector<TShape> arg_shapes, out_shapes, aux_shapes;
    std::string why;
    try {
      internals.InferShape(known, &arg_shapes, &out_shapes, &aux_shapes, &why);
    } catch (const Error&) {
      return {};  // the node's own error is the one to report
    }
    const auto& outs = internals.outputs();
    for (std::size_t k = 0; k < outs.size() && k < out_shapes.size(); ++k) {
      (*graph_shapes)[{outs[k].node.get(), outs[k].index}] = out_shapes[k];
    }
  }
  const graph::Node* node = g.nodes[n];
  std::vector<TShape> hint;
  bool any = false;
  for (std::uint32_t k = 0; k < node->num_visible_outputs(); ++k) {
    auto it = graph_shapes->find({node, k});
    hint.push_back(it != graph_shapes->end() ? it->second : TShape());
    any = any || (it != graph_shapes->end() && it->second.ndim() >= 0);
  }
  return any ? hint : std::vector<TShape>{};
}

void Executor::Impl::Build() {
  BuildRunners();
  if (FuseForInference()) BuildRunners();
  const std::uint32_t N = num_entries;

  std::vector<bool> is_head(N, false);
  for (const auto& h : g.heads) is_head[g.entry_id(h)] = true;

  std::vector<graph::PlanEntry> pe(2 * N);
  for (std::uint32_t e = 0; e < N; ++e) {
    pe[e].bytes =
        static_cast<std::int64_t>(shape[e].Size()) * static_cast<std::int64_t>(DTypeSize(static_cast<DType>(dtype[e])));
    pe[e].dtype = dtype[e];
    pe[e].kind = graph::PlanEntry::kPlanned;
    pe[N + e] = pe[e];
    pe[N + e].kind = graph::PlanEntry::kExternal;  // gradients: decided by BuildBackward
    shape[N + e] = shape[e];
    dtype[N + e] = dtype[e];
  }
  std::vector<graph::PlanStep> steps;
  for (std::uint32_t n = 0; n < g.nodes.size(); ++n) {
    const graph::Node* node = g.nodes[n];
    if (node->is_variable()) {
      pe[g.entry_id(n, 0)].kind = graph::PlanEntry::kExternal;
      continue;
    }
    FwdStep f;
    f.node = n;
    graph::PlanStep ps;
    const std::size_t na = node->num_arguments();
    for (std::size_t i = 0; i < g.inputs[n].size(); ++i) {
      const std::uint32_t e = g.entry_id(g.inputs[n][i]);
      (i < na ? f.in : f.aux).push_back(e);
      ps.reads.push_back(e);
    }
    for (std::uint32_t j = 0; j < node->num_outputs(); ++j) {
      const std::uint32_t e = g.entry_id(n, j);
      f.out.push_back(e);
      ps.writes.push_back(e);
      if (is_head[e]) pe[e].kind = graph::PlanEntry::kDedicated;  // users read the outputs
    }
    std::vector<int> in_ids(na);
    std::vector<void*> out_ptrs(node->num_outputs());
    for (std::size_t i = 0; i < na; ++i) in_ids[i] = static_cast<int>(i);
    for (std::size_t j = 0; j < out_ptrs.size(); ++j) out_ptrs[j] = IndexPtr(j);
    for (const auto& [i, p] : node->op->ForwardInplaceOption(in_ids, out_ptrs)) {
      const std::size_t j = PtrIndex(p);
      if (i < 0 || static_cast<std::size_t>(i) >= na || j >= out_ptrs.size()) continue;
      const std::uint32_t in = f.in[i], out = f.out[j];
      // An identity (Flatten, Reshape) of an argument: the output is a view of the argument, and the
      // operator's copy finds nothing to do. The view is external to the plan, so nothing takes it in place
      // (which would write into the argument).
      if (options.plan_memory && node->op->ForwardInplaceIdentity() && pe[in].kind == graph::PlanEntry::kExternal &&
          pe[out].kind == graph::PlanEntry::kPlanned && pe[in].bytes == pe[out].bytes && pe[in].dtype == pe[out].dtype) {
        pe[out].kind = graph::PlanEntry::kExternal;
        argument_views.emplace_back(out, in);
        continue;
      }
      ps.inplace.emplace_back(in, out);
    }
    fwd.push_back(std::move(f));
    steps.push_back(std::move(ps));
  }

  if (need_backward) BuildBackward(&pe, &steps);

  plan = graph::PlanMemory(pe, steps, options.plan_memory);
  for (const auto& [out, in] : argument_views) {
    arr[out] = arr[in].Reshape(shape[out]);
    plan.stats.naive_bytes += pe[out].bytes;  // without planning it would have had its own buffer
    ++plan.stats.inplace;
  }
  storage.clear();
  for (std::size_t s = 0; s < plan.storage_bytes.size(); ++s) {
    const auto dt = static_cast<DType>(plan.storage_dtype[s]);
    const auto elems = std::max<std::int64_t>(1, plan.storage_bytes[s] / static_cast<std::int64_t>(DTypeSize(dt)));
    storage.emplace_back(TShape({elems}), ctx, dt, engine);
  }
  for (std::size_t e = 0; e < pe.size(); ++e) {
    const int sid = plan.storage[e];
    if (sid < 0) continue;
    const std::int64_t elems = shape[e].Size();
    if (elems == 0) {
      // Reshape reads a 0 dimension as "copy this dimension"; an empty array needs no storage anyway.
      arr[e] = NDArray(shape[e], ctx, static_cast<DType>(dtype[e]), engine);
      continue;
    }
    NDArray view = storage[sid].shape()[0] == elems ? storage[sid] : storage[sid].Slice(0, elems);
    arr[e] = view.Reshape(shape[e]);
  }
  for (auto& f : fwd) {
    for (auto e : f.out) f.req.push_back(plan.inplace[e] ? kWriteInplace : kWriteTo);
  }
  for (auto& b : bwd) {
    if (b.kind != BwStep::kNode) continue;
    for (std::size_t i = 0; i < b.in_grad.size(); ++i) {
      // Only the first write of a planned gradient allocates it, so only that one can be in place.
      if (b.in_grad[i] >= 0 && b.req[i] == kWriteTo && plan.inplace[b.in_grad[i]]) b.req[i] = kWriteInplace;
    }
  }
  for (const auto& h : g.heads) outputs.push_back(arr[g.entry_id(h)]);
}

void Executor::Impl::BuildBackward(std::vector<graph::PlanEntry>* pe, std::vector<graph::PlanStep>* steps) {
  const std::uint32_t N = num_entries;
  // Which entries need a gradient: an argument with a request, or an output of a node with a backward that
  // has an input needing one (a path to an argument with a gradient).
  std::vector<bool> grad_needed(N, false), node_bw(g.nodes.size(), false);
  for (std::size_t k = 0; k < g.arg_nodes.size(); ++k) {
    if (reqs[k] != kNullOp) grad_needed[g.entry_id(g.arg_nodes[k], 0)] = true;
  }
  for (std::uint32_t n = 0; n < g.nodes.size(); ++n) {
    const graph::Node* node = g.nodes[n];
    if (node->is_variable() || !node->op->HasBackward()) continue;
    for (std::size_t i = 0; i < node->num_arguments(); ++i) {
      if (grad_needed[g.entry_id(g.inputs[n][i])]) node_bw[n] = true;
    }
    if (node_bw[n]) {
      for (std::uint32_t j = 0; j < node->num_outputs(); ++j) grad_needed[g.entry_id(n, j)] = true;
    }
  }

  // Contributions to each gradient, in push order: heads first, then nodes in reverse topological order.
  struct Contribution {
    bool head = false;
    std::size_t index = 0;  // head index, or node
    std::size_t arg = 0;
  };
  std::vector<std::vector<Contribution>> contribs(N);
  for (std::size_t k = 0; k < g.heads.size(); ++k) {
    const std::uint32_t e = g.entry_id(g.heads[k]);
    if (grad_needed[e]) contribs[e].push_back({true, k, 0});
  }
  std::vector<std::uint32_t> bw_nodes;
  for (std::uint32_t n = static_cast<std::uint32_t>(g.nodes.size()); n-- > 0;) {
    if (!node_bw[n]) continue;
    bw_nodes.push_back(n);
    flow_backward[n] = 1;
    for (std::size_t i = 0; i < g.nodes[n]->num_arguments(); ++i) {
      const std::uint32_t e = g.entry_id(g.inputs[n][i]);
      if (grad_needed[e]) contribs[e].push_back({false, n, i});
    }
  }

  // Where each gradient lives.
  std::vector<int> arg_of_entry(N, -1);
  for (std::size_t k = 0; k < g.arg_nodes.size(); ++k)
    arg_of_entry[g.entry_id(g.arg_nodes[k], 0)] = static_cast<int>(k);
  ones.resize(g.heads.size());
  for (std::size_t k = 0; k < g.heads.size(); ++k) {
    const std::uint32_t e = g.entry_id(g.heads[k]);
    ones[k] = NDArray::Ones(shape[e], ctx, static_cast<DType>(dtype[e]), engine);
  }
  for (std::uint32_t e = 0; e < N; ++e) {
    if (!grad_needed[e]) continue;
    const std::uint32_t ge = N + e;
    if (arg_of_entry[e] >= 0) {
      arr[ge] = grads[static_cast<std::size_t>(arg_of_entry[e])];
      if (contribs[e].empty() && reqs[static_cast<std::size_t>(arg_of_entry[e])] == kWriteTo) {
        zero_fill_args.push_back(static_cast<std::size_t>(arg_of_entry[e]));
      }
    } else if (contribs[e].empty()) {
      // An output nobody differentiates through (a hidden one, or one no node reads): a zero gradient.
      arr[ge] = NDArray::Zeros(shape[e], ctx, static_cast<DType>(dtype[e]), engine);
    } else if (contribs[e].size() == 1 && contribs[e][0].head) {
      head_alias.emplace_back(contribs[e][0].index, ge);
    } else {
      (*pe)[ge].kind = graph::PlanEntry::kPlanned;
    }
  }
  // Request of a contribution: the user's kAddTo adds every one; otherwise the first writes.
  auto req_of = [&](std::uint32_t e, std::size_t pos) -> OpReqType {
    if (arg_of_entry[e] >= 0 && reqs[static_cast<std::size_t>(arg_of_entry[e])] == kAddTo) return kAddTo;
    return pos == 0 ? kWriteTo : kAddTo;
  };
  std::vector<std::size_t> next(N, 0);  // contributions pushed so far, per entry

  for (std::size_t k = 0; k < g.heads.size(); ++k) {
    const std::uint32_t e = g.entry_id(g.heads[k]);
    if (!grad_needed[e] || ((*pe)[N + e].kind == graph::PlanEntry::kExternal && arg_of_entry[e] < 0)) {
      if (grad_needed[e]) ++next[e];  // aliased: nothing to push
      continue;
    }
    BwStep b;
    b.kind = BwStep::kHead;
    b.head = k;
    b.dst = N + e;
    b.first = req_of(e, next[e]++) == kWriteTo;
    bwd.push_back(b);
    graph::PlanStep ps;
    ps.writes.push_back(N + e);
    steps->push_back(std::move(ps));
  }

  for (std::uint32_t n : bw_nodes) {
    const graph::Node* node = g.nodes[n];
    const OperatorProperty& op = *node->op;
    const std::size_t na = node->num_arguments();
    const std::size_t nout = node->num_outputs(), nvis = node->num_visible_outputs();
    BwStep b;
    b.kind = BwStep::kNode;
    b.node = n;
    b.out_grad.assign(nvis, -1);
    b.in_data.assign(na, -1);
    b.out_data.assign(nout, -1);
    b.in_grad.assign(na, -1);
    b.req.assign(na, kNullOp);
    for (std::size_t k = na; k < g.inputs[n].size(); ++k) b.aux.push_back(g.entry_id(g.inputs[n][k]));
    std::vector<int> og(nvis), id(na), od(nout);
    for (std::size_t i = 0; i < nvis; ++i) og[i] = static_cast<int>(i);
    for (std::size_t i = 0; i < na; ++i) id[i] = static_cast<int>(nvis + i);
    for (std::size_t i = 0; i < nout; ++i) od[i] = static_cast<int>(nvis + na + i);
    graph::PlanStep ps;
    // Plan entry behind each dependency id.
    auto entry_of_id = [&](int d) -> int {
      if (d < 0) return -1;
      const auto u = static_cast<std::size_t>(d);
      if (u < nvis) return static_cast<int>(N + g.entry_id(n, static_cast<std::uint32_t>(u)));
      if (u < nvis + na) return static_cast<int>(g.entry_id(g.inputs[n][u - nvis]));
      if (u < nvis + na + nout) return static_cast<int>(g.entry_id(n, static_cast<std::uint32_t>(u - nvis - na)));
      return -1;
    };
    for (int d : op.DeclareBackwardDependency(og, id, od)) {
      const int e = entry_of_id(d);
      if (e < 0) continue;
      const auto u = static_cast<std::size_t>(d);
      if (u < nvis) {
        b.out_grad[u] = e;
      } else if (u < nvis + na) {
        b.in_data[u - nvis] = e;
      } else {
        b.out_data[u - nvis - na] = e;
      }
      ps.reads.push_back(static_cast<std::uint32_t>(e));
    }
    std::vector<BwStep> adds;
    std::vector<graph::PlanStep> add_steps;
    std::vector<std::uint32_t> seen;
    for (std::size_t i = 0; i < na; ++i) {
      const std::uint32_t e = g.entry_id(g.inputs[n][i]);
      if (!grad_needed[e]) continue;
      const OpReqType r = req_of(e, next[e]++);
      if (std::find(seen.begin(), seen.end(), e) == seen.end()) {
        seen.push_back(e);
        b.in_grad[i] = static_cast<int>(N + e);
        b.req[i] = r;
        ps.writes.push_back(N + e);
        continue;
      }
      // The same entry at a second position of this node: written to a temporary, then added, so that no
      // operator writes one buffer through two of its gradients.
      const auto t = static_cast<std::uint32_t>(pe->size());
      graph::PlanEntry tp = (*pe)[e];
      tp.kind = graph::PlanEntry::kPlanned;
      pe->push_back(tp);
      shape.push_back(shape[e]);
      dtype.push_back(dtype[e]);
      arr.emplace_back();
      b.in_grad[i] = static_cast<int>(t);
      b.req[i] = kWriteTo;
      ps.writes.push_back(t);
      BwStep add;
      add.kind = BwStep::kAdd;
      add.src = t;
      add.dst = N + e;
      adds.push_back(add);
      graph::PlanStep aps;
      aps.reads.push_back(t);
      aps.writes.push_back(N + e);
      add_steps.push_back(std::move(aps));
    }
    std::vector<void*> ig(na);
    for (std::size_t i = 0; i < na; ++i) ig[i] = IndexPtr(i);
    for (const auto& [d, p] : op.BackwardInplaceOption(og, id, od, ig)) {
      const std::size_t i = PtrIndex(p);
      const int src = entry_of_id(d);
      if (i >= na || src < 0 || b.in_grad[i] < 0 || b.req[i] != kWriteTo) continue;
      ps.inplace.emplace_back(static_cast<std::uint32_t>(src), static_cast<std::uint32_t>(b.in_grad[i]));
    }
    bwd.push_back(std::move(b));
    steps->push_back(std::move(ps));
    for (std::size_t k = 0; k < adds.size(); ++k) {
      bwd.push_back(std::move(adds[k]));
      steps->push_back(std::move(add_steps[k]));
    }
  }
}

// ------------------------------------------------------------------------------------------------ fusion

namespace {

// The post-op an Activation node fuses as (kNone: not an Activation, or one that does not fuse).
FusedActivation ActivationOf(const graph::Node& node) {
  if (node.is_variable() || node.op->TypeString() != "Activation") return FusedActivation::kNone;
  for (const auto& [k, v] : node.op->GetParams()) {
    if (k == "act_type") return FusedActivationOf(v);
  }
  return FusedActivation::kNone;
}

bool IsAdd(const graph::Node& node) { return !node.is_variable() && node.op->TypeString() == "elemwise_add"; }
bool IsBatchNorm(const graph::Node& node) { return !node.is_variable() && node.op->TypeString() == "BatchNorm"; }

}  // namespace

// MXNet's MKLDNN subgraph property for convolutions (mkldnn_conv_property.h), at inference: a Convolution whose
// output only a BatchNorm reads (folded into it), and/or whose (or whose BatchNorm's) output only an
// Activation (relu, sigmoid, tanh or softrelu) reads, or only an elemwise_add reads (the other addend already
// computed), optionally followed by such an activation that alone reads the sum, becomes one node
// (op/detail/fusion.h). The intermediate arrays must have exactly one reader and not be outputs of the symbol
// (BatchNorm's statistics outputs no reader at all); everything float32 on the CPU; never with gradients (no
// backward exists for the fused node). Arrays between fused nodes may stay in oneDNN's blocked layout (below).
// Rewrites g (runners are built again by the caller) and returns whether anything was fused.
bool Executor::Impl::FuseForInference() {
  if (options.fuse_inference != 1 || need_backward || ctx.dev_type != DeviceType::kCPU) return false;
  const std::uint32_t N = g.num_entries;
  const auto f32 = static_cast<int>(DType::kFloat32);
  std::vector<int> uses(N, 0);
  std::vector<std::uint32_t> reader(N, 0);  // the reader of an entry read once
  std::vector<char> head(N, 0);
  for (const auto& h : g.heads) head[g.entry_id(h)] = 1;
  for (std::uint32_t n = 0; n < g.nodes.size(); ++n) {
    for (const auto& in : g.inputs[n]) {
      ++uses[g.entry_id(in)];
      reader[g.entry_id(in)] = n;
    }
  }
  // The reader of node n's first output when it is the only one: one use, not an output, float32, and any
  // other output of n (BatchNorm's statistics) unread.
  auto sole_reader = [&](std::uint32_t n) -> int {
    const graph::Node* node = g.nodes[n];
    if (node->is_variable()) return -1;
    for (std::uint32_t k = 1; k < node->num_outputs(); ++k) {
      const std::uint32_t e = g.entry_id(n, k);
      if (head[e] || uses[e] != 0) return -1;
    }
    const std::uint32_t e = g.entry_id(n, 0);
    if (head[e] || uses[e] != 1 || dtype[e] != f32) return -1;
    return static_cast<int>(reader[e]);
  };

  struct Group {
    std::uint32_t conv = 0, last = 0;
    int bn = -1;           // the BatchNorm node, -1 without
    int add = -1;          // the elemwise_add node, -1 without
    std::uint32_t other = 0;  // the add's other input (an entry of g)
    FusedActivation act = FusedActivation::kNone;  // the activation node's post-op (grp.last is that node)
    ConvFusion fusion;
    std::shared_ptr<const OperatorProperty> op;
  };
  std::vector<Group> groups;
  std::vector<int> group_of_last(g.nodes.size(), -1);
  std::vector<char> absorbed(g.nodes.size(), 0);
  for (std::uint32_t n = 0; n < g.nodes.size(); ++n) {
    const graph::Node* node = g.nodes[n];
    if (node->is_variable() || node->op->TypeString() != "Convolution" || absorbed[n]) continue;
    bool in_f32 = true;
    for (const auto& in : g.inputs[n]) in_f32 = in_f32 && dtype[g.entry_id(in)] == f32;
    int next = sole_reader(n);
    // A reader already in a group: an add whose other addend is a convolution fused with it before.
    if (!in_f32 || next < 0 || absorbed[static_cast<std::uint32_t>(next)]) continue;
    Group grp;
    grp.conv = n;
    std::uint32_t cur = n;  // the node whose first output the post-ops take: the convolution or its BatchNorm
    if (IsBatchNorm(*g.nodes[static_cast<std::uint32_t>(next)])) {
      const auto bn = static_cast<std::uint32_t>(next);
      bool bn_f32 = dtype[g.entry_id(bn, 0)] == f32;
      for (const auto& in : g.inputs[bn]) bn_f32 = bn_f32 && dtype[g.entry_id(in)] == f32;
      // BatchNorm's statistics outputs must be unread: sole_reader(bn) checks them; a BatchNorm whose output
      // is the symbol's, or has several readers, still folds (the group ends with it).
      bool stats_unread = true;
      for (std::uint32_t k = 1; k < g.nodes[bn]->num_outputs(); ++k) {
        const std::uint32_t e = g.entry_id(bn, k);
        stats_unread = stats_unread && !head[e] && uses[e] == 0;
      }
      // The convolution must be BatchNorm's data (not, say, its gamma).
      if (!bn_f32 || !stats_unread || g.inputs[bn].size() != 5 || g.entry_id(g.inputs[bn][0]) != g.entry_id(n, 0)) {
        continue;
      }
      grp.bn = static_cast<int>(bn);
      grp.last = bn;
      cur = bn;
      next = sole_reader(bn);
    }
    const auto nx = static_cast<std::uint32_t>(next);
    if (next < 0 || absorbed[nx]) {
      if (grp.bn < 0) continue;  // the BatchNorm alone
    } else if (ActivationOf(*g.nodes[nx]) != FusedActivation::kNone) {
      grp.act = ActivationOf(*g.nodes[nx]);
      grp.last = nx;
    } else if (IsAdd(*g.nodes[nx]) && g.inputs[nx].size() == 2) {
      const std::uint32_t c = g.entry_id(cur, 0);
      const std::uint32_t a = g.entry_id(g.inputs[nx][0]), b = g.entry_id(g.inputs[nx][1]);
      const std::uint32_t other = a == c ? b : a;
      if (other != c && dtype[other] == f32 && shape[other] == shape[c] && dtype[g.entry_id(nx, 0)] == f32) {
        grp.other = other;
        grp.add = static_cast<int>(nx);
        grp.last = nx;
        const int after = sole_reader(nx);
        if (after >= 0 && ActivationOf(*g.nodes[static_cast<std::uint32_t>(after)]) != FusedActivation::kNone) {
          grp.act = ActivationOf(*g.nodes[static_cast<std::uint32_t>(after)]);
          grp.last = static_cast<std::uint32_t>(after);
        }
      } else if (grp.bn < 0) {
        continue;
      }
    } else if (grp.bn < 0) {
      continue;
    }
    grp.fusion.batch_norm = grp.bn >= 0 ? g.nodes[static_cast<std::uint32_t>(grp.bn)]->op.get() : nullptr;
    grp.fusion.sum = grp.add >= 0;
    grp.fusion.act = grp.act;
    grp.op = FuseConvolution(*node->op, grp.fusion);
    if (!grp.op) continue;
    absorbed[n] = 1;
    if (grp.bn >= 0) absorbed[static_cast<std::uint32_t>(grp.bn)] = 1;
    if (grp.add >= 0) absorbed[static_cast<std::uint32_t>(grp.add)] = 1;
    absorbed[grp.last] = 1;
    group_of_last[grp.last] = static_cast<int>(groups.size());
    groups.push_back(std::move(grp));
  }
  if (groups.empty()) return false;

  // Arrays kept in oneDNN's channel-blocked layout (op/detail/fusion.h): written by a fused node, read only by
  // fused convolutions (as their data, or as the addend of their sum), not an output of the symbol.
  {
    std::vector<int> group_of(g.nodes.size(), -1);  // the group of a convolution or an add inside one
    for (std::size_t gi = 0; gi < groups.size(); ++gi) {
      group_of[groups[gi].conv] = static_cast<int>(gi);
      if (groups[gi].add >= 0) group_of[static_cast<std::uint32_t>(groups[gi].add)] = static_cast<int>(gi);
    }
    std::vector<char> blocked(N, 0);
    for (const Group& grp : groups) {
      const std::uint32_t e = g.entry_id(grp.last, 0);
      blocked[e] = !head[e] && uses[e] > 0 && FusedConvolutionKeepsBlocked(shape[e]);
    }
    for (std::uint32_t m = 0; m < g.nodes.size(); ++m) {
      for (std::size_t k = 0; k < g.inputs[m].size(); ++k) {
        const std::uint32_t e = g.entry_id(g.inputs[m][k]);
        if (!blocked[e]) continue;
        const int gi = group_of[m];
        const bool as_data = gi >= 0 && groups[static_cast<std::size_t>(gi)].conv == m && k == 0;
        const bool as_sum = gi >= 0 && groups[static_cast<std::size_t>(gi)].add == static_cast<int>(m) &&
                            groups[static_cast<std::size_t>(gi)].other == e;
        if (!as_data && !as_sum) blocked[e] = 0;
      }
    }
    for (Group& grp : groups) {
      grp.fusion.blocked_in = blocked[g.entry_id(g.inputs[grp.conv][0])] != 0;
      grp.fusion.blocked_out = blocked[g.entry_id(grp.last, 0)] != 0;
      grp.fusion.blocked_sum = grp.add >= 0 && blocked[grp.other] != 0;
      if (grp.fusion.blocked_in || grp.fusion.blocked_out || grp.fusion.blocked_sum) {
        grp.op = FuseConvolution(*g.nodes[grp.conv]->op, grp.fusion);
        if (!grp.op) throw Error("Bind: the inference fusion pass could not keep a layout (a bug; TROUPE_EXEC_FUSE=0)");
      }
    }
  }

  // The original nodes as shared pointers (g holds raw ones): from their readers' inputs and the heads.
  std::map<const graph::Node*, std::shared_ptr<graph::Node>> owned;
  for (const auto& out : symbol.outputs()) owned[out.node.get()] = out.node;
  for (const graph::Node* node : g.nodes) {
    for (const auto& in : node->inputs) owned[in.node.get()] = in.node;
  }
  // Every operator node is copied with its inputs redirected (nodes are immutable once built); a group is one
  // new node in place of its last node, the nodes before it in the group are left out (no one else reads them).
  std::vector<std::shared_ptr<graph::Node>> now(g.nodes.size());
  auto entry = [&](const graph::IndexedGraph::Entry& e) { return graph::NodeEntry{now[e.node], e.index}; };
  std::vector<const graph::Node*> fused_nodes;
  for (std::uint32_t n = 0; n < g.nodes.size(); ++n) {
    const graph::Node* node = g.nodes[n];
    if (node->is_variable()) {
      now[n] = owned.at(node);
      continue;
    }
    const int gi = group_of_last[n];
    if (gi < 0) {
      if (absorbed[n]) continue;  // a convolution or sum inside a group: its group's node replaces it
      auto copy = std::make_shared<graph::Node>(*node);
      for (std::size_t i = 0; i < copy->inputs.size(); ++i) copy->inputs[i] = entry(g.inputs[n][i]);
      now[n] = std::move(copy);
      continue;
    }
    const Group& grp = groups[static_cast<std::size_t>(gi)];
    auto fused = std::make_shared<graph::Node>();
    fused->op = grp.op;
    fused->attrs = g.nodes[grp.conv]->attrs;
    fused->name = g.nodes[grp.conv]->name;
    if (grp.bn >= 0) fused->name += "+" + g.nodes[static_cast<std::uint32_t>(grp.bn)]->name;
    if (grp.add >= 0) fused->name += "+" + g.nodes[static_cast<std::uint32_t>(grp.add)]->name;
    if (grp.act != FusedActivation::kNone) fused->name += "+" + node->name;
    for (const auto& in : g.inputs[grp.conv]) fused->inputs.push_back(entry(in));
    // BatchNorm's gamma and beta follow the convolution's arguments; its moving statistics come last (the
    // fused node's auxiliary states).
    const auto* bn_inputs = grp.bn >= 0 ? &g.inputs[static_cast<std::uint32_t>(grp.bn)] : nullptr;
    if (bn_inputs != nullptr) {
      fused->inputs.push_back(entry((*bn_inputs)[1]));
      fused->inputs.push_back(entry((*bn_inputs)[2]));
    }
    if (grp.add >= 0) {
      // The other addend, by entry id: find its (node, output).
      for (const auto& in : g.inputs[static_cast<std::uint32_t>(grp.add)]) {
        if (g.entry_id(in) == grp.other) {
          fused->inputs.push_back(entry(in));
          break;
        }
      }
    }
    if (bn_inputs != nullptr) {
      fused->inputs.push_back(entry((*bn_inputs)[3]));
      fused->inputs.push_back(entry((*bn_inputs)[4]));
    }
    fused_nodes.push_back(fused.get());
    now[n] = std::move(fused);
  }
  std::vector<graph::NodeEntry> outs;
  for (const auto& h : g.heads) outs.push_back(entry(h));
  std::vector<const graph::Node*> arg_ptrs, aux_ptrs;
  for (auto n : g.arg_nodes) arg_ptrs.push_back(g.nodes[n]);
  for (auto n : g.aux_nodes) aux_ptrs.push_back(g.nodes[n]);
  graph::IndexedGraph fg = graph::IndexGraph(outs);
  // The arguments keep the bound order (a sum whose convolution is its second input visits them in another
  // order); the variables are the same nodes.
  std::map<const graph::Node*, std::uint32_t> fidx;
  for (std::uint32_t n = 0; n < fg.nodes.size(); ++n) fidx[fg.nodes[n]] = n;
  if (fg.arg_nodes.size() != arg_ptrs.size() || fg.aux_nodes.size() != aux_ptrs.size()) {
    throw Error("Bind: the inference fusion pass lost a variable (a bug; TROUPE_EXEC_FUSE=0 turns the pass off)");
  }
  for (std::size_t k = 0; k < arg_ptrs.size(); ++k) fg.arg_nodes[k] = fidx.at(arg_ptrs[k]);
  for (std::size_t k = 0; k < aux_ptrs.size(); ++k) fg.aux_nodes[k] = fidx.at(aux_ptrs[k]);
  g = std::move(fg);
  fused_graph = std::move(outs);
  is_fused.assign(g.nodes.size(), 0);
  for (std::uint32_t n = 0; n < g.nodes.size(); ++n) {
    if (std::find(fused_nodes.begin(), fused_nodes.end(), g.nodes[n]) != fused_nodes.end()) {
      is_fused[n] = 1;
      fused_names.push_back(g.nodes[n]->name);
    }
  }
  runners.clear();
  flow.clear();
  return true;
}

// ------------------------------------------------------------------------------------------------ public

Executor::Executor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Executor::~Executor() = default;

std::unique_ptr<Executor> Executor::Bind(const Symbol& symbol, Context ctx, const std::vector<NDArray>& args,
                                         const std::vector<NDArray>& arg_grads, const std::vector<OpReqType>& grad_req,
                                         const std::vector<NDArray>& aux_states, const ExecutorOptions& options) {
  if (symbol.empty()) throw Error("Bind: the symbol is empty (no outputs)");
  auto m = std::make_unique<Impl>();
  m->symbol = symbol;
  m->ctx = ctx;
  m->options = options;
  if (m->options.bulk_max_nodes < 0) {
    m->options.bulk_max_nodes = 15;
    EnvInt("TROUPE_EXEC_BULK_MAX_NODES", 1, 10000, &m->options.bulk_max_nodes);
  }
  m->options.bulk_max_nodes = std::max(1, m->options.bulk_max_nodes);
  if (m->options.fuse_inference < 0) {
    m->options.fuse_inference = 1;
    EnvInt("TROUPE_EXEC_FUSE", 0, 1, &m->options.fuse_inference);
  }
  m->g = graph::IndexGraph(symbol.outputs());
  for (auto n : m->g.arg_nodes) m->arg_names.push_back(m->g.nodes[n]->name);
  for (auto n : m->g.aux_nodes) m->aux_names.push_back(m->g.nodes[n]->name);
  const std::size_t na = m->arg_names.size(), nx = m->aux_names.size();

  if (args.size() != na) {
    throw Error("Bind: expected " + std::to_string(na) + " argument arrays (" + JoinNames(m->arg_names) + "), got " +
                std::to_string(args.size()));
  }
  if (aux_states.size() != nx) {
    throw Error("Bind: expected " + std::to_string(nx) + " auxiliary state arrays (" +
                (nx == 0 ? std::string("none") : JoinNames(m->aux_names)) + "), got " +
                std::to_string(aux_states.size()));
  }
  std::vector<OpReqType> reqs;
  if (grad_req.size() == 1) {
    reqs.assign(na, grad_req[0]);
  } else if (grad_req.empty() && arg_grads.empty()) {
    reqs.assign(na, kNullOp);
  } else if (grad_req.size() == na) {
    reqs = grad_req;
  } else {
    throw Error("Bind: expected one grad_req per argument (" + std::to_string(na) + ") or one for all, got " +
                std::to_string(grad_req.size()));
  }
  const bool any_grad = std::any_of(reqs.begin(), reqs.end(), [](OpReqType r) { return r != kNullOp; });
  if (!arg_grads.empty() && arg_grads.size() != na) {
    throw Error("Bind: expected " + std::to_string(na) + " gradient arrays (one per argument: " +
                JoinNames(m->arg_names) + "), got " + std::to_string(arg_grads.size()));
  }
  if (any_grad && arg_grads.empty()) {
    throw Error(
        "Bind: gradient arrays are missing (grad_req asks for gradients; pass one per argument, none "
        "arrays where grad_req is kNullOp)");
  }

  Engine* engine = options.engine;
  if (engine == nullptr) {
    for (const auto* list : {&args, &aux_states}) {
      for (const auto& a : *list) {
        if (engine == nullptr && !a.is_none()) engine = a.engine();
      }
    }
  }
  if (engine == nullptr) engine = Engine::Get();
  m->engine = engine;

  auto check_array = [&](const NDArray& a, const std::string& what) {
    if (a.is_none()) throw Error("Bind: " + what + " is missing (an empty NDArray)");
    if (a.ctx() != ctx) {
      throw Error("Bind: " + what + " is on " + a.ctx().ToString() + " but the executor binds to " + ctx.ToString() +
                  " (copy it with CopyTo)");
    }
    if (a.engine() != engine) throw Error("Bind: " + what + " belongs to another engine than the executor's");
  };
  for (std::size_t i = 0; i < na; ++i) check_array(args[i], "argument '" + m->arg_names[i] + "'");
  for (std::size_t i = 0; i < nx; ++i) check_array(aux_states[i], "auxiliary state '" + m->aux_names[i] + "'");
  m->grads.assign(na, NDArray());
  for (std::size_t i = 0; i < na; ++i) {
    if (reqs[i] == kWriteInplace) {
      throw Error("Bind: grad_req of '" + m->arg_names[i] + "' is kWriteInplace; use kWriteTo, kAddTo or kNullOp");
    }
    if (reqs[i] == kNullOp) continue;
    const std::string what = "gradient of argument '" + m->arg_names[i] + "' (grad_req " + ReqName(reqs[i]) + ")";
    check_array(arg_grads[i], what);
    if (arg_grads[i].shape() != args[i].shape()) {
      throw Error("Bind: " + what + " has shape " + arg_grads[i].shape().ToString() + " but the argument has " +
                  args[i].shape().ToString());
    }
    if (arg_grads[i].dtype() != args[i].dtype()) {
      throw Error("Bind: " + what + " has type " + DTypeName(arg_grads[i].dtype()) + " but the argument has " +
                  DTypeName(args[i].dtype()));
    }
    m->grads[i] = arg_grads[i];
  }
  m->args = args;
  m->aux = aux_states;
  m->reqs = reqs;
  m->need_backward = any_grad;
  m->Build();
  return std::unique_ptr<Executor>(new Executor(std::move(m)));
}

std::unique_ptr<Executor> Executor::SimpleBind(const Symbol& symbol, Context ctx,
                                               const std::map<std::string, TShape>& shapes, OpReqType grad_req,
                                               const std::map<std::string, OpReqType>& grad_req_by_name,
                                               const ExecutorOptions& options) {
  if (symbol.empty()) throw Error("SimpleBind: the symbol is empty (no outputs)");
  const auto arg_names = symbol.ListArguments();
  for (const auto& [name, r] : grad_req_by_name) {
    if (std::find(arg_names.begin(), arg_names.end(), name) == arg_names.end()) {
      throw Error("SimpleBind: grad_req_by_name names '" + name +
                  "', which is not an argument (arguments: " + JoinNames(arg_names) + ")");
    }
  }
  std::vector<TShape> arg_shapes, out_shapes, aux_shapes;
  std::string why;
  if (!symbol.InferShape(shapes, &arg_shapes, &out_shapes, &aux_shapes, &why)) {
    throw Error("SimpleBind: cannot infer every shape from the given ones: " + why +
                " (give the shapes of more arguments)");
  }
  std::vector<int> arg_types, out_types, aux_types;
  symbol.InferType({}, &arg_types, &out_types, &aux_types);
  bool unknown = false;
  std::map<std::string, int> known_types;
  for (std::size_t i = 0; i < arg_names.size(); ++i) {
    const int t = i < arg_types.size() ? arg_types[i] : kTypeUnknown;
    unknown = unknown || t == kTypeUnknown;
    known_types[arg_names[i]] = t == kTypeUnknown ? static_cast<int>(DType::kFloat32) : t;
  }
  if (unknown) symbol.InferType(known_types, &arg_types, &out_types, &aux_types);
  Engine* engine = options.engine != nullptr ? options.engine : Engine::Get();
  auto type_of = [](const std::vector<int>& types, std::size_t i) {
    return i < types.size() && types[i] != kTypeUnknown ? static_cast<DType>(types[i]) : DType::kFloat32;
  };
  std::vector<NDArray> args, grads, aux;
  std::vector<OpReqType> reqs;
  for (std::size_t i = 0; i < arg_names.size(); ++i) {
    args.push_back(NDArray::Zeros(arg_shapes[i], ctx, type_of(arg_types, i), engine));
    auto it = grad_req_by_name.find(arg_names[i]);
    const OpReqType r = it != grad_req_by_name.end() ? it->second : grad_req;
    reqs.push_back(r);
    grads.push_back(r == kNullOp ? NDArray() : NDArray::Zeros(arg_shapes[i], ctx, type_of(arg_types, i), engine));
  }
  for (std::size_t i = 0; i < aux_shapes.size(); ++i) {
    aux.push_back(NDArray::Zeros(aux_shapes[i], ctx, type_of(aux_types, i), engine));
  }
  ExecutorOptions opts = options;
  opts.engine = engine;
  return Bind(symbol, ctx, args, grads, reqs, aux, opts);
}

void Executor::Forward(bool is_train) {
  Impl& m = *impl_;
  Impl::Bulk bulk(m);
  for (const auto& f : m.fwd) {
    std::vector<NDArray> in, out, aux;
    for (auto e : f.in) in.push_back(m.arr[e]);
    for (auto e : f.out) out.push_back(m.arr[e]);
    for (auto e : f.aux) aux.push_back(m.arr[e]);
    if (m.flow[f.node] != nullptr) {
      // Its subgraphs' passes are pushed from here, a condition waits for its inputs: what came before first.
      bulk.Flush();
      m.flow[f.node]->Forward(is_train, m.flow_backward[f.node] != 0, in, out, f.req);
      continue;
    }
    OperatorRunner& r = *m.runners[f.node];
    bulk.Add(r.PrepareForward(is_train, in, out, aux, f.req), r,
             m.is_fused.empty() || !m.is_fused[f.node] ? nullptr : &m.g.nodes[f.node]->name);
  }
  bulk.Flush();
  m.forward_done = true;
}

void Executor::Backward(const std::vector<NDArray>& head_grads) {
  Impl& m = *impl_;
  if (!m.need_backward) {
    throw Error(
        "Backward: the executor was bound without gradients (every grad_req is kNullOp); bind with "
        "gradient arrays and kWriteTo or kAddTo");
  }
  if (!m.forward_done) {
    throw Error(
        "Backward: call Forward first (once per Backward: the memory plan lets Backward reuse "
        "the buffers of the forward pass)");
  }
  const auto out_names = m.symbol.ListOutputs();
  if (!head_grads.empty()) {
    if (head_grads.size() != m.g.heads.size()) {
      throw Error("Backward: expected " + std::to_string(m.g.heads.size()) + " head gradients (one per output: " +
                  JoinNames(out_names) + "), got " + std::to_string(head_grads.size()));
    }
    for (std::size_t k = 0; k < head_grads.size(); ++k) {
      const NDArray& h = head_grads[k];
      const std::uint32_t e = m.g.entry_id(m.g.heads[k]);
      const std::string what =
          "Backward: head gradient " + std::to_string(k) + (k < out_names.size() ? " ('" + out_names[k] + "')" : "");
      if (h.is_none()) throw Error(what + " is missing (an empty NDArray)");
      if (h.ctx() != m.ctx)
        throw Error(what + " is on " + h.ctx().ToString() + " but the executor runs on " + m.ctx.ToString());
      if (h.shape() != m.shape[e]) {
        throw Error(what + " has shape " + h.shape().ToString() + " but the output has " + m.shape[e].ToString());
      }
      if (static_cast<int>(h.dtype()) != m.dtype[e]) {
        throw Error(what + " has type " + DTypeName(h.dtype()) + " but the output has " +
                    DTypeName(static_cast<DType>(m.dtype[e])));
      }
      if (h.engine() != m.engine) throw Error(what + " belongs to another engine than the executor's");
    }
  }
  auto head = [&](std::size_t k) -> const NDArray& { return head_grads.empty() ? m.ones[k] : head_grads[k]; };
  for (const auto& [k, ge] : m.head_alias) m.arr[ge] = head(k);

  auto get = [&](int e) { return e < 0 ? NDArray() : m.arr[static_cast<std::size_t>(e)]; };
  // As MXNet's training segments: a segment ends at a node that writes an argument's gradient, so that the
  // gradient is ready (and a KVStore can push it) while the rest of backward runs, instead of after the
  // whole segment.
  if (m.bwd_writes_grad.size() != m.bwd.size()) {
    std::vector<VarHandle> grad_vars;
    for (const NDArray& g : m.grads) {
      if (!g.is_none()) grad_vars.push_back(g.var());
    }
    std::sort(grad_vars.begin(), grad_vars.end());
    m.bwd_writes_grad.assign(m.bwd.size(), 0);
    for (std::size_t i = 0; i < m.bwd.size(); ++i) {
      for (int e : m.bwd[i].in_grad) {
        if (e >= 0 && std::binary_search(grad_vars.begin(), grad_vars.end(), m.arr[static_cast<std::size_t>(e)].var())) {
          m.bwd_writes_grad[i] = 1;
        }
      }
    }
  }
  Impl::Bulk bulk(m);
  for (std::size_t step = 0; step < m.bwd.size(); ++step) {
    const auto& b = m.bwd[step];
    if (b.kind != Impl::BwStep::kNode) bulk.Flush();  // copies and sums are pushed on their own, in order
    switch (b.kind) {
      case Impl::BwStep::kHead:
        if (b.first) {
          CopyFromTo(head(b.head), m.arr[b.dst]);
        } else {
          m.arr[b.dst] += head(b.head);
        }
        break;
      case Impl::BwStep::kAdd:
        m.arr[b.dst] += m.arr[b.src];
        break;
      case Impl::BwStep::kNode: {
        std::vector<NDArray> og, id, od, aux, ig;
        for (int e : b.out_grad) og.push_back(get(e));
        for (int e : b.in_data) id.push_back(get(e));
        for (int e : b.out_data) od.push_back(get(e));
        for (auto e : b.aux) aux.push_back(m.arr[e]);
        for (int e : b.in_grad) ig.push_back(get(e));
        if (m.flow[b.node] != nullptr) {
          bulk.Flush();
          m.flow[b.node]->Backward(og, ig, b.req);
          break;
        }
        OperatorRunner& r = *m.runners[b.node];
        bulk.Add(r.PrepareBackward(og, id, od, aux, ig, b.req, m.loss_scale), r);
        if (m.bwd_writes_grad[step]) bulk.Flush();
        break;
      }
    }
  }
  bulk.Flush();
  for (std::size_t i : m.zero_fill_args) m.grads[i] = 0.0;
  m.forward_done = false;
}

void Executor::SetArgArray(std::size_t i, const NDArray& array) {
  impl_->SetBound("SetArgArray: argument", impl_->args, impl_->arg_names, impl_->g.arg_nodes, i, array);
}

void Executor::SetAuxArray(std::size_t i, const NDArray& array) {
  impl_->SetBound("SetAuxArray: auxiliary state", impl_->aux, impl_->aux_names, impl_->g.aux_nodes, i, array);
}

const Symbol& Executor::symbol() const { return impl_->symbol; }
void Executor::SetLossScale(float scale) {
  if (!(scale > 0) || !std::isfinite(scale)) {
    throw Error("Executor::SetLossScale: the loss scale must be a positive finite number, got " +
                std::to_string(scale));
  }
  impl_->loss_scale = scale;
}
float Executor::loss_scale() const { return impl_->loss_scale; }
Context Executor::ctx() const { return impl_->ctx; }
const std::vector<NDArray>& Executor::outputs() const { return impl_->outputs; }
const std::vector<NDArray>& Executor::arg_arrays() const { return impl_->args; }
const std::vector<NDArray>& Executor::grad_arrays() const { return impl_->grads; }
const std::vector<NDArray>& Executor::aux_arrays() const { return impl_->aux; }
const std::vector<OpReqType>& Executor::grad_req() const { return impl_->reqs; }

std::map<std::string, NDArray> Executor::arg_dict() const {
  std::map<std::string, NDArray> d;
  for (std::size_t i = 0; i < impl_->args.size(); ++i) d[impl_->arg_names[i]] = impl_->args[i];
  return d;
}
std::map<std::string, NDArray> Executor::grad_dict() const {
  std::map<std::string, NDArray> d;
  for (std::size_t i = 0; i < impl_->grads.size(); ++i) {
    if (impl_->reqs[i] != kNullOp) d[impl_->arg_names[i]] = impl_->grads[i];
  }
  return d;
}
std::map<std::string, NDArray> Executor::aux_dict() const {
  std::map<std::string, NDArray> d;
  for (std::size_t i = 0; i < impl_->aux.size(); ++i) d[impl_->aux_names[i]] = impl_->aux[i];
  return d;
}
MemoryPlanStats Executor::memory_stats() const { return impl_->plan.stats; }
std::vector<std::string> Executor::fused_nodes() const { return impl_->fused_names; }

}  // namespace troupe
