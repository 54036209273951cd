// MXNet's optimizer update operators: sgd_update, sgd_mom_update, nag_mom_update, adam_update,
// rmsprop_update, rmspropalex_update, and the multi-precision mp_sgd_update, mp_sgd_mom_update and
// mp_nag_mom_update, with MXNet 1.9's parameters and input order.
//
// Each takes (weight, grad, states...) and returns the updated weight; the states are written in place. In
// troupe's operator model the inputs an operator writes are its auxiliary states (as MXNet lists its
// mutated inputs): weight and grad are the arguments, the states (mom; mean, var; n; n, g, delta) and the
// mp_* operators' float32 weight32 are auxiliary. MXNet's optimizers call them with out=weight; that is
// the in-place case here too (Invoke with the weight as output).
//
// The element-wise steps are the optimizers' own (op/internal/optimizer_kernels.h). The mp_* operators take
// a float16/bfloat16 (or float32) weight and gradient and float32 states: the rule runs on weight32 with the
// gradient in float32, then the output is weight32 rounded once, as MXNet's MP_*Kernel. CPU only.
#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "op/internal/op_util.h"
#include "op/internal/optimizer_kernels.h"
#include "op/internal/optimizer_params.h"
#include "op/operator.h"
#include "op/param.h"

namespace troupe {

namespace {

using internal::OptimizerKind;
using internal::OptimizerScalars;

// The fields every update operator has: lr (required, as in MXNet), then the optimizers' common ones.
template <typename P>
void DeclareLrAndCommon(ParamSchema<P>& s) {
  s.Field("lr", &P::lr).Describe("Learning rate");
  internal::DeclareCommon(s);
}

// The scalars of those fields.
template <typename P>
OptimizerScalars CommonScalars(const P& p) {
  return internal::CommonScalars(p.lr, p.wd, p);
}

#define TROUPE_UPDATE_COMMON_FIELDS float lr = 0.f, wd = 0.f, rescale_grad = 1.f, clip_gradient = -1.f;

// lazy_update only matters for row_sparse gradients, which troupe does not have; accepted for MXNet's files.
struct SgdUpdateParam : Params<SgdUpdateParam> {
  TROUPE_UPDATE_COMMON_FIELDS
  bool lazy_update = true;
  static void Declare(ParamSchema<SgdUpdateParam>& s) {
    DeclareLrAndCommon(s);
    s.Field("lazy_update", &SgdUpdateParam::lazy_update).Default(true).Describe(
        "If true, lazy updates are applied if gradient's stype is row_sparse (dense here: no effect).");
  }
  OptimizerScalars Scalars() const { return CommonScalars(*this); }
};

struct SgdMomUpdateParam : Params<SgdMomUpdateParam> {
  TROUPE_UPDATE_COMMON_FIELDS
  float momentum = 0.f;
  bool lazy_update = true;
  static void Declare(ParamSchema<SgdMomUpdateParam>& s) {
    DeclareLrAndCommon(s);
    s.Field("momentum", &SgdMomUpdateParam::momentum).Default(0.f).Describe("The decay rate of momentum estimates.");
    s.Field("lazy_update", &SgdMomUpdateParam::lazy_update).Default(true).Describe(
        "If true, lazy updates are applied if gradient's stype is row_sparse (dense here: no effect).");
  }
  OptimizerScalars Scalars() const {
    OptimizerScalars sc = CommonScalars(*this);
    sc.momentum = momentum;
    return sc;
  }
};

struct NagMomUpdateParam : Params<NagMomUpdateParam> {
  TROUPE_UPDATE_COMMON_FIELDS
  float momentum = 0.f;
  static void Declare(ParamSchema<NagMomUpdateParam>& s) {
    DeclareLrAndCommon(s);
    s.Field("momentum", &NagMomUpdateParam::momentum).Default(0.f).Describe("The decay rate of momentum estimates.");
  }
  OptimizerScalars Scalars() const {
    OptimizerScalars sc = CommonScalars(*this);
    sc.momentum = momentum;
    return sc;
  }
};

struct AdamUpdateParam : Params<AdamUpdateParam> {
  TROUPE_UPDATE_COMMON_FIELDS
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;
  bool lazy_update = true;
  static void Declare(ParamSchema<AdamUpdateParam>& s) {
    DeclareLrAndCommon(s);
    s.Field("beta1", &AdamUpdateParam::beta1).Default(0.9f).Describe("The decay rate for the 1st moment estimates.");
    s.Field("beta2", &AdamUpdateParam::beta2).Default(0.999f).Describe("The decay rate for the 2nd moment estimates.");
    s.Field("epsilon", &AdamUpdateParam::epsilon).Default(1e-8f).Describe("A small constant for numerical stability.");
    s.Field("lazy_update", &AdamUpdateParam::lazy_update).Default(true).Describe(
        "If true, lazy updates are applied if gradient's stype is row_sparse (dense here: no effect).");
  }
  OptimizerScalars Scalars() const {
    OptimizerScalars sc = CommonScalars(*this);
    sc.beta1 = beta1;
    sc.beta2 = beta2;
    sc.epsilon = epsilon;
    return sc;
  }
};

struct RmsPropUpdateParam : Params<RmsPropUpdateParam> {
  TROUPE_UPDATE_COMMON_FIELDS
  float gamma1 = 0.95f, epsilon = 1e-8f, clip_weights = -1.f;
  static void Declare(ParamSchema<RmsPropUpdateParam>& s) {
    DeclareLrAndCommon(s);
    s.Field("gamma1", &RmsPropUpdateParam::gamma1).Default(0.95f).Describe("The decay rate of momentum estimates.");
    s.Field("epsilon", &RmsPropUpdateParam::epsilon).Default(1e-8f).Describe("A small constant for numerical stability.");
    s.Field("clip_weights", &RmsPropUpdateParam::clip_weights)
        .Default(-1.f)
        .Describe("Clip weights to the range of [-clip_weights, clip_weights]; <= 0 turns clipping off.");
  }
  OptimizerScalars Scalars() const {
    OptimizerScalars sc = CommonScalars(*this);
    sc.gamma1 = gamma1;
    sc.epsilon = epsilon;
    sc.clip_weights = clip_weights;
    return sc;
  }
};

struct RmsPropAlexUpdateParam : Params<RmsPropAlexUpdateParam> {
  TROUPE_UPDATE_COMMON_FIELDS
  float gamma1 = 0.95f, gamma2 = 0.9f, epsilon = 1e-8f, clip_weights = -1.f;
  static void Declare(ParamSchema<RmsPropAlexUpdateParam>& s) {
    DeclareLrAndCommon(s);
    s.Field("gamma1", &RmsPropAlexUpdateParam::gamma1).Default(0.95f).Describe("Decay rate.");
    s.Field("gamma2", &RmsPropAlexUpdateParam::gamma2).Default(0.9f).Describe("Decay rate.");
    s.Field("epsilon", &RmsPropAlexUpdateParam::epsilon).Default(1e-8f).Describe("A small constant for numerical stability.");
    s.Field("clip_weights", &RmsPropAlexUpdateParam::clip_weights)
        .Default(-1.f)
        .Describe("Clip weights to the range of [-clip_weights, clip_weights]; <= 0 turns clipping off.");
  }
  OptimizerScalars Scalars() const {
    OptimizerScalars sc = CommonScalars(*this);
    sc.gamma1 = gamma1;
    sc.gamma2 = gamma2;
    sc.epsilon = epsilon;
    sc.clip_weights = clip_weights;
    return sc;
  }
};

std::vector<std::string> StateNames(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd: return {};
    case OptimizerKind::kSgdMom:
    case OptimizerKind::kNag: return {"mom"};
    case OptimizerKind::kAdam: return {"mean", "var"};
    case OptimizerKind::kAdaGrad: return {"history"};
    case OptimizerKind::kRmsProp: return {"n"};
    case OptimizerKind::kRmsPropCentered: return {"n", "g", "delta"};
  }
  return {};
}

// Elements per chunk: the gradient (and, without a float32 weight, the weight) are staged in the compute type
// a chunk at a time.
constexpr std::int64_t kChunk = 1024;

// One update on the CPU. C: the compute type (the float32 weight's for mp, else the weight's); T: the
// weight's and gradient's element type. `master`: the float32 weight (mp), else null. The rule runs on a
// working copy of the weight (weight32 itself for mp), then the output is written from it with req.
template <OptimizerKind K, typename C, typename T>
void UpdateLoop(const OptimizerScalars& scalars, const TBlob& weight, const TBlob& grad, const std::vector<TBlob>& st,
                C* master, OpReqType req, const TBlob& out) {
  const internal::StepScalars<C> a(scalars);
  const T* pw = weight.dptr_as<T>();
  const T* pg = grad.dptr_as<T>();
  T* po = out.dptr_as<T>();
  std::array<C*, 3> s{};
  for (std::size_t i = 0; i < st.size() && i < s.size(); ++i) s[i] = st[i].dptr_as<C>();
  const std::int64_t n = weight.Size();
  std::array<C, kChunk> wbuf, gbuf;
  for (std::int64_t b = 0; b < n; b += kChunk) {
    const std::int64_t m = std::min(kChunk, n - b);
    C* w = master ? master + b : wbuf.data();
    if (!master) {
      for (std::int64_t i = 0; i < m; ++i) w[i] = static_cast<C>(pw[b + i]);
    }
    for (std::int64_t i = 0; i < m; ++i) gbuf[static_cast<std::size_t>(i)] = static_cast<C>(pg[b + i]);
    C* s0 = s[0] ? s[0] + b : nullptr;
    C* s1 = s[1] ? s[1] + b : nullptr;
    C* s2 = s[2] ? s[2] + b : nullptr;
    if constexpr (K == OptimizerKind::kNag) {
      if (!master && po != pw) {
        // Written to another array, MXNet's NAGMomKernel reads the old weight in the momentum's decay term;
        // the shared step reads the weight just written, which is what MXNet computes in place.
        for (std::int64_t i = 0; i < m; ++i) {
          const C cg = internal::ClipValue(a.rescale * gbuf[static_cast<std::size_t>(i)], a.clip);
          const C w0 = w[i];
          s0[i] = a.momentum * s0[i];
          w[i] = w0 - s0[i] + (a.momentum + C(1)) * (s0[i] - a.lr * (cg + a.wd * w0));
          s0[i] = s0[i] - a.lr * (cg + a.wd * w0);
        }
        if (req != kNullOp) {
          for (std::int64_t i = 0; i < m; ++i) internal::AssignAcc(po + b + i, req, w[i]);
        }
        continue;
      }
    }
    for (std::int64_t i = 0; i < m; ++i) internal::OptimizerStepAt<K, C>(a, i, w, gbuf.data(), s0, s1, s2);
    if (req == kNullOp) continue;
    for (std::int64_t i = 0; i < m; ++i) internal::AssignAcc(po + b + i, req, w[i]);
  }
}

class UpdateOp final : public Operator {
 public:
  UpdateOp(OptimizerKind kind, bool mp, OptimizerScalars scalars) : kind_(kind), mp_(mp), scalars_(scalars) {}
  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>& aux) override {
    const OpReqType r = req[0];  // kNullOp: the states are still updated
    std::vector<TBlob> states(aux.begin(), aux.end() - (mp_ ? 1 : 0));
    internal::OptimizerKindSwitch(kind_, [&](auto k) {
      constexpr OptimizerKind K = decltype(k)::value;
      if (mp_) {
        float* master = aux.back().dptr_as<float>();
        internal::FloatHalfSwitch(in[0].dtype, "mp update", [&](auto tag) {
          using T = decltype(tag);
          UpdateLoop<K, float, T>(scalars_, in[0], in[1], states, master, r, out[0]);
        });
      } else {
        internal::FloatSwitch(in[0].dtype, "update", [&](auto tag) {
          using T = decltype(tag);
          UpdateLoop<K, T, T>(scalars_, in[0], in[1], states, nullptr, r, out[0]);
        });
      }
    });
  }

