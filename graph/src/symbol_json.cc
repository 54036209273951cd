// MXNet 1.x symbol JSON: writing in the exact layout of MXNet's dmlc JSON writer, reading MXNet 1.x files
// and the older ones ("attr"/"param" instead of "attrs", two-element entries, missing auxiliary inputs).
// A small JSON reader/writer lives here: the format needs no general JSON library.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "graph/internal/control_flow.h"
#include "graph/internal/graph.h"
#include "graph/symbol.h"

namespace troupe {

namespace {

using graph::IndexedGraph;
using graph::Node;
using graph::NodeEntry;

constexpr int kMXNetVersion = 10901;

// ---- writer (dmlc::JSONWriter's layout: ", " then newline between items of a multi-line scope) ----

std::string Quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '\r': out += "\\r"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      default: out += c;
    }
  }
  return out + "\"";
}

// A scope whose items are given as text; `depth` is the number of scopes open inside it.
std::string Scope(const std::vector<std::string>& items, bool multi_line, int depth, char open, char close) {
  if (items.empty()) return std::string{open, close};
  std::string out(1, open);
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    if (multi_line) {
      out += '\n';
      out.append(2 * static_cast<std::size_t>(depth), ' ');
    }
    out += items[i];
  }
  if (multi_line) {
    out += '\n';
    out.append(2 * static_cast<std::size_t>(depth - 1), ' ');
  }
  return out + close;
}

std::string EntryText(std::uint32_t node, std::uint32_t index, int version) {
  std::string out = "[";
  out += std::to_string(node);
  out += ", ";
  out += std::to_string(index);
  out += ", ";
  out += std::to_string(version);
  out += ']';
  return out;
}

// Parameters worth writing: required ones and those that differ from their default. MXNet writes only the
// arguments a user gave; defaults left out keep the file loadable by MXNet versions that lack a newer key.
std::map<std::string, std::string> OpAttrs(const Node& n) {
  std::map<std::string, std::string> out;
  const OperatorInfo* info = OperatorRegistry::Get().Find(n.op->TypeString());
  for (const auto& [k, v] : n.op->GetParams()) {
    const ParamDoc* doc = nullptr;
    if (info != nullptr) {
      for (const auto& p : info->params) {
        if (p.name == k) doc = &p;
      }
    }
    if (doc != nullptr && !doc->required && doc->default_value == v) continue;
    out[k] = v;
  }
  for (const auto& [k, v] : n.attrs) out[k] = v;
  return out;
}

// ---- reader ----

struct JValue {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  std::string text;  // string value, or a number's digits
  std::vector<JValue> items;
  std::vector<std::pair<std::string, JValue>> fields;
  std::size_t pos = 0;  // byte offset where the value starts

  const JValue* Find(const std::string& key) const {
    const JValue* found = nullptr;
    for (const auto& [k, v] : fields) {
      if (k == key) found = &v;  // a repeated key: the later value wins, as in dmlc's reader
    }
    return found;
  }
};

class JsonParser {
 public:
  explicit JsonParser(const std::string& s) : s_(s) {}

  JValue ParseDocument() {
    JValue v = Parse(0);
    SkipSpace();
    if (i_ != s_.size()) Fail("unexpected text after the end of the JSON value");
    return v;
  }

 private:
  [[noreturn]] void Fail(const std::string& what) const {
    throw Error("Symbol::FromJSON: malformed JSON at byte " + std::to_string(i_) + ": " + what);
  }
  void SkipSpace() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  void Expect(char c) {
    SkipSpace();
    if (i_ >= s_.size() || s_[i_] != c) Fail(std::string("expected '") + c + "'");
    ++i_;
  }

