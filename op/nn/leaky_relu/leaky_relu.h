// LeakyReLU: leaky, elu, prelu (data, gamma), selu, gelu, rrelu (random slope, kRandom). The element
// formulas, the parameter struct and the property, shared by the CPU operator (leaky_relu.cc) and the CUDA
// one (leaky_relu.cu).
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

namespace troupe {

namespace act_norm {

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

}  // namespace act_norm

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

}  // namespace troupe