 private:
  OptimizerKind kind_;
  bool mp_;
  OptimizerScalars scalars_;
};

// One property for every update operator. Spec: kName; Param, its parameters; kKind, its rule; kMp, whether
// it keeps a float32 weight (the mp_* operators).
template <typename Spec>
class UpdateProp final : public OperatorProperty {
  using P = typename Spec::Param;
  static constexpr OptimizerKind K = Spec::kKind;
  static constexpr bool kMp = Spec::kMp;

 public:
  void Init(const Kwargs& kwargs) override { param_.Init(kwargs, name_); }
  Kwargs GetParams() const override { return param_.GetParams(); }
  std::vector<std::string> ListArguments() const override { return {"weight", "grad"}; }
  std::vector<std::string> ListAuxiliaryStates() const override {
    std::vector<std::string> names = StateNames(K);
    if (kMp) names.emplace_back("weight32");
    return names;
  }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    const std::vector<std::string> aux_names = ListAuxiliaryStates();
    aux->resize(aux_names.size());
    TShape known;
    auto note = [&](const TShape& s) {
      if (!known.known() && s.known()) known = s;
    };
    for (const TShape& s : *in) note(s);
    for (const TShape& s : *aux) note(s);
    if (!known.known()) return false;
    auto fill = [&](TShape& s, const std::string& what) {
      if (s.ndim() < 0 || !s.known()) {
        s = known;
      } else if (s != known) {
        throw Error(name_ + ": " + what + " has shape " + s.ToString() + " but the weight's is " + known.ToString() +
                    "; every input of an update has the weight's shape");
      }
    };
    fill((*in)[0], "weight");
    fill((*in)[1], "grad");
    for (std::size_t i = 0; i < aux->size(); ++i) fill((*aux)[i], aux_names[i]);
    *out = {known};
    return true;
  }
  bool InferType(std::vector<int>* in, std::vector<int>* out, std::vector<int>* aux) const override {
    const std::vector<std::string> aux_names = ListAuxiliaryStates();
    if (!kMp) {
      if (!OperatorProperty::InferType(in, out, aux)) return false;
      const int t = (*in)[0];
      if (t != static_cast<int>(DType::kFloat32) && t != static_cast<int>(DType::kFloat64)) {
        throw Error(name_ + ": weight dtype " + DTypeName(static_cast<DType>(t)) +
                    " is not supported (float32 or float64; a float16 or bfloat16 weight takes the mp_ operator "
                    "with a float32 weight32)");
      }
      return true;
    }
    // The weight and gradient share a type (float16, bfloat16 or float32); the states are float32.
    int t = (*in)[0] != kTypeUnknown ? (*in)[0] : (*in)[1];
    aux->assign(aux_names.size(), static_cast<int>(DType::kFloat32));
    if (t == kTypeUnknown) return false;
    for (std::size_t i = 0; i < 2; ++i) {
      if ((*in)[i] == kTypeUnknown) (*in)[i] = t;
      if ((*in)[i] != t) {
        throw Error(name_ + ": " + (i ? "grad" : "weight") + " has dtype " +
                    DTypeName(static_cast<DType>((*in)[i])) + " but the other " + DTypeName(static_cast<DType>(t)) +
                    "; weight and grad share one type");
      }
    }
    if (t != static_cast<int>(DType::kFloat16) && t != static_cast<int>(DType::kBfloat16) &&
        t != static_cast<int>(DType::kFloat32)) {
      throw Error(name_ + ": weight dtype " + DTypeName(static_cast<DType>(t)) +
                  " is not supported (float16, bfloat16 or float32, with float32 states)");
    }
    *out = {t};
    return true;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<UpdateProp>(*this); }
  std::string TypeString() const override { return name_; }
  bool HasBackward() const override { return false; }
  std::vector<std::pair<int, void*>> ForwardInplaceOption(const std::vector<int>& in_data,
                                                          const std::vector<void*>& out_data) const override {
    return {{in_data[0], out_data[0]}};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) internal::ThrowNoImplementation(name_, ctx);
    return std::make_unique<UpdateOp>(K, kMp, param_.Scalars());
  }

 private:
  std::string name_ = Spec::kName;
  P param_;
};

