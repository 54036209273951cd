// Convolution (2-D and 3-D) on the GPU: cuDNN forward / backward-data / backward-filter / backward-bias on N-d
// descriptors (NCHW or NCDHW), algorithms chosen by cuDNN's heuristics (the _v7 queries) within the workspace
// cap, workspace from the kTempSpace resource, groups through the convolution descriptor. Float32 uses FMA (no
// TF32 tensor-core math): the GPU must agree with the CPU operator to ~1e-5.
//
// Operator objects cache their state for the last shape they saw; the engine never enters one object from two
// threads at once. cuDNN handles are per worker thread and device (op/internal/cudnn_common.h). The operator
// registers with RegisterGpuOperator from a static initialiser; this file is compiled only with CUDA.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "op/internal/cudnn_common.h"
#include "op/nn/convolution/convolution.h"
#include "tensor/detail/kernels.h"
#include "tensor/resource.h"

namespace troupe {
namespace {

using internal::CheckDnn;
using internal::DnnHandle;
using internal::DnnType;
using internal::SetDevice;
using internal::TensorDesc;
using internal::Scale;

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  explicit FilterDesc(const char* op) { CheckDnn(cudnnCreateFilterDescriptor(&d), "cudnnCreateFilterDescriptor", op); }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  explicit ConvDesc(const char* op) {
    CheckDnn(cudnnCreateConvolutionDescriptor(&d), "cudnnCreateConvolutionDescriptor", op);
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

// Picks the first algorithm (cuDNN's heuristic order) that succeeded, fits in the workspace cap and does
// not use tensor-op math (which would round float32 inputs to TF32).
template <typename Perf>
Perf PickAlgo(const Perf* perf, int count, std::size_t cap, const char* op, const char* what) {
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < count; ++i) {
      if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > cap) continue;
      const bool tensor_op = perf[i].mathType == CUDNN_TENSOR_OP_MATH ||
                             perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
      if (pass == 0 && tensor_op) continue;
      return perf[i];
    }
  }
  throw Error(std::string(op) + ": cuDNN found no " + what + " algorithm within the workspace limit of " +
              std::to_string(cap >> 20) + " MB; raise 'workspace'");
}

