// Automatic mixed precision for symbols (see amp.h).
//
// The default lists are MXNet 1.9.1's (python/mxnet/contrib/amp/lists/symbol_{bf16,fp16}.py) restricted to the
// operators troupe registers, under the names MXNet lists (canonical names and aliases).
#include "graph/amp.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "graph/internal/graph.h"
#include "op/operator.h"

namespace troupe::amp {

namespace {

using graph::Node;
using graph::NodeEntry;

const std::vector<std::string> kBf16Ops = {
    "Convolution", "FullyConnected"
};
const std::vector<std::string> kBf16Fp32Ops = {
    "abs", "_add", "BatchNorm", "clip", "Concat", "concat", "Pooling", "relu", "sqrt", "square", "tanh"
};
const std::vector<std::string> kBf16Fp32OnlyOps = {
    "Deconvolution", "RNN", "BlockGrad", "Cast", "cast", "Dropout", "Embedding", "Flatten", "Pad", "Reshape",
    "SequenceLast", "SequenceMask", "SequenceReverse", "SliceChannel", "SwapAxis", "UpSampling", "_DivScalar",
    "_EqualScalar", "_GreaterScalar", "_GreaterEqualScalar", "_LesserScalar", "_LesserEqualScalar",
    "_MaximumScalar", "_MinimumScalar", "_MinusScalar", "_MulScalar", "_NotEqualScalar", "_PlusScalar",
    "_RMinusScalar", "_arange", "_contrib_AdaptiveAvgPooling2D", "_contrib_BilinearResize2D",
    "_contrib_div_sqrt_dim", "_copy", "_div_scalar", "_equal_scalar", "_full", "_greater_scalar",
    "_greater_equal_scalar", "_lesser_scalar", "_lesser_equal_scalar", "_maximum_scalar", "_minimum_scalar",
    "_minus_scalar", "_mul_scalar", "_not_equal_scalar", "_ones", "_plus_scalar", "_rminus_scalar",
    "_rnn_param_concat", "_zeros", "arccosh", "arcsinh", "arctan", "argmax", "argmin", "broadcast_axes",
    "broadcast_axis", "broadcast_like", "broadcast_to", "cbrt", "ceil", "cos", "crop", "degrees", "erf",
    "expand_dims", "fix", "flatten", "flip", "floor", "gather_nd", "identity", "max_axis", "max", "min",
    "min_axis", "negative", "one_hot", "ones_like", "pad", "pick", "radians", "repeat", "reshape",
    "reshape_like", "reverse", "rint", "round", "shape_array", "sigmoid", "sign", "sin", "size_array", "slice",
    "slice_axis", "slice_like", "softsign", "sort", "split", "squeeze", "stop_gradient", "swapaxes", "take",
    "tile", "transpose", "trunc", "zeros_like", "broadcast_mul", "arccos", "arcsin", "cosh", "sinh", "tan",
    "arctanh", "exp", "expm1", "log", "log10", "log2", "log1p", "broadcast_power", "reciprocal", "_RDivScalar",
    "_rdiv_scalar", "rsqrt", "rcbrt", "_PowerScalar", "_power", "_power_scalar", "_RPowerScalar",
    "_rpower_scalar", "_hypot", "broadcast_hypot", "sum", "sum_axis", "nansum", "prod", "nanprod", "mean",
    "argsort", "topk", "SoftmaxOutput", "softmax", "Softmax", "log_softmax", "LayerNorm", "L2Normalization",
    "LinearRegressionOutput", "LogisticRegressionOutput", "MAERegressionOutput", "smooth_l1"
};
const std::vector<std::string> kBf16Widest = {
    "_Plus", "_plus", "_Minus", "_sub", "_Mul", "_Div", "_div", "_equal", "_greater", "_greater_equal",
    "_lesser", "_lesser_equal", "_logical_and", "_logical_or", "_logical_xor", "_maximum", "_minimum", "_minus",
    "_mod", "_mul", "_not_equal", "ElementWiseSum", "add_n", "batch_dot", "broadcast_add", "broadcast_plus",
    "broadcast_div", "broadcast_equal", "broadcast_greater", "broadcast_greater_equal", "broadcast_lesser",
    "broadcast_lesser_equal", "broadcast_logical_and", "broadcast_logical_or", "broadcast_logical_xor",
    "broadcast_maximum", "broadcast_minimum", "broadcast_minus", "broadcast_mod", "broadcast_not_equal",
    "broadcast_sub", "dot", "elemwise_add", "elemwise_div", "elemwise_mul", "elemwise_sub", "stack",
    "_contrib_ROIAlign", "_contrib_box_nms", "_contrib_box_non_maximum_suppression", "where"
};

const std::vector<std::string> kFp16Ops = {
    "Convolution", "Deconvolution", "FullyConnected", "RNN"
};
const std::vector<std::string> kFp16Fp32Ops = {
    "BatchNorm", "BlockGrad", "Cast", "cast", "Dropout", "Embedding", "Flatten", "Pad", "Pooling", "Reshape",
    "SequenceLast", "SequenceMask", "SequenceReverse", "SliceChannel", "SwapAxis", "UpSampling", "_DivScalar",
    "_EqualScalar", "_GreaterScalar", "_GreaterEqualScalar", "_LesserScalar", "_LesserEqualScalar",
    "_MaximumScalar", "_MinimumScalar", "_MinusScalar", "_MulScalar", "_NotEqualScalar", "_PlusScalar",
    "_RMinusScalar", "_add", "_arange", "_contrib_AdaptiveAvgPooling2D", "_contrib_BilinearResize2D",
    "_contrib_div_sqrt_dim", "_copy", "_div_scalar", "_equal_scalar", "_full", "_greater_scalar",
    "_greater_equal_scalar", "_lesser_scalar", "_lesser_equal_scalar", "_maximum_scalar", "_minimum_scalar",
    "_minus_scalar", "_mul_scalar", "_not_equal_scalar", "_ones", "_plus_scalar", "_rminus_scalar",
    "_rnn_param_concat", "_zeros", "abs", "arccosh", "arcsinh", "arctan", "argmax", "argmin", "broadcast_axes",
    "broadcast_axis", "broadcast_like", "broadcast_to", "cbrt", "ceil", "clip", "cos", "crop", "degrees", "erf",
    "expand_dims", "fix", "flatten", "flip", "floor", "gather_nd", "identity", "max_axis", "max", "min",
    "min_axis", "negative", "one_hot", "ones_like", "pad", "pick", "radians", "relu", "repeat", "reshape",
    "reshape_like", "reverse", "rint", "round", "shape_array", "sigmoid", "sign", "sin", "size_array", "slice",
    "slice_axis", "slice_like", "softsign", "sort", "split", "sqrt", "squeeze", "stop_gradient", "swapaxes",
    "take", "tanh", "tile", "transpose", "trunc", "zeros_like"
};
const std::vector<std::string> kFp16Fp32OnlyOps = {
    "arccos", "arcsin", "cosh", "sinh", "tan", "arctanh", "exp", "expm1", "log", "log10", "log2", "log1p",
    "broadcast_power", "square", "reciprocal", "_RDivScalar", "_rdiv_scalar", "rsqrt", "rcbrt", "_PowerScalar",
    "_power", "_power_scalar", "_RPowerScalar", "_rpower_scalar", "_hypot", "broadcast_hypot", "sum", "sum_axis",
    "nansum", "prod", "nanprod", "mean", "argsort", "topk", "SoftmaxOutput", "softmax", "Softmax", "log_softmax",
    "LayerNorm", "L2Normalization", "LinearRegressionOutput", "LogisticRegressionOutput", "MAERegressionOutput",
    "smooth_l1"
};
const std::vector<std::string> kFp16Widest = {
    "_Plus", "_plus", "_Minus", "_sub", "_Mul", "_Div", "_div", "_equal", "_greater", "_greater_equal",
    "_lesser", "_lesser_equal", "_logical_and", "_logical_or", "_logical_xor", "_maximum", "_minimum", "_minus",
    "_mod", "_mul", "_not_equal", "Concat", "concat", "ElementWiseSum", "add_n", "batch_dot", "broadcast_add",
    "broadcast_plus", "broadcast_div", "broadcast_equal", "broadcast_greater", "broadcast_greater_equal",
    "broadcast_lesser", "broadcast_lesser_equal", "broadcast_logical_and", "broadcast_logical_or",
    "broadcast_logical_xor", "broadcast_maximum", "broadcast_minimum", "broadcast_minus", "broadcast_mod",
    "broadcast_mul", "broadcast_not_equal", "broadcast_sub", "dot", "elemwise_add", "elemwise_div",
    "elemwise_mul", "elemwise_sub", "stack", "_contrib_ROIAlign", "_contrib_box_nms",
    "_contrib_box_non_maximum_suppression", "_contrib_interleaved_matmul_encdec_qk",
    "_contrib_interleaved_matmul_encdec_valatt", "_contrib_interleaved_matmul_selfatt_qk",
    "_contrib_interleaved_matmul_selfatt_valatt", "where"
};

void CheckTarget(DType target) {
  if (target != DType::kFloat16 && target != DType::kBfloat16) {
    throw Error(std::string("amp: target type ") + DTypeName(target) + " is not supported; use float16 or bfloat16");
  }
}

bool Bf16(DType target) {
  CheckTarget(target);
  return target == DType::kBfloat16;
}

}  // namespace

std::vector<std::string> ListLp16Ops(DType target) { return Bf16(target) ? kBf16Ops : kFp16Ops; }
std::vector<std::string> ListFp32Ops(DType target) { return Bf16(target) ? kBf16Fp32OnlyOps : kFp16Fp32OnlyOps; }
std::vector<std::string> ListLp16Fp32Ops(DType target) { return Bf16(target) ? kBf16Fp32Ops : kFp16Fp32Ops; }
std::vector<std::string> ListWidestTypeCast(DType target) { return Bf16(target) ? kBf16Widest : kFp16Widest; }
std::vector<ConditionalFp32Op> ListConditionalFp32Ops(DType target) {
  CheckTarget(target);
  return {{"Activation", "act_type", {"softrelu"}}, {"LeakyReLU", "act_type", {"elu", "selu"}}};
}

namespace {

std::set<std::string> ToSet(const std::vector<std::string>& v) { return {v.begin(), v.end()}; }

// The op lists of one conversion, checked as MXNet checks them.
struct Lists {
  std::set<std::string> lp16, fp32, widest, excluded;
  std::map<std::string, std::vector<std::pair<std::string, std::vector<std::string>>>> conditional;
};

Lists MakeLists(const ConvertOptions& o) {
  Lists l;
  const std::vector<std::string> lp = o.target_dtype_ops.value_or(ListLp16Ops(o.target_dtype));
  const std::vector<std::string> fp = o.fp32_ops.value_or(ListFp32Ops(o.target_dtype));
  const std::vector<ConditionalFp32Op> cond = o.conditional_fp32_ops.value_or(ListConditionalFp32Ops(o.target_dtype));
  l.lp16 = ToSet(lp);
  l.fp32 = ToSet(fp);
  l.widest = ToSet(ListWidestTypeCast(o.target_dtype));
  l.excluded = ToSet(o.excluded_sym_names);
  std::set<std::string> cond_ops;
  for (const auto& c : cond) {
    cond_ops.insert(c.op);
    l.conditional[c.op].emplace_back(c.param, c.values);
  }
  const auto check_disjoint = [](const std::set<std::string>& a, const std::set<std::string>& b, const char* an,
                                 const char* bn) {
    for (const auto& x : a) {
      if (b.count(x) != 0) {
        throw Error("amp: operator '" + x + "' is in both " + an + " and " + bn + "; an operator can be in one list only");
      }
    }
  };
  check_disjoint(l.lp16, l.fp32, "target_dtype_ops", "fp32_ops");
  check_disjoint(l.lp16, cond_ops, "target_dtype_ops", "conditional_fp32_ops");
  check_disjoint(cond_ops, l.fp32, "conditional_fp32_ops", "fp32_ops");
  std::set<std::string> known = ToSet(ListLp16Ops(o.target_dtype));
  for (const auto& v : {ListFp32Ops(o.target_dtype), ListLp16Fp32Ops(o.target_dtype)}) known.insert(v.begin(), v.end());
  for (const auto& c : ListConditionalFp32Ops(o.target_dtype)) known.insert(c.op);
  for (const auto* s : {&l.lp16, &l.fp32, &cond_ops}) {
    for (const auto& x : *s) {
      if (known.count(x) == 0) {
        throw Error("amp: operator '" + x + "' is in none of the default lists (ListLp16Ops, ListFp32Ops, "
                    "ListLp16Fp32Ops, ListConditionalFp32Ops); choose operators from those");
      }
    }
  }
  return l;
}

bool ConditionalFp32(const Lists& l, const Node& node) {
  const auto it = l.conditional.find(node.op->TypeString());
  if (it == l.conditional.end()) return false;
  const Kwargs params = node.op->GetParams();
  for (const auto& [param, values] : it->second) {
    for (const auto& [k, v] : params) {
      if (k == param && std::find(values.begin(), values.end(), v) != values.end()) return true;
    }
  }
  return false;
}

class Converter {
 public:
  Converter(const Symbol& symbol, const ConvertOptions& o)
      : g_(graph::IndexGraph(symbol.outputs())), lists_(MakeLists(o)), target_(static_cast<int>(o.target_dtype)),
        target_name_(DTypeName(o.target_dtype)), cast_optional_(o.cast_optional_params) {
    if (o.data_names) {
      data_names_ = ToSet(*o.data_names);
    } else {
      for (const Node* n : g_.nodes) {
        if (n->is_variable() && n->attrs.count("__dtype__") == 0) data_names_.insert(n->name);
      }
    }
  }