// The operators' specs: name, parameters, rule, float32 weight.
#define TROUPE_UPDATE_SPEC(NAME, PARAM, KIND, MP)       \
  struct NAME##_spec {                                  \
    static constexpr const char* kName = #NAME;         \
    using Param = PARAM;                                \
    static constexpr OptimizerKind kKind = KIND;        \
    static constexpr bool kMp = MP;                     \
  };
TROUPE_UPDATE_SPEC(sgd_update, SgdUpdateParam, OptimizerKind::kSgd, false)
TROUPE_UPDATE_SPEC(sgd_mom_update, SgdMomUpdateParam, OptimizerKind::kSgdMom, false)
TROUPE_UPDATE_SPEC(nag_mom_update, NagMomUpdateParam, OptimizerKind::kNag, false)
TROUPE_UPDATE_SPEC(adam_update, AdamUpdateParam, OptimizerKind::kAdam, false)
TROUPE_UPDATE_SPEC(rmsprop_update, RmsPropUpdateParam, OptimizerKind::kRmsProp, false)
TROUPE_UPDATE_SPEC(rmspropalex_update, RmsPropAlexUpdateParam, OptimizerKind::kRmsPropCentered, false)
TROUPE_UPDATE_SPEC(mp_sgd_update, SgdUpdateParam, OptimizerKind::kSgd, true)
TROUPE_UPDATE_SPEC(mp_sgd_mom_update, SgdMomUpdateParam, OptimizerKind::kSgdMom, true)
TROUPE_UPDATE_SPEC(mp_nag_mom_update, NagMomUpdateParam, OptimizerKind::kNag, true)
#undef TROUPE_UPDATE_SPEC

}  // namespace

