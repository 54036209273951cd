// The out-of-line part of tensor/detail/cuda_common.h: the CUDA error text.
#include "tensor/detail/cuda_common.h"

#include <map>
#include <string>

#include "base/error.h"

namespace troupe::internal {

void ThrowCuda(cudaError_t e, std::string_view what, std::string_view op) {
  std::string m;
  if (!op.empty()) {
    m.append(op);
    m += ": ";
  }
  m.append(what);
  throw Error(m + ": CUDA error: " + cudaGetErrorString(e));
}

void ThrowCublas(cublasStatus_t s, std::string_view what, std::string_view op) {
  std::string m;
  if (!op.empty()) {
    m.append(op);
    m += ": ";
  }
  m.append(what);
  throw Error(m + ": cuBLAS error: " + cublasGetStatusString(s));
}

namespace {
class BlasHandles {
 public:
  ~BlasHandles() {
    for (auto& [dev, h] : handles_) {
      if (cudaSetDevice(dev) == cudaSuccess) cublasDestroy(h);
    }
  }
  cublasHandle_t Get(int dev, std::string_view op) {
    auto it = handles_.find(dev);
    if (it != handles_.end()) return it->second;
    cublasHandle_t h = nullptr;
    CheckBlas(cublasCreate(&h), "cublasCreate on gpu(" + std::to_string(dev) + ")", op);
    handles_.emplace(dev, h);
    return h;
  }

 private:
  std::map<int, cublasHandle_t> handles_;
};
}  // namespace

cublasHandle_t BlasHandle(int dev, cudaStream_t stream, std::string_view op) {
  SetDevice(dev, op);
  thread_local BlasHandles handles;
  cublasHandle_t h = handles.Get(dev, op);
  CheckBlas(cublasSetStream(h, stream), "cublasSetStream", op);
  return h;
}

}  // namespace troupe::internal
