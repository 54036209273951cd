// Concat on the GPU: one kernel per input slab (forward) and per input gradient (backward).
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
#include "op/nn/concat/concat.h"
#include "tensor/detail/cuda_common.h"

namespace troupe {

namespace {

using internal::FloatSwitch;

using internal::Blocks;
using internal::CheckLaunch;
using internal::kThreads;
using nn_cuda::Prepare;

template <typename T>
__global__ void ConcatForwardKernel(const T* src, T* dst, ConcatSlab sl, OpReqType req) {
  const std::int64_t n = sl.outer * sl.width;
  TROUPE_GRID_LOOP(i, n) {
    const std::int64_t r = i / sl.width, j = i % sl.width;
    Assign(dst + r * sl.out_row + sl.offset + j, req, src[i]);
  }
}

template <typename T>
__global__ void ConcatBackwardKernel(const T* og, T* dst, ConcatSlab sl, OpReqType req) {
  const std::int64_t n = sl.outer * sl.width;
  TROUPE_GRID_LOOP(i, n) {
    const std::int64_t r = i / sl.width, j = i % sl.width;
    Assign(dst + i, req, og[r * sl.out_row + sl.offset + j]);
  }
}

class ConcatGpuOp : public Operator {
 public:
  explicit ConcatGpuOp(const ConcatParam& p) : param_(p) {}
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const TBlob& out = out_data[0];
    std::vector<TShape> shapes;
    for (const auto& b : in_data) shapes.push_back(b.shape);
    const auto slabs = ConcatSlabs(shapes, out.shape, Axis(out.shape.ndim()));
    cudaStream_t s = Prepare(ctx.run_ctx, "Concat");
    FloatSwitch(out.dtype, "Concat", [&](auto tag) {
      using T = decltype(tag);
      for (std::size_t i = 0; i < slabs.size(); ++i) {
        const std::int64_t n = slabs[i].outer * slabs[i].width;
        if (n == 0) continue;
        ConcatForwardKernel<T><<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(in_data[i].dptr),
                                                              static_cast<T*>(out.dptr), slabs[i], req[0]);
      }
    });
    CheckLaunch("forward kernel", "Concat");
  }
  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    const TBlob& og = out_grad[0];
    std::vector<TShape> shapes;
    for (const auto& b : in_grad) shapes.push_back(b.shape);
    const auto slabs = ConcatSlabs(shapes, og.shape, Axis(og.shape.ndim()));
    cudaStream_t s = Prepare(ctx.run_ctx, "Concat");
    FloatSwitch(og.dtype, "Concat", [&](auto tag) {
      using T = decltype(tag);
      for (std::size_t i = 0; i < slabs.size(); ++i) {
        const std::int64_t n = slabs[i].outer * slabs[i].width;
        if (req[i] == kNullOp || n == 0) continue;
        ConcatBackwardKernel<T><<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(og.dptr),
                                                               static_cast<T*>(in_grad[i].dptr), slabs[i], req[i]);
      }
    });
    CheckLaunch("backward kernel", "Concat");
  }

 private:
  int Axis(int ndim) const { return param_.dim < 0 ? param_.dim + ndim : param_.dim; }
  ConcatParam param_;
};

[[maybe_unused]] const bool kGpuRegistered = [] {
  RegisterGpuOperator("Concat", [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
    return std::make_unique<ConcatGpuOp>(static_cast<const ConcatProp&>(p).param());
  });
  return true;
}();

}  // namespace

}  // namespace troupe
