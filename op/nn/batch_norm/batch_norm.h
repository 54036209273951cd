// BatchNorm: data, gamma, beta; aux moving_mean, moving_var; outputs output, mean, var. The parameter struct
// and the property, shared by the CPU operator (batch_norm.cc) and the cuDNN one (batch_norm.cu).
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
  // gamma, beta, the moving statistics and the hidden mean/var outputs are float32 when data is float16 or
  // bfloat16 (as MXNet's AMP expects), else data's type.
  bool InferType(std::vector<int>* in_type, std::vector<int>* out_type, std::vector<int>* aux_type) const override;
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

}  // namespace troupe
