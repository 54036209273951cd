// The optimizers' GPU step in a build without CUDA (op/src/optimizer.cu otherwise): it says so. An NDArray
// never reaches a GPU in such a build (storage refuses GPU contexts first); this keeps the link complete.
#include <string>
#include <vector>

#include "base/error.h"
#include "op/internal/optimizer_kernels.h"

namespace troupe::internal {

void GpuOptimizerStep(OptimizerKind, const OptimizerScalars&, const TBlob&, const TBlob&, const std::vector<TBlob>&,
                      void*) {
  throw Error("GPU optimizer update: troupe was built without CUDA (configure with nvcc present, or "
              "-DTROUPE_USE_CUDA=ON); use Context::CPU()");
}

}  // namespace troupe::internal
