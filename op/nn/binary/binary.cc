// The element-wise binary operators of binary.h on the CPU (equal-shape and broadcasting forms), the
// broadcasts of one array (broadcast_to, broadcast_axis, broadcast_like), where and add_n. Every kernel
// here walks the output with tensor_ops::BroadcastIndexer (op/nn/common/broadcast.h); a gradient of a
// broadcast operand is the output-shaped term summed over the dimensions it was broadcast along
// (tensor_ops::SumToSmall, as broadcast_add's). binary.cu is the GPU side of every operator here.
#include "op/nn/binary/binary.h"

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "op/internal/op_util.h"
#include "op/nn/common/broadcast.h"
#include "op/simple_op.h"

namespace troupe {

namespace {

using binary::BinaryMath;

BinaryFunction MathForward(BinaryMath op, std::string name) {
  return [op, name](const TBlob& lhs, const TBlob& rhs, const EnvArguments&, TBlob* ret, OpReqType req,
                    RunContext) {
    if (req == kNullOp) return;
    const auto li = tensor_ops::MakeBroadcastIndexer(ret->shape, lhs.shape);
    const auto ri = tensor_ops::MakeBroadcastIndexer(ret->shape, rhs.shape);
    internal::NumberSwitch(ret->dtype, name, [&](auto tag) {
      using T = decltype(tag);
      const T* a = static_cast<const T*>(lhs.dptr);
      const T* b = static_cast<const T*>(rhs.dptr);
      T* o = static_cast<T*>(ret->dptr);
      for (std::int64_t i = 0; i < ret->Size(); ++i) {
        Assign(o + i, req, binary::Apply(op, a[li.SmallOffset(i)], b[ri.SmallOffset(i)]));
      }
    });
  };
}

BinaryGradT1 MathBackward(BinaryMath op, std::string name) {
  return [op, name](const OutputGrad& out_grad, const Input0& lhs, const Input1& rhs, const EnvArguments&,
                    TBlob* lhs_grad, TBlob* rhs_grad, OpReqType req_l, OpReqType req_r, RunContext) {
    const TBlob& og = out_grad.data;
    const auto li = tensor_ops::MakeBroadcastIndexer(og.shape, lhs.data.shape);
    const auto ri = tensor_ops::MakeBroadcastIndexer(og.shape, rhs.data.shape);
    internal::FloatSwitch(og.dtype, name, [&](auto tag) {
      using T = decltype(tag);
      const T* g = static_cast<const T*>(og.dptr);
      const T* a = static_cast<const T*>(lhs.data.dptr);
      const T* b = static_cast<const T*>(rhs.data.dptr);
      auto grads = [&](std::int64_t i, bool want_lhs) {
        T ga, gb;
        binary::Gradients(op, g[i], a[li.SmallOffset(i)], b[ri.SmallOffset(i)], &ga, &gb);
        return want_lhs ? ga : gb;
      };
      tensor_ops::SumToSmall(static_cast<T*>(lhs_grad->dptr), li, req_l, [&](std::int64_t i) { return grads(i, true); });
      tensor_ops::SumToSmall(static_cast<T*>(rhs_grad->dptr), ri, req_r, [&](std::int64_t i) { return grads(i, false); });
    });
  };
}

[[maybe_unused]] const bool kBinaryRegistered = [] {
  for (const binary::MathDef& d : binary::kMathDefs) {
    for (const bool broadcasting : {false, true}) {
      const std::string name = broadcasting ? d.broadcast : d.elemwise;
      SimpleOpEntry& e = SimpleOpRegister(name);
      e.set_function(DeviceType::kCPU, MathForward(d.op, name));
      e.set_gradient(DeviceType::kCPU, MathBackward(d.op, name));
      if (broadcasting) {
        e.set_shape_function([name](const TShape& l, const TShape& r, const EnvArguments&) {
          return tensor_ops::BroadcastShape(l, r, name);
        });
      }
      e.describe(std::string(d.text) + (broadcasting ? " With broadcasting." : " Equal shapes."));
    }
  }
  return true;
}();

// ---- broadcast_to / broadcast_axis / broadcast_like ----

struct BroadcastToParam : Params<BroadcastToParam> {
  std::vector<std::int64_t> shape;
  static void Declare(ParamSchema<BroadcastToParam>& s) {
    s.Field("shape", &BroadcastToParam::shape)
        .Default({})
        .Describe("The shape of the desired array; 0 keeps the input's dimension.");
  }
};
struct BroadcastAxisParam : Params<BroadcastAxisParam> {
  std::vector<std::int64_t> axis;
  std::vector<std::int64_t> size;
  static void Declare(ParamSchema<BroadcastAxisParam>& s) {
    s.Field("axis", &BroadcastAxisParam::axis).Default({}).Describe("The axes to perform the broadcasting.");
    s.Field("size", &BroadcastAxisParam::size).Default({}).Describe("Target sizes of the broadcasting axes.");
  }
};
struct BroadcastLikeParam : Params<BroadcastLikeParam> {
  std::optional<std::vector<std::int64_t>> lhs_axes;
  std::optional<std::vector<std::int64_t>> rhs_axes;
  static void Declare(ParamSchema<BroadcastLikeParam>& s) {
    s.Field("lhs_axes", &BroadcastLikeParam::lhs_axes).Default(std::nullopt).Describe("Axes to perform broadcast on in the first input array");
    s.Field("rhs_axes", &BroadcastLikeParam::rhs_axes).Default(std::nullopt).Describe("Axes to copy from the second input array");
  }
};

enum class BroadcastKind { kTo, kAxis, kLike };

// out[i] = x[small offset of i]; the gradient sums back.
class BroadcastOneOp final : public Operator {
 public:
  explicit BroadcastOneOp(std::string name) : name_(std::move(name)) {}
  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const auto ix = tensor_ops::MakeBroadcastIndexer(out[0].shape, in[0].shape);
    internal::NumberSwitch(out[0].dtype, name_, [&](auto tag) {
      using T = decltype(tag);
      const T* x = static_cast<const T*>(in[0].dptr);
      T* o = static_cast<T*>(out[0].dptr);
      for (std::int64_t i = 0; i < ix.big_size; ++i) Assign(o + i, req[0], x[ix.SmallOffset(i)]);
    });
  }
  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    const auto ix = tensor_ops::MakeBroadcastIndexer(out_grad[0].shape, in_grad[0].shape);
    internal::FloatSwitch(in_grad[0].dtype, name_, [&](auto tag) {
      using T = decltype(tag);
      const T* g = static_cast<const T*>(out_grad[0].dptr);
      tensor_ops::SumToSmall(static_cast<T*>(in_grad[0].dptr), ix, req[0], [&](std::int64_t i) { return g[i]; });
      // broadcast_like's second input only lends its shape: its gradient is zero.
      for (std::size_t k = 1; k < in_grad.size(); ++k) {
        T* z = static_cast<T*>(in_grad[k].dptr);
        if (req[k] == kWriteTo || req[k] == kWriteInplace) std::fill(z, z + in_grad[k].Size(), T(0));
      }
    });
  }

