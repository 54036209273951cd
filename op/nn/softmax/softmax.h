// The softmax family: softmax and log_softmax (over any axis, with temperature and an output dtype; softmax
// also with MXNet's use_length mask) and SoftmaxOutput (alias Softmax; a loss head whose Backward ignores
// out_grad). Parameter structs and properties, shared by the CPU operators (softmax.cc) and the CUDA ones
// (softmax.cu; the length mask and a dtype other than the input's are CPU only).
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
        .Describe("Output type (None: the input's); float32 and float64 are computed.");
    s.Field("use_length", &SoftmaxParam::use_length)
        .Default(false)
        .Describe("Whether to use the length input (int32 or int64, one per row) as a mask over the data: each row "
                  "covers its first length entries, the others are 0 and get no gradient. softmax only, on the CPU.");
  }
};

// softmax and log_softmax: one property, `log` picks which.
class SoftmaxProp : public OperatorProperty {
 public:
  explicit SoftmaxProp(bool log = false) : log_(log) {}
  void Init(const Kwargs& kwargs) override;
  Kwargs GetParams() const override { return param_.GetParams(); }
  std::vector<std::string> ListArguments() const override;
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
  bool use_length() const { return param_.use_length.value_or(false); }

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

}  // namespace troupe
