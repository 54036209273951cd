// Activations, normalisation, dropout, softmax and the loss heads: parameter structs, operator
// properties and the elementwise math the CPU (op/nn/*.cc) and CUDA (op/nn/act_norm.cu) versions
// share, so both devices compute the same formulas.
//
//   Activation            relu, sigmoid, tanh, softrelu, softsign
//   LeakyReLU             leaky, elu, prelu (data, gamma), selu, gelu, rrelu (random slope, kRandom)
//   BatchNorm             data, gamma, beta; aux moving_mean, moving_var; outputs output, mean, var
//   Dropout               output, hidden mask (kRandom)
//   softmax, log_softmax  over any axis, with temperature
//   SoftmaxOutput         (alias Softmax), LinearRegressionOutput, LogisticRegressionOutput,
//                         MAERegressionOutput: loss heads whose Backward ignores out_grad
//
// Names, parameters and defaults are MXNet 1.9's, so symbol JSON maps onto them. Properties are immutable
// after Init (thread-safe to share); the Operator objects they create keep per-shape state and are entered
// by one engine function at a time (op/operator.h).
//
// This header compiles under nvcc (-std=c++20): it includes no CAF or Cap'n Proto headers.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "op/internal/op_util.h"
#include "tensor/detail/philox.h"
#include "op/operator.h"
#include "op/param.h"
#include "tensor/tensor.h"

