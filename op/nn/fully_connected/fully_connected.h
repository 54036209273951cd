// FullyConnected (MXNet 1.9's name, parameters and defaults): out = X W^T + b. The parameter struct, the
// property (shape inference, backward dependencies) and the matrix view of the data, shared by the CPU
// operator (fully_connected.cc) and the CUDA one (fully_connected.cu).
//
// Properties are immutable after Init (thread-safe to share); the Operator objects they create are entered
// by one engine worker at a time. Kept free of CAF and Cap'n Proto: nvcc compiles it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "op/internal/op_util.h"
#include "op/operator.h"
#include "op/param.h"
#include "tensor/tensor.h"

namespace troupe {

struct FullyConnectedParam : Params<FullyConnectedParam> {
  int num_hidden = 0;
  bool no_bias = false;
  bool flatten = true;
  static void Declare(ParamSchema<FullyConnectedParam>& s);
};

class FullyConnectedProp : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override;
  Kwargs GetParams() const override { return param_.GetParams(); }
  std::vector<std::string> ListArguments() const override;
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<FullyConnectedProp>(*this); }
  std::string TypeString() const override { return "FullyConnected"; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override;
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override;
  const FullyConnectedParam& param() const { return param_; }

 private:
  FullyConnectedParam param_;
};

// The matrix view of FullyConnected's data: rows (the batch, or every leading axis when flatten=False) and
// columns (the features each row is multiplied with).
struct FcDims {
  std::int64_t rows = 0, cols = 0;
};
FcDims FullyConnectedDims(const TShape& data, bool flatten);

}  // namespace troupe
