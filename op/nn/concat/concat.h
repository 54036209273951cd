// Concat (MXNet 1.9's name and parameters): the parameter struct, the property and the slab view of the
// inputs inside the output, shared by the CPU operator (concat.cc) and the CUDA one (concat.cu).
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

// ---- Concat ----

struct ConcatParam : Params<ConcatParam> {
  int num_args = 0;
  int dim = 1;
  static void Declare(ParamSchema<ConcatParam>& s) {
    s.Field("num_args", &ConcatParam::num_args).LowerBound(1).Describe("Number of inputs to be concatenated.");
    s.Field("dim", &ConcatParam::dim)
        .Default(1)
        .Describe("the dimension to be concated (negative counts from the end).");
  }
};

class ConcatProp : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override { param_.Init(kwargs, "Concat"); }
  Kwargs GetParams() const override { return param_.GetParams(); }
  std::vector<std::string> ListArguments() const override;
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<ConcatProp>(*this); }
  std::string TypeString() const override { return "Concat"; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& /*in_data*/,
                                             const std::vector<int>& /*out_data*/) const override {
    return {out_grad[0]};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override;
  const ConcatParam& param() const { return param_; }

 private:
  ConcatParam param_;
};

// The copy pattern of Concat on one input, shared by both devices: `outer` rows; input row r (width
// `width`, contiguous) sits at out offset r * out_row + offset.
struct ConcatSlab {
  std::int64_t outer = 0, width = 0, out_row = 0, offset = 0;
};
// One slab per input of blobs `in` concatenated into `out` along `dim` (already normalised).
std::vector<ConcatSlab> ConcatSlabs(const std::vector<TShape>& in, const TShape& out, int dim);

}  // namespace troupe
