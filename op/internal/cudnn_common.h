// cuDNN plumbing shared by the operators' .cu files: the stream of an OpContext, cuDNN status checks that
// throw troupe::Error naming the call and the operator, the per-thread cuDNN handle and an owned cuDNN tensor
// descriptor. The CUDA-only parts (stream of a RunContext, CUDA checks, grid sizing) come from the tensor
// module's tensor/detail/cuda_common.h, which this header includes.
//
// Internal to op/ (only .cu files include it). DnnHandle is thread-safe (one handle per thread and device);
// a TensorDesc belongs to one thread.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <string_view>
#include <type_traits>
#include <vector>

#include "op/operator.h"
#include "tensor/detail/cuda_common.h"

namespace troupe::internal {

inline cudaStream_t StreamOf(const OpContext& ctx) { return StreamOf(ctx.run_ctx.stream); }

// Message: "[<op>: ]<what>: cuDNN error: <text>".
[[noreturn]] void ThrowDnn(cudnnStatus_t s, std::string_view what, std::string_view op);

inline void CheckDnn(cudnnStatus_t s, std::string_view what, std::string_view op = {}) {
  if (s != CUDNN_STATUS_SUCCESS) ThrowDnn(s, what, op);
}

// ---- cuDNN -------------------------------------------------------------------------------------------
// This thread's cuDNN handle for ctx's device (made current), bound to ctx's stream. One handle per worker
// thread and device: engine workers are dedicated threads, so a handle is never used by two at once.
cudnnHandle_t DnnHandle(const OpContext& ctx, std::string_view op = {});

template <typename T>
constexpr cudnnDataType_t DnnType() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "cuDNN is used for float and double");
  return std::is_same_v<T, double> ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
}

// cuDNN scaling factors: float for float data, double for double data.
struct Scale {
  float f;
  double d;
  explicit Scale(double v) : f(static_cast<float>(v)), d(v) {}
  const void* For(DType t) const { return t == DType::kFloat64 ? static_cast<const void*>(&d) : &f; }
};

// Dimensions as cuDNN's ints; throws troupe::Error naming `op` when one does not fit.
std::vector<int> DnnDims(const std::vector<std::int64_t>& dims, std::string_view op);

// An owned cuDNN tensor descriptor of a packed row-major array (NCHW, NCDHW).
class TensorDesc {
 public:
  TensorDesc() { CheckDnn(cudnnCreateTensorDescriptor(&d_), "cudnnCreateTensorDescriptor"); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d_); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  // (n, c, h, w); throws when a dimension does not fit cuDNN's int.
  void Set(cudnnDataType_t type, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w,
           std::string_view op = {});
  // Any shape of 4 to 8 dimensions (cuDNN's range); throws as above.
  void Set(cudnnDataType_t type, const TShape& shape, std::string_view op = {});
  cudnnTensorDescriptor_t get() const { return d_; }

 private:
  cudnnTensorDescriptor_t d_ = nullptr;
};

}  // namespace troupe::internal
