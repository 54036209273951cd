// Block, HybridBlock, Sequential, HybridSequential and SymbolBlock (nn/block.h).
#include "nn/block.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <mutex>
#include <set>
#include <utility>

#include "base/error.h"

namespace troupe::nn {

namespace {

// "<hint><n>_", n counted per hint in this process.
std::string AutoPrefix(const std::string& hint) {
  static std::mutex mu;
  static std::map<std::string, int> counters;
  std::lock_guard<std::mutex> lock(mu);
  return hint + std::to_string(counters[hint]++) + "_";
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

// ------------------------------------------------------------------------------------------------ Block

Block::Block(const std::string& prefix, const std::string& hint)
    : prefix_(!prefix.empty() || hint.empty() ? prefix : AutoPrefix(hint)) {}

Block::~Block() = default;

void Block::AddChild(const std::string& name, std::shared_ptr<Block> block) {
  if (!block) throw Error("Block '" + prefix_ + "': child '" + name + "' is null");
  for (const auto& [n, b] : children_) {
    if (n == name) throw Error("Block '" + prefix_ + "' already has a child named '" + name + "'");
  }
  children_.emplace_back(name, std::move(block));
}

std::shared_ptr<Parameter> Block::AddParameter(const std::string& short_name, TShape shape, std::string init,
                                               OpReqType grad_req, DType dtype) {
  for (const auto& [n, p] : params_) {
    if (n == short_name) throw Error("Block '" + prefix_ + "' already has a parameter '" + short_name + "'");
  }
  auto p = std::make_shared<Parameter>(prefix_ + short_name, std::move(shape), std::move(init), grad_req, dtype);
  params_.emplace_back(short_name, p);
  return p;
}

void Block::AddSharedParameter(const std::string& short_name, std::shared_ptr<Parameter> p) {
  if (!p) throw Error("Block '" + prefix_ + "': shared parameter '" + short_name + "' is null");
  for (const auto& [n, q] : params_) {
    if (n == short_name) throw Error("Block '" + prefix_ + "' already has a parameter '" + short_name + "'");
  }
  params_.emplace_back(short_name, std::move(p));
}

ParameterDict Block::CollectParams(const std::string& select) const {
  ParameterDict all;
  // Depth first, own parameters before the children's, children in the order added.
  std::function<void(const Block&)> visit = [&](const Block& b) {
    for (const auto& [n, p] : b.params_) all.Add(p);
    for (const auto& [n, c] : b.children_) visit(*c);
  };
  visit(*this);
  return select.empty() ? all : all.Select(select);
}

void Block::Initialize(const std::string& init, const std::vector<Context>& ctx, bool force_reinit,
                       const Kwargs& init_params) {
  CollectParams().Initialize(init, ctx, force_reinit, init_params);
}

void Block::Structural(const std::string& path,
                       std::vector<std::pair<std::string, std::shared_ptr<Parameter>>>* out) const {
  for (const auto& [n, p] : params_) out->emplace_back(path + n, p);
  for (const auto& [n, c] : children_) c->Structural(path + n + ".", out);
}

void Block::SaveParameters(const std::string& path) const {
  std::vector<std::pair<std::string, std::shared_ptr<Parameter>>> named;
  Structural("", &named);
  std::vector<NDArray> arrays;
  std::vector<std::string> names;
  std::set<const Parameter*> seen;  // a parameter shared by two children is saved once, under its first path
  for (const auto& [n, p] : named) {
    if (!seen.insert(p.get()).second) continue;
    arrays.push_back(p->Data().CopyTo(Context::CPU()));
    names.push_back(n);
  }
  NDArray::Save(path, arrays, names);
}

void Block::LoadParameters(const std::string& path, const std::vector<Context>& ctx, bool allow_missing,
                           bool ignore_extra) {
  std::vector<NDArray> arrays;
  std::vector<std::string> names;
  NDArray::Load(path, &arrays, &names);
  bool structural = false;
  for (const auto& n : names) structural = structural || n.find('.') != std::string::npos;
  std::vector<std::pair<std::string, std::shared_ptr<Parameter>>> named;
  Structural("", &named);
  if (!structural && !named.empty() && !names.empty()) {
    // A file of full names (ParameterDict::Save, Export): Gluon's fallback.
    bool any_structural_match = false;
    for (const auto& [n, p] : named) {
      for (const auto& f : names) any_structural_match = any_structural_match || f == n;
    }
    if (!any_structural_match) {
      CollectParams().Load(path, ctx, allow_missing, ignore_extra);
      return;
    }
  }
  std::map<std::string, NDArray> loaded;
  for (std::size_t i = 0; i < names.size() && i < arrays.size(); ++i) loaded[names[i]] = arrays[i];
  std::vector<std::string> missing, extra;
  std::set<std::string> known;
  for (const auto& [n, p] : named) {
    known.insert(n);
    auto it = loaded.find(n);
    if (it == loaded.end()) {
      missing.push_back(n);
      continue;
    }
  }
  for (const auto& [n, a] : loaded) {
    if (!known.count(n)) extra.push_back(n);
  }
  if (!missing.empty() && !allow_missing) {
    throw Error("LoadParameters: '" + path + "' has no value for [" + Join(missing) +
                "] (pass allow_missing to keep their values)");
  }
  if (!extra.empty() && !ignore_extra) {
    throw Error("LoadParameters: '" + path + "' has [" + Join(extra) +
                "], which are no parameters of this block (pass ignore_extra to skip them)");
  }
  for (const auto& [n, p] : named) {
    auto it = loaded.find(n);
    if (it == loaded.end()) continue;
    if (!p->initialized()) {
      p->SetShape(it->second.shape());
      if (!p->initialized()) p->Initialize("zero", ctx, true);
    }
    p->SetData(it->second);
  }
}

void Block::Hybridize(bool active, const CachedOpOptions& options) {
  for (const auto& [n, c] : children_) c->Hybridize(active, options);
}

// ------------------------------------------------------------------------------------------ HybridBlock

// The block's symbol for some number of inputs and where each of its inputs (arguments, then auxiliary
// states) comes from: a call input, or a parameter.
struct HybridBlock::Graph {
  Symbol symbol;
  std::vector<int> input_of;                        // per symbol input: the call input, or -1
  std::vector<std::shared_ptr<Parameter>> param_of;  // per symbol input: the parameter, or null
  std::unique_ptr<CachedOp> op;                      // when hybridized
};

HybridBlock::~HybridBlock() = default;

std::vector<std::string> HybridBlock::InputNames(std::size_t n) const {
  if (n == 1) return {"data"};
  std::vector<std::string> names;
  for (std::size_t i = 0; i < n; ++i) names.push_back("data" + std::to_string(i));
  return names;
}

HybridBlock::Graph& HybridBlock::GraphFor(std::size_t num_inputs) {
  auto& slot = graphs_[num_inputs];
  if (slot) return *slot;
  auto g = std::make_shared<Graph>();
  const std::vector<std::string> names = InputNames(num_inputs);
  std::vector<Symbol> in;
  for (const auto& n : names) in.push_back(Symbol::Variable(n));
  std::vector<Symbol> out = HybridForward(in);
  if (out.empty()) throw Error("HybridBlock '" + prefix() + "': HybridForward returned no output");
  g->symbol = out.size() == 1 ? out[0] : Symbol::Group(out);
  const ParameterDict params = CollectParams();
  std::vector<std::string> inputs = g->symbol.ListArguments();
  for (const auto& a : g->symbol.ListAuxiliaryStates()) inputs.push_back(a);
  std::vector<int> data_indices, param_indices;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    int which = -1;
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (names[i] == inputs[k]) which = static_cast<int>(i);
    }
    std::shared_ptr<Parameter> p = which < 0 ? params.Get(inputs[k]) : nullptr;
    if (which < 0 && !p) {
      throw Error("HybridBlock '" + prefix() + "': the forward pass uses variable '" + inputs[k] +
                  "', which is neither an input (" + Join(names) + ") nor a parameter of the block");
    }
    g->input_of.push_back(which);
    g->param_of.push_back(p);
    (which >= 0 ? data_indices : param_indices).push_back(static_cast<int>(k));
  }
  if (hybridized_) {
    CachedOpOptions o = options_;
    o.data_indices = data_indices;
    o.param_indices = param_indices;
    g->op = std::make_unique<CachedOp>(g->symbol, o);
  }
  slot = std::move(g);
  return *slot;
}

std::vector<NDArray> HybridBlock::Forward(const std::vector<NDArray>& inputs) {
  if (inputs.empty()) throw Error("HybridBlock '" + prefix() + "': Forward needs at least one input");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].is_none()) throw Error("HybridBlock '" + prefix() + "': input " + std::to_string(i) + " is empty");
  }
  Graph& g = GraphFor(inputs.size());
  // Deferred initialisation: the symbol's shape inference from the inputs and the known parameter shapes.
  bool deferred = false;
  for (const auto& p : g.param_of) deferred = deferred || (p && p->deferred());
  if (deferred) {
    const std::vector<std::string> names = InputNames(inputs.size());
    std::map<std::string, TShape> known;
    for (std::size_t i = 0; i < names.size(); ++i) known[names[i]] = inputs[i].shape();
    for (const auto& p : g.param_of) {
      if (p && !p->deferred()) known[p->name()] = p->shape();
    }
    std::vector<TShape> args, outs, aux;
    std::string why;
    if (!g.symbol.InferShape(known, &args, &outs, &aux, &why)) {
      throw Error("HybridBlock '" + prefix() + "': cannot infer the shapes of its parameters from the inputs: " + why);
    }
    args.insert(args.end(), aux.begin(), aux.end());
    for (std::size_t k = 0; k < g.param_of.size(); ++k) {
      if (g.param_of[k] && g.param_of[k]->deferred()) g.param_of[k]->SetShape(args[k]);
    }
  }
  std::vector<NDArray> arrays;
  const Context ctx = inputs[0].ctx();
  for (std::size_t k = 0; k < g.input_of.size(); ++k) {
    arrays.push_back(g.input_of[k] >= 0 ? inputs[static_cast<std::size_t>(g.input_of[k])] : g.param_of[k]->Data(ctx));
  }
  return g.op ? (*g.op)(arrays) : RunImperative(g.symbol, arrays);
}

