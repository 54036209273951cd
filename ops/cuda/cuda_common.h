// CUDA plumbing shared by the .cu files of ops/cuda: the engine's stream, CUDA/cuDNN status checks that throw
// troupe::Error naming the call (and the operator, when the caller gives one), grid sizing for grid-stride
// kernels, the per-thread cuDNN handle and an owned cuDNN tensor descriptor.
//
// Internal to ops/cuda (only .cu files include it). The checks are inline and build their message only on
// failure; the handle cache and the error texts live in cuda_common.cu.
#pragma once

#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <string_view>
#include <type_traits>

#include "ops/operator.h"

namespace troupe::internal {

// ---- streams -----------------------------------------------------------------------------------------
// The engine hands a cudaStream_t* (run_ctx.stream); null means the default stream.
inline cudaStream_t StreamOf(void* stream) { return stream != nullptr ? *static_cast<cudaStream_t*>(stream) : nullptr; }
inline cudaStream_t StreamOf(const RunContext& rctx) { return StreamOf(rctx.stream); }
inline cudaStream_t StreamOf(const OpContext& ctx) { return StreamOf(ctx.run_ctx.stream); }

// ---- status checks -----------------------------------------------------------------------------------
// Messages: "[<op>: ]<what>: CUDA error: <text>" and "[<op>: ]<what>: cuDNN error: <text>".
[[noreturn]] void ThrowCuda(cudaError_t e, std::string_view what, std::string_view op);
[[noreturn]] void ThrowDnn(cudnnStatus_t s, std::string_view what, std::string_view op);

inline void Check(cudaError_t e, std::string_view what, std::string_view op = {}) {
  if (e != cudaSuccess) ThrowCuda(e, what, op);
}
// After a kernel launch: a bad configuration, or an earlier asynchronous failure on the device.
inline void CheckLaunch(std::string_view what, std::string_view op = {}) { Check(cudaGetLastError(), what, op); }
inline void CheckDnn(cudnnStatus_t s, std::string_view what, std::string_view op = {}) {
  if (s != CUDNN_STATUS_SUCCESS) ThrowDnn(s, what, op);
}
// Makes `dev` current for this thread (engine workers normally did already).
inline void SetDevice(int dev, std::string_view op = {}) { Check(cudaSetDevice(dev), "cudaSetDevice", op); }

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

// ---- cuDNN -------------------------------------------------------------------------------------------
// This thread's cuDNN handle for ctx's device (made current), bound to ctx's stream. One handle per worker
// thread and device: engine workers are dedicated threads, so a handle is never used by two at once.
cudnnHandle_t DnnHandle(const OpContext& ctx, std::string_view op = {});

template <typename T>
constexpr cudnnDataType_t DnnType() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "cuDNN is used for float and double");
  return std::is_same_v<T, double> ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
}

// An owned cuDNN tensor descriptor (4-d, NCHW).
class TensorDesc {
 public:
  TensorDesc() { CheckDnn(cudnnCreateTensorDescriptor(&d_), "cudnnCreateTensorDescriptor"); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d_); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  // (n, c, h, w); throws when a dimension does not fit cuDNN's int.
  void Set(cudnnDataType_t type, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w,
           std::string_view op = {});
  cudnnTensorDescriptor_t get() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_ = nullptr;
};

}  // namespace troupe::internal
