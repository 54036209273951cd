// _contrib_div_sqrt_dim on the GPU: data / d with d = sqrt(data.shape[-1]) taken in double and converted to the
// element type, as div_sqrt_dim.cc; the gradient is the same operator on the head gradient. float32 and
// float64. Registers its GPU code from a static initialiser; compiled only with CUDA.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "op/internal/op_util.h"
#include "op/nn/common/cuda_kernels.cuh"
#include "tensor/detail/cuda_common.h"

namespace troupe {

namespace {

constexpr const char* kName = "_contrib_div_sqrt_dim";

template <typename T>
__global__ void DivKernel(const T* x, T d, T* y, std::int64_t n, OpReqType req) {
  TROUPE_GRID_LOOP(i, n) { Assign(y + i, req, x[i] / d); }
}

void DivSqrtDimGpu(const TBlob& from, const TBlob& to, OpReqType req, const RunContext& rctx) {
  if (req == kNullOp) return;
  const double sqrt_dim = std::sqrt(static_cast<double>(from.shape[from.shape.ndim() - 1]));
  internal::FloatSwitch(from.dtype, kName, [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t n = to.Size();
    if (n == 0) return;
    DivKernel<T><<<internal::Blocks(n), internal::kThreads, 0, nn_cuda::Prepare(rctx, kName)>>>(
        static_cast<const T*>(from.dptr), static_cast<T>(sqrt_dim), static_cast<T*>(to.dptr), n, req);
    internal::CheckLaunch("kernel", kName);
  });
}

class DivSqrtDimGpuOp final : public Operator {
 public:
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    DivSqrtDimGpu(in[0], out[0], req[0], ctx.run_ctx);
  }
  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    DivSqrtDimGpu(out_grad[0], in_grad[0], req[0], ctx.run_ctx);
  }
};

[[maybe_unused]] const bool kGpuRegistered = [] {
  RegisterGpuOperator(kName, [](const OperatorProperty&, Context) -> std::unique_ptr<Operator> {
    return std::make_unique<DivSqrtDimGpuOp>();
  });
  return true;
}();

}  // namespace

}  // namespace troupe
