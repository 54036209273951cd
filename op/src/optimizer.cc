#include "op/optimizer.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <numbers>
#include <optional>
#include <string>
#include <utility>

#include "actors/config.h"
#include "base/error.h"
#include "op/imperative.h"
#include "op/internal/op_util.h"
#include "op/internal/optimizer_kernels.h"
#include "op/internal/optimizer_params.h"
#include "op/internal/pickle.h"

namespace troupe {

namespace {

// The name under which SaveStates records the optimizer type ("optimizer:sgd"): a one-element array, so
// the file stays a plain MXNet .params list.
constexpr char kTypePrefix[] = "optimizer:";
constexpr char kStepState[] = "step";
constexpr char kMasterState[] = "weight32";  // multi_precision's float32 weight

using internal::OptimizerKind;
using internal::CommonScalars;
using internal::DeclareCommon;
using internal::OptimizerScalars;

// One update of `kind` on the weight's device: a loop over the elements on the CPU (the kind and type are
// constants inside it, so it vectorises), a kernel on the engine's stream on a GPU. Runs inside an engine
// function; the step formulas are op/internal/optimizer_kernels.h's, shared with the GPU.
void StepOnDevice(OptimizerKind kind, const OptimizerScalars& scalars, const TBlob& w, const TBlob& g,
                  const std::vector<TBlob>& st, const RunContext& rctx) {
  if (w.ctx.is_gpu()) {
    internal::GpuOptimizerStep(kind, scalars, w, g, st, rctx.stream);
    return;
  }
  internal::FloatSwitch(w.dtype, "optimizer update", [&](auto tag) {
    using T = decltype(tag);
    const internal::StepScalars<T> a(scalars);
    T* pw = w.dptr_as<T>();
    const T* pg = g.dptr_as<T>();
    T* s0 = st.size() > 0 ? st[0].dptr_as<T>() : nullptr;
    T* s1 = st.size() > 1 ? st[1].dptr_as<T>() : nullptr;
    T* s2 = st.size() > 2 ? st[2].dptr_as<T>() : nullptr;
    const std::int64_t n = w.Size();
    internal::OptimizerKindSwitch(kind, [&](auto k) {
      constexpr OptimizerKind K = decltype(k)::value;
      for (std::int64_t i = 0; i < n; ++i) internal::OptimizerStepAt<K, T>(a, i, pw, pg, s0, s1, s2);
    });
  });
}

// Everything that can be checked at the call, before anything is pushed. half_ok: a float16/bfloat16 weight
// is accepted (multi_precision updates its float32 copy).
void CheckUpdateArgs(const std::string& type, int index, const NDArray& weight, const NDArray& grad,
                     bool half_ok = false) {
  const std::string what = "optimizer '" + type + "' update of index " + std::to_string(index);
  if (weight.is_none() || grad.is_none()) throw Error(what + ": weight or gradient is a none array");
  if (weight.shape() != grad.shape()) {
    throw Error(what + ": gradient shape " + grad.shape().ToString() + " differs from weight shape " +
                weight.shape().ToString());
  }
  if (weight.dtype() != grad.dtype()) {
    throw Error(what + ": gradient dtype " + DTypeName(grad.dtype()) + " differs from weight dtype " +
                DTypeName(weight.dtype()));
  }
  if (weight.ctx() != grad.ctx()) {
    throw Error(what + ": gradient is on " + grad.ctx().ToString() + " but weight on " + weight.ctx().ToString() +
                "; copy the gradient to the weight's device first");
  }
  if (weight.engine() != grad.engine()) throw Error(what + ": weight and gradient belong to different engines");
  const bool half = weight.dtype() == DType::kFloat16 || weight.dtype() == DType::kBfloat16;
  if (weight.dtype() != DType::kFloat32 && weight.dtype() != DType::kFloat64 && !(half_ok && half)) {
    throw Error(what + ": dtype " + std::string(DTypeName(weight.dtype())) + " is not supported (float32 and float64 are" +
                (half ? "; float16 and bfloat16 weights with multi_precision=True" : "") + ")");
  }
}

// UpdateMulti's checks, all before anything is pushed.
void CheckMultiArgs(const std::string& type, const std::vector<int>& indices, const std::vector<NDArray>& weights,
                    const std::vector<NDArray>& grads, bool half_ok = false) {
  if (weights.size() != indices.size() || grads.size() != indices.size()) {
    throw Error("optimizer '" + type + "' UpdateMulti: " + std::to_string(indices.size()) + " indices, " +
                std::to_string(weights.size()) + " weights and " + std::to_string(grads.size()) +
                " gradients; pass one weight and one gradient per index");
  }
  for (std::size_t i = 0; i < indices.size(); ++i) CheckUpdateArgs(type, indices[i], weights[i], grads[i], half_ok);
}

// A gradient that is the weight itself (or overlaps it) must not be read while it is written.
NDArray Readable(const NDArray& grad, const NDArray& weight) {
  return grad.SharesChunkWith(weight) ? grad.CopyTo(grad.ctx()) : grad;
}

// Pushes one update of `kind` that reads grad and writes weight and states, on the weight's device.
void PushUpdate(const char* op, OptimizerKind kind, const OptimizerScalars& scalars, const NDArray& weight,
                const NDArray& grad, const std::vector<NDArray>& states) {
  const NDArray g = Readable(grad, weight);  // alive until pushed: its deletion is ordered after the update
  const TBlob tw = weight.data(), tg = g.data();
  std::vector<TBlob> ts;
  std::vector<VarHandle> writes = {weight.var()};
  for (const NDArray& st : states) {
    ts.push_back(st.data());
    writes.push_back(st.var());
  }
  weight.engine()->PushSync(
      [kind, scalars, tw, tg, ts](RunContext rctx) { StepOnDevice(kind, scalars, tw, tg, ts, rctx); },
      weight.ctx(), {g.var()}, writes, FnProperty::kNormal, 0, op);
}

struct SgdParam : Params<SgdParam> {
  float learning_rate = 0.01f;
  float momentum = 0.f;
  float wd = 0.f;
  float rescale_grad = 1.f;
  float clip_gradient = -1.f;
  static void Declare(ParamSchema<SgdParam>& s) {
    s.Field("learning_rate", &SgdParam::learning_rate).Default(0.01f).LowerBound(0).Describe("Learning rate.");
    s.Field("momentum", &SgdParam::momentum).Default(0.f).Range(0, 1).Describe("The decay rate of momentum.");
    s.Field("wd", &SgdParam::wd).Default(0.f).Describe("Weight decay (L2 regularisation coefficient).");
    s.Field("rescale_grad", &SgdParam::rescale_grad).Default(1.f).Describe("Gradients are multiplied by this.");
    s.Field("clip_gradient", &SgdParam::clip_gradient)
        .Default(-1.f)
        .Describe("Clip the rescaled gradient to [-clip_gradient, clip_gradient]; < 0 turns clipping off.");
  }
};

struct AdamParam : Params<AdamParam> {
  float learning_rate = 0.001f;
  // Doubles: MXNet's Python Adam computes the bias correction from the Python (double) values.
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  float wd = 0.f;
  float rescale_grad = 1.f;
  float clip_gradient = -1.f;
  static void Declare(ParamSchema<AdamParam>& s) {
    s.Field("learning_rate", &AdamParam::learning_rate).Default(0.001f).LowerBound(0).Describe("Learning rate.");
    s.Field("beta1", &AdamParam::beta1).Default(0.9).Range(0, 1).Describe("Decay rate of the first moment.");
    s.Field("beta2", &AdamParam::beta2).Default(0.999).Range(0, 1).Describe("Decay rate of the second moment.");
    s.Field("epsilon", &AdamParam::epsilon).Default(1e-8).LowerBound(0).Describe("Small constant for stability.");
    s.Field("wd", &AdamParam::wd).Default(0.f).Describe("Weight decay (L2 regularisation coefficient).");
    s.Field("rescale_grad", &AdamParam::rescale_grad).Default(1.f).Describe("Gradients are multiplied by this.");
    s.Field("clip_gradient", &AdamParam::clip_gradient)
        .Default(-1.f)
        .Describe("Clip the gradient (after weight decay, as MXNet) to [-clip_gradient, clip_gradient]; < 0: off.");
  }
};

class SgdOptimizer : public Optimizer {
 public:
  explicit SgdOptimizer(OptimizerConfig config) : Optimizer(std::move(config)) {
    param_.Init(config_.params, "optimizer 'sgd'");
    learning_rate_ = param_.learning_rate;
    EnvInt("TROUPE_OPTIMIZER_AGGREGATION_SIZE", 1, 60, &aggregation_size_);
  }