 private:
  std::string name_;
};

template <BroadcastKind kKind>
class BroadcastOneProp final : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override {
    if constexpr (kKind == BroadcastKind::kTo) to_.Init(kwargs, TypeString());
    if constexpr (kKind == BroadcastKind::kAxis) axis_.Init(kwargs, TypeString());
    if constexpr (kKind == BroadcastKind::kLike) like_.Init(kwargs, TypeString());
  }
  Kwargs GetParams() const override {
    if constexpr (kKind == BroadcastKind::kTo) return to_.GetParams();
    if constexpr (kKind == BroadcastKind::kAxis) return axis_.GetParams();
    return like_.GetParams();
  }
  std::vector<std::string> ListArguments() const override {
    if constexpr (kKind == BroadcastKind::kLike) return {"lhs", "rhs"};
    return {"data"};
  }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    aux->clear();
    out->resize(1);
    const std::string op = TypeString();
    const TShape& x = (*in)[0];
    if (!x.known()) return false;
    TShape o = x;
    if constexpr (kKind == BroadcastKind::kTo) {
      if (static_cast<int>(to_.shape.size()) != x.ndim()) {
        throw Error(op + ": parameter 'shape' " + param_detail::PrintTuple(to_.shape) + " must have as many "
                    "dimensions as the input " + x.ToString());
      }
      for (int d = 0; d < x.ndim(); ++d) {
        const std::int64_t t = to_.shape[static_cast<std::size_t>(d)];
        if (t == 0) continue;
        if (x[d] != 1 && x[d] != t) {
          throw Error(op + ": cannot broadcast " + x.ToString() + " to " + param_detail::PrintTuple(to_.shape) +
                      ": dimension " + std::to_string(d) + " is " + std::to_string(x[d]) + ", not 1");
        }
        o[d] = t;
      }
    } else if constexpr (kKind == BroadcastKind::kAxis) {
      if (axis_.axis.size() != axis_.size.size()) {
        throw Error(op + ": parameters 'axis' and 'size' must have the same length");
      }
      for (std::size_t k = 0; k < axis_.axis.size(); ++k) {
        const int d = internal::NormalizeAxis(static_cast<int>(axis_.axis[k]), x.ndim(), op, "axis");
        if (x[d] != 1) {
          throw Error(op + ": axis " + std::to_string(d) + " of " + x.ToString() + " has size " +
                      std::to_string(x[d]) + "; only a dimension of size 1 can be broadcast");
        }
        o[d] = axis_.size[k];
      }
    } else {
      const TShape& r = (*in)[1];
      if (!r.known()) return false;
      if (!like_.lhs_axes.has_value() || like_.lhs_axes->empty()) {
        o = tensor_ops::BroadcastShape(x, r, op);
        if (o != r) throw Error(op + ": cannot broadcast " + x.ToString() + " like " + r.ToString());
      } else {
        const auto& la = *like_.lhs_axes;
        const auto& ra = like_.rhs_axes.value_or(std::vector<std::int64_t>{});
        if (la.size() != ra.size()) throw Error(op + ": lhs_axes and rhs_axes must have the same length");
        for (std::size_t k = 0; k < la.size(); ++k) {
          const int dl = internal::NormalizeAxis(static_cast<int>(la[k]), x.ndim(), op, "lhs_axes");
          const int dr = internal::NormalizeAxis(static_cast<int>(ra[k]), r.ndim(), op, "rhs_axes");
          if (x[dl] != 1 && x[dl] != r[dr]) throw Error(op + ": cannot broadcast " + x.ToString() + " like " + r.ToString());
          o[dl] = r[dr];
        }
      }
    }
    AssignShape(out, 0, o, op, "output");
    return true;
  }
  bool InferType(std::vector<int>* in, std::vector<int>* out, std::vector<int>* aux) const override {
    aux->clear();
    out->assign(1, (*in)[0]);
    return (*in)[0] != kTypeUnknown;  // broadcast_like's rhs may have any type
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<BroadcastOneProp>(*this); }
  std::string TypeString() const override {
    if constexpr (kKind == BroadcastKind::kTo) return "broadcast_to";
    if constexpr (kKind == BroadcastKind::kAxis) return "broadcast_axis";
    return "broadcast_like";
  }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>&,
                                             const std::vector<int>&) const override {
    return {out_grad[0]};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // binary.cu
    return std::make_unique<BroadcastOneOp>(TypeString());
  }

 private:
  BroadcastToParam to_;
  BroadcastAxisParam axis_;
  BroadcastLikeParam like_;
};
using BroadcastToProp = BroadcastOneProp<BroadcastKind::kTo>;
using BroadcastAxisProp = BroadcastOneProp<BroadcastKind::kAxis>;
using BroadcastLikeProp = BroadcastOneProp<BroadcastKind::kLike>;