namespace troupe {

namespace act_norm {

// Math on float or double with the C library's functions (available on host and device).
template <typename T>
TROUPE_HOST_DEVICE inline T Exp(T x) {
  if constexpr (sizeof(T) == 4) return expf(x); else return exp(x);
}
template <typename T>
TROUPE_HOST_DEVICE inline T Expm1(T x) {
  if constexpr (sizeof(T) == 4) return expm1f(x); else return expm1(x);
}
template <typename T>
TROUPE_HOST_DEVICE inline T Log1p(T x) {
  if constexpr (sizeof(T) == 4) return log1pf(x); else return log1p(x);
}
template <typename T>
TROUPE_HOST_DEVICE inline T Log(T x) {
  if constexpr (sizeof(T) == 4) return logf(x); else return log(x);
}
template <typename T>
TROUPE_HOST_DEVICE inline T Tanh(T x) {
  if constexpr (sizeof(T) == 4) return tanhf(x); else return tanh(x);
}
template <typename T>
TROUPE_HOST_DEVICE inline T Erf(T x) {
  if constexpr (sizeof(T) == 4) return erff(x); else return erf(x);
}
template <typename T>
TROUPE_HOST_DEVICE inline T Sqrt(T x) {
  if constexpr (sizeof(T) == 4) return sqrtf(x); else return sqrt(x);
}
template <typename T>
TROUPE_HOST_DEVICE inline T Abs(T x) {
  return x < T(0) ? -x : x;
}

// ---- Activation ----
enum class ActType : int { kReLU, kSigmoid, kTanh, kSoftReLU, kSoftSign };

template <typename T>
TROUPE_HOST_DEVICE inline T ActForward(ActType t, T x) {
  switch (t) {
    case ActType::kReLU: return x > T(0) ? x : T(0);
    case ActType::kSigmoid: return T(1) / (T(1) + Exp(-x));
    case ActType::kTanh: return Tanh(x);
    // log(1 + e^x), linear above 20 where the log would only lose precision (mshadow_op::softrelu).
    case ActType::kSoftReLU: return x > T(20) ? x : Log1p(Exp(x));
    case ActType::kSoftSign: return x / (T(1) + Abs(x));
  }
  return x;
}
// d out / d in, from the output y (relu, sigmoid, tanh, softrelu) or the input x (softsign), as MXNet.
template <typename T>
TROUPE_HOST_DEVICE inline T ActGrad(ActType t, T v) {
  switch (t) {
    case ActType::kReLU: return v > T(0) ? T(1) : T(0);
    case ActType::kSigmoid: return v * (T(1) - v);
    case ActType::kTanh: return T(1) - v * v;
    case ActType::kSoftReLU: return -Expm1(-v);  // sigmoid(x) = 1 - exp(-softrelu(x))
    case ActType::kSoftSign: {
      const T d = T(1) + Abs(v);
      return T(1) / (d * d);
    }
  }
  return T(0);
}
inline bool ActGradFromInput(ActType t) { return t == ActType::kSoftSign; }
// Calls fn(std::integral_constant<ActType, t>{}): loops inside fn see the type as a constant, so the
// switch of ActForward/ActGrad leaves them and the compiler can vectorise them.
template <typename Fn>
void ActSwitch(ActType t, Fn&& fn) {
  switch (t) {
    case ActType::kReLU: return fn(std::integral_constant<ActType, ActType::kReLU>{});
    case ActType::kSigmoid: return fn(std::integral_constant<ActType, ActType::kSigmoid>{});
    case ActType::kTanh: return fn(std::integral_constant<ActType, ActType::kTanh>{});
    case ActType::kSoftReLU: return fn(std::integral_constant<ActType, ActType::kSoftReLU>{});
    case ActType::kSoftSign: return fn(std::integral_constant<ActType, ActType::kSoftSign>{});
  }
}

// ---- LeakyReLU ----
enum class LeakyType : int { kLeaky, kELU, kPReLU, kRReLU, kSELU, kGELU };
constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
constexpr double kSeluLambda = 1.0507009873554804934193349852946;

// leaky, elu, selu, gelu forward; prelu/rrelu use leaky with their own slope.
template <typename T>
TROUPE_HOST_DEVICE inline T LeakyForward(LeakyType t, T x, T slope) {
  switch (t) {
    case LeakyType::kELU: return x > T(0) ? x : slope * Expm1(x);
    case LeakyType::kSELU: return T(kSeluLambda) * (x > T(0) ? x : T(kSeluAlpha) * Expm1(x));
    case LeakyType::kGELU: return T(0.5) * x * (T(1) + Erf(x * T(0.70710678118654752440)));
    default: return x > T(0) ? x : slope * x;
  }
}
// Gradient factor: leaky, elu, selu and rrelu from the output y (as MXNet), gelu from the input x.
template <typename T>
TROUPE_HOST_DEVICE inline T LeakyGrad(LeakyType t, T v, T slope) {
  switch (t) {
    case LeakyType::kELU: return v > T(0) ? T(1) : v + slope;  // slope * e^x = y + slope
    case LeakyType::kSELU: return v > T(0) ? T(kSeluLambda) : v + T(kSeluAlpha * kSeluLambda);
    case LeakyType::kGELU: {
      const T c = T(0.70710678118654752440);  // 1/sqrt(2)
      const T pdf = T(0.56418958354775628695) * Exp(-(v * c) * (v * c));  // erf'(z)/2 = exp(-z^2)/sqrt(pi)
      return T(0.5) * (T(1) + Erf(v * c)) + v * c * pdf;
    }
    default: return v > T(0) ? T(1) : slope;
  }
}

// ---- random numbers (Dropout, rrelu) ----
// A uniform number in [0, 1) for element i of a draw that Reserve()d RandomBlocks(n) blocks at `base`:
// the same Philox words as internal::CpuSample/GpuSample's uniform float fill, on both devices.
TROUPE_HOST_DEVICE inline float UniformAt(std::uint64_t key, std::uint64_t base, std::uint64_t i) {
  return static_cast<float>(internal::PhiloxWord(key, base, i) >> 8) * (1.0f / 16777216.0f);
}
inline std::uint64_t RandomBlocks(std::int64_t n) { return (static_cast<std::uint64_t>(n) + 3) / 4; }

// ---- layout helpers ----
// A tensor seen as (outer, n, inner) around one axis.
struct AxisView {
  std::int64_t outer = 1, n = 1, inner = 1;
};
inline AxisView ViewAround(const TShape& s, int axis) {
  AxisView v;
  v.outer = s.ProdDims(0, axis);
  v.n = s[axis];
  v.inner = s.ProdDims(axis + 1, s.ndim());
  return v;
}
}  // namespace act_norm

// ============================================================================================ Activation
struct ActivationParam : Params<ActivationParam> {
  std::string act_type;
  static void Declare(ParamSchema<ActivationParam>& s) {
    s.Field("act_type", &ActivationParam::act_type)
        .Choices({"relu", "sigmoid", "softrelu", "softsign", "tanh"})
        .Describe("Activation function to be applied.");
  }
  act_norm::ActType type() const;
};

class ActivationProp : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override { param_.Init(kwargs, "Activation"); }
  Kwargs GetParams() const override { return param_.GetParams(); }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<ActivationProp>(*this); }
  std::string TypeString() const override { return "Activation"; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override;
  std::vector<std::pair<int, void*>> ForwardInplaceOption(const std::vector<int>& in_data,
                                                          const std::vector<void*>& out_data) const override;
  std::vector<std::pair<int, void*>> BackwardInplaceOption(const std::vector<int>& out_grad,
                                                           const std::vector<int>& in_data,
                                                           const std::vector<int>& out_data,
                                                           const std::vector<void*>& in_grad) const override;
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override;
  const ActivationParam& param() const { return param_; }

 private:
  ActivationParam param_;
};

