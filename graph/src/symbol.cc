// Symbol: construction, listing, attributes and shape/type inference (JSON is in symbol_json.cc).
#include "graph/symbol.h"

#include <algorithm>
#include <cctype>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>

#include "base/error.h"
#include "graph/internal/control_flow.h"
#include "graph/internal/graph.h"
#include "op/param.h"

namespace troupe {

namespace graph {
namespace detail {

bool IsHiddenKey(const std::string& key) {
  return key.size() > 4 && key.compare(0, 2, "__") == 0 && key.compare(key.size() - 2, 2, "__") == 0;
}

// Creates and initialises the operator `op` for node `name`; hidden "__x__" keys of params go to *attrs.
std::shared_ptr<const OperatorProperty> MakeOperator(const std::string& op, const Kwargs& params,
                                                     const std::string& name, SymbolAttrs* attrs,
                                                     std::vector<Symbol> subgraphs) {
  std::unique_ptr<OperatorProperty> prop;
  try {
    prop = OperatorProperty::Create(op);
  } catch (const Error& e) {
    throw Error("Symbol: node '" + name + "': " + e.what());
  }
  Kwargs op_params;
  for (const auto& [k, v] : params) {
    if (IsHiddenKey(k)) {
      (*attrs)[k] = v;
    } else {
      op_params.emplace_back(k, v);
    }
  }
  try {
    prop->Init(op_params);
    if (auto* cf = dynamic_cast<ControlFlowProperty*>(prop.get())) {
      if (!subgraphs.empty()) cf->SetSubgraphs(std::move(subgraphs));
    } else if (!subgraphs.empty()) {
      throw Error("the operator takes no subgraphs, the node has " + std::to_string(subgraphs.size()));
    }
  } catch (const Error& e) {
    throw Error("Symbol: node '" + name + "' (" + op + "): " + e.what());
  }
  return std::shared_ptr<const OperatorProperty>(std::move(prop));
}

std::shared_ptr<Node> MakeVariable(const std::string& name, const SymbolAttrs& attrs) {
  auto n = std::make_shared<Node>();
  n->name = name;
  n->attrs = attrs;
  return n;
}

// The symbol made of a node's visible outputs.
Symbol VisibleOutputs(const std::shared_ptr<Node>& node) {
  std::vector<NodeEntry> outs;
  for (std::uint32_t i = 0; i < node->num_visible_outputs(); ++i) outs.push_back({node, i});
  return Symbol(std::move(outs));
}

std::string OutputName(const Node& node, std::uint32_t index) {
  if (node.is_variable()) return node.name;
  const auto outs = node.op->ListOutputs();
  return node.name + "_" + (index < outs.size() ? outs[index] : "output" + std::to_string(index));
}

// "(128, 784)" (MXNet's text; 0 is an unknown dimension in MXNet 1.x's legacy shape mode).
TShape ParseShapeAttr(const std::string& text, const std::string& var) {
  std::vector<std::int64_t> dims;
  try {
    dims = param_detail::ParseTuple(text);
  } catch (const std::exception& e) {
    throw Error("variable '" + var + "': attribute __shape__ '" + text + "' is not a shape: " + e.what());
  }
  if (dims.empty()) return TShape();
  for (auto& d : dims) {
    if (d <= 0) d = -1;
  }
  return TShape(dims);
}

int ParseDTypeAttr(const std::string& text, const std::string& var) {
  try {
    std::size_t pos = 0;
    const int flag = std::stoi(text, &pos);
    if (pos == text.size() && IsValidDTypeFlag(flag)) return flag;
  } catch (const std::exception&) {
  }
  try {
    return static_cast<int>(DTypeFromName(text));
  } catch (const Error& e) {
    throw Error("variable '" + var + "': attribute __dtype__ '" + text + "' is not a type: " + e.what());
  }
}

std::string AutoName(const std::string& op) {
  static std::mutex mu;
  static std::unordered_map<std::string, int> counters;
  std::string hint = op;
  std::transform(hint.begin(), hint.end(), hint.begin(), [](unsigned char c) { return std::tolower(c); });
  std::lock_guard<std::mutex> lock(mu);
  return hint + std::to_string(counters[hint]++);
}

}  // namespace detail
}  // namespace graph

using graph::IndexedGraph;
using graph::Node;
using graph::NodeEntry;

namespace {

NodeEntry SingleOutput(const Symbol& s, const std::string& node, const std::string& op, const std::string& arg) {
  if (s.NumOutputs() != 1) {
    throw Error("Symbol: input '" + arg + "' of node '" + node + "' (" + op + ") has " +
                std::to_string(s.NumOutputs()) + " outputs; pick one with operator[]");
  }
  return s.outputs()[0];
}

std::string JoinNames(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// MXNet composes operators with a variable number of inputs (Concat) by setting num_args from the inputs.
Kwargs WithNumArgs(const std::string& op, const Kwargs& params, std::size_t ninputs) {
  const OperatorInfo* info = OperatorRegistry::Get().Find(op);
  if (info == nullptr) return params;
  bool has_num_args = false;
  for (const auto& p : info->params) has_num_args = has_num_args || p.name == "num_args";
  if (!has_num_args) return params;
  for (const auto& [k, v] : params) {
    if (k == "num_args") return params;
  }
  Kwargs out = params;
  out.emplace_back("num_args", std::to_string(ninputs));
  return out;
}

Symbol BuildOp(const std::string& op, const Kwargs& params, const std::string& given_name, const SymbolAttrs& attrs,
               const std::vector<std::optional<NodeEntry>>& positional,
               const std::map<std::string, Symbol>* named) {
  const std::string name = given_name.empty() ? graph::detail::AutoName(op) : given_name;
  auto node = std::make_shared<Node>();
  node->name = name;
  node->attrs = attrs;
  node->op = graph::detail::MakeOperator(op, params, name, &node->attrs);
  const auto args = node->op->ListArguments();
  const auto aux = node->op->ListAuxiliaryStates();
  std::vector<std::string> all = args;
  all.insert(all.end(), aux.begin(), aux.end());
  if (positional.size() > all.size()) {
    throw Error("Symbol: node '" + name + "' (" + op + ") takes " + std::to_string(all.size()) + " inputs (" +
                JoinNames(all) + "), got " + std::to_string(positional.size()));
  }
  std::vector<std::optional<NodeEntry>> in(all.size());
  for (std::size_t i = 0; i < positional.size(); ++i) in[i] = positional[i];
  if (named != nullptr) {
    for (const auto& [key, sym] : *named) {
      auto it = std::find(all.begin(), all.end(), key);
      if (it == all.end()) {
        throw Error("Symbol: node '" + name + "' (" + op + ") has no input named '" + key +
                    "'; its inputs are: " + JoinNames(all));
      }
      in[it - all.begin()] = SingleOutput(sym, name, op, key);
    }
  }
  for (std::size_t i = 0; i < all.size(); ++i) {
    node->inputs.push_back(in[i] ? *in[i] : NodeEntry{graph::detail::MakeVariable(name + "_" + all[i], {}), 0});
  }
  return graph::detail::VisibleOutputs(node);
}

const Node& SingleNode(const std::vector<NodeEntry>& outputs, const char* what) {
  if (outputs.size() != 1) {
    throw Error(std::string("Symbol::") + what + ": the symbol has " + std::to_string(outputs.size()) +
                " outputs; it needs exactly one (pick one with operator[])");
  }
  return *outputs[0].node;
}

// Shape and type inference share one fixed-point loop; Traits says how values merge and print.
struct ShapeTraits {
  using V = TShape;
  static constexpr const char* kWhat = "shape";
  static constexpr const char* kFn = "InferShape";
  static constexpr const char* kAttr = "__shape__";
  static V Unknown() { return TShape(); }
  static bool Known(const V& v) { return v.known(); }
  static std::string Text(const V& v) { return v.ToString(); }
  static bool Merge(const V& cur, const V& add, V* out) {
    if (add.ndim() < 0) {
      *out = cur;
      return true;
    }
    if (cur.ndim() < 0) {
      *out = add;
      return true;
    }
    if (cur.ndim() != add.ndim()) return false;
    V m = cur;
    for (int i = 0; i < cur.ndim(); ++i) {
      if (cur[i] == -1) {
        m[i] = add[i];
      } else if (add[i] != -1 && add[i] != cur[i]) {
        return false;
      }
    }
    *out = m;
    return true;
  }
  static std::optional<V> FromAttrs(const Node& n) {
    auto it = n.attrs.find("__shape__");
    if (it == n.attrs.end()) return std::nullopt;
    return graph::detail::ParseShapeAttr(it->second, n.name);
  }
  static bool Run(const OperatorProperty& op, std::vector<V>* in, std::vector<V>* out, std::vector<V>* aux) {
    return op.InferShape(in, out, aux);
  }
};

struct TypeTraits {
  using V = int;
  static constexpr const char* kWhat = "type";
  static constexpr const char* kFn = "InferType";
  static constexpr const char* kAttr = "__dtype__";
  static V Unknown() { return kTypeUnknown; }
  static bool Known(const V& v) { return v != kTypeUnknown; }
  static std::string Text(const V& v) {
    return v == kTypeUnknown ? std::string("unknown") : std::string(DTypeName(static_cast<DType>(v)));
  }
  static bool Merge(const V& cur, const V& add, V* out) {
    if (add == kTypeUnknown) {
      *out = cur;
      return true;
    }
    if (cur == kTypeUnknown || cur == add) {
      *out = add;
      return true;
    }
    return false;
  }
  static std::optional<V> FromAttrs(const Node& n) {
    auto it = n.attrs.find("__dtype__");
    if (it == n.attrs.end()) return std::nullopt;
    return graph::detail::ParseDTypeAttr(it->second, n.name);
  }
  static bool Run(const OperatorProperty& op, std::vector<V>* in, std::vector<V>* out, std::vector<V>* aux) {
    return op.InferType(in, out, aux);
  }
};

std::string InputLabel(const IndexedGraph& g, std::uint32_t node, std::size_t k) {
  const Node* n = g.nodes[node];
  const auto args = n->op->ListArguments();
  const auto aux = n->op->ListAuxiliaryStates();
  std::string label = k < args.size() ? args[k] : (k - args.size() < aux.size() ? aux[k - args.size()] : "?");
  const auto& e = g.inputs[node][k];
  const Node* src = g.nodes[e.node];
  if (src->is_variable()) {
    label += " (variable '" + src->name + "')";
  } else {
    label += " (output '" + graph::detail::OutputName(*src, e.index) + "')";
  }
  return label;
}

template <typename T>
bool Infer(const std::vector<NodeEntry>& outputs, const std::map<std::string, typename T::V>& known,
           std::vector<typename T::V>* arg_out, std::vector<typename T::V>* out_out,
           std::vector<typename T::V>* aux_out, std::string* why) {
  using V = typename T::V;
  const IndexedGraph g = graph::IndexGraph(outputs);
  std::vector<V> vals(g.num_entries, T::Unknown());

  std::map<std::string, std::uint32_t> var_by_name;
  for (auto i : g.arg_nodes) var_by_name[g.nodes[i]->name] = i;
  for (auto i : g.aux_nodes) var_by_name[g.nodes[i]->name] = i;
  for (const auto& [name, v] : known) {
    if (var_by_name.count(name) == 0) {
      std::vector<std::string> names;
      for (auto i : g.arg_nodes) names.push_back(g.nodes[i]->name);
      throw Error(std::string("Symbol::") + T::kFn + ": '" + name + "' is not an argument of the symbol; its arguments are: " +
                  JoinNames(names));
    }
  }
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const Node* n = g.nodes[i];
    if (!n->is_variable()) continue;
    V v = T::Unknown();
    auto it = known.find(n->name);
    if (it != known.end()) v = it->second;
    if (auto a = T::FromAttrs(*n)) {
      V merged;
      if (!T::Merge(v, *a, &merged)) {
        throw Error(std::string("Symbol::") + T::kFn + ": variable '" + n->name + "' is given " + T::kWhat + " " +
                    T::Text(v) + " but its attribute " + T::kAttr + " says " + T::Text(*a));
      }
      v = merged;
    }
    vals[g.entry_id(static_cast<std::uint32_t>(i), 0)] = v;
  }

  // Operators fill their inputs' values too (FullyConnected gives the weight's shape), so a value found late
  // in the order can help an earlier node: repeat the forward pass until nothing changes.
  bool changed = true;
  for (std::size_t pass = 0; changed && pass <= g.nodes.size() + 1; ++pass) {
    changed = false;
    for (std::uint32_t i = 0; i < g.nodes.size(); ++i) {
      const Node* n = g.nodes[i];
      if (n->is_variable()) continue;
      const std::size_t nargs = n->num_arguments();
      const auto& ins = g.inputs[i];
      std::vector<V> in, aux, out;
      for (std::size_t k = 0; k < ins.size(); ++k) (k < nargs ? in : aux).push_back(vals[g.entry_id(ins[k])]);
      for (std::uint32_t k = 0; k < n->num_outputs(); ++k) out.push_back(vals[g.entry_id(i, k)]);
      const std::string where = std::string("Symbol::") + T::kFn + ": node '" + n->name + "' (" +
                                n->op->TypeString() + "): ";
      try {
        T::Run(*n->op, &in, &out, &aux);
      } catch (const Error& e) {
        throw Error(where + e.what());
      }
      auto update = [&](std::uint32_t entry, const V& v, const std::string& label) {
        V merged;
        if (!T::Merge(vals[entry], v, &merged)) {
          throw Error(where + T::kWhat + " of " + label + " is " + T::Text(vals[entry]) + " but the operator requires " +
                      T::Text(v));
        }
        if (!(merged == vals[entry])) {
          vals[entry] = merged;
          changed = true;
        }
      };
      for (std::size_t k = 0; k < ins.size(); ++k) {
        const V* v = k < nargs ? (k < in.size() ? &in[k] : nullptr) : (k - nargs < aux.size() ? &aux[k - nargs] : nullptr);
        if (v != nullptr) update(g.entry_id(ins[k]), *v, "input " + InputLabel(g, i, k));
      }
      for (std::uint32_t k = 0; k < n->num_outputs() && k < out.size(); ++k) {
        update(g.entry_id(i, k), out[k], "output '" + graph::detail::OutputName(*n, k) + "'");
      }
    }
  }

  if (arg_out != nullptr) {
    arg_out->clear();
    for (auto i : g.arg_nodes) arg_out->push_back(vals[g.entry_id(i, 0)]);
  }
  if (aux_out != nullptr) {
    aux_out->clear();
    for (auto i : g.aux_nodes) aux_out->push_back(vals[g.entry_id(i, 0)]);
  }
  if (out_out != nullptr) {
    out_out->clear();
    for (const auto& h : g.heads) out_out->push_back(vals[g.entry_id(h)]);
  }

  bool complete = true;
  for (const auto& v : vals) complete = complete && T::Known(v);
  if (complete) return true;
  if (why != nullptr) {
    *why = "";
    for (std::uint32_t i = 0; i < g.nodes.size() && why->empty(); ++i) {
      const Node* n = g.nodes[i];
      if (n->is_variable()) continue;
      std::vector<std::string> missing;
      for (std::size_t k = 0; k < g.inputs[i].size(); ++k) {
        if (!T::Known(vals[g.entry_id(g.inputs[i][k])])) missing.push_back(InputLabel(g, i, k));
      }
      bool outs_known = true;
      for (std::uint32_t k = 0; k < n->num_outputs(); ++k) outs_known = outs_known && T::Known(vals[g.entry_id(i, k)]);
      if (!missing.empty()) {
        *why = "node '" + n->name + "' (" + n->op->TypeString() + "): unknown " + T::kWhat + " of " +
               JoinNames(missing) + "; give it in the known " + T::kWhat + "s or a " +
               T::kAttr + " attribute";
      } else if (!outs_known) {
        *why = "node '" + n->name + "' (" + n->op->TypeString() + "): its inputs are known but the operator " +
               "could not infer its outputs' " + T::kWhat + "s";
      }
    }
    if (why->empty()) {
      for (std::uint32_t i = 0; i < g.nodes.size() && why->empty(); ++i) {
        if (g.nodes[i]->is_variable() && !T::Known(vals[g.entry_id(i, 0)])) {
          *why = "variable '" + g.nodes[i]->name + "': unknown " + T::kWhat;
        }
      }
    }
  }
  return false;
}

}  // namespace

Symbol Symbol::Variable(const std::string& name, const SymbolAttrs& attrs) {
  if (name.empty()) throw Error("Symbol::Variable: a variable needs a name");
  return Symbol({NodeEntry{graph::detail::MakeVariable(name, attrs), 0}});
}

Symbol Symbol::Create(const std::string& op, const Kwargs& params, const std::vector<Symbol>& inputs,
                      const std::string& name, const SymbolAttrs& attrs) {
  std::vector<std::optional<NodeEntry>> positional;
  const std::string label = name.empty() ? op : name;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    positional.push_back(SingleOutput(inputs[i], label, op, "#" + std::to_string(i)));
  }
  return BuildOp(op, WithNumArgs(op, params, inputs.size()), name, attrs, positional, nullptr);
}

