// The element-wise unary operators on the CPU (the formulas and the table of MXNet 1.9's names and aliases are
// in unary.h, which unary.cu runs on the GPU): SimpleOps, and the two that take parameters, clip and Cast.
#include "op/nn/unary/unary.h"

#include <cstdint>
#include <string>
#include <type_traits>

#include "op/internal/op_util.h"
#include "op/simple_op.h"
#include "tensor/detail/elementwise.h"
#include "tensor/detail/vector_math.h"

namespace troupe {

namespace {

using unary::UnaryOp;

void CheckSizes(const std::string& op, const TBlob& a, const TBlob& b) {
  if (a.Size() != b.Size()) {
    throw Error(op + ": the output has shape " + b.shape.ToString() + " but the input " + a.shape.ToString());
  }
}

// Writes op(x) through tensor/detail/vector_math.h when it has `op` in float32; false when it does not. Direct
// calls, not function pointers: the vector functions are GCC target_clones (IFUNCs), and taking their address
// makes the dynamic loader run their resolvers while it relocates this library, before a sanitizer's runtime
// is up (ThreadSanitizer builds crashed there).
bool VectorForward(UnaryOp op, const float* x, float* y, std::int64_t n) {
  switch (op) {
    case UnaryOp::kExp: internal::VecExp(x, y, n); return true;
    case UnaryOp::kLog: internal::VecLog(x, y, n); return true;
    case UnaryOp::kTanh: internal::VecTanh(x, y, n); return true;
    case UnaryOp::kSigmoid: internal::VecSigmoid(x, y, n); return true;
    case UnaryOp::kErf: internal::VecErf(x, y, n); return true;
    default: return false;
  }
}

UnaryFunction ForwardFn(UnaryOp op, std::string name) {
  return [op, name](const TBlob& src, const EnvArguments&, TBlob* ret, OpReqType req, RunContext) {
    if (req == kNullOp) return;
    CheckSizes(name, src, *ret);
    auto run = [&](auto tag) {
      using T = decltype(tag);
      const T* x = static_cast<const T*>(src.dptr);
      if constexpr (std::is_same_v<T, float>) {
        // The vectorised polynomials where there is one (a scalar libm call is 7-70x slower).
        if ((req == kWriteTo || req == kWriteInplace) && VectorForward(op, x, static_cast<float*>(ret->dptr), ret->Size())) {
          return;
        }
      }
      internal::AssignEach(static_cast<T*>(ret->dptr), ret->Size(), req,
                           [&](std::int64_t i) { return unary::Forward(op, x[i]); });
    };
    if (unary::AnyType(op)) {
      internal::NumberSwitch(ret->dtype, name, run);
    } else {
      internal::FloatSwitch(ret->dtype, name, run);
    }
  };
}

UnaryGradT2 GradientFn(UnaryOp op, std::string name) {
  return [op, name](const OutputGrad& out_grad, const Input0& in, const EnvArguments&, TBlob* in_grad,
                    OpReqType req, RunContext) {
    if (req == kNullOp) return;
    internal::FloatSwitch(in_grad->dtype, name, [&](auto tag) {
      using T = decltype(tag);
      const T* og = static_cast<const T*>(out_grad.data.dptr);
      const T* x = static_cast<const T*>(in.data.dptr);
      internal::AssignEach(static_cast<T*>(in_grad->dptr), in_grad->Size(), req,
                           [&](std::int64_t i) { return unary::Gradient(op, og[i], x[i]); });
    });
  };
}

[[maybe_unused]] const bool kUnaryRegistered = [] {
  for (const unary::UnaryDef& d : unary::kUnaryDefs) {
    SimpleOpEntry& e = SimpleOpRegister(d.name);
    // Not in place: the gradient reads the input.
    e.set_function(DeviceType::kCPU, ForwardFn(d.op, d.name));
    e.set_gradient(DeviceType::kCPU, GradientFn(d.op, d.name));
    e.describe(d.text);
    for (const char* a : d.aliases) {
      if (a != nullptr) e.add_alias(a);
    }
    // MXNet 1.9's zeros_like and ones_like have no parameter parser: attributes such as dtype (GluonCV's
    // CenterNet writes dtype='int64') are kept in the file and ignored; the output has the input's type.
    if (d.op == UnaryOp::kZerosLike || d.op == UnaryOp::kOnesLike) e.set_enable_kwargs(true);
  }
  return true;
}();

// ---- clip ----

class ClipOp final : public Operator {
 public:
  explicit ClipOp(ClipParam p) : p_(p) {}
  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    internal::NumberSwitch(out[0].dtype, "clip", [&](auto tag) {
      using T = decltype(tag);
      const T lo = static_cast<T>(p_.a_min), hi = static_cast<T>(p_.a_max);
      const T* x = static_cast<const T*>(in[0].dptr);
      internal::AssignEach(static_cast<T*>(out[0].dptr), out[0].Size(), req[0],
                           [&](std::int64_t i) { return unary::Clip(x[i], lo, hi); });
    });
  }
  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    internal::FloatSwitch(in_grad[0].dtype, "clip", [&](auto tag) {
      using T = decltype(tag);
      const T lo = static_cast<T>(p_.a_min), hi = static_cast<T>(p_.a_max);
      const T* og = static_cast<const T*>(out_grad[0].dptr);
      const T* x = static_cast<const T*>(in[0].dptr);
      internal::AssignEach(static_cast<T*>(in_grad[0].dptr), in_grad[0].Size(), req[0],
                           [&](std::int64_t i) { return unary::ClipGradient(og[i], x[i], lo, hi); });
    });
  }

