// What the GPU backend (tensor/cuda/kernels.cu, built into libtroupe_gpu.so) gives the tensor module: the
// Gpu* kernels of tensor/detail/kernels.h, returned by its extern "C" function kGpuKernelTableSymbol. The
// tensor module's own Gpu* functions (tensor/cuda/kernels_forward.cc) load the backend on first use and call
// through this table. Internal: never installed, never included outside tensor/.
#pragma once

#include "tensor/detail/kernels.h"

namespace troupe::internal {

struct GpuKernelTable {
  decltype(&GpuMalloc) malloc;
  decltype(&GpuFree) free;
  decltype(&GpuHostAlloc) host_alloc;
  decltype(&GpuHostFree) host_free;
  decltype(&GpuMemInfo) mem_info;
  decltype(&GpuCopy) copy;
  decltype(&GpuCopyPeer) copy_peer;
  decltype(&GpuBinary) binary;
  decltype(&GpuBinaryScalar) binary_scalar;
  decltype(&GpuFill) fill;
  decltype(&GpuCast) cast;
  decltype(&GpuSample) sample;
  decltype(&GpuGemm) gemm;
};
inline constexpr const char* kGpuKernelTableSymbol = "troupe_gpu_kernel_table";

}  // namespace troupe::internal