  JValue Parse(int depth) {
    if (depth > 200) Fail("nesting too deep");
    SkipSpace();
    if (i_ >= s_.size()) Fail("unexpected end of input");
    JValue v;
    v.pos = i_;
    const char c = s_[i_];
    if (c == '{') {
      v.kind = JValue::kObject;
      ++i_;
      SkipSpace();
      if (i_ < s_.size() && s_[i_] == '}') {
        ++i_;
        return v;
      }
      while (true) {
        SkipSpace();
        if (i_ >= s_.size() || s_[i_] != '"') Fail("expected a string key");
        std::string key = ParseString();
        Expect(':');
        JValue item = Parse(depth + 1);
        v.fields.emplace_back(std::move(key), std::move(item));
        SkipSpace();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          continue;
        }
        Expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = JValue::kArray;
      ++i_;
      SkipSpace();
      if (i_ < s_.size() && s_[i_] == ']') {
        ++i_;
        return v;
      }
      while (true) {
        v.items.push_back(Parse(depth + 1));
        SkipSpace();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          continue;
        }
        Expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = JValue::kString;
      v.text = ParseString();
      return v;
    }
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) {
      v.kind = JValue::kNumber;
      const std::size_t start = i_;
      if (s_[i_] == '-') ++i_;
      while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.' || s_[i_] == 'e' ||
                                s_[i_] == 'E' || s_[i_] == '+' || s_[i_] == '-')) {
        ++i_;
      }
      v.text = s_.substr(start, i_ - start);
      return v;
    }
    for (const char* word : {"true", "false", "null"}) {
      const std::string w = word;
      if (s_.compare(i_, w.size(), w) == 0) {
        i_ += w.size();
        v.kind = w == "null" ? JValue::kNull : JValue::kBool;
        v.text = w;
        return v;
      }
    }
    Fail(std::string("unexpected character '") + c + "'");
  }

  std::string ParseString() {
    ++i_;  // the opening quote
    std::string out;
    while (true) {
      if (i_ >= s_.size()) Fail("unterminated string");
      const char c = s_[i_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) Fail("unterminated string");
      const char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          if (i_ + 4 > s_.size()) Fail("bad \\u escape");
          unsigned cp = 0;
          for (int k = 0; k < 4; ++k) {
            const char h = s_[i_++];
            cp <<= 4;
            if (h >= '0' && h <= '9') cp |= static_cast<unsigned>(h - '0');
            else if (h >= 'a' && h <= 'f') cp |= static_cast<unsigned>(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F') cp |= static_cast<unsigned>(h - 'A' + 10);
            else Fail("bad \\u escape");
          }
          // UTF-8 (surrogate pairs are not combined: MXNet never writes \u escapes at all).
          if (cp < 0x80) {
            out += static_cast<char>(cp);
          } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          }
          break;
        }
        default: --i_; Fail(std::string("unknown string escape '\\") + e + "'");
      }
    }
  }

  const std::string& s_;
  std::size_t i_ = 0;
};

[[noreturn]] void Bad(const JValue& v, const std::string& what) {
  throw Error("Symbol::FromJSON: " + what + " (at byte " + std::to_string(v.pos) + ")");
}

std::int64_t ToInt(const JValue& v, const std::string& what) {
  if (v.kind != JValue::kNumber) Bad(v, what + " must be an integer");
  std::size_t used = 0;
  std::int64_t x = 0;
  try {
    x = std::stoll(v.text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.text.size()) Bad(v, what + " must be an integer, got " + v.text);
  return x;
}

const JValue& Need(const JValue& obj, const std::string& key, JValue::Kind kind, const std::string& where) {
  const JValue* v = obj.Find(key);
  if (v == nullptr) Bad(obj, where + " has no field \"" + key + "\"");
  if (v->kind != kind) Bad(*v, where + ": field \"" + key + "\" has the wrong JSON type");
  return *v;
}

// Reads an attribute object (values must be strings) into *out; overwrite=false keeps existing keys.
void ReadAttrs(const JValue& v, const std::string& where, SymbolAttrs* out, bool overwrite) {
  if (v.kind != JValue::kObject) Bad(v, where + ": attributes must be a JSON object");
  for (const auto& [k, val] : v.fields) {
    if (val.kind != JValue::kString) Bad(val, where + ": attribute \"" + k + "\" must be a string");
    if (overwrite || out->count(k) == 0) (*out)[k] = val.text;
  }
}

// MXNet's upgrade of files older than 1.9.1 (FixParsing): "lr_mult" becomes "__lr_mult__", and on an
// operator node "weight_lr_mult" becomes "__lr_mult__" of the variable feeding its "weight".
const char* const kLegacyHiddenKeys[] = {"ctx_group", "lr_mult", "wd_mult", "force_mirroring", "mirror_stage"};

struct PendingInput {
  std::string arg;
  std::string key, value;
};

SymbolAttrs FixLegacyKeys(const SymbolAttrs& attrs, bool is_variable, std::vector<PendingInput>* for_inputs) {
  SymbolAttrs out;
  for (const auto& [k, v] : attrs) {
    bool done = false;
    for (const char* hk : kLegacyHiddenKeys) {
      const std::string key = hk;
      if (k == key) {
        out["__" + key + "__"] = v;
        done = true;
        break;
      }
      if (k.size() > key.size() + 1 && k.compare(k.size() - key.size(), key.size(), key) == 0 &&
          k[k.size() - key.size() - 1] == '_' && !graph::detail::IsHiddenKey(k)) {
        if (is_variable) break;
        for_inputs->push_back({k.substr(0, k.size() - key.size() - 1), "__" + key + "__", v});
        done = true;
        break;
      }
    }
    if (!done) out[k] = v;
  }
  return out;
}

Symbol ParseGraph(const JValue& doc, int version, const std::string& what);

}  // namespace

