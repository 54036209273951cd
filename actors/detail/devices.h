// Device implementations (internal). Each lives in the Runtime and owns CAF actors.
#pragma once

#include <memory>
#include <vector>

#include "actors/config.h"
#include "actors/device.h"
#include "caf/fwd.hpp"

namespace troupe::internal {

class DeviceImpl : public Device {
 public:
  using Device::Device;
  // Appends every actor of this device to `out` so the Runtime can stop them.
  virtual void CollectActors(std::vector<caf::actor>* out) const = 0;
};

std::unique_ptr<DeviceImpl> MakeCpuDevice(caf::actor_system& system, Context ctx, const RuntimeConfig& config);
// Throws troupe::Error when there is no such GPU or the build has no CUDA.
std::unique_ptr<DeviceImpl> MakeGpuDevice(caf::actor_system& system, Context ctx, const RuntimeConfig& config);
int CudaDeviceCount();

}  // namespace troupe::internal
