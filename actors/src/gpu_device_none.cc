// Built instead of gpu_device.cc when troupe is configured without CUDA.
#include "base/error.h"
#include "actors/detail/devices.h"

namespace troupe::internal {

int CudaDeviceCount() { return 0; }

std::unique_ptr<DeviceImpl> MakeGpuDevice(caf::actor_system&, Context ctx, const RuntimeConfig&) {
  throw Error("cannot use " + ctx.ToString() +
              ": this troupe was built without CUDA (configure with nvcc on PATH and TROUPE_USE_CUDA=ON)");
}

}  // namespace troupe::internal
