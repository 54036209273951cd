// Ordering and index-reduction operators of MXNet 1.9 (ordering_op.cc, broadcast_reduce_op_index.cc) on the
// CPU: topk, sort, argsort, argmax, argmin and pick. Each works on the lines of the input along one axis
// (act_norm::AxisView: outer x n x inner); a line is ordered as MXNet's CPU sort orders it, equal values
// included (OrderLine). argmax, argmin and pick share their element code with the GPU (ordering.h,
// ordering.cu); topk, sort and argsort are CPU-only.
//
// Gradients: topk's values and sort's output send the gradient back to the elements they came from; pick
// to the picked element; indices, masks, argmax and argmin pass none.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "op/nn/ordering/ordering.h"

#include "op/internal/op_util.h"
#include "op/param.h"

namespace troupe {

namespace {

using ordering::ArgReduceParam;
using ordering::Lines;
using ordering::PickParam;

const std::vector<std::string> kIndexTypes = {"float16", "float32", "float64", "int32", "int64", "uint8"};

struct OrderingParam : Params<OrderingParam> {
  std::optional<int> axis = -1;
  int k = 1;
  std::string ret_typ = "indices";
  bool is_ascend = false;
  std::string dtype = "float32";
  static void Declare(ParamSchema<OrderingParam>& s) {
    s.Field("axis", &OrderingParam::axis).Default(-1).Describe("Axis along which to order; None: the flattened array.");
    s.Field("k", &OrderingParam::k).Default(1).Describe("Number of top elements to select (topk; 0 or less: all).");
    s.Field("ret_typ", &OrderingParam::ret_typ)
        .Default("indices")
        .Choices({"both", "indices", "mask", "value"})
        .Describe("The return type (topk).");
    s.Field("is_ascend", &OrderingParam::is_ascend).Default(false).Describe("Ascending order (default for topk: descending).");
    s.Field("dtype", &OrderingParam::dtype).Default("float32").Choices(kIndexTypes).Describe("Type of the indices.");
  }
};

enum class Kind { kTopK, kSort, kArgSort, kArgMax, kArgMin, kPick };

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kTopK: return "topk";
    case Kind::kSort: return "sort";
    case Kind::kArgSort: return "argsort";
    case Kind::kArgMax: return "argmax";
    case Kind::kArgMin: return "argmin";
    case Kind::kPick: return "pick";
  }
  return "?";
}

// The shape with the axis removed (or kept as 1); None: (1,) (or all ones with keepdims).
TShape ReducedShape(const TShape& s, std::optional<int> axis, bool keepdims, const std::string& op) {
  std::vector<std::int64_t> o;
  if (!axis.has_value()) {
    if (keepdims) return TShape::Filled(s.ndim(), 1);
    return TShape{1};
  }
  const int a = internal::NormalizeAxis(*axis, s.ndim(), op, "axis");
  for (int d = 0; d < s.ndim(); ++d) {
    if (d != a) o.push_back(s[d]);
    else if (keepdims) o.push_back(1);
  }
  if (o.empty()) o.push_back(1);
  return TShape(o);
}

// Puts the positions of the k first elements of a line of idx->size() in order (ascending or descending
// values) at the front of *idx, exactly as MXNet 1.9's CPU TopKSort does, so that equal values come out in
// its order too: the positions 0..n-1 sorted by value alone (no tie rule), a full std::sort when k * 8 > n,
// else std::partial_sort of the first k. Every ordering operator (topk, sort, argsort) goes through it, as
// MXNet's do.
template <typename At>
void OrderLine(std::vector<std::int64_t>* idx, std::int64_t k, bool ascend, At&& at) {
  std::iota(idx->begin(), idx->end(), 0);
  const std::int64_t n = static_cast<std::int64_t>(idx->size());
  auto less = [&](std::int64_t p, std::int64_t q) { return at(p) < at(q); };
  auto greater = [&](std::int64_t p, std::int64_t q) { return at(p) > at(q); };
  if (k * 8 > n) {
    if (ascend) std::sort(idx->begin(), idx->end(), less); else std::sort(idx->begin(), idx->end(), greater);
  } else {
    if (ascend) {
      std::partial_sort(idx->begin(), idx->begin() + k, idx->end(), less);
    } else {
      std::partial_sort(idx->begin(), idx->begin() + k, idx->end(), greater);
    }
  }
}

