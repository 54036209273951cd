// Deconvolution on the GPU: the scheme of the CPU operator (deconvolution.cc) on the cuDNN convolution
// (convolution.cu, CreateConvolutionGpuOp): Forward is the convolution's cuDNN backward-data, the data
// gradient its cuDNN forward, the weight gradient its cuDNN backward-filter with input and output exchanged;
// groups, stride, pad, dilation, adj and target_shape reach cuDNN through the convolution's parameters and the
// blobs' shapes (the output's extra adj rows and columns are part of the data descriptor, as in MXNet's cuDNN
// deconvolution). One case is refused with an error that names it: a target_shape that needs adj 1 with stride 1
// (cuDNN rejects the descriptors: the convolution of such an output does not give back the input's size). The bias is
// added with cudnnAddTensor and its gradient taken with cudnnConvolutionBackwardBias. float32 and float64, algorithms
// and math as the convolution picks them (no TF32).
//
// The shared scheme (DeconvolutionOpBase, deconvolution.h) caches the convolution for the last data shape it saw; the engine never enters one object from
// two threads at once. Registers with RegisterGpuOperator from a static initialiser; compiled only with CUDA.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "op/internal/cudnn_common.h"
#include "op/internal/op_util.h"
#include "op/nn/deconvolution/deconvolution.h"
#include "tensor/detail/kernels.h"

namespace troupe {
namespace {

using internal::CheckDnn;
using internal::DnnHandle;
using internal::DnnType;
using internal::Scale;
using internal::SetDevice;
using internal::TensorDesc;

constexpr const char* kName = "Deconvolution";

class DeconvolutionGpuOp final : public DeconvolutionOpBase {
 public:
  using DeconvolutionOpBase::DeconvolutionOpBase;

 private:
  void Begin(const OpContext& ctx) override { SetDevice(ctx.run_ctx.ctx.dev_id, kName); }

  std::unique_ptr<Operator> MakeConv(const TShape& data, const std::int64_t pad[2], const std::int64_t adj[2]) override {
    const ConvolutionParam conv = DeconvolutionConvParam(p_, data[1], pad);
    const ConvGeometry g = MakeConvGeometry(conv);
    const std::int64_t size[2] = {data[2], data[3]}, k[2] = {g.kh, g.kw}, st[2] = {g.sh, g.sw}, dl[2] = {g.dh, g.dw};
    for (int i = 0; i < 2; ++i) {
      // cuDNN takes the output as the convolution's data and needs the convolution of it to give back the
      // input's size. adj < stride keeps that true; target_shape can give adj 1 with stride 1 (an odd
      // difference), an asymmetric padding cuDNN's descriptors cannot express.
      const std::int64_t extent = dl[i] * (k[i] - 1) + 1;
      const std::int64_t out = st[i] * (size[i] - 1) + extent - 2 * pad[i] + adj[i];
      if ((out + 2 * pad[i] - extent) / st[i] + 1 != size[i]) {
        throw Error(std::string(kName) + ": on the GPU, target_shape " + p_.target_shape.ToString() + " for data " +
                    data.ToString() + " needs pad " + std::to_string(pad[i]) + " and adj " + std::to_string(adj[i]) +
                    " with stride " + std::to_string(st[i]) + " in dimension " + std::to_string(i + 2) +
                    ", an asymmetric padding cuDNN cannot express; choose a target_shape that differs from " +
                    std::to_string(out + 2 * pad[i] - adj[i]) +
                    " (the output without padding) by an even number, "
                    "or run this layer on the CPU");
      }
    }
    return CreateConvolutionGpuOp(conv);
  }

  void AddBias(const OpContext& ctx, const TBlob& bias, const TBlob& out) override {
    if (out.shape[0] == 0) return;
    PrepareBias(out);
    const Scale one(1.0);
    const DType t = out.dtype;
    CheckDnn(cudnnAddTensor(DnnHandle(ctx, kName), one.For(t), b_.get(), bias.dptr, one.For(t), y_.get(), out.dptr),
             "cudnnAddTensor (bias)", kName);
  }

  void BiasGrad(const OpContext& ctx, const TBlob& og, const TBlob& gb, OpReqType req) override {
    if (og.shape[0] == 0) {
      // An empty batch contributes nothing: a written bias gradient is zero.
      if (req != kAddTo) internal::GpuFill(gb, 0.0, ctx.run_ctx.stream);
      return;
    }
    PrepareBias(og);
    const DType t = og.dtype;
    const Scale one(1.0), beta(req == kAddTo ? 1.0 : 0.0);
    CheckDnn(cudnnConvolutionBackwardBias(DnnHandle(ctx, kName), one.For(t), y_.get(), og.dptr, beta.For(t), b_.get(),
                                          gb.dptr),
             "cudnnConvolutionBackwardBias", kName);
  }

  // The output's and the bias's descriptors for an output (or output gradient) `y` with a non-empty batch.
  void PrepareBias(const TBlob& y) {
    if (y.shape == y_shape_ && y.dtype == y_dtype_) return;
    const cudnnDataType_t t = internal::FloatSwitch(y.dtype, kName, [](auto tag) { return DnnType<decltype(tag)>(); });
    y_.Set(t, y.shape[0], y.shape[1], y.shape[2], y.shape[3], kName);
    b_.Set(t, 1, y.shape[1], 1, 1, kName);
    y_shape_ = y.shape;
    y_dtype_ = y.dtype;
  }

  TensorDesc y_, b_;
  TShape y_shape_;
  DType y_dtype_ = DType::kFloat32;
};

[[maybe_unused]] const bool kGpuRegistered = [] {
  RegisterGpuOperator(kName, [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
    DeconvolutionParam param;
    param.Init(p.GetParams(), kName);
    return std::make_unique<DeconvolutionGpuOp>(param);
  });
  return true;
}();

}  // namespace
}  // namespace troupe