Symbol Symbol::Create(const std::string& op, const Kwargs& params, const std::map<std::string, Symbol>& inputs,
                      const std::string& name, const SymbolAttrs& attrs) {
  return BuildOp(op, params, name, attrs, {}, &inputs);
}

Symbol Symbol::Group(const std::vector<Symbol>& symbols) {
  std::vector<NodeEntry> outs;
  for (const auto& s : symbols) outs.insert(outs.end(), s.outputs_.begin(), s.outputs_.end());
  return Symbol(std::move(outs));
}

Symbol Symbol::operator[](std::size_t i) const {
  if (i >= outputs_.size()) {
    throw Error("Symbol: output " + std::to_string(i) + " is out of range; the symbol has " +
                std::to_string(outputs_.size()) + " outputs");
  }
  return Symbol({outputs_[i]});
}

std::vector<std::string> Symbol::ListArguments() const {
  const IndexedGraph g = graph::IndexGraph(outputs_);
  std::vector<std::string> names;
  for (auto i : g.arg_nodes) names.push_back(g.nodes[i]->name);
  return names;
}

std::vector<std::string> Symbol::ListOutputs() const {
  std::vector<std::string> names;
  for (const auto& e : outputs_) names.push_back(graph::detail::OutputName(*e.node, e.index));
  return names;
}