template <Kind kKind>
class OrderingOp final : public Operator {
 public:
  OrderingOp(OrderingParam o, ArgReduceParam r, PickParam p) : o_(o), r_(r), p_(p) {}

  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    const std::string op = KindName(kKind);
    internal::NumberSwitch(in[0].dtype, op, [&](auto tag) {
      using T = decltype(tag);
      const T* x = static_cast<const T*>(in[0].dptr);
      const act_norm::AxisView v = Lines(in[0].shape, Axis(), op);
      std::vector<std::int64_t> idx(static_cast<std::size_t>(v.n));
      for (std::int64_t a = 0; a < v.outer; ++a) {
        for (std::int64_t b = 0; b < v.inner; ++b) {
          const std::int64_t base = a * v.n * v.inner + b;
          auto at = [&](std::int64_t j) { return x[base + j * v.inner]; };
          if constexpr (kKind == Kind::kArgMax || kKind == Kind::kArgMin) {
            const std::int64_t best = ordering::ArgExtreme(x, base, v, kKind == Kind::kArgMax);
            Write(out[0], req[0], a * v.inner + b, static_cast<double>(best));
          } else if constexpr (kKind == Kind::kPick) {
            const std::int64_t j = PickIndex(in[1], a * v.inner + b, v.n);
            Write(out[0], req[0], a * v.inner + b, static_cast<double>(at(j)));
          } else {
            const std::int64_t k = K(v.n);
            OrderLine(&idx, k, o_.is_ascend, at);
            if (kKind == Kind::kTopK && o_.ret_typ == "mask") {
              for (std::int64_t j = 0; j < v.n; ++j) Write(out[0], req[0], base + j * v.inner, 0.0);
              for (std::int64_t j = 0; j < k; ++j) Write(out[0], req[0], base + idx[j] * v.inner, 1.0);
              continue;
            }
            // Outputs are laid out as the input with the axis cut to k.
            const std::int64_t obase = a * k * v.inner + b;
            for (std::int64_t j = 0; j < k; ++j) {
              const std::int64_t o = obase + j * v.inner;
              if (kKind == Kind::kArgSort || (kKind == Kind::kTopK && o_.ret_typ == "indices")) {
                Write(out[0], req[0], o, static_cast<double>(idx[j]));
              } else {
                Write(out[0], req[0], o, static_cast<double>(at(idx[j])));
                if (kKind == Kind::kTopK && o_.ret_typ == "both") Write(out[1], req[1], o, static_cast<double>(idx[j]));
              }
            }
          }
        }
      }
    });
  }

  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    const std::string op = KindName(kKind);
    // Integer inputs (pick's index) get no gradient.
    for (std::size_t i = 1; i < in_grad.size(); ++i) Zero(in_grad[i], req[i]);
    if (req[0] == kNullOp) return;
    const bool flows = kKind == Kind::kPick || kKind == Kind::kSort ||
                       (kKind == Kind::kTopK && (o_.ret_typ == "value" || o_.ret_typ == "both"));
    internal::FloatSwitch(in_grad[0].dtype, op, [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t n_in = in_grad[0].Size();
      std::vector<T> g(static_cast<std::size_t>(n_in), T(0));
      if (flows) {
        const T* x = static_cast<const T*>(in[0].dptr);
        const T* og = static_cast<const T*>(out_grad[0].dptr);
        const act_norm::AxisView v = Lines(in[0].shape, Axis(), op);
        std::vector<std::int64_t> idx(static_cast<std::size_t>(v.n));
        for (std::int64_t a = 0; a < v.outer; ++a) {
          for (std::int64_t b = 0; b < v.inner; ++b) {
            const std::int64_t base = a * v.n * v.inner + b;
            if constexpr (kKind == Kind::kPick) {
              const std::int64_t j = PickIndex(in[1], a * v.inner + b, v.n);
              g[static_cast<std::size_t>(base + j * v.inner)] += og[a * v.inner + b];
            } else {
              auto at = [&](std::int64_t j) { return x[base + j * v.inner]; };
              const std::int64_t k = K(v.n);
              OrderLine(&idx, k, o_.is_ascend, at);
              for (std::int64_t j = 0; j < k; ++j) {
                g[static_cast<std::size_t>(base + idx[j] * v.inner)] += og[a * k * v.inner + b + j * v.inner];
              }
            }
          }
        }
      }
      internal::AssignEach(static_cast<T*>(in_grad[0].dptr), n_in, req[0],
                           [&](std::int64_t i) { return g[static_cast<std::size_t>(i)]; });
    });
  }

 private:
  std::optional<int> Axis() const {
    if constexpr (kKind == Kind::kArgMax || kKind == Kind::kArgMin) return r_.axis;
    if constexpr (kKind == Kind::kPick) return p_.axis;
    return o_.axis;
  }
  std::int64_t K(std::int64_t n) const {
    if (kKind != Kind::kTopK) return n;
    return o_.k <= 0 || o_.k > n ? n : o_.k;
  }
  std::int64_t PickIndex(const TBlob& index, std::int64_t i, std::int64_t n) const {
    double v = 0;
    internal::NumberSwitch(index.dtype, "pick", [&](auto t) {
      using I = decltype(t);
      v = static_cast<double>(static_cast<const I*>(index.dptr)[i]);
    });
    return ordering::PickPosition(v, n, p_.mode == "wrap");
  }
  static void Write(const TBlob& out, OpReqType req, std::int64_t i, double v) {
    if (req == kNullOp) return;
    DTypeSwitch(out.dtype, [&](auto t) {
      using O = decltype(t);
      ordering::WriteConverted(static_cast<O*>(out.dptr) + i, req, v);
    });
  }
  static void Zero(const TBlob& b, OpReqType req) {
    if (req != kWriteTo && req != kWriteInplace) return;
    for (std::int64_t i = 0; i < b.Size(); ++i) Write(b, kWriteTo, i, 0.0);
  }

  OrderingParam o_;
  ArgReduceParam r_;
  PickParam p_;
};

