// L2Normalization on the GPU: l2_normalization.cc's formulas with the sums in double, one block per norm when
// a group is contiguous (modes 'instance' and 'spatial': a block-wide sum) and one thread per norm otherwise
// (mode 'channel': the group is strided, the sum runs serially in the CPU's order). The norm as stored (in T)
// divides, as on the CPU and in MXNet. The data gradient may be the head gradient's memory (the property's
// in-place option): every thread reads its elements before writing them, after the group's sum is complete.
// float32 and float64.
//
// Kernels loop grid-stride and are enqueued on the stream the engine hands over; launch errors throw
// troupe::Error naming the operator. Registers its GPU code from a static initialiser; compiled only with
// CUDA.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "op/internal/op_util.h"
#include "op/nn/common/cuda_kernels.cuh"
#include "op/nn/l2_normalization/l2_normalization.h"
#include "tensor/detail/cuda_common.h"

namespace troupe {

namespace {

using act_norm::AxisView;
using internal::Blocks;
using internal::CheckLaunch;
using internal::kThreads;
using nn_cuda::BlockSum;
using nn_cuda::Prepare;

constexpr const char* kName = "L2Normalization";

// Blocks for one block per group, capped: the block kernels loop over groups.
unsigned GroupBlocks(std::int64_t groups) { return static_cast<unsigned>(std::clamp<std::int64_t>(groups, 1, 65535)); }

// ---- one thread per group (strided groups) ----

template <typename T>
__global__ void ForwardThreadKernel(AxisView v, double eps, const T* x, T* y, T* norm, OpReqType req_y,
                                    OpReqType req_norm) {
  TROUPE_GRID_LOOP(g, v.outer * v.inner) {
    const std::int64_t o = g / v.inner, i = g % v.inner, base = o * v.n * v.inner + i;
    double sq = eps;
    for (std::int64_t k = 0; k < v.n; ++k) {
      const double e = x[base + k * v.inner];
      sq += e * e;
    }
    const T nrm = static_cast<T>(sqrt(sq));
    Assign(norm + g, req_norm, nrm);
    if (req_y == kNullOp) continue;
    for (std::int64_t k = 0; k < v.n; ++k) {
      const std::int64_t j = base + k * v.inner;
      Assign(y + j, req_y, static_cast<T>(x[j] / nrm));
    }
  }
}

template <typename T>
__global__ void BackwardThreadKernel(AxisView v, const T* og, const T* y, const T* norm, T* gx, OpReqType req) {
  TROUPE_GRID_LOOP(g, v.outer * v.inner) {
    const std::int64_t o = g / v.inner, i = g % v.inner, base = o * v.n * v.inner + i;
    double dot = 0;
    for (std::int64_t k = 0; k < v.n; ++k) {
      const std::int64_t j = base + k * v.inner;
      dot += static_cast<double>(og[j]) * y[j];
    }
    const double nrm = norm[g];
    for (std::int64_t k = 0; k < v.n; ++k) {
      const std::int64_t j = base + k * v.inner;
      Assign(gx + j, req, static_cast<T>((og[j] - y[j] * dot) / nrm));
    }
  }
}

// ---- one block per group (contiguous groups: inner == 1) ----

template <typename T>
__global__ void ForwardBlockKernel(AxisView v, double eps, const T* x, T* y, T* norm, OpReqType req_y,
                                   OpReqType req_norm) {
  __shared__ double shared[kThreads];
  for (std::int64_t g = blockIdx.x; g < v.outer; g += gridDim.x) {
    const T* xs = x + g * v.n;
    double sq = 0;
    for (std::int64_t k = threadIdx.x; k < v.n; k += blockDim.x) {
      const double e = xs[k];
      sq += e * e;
    }
    const T nrm = static_cast<T>(sqrt(eps + BlockSum(sq, shared)));
    if (threadIdx.x == 0) Assign(norm + g, req_norm, nrm);
    if (req_y == kNullOp) continue;
    for (std::int64_t k = threadIdx.x; k < v.n; k += blockDim.x)
      Assign(y + g * v.n + k, req_y, static_cast<T>(xs[k] / nrm));
  }
}

template <typename T>
__global__ void BackwardBlockKernel(AxisView v, const T* og, const T* y, const T* norm, T* gx, OpReqType req) {
  __shared__ double shared[kThreads];
  for (std::int64_t g = blockIdx.x; g < v.outer; g += gridDim.x) {
    const std::int64_t base = g * v.n;
    double dot = 0;
    for (std::int64_t k = threadIdx.x; k < v.n; k += blockDim.x) dot += static_cast<double>(og[base + k]) * y[base + k];
    dot = BlockSum(dot, shared);  // every read of og in this group happens before the block passes here
    const double nrm = norm[g];
    for (std::int64_t k = threadIdx.x; k < v.n; k += blockDim.x) {
      const std::int64_t j = base + k;
      Assign(gx + j, req, static_cast<T>((og[j] - y[j] * dot) / nrm));
    }
  }
}

class L2NormalizationGpuOp final : public Operator {
 public:
  explicit L2NormalizationGpuOp(const L2NormalizationParam& p) : p_(p) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    const TBlob& x = in[0];
    const AxisView v = l2_norm::GroupView(p_.mode, x.shape);
    internal::FloatSwitch(x.dtype, kName, [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t groups = v.outer * v.inner;
      if (groups == 0 || (req[0] == kNullOp && req[1] == kNullOp)) return;
      cudaStream_t s = Prepare(ctx.run_ctx, kName);
      const double eps = static_cast<T>(p_.eps);
      const T* px = static_cast<const T*>(x.dptr);
      T* y = static_cast<T*>(out[0].dptr);
      T* norm = static_cast<T*>(out[1].dptr);
      if (v.inner == 1) {
        ForwardBlockKernel<T><<<GroupBlocks(groups), kThreads, 0, s>>>(v, eps, px, y, norm, req[0], req[1]);
      } else {
        ForwardThreadKernel<T><<<Blocks(groups), kThreads, 0, s>>>(v, eps, px, y, norm, req[0], req[1]);
      }
      CheckLaunch("l2 normalization kernel", kName);
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>& out, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const TBlob& y = out[0];
    const AxisView v = l2_norm::GroupView(p_.mode, y.shape);
    internal::FloatSwitch(y.dtype, kName, [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t groups = v.outer * v.inner;
      if (groups == 0) return;
      cudaStream_t s = Prepare(ctx.run_ctx, kName);
      const T* og = static_cast<const T*>(out_grad[0].dptr);
      const T* py = static_cast<const T*>(y.dptr);
      const T* norm = static_cast<const T*>(out[1].dptr);
      T* gx = static_cast<T*>(in_grad[0].dptr);
      if (v.inner == 1) {
        BackwardBlockKernel<T><<<GroupBlocks(groups), kThreads, 0, s>>>(v, og, py, norm, gx, req[0]);
      } else {
        BackwardThreadKernel<T><<<Blocks(groups), kThreads, 0, s>>>(v, og, py, norm, gx, req[0]);
      }
      CheckLaunch("l2 normalization gradient kernel", kName);
    });
  }

 private:
  L2NormalizationParam p_;
};

[[maybe_unused]] const bool kGpuRegistered = [] {
  RegisterGpuOperator(kName, [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
    L2NormalizationParam param;
    param.Init(p.GetParams(), kName);
    return std::make_unique<L2NormalizationGpuOp>(param);
  });
  return true;
}();

}  // namespace

}  // namespace troupe
