// Context (where a function runs) and RunContext (what the engine hands the function at run time).
//
// Both are plain values; copying them is free and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace troupe {

// Device types, numbered as in MXNet (cpu=1, gpu=2, cpu_pinned=3) so that .params files map directly.
enum class DeviceType : int { kCPU = 1, kGPU = 2, kCPUPinned = 3 };

struct Context {
  DeviceType dev_type = DeviceType::kCPU;
  int dev_id = 0;

  static constexpr Context CPU(int dev_id = 0) { return {DeviceType::kCPU, dev_id}; }
  static constexpr Context GPU(int dev_id = 0) { return {DeviceType::kGPU, dev_id}; }
  static constexpr Context CPUPinned(int dev_id = 0) { return {DeviceType::kCPUPinned, dev_id}; }

  constexpr bool is_gpu() const { return dev_type == DeviceType::kGPU; }
  // Written out (not defaulted): public headers must also compile under nvcc.
  constexpr bool operator==(const Context& o) const { return dev_type == o.dev_type && dev_id == o.dev_id; }
  constexpr bool operator!=(const Context& o) const { return !(*this == o); }

  // "cpu(0)", "gpu(1)", "cpu_pinned(0)".
  std::string ToString() const;

  // The context a command line names: "cpu", "gpu" or "cpu_pinned", then ":N" or "(N)" for device N (0 when
  // absent): "cpu", "gpu:1", "gpu(1)" (what ToString writes). Throws troupe::Error naming the text otherwise.
  // Whether such a device exists is not checked here.
  static Context Parse(const std::string& text);
};

// Runtime information the engine decides when it runs a function.
struct RunContext {
  Context ctx;
  // On GPU: a cudaStream_t* for the stream the function must enqueue its work on. Null on CPU.
  void* stream = nullptr;
};

}  // namespace troupe

template <>
struct std::hash<troupe::Context> {
  std::size_t operator()(const troupe::Context& c) const noexcept {
    return std::hash<int>()(static_cast<int>(c.dev_type) * 65536 + c.dev_id);
  }
};