template <Kind kKind>
class OrderingProp final : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override {
    const std::string op = TypeString();
    if constexpr (kKind == Kind::kArgMax || kKind == Kind::kArgMin) {
      r_.Init(kwargs, op);
    } else if constexpr (kKind == Kind::kPick) {
      p_.Init(kwargs, op);
    } else {
      // sort and argsort take a subset of topk's parameters, with ascending order by default.
      Kwargs kw = kwargs;
      if (kKind != Kind::kTopK) {
        for (const auto& [key, value] : kw) {
          if (key == "k" || key == "ret_typ" || (kKind == Kind::kSort && key == "dtype")) {
            throw Error(op + ": unknown parameter '" + key + "'");
          }
        }
        bool has_ascend = false;
        for (const auto& kv : kw) has_ascend = has_ascend || kv.first == "is_ascend";
        if (!has_ascend) kw.emplace_back("is_ascend", "True");
      }
      o_.Init(kw, op);
    }
  }
  Kwargs GetParams() const override {
    if constexpr (kKind == Kind::kArgMax || kKind == Kind::kArgMin) return r_.GetParams();
    if constexpr (kKind == Kind::kPick) return p_.GetParams();
    Kwargs all = o_.GetParams();
    if (kKind == Kind::kTopK) return all;
    std::erase_if(all, [](const auto& kv) {
      return kv.first == "k" || kv.first == "ret_typ" || (kKind == Kind::kSort && kv.first == "dtype");
    });
    return all;
  }
  std::vector<std::string> ListArguments() const override {
    if constexpr (kKind == Kind::kPick) return {"data", "index"};
    return {"data"};
  }
  std::vector<std::string> ListOutputs() const override {
    if (kKind == Kind::kTopK && o_.ret_typ == "both") return {"output0", "output1"};
    return {"output"};
  }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    aux->clear();
    out->resize(ListOutputs().size());
    const std::string op = TypeString();
    const TShape& x = (*in)[0];
    if (!x.known()) return false;
    if constexpr (kKind == Kind::kArgMax || kKind == Kind::kArgMin) {
      AssignShape(out, 0, ReducedShape(x, r_.axis, r_.keepdims, op), op, "output");
    } else if constexpr (kKind == Kind::kPick) {
      const TShape o = ReducedShape(x, p_.axis, p_.keepdims, op);
      AssignShape(in, 1, ReducedShape(x, p_.axis, false, op), op, "index");
      AssignShape(out, 0, o, op, "output");
    } else {
      TShape o = o_.axis.has_value() ? x : TShape{x.Size()};
      if (kKind == Kind::kTopK && o_.ret_typ != "mask") {
        const act_norm::AxisView v = Lines(x, o_.axis, op);
        const std::int64_t k = o_.k <= 0 || o_.k > v.n ? v.n : o_.k;
        if (o_.axis.has_value()) o[internal::NormalizeAxis(*o_.axis, x.ndim(), op, "axis")] = k;
        else o = TShape{k};
      }
      if (kKind == Kind::kTopK && o_.ret_typ == "mask") o = x;
      for (std::size_t i = 0; i < out->size(); ++i) AssignShape(out, i, o, op, "output");
    }
    return true;
  }
  bool InferType(std::vector<int>* in, std::vector<int>* out, std::vector<int>* aux) const override {
    aux->clear();
    const int t = (*in)[0];
    const int index_type = static_cast<int>(DTypeFromName(o_.dtype));
    if constexpr (kKind == Kind::kTopK) {
      if (o_.ret_typ == "both") *out = {t, index_type};
      else if (o_.ret_typ == "indices") *out = {index_type};
      else *out = {t};
    } else if constexpr (kKind == Kind::kArgSort) {
      *out = {index_type};
    } else {
      *out = {t};
    }
    return t != kTypeUnknown && (kKind != Kind::kPick || (*in)[1] != kTypeUnknown);
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<OrderingProp>(*this); }
  std::string TypeString() const override { return KindName(kKind); }
  int NumVisibleOutputs() const override { return static_cast<int>(ListOutputs().size()); }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>&) const override {
    std::vector<int> d(out_grad.begin(), out_grad.end());
    d.insert(d.end(), in_data.begin(), in_data.end());
    return d;
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) {
      // ordering.cu: argmax, argmin and pick; topk, sort and argsort have no GPU code (an error naming them).
      return CreateGpuOperator(*this, ctx);
    }
    return std::make_unique<OrderingOp<kKind>>(o_, r_, p_);
  }

 private:
  OrderingParam o_;
  ArgReduceParam r_;
  PickParam p_;
};

}  // namespace