  void UpdateOne(int index, const NDArray& weight, const NDArray& grad) override {
    UpdateGroup({index}, {weight}, {grad});
  }

  // One engine function for the whole group (MXNet's multi_sgd_mom_update): fewer hand-offs per step. As
  // MXNet's aggregated path, every index is counted before the learning rates are taken.
  void UpdateGroup(const std::vector<int>& indices, const std::vector<NDArray>& weights,
                   const std::vector<NDArray>& grads) override {
    CheckMultiArgs("sgd", indices, weights, grads);
    const std::size_t n = indices.size();
    if (n == 0) return;
    for (std::size_t i = 1; i < n; ++i) {
      if (weights[i].ctx() != weights[0].ctx() || weights[i].dtype() != weights[0].dtype() ||
          weights[i].engine() != weights[0].engine()) {
        for (std::size_t j = 0; j < n; ++j) UpdateGroup({indices[j]}, {weights[j]}, {grads[j]});
        return;
      }
    }
    const bool use_mom = param_.momentum != 0.f;
    static const std::vector<std::string> kMom = {"momentum"};
    static const std::vector<std::string> kNone;
    std::vector<std::vector<TBlob>> ts(n);
    std::vector<VarHandle> reads, writes;
    for (std::size_t i = 0; i < n; ++i) {
      std::vector<NDArray>& states = StateOf(indices[i], weights[i], use_mom ? kMom : kNone);
      writes.push_back(weights[i].var());
      if (use_mom) {
        ts[i].push_back(states[0].data());
        writes.push_back(states[0].var());
      }
    }
    for (int index : indices) CountUpdate(index);
    std::vector<OptimizerScalars> args;
    std::vector<TBlob> tw, tg;
    // A gradient sharing memory with any weight of the group is read from a copy (a weight earlier in the
    // group may be written before it is read). The copies live until the update is pushed, so that their
    // deletion is ordered after it.
    std::vector<NDArray> g(grads);
    for (std::size_t i = 0; i < n; ++i) {
      OptimizerScalars sc = CommonScalars(lr_of(indices[i]), wd_of(indices[i], param_.wd), param_);
      sc.rescale *= grad_scale_;
      sc.momentum = param_.momentum;
      args.push_back(sc);
      for (const NDArray& w : weights) {
        if (grads[i].SharesChunkWith(w)) {
          g[i] = grads[i].CopyTo(grads[i].ctx());
          break;
        }
      }
      tw.push_back(weights[i].data());
      tg.push_back(g[i].data());
      reads.push_back(g[i].var());
    }
    const OptimizerKind kind = use_mom ? OptimizerKind::kSgdMom : OptimizerKind::kSgd;
    weights[0].engine()->PushSync(
        [kind, args = std::move(args), tw = std::move(tw), tg = std::move(tg), ts = std::move(ts)](RunContext rctx) {
          for (std::size_t i = 0; i < args.size(); ++i) StepOnDevice(kind, args[i], tw[i], tg[i], ts[i], rctx);
        },
        weights[0].ctx(), reads, writes, FnProperty::kNormal, 0, n == 1 ? "sgd_update" : "multi_sgd_update");
  }

  int aggregation_size() const override { return aggregation_size_; }

 protected:
  StateLayout Layout() const override {
    return param_.momentum != 0.f ? StateLayout{{"momentum"}, false} : StateLayout{};
  }

 private:
  SgdParam param_;
  int aggregation_size_ = 4;
};

class AdamOptimizer : public Optimizer {
 public:
  explicit AdamOptimizer(OptimizerConfig config) : Optimizer(std::move(config)) {
    param_.Init(config_.params, "optimizer 'adam'");
    learning_rate_ = param_.learning_rate;
  }

  void UpdateOne(int index, const NDArray& weight, const NDArray& grad) override {
    CheckUpdateArgs("adam", index, weight, grad);
    static const std::vector<std::string> kNames = {"mean", "var"};
    std::vector<NDArray>& states = StateOf(index, weight, kNames);
    const std::int64_t t = CountUpdate(index);
    // As MXNet's Python Adam: the bias corrections fold into the step size, computed in double.
    const double coef1 = 1.0 - std::pow(param_.beta1, static_cast<double>(t));
    const double coef2 = 1.0 - std::pow(param_.beta2, static_cast<double>(t));
    const double lr_t = static_cast<double>(lr_of(index)) * std::sqrt(coef2) / coef1;
    OptimizerScalars sc = CommonScalars(lr_t, wd_of(index, param_.wd), param_);
    sc.rescale *= grad_scale_;
    sc.beta1 = param_.beta1;
    sc.beta2 = param_.beta2;
    sc.epsilon = param_.epsilon;
    PushUpdate("adam_update", OptimizerKind::kAdam, sc, weight, grad, states);
  }

