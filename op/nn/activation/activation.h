// Activation: relu, sigmoid, tanh, softrelu, softsign. The element formulas (forward, and the gradient from
// the output or, for softsign, the input), the parameter struct and the property, shared by the CPU operator
// (activation.cc) and the CUDA one (activation.cu).
//
// Names, parameters and defaults are MXNet 1.9's, so symbol JSON maps onto them. Properties are immutable
// after Init (thread-safe to share); the Operator objects they create keep per-shape state and are entered
// by one engine function at a time (op/operator.h). Compiles under nvcc (-std=c++20): no CAF or Cap'n Proto.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "op/internal/op_util.h"
#include "op/nn/common/device_math.h"
#include "op/operator.h"
#include "op/param.h"
#include "tensor/tensor.h"
#include <type_traits>

namespace troupe {

namespace act_norm {

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

}  // namespace act_norm

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

}  // namespace troupe
