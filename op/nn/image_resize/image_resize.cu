// _contrib_AdaptiveAvgPooling2D and _contrib_BilinearResize2D on the GPU: image_resize.h's window, scale and
// tap rules (in float, as on the CPU and in MXNet), one thread per output element forward (the window sum in
// double; the four-tap interpolation in T) and one per head-gradient element backward, which adds its share to
// the input positions it read with atomicAdd (as MXNet's GPU kernels do): the gradient's sums may therefore
// round in another order than the CPU's. A written gradient is zeroed first; 'like' gets a zero gradient.
// float32 and float64.
//
// Kernels loop grid-stride and are enqueued on the stream the engine hands over; launch errors throw
// troupe::Error naming the operator. Registers its GPU code from a static initialiser; compiled only with
// CUDA.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "op/internal/op_util.h"
#include "op/nn/common/cuda_kernels.cuh"
#include "op/nn/image_resize/image_resize.h"
#include "tensor/detail/cuda_common.h"

namespace troupe {

namespace {

using image_resize::PixelScale;
using image_resize::Tap;
using image_resize::TapAt;
using image_resize::WindowEnd;
using image_resize::WindowStart;
using internal::Blocks;
using internal::CheckLaunch;
using internal::kThreads;
using nn_cuda::Prepare;

constexpr const char* kAdaptive = "_contrib_AdaptiveAvgPooling2D";
constexpr const char* kBilinear = "_contrib_BilinearResize2D";

// (N * C) images of ih x iw in, oh x ow out.
struct Geometry {
  std::int64_t images, ih, iw, oh, ow;
};
Geometry GeometryOf(const TShape& in, const TShape& out) { return {in[0] * in[1], in[2], in[3], out[2], out[3]}; }

// ---- AdaptiveAvgPooling2D ----

template <typename T>
__global__ void AdaptiveForwardKernel(const T* x, T* y, Geometry g, OpReqType req) {
  TROUPE_GRID_LOOP(i, g.images * g.oh * g.ow) {
    const std::int64_t w = i % g.ow, h = (i / g.ow) % g.oh, p = i / (g.ow * g.oh);
    const std::int64_t h0 = WindowStart(h, g.oh, g.ih), h1 = WindowEnd(h, g.oh, g.ih);
    const std::int64_t w0 = WindowStart(w, g.ow, g.iw), w1 = WindowEnd(w, g.ow, g.iw);
    const T* xs = x + p * g.ih * g.iw;
    double sum = 0;
    for (std::int64_t r = h0; r < h1; ++r) {
      for (std::int64_t c = w0; c < w1; ++c) sum += xs[r * g.iw + c];
    }
    Assign(y + i, req, static_cast<T>(sum / static_cast<double>(w1 - w0) / static_cast<double>(h1 - h0)));
  }
}

template <typename T>
__global__ void AdaptiveBackwardKernel(const T* og, T* gx, Geometry g) {
  TROUPE_GRID_LOOP(i, g.images * g.oh * g.ow) {
    const std::int64_t w = i % g.ow, h = (i / g.ow) % g.oh, p = i / (g.ow * g.oh);
    const std::int64_t h0 = WindowStart(h, g.oh, g.ih), h1 = WindowEnd(h, g.oh, g.ih);
    const std::int64_t w0 = WindowStart(w, g.ow, g.iw), w1 = WindowEnd(w, g.ow, g.iw);
    const T delta = og[i] / static_cast<T>(h1 - h0) / static_cast<T>(w1 - w0);
    T* gs = gx + p * g.ih * g.iw;
    for (std::int64_t r = h0; r < h1; ++r) {
      for (std::int64_t c = w0; c < w1; ++c) atomicAdd(gs + r * g.iw + c, delta);
    }
  }
}

class AdaptiveAvgPoolGpuOp final : public Operator {
 public:
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const std::int64_t n = out[0].Size();
    internal::FloatSwitch(in[0].dtype, kAdaptive, [&](auto tag) {
      using T = decltype(tag);
      if (n == 0) return;
      cudaStream_t s = Prepare(ctx.run_ctx, kAdaptive);
      AdaptiveForwardKernel<T><<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(in[0].dptr),
                                                              static_cast<T*>(out[0].dptr),
                                                              GeometryOf(in[0].shape, out[0].shape), req[0]);
      CheckLaunch("adaptive average pooling kernel", kAdaptive);
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const std::int64_t n = out_grad[0].Size();
    internal::FloatSwitch(in_grad[0].dtype, kAdaptive, [&](auto tag) {
      using T = decltype(tag);
      cudaStream_t s = Prepare(ctx.run_ctx, kAdaptive);
      nn_cuda::ZeroIfWritten(in_grad[0], req[0], s, kAdaptive);
      if (n == 0) return;
      AdaptiveBackwardKernel<T><<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(out_grad[0].dptr),
                                                               static_cast<T*>(in_grad[0].dptr),
                                                               GeometryOf(in_grad[0].shape, out_grad[0].shape));
      CheckLaunch("adaptive average pooling gradient kernel", kAdaptive);
    });
  }
};

// ---- BilinearResize2D ----

template <typename T>
__global__ void BilinearForwardKernel(const T* x, T* y, Geometry g, float rh, float rw, bool align, OpReqType req) {
  const bool copy = g.ih == g.oh && g.iw == g.ow;
  TROUPE_GRID_LOOP(i, g.images * g.oh * g.ow) {
    const std::int64_t w = i % g.ow, h = (i / g.ow) % g.oh, p = i / (g.ow * g.oh);
    const T* xs = x + p * g.ih * g.iw;
    T v;
    if (copy) {
      v = xs[h * g.iw + w];
    } else {
      const Tap<T> th = TapAt<T>(rh, h, g.ih, align), tw = TapAt<T>(rw, w, g.iw, align);
      const T* p00 = xs + th.i0 * g.iw + tw.i0;
      const T* p10 = p00 + th.step * g.iw;
      v = th.l0 * (tw.l0 * p00[0] + tw.l1 * p00[tw.step]) + th.l1 * (tw.l0 * p10[0] + tw.l1 * p10[tw.step]);
    }
    Assign(y + i, req, v);
  }
}

template <typename T>
__global__ void BilinearBackwardKernel(const T* og, T* gx, Geometry g, float rh, float rw, bool align) {
  const bool copy = g.ih == g.oh && g.iw == g.ow;
  TROUPE_GRID_LOOP(i, g.images * g.oh * g.ow) {
    const std::int64_t w = i % g.ow, h = (i / g.ow) % g.oh, p = i / (g.ow * g.oh);
    T* gs = gx + p * g.ih * g.iw;
    const T grad = og[i];
    if (copy) {
      atomicAdd(gs + h * g.iw + w, grad);
      continue;
    }
    const Tap<T> th = TapAt<T>(rh, h, g.ih, align), tw = TapAt<T>(rw, w, g.iw, align);
    T* p00 = gs + th.i0 * g.iw + tw.i0;
    T* p10 = p00 + th.step * g.iw;
    atomicAdd(p00, th.l0 * tw.l0 * grad);
    atomicAdd(p00 + tw.step, th.l0 * tw.l1 * grad);
    atomicAdd(p10, th.l1 * tw.l0 * grad);
    atomicAdd(p10 + tw.step, th.l1 * tw.l1 * grad);
  }
}

class BilinearResizeGpuOp final : public Operator {
 public:
  explicit BilinearResizeGpuOp(bool align_corners) : align_(align_corners) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const std::int64_t n = out[0].Size();
    const Geometry g = GeometryOf(in[0].shape, out[0].shape);
    internal::FloatSwitch(in[0].dtype, kBilinear, [&](auto tag) {
      using T = decltype(tag);
      if (n == 0) return;
      cudaStream_t s = Prepare(ctx.run_ctx, kBilinear);
      BilinearForwardKernel<T><<<Blocks(n), kThreads, 0, s>>>(
          static_cast<const T*>(in[0].dptr), static_cast<T*>(out[0].dptr), g, PixelScale(g.ih, g.oh, align_),
          PixelScale(g.iw, g.ow, align_), align_, req[0]);
      CheckLaunch("bilinear resize kernel", kBilinear);
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    internal::FloatSwitch(out_grad[0].dtype, kBilinear, [&](auto tag) {
      using T = decltype(tag);
      cudaStream_t s = Prepare(ctx.run_ctx, kBilinear);
      if (in_grad.size() > 1) nn_cuda::ZeroIfWritten(in_grad[1], req[1], s, kBilinear);  // 'like' gets no gradient
      if (req[0] == kNullOp) return;
      nn_cuda::ZeroIfWritten(in_grad[0], req[0], s, kBilinear);
      const std::int64_t n = out_grad[0].Size();
      if (n == 0) return;
      const Geometry g = GeometryOf(in_grad[0].shape, out_grad[0].shape);
      BilinearBackwardKernel<T>
          <<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(out_grad[0].dptr), static_cast<T*>(in_grad[0].dptr), g,
                                          PixelScale(g.ih, g.oh, align_), PixelScale(g.iw, g.ow, align_), align_);
      CheckLaunch("bilinear resize gradient kernel", kBilinear);
    });
  }

 private:
  bool align_;
};

[[maybe_unused]] const bool kGpuRegistered = [] {
  RegisterGpuOperator(kAdaptive, [](const OperatorProperty&, Context) -> std::unique_ptr<Operator> {
    return std::make_unique<AdaptiveAvgPoolGpuOp>();
  });
  RegisterGpuOperator(kBilinear, [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
    BilinearResizeParam param;
    param.Init(p.GetParams(), kBilinear);
    return std::make_unique<BilinearResizeGpuOp>(param.align_corners);
  });
  return true;
}();

}  // namespace

}  // namespace troupe