 protected:
  StateLayout Layout() const override { return {{"mean", "var"}, true}; }

 private:
  AdamParam param_;
};

struct NagParam : Params<NagParam> {
  float learning_rate = 0.01f;
  float momentum = 0.f;
  float wd = 0.f;
  float rescale_grad = 1.f;
  float clip_gradient = -1.f;
  static void Declare(ParamSchema<NagParam>& s) {
    s.Field("learning_rate", &NagParam::learning_rate).Default(0.01f).LowerBound(0).Describe("Learning rate.");
    s.Field("momentum", &NagParam::momentum).Default(0.f).Range(0, 1).Describe("The decay rate of momentum.");
    DeclareCommon(s);
  }
};

struct AdaGradParam : Params<AdaGradParam> {
  float learning_rate = 0.01f;
  double eps = 1e-7;  // a Python float added by an NDArray scalar operation in MXNet
  float wd = 0.f;
  float rescale_grad = 1.f;
  float clip_gradient = -1.f;
  static void Declare(ParamSchema<AdaGradParam>& s) {
    s.Field("learning_rate", &AdaGradParam::learning_rate).Default(0.01f).LowerBound(0).Describe("Learning rate.");
    s.Field("eps", &AdaGradParam::eps).Default(1e-7).LowerBound(0).Describe("Added to the history under the root.");
    DeclareCommon(s);
  }
};

struct RmsPropParam : Params<RmsPropParam> {
  float learning_rate = 0.001f;
  float gamma1 = 0.9f;
  float gamma2 = 0.9f;
  float epsilon = 1e-8f;
  bool centered = false;
  float clip_weights = -1.f;
  float wd = 0.f;
  float rescale_grad = 1.f;
  float clip_gradient = -1.f;
  static void Declare(ParamSchema<RmsPropParam>& s) {
    s.Field("learning_rate", &RmsPropParam::learning_rate).Default(0.001f).LowerBound(0).Describe("Learning rate.");
    s.Field("gamma1", &RmsPropParam::gamma1).Default(0.9f).Range(0, 1).Describe("Decay of the squared gradient mean.");
    s.Field("gamma2", &RmsPropParam::gamma2).Default(0.9f).Range(0, 1).Describe("Momentum (centered only).");
    s.Field("epsilon", &RmsPropParam::epsilon).Default(1e-8f).LowerBound(0).Describe("Small constant for stability.");
    s.Field("centered", &RmsPropParam::centered).Default(false).Describe("Graves's centered RMSProp.");
    s.Field("clip_weights", &RmsPropParam::clip_weights)
        .Default(-1.f)
        .Describe("Clip the updated weight to [-clip_weights, clip_weights]; < 0 turns clipping off.");
    DeclareCommon(s);
  }
};

class NagOptimizer : public Optimizer {
 public:
  explicit NagOptimizer(OptimizerConfig config) : Optimizer(std::move(config)) {
    param_.Init(config_.params, "optimizer 'nag'");
    learning_rate_ = param_.learning_rate;
  }

  void UpdateOne(int index, const NDArray& weight, const NDArray& grad) override {
    CheckUpdateArgs("nag", index, weight, grad);
    const bool use_mom = param_.momentum != 0.f;
    static const std::vector<std::string> kMom = {"momentum"};
    static const std::vector<std::string> kNone;
    const std::vector<NDArray> states = StateOf(index, weight, use_mom ? kMom : kNone);
    CountUpdate(index);
    OptimizerScalars sc = CommonScalars(lr_of(index), wd_of(index, param_.wd), param_);
    sc.rescale *= grad_scale_;
    sc.momentum = param_.momentum;
    // MXNet's NAG falls back to sgd_update without momentum.
    if (use_mom) {
      PushUpdate("nag_mom_update", OptimizerKind::kNag, sc, weight, grad, states);
    } else {
      PushUpdate("sgd_update", OptimizerKind::kSgd, sc, weight, grad, states);
    }
  }

 protected:
  StateLayout Layout() const override {
    return param_.momentum != 0.f ? StateLayout{{"momentum"}, false} : StateLayout{};
  }

 private:
  NagParam param_;
};

class AdaGradOptimizer : public Optimizer {
 public:
  explicit AdaGradOptimizer(OptimizerConfig config) : Optimizer(std::move(config)) {
    param_.Init(config_.params, "optimizer 'adagrad'");
    learning_rate_ = param_.learning_rate;
  }

  void UpdateOne(int index, const NDArray& weight, const NDArray& grad) override {
    CheckUpdateArgs("adagrad", index, weight, grad);
    static const std::vector<std::string> kNames = {"history"};
    const std::vector<NDArray> states = StateOf(index, weight, kNames);
    CountUpdate(index);
    OptimizerScalars sc = CommonScalars(lr_of(index), wd_of(index, param_.wd), param_);
    sc.rescale *= grad_scale_;
    sc.epsilon = param_.eps;
    PushUpdate("adagrad_update", OptimizerKind::kAdaGrad, sc, weight, grad, states);
  }

 protected:
  StateLayout Layout() const override { return {{"history"}, false}; }

 private:
  AdaGradParam param_;
};

class RmsPropOptimizer : public Optimizer {
 public:
  explicit RmsPropOptimizer(OptimizerConfig config) : Optimizer(std::move(config)) {
    param_.Init(config_.params, "optimizer 'rmsprop'");
    learning_rate_ = param_.learning_rate;
  }

  void UpdateOne(int index, const NDArray& weight, const NDArray& grad) override {
    CheckUpdateArgs("rmsprop", index, weight, grad);
    static const std::vector<std::string> kPlain = {"n"};
    static const std::vector<std::string> kCentered = {"n", "g", "delta"};
    const std::vector<NDArray> states = StateOf(index, weight, param_.centered ? kCentered : kPlain);
    CountUpdate(index);
    OptimizerScalars sc = CommonScalars(lr_of(index), wd_of(index, param_.wd), param_);
    sc.rescale *= grad_scale_;
    sc.gamma1 = param_.gamma1;
    sc.gamma2 = param_.gamma2;
    sc.epsilon = param_.epsilon;
    sc.clip_weights = param_.clip_weights;
    PushUpdate(param_.centered ? "rmspropalex_update" : "rmsprop_update",
               param_.centered ? OptimizerKind::kRmsPropCentered : OptimizerKind::kRmsProp, sc, weight, grad, states);
  }