std::string Symbol::ToJSON() const {
  const IndexedGraph g = graph::IndexGraph(outputs_);
  std::vector<std::string> nodes;
  std::vector<std::string> arg_nodes, row_ptr{"0"};
  std::uint32_t rows = 0;
  for (std::uint32_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = *g.nodes[i];
    std::vector<std::string> fields;
    fields.push_back("\"op\": " + Quote(n.is_variable() ? "null" : n.op->TypeString()));
    fields.push_back("\"name\": " + Quote(n.name));
    const std::map<std::string, std::string> attrs =
        n.is_variable() ? std::map<std::string, std::string>(n.attrs.begin(), n.attrs.end()) : OpAttrs(n);
    if (!attrs.empty()) {
      std::vector<std::string> kv;
      for (const auto& [k, v] : attrs) kv.push_back(Quote(k) + ": " + Quote(v));
      fields.push_back("\"attrs\": " + Scope(kv, kv.size() > 1, 4, '{', '}'));
    }
    std::vector<std::string> ins;
    const std::uint32_t nargs = n.num_arguments();
    for (std::size_t k = 0; k < g.inputs[i].size(); ++k) {
      const auto& e = g.inputs[i][k];
      // MXNet marks an input that the operator mutates (an auxiliary state) with version 1.
      ins.push_back(EntryText(e.node, e.index, k >= nargs && g.nodes[e.node]->is_variable() ? 1 : 0));
    }
    fields.push_back("\"inputs\": " + Scope(ins, ins.size() > 10, 4, '[', ']'));
    if (const auto* cf = n.is_variable() ? nullptr : graph::AsControlFlow(*n.op)) {
      std::vector<std::string> subs;
      for (const Symbol& sub : cf->subgraph_symbols()) subs.push_back(sub.ToJSON());
      fields.push_back("\"subgraphs\": " + Scope(subs, true, 4, '[', ']'));
    }
    nodes.push_back(Scope(fields, true, 3, '{', '}'));
    if (n.is_variable()) arg_nodes.push_back(std::to_string(i));
    rows += n.num_outputs();
    row_ptr.push_back(std::to_string(rows));
  }
  std::vector<std::string> heads;
  for (const auto& h : g.heads) heads.push_back(EntryText(h.node, h.index, 0));
  std::vector<std::string> top;
  top.push_back("\"nodes\": " + Scope(nodes, true, 2, '[', ']'));
  top.push_back("\"arg_nodes\": " + Scope(arg_nodes, arg_nodes.size() > 10, 2, '[', ']'));
  top.push_back("\"node_row_ptr\": " + Scope(row_ptr, row_ptr.size() > 10, 2, '[', ']'));
  top.push_back("\"heads\": " + Scope(heads, heads.size() > 10, 2, '[', ']'));
  top.push_back("\"attrs\": {\"mxnet_version\": [\"int\", " + std::to_string(kMXNetVersion) + "]}");
  return Scope(top, true, 1, '{', '}');
}

