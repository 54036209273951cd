// Embedding (MXNet 1.9's name and parameters): the index rule, the parameter struct and the property, shared
// by the CPU operator (embedding.cc) and the CUDA one (embedding.cu).
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

namespace tensor_ops {

// Embedding's index rule (MXNet's take with clip mode): the value truncated to an integer, clamped into
// [0, input_dim - 1]; NaN gives 0.
template <typename I>
TROUPE_HOST_DEVICE inline std::int64_t ClipIndex(I v, std::int64_t input_dim) {
  const double x = static_cast<double>(v);
  if (!(x > 0)) return 0;  // negatives, zero and NaN
  if (x >= static_cast<double>(input_dim - 1)) return input_dim - 1;
  return static_cast<std::int64_t>(x);
}

}  // namespace tensor_ops

// ---- Embedding ----

struct EmbeddingParam : Params<EmbeddingParam> {
  int input_dim = 0;
  int output_dim = 0;
  std::string dtype = "float32";
  bool sparse_grad = false;
  static void Declare(ParamSchema<EmbeddingParam>& s) {
    s.Field("input_dim", &EmbeddingParam::input_dim)
        .LowerBound(1)
        .Describe("Vocabulary size of the input indices.");
    s.Field("output_dim", &EmbeddingParam::output_dim)
        .LowerBound(1)
        .Describe("Dimension of the embedding vectors.");
    s.Field("dtype", &EmbeddingParam::dtype)
        .Default("float32")
        .Choices({"float16", "float32", "float64", "int32", "int64", "int8", "uint8"})
        .Describe("Data type of weight (used when neither weight nor output has a known type).");
    s.Field("sparse_grad", &EmbeddingParam::sparse_grad)
        .Default(false)
        .Describe("Compute row_sparse gradient in the backward calculation (only False is supported here).");
  }
};

// Embedding(data, weight): out[..., :] = weight[clip(int(data[...])), :]. data holds indices of any type
// (floats by MXNet's convention); weight (input_dim, output_dim) float32/float64.
class EmbeddingProp : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override;
  Kwargs GetParams() const override { return param_.GetParams(); }
  std::vector<std::string> ListArguments() const override { return {"data", "weight"}; }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  bool InferType(std::vector<int>* in_type, std::vector<int>* out_type, std::vector<int>* aux_type) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<EmbeddingProp>(*this); }
  std::string TypeString() const override { return "Embedding"; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>& /*out_data*/) const override {
    return {out_grad[0], in_data[0]};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override;
  const EmbeddingParam& param() const { return param_; }

 private:
  EmbeddingParam param_;
};

}  // namespace troupe
