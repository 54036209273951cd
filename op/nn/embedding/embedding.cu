// Embedding on the GPU: a gather (forward) and a scatter with atomicAdd (the weight gradient).
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
#include "op/nn/embedding/embedding.h"
#include "tensor/detail/cuda_common.h"

namespace troupe {

namespace {

using internal::FloatSwitch;

using internal::Blocks;
using internal::Check;
using internal::CheckLaunch;
using internal::kThreads;
using nn_cuda::Prepare;

template <typename W, typename I>
__global__ void EmbeddingForwardKernel(const I* idx, const W* w, W* o, std::int64_t n, std::int64_t dim,
                                       std::int64_t rows, OpReqType req) {
  TROUPE_GRID_LOOP(i, n * dim) {
    const std::int64_t k = i / dim, j = i % dim;
    Assign(o + i, req, w[tensor_ops::ClipIndex(idx[k], rows) * dim + j]);
  }
}

template <typename W, typename I>
__global__ void EmbeddingBackwardKernel(const I* idx, const W* g, W* wg, std::int64_t n, std::int64_t dim,
                                        std::int64_t rows) {
  TROUPE_GRID_LOOP(i, n * dim) {
    const std::int64_t k = i / dim, j = i % dim;
    atomicAdd(wg + tensor_ops::ClipIndex(idx[k], rows) * dim + j, g[i]);
  }
}

// Index types a data blob may have on the device (bool and the 16-bit floats are left out: MXNet's GPU
// Embedding takes float32/float64/integer indices).
template <typename Fn>
void IndexSwitch(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: return fn(float{});
    case DType::kFloat64: return fn(double{});
    case DType::kInt32: return fn(std::int32_t{});
    case DType::kInt64: return fn(std::int64_t{});
    case DType::kUint8: return fn(std::uint8_t{});
    case DType::kInt8: return fn(std::int8_t{});
    default:
      throw Error(std::string("Embedding: argument 'data' has type ") + DTypeName(dtype) +
                  " on the GPU (use float32, float64 or an integer type)");
  }
}

class EmbeddingGpuOp : public Operator {
 public:
  explicit EmbeddingGpuOp(const EmbeddingParam& p) : param_(p) {}
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const TBlob& data = in_data[0];
    const TBlob& weight = in_data[1];
    const TBlob& out = out_data[0];
    const std::int64_t n = data.Size(), dim = param_.output_dim, rows = param_.input_dim;
    if (n * dim == 0) return;
    cudaStream_t s = Prepare(ctx.run_ctx, "Embedding");
    FloatSwitch(weight.dtype, "Embedding", [&](auto wtag) {
      using W = decltype(wtag);
      IndexSwitch(data.dtype, [&](auto itag) {
        using I = decltype(itag);
        EmbeddingForwardKernel<W, I><<<Blocks(n * dim), kThreads, 0, s>>>(
            static_cast<const I*>(data.dptr), static_cast<const W*>(weight.dptr), static_cast<W*>(out.dptr), n, dim,
            rows, req[0]);
      });
    });
    CheckLaunch("forward kernel", "Embedding");
  }
  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    cudaStream_t s = Prepare(ctx.run_ctx, "Embedding");
    if ((req[0] == kWriteTo || req[0] == kWriteInplace) && in_grad[0].Bytes() > 0) {
      Check(cudaMemsetAsync(in_grad[0].dptr, 0, in_grad[0].Bytes(), s), "cudaMemsetAsync (data grad)", "Embedding");
    }
    if (req[1] == kNullOp) return;
    const TBlob& data = in_data[0];
    const TBlob& og = out_grad[0];
    const TBlob& wg = in_grad[1];
    const std::int64_t n = data.Size(), dim = param_.output_dim, rows = param_.input_dim;
    if (req[1] != kAddTo)
      Check(cudaMemsetAsync(wg.dptr, 0, wg.Bytes(), s), "cudaMemsetAsync (weight grad)", "Embedding");
    if (n * dim == 0) return;
    FloatSwitch(wg.dtype, "Embedding", [&](auto wtag) {
      using W = decltype(wtag);
      IndexSwitch(data.dtype, [&](auto itag) {
        using I = decltype(itag);
        EmbeddingBackwardKernel<W, I><<<Blocks(n * dim), kThreads, 0, s>>>(
            static_cast<const I*>(data.dptr), static_cast<const W*>(og.dptr), static_cast<W*>(wg.dptr), n, dim, rows);
      });
    });
    CheckLaunch("backward kernel", "Embedding");
  }

 private:
  EmbeddingParam param_;
};

[[maybe_unused]] const bool kGpuRegistered = [] {
  RegisterGpuOperator("Embedding", [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
    return std::make_unique<EmbeddingGpuOp>(static_cast<const EmbeddingProp&>(p).param());
  });
  return true;
}();

}  // namespace

}  // namespace troupe
