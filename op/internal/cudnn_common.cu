// The out-of-line parts of op/internal/cudnn_common.h: the cuDNN error text, the per-thread cuDNN handle
// cache and the tensor descriptor's Set.
#include "op/internal/cudnn_common.h"

#include <initializer_list>
#include <map>
#include <string>

#include "base/error.h"

namespace troupe::internal {

namespace {

std::string Prefix(std::string_view op, std::string_view what) {
  std::string m;
  if (!op.empty()) {
    m.append(op);
    m += ": ";
  }
  m.append(what);
  return m;
}

// One cuDNN handle per device for the thread that owns this object (a thread_local below).
class DnnHandles {
 public:
  ~DnnHandles() {
    for (auto& [dev, h] : handles_) {
      if (cudaSetDevice(dev) == cudaSuccess) cudnnDestroy(h);
    }
  }
  cudnnHandle_t Get(int dev, std::string_view op) {
    auto it = handles_.find(dev);
    if (it != handles_.end()) return it->second;
    cudnnHandle_t h = nullptr;
    CheckDnn(cudnnCreate(&h), "cudnnCreate on gpu(" + std::to_string(dev) + ")", op);
    handles_.emplace(dev, h);
    return h;
  }

 private:
  std::map<int, cudnnHandle_t> handles_;
};

}  // namespace

void ThrowDnn(cudnnStatus_t s, std::string_view what, std::string_view op) {
  throw Error(Prefix(op, what) + ": cuDNN error: " + cudnnGetErrorString(s));
}

cudnnHandle_t DnnHandle(const OpContext& ctx, std::string_view op) {
  thread_local DnnHandles handles;
  const int dev = ctx.run_ctx.ctx.dev_id;
  SetDevice(dev, op);
  cudnnHandle_t h = handles.Get(dev, op);
  CheckDnn(cudnnSetStream(h, StreamOf(ctx)), "cudnnSetStream", op);
  return h;
}

void TensorDesc::Set(cudnnDataType_t type, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w,
                     std::string_view op) {
  for (std::int64_t v : {n, c, h, w}) {
    if (v > 0x7fffffff) {
      throw Error(Prefix(op, "cuDNN tensor dimension " + std::to_string(v) + " exceeds 2^31 - 1"));
    }
  }
  CheckDnn(cudnnSetTensor4dDescriptor(d_, CUDNN_TENSOR_NCHW, type, static_cast<int>(n), static_cast<int>(c),
                                      static_cast<int>(h), static_cast<int>(w)),
           "cudnnSetTensor4dDescriptor", op);
}

}  // namespace troupe::internal
