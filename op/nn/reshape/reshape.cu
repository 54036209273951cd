// Flatten and Reshape on the GPU: device copies (nothing when in place; kAddTo adds).
//
// Kernels loop grid-stride and are enqueued on the stream the engine hands over; launch errors throw
// troupe::Error naming the operator. Registers its GPU code from a static initialiser; compiled only with
// CUDA.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "op/nn/common/cuda_kernels.cuh"
#include "op/nn/reshape/reshape.h"
#include "tensor/detail/cuda_common.h"

namespace troupe {

namespace {

using internal::FloatSwitch;

using internal::Blocks;
using internal::Check;
using internal::CheckLaunch;
using internal::kThreads;
using nn_cuda::Prepare;

template <typename T>
__global__ void AddToKernel(const T* src, T* dst, std::int64_t n) {
  TROUPE_GRID_LOOP(i, n) { dst[i] += src[i]; }
}

// dst (op)= src for equal-sized blobs; nothing when in place.
void CopyWithReqGpu(const TBlob& src, const TBlob& dst, OpReqType req, const RunContext& rctx, const char* op) {
  if (req == kNullOp) return;
  if (src.Size() != dst.Size()) {
    throw Error(std::string(op) + ": source " + src.shape.ToString() + " and destination " + dst.shape.ToString() +
                " differ in size");
  }
  cudaStream_t s = Prepare(rctx, op);
  if (req == kAddTo) {
    FloatSwitch(dst.dtype, op, [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t n = dst.Size();
      AddToKernel<T><<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(src.dptr), static_cast<T*>(dst.dptr), n);
    });
    CheckLaunch("AddToKernel", op);
    return;
  }
  if (src.dptr == dst.dptr || dst.Bytes() == 0) return;
  Check(cudaMemcpyAsync(dst.dptr, src.dptr, dst.Bytes(), cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync", op);
}

class CopyGpuOp : public Operator {
 public:
  explicit CopyGpuOp(const char* name) : name_(name) {}
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    CopyWithReqGpu(in_data[0], out_data[0], req[0], ctx.run_ctx, name_);
  }
  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    CopyWithReqGpu(out_grad[0], in_grad[0], req[0], ctx.run_ctx, name_);
  }

 private:
  const char* name_;
};

[[maybe_unused]] const bool kGpuRegistered = [] {
  RegisterGpuOperator("Flatten", [](const OperatorProperty&, Context) -> std::unique_ptr<Operator> {
    return std::make_unique<CopyGpuOp>("Flatten");
  });
  RegisterGpuOperator("Reshape", [](const OperatorProperty&, Context) -> std::unique_ptr<Operator> {
    return std::make_unique<CopyGpuOp>("Reshape");
  });
  return true;
}();

}  // namespace

}  // namespace troupe
