// Pooling (2-D, NCHW; MXNet 1.9's name, parameters and defaults): max, avg and sum. The parameter struct, the
// geometry for one input shape and the property, shared by the CPU operator (pooling.cc) and the CUDA one
// (pooling.cu: cuDNN, or kernels where cuDNN does not apply).
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

#include "op/nn/common/geometry.h"

namespace troupe {

struct PoolingParam : Params<PoolingParam> {
  TShape kernel;  // may be () with global_pool
  std::string pool_type = "max";
  bool global_pool = false;
  bool cudnn_off = false;
  std::string pooling_convention = "valid";
  TShape stride;  // () means 1
  TShape pad;     // () means 0
  std::optional<int> p_value;
  std::optional<bool> count_include_pad;  // None means True (MXNet's default)
  std::string layout = "None";
  static void Declare(ParamSchema<PoolingParam>& s);
};

// Pooling's geometry for one input shape (global_pool resolved: the kernel is the whole image).
struct PoolGeometry {
  std::int64_t kh = 0, kw = 0, sh = 1, sw = 1, ph = 0, pw = 0;
  std::int64_t height = 0, width = 0, out_h = 0, out_w = 0;
  bool max = true, avg = false, full = false, count_include_pad = true;
};
// Throws troupe::Error naming Pooling and "data" when the input is too small for the kernel.
PoolGeometry MakePoolGeometry(const PoolingParam& p, const TShape& data);

class PoolingProp : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override;
  Kwargs GetParams() const override { return one_d_ ? param_1d_.GetParams() : param_.GetParams(); }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<PoolingProp>(*this); }
  std::string TypeString() const override { return "Pooling"; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override;
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override;
  // The 2-D parameters the operators run with (1-D pooling's lifted ones).
  const PoolingParam& param() const { return param_; }

 private:
  void Init2d(const Kwargs& kwargs);
  bool InferShape2d(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape) const;

  PoolingParam param_;
  // 1-D pooling (a 1-D kernel, or global pooling of 3-D data) runs lifted to 2-D (op/nn/common/lift_1d.h).
  bool one_d_ = false;
  PoolingParam param_1d_;  // as given, for GetParams
};

}  // namespace troupe