// ---- where ----

// where(condition, x, y): x where condition is non-zero, y elsewhere. condition has x's shape, or is 1-D
// with x's first dimension (it then picks whole rows).
class WhereOp final : public Operator {
 public:
  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const std::int64_t n = out[0].Size();
    const std::int64_t row = RowSize(in[0], in[1]);
    internal::NumberSwitch(in[0].dtype, "where", [&](auto ctag) {
      using C = decltype(ctag);
      const C* c = static_cast<const C*>(in[0].dptr);
      internal::NumberSwitch(out[0].dtype, "where", [&](auto tag) {
        using T = decltype(tag);
        const T* x = static_cast<const T*>(in[1].dptr);
        const T* y = static_cast<const T*>(in[2].dptr);
        T* o = static_cast<T*>(out[0].dptr);
        for (std::int64_t i = 0; i < n; ++i) Assign(o + i, req[0], c[i / row] != C(0) ? x[i] : y[i]);
      });
    });
  }
  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    const std::int64_t n = out_grad[0].Size();
    const std::int64_t row = RowSize(in[0], out_grad[0]);
    internal::NumberSwitch(in[0].dtype, "where", [&](auto ctag) {
      using C = decltype(ctag);
      const C* c = static_cast<const C*>(in[0].dptr);
      internal::FloatSwitch(out_grad[0].dtype, "where", [&](auto tag) {
        using T = decltype(tag);
        const T* g = static_cast<const T*>(out_grad[0].dptr);
        internal::AssignEach(static_cast<T*>(in_grad[1].dptr), n, req[1],
                             [&](std::int64_t i) { return c[i / row] != C(0) ? g[i] : T(0); });
        internal::AssignEach(static_cast<T*>(in_grad[2].dptr), n, req[2],
                             [&](std::int64_t i) { return c[i / row] != C(0) ? T(0) : g[i]; });
      });
      if (req[0] == kWriteTo || req[0] == kWriteInplace) {
        std::fill(static_cast<C*>(in_grad[0].dptr), static_cast<C*>(in_grad[0].dptr) + in_grad[0].Size(), C(0));
      }
    });
  }

 private:
  static std::int64_t RowSize(const TBlob& cond, const TBlob& x) { return binary::WhereRowSize(cond.Size(), x.Size()); }
};

