#include "base/context.h"

#include <string>

namespace troupe {

std::string Context::ToString() const {
  switch (dev_type) {
    case DeviceType::kCPU:
      return "cpu(" + std::to_string(dev_id) + ")";
    case DeviceType::kGPU:
      return "gpu(" + std::to_string(dev_id) + ")";
    case DeviceType::kCPUPinned:
      return "cpu_pinned(" + std::to_string(dev_id) + ")";
  }
  return "unknown_device(" + std::to_string(static_cast<int>(dev_type)) + ")";
}

}  // namespace troupe
