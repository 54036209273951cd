// The regression heads LinearRegressionOutput, LogisticRegressionOutput and MAERegressionOutput: loss heads
// whose Backward ignores out_grad. The parameter struct, the property and the element formulas, shared by
// the CPU operators (regression_output.cc) and the CUDA ones (regression_output.cu).
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