  Symbol Run() {
    mirror_.resize(g_.nodes.size());
    for (std::uint32_t n = 0; n < g_.nodes.size(); ++n) Visit(n);
    std::vector<NodeEntry> outputs;
    for (const auto& h : g_.heads) {
      const auto it = fp32_.find(g_.entry_id(h));
      outputs.push_back(it != fp32_.end() ? it->second : Cast(h, "float32", &fp32_));
    }
    return Symbol(std::move(outputs));
  }

 private:
  using Entry = graph::IndexedGraph::Entry;
  using Map = std::map<std::uint32_t, NodeEntry>;

  NodeEntry Mirror(const Entry& e) const { return NodeEntry{mirror_[e.node], e.index}; }
  const Node& NodeOf(const Entry& e) const { return *g_.nodes[e.node]; }

  // The name MXNet gives a cast of entry e: "<node>[_<output>]_amp_cast_<type>".
  std::string Suffix(const Entry& e) const { return NodeOf(e).is_variable() ? "" : "_" + std::to_string(e.index); }

  NodeEntry Cast(const Entry& e, const std::string& dtype, Map* map) {
    auto node = std::make_shared<Node>();
    node->name = NodeOf(e).name + Suffix(e) + "_amp_cast_" + dtype;
    std::unique_ptr<OperatorProperty> op = OperatorProperty::Create("amp_cast");
    op->Init({{"dtype", dtype}});
    node->op = std::move(op);
    node->inputs = {Mirror(e)};
    NodeEntry out{std::move(node), 0};
    (*map)[g_.entry_id(e)] = out;
    return out;
  }