 private:
  ClipParam p_;
};

class ClipProp final : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override { p_.Init(kwargs, "clip"); }
  Kwargs GetParams() const override { return p_.GetParams(); }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    aux->clear();
    out->resize(1);
    AssignShape(out, 0, (*in)[0], "clip", "output");
    AssignShape(in, 0, (*out)[0], "clip", "data");
    return (*out)[0].known();
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<ClipProp>(*this); }
  std::string TypeString() const override { return "clip"; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>&) const override {
    return {out_grad[0], in_data[0]};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // unary.cu
    return std::make_unique<ClipOp>(p_);
  }

 private:
  ClipParam p_;
};

// ---- Cast ----

// Output i is input i converted to output i's type; gradient i, output gradient i converted back (Cast,
// amp_cast and amp_multicast).
class CastOp final : public Operator {
 public:
  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    for (std::size_t i = 0; i < in.size(); ++i) Convert(in[i], out[i], req[i]);
  }
  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    for (std::size_t i = 0; i < in_grad.size(); ++i) Convert(out_grad[i], in_grad[i], req[i]);
  }

 private:
  static void Convert(const TBlob& from, const TBlob& to, OpReqType req) {
    if (req == kNullOp) return;
    // AMP's casts of every weight and gradient between float32 and bfloat16: the vector conversions.
    if (req != kAddTo && from.dtype == DType::kFloat32 && to.dtype == DType::kBfloat16) {
      return internal::VecFloatToBf16(static_cast<const float*>(from.dptr), static_cast<std::uint16_t*>(to.dptr),
                                      to.Size());
    }
    if (req != kAddTo && from.dtype == DType::kBfloat16 && to.dtype == DType::kFloat32) {
      return internal::VecBf16ToFloat(static_cast<const std::uint16_t*>(from.dptr), static_cast<float*>(to.dptr),
                                      to.Size());
    }
    DTypeSwitch(to.dtype, [&](auto out_tag) {
      using O = decltype(out_tag);
      DTypeSwitch(from.dtype, [&](auto in_tag) {
        using I = decltype(in_tag);
        const I* x = static_cast<const I*>(from.dptr);
        O* o = static_cast<O*>(to.dptr);
        const std::int64_t n = to.Size();
        if (req == kAddTo) {
          for (std::int64_t i = 0; i < n; ++i) o[i] = internal::ConvertTo<O>(internal::ConvertTo<double>(o[i]) +
                                                                            internal::ConvertTo<double>(x[i]));
        } else {
          for (std::int64_t i = 0; i < n; ++i) o[i] = internal::ConvertTo<O>(x[i]);
        }
      });
    });
  }
};

// What Cast, amp_cast and amp_multicast share: input i converted into output i of the same shape (CastOp),
// the gradient converted back from the output gradient alone. Subclasses say the parameters and the types.
class CastFamilyProp : public OperatorProperty {
 public:
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    const std::vector<std::string> args = ListArguments();
    aux->clear();
    in->resize(args.size());
    out->resize(args.size());
    bool known = true;
    for (std::size_t i = 0; i < args.size(); ++i) {
      AssignShape(out, i, (*in)[i], TypeString(), "output");
      AssignShape(in, i, (*out)[i], TypeString(), args[i]);
      known = known && (*out)[i].known();
    }
    return known;
  }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>&,
                                             const std::vector<int>&) const override {
    return out_grad;
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // unary.cu
    return std::make_unique<CastOp>();
  }
};

class CastProp final : public CastFamilyProp {
 public:
  void Init(const Kwargs& kwargs) override { p_.Init(kwargs, "Cast"); }
  Kwargs GetParams() const override { return p_.GetParams(); }
  bool InferType(std::vector<int>* in_type, std::vector<int>* out_type, std::vector<int>* aux) const override {
    aux->clear();
    out_type->assign(1, static_cast<int>(DTypeFromName(p_.dtype)));
    return in_type->size() == 1 && (*in_type)[0] != kTypeUnknown;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<CastProp>(*this); }
  std::string TypeString() const override { return "Cast"; }