TROUPE_REGISTER_OP_PROPERTY(topk, OrderingProp<Kind::kTopK>)
    .describe("The top k elements along an axis: their values, indices, both, or a mask.")
    .add_argument("data", "NDArray-or-Symbol", "The input array")
    .add_arguments(OrderingParam::Docs());
TROUPE_REGISTER_OP_PROPERTY(sort, OrderingProp<Kind::kSort>)
    .describe("Sorts the elements along an axis (ascending by default).")
    .add_argument("data", "NDArray-or-Symbol", "The input array");
TROUPE_REGISTER_OP_PROPERTY(argsort, OrderingProp<Kind::kArgSort>)
    .describe("The indices that sort the elements along an axis (ascending by default).")
    .add_argument("data", "NDArray-or-Symbol", "The input array");
TROUPE_REGISTER_OP_PROPERTY(argmax, OrderingProp<Kind::kArgMax>)
    .describe("The index of the largest element along an axis (the first of equal ones).")
    .add_argument("data", "NDArray-or-Symbol", "The input")
    .add_arguments(ArgReduceParam::Docs());
TROUPE_REGISTER_OP_PROPERTY(argmin, OrderingProp<Kind::kArgMin>)
    .describe("The index of the smallest element along an axis (the first of equal ones).")
    .add_argument("data", "NDArray-or-Symbol", "The input")
    .add_arguments(ArgReduceParam::Docs());
TROUPE_REGISTER_OP_PROPERTY(pick, OrderingProp<Kind::kPick>)
    .describe("Picks one element per line along an axis, at the positions of `index`.")
    .add_argument("data", "NDArray-or-Symbol", "The input array")
    .add_argument("index", "NDArray-or-Symbol", "The index array")
    .add_arguments(PickParam::Docs());

}  // namespace troupe
