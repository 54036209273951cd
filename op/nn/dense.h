// The dense-layer operators: FullyConnected, Convolution (2-D, NCHW) and Pooling (2-D, NCHW), with MXNet
// 1.9's names, parameters and defaults. This header holds the parameter structs and the property classes so
// that the CUDA implementations (op/nn/dense.cu) can read a property's parameters; the CPU operators
// live in op/nn/{fully_connected,convolution,pooling}.cc.
//
// Kept free of CAF and Cap'n Proto: nvcc compiles it. Properties are immutable after Init (thread-safe to
// share); the Operator objects they create are entered by one engine worker at a time.
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

// ---- FullyConnected ---------------------------------------------------------------------------------------

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

// ---- Convolution ------------------------------------------------------------------------------------------

struct ConvolutionParam : Params<ConvolutionParam> {
  TShape kernel;
  TShape stride;  // () means 1 in every dimension
  TShape dilate;  // () means 1
  TShape pad;     // () means 0
  int num_filter = 0;
  int num_group = 1;
  std::int64_t workspace = 1024;  // MB: cap on the im2col buffer (CPU) and the cuDNN workspace (GPU)
  bool no_bias = false;
  std::string cudnn_tune = "None";
  bool cudnn_off = false;
  std::string layout = "None";
  static void Declare(ParamSchema<ConvolutionParam>& s);
};

// Checks a 2-D geometry parameter of Convolution or Pooling (kernel, stride, dilate, pad): 2 values, each
// >= min_value, or () when may_be_empty. Throws troupe::Error naming `op` and the parameter.
void CheckGeometryTuple(const TShape& t, const char* op, const char* name, std::int64_t min_value, bool may_be_empty);

// Convolution's geometry after defaults are applied (2-D).
struct ConvGeometry {
  std::int64_t kh = 0, kw = 0, sh = 1, sw = 1, dh = 1, dw = 1, ph = 0, pw = 0;
};
ConvGeometry MakeConvGeometry(const ConvolutionParam& p);

class ConvolutionProp : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override;
  Kwargs GetParams() const override { return param_.GetParams(); }
  std::vector<std::string> ListArguments() const override;
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<ConvolutionProp>(*this); }
  std::string TypeString() const override { return "Convolution"; }
  std::vector<ResourceRequest> ForwardResource(const std::vector<TShape>& in_shape) const override;
  std::vector<ResourceRequest> BackwardResource(const std::vector<TShape>& in_shape) const override;
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override;
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override;
  const ConvolutionParam& param() const { return param_; }

 private:
  ConvolutionParam param_;
};

// ---- Pooling ----------------------------------------------------------------------------------------------

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
  Kwargs GetParams() const override { return param_.GetParams(); }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<PoolingProp>(*this); }
  std::string TypeString() const override { return "Pooling"; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override;
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override;
  const PoolingParam& param() const { return param_; }

 private:
  PoolingParam param_;
};

}  // namespace troupe