class WhereProp final : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override {
    if (!kwargs.empty()) throw Error("where: unknown parameter '" + kwargs.front().first + "' (it takes none)");
  }
  Kwargs GetParams() const override { return {}; }
  std::vector<std::string> ListArguments() const override { return {"condition", "x", "y"}; }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    aux->clear();
    out->resize(1);
    AssignShape(in, 2, (*in)[1], "where", "y");
    AssignShape(in, 1, (*in)[2], "where", "x");
    const TShape& x = (*in)[1];
    const TShape& c = (*in)[0];
    if (!x.known() || !c.known()) return false;
    if (c != x && !(c.ndim() == 1 && x.ndim() >= 1 && c[0] == x[0])) {
      throw Error("where: condition has shape " + c.ToString() + "; it must be x's shape " + x.ToString() +
                  " or (" + std::to_string(x.ndim() >= 1 ? x[0] : 0) + ",)");
    }
    AssignShape(out, 0, x, "where", "output");
    return true;
  }
  bool InferType(std::vector<int>* in, std::vector<int>* out, std::vector<int>* aux) const override {
    aux->clear();
    AssignType(in, 2, (*in)[1], "where", "y");
    AssignType(in, 1, (*in)[2], "where", "x");
    out->assign(1, (*in)[1]);
    return (*in)[0] != kTypeUnknown && (*in)[1] != kTypeUnknown;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<WhereProp>(*this); }
  std::string TypeString() const override { return "where"; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>&) const override {
    return {out_grad[0], in_data[0]};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // binary.cu
    return std::make_unique<WhereOp>();
  }
};

// ---- add_n ----

struct AddNParam : Params<AddNParam> {
  int num_args = 0;
  static void Declare(ParamSchema<AddNParam>& s) {
    s.Field("num_args", &AddNParam::num_args).LowerBound(1).Describe("Number of inputs to be summed.");
  }
};

