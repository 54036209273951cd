// The array-making operators on the GPU (_zeros, _ones, _full, _arange, _contrib_arange_like, shape_array,
// size_array): init.cc's operator with a fill kernel running init.h's element code, any element type as on the
// CPU; their shape-only inputs get zero gradients (all-zero bytes are zero in every type).
//
// Kernels loop grid-stride and are enqueued on the stream the engine hands over; launch errors throw
// troupe::Error naming the operator. Registers its GPU code from a static initialiser; compiled only with
// CUDA.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "op/nn/common/cuda_kernels.cuh"
#include "op/nn/init/init.h"
#include "tensor/detail/cuda_common.h"

namespace troupe {

namespace {

using internal::Blocks;
using internal::kThreads;

template <typename T>
__global__ void FillKernel(init::FillSpec spec, T* o, std::int64_t n, OpReqType req) {
  TROUPE_GRID_LOOP(i, n) { init::FillElement(spec, o, i, req); }
}

void FillGpu(const init::FillSpec& spec, const TBlob& out, OpReqType req, const RunContext& rctx) {
  const std::int64_t n = out.Size();
  if (n == 0) return;
  cudaStream_t s = nn_cuda::Prepare(rctx, "fill operator");
  DTypeSwitch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    FillKernel<T><<<Blocks(n), kThreads, 0, s>>>(spec, static_cast<T*>(out.dptr), n, req);
  });
  internal::CheckLaunch("fill kernel", "fill operator");
}

void ZeroGpu(const TBlob& b, const RunContext& rctx) {
  if (b.dptr == nullptr || b.Bytes() == 0) return;
  internal::Check(cudaMemsetAsync(b.dptr, 0, b.Bytes(), nn_cuda::Prepare(rctx, "fill operator")), "cudaMemsetAsync",
                  "fill operator");
}

[[maybe_unused]] const bool kGpuRegistered = [] {
  for (const char* name :
       {"_zeros", "_ones", "_full", "_arange", "_contrib_arange_like", "shape_array", "size_array"}) {
    RegisterGpuOperator(name, [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
      return init::MakeFillOperator(p, FillGpu, ZeroGpu);
    });
  }
  return true;
}();

}  // namespace

}  // namespace troupe