TROUPE_REGISTER_OP_PROPERTY(sgd_update, UpdateProp<sgd_update_spec>)
    .describe("Update function for Stochastic Gradient Descent (SGD) optimizer: weight = weight - lr * "
              "(clip(rescale_grad * grad) + wd * weight).")
    .add_argument("weight", "NDArray-or-Symbol", "Weight")
    .add_argument("grad", "NDArray-or-Symbol", "Gradient")
    .add_arguments(SgdUpdateParam::Docs());

TROUPE_REGISTER_OP_PROPERTY(sgd_mom_update, UpdateProp<sgd_mom_update_spec>)
    .describe("Momentum update function for Stochastic Gradient Descent (SGD) optimizer: mom = momentum * mom - "
              "lr * wd * weight - lr * clip(rescale_grad * grad); weight += mom. mom is updated in place.")
    .add_argument("weight", "NDArray-or-Symbol", "Weight")
    .add_argument("grad", "NDArray-or-Symbol", "Gradient")
    .add_argument("mom", "NDArray-or-Symbol", "Momentum (auxiliary state, updated)")
    .add_arguments(SgdMomUpdateParam::Docs());

TROUPE_REGISTER_OP_PROPERTY(nag_mom_update, UpdateProp<nag_mom_update_spec>)
    .describe("Update function for Nesterov Accelerated Gradient (NAG) optimizer. mom is updated in place.")
    .add_argument("weight", "NDArray-or-Symbol", "Weight")
    .add_argument("grad", "NDArray-or-Symbol", "Gradient")
    .add_argument("mom", "NDArray-or-Symbol", "Momentum (auxiliary state, updated)")
    .add_arguments(NagMomUpdateParam::Docs());

