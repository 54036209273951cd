// Convolution (1-D, 2-D and 3-D: NCW, NCHW and NCDHW; 1-D runs as 2-D on (N, C, 1, W) views:
// op/nn/common/lift_1d.h; MXNet 1.9's name, parameters and defaults). The parameter struct, its geometry
// with defaults applied and the property (shape inference, resources, backward dependencies), shared by the
// registration (convolution.cc), the CPU operator (convolution_cpu.cc: oneDNN, or im2col + OpenBLAS) and the
// CUDA one (convolution.cu: cuDNN).
//
// Properties are immutable after Init (thread-safe to share); the Operator objects they create are entered
// by one engine worker at a time. Kept free of CAF and Cap'n Proto: nvcc compiles it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "op/detail/fusion.h"  // FusedActivation
#include "op/internal/op_util.h"
#include "op/nn/activation/activation.h"  // act_norm::ActForward
#include "op/operator.h"
#include "op/param.h"
#include "tensor/tensor.h"

#include "op/nn/common/geometry.h"

namespace troupe {

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

// Convolution's geometry after defaults are applied: kernel, stride, dilation and padding in (depth, height,
// width); a 2-D convolution has one depth slice (kd, sd, dd 1, pd 0), so one set of loops serves both.
// `spatial` is the number of spatial dimensions of the arrays: 2 (NCHW) or 3 (NCDHW).
struct ConvGeometry {
  int spatial = 2;
  std::int64_t kd = 1, kh = 0, kw = 0, sd = 1, sh = 1, sw = 1, dd = 1, dh = 1, dw = 1, pd = 0, ph = 0, pw = 0;
};
ConvGeometry MakeConvGeometry(const ConvolutionParam& p);

class ConvolutionProp : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override;
  Kwargs GetParams() const override { return one_d_ ? param_1d_.GetParams() : param_.GetParams(); }
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
  // The 2-D or 3-D parameters the operators run with (a 1-D convolution's lifted ones).
  const ConvolutionParam& param() const { return param_; }
  // Whether this is a 1-D convolution (run as 2-D on lifted views).
  bool one_d() const { return one_d_; }

 private:
  // 2-D or 3-D, by the number of kernel values.
  void InitNd(const Kwargs& kwargs);
  bool InferShapeNd(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape) const;

  ConvolutionParam param_;
  bool one_d_ = false;
  ConvolutionParam param_1d_;  // as given, for GetParams
};

// Post-ops of a fused convolution (op/detail/fusion.h): the result added onto the extra input "sum", then a relu;
// and the layouts of its data input, its output and "sum": plain NCHW, or oneDNN's channel-blocked layout
// (internal::BlockedDesc) when the executor keeps the array blocked between fused convolutions.
struct ConvPostOps {
  bool sum = false;
  FusedActivation act = FusedActivation::kNone;
  bool blocked_in = false;
  bool blocked_out = false;
  bool blocked_sum = false;
};

// A fused activation on one value (the post-op where oneDNN does not run it): the Activation operator's own
// element formula (act_norm::ActForward).
template <typename T>
T ApplyFusedActivation(FusedActivation act, T v) {
  switch (act) {
    case FusedActivation::kNone: return v;
    case FusedActivation::kRelu: return act_norm::ActForward(act_norm::ActType::kReLU, v);
    case FusedActivation::kSigmoid: return act_norm::ActForward(act_norm::ActType::kSigmoid, v);
    case FusedActivation::kTanh: return act_norm::ActForward(act_norm::ActType::kTanh, v);
    case FusedActivation::kSoftrelu: return act_norm::ActForward(act_norm::ActType::kSoftReLU, v);
  }
  return v;
}

// The CPU operator (convolution_cpu.cc) for a checked parameter set; ConvolutionProp::CreateOperator calls it
// for CPU contexts, the fused property (op/detail/fusion.h) with post-ops: then in_data holds "sum" after the
// convolution's arguments when post.sum, and the output may be that input's buffer (kWriteInplace).
std::unique_ptr<Operator> CreateConvolutionCpuOp(const ConvolutionParam& param, ConvPostOps post = {});
// The cuDNN operator (convolution.cu) for a checked parameter set: defined only in the GPU backend
// (libtroupe_gpu.so), so only code built into it may call it (Deconvolution's GPU operator does).
std::unique_ptr<Operator> CreateConvolutionGpuOp(const ConvolutionParam& param);

}  // namespace troupe
