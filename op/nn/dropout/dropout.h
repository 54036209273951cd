// Dropout: output and a hidden mask (kRandom), the mask optionally shared along axes. The parameter struct,
// the property and the mask's broadcast index, shared by the CPU operator (dropout.cc) and the CUDA one
// (dropout.cu).
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

}  // namespace troupe
