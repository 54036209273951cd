// Runtime — the actor system troupe runs in, and the devices (worker actors) living in it.
//
// A Runtime either starts its own caf::actor_system (configured from RuntimeConfig: scheduler threads,
// policy) or runs inside one the caller passes in, so an application that already uses CAF embeds troupe
// without a second actor system. Devices are created on first use and stopped when the Runtime is
// destroyed. This header deliberately includes no CAF header: caf::actor_system is only forward-declared.
//
// Thread-safety: every member function is thread-safe.
#pragma once

#include <memory>
#include <vector>

#include "actors/config.h"
#include "base/context.h"
#include "actors/device.h"

namespace caf {
class actor_system;
}

namespace troupe {

class Runtime {
 public:
  // Starts a runtime. With `external` null, troupe creates and owns its actor system; otherwise it spawns
  // its actors in `external`, which must outlive the Runtime. Throws troupe::Error on a bad config.
  static std::shared_ptr<Runtime> Create(const RuntimeConfig& config, caf::actor_system* external = nullptr);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  caf::actor_system& system();
  bool owns_system() const;
  const RuntimeConfig& config() const;  // resolved: no zeros left

  // The device for `ctx`, created on first use (cpu_pinned(i) is cpu(0)'s device). Throws troupe::Error when the device does not exist
  // (no such GPU, or a build without CUDA).
  Device* GetDevice(Context ctx);
  std::vector<DeviceStats> Stats() const;

  // Number of CUDA devices usable by this process (0 without CUDA or without a GPU).
  static int GpuCount();

  struct Impl;

 private:
  explicit Runtime(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe
