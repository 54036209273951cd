// FullyConnected on the GPU: cuBLAS products (internal::GpuGemm) and two small kernels (bias add,
// bias-gradient column sums). Float32 products use FMA (no TF32 tensor-core math): the GPU must agree with
// the CPU operator to ~1e-5.
//
// Operator objects cache their state for the last shape they saw; the engine never enters one object from two
// threads at once. cuDNN handles are per worker thread and device (op/internal/cudnn_common.h). The operator
// registers with RegisterGpuOperator from a static initialiser; this file is compiled only with CUDA.
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "op/internal/cudnn_common.h"
#include "op/nn/fully_connected/fully_connected.h"
#include "tensor/detail/kernels.h"
#include "tensor/resource.h"

namespace troupe {
namespace {

using internal::Blocks;
using internal::CheckLaunch;
using internal::kThreads;
using internal::SetDevice;
using internal::StreamOf;

template <typename T>
__global__ void AddBiasRowsKernel(T* out, const T* bias, std::int64_t rows, std::int64_t cols) {
  const std::int64_t n = rows * cols;
  TROUPE_GRID_LOOP(i, n) { out[i] += bias[i % cols]; }
}

// db[j] (=|+=) sum_r g[r, j]. A block covers 32 columns; its 8 thread rows stride over the matrix rows
// (coalesced reads along a row) and are summed in shared memory.
template <typename T>
__global__ void ColumnSumKernel(const T* g, T* db, std::int64_t rows, std::int64_t cols, bool add) {
  __shared__ T part[8][33];
  const std::int64_t j = blockIdx.x * 32 + threadIdx.x;
  T s = T(0);
  if (j < cols) {
    for (std::int64_t r = threadIdx.y; r < rows; r += 8) s += g[r * cols + j];
  }
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < cols) {
    T t = T(0);
    for (int y = 0; y < 8; ++y) t += part[y][threadIdx.x];
    db[j] = add ? db[j] + t : t;
  }
}

class FullyConnectedGpuOp : public Operator {
 public:
  explicit FullyConnectedGpuOp(const FullyConnectedParam& p) : param_(p) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    SetDevice(ctx.run_ctx.ctx.dev_id, kName);
    const FcDims d = FullyConnectedDims(in_data[0].shape, param_.flatten);
    const int m = static_cast<int>(d.rows), k = static_cast<int>(d.cols), n = param_.num_hidden;
    internal::FloatSwitch(in_data[0].dtype, kName, [&](auto tag) {
      using T = decltype(tag);
      internal::GpuGemm(in_data[0], in_data[1], out_data[0], false, true, m, n, k, 1.0, req[0] == kAddTo ? 1.0 : 0.0,
                        ctx.run_ctx.stream);
      if (!param_.no_bias && m > 0) {
        AddBiasRowsKernel<T><<<Blocks(static_cast<std::int64_t>(m) * n), kThreads, 0, StreamOf(ctx)>>>(
            static_cast<T*>(out_data[0].dptr), static_cast<const T*>(in_data[2].dptr), m, n);
        CheckLaunch("bias kernel launch", kName);
      }
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    SetDevice(ctx.run_ctx.ctx.dev_id, kName);
    const FcDims d = FullyConnectedDims(in_data[0].shape, param_.flatten);
    const int m = static_cast<int>(d.rows), k = static_cast<int>(d.cols), n = param_.num_hidden;
    internal::FloatSwitch(out_grad[0].dtype, kName, [&](auto tag) {
      using T = decltype(tag);
      void* stream = ctx.run_ctx.stream;
      if (req[0] != kNullOp) {
        internal::GpuGemm(out_grad[0], in_data[1], in_grad[0], false, false, m, k, n, 1.0, req[0] == kAddTo ? 1.0 : 0.0,
                          stream);
      }
      if (req[1] != kNullOp) {
        if (m == 0) {
          if (req[1] != kAddTo) internal::GpuFill(in_grad[1], 0.0, stream);
        } else {
          internal::GpuGemm(out_grad[0], in_data[0], in_grad[1], true, false, n, k, m, 1.0,
                            req[1] == kAddTo ? 1.0 : 0.0, stream);
        }
      }
      if (!param_.no_bias && req[2] != kNullOp) {
        const dim3 block(32, 8);
        const unsigned grid = static_cast<unsigned>((n + 31) / 32);
        ColumnSumKernel<T><<<grid, block, 0, StreamOf(ctx)>>>(static_cast<const T*>(out_grad[0].dptr),
                                                              static_cast<T*>(in_grad[2].dptr), m, n, req[2] == kAddTo);
        CheckLaunch("bias-gradient kernel launch", kName);
      }
    });
  }

 private:
  static constexpr const char* kName = "FullyConnected";
  FullyConnectedParam param_;
};

}  // namespace

static const bool kFullyConnectedGpu = RegisterGpuOperator("FullyConnected", [](const OperatorProperty& p, Context) {
  return std::unique_ptr<Operator>(
      std::make_unique<FullyConnectedGpuOp>(static_cast<const FullyConnectedProp&>(p).param()));
});

}  // namespace troupe
