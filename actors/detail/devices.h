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
// Throws troupe::Error when there is no such GPU, the build has no CUDA or its GPU backend cannot be loaded.
// Both forward to the GPU backend (actors/src/gpu_forward.cc), loading it on first use (base/gpu_module.h).
std::unique_ptr<DeviceImpl> MakeGpuDevice(caf::actor_system& system, Context ctx, const RuntimeConfig& config);
// The GPUs CUDA sees; 0 without CUDA, without a GPU or when the GPU backend cannot be loaded.
int CudaDeviceCount();

// What the GPU backend (actors/src/gpu_device.cc, built into libtroupe_gpu.so) gives the actors module:
// returned by its extern "C" function kGpuDeviceTableSymbol.
struct GpuDeviceTable {
  int (*device_count)();
  std::unique_ptr<DeviceImpl> (*make_device)(caf::actor_system& system, Context ctx, const RuntimeConfig& config);
};
inline constexpr const char* kGpuDeviceTableSymbol = "troupe_gpu_device_table";

}  // namespace troupe::internal