// ============================================================================================= LeakyReLU
struct LeakyReLUParam : Params<LeakyReLUParam> {
  std::string act_type = "leaky";
  float slope = 0.25f;
  float lower_bound = 0.125f;
  float upper_bound = 0.334f;
  static void Declare(ParamSchema<LeakyReLUParam>& s) {
    s.Field("act_type", &LeakyReLUParam::act_type)
        .Default("leaky")
        .Choices({"elu", "gelu", "leaky", "prelu", "rrelu", "selu"})
        .Describe("Activation function to be applied.");
    s.Field("slope", &LeakyReLUParam::slope).Default(0.25f).Describe("Init slope for the activation (leaky, elu).");
    s.Field("lower_bound", &LeakyReLUParam::lower_bound)
        .Default(0.125f)
        .Describe("Lower bound of the random slope (rrelu only).");
    s.Field("upper_bound", &LeakyReLUParam::upper_bound)
        .Default(0.334f)
        .Describe("Upper bound of the random slope (rrelu only).");
  }
  act_norm::LeakyType type() const;
};

class LeakyReLUProp : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override;
  Kwargs GetParams() const override { return param_.GetParams(); }
  std::vector<std::string> ListArguments() const override;
  std::vector<std::string> ListOutputs() const override;
  int NumVisibleOutputs() const override { return 1; }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<LeakyReLUProp>(*this); }
  std::string TypeString() const override { return "LeakyReLU"; }
  std::vector<ResourceRequest> ForwardResource(const std::vector<TShape>& in_shape) const override;
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override;
  std::vector<std::pair<int, void*>> ForwardInplaceOption(const std::vector<int>& in_data,
                                                          const std::vector<void*>& out_data) const override;
  std::vector<std::pair<int, void*>> BackwardInplaceOption(const std::vector<int>& out_grad,
                                                           const std::vector<int>& in_data,
                                                           const std::vector<int>& out_data,
                                                           const std::vector<void*>& in_grad) const override;
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override;
  const LeakyReLUParam& param() const { return param_; }

 private:
  LeakyReLUParam param_;
};

// ============================================================================================= BatchNorm
struct BatchNormParam : Params<BatchNormParam> {
  double eps = 1e-3;
  float momentum = 0.9f;
  bool fix_gamma = true;
  bool use_global_stats = false;
  bool output_mean_var = false;
  int axis = 1;
  bool cudnn_off = false;
  std::optional<float> min_calib_range, max_calib_range;
  static void Declare(ParamSchema<BatchNormParam>& s) {
    s.Field("eps", &BatchNormParam::eps)
        .Default(1e-3)
        .LowerBound(0)
        .Describe("Epsilon to prevent division by 0.");
    s.Field("momentum", &BatchNormParam::momentum)
        .Default(0.9f)
        .Range(0, 1)
        .Describe("Momentum for the moving average: moving = moving * momentum + batch * (1 - momentum).");
    s.Field("fix_gamma", &BatchNormParam::fix_gamma).Default(true).Describe("Fix gamma to 1 (its gradient is 0).");
    s.Field("use_global_stats", &BatchNormParam::use_global_stats)
        .Default(false)
        .Describe("Use the moving statistics instead of the batch's also in training (freezes the statistics).");
    s.Field("output_mean_var", &BatchNormParam::output_mean_var)
        .Default(false)
        .Describe("Output the mean and the inverse standard deviation as visible outputs too.");
    s.Field("axis", &BatchNormParam::axis).Default(1).Describe("The channel axis (negative counts from the end).");
    s.Field("cudnn_off", &BatchNormParam::cudnn_off).Default(false).Describe("Do not use cuDNN on the GPU.");
    s.Field("min_calib_range", &BatchNormParam::min_calib_range)
        .Default(std::nullopt)
        .Describe("Calibrated minimum (quantized graphs only; accepted and ignored).");
    s.Field("max_calib_range", &BatchNormParam::max_calib_range)
        .Default(std::nullopt)
        .Describe("Calibrated maximum (quantized graphs only; accepted and ignored).");
  }
};

