// LayerNorm on the GPU: layer_norm.h's element code, one thread per slice for the statistics, the output and
// the data gradient, one thread per axis position for gamma's and beta's gradients, so the sums run in double
// in the CPU's order. float32 and float64, as on the CPU.
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
#include "op/nn/layer_norm/layer_norm.h"
#include "tensor/detail/cuda_common.h"

namespace troupe {

namespace {

using act_norm::AxisView;
using internal::Blocks;
using internal::CheckLaunch;
using internal::FloatSwitch;
using internal::kThreads;
using layer_norm::kName;
using nn_cuda::Prepare;

template <typename T>
__global__ void ForwardKernel(AxisView v, double eps, const T* x, const T* gamma, const T* beta, T* y, T* mean, T* sd,
                              OpReqType req_y, OpReqType req_mean, OpReqType req_std) {
  TROUPE_GRID_LOOP(s, v.outer * v.inner) {
    layer_norm::ForwardSlice(v, s, eps, x, gamma, beta, y, mean, sd, req_y, req_mean, req_std);
  }
}

template <typename T>
__global__ void DataGradientKernel(AxisView v, const T* og, const T* x, const T* gamma, const T* mean, const T* sd,
                                   T* gx, OpReqType req) {
  TROUPE_GRID_LOOP(s, v.outer * v.inner) { layer_norm::DataGradientSlice(v, s, og, x, gamma, mean, sd, gx, req); }
}

template <typename T>
__global__ void ScaleShiftGradientKernel(AxisView v, const T* og, const T* x, const T* mean, const T* sd, T* ggamma,
                                         T* gbeta, OpReqType req_gamma, OpReqType req_beta) {
  TROUPE_GRID_LOOP(k, v.n) {
    layer_norm::ScaleShiftGradient(v, k, og, x, mean, sd, ggamma, gbeta, req_gamma, req_beta);
  }
}

class LayerNormGpuOp final : public Operator {
 public:
  explicit LayerNormGpuOp(const LayerNormParam& p) : p_(p) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    const AxisView v = View(in[0]);
    FloatSwitch(in[0].dtype, kName, [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t slices = v.outer * v.inner;
      if (slices == 0) return;
      ForwardKernel<T><<<Blocks(slices), kThreads, 0, Prepare(ctx.run_ctx, kName)>>>(
          v, static_cast<double>(static_cast<T>(p_.eps)), in[0].dptr_as<T>(), in[1].dptr_as<T>(), in[2].dptr_as<T>(),
          out[0].dptr_as<T>(), out[1].dptr_as<T>(), out[2].dptr_as<T>(), req[0], req[1], req[2]);
      CheckLaunch("forward kernel", kName);
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in,
                const std::vector<TBlob>& out, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    const AxisView v = View(in[0]);
    FloatSwitch(in[0].dtype, kName, [&](auto tag) {
      using T = decltype(tag);
      cudaStream_t s = Prepare(ctx.run_ctx, kName);
      const T* og = out_grad[0].dptr_as<T>();
      const T* x = in[0].dptr_as<T>();
      const T* mean = out[1].dptr_as<T>();
      const T* sd = out[2].dptr_as<T>();
      const std::int64_t slices = v.outer * v.inner;
      if (req[0] != kNullOp && slices > 0) {
        DataGradientKernel<T><<<Blocks(slices), kThreads, 0, s>>>(v, og, x, in[1].dptr_as<T>(), mean, sd,
                                                                  in_grad[0].dptr_as<T>(), req[0]);
      }
      if ((req[1] != kNullOp || req[2] != kNullOp) && v.n > 0) {
        ScaleShiftGradientKernel<T>
            <<<Blocks(v.n), kThreads, 0, s>>>(v, og, x, mean, sd, req[1] == kNullOp ? nullptr : in_grad[1].dptr_as<T>(),
                                              req[2] == kNullOp ? nullptr : in_grad[2].dptr_as<T>(), req[1], req[2]);
      }
      CheckLaunch("backward kernel", kName);
    });
  }

 private:
  AxisView View(const TBlob& x) const {
    return act_norm::ViewAround(x.shape, internal::NormalizeAxis(p_.axis, x.shape.ndim(), kName, "axis"));
  }
  LayerNormParam p_;
};

[[maybe_unused]] const bool kGpuRegistered = [] {
  RegisterGpuOperator(kName, [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
    LayerNormParam param;
    param.Init(p.GetParams(), kName);
    return std::make_unique<LayerNormGpuOp>(param);
  });
  return true;
}();

}  // namespace

}  // namespace troupe