 protected:
  StateLayout Layout() const override {
    return param_.centered ? StateLayout{{"n", "g", "delta"}, true} : StateLayout{{"n"}, true};
  }

 private:
  RmsPropParam param_;
};

// Parses "<index>:<state>"; false when the name is not of that form.
bool ParseStateName(const std::string& name, int* index, std::string* state) {
  const auto colon = name.find(':');
  if (colon == std::string::npos || colon == 0) return false;
  const std::string head = name.substr(0, colon);
  char* end = nullptr;
  const long v = std::strtol(head.c_str(), &end, 10);
  if (end == nullptr || *end != '\0') return false;
  *index = static_cast<int>(v);
  *state = name.substr(colon + 1);
  return true;
}

}  // namespace

// A learning-rate schedule: a pure function of num_update (MXNet's schedulers keep state, but only
// advance it with num_update, which never decreases; the value is the same as computed from scratch).
class LrScheduler {
 public:
  virtual ~LrScheduler() = default;
  double At(std::int64_t n) const {
    if (n < warmup_steps_) {
      // As MXNet's get_warmup_lr, in the same order of operations.
      return warmup_linear_ ? warmup_begin_lr_ + (base_lr_ - warmup_begin_lr_) * static_cast<double>(n) /
                                                     static_cast<double>(warmup_steps_)
                            : warmup_begin_lr_;
    }
    return Decayed(n);
  }

  struct Warmup {
    double base_lr;
    std::int64_t steps;
    double begin_lr;
    bool linear;
  };

 protected:
  explicit LrScheduler(const Warmup& w)
      : base_lr_(w.base_lr), warmup_steps_(w.steps), warmup_begin_lr_(w.begin_lr), warmup_linear_(w.linear) {}
  virtual double Decayed(std::int64_t n) const = 0;

  double base_lr_;

 private:
  std::int64_t warmup_steps_;
  double warmup_begin_lr_;
  bool warmup_linear_;
};

namespace {

class FactorScheduler : public LrScheduler {
 public:
  FactorScheduler(const Warmup& w, std::int64_t step, double factor, double stop_factor_lr)
      : LrScheduler(w), step_(step), factor_(factor), stop_factor_lr_(stop_factor_lr) {}

 protected:
  double Decayed(std::int64_t n) const override {
    // MXNet's loop, repeated multiplications included (pow would differ in the last bits). Once the rate
    // sits at stop_factor_lr (or factor is 1) it cannot change any more, which bounds the loop.
    double lr = base_lr_;
    for (std::int64_t count = 0; n > count + step_; count += step_) {
      lr *= factor_;
      if (lr < stop_factor_lr_) lr = stop_factor_lr_;
      if (lr == stop_factor_lr_ || factor_ == 1.0) break;
    }
    return lr;
  }

 private:
  std::int64_t step_;
  double factor_, stop_factor_lr_;
};

class MultiFactorScheduler : public LrScheduler {
 public:
  MultiFactorScheduler(const Warmup& w, std::vector<std::int64_t> steps, double factor)
      : LrScheduler(w), steps_(std::move(steps)), factor_(factor) {}

 protected:
  double Decayed(std::int64_t n) const override {
    double lr = base_lr_;
    for (const std::int64_t s : steps_) {
      if (n <= s) break;
      lr *= factor_;
    }
    return lr;
  }

 private:
  std::vector<std::int64_t> steps_;
  double factor_;
};

class CosineScheduler : public LrScheduler {
 public:
  CosineScheduler(const Warmup& w, std::int64_t max_update, double final_lr)
      : LrScheduler(w), warmup_steps_(w.steps), max_update_(max_update), final_lr_(final_lr) {}

 protected:
  double Decayed(std::int64_t n) const override {
    // Past max_update MXNet keeps the last value, the one at max_update (final_lr).
    const std::int64_t m = std::min(n, max_update_);
    return final_lr_ + (base_lr_ - final_lr_) *
                           (1 + std::cos(std::numbers::pi * static_cast<double>(m - warmup_steps_) /
                                         static_cast<double>(max_update_ - warmup_steps_))) /
                           2;
  }

