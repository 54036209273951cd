// The out-of-line part of tensor/detail/cuda_common.h: the CUDA error text.
#include "tensor/detail/cuda_common.h"

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

}  // namespace troupe::internal
