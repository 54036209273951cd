// The GPU device as the actors module sees it: a forwarder to the GPU backend (libtroupe_gpu.so, where
// actors/src/gpu_device.cc is built), which is loaded the first time a GPU is asked for (base/gpu_module.h).
// In a build without CUDA there is no backend and these say so.
#include "actors/detail/devices.h"
#include "base/error.h"
#include "base/gpu_module.h"

namespace troupe::internal {
namespace {
// Throws (naming the module and the dynamic linker's reason) when the backend cannot be loaded.
const GpuDeviceTable& Table() { return GpuModuleTable<GpuDeviceTable>(kGpuDeviceTableSymbol); }
}  // namespace

int CudaDeviceCount() {
  if (!GpuModuleBuilt()) return 0;
  try {
    return Table().device_count();
  } catch (const Error&) {
    return 0;  // the backend cannot be loaded: no GPU for this process (GpuModuleError() says why)
  }
}

std::unique_ptr<DeviceImpl> MakeGpuDevice(caf::actor_system& system, Context ctx, const RuntimeConfig& config) {
  if (!GpuModuleBuilt()) throw Error("cannot use " + ctx.ToString() + ": " + GpuModuleError());
  return Table().make_device(system, ctx, config);
}

}  // namespace troupe::internal