class ConvolutionGpuOp : public Operator {
 public:
  explicit ConvolutionGpuOp(const ConvolutionParam& p)
      : param_(p), geo_(MakeConvGeometry(p)), w_(kName), conv_(kName) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    SetDevice(ctx.run_ctx.ctx.dev_id, kName);
    Prepare(ctx, in_data[0].shape, out_data[0].shape, in_data[0].dtype);
    if (in_data[0].shape[0] == 0) return;
    cudnnHandle_t h = DnnHandle(ctx, kName);
    const DType t = in_data[0].dtype;
    const Scale one(1.0), beta(req[0] == kAddTo ? 1.0 : 0.0);
    void* ws = Workspace(ctx, fwd_.memory);
    CheckDnn(cudnnConvolutionForward(h, one.For(t), x_.get(), in_data[0].dptr, w_.d, in_data[1].dptr, conv_.d,
                                     fwd_.algo, ws, fwd_.memory, beta.For(t), y_.get(), out_data[0].dptr),
             "cudnnConvolutionForward", kName);
    if (!param_.no_bias) {
      CheckDnn(cudnnAddTensor(h, one.For(t), b_.get(), in_data[2].dptr, one.For(t), y_.get(), out_data[0].dptr),
               "cudnnAddTensor (bias)", kName);
    }
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    SetDevice(ctx.run_ctx.ctx.dev_id, kName);
    Prepare(ctx, in_data[0].shape, out_grad[0].shape, out_grad[0].dtype);
    const DType t = out_grad[0].dtype;
    const bool bias = !param_.no_bias && req[2] != kNullOp;
    if (in_data[0].shape[0] == 0) {
      // An empty batch contributes nothing: written parameter gradients are zero.
      if (req[1] == kWriteTo || req[1] == kWriteInplace) internal::GpuFill(in_grad[1], 0.0, ctx.run_ctx.stream);
      if (bias && req[2] != kAddTo) internal::GpuFill(in_grad[2], 0.0, ctx.run_ctx.stream);
      return;
    }
    cudnnHandle_t h = DnnHandle(ctx, kName);
    const Scale one(1.0);
    auto beta = [](OpReqType r) { return Scale(r == kAddTo ? 1.0 : 0.0); };
    if (bias) {
      const Scale b = beta(req[2]);
      CheckDnn(
          cudnnConvolutionBackwardBias(h, one.For(t), y_.get(), out_grad[0].dptr, b.For(t), b_.get(), in_grad[2].dptr),
          "cudnnConvolutionBackwardBias", kName);
    }
    if (req[1] != kNullOp) {
      const Scale b = beta(req[1]);
      void* ws = Workspace(ctx, bwd_filter_.memory);
      CheckDnn(
          cudnnConvolutionBackwardFilter(h, one.For(t), x_.get(), in_data[0].dptr, y_.get(), out_grad[0].dptr, conv_.d,
                                         bwd_filter_.algo, ws, bwd_filter_.memory, b.For(t), w_.d, in_grad[1].dptr),
          "cudnnConvolutionBackwardFilter", kName);
    }
    if (req[0] != kNullOp) {
      const Scale b = beta(req[0]);
      void* ws = Workspace(ctx, bwd_data_.memory);
      CheckDnn(cudnnConvolutionBackwardData(h, one.For(t), w_.d, in_data[1].dptr, y_.get(), out_grad[0].dptr, conv_.d,
                                            bwd_data_.algo, ws, bwd_data_.memory, b.For(t), x_.get(), in_grad[0].dptr),
               "cudnnConvolutionBackwardData", kName);
    }
  }

 private:
  static constexpr const char* kName = "Convolution";

  void* Workspace(const OpContext& ctx, std::size_t bytes) {
    if (bytes == 0) return nullptr;
    return ctx.requested.at(0).get_space(bytes);
  }

  // (Re)builds the descriptors and picks algorithms when the shape or type changed since the last call.
  void Prepare(const OpContext& ctx, const TShape& x, const TShape& y, DType dtype) {
    if (ready_ && x == x_shape_ && dtype == dtype_) return;
    const cudnnDataType_t t = internal::FloatSwitch(dtype, kName, [](auto tag) { return DnnType<decltype(tag)>(); });
    const std::int64_t c = x[1], f = y[1], g = param_.num_group;
    if (x[0] == 0) return;  // nothing to describe; the callers return early
    x_.Set(t, x, kName);
    y_.Set(t, y, kName);
    TShape bias = TShape::Filled(y.ndim(), 1);  // (1, f, 1, ...): cudnnAddTensor takes y's number of dimensions
    bias[1] = f;
    b_.Set(t, bias, kName);
    const int nd = geo_.spatial;
    TShape w = y;  // (f, c / g, kernel...)
    w[0] = f;
    w[1] = c / g;
    const std::vector<std::int64_t> k = SpatialDims(nd, geo_.kd, geo_.kh, geo_.kw);
    for (int i = 0; i < nd; ++i) w[2 + i] = k[i];
    const std::vector<int> wd = internal::DnnDims(w.ToVector(), kName);
    CheckDnn(cudnnSetFilterNdDescriptor(w_.d, t, CUDNN_TENSOR_NCHW, static_cast<int>(wd.size()), wd.data()),
             "cudnnSetFilterNdDescriptor", kName);
    const std::vector<int> pad = internal::DnnDims(SpatialDims(nd, geo_.pd, geo_.ph, geo_.pw), kName);
    const std::vector<int> stride = internal::DnnDims(SpatialDims(nd, geo_.sd, geo_.sh, geo_.sw), kName);
    const std::vector<int> dilate = internal::DnnDims(SpatialDims(nd, geo_.dd, geo_.dh, geo_.dw), kName);
    CheckDnn(cudnnSetConvolutionNdDescriptor(conv_.d, nd, pad.data(), stride.data(), dilate.data(),
                                             CUDNN_CROSS_CORRELATION, t),
             "cudnnSetConvolutionNdDescriptor", kName);
    CheckDnn(cudnnSetConvolutionGroupCount(conv_.d, static_cast<int>(g)), "cudnnSetConvolutionGroupCount", kName);
    if (cudnnSetConvolutionMathType(conv_.d, CUDNN_FMA_MATH) != CUDNN_STATUS_SUCCESS) {
      CheckDnn(cudnnSetConvolutionMathType(conv_.d, CUDNN_DEFAULT_MATH), "cudnnSetConvolutionMathType", kName);
    }
    cudnnHandle_t h = DnnHandle(ctx, kName);
    const std::size_t cap = static_cast<std::size_t>(param_.workspace) << 20;
    constexpr int kMaxAlgos = 16;
    int count = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[kMaxAlgos];
    CheckDnn(cudnnGetConvolutionForwardAlgorithm_v7(h, x_.get(), w_.d, conv_.d, y_.get(), kMaxAlgos, &count, fwd),
             "cudnnGetConvolutionForwardAlgorithm_v7", kName);
    fwd_ = PickAlgo(fwd, count, cap, kName, "forward");
    cudnnConvolutionBwdDataAlgoPerf_t bd[kMaxAlgos];
    CheckDnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w_.d, y_.get(), conv_.d, x_.get(), kMaxAlgos, &count, bd),
             "cudnnGetConvolutionBackwardDataAlgorithm_v7", kName);
    bwd_data_ = PickAlgo(bd, count, cap, kName, "backward-data");
    cudnnConvolutionBwdFilterAlgoPerf_t bf[kMaxAlgos];
    CheckDnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x_.get(), y_.get(), conv_.d, w_.d, kMaxAlgos, &count, bf),
             "cudnnGetConvolutionBackwardFilterAlgorithm_v7", kName);
    bwd_filter_ = PickAlgo(bf, count, cap, kName, "backward-filter");
    x_shape_ = x;
    dtype_ = dtype;
    ready_ = true;
  }

  ConvolutionParam param_;
  ConvGeometry geo_;
  TensorDesc x_, y_, b_;
  FilterDesc w_;
  ConvDesc conv_;
  bool ready_ = false;
  TShape x_shape_;
  DType dtype_ = DType::kFloat32;
  cudnnConvolutionFwdAlgoPerf_t fwd_{};
  cudnnConvolutionBwdDataAlgoPerf_t bwd_data_{};
  cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter_{};
};

}  // namespace

std::unique_ptr<Operator> CreateConvolutionGpuOp(const ConvolutionParam& param) {
  return std::make_unique<ConvolutionGpuOp>(param);
}

static const bool kConvolutionGpu = RegisterGpuOperator("Convolution", [](const OperatorProperty& p, Context) {
  return CreateConvolutionGpuOp(static_cast<const ConvolutionProp&>(p).param());
});

}  // namespace troupe
