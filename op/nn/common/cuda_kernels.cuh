// Helpers several operators' .cu files share (namespace nn_cuda): the stream of a RunContext with its device
// made current (the tensor operators), a block-wide sum of one double per thread (LeakyReLU's prelu
// gradient, BatchNorm, the softmax family), a fill kernel (BatchNorm, SoftmaxOutput, the regression heads),
// the zeroing of a gradient that receives nothing, and the sum of a broadcast operand's gradient terms (the
// broadcasting operators). Included only by
// .cu files. No state: every function is thread-safe.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string_view>

#include "base/context.h"
#include "op/nn/common/broadcast.h"
#include "tensor/detail/cuda_common.h"

namespace troupe::nn_cuda {

// Makes the stream's device current (the worker normally did already) and returns the stream.
inline cudaStream_t Prepare(const RunContext& rctx, std::string_view op) {
  internal::SetDevice(rctx.ctx.dev_id, op);
  return internal::StreamOf(rctx);
}

// Block-wide sum of one double per thread (blockDim.x == kThreads); every thread gets the total.
inline __device__ double BlockSum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  const double total = shared[0];
  __syncthreads();
  return total;
}

// Zeroes a gradient that receives nothing under kWriteTo / kWriteInplace (kAddTo and kNullOp leave it); any
// element type (all-zero bytes are zero in each). Enqueued on s; a failure throws troupe::Error naming op.
inline void ZeroIfWritten(const TBlob& g, OpReqType req, cudaStream_t s, std::string_view op) {
  if ((req == kWriteTo || req == kWriteInplace) && g.dptr != nullptr && g.Bytes() > 0) {
    internal::Check(cudaMemsetAsync(g.dptr, 0, g.Bytes(), s), "cudaMemsetAsync", op);
  }
}

template <typename T>
__global__ void FillKernel(T* dst, std::int64_t n, T v) {
  TROUPE_GRID_LOOP(i, n) { dst[i] = v; }
}

// tensor_ops::SumToSmall on the GPU, one thread per small element: grad[o] (req)= the sum, in double and in
// increasing big index, of term(big) over the big elements that read small element o (the gradient of a
// broadcast operand; `term` is a functor with a __device__ operator()(std::int64_t big)).
template <typename T, typename Term>
__global__ void SumToSmallKernel(T* grad, tensor_ops::BroadcastIndexer ix, OpReqType req, Term term) {
  TROUPE_GRID_LOOP(o, ix.small_size) {
    double acc = 0;
    for (std::int64_t r = 0; r < ix.reduce_size; ++r) acc += static_cast<double>(term(ix.BigOffset(o, r)));
    Assign(grad + o, req, static_cast<T>(acc));
  }
}

}  // namespace troupe::nn_cuda