 private:
  std::int64_t warmup_steps_, max_update_;
  double final_lr_;
};

// The parameters every schedule takes (MXNet's LRScheduler): declared once.
// (Field<T> spelled out: deduction does not convert a pointer to a member of WarmupFields.)
template <typename P>
void DeclareWarmup(ParamSchema<P>& s) {
  s.template Field<std::optional<double>>("base_lr", &P::base_lr)
      .Default(std::optional<double>())
      .Describe("The rate the schedule starts from (after the warm-up); default: the optimizer's learning_rate.");
  s.template Field<std::int64_t>("warmup_steps", &P::warmup_steps)
      .Default(0)
      .LowerBound(0)
      .Describe("Updates of warm-up.");
  s.template Field<double>("warmup_begin_lr", &P::warmup_begin_lr)
      .Default(0.0)
      .LowerBound(0)
      .Describe("Rate at update 0.");
  s.template Field<std::string>("warmup_mode", &P::warmup_mode)
      .Default("linear")
      .Choices({"linear", "constant"})
      .Describe("linear: rise from warmup_begin_lr to base_lr; constant: stay at warmup_begin_lr.");
}

struct WarmupFields {
  std::optional<double> base_lr;
  std::int64_t warmup_steps = 0;
  double warmup_begin_lr = 0;
  std::string warmup_mode = "linear";
};

struct FactorSchedulerParam : Params<FactorSchedulerParam>, WarmupFields {
  std::int64_t step = 1;
  double factor = 1;
  double stop_factor_lr = 1e-8;
  static void Declare(ParamSchema<FactorSchedulerParam>& s) {
    s.Field("step", &FactorSchedulerParam::step).LowerBound(1).Describe("Updates between two decays.");
    s.Field("factor", &FactorSchedulerParam::factor).Default(1.0).Range(0, 1).Describe("Multiplier per decay.");
    s.Field("stop_factor_lr", &FactorSchedulerParam::stop_factor_lr)
        .Default(1e-8)
        .LowerBound(0)
        .Describe("The rate never decays below this.");
    DeclareWarmup(s);
  }
};

struct MultiFactorSchedulerParam : Params<MultiFactorSchedulerParam>, WarmupFields {
  std::vector<std::int64_t> step;
  double factor = 1;
  static void Declare(ParamSchema<MultiFactorSchedulerParam>& s) {
    s.Field("step", &MultiFactorSchedulerParam::step).Describe("Increasing update counts at which to decay.");
    s.Field("factor", &MultiFactorSchedulerParam::factor).Default(1.0).Range(0, 1).Describe("Multiplier per decay.");
    DeclareWarmup(s);
  }
};

struct CosineSchedulerParam : Params<CosineSchedulerParam>, WarmupFields {
  std::int64_t max_update = 1;
  double final_lr = 0;
  static void Declare(ParamSchema<CosineSchedulerParam>& s) {
    s.Field("max_update", &CosineSchedulerParam::max_update).LowerBound(1).Describe("Update of the final rate.");
    s.Field("final_lr", &CosineSchedulerParam::final_lr).Default(0.0).LowerBound(0).Describe("Rate at the end.");
    DeclareWarmup(s);
  }
};

// The shortest decimal text of a float read back as a double: the learning rate as it was written ("0.1"
// gives 0.1, not 0.100000001490116), which is what MXNet's Python schedule computes with.
double AsWritten(float v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}

}  // namespace

void Optimizer::InitScheduler() {
  const std::string& name = config_.lr_scheduler;
  if (name.empty()) {
    if (!config_.lr_scheduler_params.empty()) {
      throw Error("optimizer '" + config_.type + "': lr_scheduler_params given (" +
                  config_.lr_scheduler_params.front().first + ", ...) but no lr_scheduler; set lr_scheduler to " +
                  "one of factor, multifactor, cosine");
    }
    return;
  }
  const std::string what = "lr_scheduler '" + name + "' of optimizer '" + config_.type + "'";
  const auto known = ListLrSchedulers();
  if (std::find(known.begin(), known.end(), name) == known.end()) {
    std::string msg = "unknown lr_scheduler '" + name + "' of optimizer '" + config_.type + "'; known: ";
    for (std::size_t i = 0; i < known.size(); ++i) msg += (i ? ", " : "") + known[i];
    const std::string similar = SimilarNames(name, known);
    if (!similar.empty()) msg += " (did you mean " + similar + "?)";
    throw Error(msg);
  }
  const bool lr_given = std::any_of(config_.params.begin(), config_.params.end(),
                                    [](const auto& kv) { return kv.first == "learning_rate"; });
  auto warmup = [&](const WarmupFields& f) {
    double base = AsWritten(learning_rate_);
    if (f.base_lr) {
      if (*f.base_lr < 0) throw Error(what + ": base_lr must be >= 0, got " + std::to_string(*f.base_lr));
      if (lr_given && static_cast<float>(*f.base_lr) != learning_rate_) {
        throw Error(what + ": base_lr " + std::to_string(*f.base_lr) + " differs from the optimizer's learning_rate " +
                    std::to_string(learning_rate_) + "; give the rate once (either is enough)");
      }
      base = *f.base_lr;
    }
    if (f.warmup_begin_lr > base) {
      throw Error(what + ": warmup_begin_lr " + std::to_string(f.warmup_begin_lr) + " exceeds base_lr " +
                  std::to_string(base) + "; the warm-up rises to base_lr");
    }
    return LrScheduler::Warmup{base, f.warmup_steps, f.warmup_begin_lr, f.warmup_mode == "linear"};
  };
  if (name == "factor") {
    FactorSchedulerParam p;
    p.Init(config_.lr_scheduler_params, what);
    scheduler_ = std::make_shared<FactorScheduler>(warmup(p), p.step, p.factor, p.stop_factor_lr);
  } else if (name == "multifactor") {
    MultiFactorSchedulerParam p;
    p.Init(config_.lr_scheduler_params, what);
    if (p.step.empty()) throw Error(what + ": step must list at least one update count, e.g. step=(100, 200)");
    for (std::size_t i = 0; i < p.step.size(); ++i) {
      if (p.step[i] < 1 || (i > 0 && p.step[i] <= p.step[i - 1])) {
        throw Error(what + ": step " + param_detail::PrintTuple(p.step) + " must be increasing update counts >= 1");
      }
    }
    scheduler_ = std::make_shared<MultiFactorScheduler>(warmup(p), p.step, p.factor);
  } else {
    CosineSchedulerParam p;
    p.Init(config_.lr_scheduler_params, what);
    if (p.max_update <= p.warmup_steps) {
      throw Error(what + ": max_update " + std::to_string(p.max_update) + " must exceed warmup_steps " +
                  std::to_string(p.warmup_steps) + " (the cosine decays between the two)");
    }
    scheduler_ = std::make_shared<CosineScheduler>(warmup(p), p.max_update, p.final_lr);
  }
}

std::unique_ptr<Optimizer> Optimizer::Create(const OptimizerConfig& config) {
  // multi_precision is every type's and the base class's: the types' parameters are parsed without it.
  OptimizerConfig typed = config;
  bool multi_precision = false;
  for (auto it = typed.params.begin(); it != typed.params.end();) {
    if (it->first != "multi_precision") {
      ++it;
      continue;
    }
    const std::string& v = it->second;
    if (v == "True" || v == "true" || v == "1") {
      multi_precision = true;
    } else if (!(v == "False" || v == "false" || v == "0")) {
      throw Error("optimizer '" + config.type + "': parameter 'multi_precision' must be True or False, got '" + v + "'");
    }
    it = typed.params.erase(it);
  }
  std::unique_ptr<Optimizer> opt;
  if (config.type == "sgd") opt = std::make_unique<SgdOptimizer>(typed);
  if (config.type == "nag") opt = std::make_unique<NagOptimizer>(typed);
  if (config.type == "adam") opt = std::make_unique<AdamOptimizer>(typed);
  if (config.type == "adagrad") opt = std::make_unique<AdaGradOptimizer>(typed);
  if (config.type == "rmsprop") opt = std::make_unique<RmsPropOptimizer>(typed);
  if (opt) {
    opt->config_ = config;  // as given (a dist store sends it on)
    opt->multi_precision_ = multi_precision;
    opt->InitScheduler();
    for (const auto& [index, mult] : config.multipliers) opt->SetMultipliers(index, mult.first, mult.second);
    return opt;
  }
  std::string msg = "unknown optimizer type '" + config.type + "'; known types: ";
  const auto types = ListTypes();
  for (std::size_t i = 0; i < types.size(); ++i) msg += (i ? ", " : "") + types[i];
  const std::string similar = SimilarNames(config.type, types);
  if (!similar.empty()) msg += " (did you mean " + similar + "?)";
  throw Error(msg);
}

void Optimizer::UpdateGroup(const std::vector<int>& indices, const std::vector<NDArray>& weights,
                            const std::vector<NDArray>& grads) {
  CheckMultiArgs(config_.type, indices, weights, grads);
  for (std::size_t i = 0; i < indices.size(); ++i) UpdateOne(indices[i], weights[i], grads[i]);
}

namespace {
bool IsHalf(DType t) { return t == DType::kFloat16 || t == DType::kBfloat16; }

// The order of MXNet 1.9's multi_precision pairs: sgd and nag (their create_state_multi_precision) keep
// (state, float32 weight); the others (Optimizer's) (float32 weight, state).
bool MasterLast(const std::string& type) { return type == "sgd" || type == "nag"; }
}  // namespace

void Optimizer::Update(int index, const NDArray& weight, const NDArray& grad) {
  if (!multi_precision_ || !IsHalf(weight.dtype())) return UpdateOne(index, weight, grad);
  CheckUpdateArgs(config_.type, index, weight, grad, true);
  // MXNet's mp_*_update: the rule on the float32 weight with the gradient in float32, then the weight rounded.
  NDArray& master = MasterOf(index, weight);
  UpdateOne(index, master, grad.AsType(DType::kFloat32));
  Invoke("Cast", {master}, {{"dtype", DTypeName(weight.dtype())}}, {weight});
}

void Optimizer::UpdateMulti(const std::vector<int>& indices, const std::vector<NDArray>& weights,
                            const std::vector<NDArray>& grads) {
  bool half = false;
  for (const NDArray& w : weights) half = half || IsHalf(w.dtype());
  if (!multi_precision_ || !half) return UpdateGroup(indices, weights, grads);
  CheckMultiArgs(config_.type, indices, weights, grads, true);
  for (std::size_t i = 0; i < indices.size(); ++i) Update(indices[i], weights[i], grads[i]);
}

NDArray& Optimizer::MasterOf(int index, const NDArray& weight) {
  auto it = masters_.find(index);
  if (it == masters_.end()) return masters_[index] = weight.AsType(DType::kFloat32);
  NDArray& m = it->second;
  if (m.shape() != weight.shape() || m.dtype() != DType::kFloat32) {
    throw Error("optimizer '" + config_.type + "': the float32 weight (multi_precision) of index " + std::to_string(index) +
                " has shape " + m.shape().ToString() + " and dtype " + DTypeName(m.dtype()) + ", but the weight has shape " +
                weight.shape().ToString() + "; were the states loaded for another model?" +
                (states_file_.empty() ? "" : " (loaded from '" + states_file_ + "')"));
  }
  if (m.ctx() != weight.ctx() || m.engine() != weight.engine()) m = m.CopyTo(weight.ctx(), weight.engine());
  return m;
}

std::vector<std::string> Optimizer::ListTypes() { return {"adagrad", "adam", "nag", "rmsprop", "sgd"}; }

std::vector<std::string> Optimizer::ListLrSchedulers() { return {"cosine", "factor", "multifactor"}; }

float Optimizer::learning_rate() const {
  return scheduler_ ? static_cast<float>(scheduler_->At(num_update_)) : learning_rate_;
}

void Optimizer::SetLearningRate(float lr) {
  if (scheduler_) {
    throw Error("optimizer '" + config_.type + "' has lr_scheduler '" + config_.lr_scheduler +
                "', which sets the learning rate; SetLearningRate works only without a scheduler");
  }
  learning_rate_ = lr;
}

std::int64_t Optimizer::CountUpdate(int index) {
  const std::int64_t t = ++steps_[index];
  num_update_ = std::max(num_update_, t);
  return t;
}

void Optimizer::UpdateGrouped(const std::vector<int>& indices, const std::vector<NDArray>& weights,
                              const std::vector<NDArray>& grads) {
  if (weights.size() != indices.size() || grads.size() != indices.size()) {
    throw Error("Optimizer::UpdateGrouped: " + std::to_string(indices.size()) + " indices, " +
                std::to_string(weights.size()) + " weights and " + std::to_string(grads.size()) + " gradients");
  }
  const std::size_t group = static_cast<std::size_t>(std::max(1, aggregation_size()));
  for (std::size_t b = 0; b < indices.size(); b += group) {
    const auto e = static_cast<std::ptrdiff_t>(std::min(indices.size(), b + group));
    const auto s = static_cast<std::ptrdiff_t>(b);
    UpdateMulti(std::vector<int>(indices.begin() + s, indices.begin() + e),
                std::vector<NDArray>(weights.begin() + s, weights.begin() + e),
                std::vector<NDArray>(grads.begin() + s, grads.begin() + e));
  }
}

void Optimizer::SetGradScale(float scale) {
  if (!(scale > 0) || !std::isfinite(scale)) {
    throw Error("Optimizer::SetGradScale: the scale must be positive and finite, got " + std::to_string(scale));
  }
  grad_scale_ = scale;
}

void Optimizer::SetMultipliers(int index, float lr_mult, float wd_mult) { multipliers_[index] = {lr_mult, wd_mult}; }

float Optimizer::lr_of(int index) const {
  // In double, then rounded once (as MXNet's Python lr * lr_mult reaching a float kernel parameter); for
  // two floats the double product is exact, so the constant-rate case equals the float product.
  const double base = scheduler_ ? scheduler_->At(num_update_) : static_cast<double>(learning_rate_);
  const auto it = multipliers_.find(index);
  return static_cast<float>(it == multipliers_.end() ? base : base * static_cast<double>(it->second.first));
}

float Optimizer::wd_of(int index, float wd) const {
  const auto it = multipliers_.find(index);
  return it == multipliers_.end() ? wd : wd * it->second.second;
}

std::vector<NDArray>& Optimizer::StateOf(int index, const NDArray& weight, const std::vector<std::string>& names) {
  auto it = states_.find(index);
  if (it == states_.end()) {
    std::vector<NDArray> fresh;
    for (std::size_t i = 0; i < names.size(); ++i) {
      fresh.push_back(NDArray::Zeros(weight.shape(), weight.ctx(), weight.dtype(), weight.engine()));
    }
    state_names_[index] = names;
    return states_[index] = std::move(fresh);
  }
  // States loaded from a file (or made for another weight) must fit this weight.
  if (state_names_[index] != names) {
    std::string have, want;
    for (const auto& n : state_names_[index]) have += (have.empty() ? "" : ", ") + n;
    for (const auto& n : names) want += (want.empty() ? "" : ", ") + n;
    throw Error("optimizer '" + config_.type + "': index " + std::to_string(index) + " has states {" + have +
                "} but this configuration needs {" + want + "}; were the states saved with other parameters?" +
                (states_file_.empty() ? "" : " (loaded from '" + states_file_ + "')"));
  }
  for (NDArray& s : it->second) {
    if (s.shape() != weight.shape() || s.dtype() != weight.dtype()) {
      throw Error("optimizer '" + config_.type + "': the state of index " + std::to_string(index) + " has shape " +
                  s.shape().ToString() + " and dtype " + DTypeName(s.dtype()) + ", but the weight has shape " +
                  weight.shape().ToString() + " and dtype " + DTypeName(weight.dtype()) +
                  "; were the states loaded for another model?" +
                  (states_file_.empty() ? "" : " (loaded from '" + states_file_ + "')"));
    }
    if (s.ctx() != weight.ctx() || s.engine() != weight.engine()) s = s.CopyTo(weight.ctx(), weight.engine());
  }
  return it->second;
}

void Optimizer::SaveTroupeStates(const std::string& path) const {
  std::vector<NDArray> arrays;
  std::vector<std::string> names;
  arrays.push_back(NDArray::FromVector<std::int32_t>({1}, TShape{1}));
  names.push_back(kTypePrefix + config_.type);
  for (const auto& [index, states] : states_) {
    const auto& state_names = state_names_.at(index);
    for (std::size_t i = 0; i < states.size(); ++i) {
      arrays.push_back(states[i]);
      names.push_back(std::to_string(index) + ":" + state_names[i]);
    }
  }
  for (const auto& [index, master] : masters_) {
    arrays.push_back(master);
    names.push_back(std::to_string(index) + ":" + kMasterState);
  }
  for (const auto& [index, step] : steps_) {
    arrays.push_back(NDArray::FromVector<std::int64_t>({step}, TShape{1}));
    names.push_back(std::to_string(index) + ":" + kStepState);
  }
  NDArray::Save(path, arrays, names);
}

void Optimizer::LoadTroupeStates(const std::string& path) {
  std::vector<NDArray> arrays;
  std::vector<std::string> names;
  NDArray::Load(path, &arrays, &names);
  const std::string where = "optimizer states file '" + path + "'";
  std::string type;
  for (const auto& n : names) {
    if (n.rfind(kTypePrefix, 0) == 0) type = n.substr(sizeof(kTypePrefix) - 1);
  }
  if (type.empty()) {
    throw Error(where + " has no '" + kTypePrefix + "<type>' entry; it was not written by Optimizer::SaveStates");
  }
  if (type != config_.type) {
    throw Error(where + " holds the states of optimizer '" + type + "', not of '" + config_.type +
                "'; use an optimizer of type '" + type + "' or start without the states");
  }
  std::map<int, std::vector<NDArray>> states;
  std::map<int, std::vector<std::string>> state_names;
  std::map<int, std::int64_t> steps;
  std::map<int, NDArray> masters;
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    if (names[i].rfind(kTypePrefix, 0) == 0) continue;
    int index = 0;
    std::string state;
    if (!ParseStateName(names[i], &index, &state) || state.empty()) {
      throw Error(where + ": entry '" + names[i] + "' is not of the form '<index>:<state>'");
    }
    if (state == kStepState) {
      if (arrays[i].Size() != 1 || arrays[i].dtype() != DType::kInt64) {
        throw Error(where + ": entry '" + names[i] + "' must be one int64 step count");
      }
      steps[index] = arrays[i].ToVector<std::int64_t>()[0];
    } else if (state == kMasterState) {
      masters[index] = arrays[i];
    } else {
      states[index].push_back(arrays[i]);
      state_names[index].push_back(state);
    }
  }
  states_ = std::move(states);
  state_names_ = std::move(state_names);
  steps_ = std::move(steps);
  masters_ = std::move(masters);
  // The schedule's position: MXNet's num_update is the largest count over the indices.
  num_update_ = 0;
  for (const auto& [index, step] : steps_) num_update_ = std::max(num_update_, step);
  states_file_ = path;
}

