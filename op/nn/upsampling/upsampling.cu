// UpSampling (sample_type 'nearest') on the GPU: upsampling.cc's operator with one thread per output element
// of each input (forward: a copy of the source pixel, with 'sum' the first input assigned under the request
// and the others added, in MXNet's order, each input one launch on the stream) and one thread per input
// element (backward: the sum of the head gradient over its s x s block, in T and in the CPU's order). float32
// and float64. 'bilinear' is refused by the property on both devices.
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
#include "op/nn/upsampling/upsampling.h"
#include "tensor/detail/cuda_common.h"

namespace troupe {

namespace {

using internal::Blocks;
using internal::CheckLaunch;
using internal::kThreads;
using nn_cuda::Prepare;

constexpr const char* kName = "UpSampling";

// The (N, C, H, W) sizes of an input and of the output, and where the input's channels start in the output.
struct Geometry {
  std::int64_t n, c, ih, iw, oc, oh, ow, c0, s;
};

Geometry GeometryOf(const TShape& is, const TShape& os, std::int64_t s, std::int64_t c0) {
  return {is[0], is[1], is[2], is[3], os[1], os[2], os[3], c0, s};
}

// y[n, c0 + c, h, w] (req)= x[n, c, h / s, w / s] over this input's part of the output.
template <typename T>
__global__ void ForwardKernel(const T* x, T* y, Geometry g, OpReqType req) {
  TROUPE_GRID_LOOP(i, g.n * g.c * g.oh * g.ow) {
    const std::int64_t w = i % g.ow, h = (i / g.ow) % g.oh, p = i / (g.ow * g.oh);  // p = n * c + channel
    const std::int64_t n = p / g.c, c = p % g.c;
    const T v = x[(p * g.ih + h / g.s) * g.iw + w / g.s];
    Assign(y + ((n * g.oc + g.c0 + c) * g.oh + h) * g.ow + w, req, v);
  }
}

// gx[n, c, h, w] (req)= the sum of og[n, c0 + c, h * s + dh, w * s + dw] over dh, dw in [0, s), in T.
template <typename T>
__global__ void BackwardKernel(const T* og, T* gx, Geometry g, OpReqType req) {
  TROUPE_GRID_LOOP(i, g.n * g.c * g.ih * g.iw) {
    const std::int64_t w = i % g.iw, h = (i / g.iw) % g.ih, p = i / (g.iw * g.ih);
    const std::int64_t n = p / g.c, c = p % g.c;
    const T* gs = og + (n * g.oc + g.c0 + c) * g.oh * g.ow;
    T acc = T(0);
    for (std::int64_t dh = 0; dh < g.s; ++dh) {
      const T* row = gs + (h * g.s + dh) * g.ow + w * g.s;
      for (std::int64_t dw = 0; dw < g.s; ++dw) acc += row[dw];
    }
    Assign(gx + i, req, acc);
  }
}

std::vector<TShape> Shapes(const std::vector<TBlob>& blobs) {
  std::vector<TShape> s;
  for (const TBlob& b : blobs) s.push_back(b.shape);
  return s;
}

class UpSamplingGpuOp final : public Operator {
 public:
  explicit UpSamplingGpuOp(const UpSamplingParam& p) : sum_(p.multi_input_mode == "sum") {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    cudaStream_t stream = Prepare(ctx.run_ctx, kName);
    internal::FloatSwitch(out[0].dtype, kName, [&](auto tag) {
      using T = decltype(tag);
      upsampling::ForEachInput(Shapes(in), out[0].shape, sum_, [&](std::size_t a, std::int64_t s, std::int64_t c0) {
        const Geometry g = GeometryOf(in[a].shape, out[0].shape, s, c0);
        const std::int64_t n = g.n * g.c * g.oh * g.ow;
        if (n == 0) return;
        const OpReqType r = sum_ && a > 0 ? kAddTo : req[0];
        ForwardKernel<T>
            <<<Blocks(n), kThreads, 0, stream>>>(static_cast<const T*>(in[a].dptr), static_cast<T*>(out[0].dptr), g, r);
        CheckLaunch("upsampling kernel", kName);
      });
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    cudaStream_t stream = Prepare(ctx.run_ctx, kName);
    internal::FloatSwitch(out_grad[0].dtype, kName, [&](auto tag) {
      using T = decltype(tag);
      upsampling::ForEachInput(
          Shapes(in_grad), out_grad[0].shape, sum_, [&](std::size_t a, std::int64_t s, std::int64_t c0) {
            if (req[a] == kNullOp) return;
            const Geometry g = GeometryOf(in_grad[a].shape, out_grad[0].shape, s, c0);
            const std::int64_t n = g.n * g.c * g.ih * g.iw;
            if (n == 0) return;
            BackwardKernel<T><<<Blocks(n), kThreads, 0, stream>>>(static_cast<const T*>(out_grad[0].dptr),
                                                                  static_cast<T*>(in_grad[a].dptr), g, req[a]);
            CheckLaunch("upsampling gradient kernel", kName);
          });
    });
  }

 private:
  bool sum_;
};

[[maybe_unused]] const bool kGpuRegistered = [] {
  RegisterGpuOperator(kName, [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
    UpSamplingParam param;
    param.Init(p.GetParams(), kName);
    return std::make_unique<UpSamplingGpuOp>(param);
  });
  return true;
}();

}  // namespace

}  // namespace troupe
