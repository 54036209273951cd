#include "base/context.h"

#include <string>

#include "base/error.h"

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

Context Context::Parse(const std::string& text) {
  const auto bad = [&text] {
    return Error("bad device '" + text + "' (want cpu, gpu:N, cpu_pinned:N or the form gpu(N))");
  };
  std::string kind = text, id;
  if (const auto colon = text.find(':'); colon != std::string::npos) {
    kind = text.substr(0, colon);
    id = text.substr(colon + 1);
    if (id.empty()) throw bad();
  } else if (const auto open = text.find('('); open != std::string::npos) {
    if (text.back() != ')' || open + 2 >= text.size()) throw bad();
    kind = text.substr(0, open);
    id = text.substr(open + 1, text.size() - open - 2);
  }
  int dev_id = 0;
  if (!id.empty()) {
    if (id.size() > 4 || id.find_first_not_of("0123456789") != std::string::npos) throw bad();
    dev_id = std::stoi(id);
  }
  if (kind == "cpu") return CPU(dev_id);
  if (kind == "gpu") return GPU(dev_id);
  if (kind == "cpu_pinned") return CPUPinned(dev_id);
  throw bad();
}

}  // namespace troupe