  // The argument and output types of `node` when its first input has type `first` (both empty when they
  // cannot be inferred).
  struct Types {
    std::vector<int> in, out;
  };
  static Types InferTypes(const Node& node, int first) {
    Types t;
    t.in.assign(node.num_arguments(), kTypeUnknown);
    if (t.in.empty()) return {};
    t.in[0] = first;
    std::vector<int> aux;
    try {
      if (!node.op->InferType(&t.in, &t.out, &aux)) return {};
    } catch (const Error&) {
      return {};
    }
    return t;
  }

  void Record(std::uint32_t n, const std::vector<int>& out_types) {
    for (std::uint32_t i = 0; i < out_types.size() && i < g_.nodes[n]->num_outputs(); ++i) {
      if (out_types[i] == target_) lp16_[g_.entry_id(n, i)] = NodeEntry{mirror_[n], i};
      if (out_types[i] == static_cast<int>(DType::kFloat32)) fp32_[g_.entry_id(n, i)] = NodeEntry{mirror_[n], i};
    }
  }

  // Node n computing in float32: inputs cast unless they are variables (float32 already) or auxiliary states.
  void Fp32Node(std::uint32_t n, Node* copy) {
    Record(n, std::vector<int>(g_.nodes[n]->num_outputs(), static_cast<int>(DType::kFloat32)));
    const auto& ins = g_.inputs[n];
    for (std::size_t i = 0; i < ins.size(); ++i) {
      const auto it = fp32_.find(g_.entry_id(ins[i]));
      if (it != fp32_.end()) {
        copy->inputs.push_back(it->second);
      } else if (NodeOf(ins[i]).is_variable() || i >= g_.nodes[n]->num_arguments()) {
        copy->inputs.push_back(Mirror(ins[i]));
      } else {
        copy->inputs.push_back(Cast(ins[i], "float32", &fp32_));
      }
    }
  }