 private:
  CastParam p_;
};

bool IsAmpFloat(int t) {
  return t == static_cast<int>(DType::kFloat32) || t == static_cast<int>(DType::kFloat16) ||
         t == static_cast<int>(DType::kBfloat16);
}

class AmpCastProp final : public CastFamilyProp {
 public:
  void Init(const Kwargs& kwargs) override { p_.Init(kwargs, "amp_cast"); }
  Kwargs GetParams() const override { return p_.GetParams(); }
  bool InferType(std::vector<int>* in_type, std::vector<int>* out_type, std::vector<int>* aux) const override {
    aux->clear();
    in_type->resize(1, kTypeUnknown);
    out_type->resize(1, kTypeUnknown);
    const int t = (*in_type)[0];
    if (t == kTypeUnknown) return false;
    AssignType(out_type, 0, IsAmpFloat(t) ? static_cast<int>(DTypeFromName(p_.dtype)) : t, "amp_cast", "output");
    return true;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<AmpCastProp>(*this); }
  std::string TypeString() const override { return "amp_cast"; }

 private:
  AmpCastParam p_;
};

class AmpMultiCastProp final : public CastFamilyProp {
 public:
  void Init(const Kwargs& kwargs) override { p_.Init(kwargs, "amp_multicast"); }
  Kwargs GetParams() const override { return p_.GetParams(); }
  std::vector<std::string> ListArguments() const override {
    std::vector<std::string> args;
    for (int i = 0; i < p_.num_outputs; ++i) args.push_back("data_" + std::to_string(i));
    return args;
  }
  std::vector<std::string> ListOutputs() const override {
    std::vector<std::string> outs;
    for (int i = 0; i < p_.num_outputs; ++i) outs.push_back("output" + std::to_string(i));
    return outs;
  }
  bool InferType(std::vector<int>* in_type, std::vector<int>* out_type, std::vector<int>* aux) const override {
    const auto n = static_cast<std::size_t>(p_.num_outputs);
    aux->clear();
    in_type->resize(n, kTypeUnknown);
    out_type->resize(n, kTypeUnknown);
    const int f32 = static_cast<int>(DType::kFloat32), f16 = static_cast<int>(DType::kFloat16);
    const int bf16 = static_cast<int>(DType::kBfloat16);
    // Widest: float32 if any input is float32, else the first input's type. Narrowest: float16 before
    // bfloat16 before float32 (MXNet's order).
    int target = p_.cast_narrow ? f32 : (*in_type)[0];
    for (std::size_t i = 0; i < n; ++i) {
      const int t = (*in_type)[i];
      if (!p_.cast_narrow && t == f32) target = f32;
      if (p_.cast_narrow && t == f16) target = f16;
      if (p_.cast_narrow && t == bf16 && target != f16) target = bf16;
    }
    bool known = true;
    for (std::size_t i = 0; i < n; ++i) {
      const int t = (*in_type)[i];
      if (t == kTypeUnknown) {
        known = false;
        continue;
      }
      AssignType(out_type, i, IsAmpFloat(t) ? target : t, "amp_multicast", "output" + std::to_string(i));
    }
    return known;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<AmpMultiCastProp>(*this); }
  std::string TypeString() const override { return "amp_multicast"; }

 private:
  AmpMultiCastParam p_;
};

}  // namespace

TROUPE_REGISTER_OP_PROPERTY(amp_cast, AmpCastProp)
    .describe("Cast function between low precision float/FP32 used by AMP: converts only between float32, "
              "float16 and bfloat16 (other types pass unchanged); the gradient is cast back.")
    .add_argument("data", "NDArray-or-Symbol", "The input.")
    .add_arguments(AmpCastParam::Docs());

TROUPE_REGISTER_OP_PROPERTY(amp_multicast, AmpMultiCastProp)
    .describe("Cast function used by AMP, that casts its inputs to the common widest type (or, with "
              "cast_narrow, the narrowest); only float32, float16 and bfloat16 are converted.")
    .add_argument("data", "NDArray-or-Symbol[]", "Weights")
    .add_arguments(AmpMultiCastParam::Docs());

TROUPE_REGISTER_OP_PROPERTY(clip, ClipProp)
    .describe("Clips (limits) the values: min(max(x, a_min), a_max); the gradient passes where a_min <= x <= "
              "a_max.")
    .add_argument("data", "NDArray-or-Symbol", "Input array.")
    .add_arguments(ClipParam::Docs());

TROUPE_REGISTER_OP_PROPERTY(Cast, CastProp)
    .add_alias("cast")
    .describe("Casts every element to a new type; the gradient is cast back.")
    .add_argument("data", "NDArray-or-Symbol", "The input.")
    .add_arguments(CastParam::Docs());

}  // namespace troupe
