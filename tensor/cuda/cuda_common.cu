// The out-of-line part of tensor/detail/cuda_common.h: the error texts and the per-thread cuBLAS handle.
#include "tensor/detail/cuda_common.h"

#include <string>

#include "base/error.h"

namespace troupe::internal {

std::string ErrorPrefix(std::string_view op, std::string_view what) {
  std::string m;
  if (!op.empty()) {
    m.append(op);
    m += ": ";
  }
  m.append(what);
  return m;
}

void ThrowCuda(cudaError_t e, std::string_view what, std::string_view op) {
  throw Error(ErrorPrefix(op, what) + ": CUDA error: " + cudaGetErrorString(e));
}

void ThrowCublas(cublasStatus_t s, std::string_view what, std::string_view op) {
  throw Error(ErrorPrefix(op, what) + ": cuBLAS error: " + cublasGetStatusString(s));
}

cublasHandle_t BlasHandle(int dev, cudaStream_t stream, std::string_view op) {
  SetDevice(dev, op);
  thread_local PerDeviceHandles<cublasHandle_t, cublasDestroy> handles;
  cublasHandle_t h = handles.Get(dev, [&] {
    cublasHandle_t created = nullptr;
    CheckBlas(cublasCreate(&created), "cublasCreate on gpu(" + std::to_string(dev) + ")", op);
    return created;
  });
  CheckBlas(cublasSetStream(h, stream), "cublasSetStream", op);
  return h;
}

}  // namespace troupe::internal
