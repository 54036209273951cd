// What the GPU backend (libtroupe_gpu.so) gives the operator module besides the GPU operators it registers
// when it is loaded (RegisterGpuOperator, SimpleOp GPU functions): the optimizers' GPU step
// (op/src/optimizer.cu), returned by its extern "C" function kGpuOpTableSymbol and called through
// op/src/optimizer_forward.cc. Internal to op/.
#pragma once

#include "op/internal/optimizer_kernels.h"

namespace troupe::internal {

struct GpuOpTable {
  decltype(&GpuOptimizerStep) optimizer_step;
};
inline constexpr const char* kGpuOpTableSymbol = "troupe_gpu_op_table";

}  // namespace troupe::internal