class BatchNormProp : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override { param_.Init(kwargs, "BatchNorm"); }
  Kwargs GetParams() const override { return param_.GetParams(); }
  std::vector<std::string> ListArguments() const override { return {"data", "gamma", "beta"}; }
  std::vector<std::string> ListOutputs() const override { return {"output", "mean", "var"}; }
  std::vector<std::string> ListAuxiliaryStates() const override { return {"moving_mean", "moving_var"}; }
  int NumOutputs() const override { return 3; }
  int NumVisibleOutputs() const override { return param_.output_mean_var ? 3 : 1; }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<BatchNormProp>(*this); }
  std::string TypeString() const override { return "BatchNorm"; }
  std::vector<ResourceRequest> ForwardResource(const std::vector<TShape>& in_shape) const override;
  std::vector<ResourceRequest> BackwardResource(const std::vector<TShape>& in_shape) const override;
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override;
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override;
  const BatchNormParam& param() const { return param_; }

 private:
  BatchNormParam param_;
};

// =============================================================================================== Dropout
struct DropoutParam : Params<DropoutParam> {
  float p = 0.5f;
  std::string mode = "training";
  TShape axes = TShape::Scalar();
  std::optional<bool> cudnn_off = false;
  static void Declare(ParamSchema<DropoutParam>& s) {
    s.Field("p", &DropoutParam::p).Default(0.5f).Range(0, 1).Describe("Fraction of the input that gets dropped out.");
    s.Field("mode", &DropoutParam::mode)
        .Default("training")
        .Choices({"always", "training"})
        .Describe("Whether to drop only in training ('training') or also at inference ('always').");
    s.Field("axes", &DropoutParam::axes)
        .Default(TShape::Scalar())
        .Describe("Axes along which one mask value is shared (variational dropout).");
    s.Field("cudnn_off", &DropoutParam::cudnn_off)
        .Default(false)
        .Describe("Do not use cuDNN (troupe's dropout never does; accepted for compatibility).");
  }
};

class DropoutProp : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override { param_.Init(kwargs, "Dropout"); }
  Kwargs GetParams() const override { return param_.GetParams(); }
  std::vector<std::string> ListOutputs() const override { return {"output", "mask"}; }
  int NumOutputs() const override { return 2; }
  int NumVisibleOutputs() const override { return 1; }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<DropoutProp>(*this); }
  std::string TypeString() const override { return "Dropout"; }
  std::vector<ResourceRequest> ForwardResource(const std::vector<TShape>&) const override {
    return {ResourceRequest::kRandom};
  }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override;
  std::vector<std::pair<int, void*>> ForwardInplaceOption(const std::vector<int>& in_data,
                                                          const std::vector<void*>& out_data) const override;
  std::vector<std::pair<int, void*>> BackwardInplaceOption(const std::vector<int>& out_grad,
                                                           const std::vector<int>& in_data,
                                                           const std::vector<int>& out_data,
                                                           const std::vector<void*>& in_grad) const override;
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override;
  const DropoutParam& param() const { return param_; }

 private:
  DropoutParam param_;
};