TROUPE_REGISTER_OP_PROPERTY(adam_update, UpdateProp<adam_update_spec>)
    .describe("Update function for Adam optimizer (no bias correction: fold it into lr, as MXNet's Python "
              "Adam does). mean and var are updated in place.")
    .add_argument("weight", "NDArray-or-Symbol", "Weight")
    .add_argument("grad", "NDArray-or-Symbol", "Gradient")
    .add_argument("mean", "NDArray-or-Symbol", "Moving mean (auxiliary state, updated)")
    .add_argument("var", "NDArray-or-Symbol", "Moving variance (auxiliary state, updated)")
    .add_arguments(AdamUpdateParam::Docs());

TROUPE_REGISTER_OP_PROPERTY(rmsprop_update, UpdateProp<rmsprop_update_spec>)
    .describe("Update function for RMSProp optimizer (Tieleman and Hinton). n is updated in place.")
    .add_argument("weight", "NDArray-or-Symbol", "Weight")
    .add_argument("grad", "NDArray-or-Symbol", "Gradient")
    .add_argument("n", "NDArray-or-Symbol", "Mean of squared gradients (auxiliary state, updated)")
    .add_arguments(RmsPropUpdateParam::Docs());

TROUPE_REGISTER_OP_PROPERTY(rmspropalex_update, UpdateProp<rmspropalex_update_spec>)
    .describe("Update function for RMSPropAlex optimizer (Graves's centered RMSProp). n, g and delta are "
              "updated in place.")
    .add_argument("weight", "NDArray-or-Symbol", "Weight")
    .add_argument("grad", "NDArray-or-Symbol", "Gradient")
    .add_argument("n", "NDArray-or-Symbol", "n (auxiliary state, updated)")
    .add_argument("g", "NDArray-or-Symbol", "g (auxiliary state, updated)")
    .add_argument("delta", "NDArray-or-Symbol", "delta (auxiliary state, updated)")
    .add_arguments(RmsPropAlexUpdateParam::Docs());