std::vector<std::string> Symbol::ListAuxiliaryStates() const {
  const IndexedGraph g = graph::IndexGraph(outputs_);
  std::vector<std::string> names;
  for (auto i : g.aux_nodes) names.push_back(g.nodes[i]->name);
  return names;
}

Symbol Symbol::GetInternals() const {
  const IndexedGraph g = graph::IndexGraph(outputs_);
  // The nodes are shared: find each one's owning pointer through the inputs and heads that reach it.
  std::unordered_map<const Node*, std::shared_ptr<Node>> owner;
  for (const auto& e : outputs_) owner[e.node.get()] = e.node;
  for (const Node* n : g.nodes) {
    for (const auto& e : n->inputs) owner[e.node.get()] = e.node;
  }
  std::vector<NodeEntry> outs;
  for (const Node* n : g.nodes) {
    // Hidden outputs (BatchNorm's mean and var) are not listed, as in MXNet.
    for (std::uint32_t k = 0; k < n->num_visible_outputs(); ++k) outs.push_back({owner.at(n), k});
  }
  return Symbol(std::move(outs));
}

Symbol Symbol::Substitute(const std::map<std::string, Symbol>& vars) const {
  const IndexedGraph g = graph::IndexGraph(outputs_);
  std::unordered_map<std::string, NodeEntry> repl;
  for (const auto& [name, sym] : vars) {
    if (sym.outputs_.size() != 1) {
      throw Error("Symbol::Substitute: the replacement of '" + name + "' has " + std::to_string(sym.outputs_.size()) +
                  " outputs; give one");
    }
    repl[name] = sym.outputs_[0];
  }
  std::unordered_map<const Node*, std::shared_ptr<Node>> copy;  // node -> its copy (or its replacement's node)
  std::unordered_map<const Node*, std::uint32_t> index_shift;   // replaced variables: their replacement's output
  std::size_t used = 0;
  for (const Node* n : g.nodes) {  // inputs come first
    if (n->is_variable()) {
      auto it = repl.find(n->name);
      if (it != repl.end()) {
        copy[n] = it->second.node;
        index_shift[n] = it->second.index;
        ++used;
      }
      continue;
    }
    bool changed = false;
    for (const auto& e : n->inputs) changed = changed || copy.count(e.node.get()) > 0;
    if (!changed) continue;
    auto c = std::make_shared<Node>(*n);
    for (auto& e : c->inputs) {
      auto it = copy.find(e.node.get());
      if (it == copy.end()) continue;
      auto sh = index_shift.find(e.node.get());
      if (sh != index_shift.end()) e.index = sh->second;
      e.node = it->second;
    }
    copy[n] = std::move(c);
  }
  if (used != repl.size()) {
    std::vector<std::string> vars_here;
    for (const Node* n : g.nodes) {
      if (n->is_variable()) vars_here.push_back(n->name);
    }
    for (const auto& [name, e] : repl) {
      if (std::find(vars_here.begin(), vars_here.end(), name) == vars_here.end()) {
        throw Error("Symbol::Substitute: '" + name + "' is no variable of the symbol");
      }
    }
  }
  std::vector<NodeEntry> outs = outputs_;
  for (auto& e : outs) {
    auto it = copy.find(e.node.get());
    if (it == copy.end()) continue;
    auto sh = index_shift.find(e.node.get());
    if (sh != index_shift.end()) e.index = sh->second;
    e.node = it->second;
  }
  return Symbol(std::move(outs));
}