class AddNOp final : public Operator {
 public:
  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    internal::NumberSwitch(out[0].dtype, "add_n", [&](auto tag) {
      using T = decltype(tag);
      T* o = static_cast<T*>(out[0].dptr);
      const std::int64_t n = out[0].Size();
      internal::AssignEach(o, n, req[0], [&](std::int64_t i) {
        T s = static_cast<const T*>(in[0].dptr)[i];
        for (std::size_t k = 1; k < in.size(); ++k) s = static_cast<T>(s + static_cast<const T*>(in[k].dptr)[i]);
        return s;
      });
    });
  }
  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    internal::FloatSwitch(out_grad[0].dtype, "add_n", [&](auto tag) {
      using T = decltype(tag);
      const T* g = static_cast<const T*>(out_grad[0].dptr);
      for (std::size_t k = 0; k < in_grad.size(); ++k) {
        internal::AssignEach(static_cast<T*>(in_grad[k].dptr), in_grad[k].Size(), req[k],
                             [&](std::int64_t i) { return g[i]; });
      }
    });
  }
};

class AddNProp final : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override { p_.Init(kwargs, "add_n"); }
  Kwargs GetParams() const override { return p_.GetParams(); }
  std::vector<std::string> ListArguments() const override {
    std::vector<std::string> args;
    for (int i = 0; i < p_.num_args; ++i) args.push_back("arg" + std::to_string(i));
    return args;
  }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    aux->clear();
    out->resize(1);
    const auto args = ListArguments();
    if (in->size() != args.size()) {
      throw Error("add_n: num_args is " + std::to_string(args.size()) + " but " + std::to_string(in->size()) +
                  " inputs were given");
    }
    for (std::size_t k = 0; k < in->size(); ++k) {
      if ((*in)[k].known()) AssignShape(out, 0, (*in)[k], "add_n", "output");
    }
    for (std::size_t k = 0; k < in->size(); ++k) AssignShape(in, k, (*out)[0], "add_n", args[k]);
    return (*out)[0].known();
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<AddNProp>(*this); }
  std::string TypeString() const override { return "add_n"; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>&,
                                             const std::vector<int>&) const override {
    return {out_grad[0]};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // binary.cu
    return std::make_unique<AddNOp>();
  }

 private:
  AddNParam p_;
};

}  // namespace

TROUPE_REGISTER_OP_PROPERTY(broadcast_to, BroadcastToProp)
    .describe("Broadcasts the input array to a new shape (dimensions of size 1 repeat; 0 keeps one).")
    .add_argument("data", "NDArray-or-Symbol", "The input")
    .add_arguments(BroadcastToParam::Docs());
TROUPE_REGISTER_OP_PROPERTY(broadcast_axis, BroadcastAxisProp)
    .add_alias("broadcast_axes")
    .describe("Broadcasts the input array over particular axes (each of size 1).")
    .add_argument("data", "NDArray-or-Symbol", "The input")
    .add_arguments(BroadcastAxisParam::Docs());
TROUPE_REGISTER_OP_PROPERTY(broadcast_like, BroadcastLikeProp)
    .describe("Broadcasts lhs to the shape of rhs (or only lhs_axes to rhs's rhs_axes).")
    .add_argument("lhs", "NDArray-or-Symbol", "First input.")
    .add_argument("rhs", "NDArray-or-Symbol", "Second input.")
    .add_arguments(BroadcastLikeParam::Docs());
TROUPE_REGISTER_OP_PROPERTY(where, WhereProp)
    .describe("Elements of x where condition is non-zero, of y elsewhere.")
    .add_argument("condition", "NDArray-or-Symbol", "condition array")
    .add_argument("x", "NDArray-or-Symbol", "")
    .add_argument("y", "NDArray-or-Symbol", "");
TROUPE_REGISTER_OP_PROPERTY(add_n, AddNProp)
    .add_alias("ElementWiseSum")
    .describe("Adds all input arguments element-wise.")
    .add_argument("args", "NDArray-or-Symbol[]", "Positional input arguments")
    .add_arguments(AddNParam::Docs());

}  // namespace troupe
