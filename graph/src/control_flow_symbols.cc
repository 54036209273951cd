// Foreach, WhileLoop and Cond (graph/control_flow.h): a body called on placeholder variables becomes a subgraph,
// its variables are placed among the node's inputs as MXNet's *_locs parameters say (graph/internal/control_flow.h).
#include "graph/control_flow.h"

#include <algorithm>
#include <map>
#include <memory>
#include <utility>

#include "base/error.h"
#include "graph/internal/graph.h"
#include "op/param.h"

namespace troupe {

namespace {

using graph::Node;
using graph::NodeEntry;
using Locs = std::vector<std::int64_t>;

// The variables of a subgraph in list_inputs() order (its inputs).
std::vector<std::shared_ptr<Node>> InputVariables(const Symbol& sub) {
  const graph::IndexedGraph g = graph::IndexGraph(sub.outputs());
  std::map<const Node*, std::shared_ptr<Node>> owned;
  for (const auto& o : sub.outputs()) owned[o.node.get()] = o.node;
  for (const Node* n : g.nodes) {
    for (const auto& in : n->inputs) owned[in.node.get()] = in.node;
  }
  std::vector<std::shared_ptr<Node>> vars;
  for (const Node* n : g.nodes) {
    if (n->is_variable()) vars.push_back(owned.at(n));
  }
  return vars;
}

NodeEntry Single(const Symbol& s, const std::string& what) {
  if (s.NumOutputs() != 1) {
    throw Error(what + " has " + std::to_string(s.NumOutputs()) + " outputs; it must have one (pick one with operator[])");
  }
  return s.outputs()[0];
}

// The node's inputs: `fixed` (data, states, loop variables, the predicate: positions 0..), then the variables from
// outside that the bodies use, each once.
class NodeInputs {
 public:
  explicit NodeInputs(std::vector<NodeEntry> fixed) : entries_(std::move(fixed)) {}
  // Where a body's input variable comes from: a placeholder's position (placeholders[k] is fixed input k), or an
  // outside variable's.
  std::int64_t Position(const std::shared_ptr<Node>& var, const std::vector<Symbol>& placeholders) {
    for (std::size_t k = 0; k < placeholders.size(); ++k) {
      if (placeholders[k].outputs()[0].node == var) return static_cast<std::int64_t>(k);
    }
    for (std::size_t i = placeholders.size(); i < entries_.size(); ++i) {
      if (entries_[i].node == var) return static_cast<std::int64_t>(i);
    }
    entries_.push_back({var, 0});
    return static_cast<std::int64_t>(entries_.size() - 1);
  }
  const std::vector<NodeEntry>& entries() const { return entries_; }