Symbol Symbol::FromJSON(const std::string& json) {
  const JValue doc = JsonParser(json).ParseDocument();
  if (doc.kind != JValue::kObject) Bad(doc, "the top level must be a JSON object");
  int version = 800;  // MXNet's default for files without one
  if (const JValue* attrs = doc.Find("attrs")) {
    if (attrs->kind != JValue::kObject) Bad(*attrs, "\"attrs\" must be a JSON object");
    if (const JValue* v = attrs->Find("mxnet_version")) {
      if (v->kind != JValue::kArray || v->items.size() != 2) Bad(*v, "mxnet_version must be [\"int\", N]");
      version = static_cast<int>(ToInt(v->items[1], "mxnet_version"));
    }
  }
  return ParseGraph(doc, version, "the symbol");
}

namespace {

// A graph object (the symbol, or a control-flow node's subgraph): nodes, arg_nodes, heads.
Symbol ParseGraph(const JValue& doc, int version, const std::string& what) {
  if (doc.kind != JValue::kObject) Bad(doc, what + " must be a JSON object");
  const JValue& jnodes = Need(doc, "nodes", JValue::kArray, what);
  Need(doc, "arg_nodes", JValue::kArray, what);
  const JValue& jheads = Need(doc, "heads", JValue::kArray, what);

  // Every unknown operator at once, each with the nodes that use it.
  std::map<std::string, std::vector<std::string>> unknown;
  for (const JValue& jn : jnodes.items) {
    if (jn.kind != JValue::kObject) Bad(jn, "a node must be a JSON object");
    const std::string op = Need(jn, "op", JValue::kString, "a node").text;
    const std::string name = Need(jn, "name", JValue::kString, "a node").text;
    if (op != "null" && OperatorRegistry::Get().Find(op) == nullptr) unknown[op].push_back(name);
  }
  if (!unknown.empty()) {
    std::string list;
    for (const auto& [op, names] : unknown) {
      std::string ns;
      for (const auto& n : names) ns += (ns.empty() ? "'" : ", '") + n + "'";
      list += (list.empty() ? "" : "; ") + op + " (used by " + ns + ")";
      const std::string similar = SimilarNames(op, OperatorRegistry::Get().ListNames());
      if (!similar.empty()) list += " [did you mean: " + similar + "]";
    }
    throw Error("Symbol::FromJSON: unknown operators: " + list +
                "; troupe has no implementation of them (OperatorRegistry::ListNames() lists what it has)");
  }

  std::vector<std::shared_ptr<Node>> built;
  for (std::size_t id = 0; id < jnodes.items.size(); ++id) {
    const JValue& jn = jnodes.items[id];
    const std::string op = jn.Find("op")->text;
    const std::string name = jn.Find("name")->text;
    const std::string where = "node " + std::to_string(id) + " '" + name + "'";
    SymbolAttrs attrs;
    for (const auto& [k, v] : jn.fields) {
      // "attrs" (1.x) and "attr" (0.9) fill the same dictionary, the later replacing the earlier; "param"
      // (0.8) adds without overwriting.
      if (k == "attrs" || k == "attr") {
        attrs.clear();
        ReadAttrs(v, where, &attrs, true);
      }
    }
    if (const JValue* p = jn.Find("param")) ReadAttrs(*p, where, &attrs, false);
    std::vector<Symbol> subgraphs;
    if (const JValue* sg = jn.Find("subgraphs")) {
      if (sg->kind != JValue::kArray) Bad(*sg, where + ": \"subgraphs\" must be a JSON array");
      for (std::size_t k = 0; k < sg->items.size(); ++k) {
        subgraphs.push_back(ParseGraph(sg->items[k], version, where + ": subgraph " + std::to_string(k)));
      }
    }
    const JValue& jin = Need(jn, "inputs", JValue::kArray, where);
    std::vector<NodeEntry> inputs;
    for (const JValue& e : jin.items) {
      if (e.kind != JValue::kArray || (e.items.size() != 2 && e.items.size() != 3)) {
        Bad(e, where + ": an input must be [node, output, version]");
      }
      const std::int64_t src = ToInt(e.items[0], where + ": input node id");
      const std::int64_t idx = ToInt(e.items[1], where + ": input output index");
      if (src < 0 || static_cast<std::size_t>(src) >= id) {
        Bad(e, where + ": input node " + std::to_string(src) + " is not an earlier node (nodes must be in " +
                   "topological order)");
      }
      const auto& s = built[static_cast<std::size_t>(src)];
      if (idx < 0 || idx >= static_cast<std::int64_t>(s->num_outputs())) {
        Bad(e, where + ": input refers to output " + std::to_string(idx) + " of node '" + s->name + "', which has " +
                   std::to_string(s->num_outputs()));
      }
      inputs.push_back({s, static_cast<std::uint32_t>(idx)});
    }

    std::vector<PendingInput> for_inputs;
    if (version < kMXNetVersion) attrs = FixLegacyKeys(attrs, op == "null", &for_inputs);
    if (op == "null") {
      if (!inputs.empty()) Bad(jn, where + ": a variable (op \"null\") has no inputs");
      built.push_back(graph::detail::MakeVariable(name, attrs));
      continue;
    }
    auto node = std::make_shared<Node>();
    node->name = name;
    Kwargs params(attrs.begin(), attrs.end());
    node->op = graph::detail::MakeOperator(op, params, name, &node->attrs, std::move(subgraphs));
    const auto args = node->op->ListArguments();
    const auto aux = node->op->ListAuxiliaryStates();
    const std::size_t want = args.size() + aux.size();
    // Files before 0.9 did not store auxiliary-state inputs: MXNet adds them as "<node>_<name>" variables.
    if (version < 900 && inputs.size() < want) {
      for (std::size_t k = inputs.size(); k < want; ++k) {
        const std::string arg = k < args.size() ? args[k] : aux[k - args.size()];
        inputs.push_back({graph::detail::MakeVariable(name + "_" + arg, {}), 0});
      }
    }
    if (inputs.size() != want) {
      std::string names;
      for (const auto& a : args) names += (names.empty() ? "" : ", ") + a;
      for (const auto& a : aux) names += (names.empty() ? "" : ", ") + a;
      Bad(jn, where + " (" + op + ") has " + std::to_string(inputs.size()) + " inputs but the operator takes " +
                  std::to_string(want) + " (" + names + ")");
    }
    for (const auto& p : for_inputs) {
      auto it = std::find(args.begin(), args.end(), p.arg);
      if (it == args.end()) {
        node->attrs[p.arg + "_" + p.key.substr(2, p.key.size() - 4)] = p.value;
        continue;
      }
      const auto& in = inputs[static_cast<std::size_t>(it - args.begin())].node;
      if (in->is_variable()) in->attrs[p.key] = p.value;
    }
    node->inputs = std::move(inputs);
    built.push_back(std::move(node));
  }

  std::vector<NodeEntry> heads;
  for (const JValue& e : jheads.items) {
    if (e.kind != JValue::kArray || (e.items.size() != 2 && e.items.size() != 3)) {
      Bad(e, "a head must be [node, output, version]");
    }
    const std::int64_t src = ToInt(e.items[0], "head node id");
    const std::int64_t idx = ToInt(e.items[1], "head output index");
    if (src < 0 || static_cast<std::size_t>(src) >= built.size()) {
      Bad(e, "head refers to node " + std::to_string(src) + " of " + std::to_string(built.size()));
    }
    const auto& s = built[static_cast<std::size_t>(src)];
    if (idx < 0 || idx >= static_cast<std::int64_t>(s->num_outputs())) {
      Bad(e, "head refers to output " + std::to_string(idx) + " of node '" + s->name + "'");
    }
    heads.push_back({s, static_cast<std::uint32_t>(idx)});
  }
  if (heads.empty()) Bad(jheads, what + " has no heads (outputs)");
  return Symbol(std::move(heads));
}

}  // namespace

void Symbol::Save(const std::string& path) const {
  const std::string text = ToJSON();
  std::ofstream f(path, std::ios::binary);
  if (!f) throw Error("Symbol::Save: cannot open '" + path + "' for writing");
  f << text;
  f.close();
  if (!f) throw Error("Symbol::Save: writing '" + path + "' failed (disk full?)");
}

Symbol Symbol::Load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("Symbol::Load: cannot open '" + path + "' (no such file or no permission)");
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return FromJSON(ss.str());
  } catch (const Error& e) {
    throw Error("Symbol::Load: '" + path + "': " + e.what());
  }
}

}  // namespace troupe
