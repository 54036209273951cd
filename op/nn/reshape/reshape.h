// Flatten and Reshape (MXNet 1.9's names, parameters and shape rules, special values included): parameter
// structs and properties, shared by the CPU operators (reshape.cc) and the CUDA ones (reshape.cu).
//
// Properties are immutable after Init (thread-safe to share); helpers are pure functions. Compiles under
// nvcc (the .cu file includes it): no CAF or Cap'n Proto, and what runs in kernels is TROUPE_HOST_DEVICE.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "op/internal/op_util.h"
#include "op/operator.h"
#include "op/param.h"
#include "tensor/tensor.h"

namespace troupe {

// ---- Flatten ----

struct FlattenParam : Params<FlattenParam> {
  static void Declare(ParamSchema<FlattenParam>&) {}
};

// (d0, d1, ..., dk) -> (d0, d1 * ... * dk); the data is not moved, forward and backward are copies (nothing
// at all when run in place).
// What Flatten and Reshape share: the output is the input's data under another shape, so both directions
// may run in place (a copy, or nothing when the memory is shared) and backward reads only out_grad.
class ReshapeLikeProp : public OperatorProperty {
 public:
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& /*in_data*/,
                                             const std::vector<int>& /*out_data*/) const override {
    return {out_grad[0]};
  }
  std::vector<std::pair<int, void*>> ForwardInplaceOption(const std::vector<int>& in_data,
                                                          const std::vector<void*>& out_data) const override {
    return {{in_data[0], out_data[0]}};
  }
  bool ForwardInplaceIdentity() const override { return true; }
  std::vector<std::pair<int, void*>> BackwardInplaceOption(const std::vector<int>& out_grad,
                                                           const std::vector<int>& /*in_data*/,
                                                           const std::vector<int>& /*out_data*/,
                                                           const std::vector<void*>& in_grad) const override {
    return {{out_grad[0], in_grad[0]}};
  }
};

class FlattenProp : public ReshapeLikeProp {
 public:
  void Init(const Kwargs& kwargs) override { param_.Init(kwargs, "Flatten"); }
  Kwargs GetParams() const override { return param_.GetParams(); }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<FlattenProp>(*this); }
  std::string TypeString() const override { return "Flatten"; }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override;

 private:
  FlattenParam param_;
};

// ---- Reshape ----

struct ReshapeParam : Params<ReshapeParam> {
  std::vector<std::int64_t> shape;
  bool reverse = false;
  std::vector<std::int64_t> target_shape;  // deprecated in MXNet; kept so old symbol files load
  bool keep_highest = false;               // deprecated, with target_shape
  static void Declare(ParamSchema<ReshapeParam>& s) {
    s.Field("shape", &ReshapeParam::shape)
        .Default({})
        .Describe("The target shape. Special values: 0 copies this dimension of the input, -1 infers it from the "
                  "rest, -2 copies all remaining dimensions, -3 merges two input dimensions, -4 splits one input "
                  "dimension into the next two values (one of which may be -1).");
    s.Field("reverse", &ReshapeParam::reverse)
        .Default(false)
        .Describe("If true then the special values are inferred from right to left.");
    s.Field("target_shape", &ReshapeParam::target_shape)
        .Default({})
        .Describe("(Deprecated! Use shape instead.) Target new shape; one and only one dimension can be 0, which "
                  "is then inferred.");
    s.Field("keep_highest", &ReshapeParam::keep_highest)
        .Default(false)
        .Describe("(Deprecated! Use shape instead.) With target_shape: keep the first dimension of the input "
                  "and ignore the first of target_shape.");
  }
};

// The output shape of Reshape for a known input shape (MXNet's InferReshapeShape, with the size check).
// Throws troupe::Error naming "Reshape", the 'shape' parameter and the input shape.
TShape ReshapeOutputShape(const ReshapeParam& param, const TShape& in);

class ReshapeProp : public ReshapeLikeProp {
 public:
  void Init(const Kwargs& kwargs) override;
  Kwargs GetParams() const override { return param_.GetParams(); }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<ReshapeProp>(*this); }
  std::string TypeString() const override { return "Reshape"; }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override;
  const ReshapeParam& param() const { return param_; }

 private:
  ReshapeParam param_;
};

}  // namespace troupe