void HybridBlock::Hybridize(bool active, const CachedOpOptions& options) {
  hybridized_ = active;
  options_ = options;
  graphs_.clear();  // rebuilt with or without a CachedOp
  Block::Hybridize(active, options);
}

Symbol HybridBlock::ToSymbol(std::size_t num_inputs) { return GraphFor(num_inputs).symbol; }

void HybridBlock::Export(const std::string& path, int epoch, std::size_t num_inputs) {
  Graph& g = GraphFor(num_inputs);
  g.symbol.Save(path + "-symbol.json");
  const std::size_t num_args = g.symbol.ListArguments().size();
  std::vector<NDArray> arrays;
  std::vector<std::string> names;
  for (std::size_t k = 0; k < g.param_of.size(); ++k) {
    if (!g.param_of[k]) continue;
    arrays.push_back(g.param_of[k]->Data().CopyTo(Context::CPU()));
    names.push_back((k < num_args ? "arg:" : "aux:") + g.param_of[k]->name());
  }
  char epoch_str[16];
  std::snprintf(epoch_str, sizeof(epoch_str), "%04d", epoch);
  NDArray::Save(path + "-" + epoch_str + ".params", arrays, names);
}

// ----------------------------------------------------------------------------- Sequential, HybridSequential

std::vector<NDArray> Sequential::Forward(const std::vector<NDArray>& inputs) {
  std::vector<NDArray> x = inputs;
  for (const auto& [n, c] : children()) x = c->Forward(x);
  return x;
}

