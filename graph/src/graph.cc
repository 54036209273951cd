// IndexGraph: numbers the nodes reachable from a symbol's outputs in MXNet's topological order.
#include <unordered_map>
#include <utility>

#include "base/error.h"
#include "graph/internal/graph.h"

namespace troupe {
namespace graph {

IndexedGraph IndexGraph(const std::vector<NodeEntry>& outputs) {
  IndexedGraph g;
  std::unordered_map<const Node*, std::uint32_t> index;
  // Iterative depth-first post-order (inputs in order), so that deep graphs do not exhaust the stack; the
  // order equals the recursive one (nnvm's DFSVisit).
  std::unordered_map<const Node*, bool> on_stack;
  for (const NodeEntry& head : outputs) {
    if (!head.node) throw Error("IndexGraph: a symbol output has no node (an empty symbol was used)");
    if (index.count(head.node.get()) != 0) continue;
    std::vector<std::pair<const Node*, std::size_t>> stack{{head.node.get(), 0}};
    on_stack[head.node.get()] = true;
    while (!stack.empty()) {
      auto& [node, next] = stack.back();
      if (next < node->inputs.size()) {
        const Node* in = node->inputs[next++].node.get();
        if (in == nullptr) throw Error("IndexGraph: node '" + node->name + "' has an empty input");
        if (index.count(in) != 0) continue;
        if (on_stack[in]) throw Error("IndexGraph: the graph has a cycle through node '" + in->name + "'");
        on_stack[in] = true;
        stack.emplace_back(in, 0);
        continue;
      }
      on_stack[node] = false;
      index[node] = static_cast<std::uint32_t>(g.nodes.size());
      g.nodes.push_back(node);
      stack.pop_back();
    }
  }

  const std::size_t n = g.nodes.size();
  g.inputs.resize(n);
  g.entry_offset.resize(n);
  std::uint32_t offset = 0;
  // 0: unused so far, 1: argument, 2: auxiliary state.
  std::vector<int> role(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const Node* node = g.nodes[i];
    g.entry_offset[i] = offset;
    offset += node->num_outputs();
    const std::uint32_t nargs = node->num_arguments();
    for (std::size_t k = 0; k < node->inputs.size(); ++k) {
      const NodeEntry& e = node->inputs[k];
      const std::uint32_t src = index.at(e.node.get());
      g.inputs[i].push_back({src, e.index});
      if (!g.nodes[src]->is_variable()) continue;
      const int r = k < nargs ? 1 : 2;
      if (role[src] != 0 && role[src] != r) {
        throw Error("variable '" + g.nodes[src]->name +
                    "' is used both as an argument and as an auxiliary state (by node '" + node->name +
                    "'); give the auxiliary state a variable of its own");
      }
      role[src] = r;
    }
  }
  g.num_entries = offset;
  for (const NodeEntry& head : outputs) g.heads.push_back({index.at(head.node.get()), head.index});
  for (std::size_t i = 0; i < n; ++i) {
    if (!g.nodes[i]->is_variable()) continue;
    (role[i] == 2 ? g.aux_nodes : g.arg_nodes).push_back(static_cast<std::uint32_t>(i));
  }
  return g;
}

}  // namespace graph
}  // namespace troupe