TROUPE_REGISTER_OP_PROPERTY(mp_sgd_update, UpdateProp<mp_sgd_update_spec>)
    .describe("Updater function for multi-precision sgd optimizer: sgd_update on the float32 weight32 (updated "
              "in place) with the gradient in float32; the output is weight32 in the weight's type.")
    .add_argument("weight", "NDArray-or-Symbol", "Weight")
    .add_argument("grad", "NDArray-or-Symbol", "gradient")
    .add_argument("weight32", "NDArray-or-Symbol", "Weight32 (auxiliary state, updated)")
    .add_arguments(SgdUpdateParam::Docs());

TROUPE_REGISTER_OP_PROPERTY(mp_sgd_mom_update, UpdateProp<mp_sgd_mom_update_spec>)
    .describe("Updater function for multi-precision sgd optimizer with momentum: sgd_mom_update on the float32 "
              "weight32; mom and weight32 are updated in place.")
    .add_argument("weight", "NDArray-or-Symbol", "Weight")
    .add_argument("grad", "NDArray-or-Symbol", "Gradient")
    .add_argument("mom", "NDArray-or-Symbol", "Momentum (auxiliary state, updated)")
    .add_argument("weight32", "NDArray-or-Symbol", "Weight32 (auxiliary state, updated)")
    .add_arguments(SgdMomUpdateParam::Docs());

TROUPE_REGISTER_OP_PROPERTY(mp_nag_mom_update, UpdateProp<mp_nag_mom_update_spec>)
    .describe("Update function for multi-precision Nesterov Accelerated Gradient (NAG) optimizer: "
              "nag_mom_update on the float32 weight32; mom and weight32 are updated in place.")
    .add_argument("weight", "NDArray-or-Symbol", "Weight")
    .add_argument("grad", "NDArray-or-Symbol", "Gradient")
    .add_argument("mom", "NDArray-or-Symbol", "Momentum (auxiliary state, updated)")
    .add_argument("weight32", "NDArray-or-Symbol", "Weight32 (auxiliary state, updated)")
    .add_arguments(NagMomUpdateParam::Docs());

}  // namespace troupe
