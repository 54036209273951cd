// The optimizers' updates on a GPU: one grid-stride kernel per update, running the same step as the CPU
// loop (op/internal/optimizer_kernels.h).
#include "tensor/detail/cuda_common.h"
#include "op/internal/gpu_table.h"
#include "op/internal/optimizer_kernels.h"
#include "op/internal/op_util.h"

namespace troupe::internal {

namespace {

template <OptimizerKind K, typename T>
__global__ void OptimizerStepKernel(StepScalars<T> a, T* w, const T* g, T* s0, T* s1, T* s2, std::int64_t n) {
  TROUPE_GRID_LOOP(i, n) { OptimizerStepAt<K, T>(a, i, w, g, s0, s1, s2); }
}

}  // namespace

void GpuOptimizerStep(OptimizerKind kind, const OptimizerScalars& scalars, const TBlob& weight, const TBlob& grad,
                      const std::vector<TBlob>& states, void* stream) {
  const std::int64_t n = weight.Size();
  if (n == 0) return;
  SetDevice(weight.ctx.dev_id, "optimizer update");
  FloatSwitch(weight.dtype, "optimizer update", [&](auto tag) {
    using T = decltype(tag);
    const StepScalars<T> a(scalars);
    T* s0 = states.size() > 0 ? states[0].dptr_as<T>() : nullptr;
    T* s1 = states.size() > 1 ? states[1].dptr_as<T>() : nullptr;
    T* s2 = states.size() > 2 ? states[2].dptr_as<T>() : nullptr;
    OptimizerKindSwitch(kind, [&](auto k) {
      constexpr OptimizerKind K = decltype(k)::value;
      OptimizerStepKernel<K, T><<<Blocks(n), kThreads, 0, StreamOf(stream)>>>(a, weight.dptr_as<T>(),
                                                                              grad.dptr_as<T>(), s0, s1, s2, n);
    });
  });
  CheckLaunch("optimizer update kernel");
}

namespace {
const GpuOpTable kTable{&GpuOptimizerStep};
}  // namespace

}  // namespace troupe::internal

// The operator module's entry into the GPU backend (kGpuOpTableSymbol).
extern "C" __attribute__((visibility("default"))) const troupe::internal::GpuOpTable* troupe_gpu_op_table() {
  return &troupe::internal::kTable;
}