namespace {

// One array record (MXNDArraySaveRawBytes's bytes: a .params file's record without the list around it).
NDArray ArrayFromRecord(const std::string& record, const std::string& source) {
  NDArray a = NDArray::LoadRawBytes(record.data(), record.size(), source);
  if (a.is_none()) throw Error(source + ": a none array where a state was expected");
  return a;
}

// The layout's description for messages: "None", "an NDArray (momentum)", "a tuple of 2 NDArrays (mean, var)".
std::string Expected(const std::vector<std::string>& names, bool tuple) {
  if (names.empty()) return "None (no state)";
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  if (!tuple) return "an NDArray (" + list + ")";
  return "a tuple of " + std::to_string(names.size()) + " NDArray" + (names.size() == 1 ? "" : "s") + " (" + list +
         ")";
}

}  // namespace

void Optimizer::SaveStates(const std::string& path, StatesFormat format,
                           const std::map<int, std::string>& key_names) const {
  if (format == StatesFormat::kTroupe) {
    SaveTroupeStates(path);
    return;
  }
  using internal::PickleRef;
  using internal::PickleValue;
  PickleRef dict = PickleValue::Dict();
  for (const auto& [index, states] : states_) {
    const auto& names = state_names_.at(index);
    PickleRef value;
    if (states.empty()) {
      value = PickleValue::None();
    } else if (states.size() == 1 && (names[0] == "momentum" || names[0] == "history")) {
      value = PickleValue::NDArray(NDArray::SaveRawBytes(states[0]));  // MXNet's create_state returns the bare array
    } else {
      std::vector<PickleRef> items;
      for (const NDArray& a : states) items.push_back(PickleValue::NDArray(NDArray::SaveRawBytes(a)));
      value = PickleValue::Tuple(std::move(items));
    }
    if (const auto master = masters_.find(index); master != masters_.end()) {
      // multi_precision: MXNet's pair of the float32 weight and the state (MasterLast says in which order).
      PickleRef w = PickleValue::NDArray(NDArray::SaveRawBytes(master->second));
      value = MasterLast(config_.type) ? PickleValue::Tuple({std::move(value), std::move(w)})
                                       : PickleValue::Tuple({std::move(w), std::move(value)});
    }
    const auto name = key_names.find(index);
    if (name == key_names.end()) {
      dict->AddItem(PickleValue::Int(index), std::move(value));
    } else {
      auto key = std::make_shared<PickleValue>();
      key->kind = PickleValue::Kind::kString;
      key->text = name->second;
      dict->AddItem(std::move(key), std::move(value));
    }
  }
  const std::string bytes = internal::WritePickle(*dict);
  // Written next to the target and renamed over it, so a reader never sees half a file.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      throw Error("Optimizer::SaveStates: cannot write " + tmp + "; check the directory and free space");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error("Optimizer::SaveStates: cannot rename " + tmp + " to " + path);
  }
}

