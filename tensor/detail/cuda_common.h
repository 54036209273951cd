// CUDA plumbing shared by the .cu files of tensor/ and op/: the engine's stream, CUDA status checks that throw
// troupe::Error naming the call (and the operator, when the caller gives one), each worker thread's cuBLAS
// handle, and grid sizing for grid-stride kernels. The cuDNN parts (handle, descriptors) are the operators' own: op/internal/cudnn_common.h.
//
// Declared surface of the tensor module (detail/: never installed), included only by .cu files. The checks
// are inline and build their message only on failure; the error text lives in tensor/cuda/cuda_common.cu.
// Every function is thread-safe.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>

#include "base/context.h"

namespace troupe::internal {

// ---- streams -----------------------------------------------------------------------------------------
// The engine hands a cudaStream_t* (run_ctx.stream); null means the default stream.
inline cudaStream_t StreamOf(void* stream) { return stream != nullptr ? *static_cast<cudaStream_t*>(stream) : nullptr; }
inline cudaStream_t StreamOf(const RunContext& rctx) { return StreamOf(rctx.stream); }

// ---- per-thread library handles ------------------------------------------------------------------------
// One handle of a CUDA library (cuBLAS, cuDNN) per device for the thread that owns this object (a thread_local):
// created by `create()` on first use for a device, destroyed on its device with the object (Destroy).
template <typename Handle, auto Destroy>
class PerDeviceHandles {
 public:
  PerDeviceHandles() = default;
  PerDeviceHandles(const PerDeviceHandles&) = delete;
  PerDeviceHandles& operator=(const PerDeviceHandles&) = delete;
  ~PerDeviceHandles() {
    for (auto& [dev, h] : handles_) {
      if (cudaSetDevice(dev) == cudaSuccess) Destroy(h);
    }
  }
  template <typename Create>
  Handle Get(int dev, Create&& create) {
    auto it = handles_.find(dev);
    if (it != handles_.end()) return it->second;
    Handle h = create();
    handles_.emplace(dev, h);
    return h;
  }

 private:
  std::map<int, Handle> handles_;
};

// ---- status checks -----------------------------------------------------------------------------------
// "[<op>: ]<what>": how every check's message starts.
std::string ErrorPrefix(std::string_view op, std::string_view what);
// Message: "[<op>: ]<what>: CUDA error: <text>".
[[noreturn]] void ThrowCuda(cudaError_t e, std::string_view what, std::string_view op);

inline void Check(cudaError_t e, std::string_view what, std::string_view op = {}) {
  if (e != cudaSuccess) ThrowCuda(e, what, op);
}
// After a kernel launch: a bad configuration, or an earlier asynchronous failure on the device.
inline void CheckLaunch(std::string_view what, std::string_view op = {}) { Check(cudaGetLastError(), what, op); }
// Makes `dev` current for this thread (engine workers normally did already).
inline void SetDevice(int dev, std::string_view op = {}) { Check(cudaSetDevice(dev), "cudaSetDevice", op); }

// ---- cuBLAS ------------------------------------------------------------------------------------------
// Message: "[<op>: ]<what>: cuBLAS error: <text>".
[[noreturn]] void ThrowCublas(cublasStatus_t s, std::string_view what, std::string_view op);
inline void CheckBlas(cublasStatus_t s, std::string_view what, std::string_view op = {}) {
  if (s != CUBLAS_STATUS_SUCCESS) ThrowCublas(s, what, op);
}
// The calling thread's cuBLAS handle for `dev` (made current), bound to `stream`: one handle per thread and
// device, created on first use and destroyed when the thread ends. Each engine worker is a thread of its own,
// so a handle is never used by two threads at once.
cublasHandle_t BlasHandle(int dev, cudaStream_t stream, std::string_view op = {});

// ---- grid sizing -------------------------------------------------------------------------------------
constexpr int kThreads = 256;
// Blocks for n elements at kThreads per block, at least 1 and capped: the kernels loop grid-stride
// (TROUPE_GRID_LOOP), so any n fits.
inline unsigned Blocks(std::int64_t n) {
  const std::int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

#define TROUPE_GRID_LOOP(i, n)                                                                     \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

}  // namespace troupe::internal