std::vector<Symbol> HybridSequential::HybridForward(const std::vector<Symbol>& inputs) {
  std::vector<Symbol> x = inputs;
  for (const auto& [n, c] : children()) x = static_cast<HybridBlock&>(*c).HybridForward(x);
  return x;
}

// ------------------------------------------------------------------------------------------ SymbolBlock

SymbolBlock::SymbolBlock(Symbol outputs, std::vector<std::string> input_names, const ParameterDict& params)
    : HybridBlock("", ""), symbol_(std::move(outputs)), input_names_(std::move(input_names)) {
  if (symbol_.empty()) throw Error("SymbolBlock: the symbol is empty");
  const auto args = symbol_.ListArguments();
  const auto aux = symbol_.ListAuxiliaryStates();
  for (const auto& in : input_names_) {
    if (std::find(args.begin(), args.end(), in) == args.end()) {
      throw Error("SymbolBlock: input '" + in + "' is no argument of the symbol (arguments: " + Join(args) + ")");
    }
  }
  auto add = [&](const std::string& name, OpReqType req) {
    if (std::find(input_names_.begin(), input_names_.end(), name) != input_names_.end()) return;
    if (auto shared = params.Get(name)) {
      AddSharedParameter(name, shared);
    } else {
      AddParameter(name, TShape(), {}, req);
    }
  };
  for (const auto& a : args) add(a, kWriteTo);
  for (const auto& a : aux) add(a, kNullOp);
}

std::shared_ptr<SymbolBlock> SymbolBlock::Imports(const std::string& symbol_file,
                                                  const std::vector<std::string>& input_names,
                                                  const std::string& param_file, const std::vector<Context>& ctx) {
  auto block = std::make_shared<SymbolBlock>(Symbol::Load(symbol_file), input_names);
  if (!param_file.empty()) block->CollectParams().Load(param_file, ctx, false, false);
  return block;
}

std::vector<std::string> SymbolBlock::InputNames(std::size_t n) const {
  if (n != input_names_.size()) {
    throw Error("SymbolBlock: called with " + std::to_string(n) + " inputs; it has " +
                std::to_string(input_names_.size()) + " (" + Join(input_names_) + ")");
  }
  return input_names_;
}

std::vector<Symbol> SymbolBlock::HybridForward(const std::vector<Symbol>& inputs) {
  if (inputs.size() != input_names_.size()) InputNames(inputs.size());  // the error
  std::map<std::string, Symbol> vars;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    // Its own input variables need no substitution (the block's symbol is built on them).
    if (inputs[i].ListArguments() == std::vector<std::string>{input_names_[i]} &&
        inputs[i].ListOutputs() == std::vector<std::string>{input_names_[i]}) {
      continue;
    }
    vars[input_names_[i]] = inputs[i];
  }
  Symbol s = vars.empty() ? symbol_ : symbol_.Substitute(vars);
  std::vector<Symbol> out;
  for (std::size_t i = 0; i < s.NumOutputs(); ++i) out.push_back(s[i]);
  return out;
}

}  // namespace troupe::nn
