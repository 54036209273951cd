// The reductions over axes on the GPU (sum, mean, max, min, prod, nansum, nanprod): reduce.h's element code,
// one thread per output element for the forward (sums and products in double, in the CPU's order) and one per
// input element for the gradient. Types as on the CPU: forward on float32/float64 (mean) or also
// uint8/int8/int32/int64 (the others), gradients on float32/float64.
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
__global__ void ReduceKernel(ReduceKind kind, const T* x, T* o, BroadcastIndexer ix, OpReqType req) {
  TROUPE_GRID_LOOP(i, ix.small_size) { Assign(o + i, req, reduce::ReduceElement(kind, x, ix, i)); }
}

template <typename T>
__global__ void GradientKernel(ReduceKind kind, const T* g, const T* x, const T* y, T scale, T* o,
                               BroadcastIndexer ix, OpReqType req) {
  TROUPE_GRID_LOOP(i, ix.big_size) { Assign(o + i, req, reduce::GradientElement(kind, g, x, y, scale, ix, i)); }
}

class ReduceAxesGpuOp : public Operator {
 public:
  ReduceAxesGpuOp(const ReduceAxesParam& p, ReduceKind kind) : param_(p), kind_(kind), name_(ReduceName(kind)) {}
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const TBlob& in = in_data[0];
    const TBlob& out = out_data[0];
    const auto ix = tensor_ops::MakeBroadcastIndexer(in.shape, ReduceKeepdimsShape(param_, in.shape, name_));
    auto run = [&](auto tag) {
      using T = decltype(tag);
      if (ix.small_size == 0) return;
      ReduceKernel<T><<<Blocks(ix.small_size), kThreads, 0, Prepare(ctx.run_ctx, name_)>>>(
          kind_, static_cast<const T*>(in.dptr), static_cast<T*>(out.dptr), ix, req[0]);
      CheckLaunch("reduce kernel", name_);
    };
    if (kind_ == ReduceKind::kMean) {
      FloatSwitch(in.dtype, name_, run);
    } else {
      internal::NumberSwitch(in.dtype, name_, run);
    }
  }
  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const TBlob& og = out_grad[0];
    const TBlob& ig = in_grad[0];
    const auto ix = tensor_ops::MakeBroadcastIndexer(ig.shape, ReduceKeepdimsShape(param_, ig.shape, name_));
    FloatSwitch(ig.dtype, name_, [&](auto tag) {
      using T = decltype(tag);
      if (ix.big_size == 0) return;
      const T* x = in_data.size() > 0 ? static_cast<const T*>(in_data[0].dptr) : nullptr;
      const T* y = out_data.size() > 0 ? static_cast<const T*>(out_data[0].dptr) : nullptr;
      const T scale = kind_ == ReduceKind::kMean ? static_cast<T>(1.0 / static_cast<double>(ix.reduce_size)) : T(1);
      GradientKernel<T><<<Blocks(ix.big_size), kThreads, 0, Prepare(ctx.run_ctx, name_)>>>(
          kind_, static_cast<const T*>(og.dptr), x, y, scale, static_cast<T*>(ig.dptr), ix, req[0]);
      CheckLaunch("backward kernel", name_);
    });
  }

 private:
  ReduceAxesParam param_;
  ReduceKind kind_;
  std::string name_;
};

[[maybe_unused]] const bool kGpuRegistered = [] {
  for (const char* name : {"sum", "mean", "max", "min", "prod", "nansum", "nanprod"}) {
    RegisterGpuOperator(name, [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
      const auto& r = static_cast<const ReduceAxesProp&>(p);
      return std::make_unique<ReduceAxesGpuOp>(r.param(), r.kind());
    });
  }
  return true;
}();

}  // namespace

}  // namespace troupe
