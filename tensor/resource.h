// Resources — what operators may ask the system for besides their inputs and outputs (the seed's
// "Resource Manager"): random number generators and temporary workspace.
//
//   kRandom          the device's generator (one per device and engine). Functions that use it are
//                    serialised on its engine variable, so a seeded sequence of random operations gives
//                    the same numbers on every run.
//   kParallelRandom  one of several independent generators of the device (each with its own variable), so
//                    random operations on one device may run in parallel; still reproducible per copy.
//   kTempSpace       scratch memory on the device. Several copies per device (TROUPE_CPU_TEMP_COPY,
//                    TROUPE_GPU_TEMP_COPY), each guarded by its own engine variable: functions using the
//                    same copy are serialised, as in the seed.
//
// A function that uses a Resource must list resource.var among its mutable variables when it is pushed;
// inside the function it may call get_random()/get_space(). Outside such a function they must not be used.
//
// Generators are Philox4x32-10 (counter based, as in cuRAND and JAX): a stream is a 64-bit key and a
// 64-bit block counter, each block giving four 32-bit numbers. Element i of a fill takes block
// (base + i / 4), word i % 4, so CPU and CUDA kernels produce the same numbers for the same key and base.
// The key of device d after SeedRandom(s) is derived from (s, d, copy): devices give independent streams.
//
// Thread-safety: ResourceManager's member functions are thread-safe. A Resource's state may only be
// touched by the function holding its variable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "engine/engine.h"
#include "tensor/tensor.h"

namespace troupe {

struct ResourceRequest {
  enum Type { kRandom = 0, kTempSpace = 1, kParallelRandom = 2 };
  Type type = kTempSpace;
  ResourceRequest() = default;
  ResourceRequest(Type t) : type(t) {}  // NOLINT: implicit, as in MXNet (ResourceRequest r = kTempSpace)
};

// Philox4x32-10 on the host (the CUDA kernels use the same function from tensor/detail/philox.h).
void Philox4x32(std::uint64_t key, std::uint64_t counter, std::uint32_t out[4]);
// A 32-bit random word as a float in [0, 1) (24 random bits).
inline float UniformFloat(std::uint32_t word) { return static_cast<float>(word >> 8) * (1.0f / 16777216.0f); }
// A 64-bit pair of words as a double in [0, 1) (53 random bits).
inline double UniformDouble(std::uint32_t hi, std::uint32_t lo) {
  return static_cast<double>(((static_cast<std::uint64_t>(hi) << 32) | lo) >> 11) * (1.0 / 9007199254740992.0);
}

// A counter-based random stream. Not thread-safe: owned by the function holding the resource's variable.
class RandomGenerator {
 public:
  explicit RandomGenerator(std::uint64_t key = 0) : key_(key) {}
  std::uint64_t key() const { return key_; }
  std::uint64_t counter() const { return counter_; }
  // Restarts the stream with a new key.
  void Seed(std::uint64_t key) {
    key_ = key;
    counter_ = 0;
  }
  // Reserves `blocks` consecutive 128-bit blocks and returns the first block's counter.
  std::uint64_t Reserve(std::uint64_t blocks) {
    const std::uint64_t base = counter_;
    counter_ += blocks;
    return base;
  }
  // Fills out[0..n) with uniform floats in [lo, hi) / normal floats (Box-Muller), on the host.
  void FillUniform(float* out, std::size_t n, float lo, float hi);
  void FillNormal(float* out, std::size_t n, float mean, float stddev);
  void FillUniform(double* out, std::size_t n, double lo, double hi);
  void FillNormal(double* out, std::size_t n, double mean, double stddev);

 private:
  std::uint64_t key_ = 0;
  std::uint64_t counter_ = 0;
};

namespace internal {
struct TempSpace;
}

// A resource handed to a function. Cheap to copy.
class Resource {
 public:
  ResourceRequest::Type type() const { return type_; }
  Context ctx() const { return ctx_; }
  // The engine variable guarding this resource: list it among the function's mutable variables.
  VarHandle var() const { return var_; }
  // kRandom / kParallelRandom: the generator. Only inside a function that holds var().
  RandomGenerator* get_random() const;
  // kTempSpace: at least `bytes` bytes on ctx(), 64-byte aligned, valid until the function returns. The
  // buffer grows on demand; growing may throw troupe::Error when the device is out of memory.
  void* get_space(std::size_t bytes) const;
  TBlob get_space(const TShape& shape, DType dtype) const;

 private:
  friend class ResourceManager;
  ResourceRequest::Type type_ = ResourceRequest::kTempSpace;
  Context ctx_;
  VarHandle var_ = nullptr;
  void* state_ = nullptr;  // RandomGenerator* or internal::TempSpace*
};

struct ResourceConfig {
  int cpu_temp_copies = 4;
  int gpu_temp_copies = 1;
  int cpu_parallel_random_copies = 1;
  int gpu_parallel_random_copies = 4;
  std::uint64_t seed = 0;  // the seed every device starts from

  // Applies TROUPE_CPU_TEMP_COPY, TROUPE_GPU_TEMP_COPY, TROUPE_CPU_PARALLEL_RAND_COPY,
  // TROUPE_GPU_PARALLEL_RAND_COPY (each 1..64) and TROUPE_RANDOM_SEED. Throws troupe::Error on a bad value.
  ResourceConfig WithEnv() const;
};

// The resources of one engine: one set per device, created on first request.
class ResourceManager {
 public:
  // The resource manager of `engine` (created on first use from ResourceConfig{}.WithEnv(); it lives as
  // long as the engine). Never null.
  static ResourceManager* Get(Engine* engine = Engine::Get());
  // Use Get(): an engine has one resource manager.
  ResourceManager(Engine* engine, const ResourceConfig& config);
  ~ResourceManager();
  ResourceManager(const ResourceManager&) = delete;
  ResourceManager& operator=(const ResourceManager&) = delete;

  // A resource of type req.type on ctx. kTempSpace and kParallelRandom requests cycle through the
  // device's copies. Throws troupe::Error for a device that does not exist.
  Resource Request(Context ctx, ResourceRequest req);
  // The same, with kTempSpace from copy `key` % copies: requests of one key share a copy. An operator asking
  // with a key of what it is (its type and shapes) keeps to one copy however often it is made again (each
  // imperative call makes it anew), so each copy grows only to what its operators need, not to the largest
  // request of the process. Other types as Request.
  Resource Request(Context ctx, ResourceRequest req, std::uint64_t key);
  // Reseeds every device's generators (those created later too). Ordered after every random operation
  // pushed before, and before every one pushed after: a seeded sequence is reproducible.
  void SeedRandom(std::uint64_t seed);
  // Reseeds only `ctx`'s generators.
  void SeedRandom(Context ctx, std::uint64_t seed);
  Engine* engine() const;

  struct Impl;

 private:
  Resource Pick(Context ctx, ResourceRequest req, const std::uint64_t* key);
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe
