// dot and batch_dot on the GPU: dot.cc's operator with cuBLAS products (internal::GpuGemm, row-major like the
// CPU's CpuGemm), float32 and float64 as on the CPU. Registers its GPU code from a static initialiser;
// compiled only with CUDA.
#include <memory>

#include "op/nn/common/cuda_kernels.cuh"
#include "op/nn/dot/dot.h"
#include "tensor/detail/kernels.h"

namespace troupe {

namespace {

void GpuGemmFn(const TBlob& a, const TBlob& b, const TBlob& c, bool ta, bool tb, int m, int n, int k, double alpha,
               double beta, const RunContext& rctx) {
  nn_cuda::Prepare(rctx, "dot");
  internal::GpuGemm(a, b, c, ta, tb, m, n, k, alpha, beta, rctx.stream);
}

[[maybe_unused]] const bool kGpuRegistered = [] {
  for (const char* name : {"dot", "batch_dot"}) {
    RegisterGpuOperator(name, [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
      return dot::MakeDotOperator(p, GpuGemmFn);
    });
  }
  return true;
}();

}  // namespace

}  // namespace troupe