void Optimizer::LoadStates(const std::string& path, const std::map<int, std::string>& key_names) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("optimizer states file '" + path + "' cannot be opened; check the path and permissions");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // A pickle starts with PROTO (protocol 2 and later) or, protocol 0 and 1, with MARK or EMPTY_DICT; the
  // .params format with its magic 0x112.
  const unsigned char first = bytes.empty() ? 0 : static_cast<unsigned char>(bytes[0]);
  if (first == 0x80 || first == '(' || first == '}') {
    LoadMXNetStates(path, bytes, key_names);
  } else {
    LoadTroupeStates(path);
  }
}

void Optimizer::LoadMXNetStates(const std::string& path, const std::string& bytes,
                                const std::map<int, std::string>& key_names) {
  using internal::PickleValue;
  using Kind = PickleValue::Kind;
  const std::string where = "optimizer states file '" + path + "'";
  const internal::PickleRef top = internal::ParsePickle(bytes, where);
  if (top->kind != Kind::kDict) {
    throw Error(where + " holds a " + top->Describe() +
                "; MXNet's Module.save_optimizer_states writes a dict parameter index -> state");
  }
  const StateLayout layout = Layout();
  const std::string expected = Expected(layout.names, layout.tuple);
  std::map<int, std::vector<NDArray>> states;
  std::map<int, std::vector<std::string>> state_names;
  std::map<int, NDArray> masters;
  for (std::size_t i = 0; i < top->items.size(); i += 2) {
    const PickleValue& key = *top->items[i];
    const PickleValue& value = *top->items[i + 1];
    int index = -1;
    if (key.kind == Kind::kInt && key.integer >= 0 && key.integer <= INT32_MAX) {
      index = static_cast<int>(key.integer);
    } else if (key.kind == Kind::kString) {
      for (const auto& [i, name] : key_names) {
        if (name == key.text) index = i;
      }
    }
    if (index < 0) {
      std::string known;
      for (const auto& [i, name] : key_names) known += (known.empty() ? "" : ", ") + name;
      throw Error(where + ": key " + key.Describe() + " is not a parameter index (an int >= 0)" +
                  (key_names.empty() ? std::string(" and no parameter names were given")
                                     : " nor the name of a parameter (" + known + ")") +
                  "; MXNet's Module keys its states by index, or by name when a KVStore updates");
    }
    if (states.count(index)) {
      throw Error(where + ": index " + std::to_string(index) + " appears twice (as its index and its name)");
    }
    const std::string at = where + ", index " + std::to_string(index) +
                           (key.kind == Kind::kString ? " ('" + key.text + "')" : "");
    // The arrays of a state when it has the layout, else empty with *ok false.
    const auto parse = [&](const PickleValue& v, std::vector<const PickleValue*>* arrays) {
      arrays->clear();
      if (layout.names.empty()) return v.kind == Kind::kNone;
      if (!layout.tuple) {
        arrays->push_back(&v);
        return v.kind == Kind::kNDArray;
      }
      if (v.kind != Kind::kTuple || v.items.size() != layout.names.size()) return false;
      bool all = true;
      for (const auto& e : v.items) {
        all = all && e->kind == Kind::kNDArray;
        arrays->push_back(e.get());
      }
      return all;
    };
    std::vector<const PickleValue*> arrays;
    bool ok = parse(value, &arrays);
    // multi_precision: MXNet's pair of the float32 weight and the state of a half-precision weight.
    const PickleValue* master = nullptr;
    if (!ok && multi_precision_ && value.kind == Kind::kTuple && value.items.size() == 2) {
      const std::size_t w = MasterLast(config_.type) ? 1 : 0;
      if (value.items[w]->kind == Kind::kNDArray && parse(*value.items[1 - w], &arrays)) {
        ok = true;
        master = value.items[w].get();
      }
    }
    if (!ok) {
      std::string holds = value.Describe();
      if (value.kind == Kind::kTuple) {
        holds += " (";
        for (std::size_t j = 0; j < value.items.size(); ++j) holds += (j ? ", " : "") + value.items[j]->Describe();
        holds += ")";
      }
      std::string hint;
      if (value.kind == Kind::kTuple && value.items.size() == 2 && value.items[0]->kind == Kind::kNDArray) {
        hint = multi_precision_ ? "" : "; a pair (float32 weight, state) is multi_precision training's state of a "
                                       "float16 weight: create the optimizer with multi_precision=True";
      }
      throw Error(at + " holds " + holds + ", but optimizer '" + config_.type + "' with these parameters keeps " +
                  expected + "; were the states saved by another optimizer or with other parameters" +
                  (config_.type == "sgd" || config_.type == "nag" ? " (momentum 0 keeps none)" : "") + "?" + hint);
    }
    std::vector<NDArray> loaded;
    for (std::size_t j = 0; j < arrays.size(); ++j) {
      const std::string what = at + " (" + layout.names[j] + ")";
      if (arrays[j]->text.empty()) throw Error(what + ": the NDArray has no data (handle None)");
      NDArray a = ArrayFromRecord(arrays[j]->text, what);
      if (a.dtype() != DType::kFloat32 && a.dtype() != DType::kFloat64) {
        throw Error(what + ": dtype " + std::string(DTypeName(a.dtype())) +
                    "; troupe's optimizers keep float32 and float64 states");
      }
      if (j > 0 && a.shape() != loaded[0].shape()) {
        throw Error(what + ": shape " + a.shape().ToString() + " differs from " + layout.names[0] + "'s " +
                    loaded[0].shape().ToString() + "; every state of an index has the weight's shape");
      }
      loaded.push_back(std::move(a));
    }
    states[index] = std::move(loaded);
    state_names[index] = layout.names;
    if (master != nullptr) {
      if (master->text.empty()) throw Error(at + " (float32 weight): the NDArray has no data (handle None)");
      NDArray w = ArrayFromRecord(master->text, at + " (float32 weight)");
      if (w.dtype() != DType::kFloat32) {
        throw Error(at + " (float32 weight): dtype " + std::string(DTypeName(w.dtype())) + "; multi_precision keeps float32");
      }
      masters[index] = std::move(w);
    }
  }
  states_ = std::move(states);
  state_names_ = std::move(state_names);
  masters_ = std::move(masters);
  // MXNet's states carry no update counts: every index starts again from zero, as after MXNet's
  // load_optimizer_states into a fresh optimizer.
  steps_.clear();
  num_update_ = 0;
  states_file_ = path;
}

}  // namespace troupe
