// The graph behind a Symbol (internal to graph/: the symbol, JSON and executor code share it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/symbol.h"
#include "op/operator.h"

namespace troupe {
namespace graph {

struct Node {
  std::string name;
  // The initialised operator; null for a variable. Shared: nodes are immutable once built.
  std::shared_ptr<const OperatorProperty> op;
  // User attributes (variables: __shape__, __dtype__, lr_mult, __init__ ...; operators: attributes given to
  // Create that are not parameters). Operator parameters live in `op` (op->GetParams()).
  SymbolAttrs attrs;
  // An operator's inputs: its arguments (op->ListArguments() order) then its auxiliary states.
  std::vector<NodeEntry> inputs;

  bool is_variable() const { return op == nullptr; }
  std::uint32_t num_outputs() const { return is_variable() ? 1u : static_cast<std::uint32_t>(op->NumOutputs()); }
  std::uint32_t num_visible_outputs() const {
    return is_variable() ? 1u : static_cast<std::uint32_t>(op->NumVisibleOutputs());
  }
  std::uint32_t num_arguments() const {
    return is_variable() ? 0u : static_cast<std::uint32_t>(op->ListArguments().size());
  }
};

// A graph indexed for passes: the nodes reachable from the heads, each once, in topological order
// (depth-first post-order from the heads, inputs visited in order — MXNet's order), with every node output
// ("entry") numbered.
struct IndexedGraph {
  struct Entry {
    std::uint32_t node = 0;   // index into nodes
    std::uint32_t index = 0;  // output of that node
  };
  std::vector<const Node*> nodes;
  std::vector<std::vector<Entry>> inputs;  // per node, its inputs as entries
  std::vector<Entry> heads;                // the symbol's outputs
  std::vector<std::uint32_t> arg_nodes;    // variables used as arguments, in ListArguments order
  std::vector<std::uint32_t> aux_nodes;    // variables used as auxiliary states, ListAuxiliaryStates order
  std::vector<std::uint32_t> entry_offset; // entry id of (node n, output i) = entry_offset[n] + i
  std::uint32_t num_entries = 0;

  std::uint32_t entry_id(const Entry& e) const { return entry_offset[e.node] + e.index; }
  std::uint32_t entry_id(std::uint32_t node, std::uint32_t index) const { return entry_offset[node] + index; }
};

namespace detail {
// Keys of the form "__name__" (MXNet's hidden attributes: user attributes, never operator parameters).
bool IsHiddenKey(const std::string& key);
// Creates and initialises the operator `op` for node `name`; hidden keys of params go to *attrs. subgraphs: a
// control-flow operator's (graph/internal/control_flow.h), checked; any other operator takes none. Throws
// troupe::Error naming the node.
std::shared_ptr<const OperatorProperty> MakeOperator(const std::string& op, const Kwargs& params,
                                                     const std::string& name, SymbolAttrs* attrs,
                                                     std::vector<Symbol> subgraphs = {});
std::shared_ptr<Node> MakeVariable(const std::string& name, const SymbolAttrs& attrs);
// The automatic name of a node of operator `op`: "<lower-case op><counter>", counting per op in this process.
std::string AutoName(const std::string& op);
}  // namespace detail

// Indexes the graph of `outputs`. Throws troupe::Error when a variable is used both as an argument and as
// an auxiliary state (naming it).
IndexedGraph IndexGraph(const std::vector<NodeEntry>& outputs);

}  // namespace graph
}  // namespace troupe