// Index of the mask element for data element i when the mask has size 1 along some axes (Dropout's
// `axes`): strides of the data and of the mask, up to TShape::kMaxDims dimensions.
struct BroadcastIndex {
  int ndim = 0;
  std::int64_t data_stride[TShape::kMaxDims] = {};
  std::int64_t mask_stride[TShape::kMaxDims] = {};  // 0 along broadcast axes
  bool identity = true;
  TROUPE_HOST_DEVICE std::int64_t operator()(std::int64_t i) const {
    if (identity) return i;
    std::int64_t m = 0;
    for (int d = 0; d < ndim; ++d) {
      const std::int64_t q = i / data_stride[d];
      i -= q * data_stride[d];
      m += q * mask_stride[d];
    }
    return m;
  }
};
BroadcastIndex MakeBroadcastIndex(const TShape& data, const TShape& mask);

// ====================================================================================== softmax family
struct SoftmaxParam : Params<SoftmaxParam> {
  int axis = -1;
  std::optional<double> temperature;
  std::optional<std::string> dtype;
  std::optional<bool> use_length = false;
  static void Declare(ParamSchema<SoftmaxParam>& s) {
    s.Field("axis", &SoftmaxParam::axis).Default(-1).Describe("The axis along which to compute softmax.");
    s.Field("temperature", &SoftmaxParam::temperature)
        .Default(std::nullopt)
        .Describe("Temperature parameter in softmax (None means 1).");
    s.Field("dtype", &SoftmaxParam::dtype)
        .Default(std::nullopt)
        .Choices({"None", "float16", "float32", "float64"})
        .Describe("Output type (None: the input's). Must equal the input's type in troupe.");
    s.Field("use_length", &SoftmaxParam::use_length)
        .Default(false)
        .Describe("Whether to use the length input as a mask (not supported by troupe; must be False).");
  }
};

// softmax and log_softmax: one property, `log` picks which.
class SoftmaxProp : public OperatorProperty {
 public:
  explicit SoftmaxProp(bool log = false) : log_(log) {}
  void Init(const Kwargs& kwargs) override;
  Kwargs GetParams() const override { return param_.GetParams(); }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  bool InferType(std::vector<int>* in_type, std::vector<int>* out_type, std::vector<int>* aux_type) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<SoftmaxProp>(*this); }
  std::string TypeString() const override { return log_ ? "log_softmax" : "softmax"; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override;
  std::vector<std::pair<int, void*>> ForwardInplaceOption(const std::vector<int>& in_data,
                                                          const std::vector<void*>& out_data) const override;
  std::vector<std::pair<int, void*>> BackwardInplaceOption(const std::vector<int>& out_grad,
                                                           const std::vector<int>& in_data,
                                                           const std::vector<int>& out_data,
                                                           const std::vector<void*>& in_grad) const override;
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override;
  const SoftmaxParam& param() const { return param_; }
  bool log() const { return log_; }
  double temperature() const { return param_.temperature.value_or(1.0); }

 private:
  SoftmaxParam param_;
  bool log_ = false;
};

struct SoftmaxOutputParam : Params<SoftmaxOutputParam> {
  float grad_scale = 1.0f;
  float ignore_label = -1.0f;
  bool multi_output = false;
  bool use_ignore = false;
  bool preserve_shape = false;
  std::string normalization = "null";
  bool out_grad = false;
  float smooth_alpha = 0.0f;
  static void Declare(ParamSchema<SoftmaxOutputParam>& s) {
    s.Field("grad_scale", &SoftmaxOutputParam::grad_scale).Default(1.0f).Describe("Scales the gradient by a float factor.");
    s.Field("ignore_label", &SoftmaxOutputParam::ignore_label)
        .Default(-1.0f)
        .Describe("The instances whose labels equal ignore_label get no gradient (with use_ignore).");
    s.Field("multi_output", &SoftmaxOutputParam::multi_output)
        .Default(false)
        .Describe("Softmax over axis 1 of (n, c, x1, ...) with labels (n, x1, ...).");
    s.Field("use_ignore", &SoftmaxOutputParam::use_ignore)
        .Default(false)
        .Describe("Whether labels equal to ignore_label get no gradient.");
    s.Field("preserve_shape", &SoftmaxOutputParam::preserve_shape)
        .Default(false)
        .Describe("Softmax over the last axis keeping the input's shape (labels: all but the last axis).");
    s.Field("normalization", &SoftmaxOutputParam::normalization)
        .Default("null")
        .Choices({"batch", "null", "valid"})
        .Describe("Gradient normalisation: none, by batch size, or by the number of labels not ignored.");
    s.Field("out_grad", &SoftmaxOutputParam::out_grad)
        .Default(false)
        .Describe("Multiply the gradient by the output's incoming gradient.");
    s.Field("smooth_alpha", &SoftmaxOutputParam::smooth_alpha)
        .Default(0.0f)
        .LowerBound(0)
        .Describe("Label smoothing: the true class gets 1 - alpha, the others alpha / (classes - 1).");
  }
};