std::string Symbol::name() const { return SingleNode(outputs_, "name").name; }

std::optional<std::string> Symbol::GetAttr(const std::string& key) const {
  const Node& n = SingleNode(outputs_, "GetAttr");
  auto it = n.attrs.find(key);
  if (it == n.attrs.end()) return std::nullopt;
  return it->second;
}

void Symbol::SetAttr(const std::string& key, const std::string& value) {
  SingleNode(outputs_, "SetAttr");
  outputs_[0].node->attrs[key] = value;
}

std::map<std::string, SymbolAttrs> Symbol::ListAttrs() const {
  const IndexedGraph g = graph::IndexGraph(outputs_);
  std::map<std::string, SymbolAttrs> out;
  for (const Node* n : g.nodes) {
    if (!n->attrs.empty()) out[n->name] = n->attrs;
  }
  return out;
}

bool Symbol::InferShape(const std::map<std::string, TShape>& known, std::vector<TShape>* arg_shapes,
                        std::vector<TShape>* out_shapes, std::vector<TShape>* aux_shapes, std::string* why) const {
  return Infer<ShapeTraits>(outputs_, known, arg_shapes, out_shapes, aux_shapes, why);
}

bool Symbol::InferType(const std::map<std::string, int>& known, std::vector<int>* arg_types,
                       std::vector<int>* out_types, std::vector<int>* aux_types, std::string* why) const {
  return Infer<TypeTraits>(outputs_, known, arg_types, out_types, aux_types, why);
}

}  // namespace troupe