 private:
  std::vector<NodeEntry> entries_;
};

std::vector<Symbol> Placeholders(const std::string& node, const std::string& what, std::size_t n) {
  std::vector<Symbol> v;
  for (std::size_t k = 0; k < n; ++k) v.push_back(Symbol::Variable(node + "_" + what + std::to_string(k)));
  return v;
}

std::string Tuple(const Locs& v) { return param_detail::PrintTuple(v); }

Symbol MakeNode(const std::string& op, const Kwargs& params, const std::string& name, std::vector<Symbol> subgraphs,
                const std::vector<NodeEntry>& inputs) {
  auto node = std::make_shared<Node>();
  node->name = name;
  node->op = graph::detail::MakeOperator(op, params, name, &node->attrs, std::move(subgraphs));
  node->inputs = inputs;
  std::vector<NodeEntry> outs;
  for (std::uint32_t k = 0; k < node->num_visible_outputs(); ++k) outs.push_back({node, k});
  return Symbol(std::move(outs));
}

std::size_t CountOutputs(const std::vector<Symbol>& v) { return Symbol::Group(v).NumOutputs(); }

}  // namespace

Symbol Foreach(const std::function<LoopStep(const std::vector<Symbol>&, const std::vector<Symbol>&)>& body,
               const std::vector<Symbol>& data, const std::vector<Symbol>& init_states, const std::string& name) {
  const std::string node = name.empty() ? graph::detail::AutoName("_foreach") : name;
  const std::string what = "Foreach '" + node + "'";
  if (data.empty()) throw Error(what + ": no data to iterate over");
  std::vector<NodeEntry> fixed;
  for (std::size_t j = 0; j < data.size(); ++j) fixed.push_back(Single(data[j], what + ": data " + std::to_string(j)));
  for (std::size_t k = 0; k < init_states.size(); ++k) {
    fixed.push_back(Single(init_states[k], what + ": initial state " + std::to_string(k)));
  }
  const std::vector<Symbol> rows = Placeholders(node, "data", data.size());
  const std::vector<Symbol> states = Placeholders(node, "state", init_states.size());
  const LoopStep step = body(rows, states);
  if (step.states.size() != init_states.size()) {
    throw Error(what + ": the body returns " + std::to_string(step.states.size()) + " states for " +
                std::to_string(init_states.size()));
  }
  std::vector<Symbol> all = step.outputs;
  all.insert(all.end(), step.states.begin(), step.states.end());
  const Symbol sub = Symbol::Group(all);
  std::vector<Symbol> placeholders = rows;
  placeholders.insert(placeholders.end(), states.begin(), states.end());
  NodeInputs inputs(fixed);
  Locs data_locs(rows.size(), -1), state_locs(states.size(), -1), remain_locs;
  const auto vars = InputVariables(sub);
  for (std::size_t i = 0; i < vars.size(); ++i) {
    const std::int64_t pos = inputs.Position(vars[i], placeholders);
    const auto u = static_cast<std::size_t>(pos);
    if (u < rows.size()) {
      data_locs[u] = static_cast<std::int64_t>(i);
    } else if (u < placeholders.size()) {
      state_locs[u - rows.size()] = static_cast<std::int64_t>(i);
    } else {
      remain_locs.push_back(static_cast<std::int64_t>(i));
    }
  }
  for (std::size_t j = 0; j < data_locs.size(); ++j) {
    if (data_locs[j] < 0) throw Error(what + ": the body does not use its data row " + std::to_string(j));
  }
  for (std::size_t k = 0; k < state_locs.size(); ++k) {
    if (state_locs[k] < 0) throw Error(what + ": the body does not use its state " + std::to_string(k));
  }
  const Kwargs params = {{"num_args", std::to_string(inputs.entries().size() + 1)},
                         {"num_outputs", std::to_string(sub.NumOutputs())},
                         {"num_out_data", std::to_string(CountOutputs(step.outputs))},
                         {"in_data_locs", Tuple(data_locs)},
                         {"in_state_locs", Tuple(state_locs)},
                         {"remain_locs", Tuple(remain_locs)}};
  return MakeNode("_foreach", params, node, {sub}, inputs.entries());
}

Symbol WhileLoop(const std::function<Symbol(const std::vector<Symbol>&)>& cond,
                 const std::function<LoopStep(const std::vector<Symbol>&)>& func, const std::vector<Symbol>& loop_vars,
                 int max_iterations, const std::string& name) {
  const std::string node = name.empty() ? graph::detail::AutoName("_while_loop") : name;
  const std::string what = "WhileLoop '" + node + "'";
  if (max_iterations < 1) throw Error(what + ": max_iterations must be at least 1, got " + std::to_string(max_iterations));
  std::vector<NodeEntry> fixed;
  for (std::size_t k = 0; k < loop_vars.size(); ++k) {
    fixed.push_back(Single(loop_vars[k], what + ": loop variable " + std::to_string(k)));
  }
  const std::vector<Symbol> vars = Placeholders(node, "var", loop_vars.size());
  const Symbol c = cond(vars);
  Single(c, what + ": the condition");
  const LoopStep step = func(vars);
  if (step.states.size() != loop_vars.size()) {
    throw Error(what + ": func returns " + std::to_string(step.states.size()) + " loop variables for " +
                std::to_string(loop_vars.size()));
  }
  std::vector<Symbol> all = step.outputs;
  all.insert(all.end(), step.states.begin(), step.states.end());
  const Symbol fsub = Symbol::Group(all);
  NodeInputs inputs(fixed);
  Locs cond_locs, func_locs, var_locs(vars.size(), -1);
  for (const auto& v : InputVariables(c)) cond_locs.push_back(inputs.Position(v, vars));
  const auto func_vars = InputVariables(fsub);
  for (std::size_t i = 0; i < func_vars.size(); ++i) {
    const std::int64_t pos = inputs.Position(func_vars[i], vars);
    func_locs.push_back(pos);
    if (static_cast<std::size_t>(pos) < vars.size()) var_locs[static_cast<std::size_t>(pos)] = static_cast<std::int64_t>(i);
  }
  for (std::size_t k = 0; k < var_locs.size(); ++k) {
    if (var_locs[k] < 0) throw Error(what + ": func does not use its loop variable " + std::to_string(k));
  }
  const Kwargs params = {{"num_args", std::to_string(inputs.entries().size() + 2)},
                         {"num_outputs", std::to_string(fsub.NumOutputs())},
                         {"num_out_data", std::to_string(CountOutputs(step.outputs))},
                         {"max_iterations", std::to_string(max_iterations)},
                         {"cond_input_locs", Tuple(cond_locs)},
                         {"func_input_locs", Tuple(func_locs)},
                         {"func_var_locs", Tuple(var_locs)}};
  return MakeNode("_while_loop", params, node, {c, fsub}, inputs.entries());
}

Symbol Cond(const Symbol& pred, const std::function<std::vector<Symbol>()>& then_branch,
            const std::function<std::vector<Symbol>()>& else_branch, const std::string& name) {
  const std::string node = name.empty() ? graph::detail::AutoName("_cond") : name;
  const std::string what = "Cond '" + node + "'";
  NodeInputs inputs({Single(pred, what + ": the predicate")});
  const std::vector<Symbol> ph = Placeholders(node, "pred", 1);
  const Symbol csub = Symbol::Create("_copy", {}, {ph[0]}, node + "_pred_copy");
  const Symbol tsub = Symbol::Group(then_branch()), esub = Symbol::Group(else_branch());
  if (tsub.NumOutputs() != esub.NumOutputs() || tsub.empty()) {
    throw Error(what + ": then_branch returns " + std::to_string(tsub.NumOutputs()) + " outputs and else_branch " +
                std::to_string(esub.NumOutputs()) + "; they must return the same number, at least one");
  }
  Locs then_locs, else_locs;
  for (const auto& v : InputVariables(tsub)) then_locs.push_back(inputs.Position(v, ph));
  for (const auto& v : InputVariables(esub)) else_locs.push_back(inputs.Position(v, ph));
  const Kwargs params = {{"num_args", std::to_string(inputs.entries().size() + 3)},
                         {"num_outputs", std::to_string(tsub.NumOutputs())},
                         {"cond_input_locs", Tuple({0})},
                         {"then_input_locs", Tuple(then_locs)},
                         {"else_input_locs", Tuple(else_locs)}};
  return MakeNode("_cond", params, node, {csub, tsub, esub}, inputs.entries());
}

}  // namespace troupe