class SoftmaxOutputProp : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override { param_.Init(kwargs, "SoftmaxOutput"); }
  Kwargs GetParams() const override { return param_.GetParams(); }
  std::vector<std::string> ListArguments() const override { return {"data", "label"}; }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<SoftmaxOutputProp>(*this); }
  std::string TypeString() const override { return "SoftmaxOutput"; }
  std::vector<ResourceRequest> BackwardResource(const std::vector<TShape>& in_shape) const override;
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override;
  std::vector<std::pair<int, void*>> ForwardInplaceOption(const std::vector<int>& in_data,
                                                          const std::vector<void*>& out_data) const override;
  std::vector<std::pair<int, void*>> BackwardInplaceOption(const std::vector<int>& out_grad,
                                                           const std::vector<int>& in_data,
                                                           const std::vector<int>& out_data,
                                                           const std::vector<void*>& in_grad) const override;
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override;
  const SoftmaxOutputParam& param() const { return param_; }

  // How the data is seen: softmax over `n` of (outer, n, inner); the label has outer * inner entries
  // (hard labels) or the data's size (soft labels, a probability per class).
  act_norm::AxisView View(const TShape& data) const;

 private:
  SoftmaxOutputParam param_;
};

// ===================================================================================== regression heads
enum class RegressionKind : int { kLinear, kLogistic, kMAE };

struct RegressionOutputParam : Params<RegressionOutputParam> {
  float grad_scale = 1.0f;
  static void Declare(ParamSchema<RegressionOutputParam>& s) {
    s.Field("grad_scale", &RegressionOutputParam::grad_scale)
        .Default(1.0f)
        .Describe("Scale the gradient by a float factor.");
  }
};

class RegressionOutputProp : public OperatorProperty {
 public:
  explicit RegressionOutputProp(RegressionKind kind = RegressionKind::kLinear) : kind_(kind) {}
  void Init(const Kwargs& kwargs) override { param_.Init(kwargs, TypeString()); }
  Kwargs GetParams() const override { return param_.GetParams(); }
  std::vector<std::string> ListArguments() const override { return {"data", "label"}; }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<RegressionOutputProp>(*this); }
  std::string TypeString() const override;
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override;
  std::vector<std::pair<int, void*>> ForwardInplaceOption(const std::vector<int>& in_data,
                                                          const std::vector<void*>& out_data) const override;
  std::vector<std::pair<int, void*>> BackwardInplaceOption(const std::vector<int>& out_grad,
                                                           const std::vector<int>& in_data,
                                                           const std::vector<int>& out_data,
                                                           const std::vector<void*>& in_grad) const override;
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override;
  const RegressionOutputParam& param() const { return param_; }
  RegressionKind kind() const { return kind_; }

 private:
  RegressionOutputParam param_;
  RegressionKind kind_;
};

namespace act_norm {
// Regression forward (identity or sigmoid) and the gradient term (out - label, or its sign for MAE).
template <typename T>
TROUPE_HOST_DEVICE inline T RegressionForward(RegressionKind k, T x) {
  return k == RegressionKind::kLogistic ? T(1) / (T(1) + Exp(-x)) : x;
}
template <typename T>
TROUPE_HOST_DEVICE inline T RegressionGrad(RegressionKind k, T out, T label) {
  const T d = out - label;
  if (k == RegressionKind::kMAE) return d > T(0) ? T(1) : T(-1);  // mshadow_op::minus_sign
  return d;
}
}  // namespace act_norm

}  // namespace troupe
