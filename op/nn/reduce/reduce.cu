// sum and mean over axes on the GPU: one thread per output element, accumulating in double as the CPU does;
// the backward broadcasts the output gradient back.
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
#include "op/nn/reduce/reduce.h"
#include "tensor/detail/cuda_common.h"

namespace troupe {

namespace {

using internal::FloatSwitch;
using tensor_ops::BroadcastIndexer;

using internal::Blocks;
using internal::CheckLaunch;
using internal::kThreads;
using nn_cuda::Prepare;

template <typename T>
__global__ void ReduceKernel(const T* x, T* o, BroadcastIndexer ix, bool mean, OpReqType req) {
  TROUPE_GRID_LOOP(i, ix.small_size) {
    double acc = 0;
    for (std::int64_t r = 0; r < ix.reduce_size; ++r) acc += static_cast<double>(x[ix.BigOffset(i, r)]);
    if (mean) acc /= static_cast<double>(ix.reduce_size);
    Assign(o + i, req, static_cast<T>(acc));
  }
}

template <typename T>
__global__ void BroadcastBackKernel(const T* g, T* o, BroadcastIndexer ix, T scale, OpReqType req) {
  TROUPE_GRID_LOOP(i, ix.big_size) { Assign(o + i, req, g[ix.SmallOffset(i)] * scale); }
}

class ReduceAxesGpuOp : public Operator {
 public:
  ReduceAxesGpuOp(const ReduceAxesParam& p, bool mean) : param_(p), mean_(mean), name_(mean ? "mean" : "sum") {}
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const TBlob& in = in_data[0];
    const TBlob& out = out_data[0];
    const auto ix = tensor_ops::MakeBroadcastIndexer(in.shape, ReduceKeepdimsShape(param_, in.shape, name_));
    if (ix.small_size == 0) return;
    cudaStream_t s = Prepare(ctx.run_ctx, name_);
    FloatSwitch(in.dtype, name_, [&](auto tag) {
      using T = decltype(tag);
      ReduceKernel<T><<<Blocks(ix.small_size), kThreads, 0, s>>>(static_cast<const T*>(in.dptr),
                                                                 static_cast<T*>(out.dptr), ix, mean_, req[0]);
    });
    CheckLaunch("reduce kernel", name_);
  }
  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const TBlob& og = out_grad[0];
    const TBlob& ig = in_grad[0];
    const auto ix = tensor_ops::MakeBroadcastIndexer(ig.shape, ReduceKeepdimsShape(param_, ig.shape, name_));
    if (ix.big_size == 0) return;
    cudaStream_t s = Prepare(ctx.run_ctx, name_);
    FloatSwitch(ig.dtype, name_, [&](auto tag) {
      using T = decltype(tag);
      const T scale = mean_ ? static_cast<T>(1.0 / static_cast<double>(ix.reduce_size)) : T(1);
      BroadcastBackKernel<T><<<Blocks(ix.big_size), kThreads, 0, s>>>(static_cast<const T*>(og.dptr),
                                                                      static_cast<T*>(ig.dptr), ix, scale, req[0]);
    });
    CheckLaunch("backward kernel", name_);
  }

 private:
  ReduceAxesParam param_;
  bool mean_;
  std::string name_;
};

[[maybe_unused]] const bool kGpuRegistered = [] {
  for (const char* name : {"sum", "mean"}) {
    RegisterGpuOperator(name, [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
      const auto& r = static_cast<const ReduceAxesProp&>(p);
      return std::make_unique<ReduceAxesGpuOp>(r.param(), r.mean());
    });
  }
  return true;
}();

}  // namespace

}  // namespace troupe
