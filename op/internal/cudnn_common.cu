// The out-of-line parts of op/internal/cudnn_common.h: the cuDNN error text, the per-thread cuDNN handle
// (tensor/detail/cuda_common.h's PerDeviceHandles) and the tensor descriptor's Set.
#include "op/internal/cudnn_common.h"

#include <initializer_list>
#include <string>

#include "base/error.h"

namespace troupe::internal {

void ThrowDnn(cudnnStatus_t s, std::string_view what, std::string_view op) {
  throw Error(ErrorPrefix(op, what) + ": cuDNN error: " + cudnnGetErrorString(s));
}

cudnnHandle_t DnnHandle(const OpContext& ctx, std::string_view op) {
  thread_local PerDeviceHandles<cudnnHandle_t, cudnnDestroy> handles;
  const int dev = ctx.run_ctx.ctx.dev_id;
  SetDevice(dev, op);
  cudnnHandle_t h = handles.Get(dev, [&] {
    cudnnHandle_t created = nullptr;
    CheckDnn(cudnnCreate(&created), "cudnnCreate on gpu(" + std::to_string(dev) + ")", op);
    return created;
  });
  CheckDnn(cudnnSetStream(h, StreamOf(ctx)), "cudnnSetStream", op);
  return h;
}

void TensorDesc::Set(cudnnDataType_t type, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w,
                     std::string_view op) {
  for (std::int64_t v : {n, c, h, w}) {
    if (v > 0x7fffffff) {
      throw Error(ErrorPrefix(op, "cuDNN tensor dimension " + std::to_string(v) + " exceeds 2^31 - 1"));
    }
  }
  CheckDnn(cudnnSetTensor4dDescriptor(d_, CUDNN_TENSOR_NCHW, type, static_cast<int>(n), static_cast<int>(c),
                                      static_cast<int>(h), static_cast<int>(w)),
           "cudnnSetTensor4dDescriptor", op);
}

}  // namespace troupe::internal