  void Visit(std::uint32_t n) {
    const Node& node = *g_.nodes[n];
    auto copy = std::make_shared<Node>();
    copy->name = node.name;
    copy->op = node.op;
    copy->attrs = node.attrs;
    mirror_[n] = copy;
    if (node.is_variable()) return;
    const std::string op = node.op->TypeString();
    const bool excluded = lists_.excluded.count(node.name) != 0;
    const auto& ins = g_.inputs[n];
    const std::uint32_t nargs = node.num_arguments();
    if (lists_.fp32.count(op) != 0 || excluded || ConditionalFp32(lists_, node)) {
      Fp32Node(n, copy.get());
    } else if (lists_.lp16.count(op) != 0) {
      const Types types = InferTypes(node, target_);
      Record(n, types.out);
      for (std::size_t i = 0; i < ins.size(); ++i) {
        const Entry& e = ins[i];
        const auto it = lp16_.find(g_.entry_id(e));
        const int wanted = i < types.in.size() ? types.in[i] : kTypeUnknown;
        if (it != lp16_.end()) {
          copy->inputs.push_back(it->second);
        } else if ((cast_optional_ && NodeOf(e).is_variable() && data_names_.count(NodeOf(e).name) == 0) ||
                   i >= nargs || !(wanted == target_ || wanted == kTypeUnknown)) {
          // Converted offline (cast_optional_params), an auxiliary state, or an input the operator wants in
          // another type (BatchNorm's gamma in float32).
          copy->inputs.push_back(Mirror(e));
          if (cast_optional_ && NodeOf(e).is_variable()) lp16_[g_.entry_id(e)] = Mirror(e);
        } else {
          copy->inputs.push_back(Cast(e, target_name_, &lp16_));
        }
      }
    } else if (lists_.widest.count(op) != 0) {
      if (ins.empty()) throw Error("amp: node '" + node.name + "' (" + op + ") has no inputs");
      int out_type = target_;
      bool unknown = false;
      for (const auto& e : ins) {
        const std::uint32_t id = g_.entry_id(e);
        if (lp16_.count(id) == 0 && fp32_.count(id) == 0) {
          unknown = true;
          break;
        }
        if (fp32_.count(id) != 0) out_type = static_cast<int>(DType::kFloat32);
      }
      if (unknown) {
        // Types known only when the graph runs: one amp_multicast brings every input to the widest.
        auto multi = std::make_shared<Node>();
        multi->name = NodeOf(ins[0]).name + Suffix(ins[0]) + "_amp_multicast";
        std::unique_ptr<OperatorProperty> mop = OperatorProperty::Create("amp_multicast");
        mop->Init({{"num_outputs", std::to_string(ins.size())}});
        multi->op = std::move(mop);
        for (const auto& e : ins) multi->inputs.push_back(Mirror(e));
        for (std::uint32_t i = 0; i < ins.size(); ++i) copy->inputs.push_back(NodeEntry{multi, i});
      } else {
        const bool lp = out_type == target_;
        Record(n, std::vector<int>(node.num_outputs(), out_type));
        for (const auto& e : ins) {
          Map* map = lp ? &lp16_ : &fp32_;
          const auto it = map->find(g_.entry_id(e));
          copy->inputs.push_back(it != map->end() ? it->second : Cast(e, lp ? target_name_ : "float32", map));
        }
      }
    } else {
      // Any other operator runs in its first input's type; its outputs' types are recorded where known.
      if (!ins.empty()) {
        const std::uint32_t id = g_.entry_id(ins[0]);
        if (lp16_.count(id) != 0 || fp32_.count(id) != 0) {
          Record(n, InferTypes(node, lp16_.count(id) != 0 ? target_ : static_cast<int>(DType::kFloat32)).out);
        }
      }
      for (const auto& e : ins) copy->inputs.push_back(Mirror(e));
    }
  }

  graph::IndexedGraph g_;
  Lists lists_;
  int target_;
  std::string target_name_;
  bool cast_optional_;
  std::set<std::string> data_names_;
  std::vector<std::shared_ptr<Node>> mirror_;  // the new node of each node
  Map lp16_, fp32_;  // entries of the old graph known to be (or cast to) the target type / float32, in the new one
};

}  // namespace

Symbol ConvertSymbol(const Symbol& symbol, const ConvertOptions& options) {
  CheckTarget(options.target_dtype);
  return Converter(symbol, options).Run();
}

}  // namespace troupe::amp
