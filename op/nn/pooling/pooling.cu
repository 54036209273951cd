// Pooling (2-D and 3-D) on the GPU: cuDNN (N-d descriptors) for 'valid' max/avg pooling, plain CUDA kernels for
// 'full', sum, cudnn_off and windows cuDNN rejects; both compute exactly the CPU operator's windows and divisors
// (the kernels with the same window definition, pooling.h).
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
#include "op/nn/pooling/pooling.h"
#include "tensor/detail/kernels.h"
#include "tensor/resource.h"

namespace troupe {
namespace {

using internal::Blocks;
using internal::Check;
using internal::CheckDnn;
using internal::CheckLaunch;
using internal::DnnHandle;
using internal::DnnType;
using internal::kThreads;
using internal::SetDevice;
using internal::StreamOf;
using internal::TensorDesc;
using internal::Scale;

struct PoolDesc {
  cudnnPoolingDescriptor_t d = nullptr;
  explicit PoolDesc(const char* op) { CheckDnn(cudnnCreatePoolingDescriptor(&d), "cudnnCreatePoolingDescriptor", op); }
  ~PoolDesc() { cudnnDestroyPoolingDescriptor(d); }
  PoolDesc(const PoolDesc&) = delete;
  PoolDesc& operator=(const PoolDesc&) = delete;
};

template <typename T>
__device__ inline T Lowest();
template <>
__device__ inline float Lowest<float>() {
  return -3.402823466e+38f;
}
template <>
__device__ inline double Lowest<double>() {
  return -1.7976931348623157e+308;
}

// Output i of the flat (plane, od, oh, ow) index: its plane and its window (pooling.h).
__device__ inline PoolWindow OutputWindow(const PoolGeometry& g, std::int64_t i, std::int64_t* plane) {
  const std::int64_t ow = i % g.out_w, oh = (i / g.out_w) % g.out_h, od = (i / (g.out_w * g.out_h)) % g.out_d;
  *plane = i / g.out_plane();
  return PoolWindowAt(g, od, oh, ow);
}

template <typename T>
__global__ void PoolForwardKernel(const T* x, T* y, PoolGeometry g, std::int64_t total, OpReqType req) {
  TROUPE_GRID_LOOP(i, total) {
    std::int64_t plane = 0;
    const PoolWindow w = OutputWindow(g, i, &plane);
    const T* in = x + plane * g.in_plane();
    T v;
    if (g.max) {
      v = Lowest<T>();
      ForEachInWindow(g, w, [&](std::int64_t e) { v = max(v, in[e]); });
    } else {
      v = T(0);
      ForEachInWindow(g, w, [&](std::int64_t e) { v += in[e]; });
      if (g.avg) v = w.area > 0 ? v / static_cast<T>(w.area) : T(0);
    }
    y[i] = req == kAddTo ? y[i] + v : v;
  }
}

// One thread per output scatters its gradient (atomically: windows overlap) to its argmax or its window.
template <typename T>
__global__ void PoolBackwardKernel(const T* x, const T* dy, T* dx, PoolGeometry g, std::int64_t total) {
  TROUPE_GRID_LOOP(i, total) {
    std::int64_t plane = 0;
    const PoolWindow w = OutputWindow(g, i, &plane);
    T* dplane = dx + plane * g.in_plane();
    const T gv = dy[i];
    if (g.max) {
      const T* in = x + plane * g.in_plane();
      std::int64_t best = -1;
      T bv = Lowest<T>();
      ForEachInWindow(g, w, [&](std::int64_t e) {
        if (best < 0 || in[e] > bv) bv = in[e], best = e;
      });
      if (best >= 0) atomicAdd(dplane + best, gv);
    } else {
      const T share = g.avg ? (w.area > 0 ? gv / static_cast<T>(w.area) : T(0)) : gv;
      ForEachInWindow(g, w, [&](std::int64_t e) { atomicAdd(dplane + e, share); });
    }
  }
}

class PoolingGpuOp : public Operator {
 public:
  explicit PoolingGpuOp(const PoolingParam& p) : param_(p), pool_(kName) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    SetDevice(ctx.run_ctx.ctx.dev_id, kName);
    const PoolGeometry g = MakePoolGeometry(param_, in_data[0].shape);
    const std::int64_t total = out_data[0].Size();
    if (total == 0) return;
    const DType t = in_data[0].dtype;
    if (UseDnn(g)) {
      Prepare(in_data[0].shape, g, t);
      const Scale one(1.0), beta(req[0] == kAddTo ? 1.0 : 0.0);
      CheckDnn(cudnnPoolingForward(DnnHandle(ctx, kName), pool_.d, one.For(t), x_.get(), in_data[0].dptr, beta.For(t),
                                   y_.get(), out_data[0].dptr),
               "cudnnPoolingForward", kName);
      return;
    }
    internal::FloatSwitch(t, kName, [&](auto tag) {
      using T = decltype(tag);
      PoolForwardKernel<T><<<Blocks(total), kThreads, 0, StreamOf(ctx)>>>(
          static_cast<const T*>(in_data[0].dptr), static_cast<T*>(out_data[0].dptr), g, total, req[0]);
      CheckLaunch("forward kernel launch", kName);
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    SetDevice(ctx.run_ctx.ctx.dev_id, kName);
    const PoolGeometry g = MakePoolGeometry(param_, in_grad[0].shape);
    const DType t = out_grad[0].dtype;
    const std::int64_t total = out_grad[0].Size();
    if (UseDnn(g) && total > 0) {
      Prepare(in_grad[0].shape, g, t);
      const Scale one(1.0), beta(req[0] == kAddTo ? 1.0 : 0.0);
      CheckDnn(
          cudnnPoolingBackward(DnnHandle(ctx, kName), pool_.d, one.For(t), y_.get(), out_data[0].dptr, y_.get(),
                               out_grad[0].dptr, x_.get(), in_data[0].dptr, beta.For(t), x_.get(), in_grad[0].dptr),
          "cudnnPoolingBackward", kName);
      return;
    }
    if (req[0] != kAddTo) {
      Check(cudaMemsetAsync(in_grad[0].dptr, 0, in_grad[0].Bytes(), StreamOf(ctx)), "cudaMemsetAsync", kName);
    }
    if (total == 0) return;
    internal::FloatSwitch(t, kName, [&](auto tag) {
      using T = decltype(tag);
      PoolBackwardKernel<T><<<Blocks(total), kThreads, 0, StreamOf(ctx)>>>(
          g.max ? static_cast<const T*>(in_data[0].dptr) : nullptr, static_cast<const T*>(out_grad[0].dptr),
          static_cast<T*>(in_grad[0].dptr), g, total);
      CheckLaunch("backward kernel launch", kName);
    });
  }

 private:
  static constexpr const char* kName = "Pooling";

  // cuDNN computes MXNet's 'valid' windows for max and avg (every window lies inside the padded input, so
  // its divisor is the full kernel area with count_include_pad, the inside part without); it rejects a
  // padding as large as the kernel. 'full' windows may run past the padding and sum pooling has no cuDNN
  // mode: those use the kernels above.
  bool UseDnn(const PoolGeometry& g) const {
    return !param_.cudnn_off && !g.full && (g.max || g.avg) && g.pd < g.kd && g.ph < g.kh && g.pw < g.kw;
  }

  void Prepare(const TShape& x, const PoolGeometry& g, DType dtype) {
    if (ready_ && x == x_shape_ && dtype == dtype_) return;
    const cudnnDataType_t t = internal::FloatSwitch(dtype, kName, [](auto tag) { return DnnType<decltype(tag)>(); });
    const int n = g.spatial;
    TShape y = x;
    const std::vector<std::int64_t> out = SpatialDims(n, g.out_d, g.out_h, g.out_w);
    for (int i = 0; i < n; ++i) y[2 + i] = out[i];
    x_.Set(t, x, kName);
    y_.Set(t, y, kName);
    const cudnnPoolingMode_t mode = g.max ? CUDNN_POOLING_MAX
                                    : g.count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                          : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    const std::vector<int> window = internal::DnnDims(SpatialDims(n, g.kd, g.kh, g.kw), kName);
    const std::vector<int> pad = internal::DnnDims(SpatialDims(n, g.pd, g.ph, g.pw), kName);
    const std::vector<int> stride = internal::DnnDims(SpatialDims(n, g.sd, g.sh, g.sw), kName);
    CheckDnn(cudnnSetPoolingNdDescriptor(pool_.d, mode, CUDNN_NOT_PROPAGATE_NAN, n, window.data(), pad.data(),
                                         stride.data()),
             "cudnnSetPoolingNdDescriptor", kName);
    x_shape_ = x;
    dtype_ = dtype;
    ready_ = true;
  }

  PoolingParam param_;
  TensorDesc x_, y_;
  PoolDesc pool_;
  bool ready_ = false;
  TShape x_shape_;
  DType dtype_ = DType::kFloat32;
};

}  // namespace

static const bool kPoolingGpu = RegisterGpuOperator("Pooling", [](const OperatorProperty& p, Context) {
  return std::unique_ptr<Operator>(std::make_unique<PoolingGpuOp>(static_cast<const PoolingProp&>(p).param()));
});

}  // namespace troupe
