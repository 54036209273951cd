// Symbol — a network described once as a graph (the seed's "Symbol Construction").
//
// A Symbol is a list of outputs of graph nodes. A node is either a variable (a named input: data, label,
// weight, bias, auxiliary state) or a registered operator (an OperatorProperty or a SimpleOp, by MXNet's
// name or alias) applied to other symbols. Composing operators builds the graph; Group bundles several
// symbols into one with several outputs. The graph is immutable once built except for attributes, and
// symbols share nodes: copying a Symbol is cheap.
//
// Naming follows MXNet 1.x so that files and parameter names carry over:
//   - an operator node without a name gets "<lower-case op name><counter>" (fullyconnected0, ...), the
//     counter counting per op name in this process, as MXNet's NameManager;
//   - inputs not given to Create become variables named "<node>_<argument>" (fc1_weight, fc1_bias,
//     bn1_moving_mean, ...);
//   - output names are "<node>_<output>" ("fc1_output", "softmax_output"); a variable's output is its name.
//   - ListArguments / ListAuxiliaryStates list variables in the graph's topological order (a depth-first
//     post-order from the outputs, inputs in order), as MXNet's list_arguments does; a variable is
//     auxiliary when an operator uses it in an auxiliary-state position.
//
// JSON: ToJSON/FromJSON read and write MXNet 1.x's symbol file (`nodes` with op, name, attrs, inputs;
// `arg_nodes`, `node_row_ptr`, `heads`, `attrs.mxnet_version`), so `*-symbol.json` files move both ways.
// Older files with "param" / "attr" instead of "attrs" load too.
//
// Thread-safety: building and reading symbols from several threads is safe; SetAttr on a node shared by
// symbols used on other threads is not.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "op/operator.h"

namespace troupe {

namespace graph {
struct Node;  // graph/internal/graph.h
// One output of a node.
struct NodeEntry {
  std::shared_ptr<Node> node;
  std::uint32_t index = 0;
};
}  // namespace graph

using SymbolAttrs = std::map<std::string, std::string>;

class Symbol {
 public:
  Symbol() = default;  // empty: no outputs

  // A variable. attrs are user attributes kept in the JSON ("__shape__", "__dtype__", "lr_mult",
  // "__init__", ...); "__shape__" (MXNet's text form, e.g. "(128, 784)") is used by InferShape.
  static Symbol Variable(const std::string& name, const SymbolAttrs& attrs = {});

  // An operator node. op: a registered name or alias. params: the operator's parameters (checked by its
  // Init; errors name the operator and the node). inputs: positional, in the operator's ListArguments order
  // followed by its ListAuxiliaryStates; each must have exactly one output. Inputs left out at the end
  // become variables "<name>_<argument>". name: empty gives an automatic name (see above).
  // Throws troupe::Error for an unknown operator (with suggestions), a bad parameter, too many inputs or a
  // multi-output input.
  static Symbol Create(const std::string& op, const Kwargs& params, const std::vector<Symbol>& inputs,
                       const std::string& name = "", const SymbolAttrs& attrs = {});
  // The same for a braced list, Create("elemwise_add", {}, {a, b}): without it {a, b} would be ambiguous
  // (std::map's iterator-pair constructor matches two Symbols too).
  static Symbol Create(const std::string& op, const Kwargs& params, std::initializer_list<Symbol> inputs,
                       const std::string& name = "", const SymbolAttrs& attrs = {}) {
    return Create(op, params, std::vector<Symbol>(inputs), name, attrs);
  }
  // The same with inputs by argument or auxiliary-state name ({"data", x}, {"weight", w}); the ones not
  // named become variables. An unknown input name is an error listing the operator's names.
  static Symbol Create(const std::string& op, const Kwargs& params, const std::map<std::string, Symbol>& inputs,
                       const std::string& name = "", const SymbolAttrs& attrs = {});

  // The outputs of several symbols as one symbol (MXNet's mx.sym.Group).
  static Symbol Group(const std::vector<Symbol>& symbols);
  // This symbol with the named variables replaced by other symbols of one output each (MXNet's composition,
  // net(data=x)): a copy of the nodes between them and the outputs; this symbol is unchanged. A name that is
  // no variable of the graph, or a replacement with several outputs, is a troupe::Error naming it.
  Symbol Substitute(const std::map<std::string, Symbol>& vars) const;

  bool empty() const { return outputs_.empty(); }
  std::size_t NumOutputs() const { return outputs_.size(); }
  // Output i as a symbol of its own (throws troupe::Error when out of range).
  Symbol operator[](std::size_t i) const;

  std::vector<std::string> ListArguments() const;
  std::vector<std::string> ListOutputs() const;
  std::vector<std::string> ListAuxiliaryStates() const;
  // Every output of every node (variables included), as one symbol: MXNet's get_internals(). Pick one by
  // name with operator[] on the index of ListOutputs().
  Symbol GetInternals() const;

  // The name of the node of a single-output symbol (throws troupe::Error for a group or an empty symbol).
  std::string name() const;
  // Attributes of the node of a single-output symbol.
  std::optional<std::string> GetAttr(const std::string& key) const;
  void SetAttr(const std::string& key, const std::string& value);
  // User attributes of every node that has some, by node name (lr_mult, wd_mult, __init__ ...).
  std::map<std::string, SymbolAttrs> ListAttrs() const;

  // Shape inference from the shapes of some arguments or auxiliary states (by name; "__shape__" attributes
  // count as given, a 0 dimension there meaning unknown, as in MXNet).
  // Fills arg_shapes (ListArguments order), out_shapes (ListOutputs order) and aux_shapes
  // (ListAuxiliaryStates order); a shape still unknown is left as TShape() (unknown ndim). Returns true
  // when every shape in the graph is known, false when some are not (then *why, when given, names the
  // first node whose shapes are unknown and which of its inputs lack a shape). Throws troupe::Error naming
  // the node and its operator when shapes are inconsistent, and for a name that is no input of the graph.
  bool InferShape(const std::map<std::string, TShape>& known, std::vector<TShape>* arg_shapes,
                  std::vector<TShape>* out_shapes, std::vector<TShape>* aux_shapes,
                  std::string* why = nullptr) const;
  // The same for type flags (DType values as int; kTypeUnknown where unknown). "__dtype__" attributes
  // count as given.
  bool InferType(const std::map<std::string, int>& known, std::vector<int>* arg_types, std::vector<int>* out_types,
                 std::vector<int>* aux_types, std::string* why = nullptr) const;

  // MXNet 1.x symbol JSON (attrs.mxnet_version 10901).
  std::string ToJSON() const;
  // Throws troupe::Error for malformed JSON (naming the position), a missing field, or unknown operators
  // (all of them listed, each with the nodes using it).
  static Symbol FromJSON(const std::string& json);
  void Save(const std::string& path) const;          // throws troupe::Error naming the file
  static Symbol Load(const std::string& path);       // throws troupe::Error naming the file

  // The graph behind the symbol, for the executor (graph/internal/graph.h).
  explicit Symbol(std::vector<graph::NodeEntry> outputs) : outputs_(std::move(outputs)) {}
  const std::vector<graph::NodeEntry>& outputs() const { return outputs_; }

 private:
  std::vector<graph::NodeEntry> outputs_;
};

}  // namespace troupe
