// The optimizers' GPU step as the operator module sees it: a forwarder to the GPU backend (libtroupe_gpu.so,
// where op/src/optimizer.cu is built), loaded on first use (base/gpu_module.h). Without CUDA, or when the
// backend cannot be loaded, it throws the reason (an NDArray rarely gets that far: storage refuses GPU
// contexts first).
#include <string>
#include <vector>

#include "base/error.h"
#include "base/gpu_module.h"
#include "op/internal/gpu_table.h"
#include "op/internal/optimizer_kernels.h"

namespace troupe::internal {

void GpuOptimizerStep(OptimizerKind kind, const OptimizerScalars& scalars, const TBlob& weight, const TBlob& grad,
                      const std::vector<TBlob>& states, void* stream) {
  const GpuOpTable* table = nullptr;
  try {
    table = &GpuModuleTable<GpuOpTable>(kGpuOpTableSymbol);
  } catch (const Error& e) {
    throw Error(std::string("GPU optimizer update: ") + e.what());
  }
  table->optimizer_step(kind, scalars, weight, grad, states, stream);
}

}  // namespace troupe::internal
