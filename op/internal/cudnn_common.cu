// The out-of-line parts of op/internal/cudnn_common.h: the cuDNN error text, the per-thread cuDNN handle
// (tensor/detail/cuda_common.h's PerDeviceHandles) and the tensor descriptor's Set.
#include "op/internal/cudnn_common.h"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

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

std::vector<int> DnnDims(const std::vector<std::int64_t>& dims, std::string_view op) {
  std::vector<int> out;
  for (std::int64_t v : dims) {
    if (v > 0x7fffffff) {
      throw Error(ErrorPrefix(op, "cuDNN tensor dimension " + std::to_string(v) + " exceeds 2^31 - 1"));
    }
    out.push_back(static_cast<int>(v));
  }
  return out;
}

void TensorDesc::Set(cudnnDataType_t type, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w,
                     std::string_view op) {
  Set(type, TShape{n, c, h, w}, op);
}

void TensorDesc::Set(cudnnDataType_t type, const TShape& shape, std::string_view op) {
  const std::vector<int> dims = DnnDims(shape.ToVector(), op);
  std::vector<int> strides(dims.size(), 1);  // packed, row-major
  for (std::size_t i = dims.size() - 1; i > 0; --i) strides[i - 1] = strides[i] * dims[i];
  CheckDnn(cudnnSetTensorNdDescriptor(d_, type, static_cast<int>(dims.size()), dims.data(), strides.data()),
           "cudnnSetTensorNdDescriptor", op);
}

}  // namespace troupe::internal
