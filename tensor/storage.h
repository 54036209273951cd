// Storage — the pooled memory allocator behind every NDArray (the seed's "Storage Allocator").
//
// One pool per device (Context): CPU memory, CPU memory pinned for fast GPU copies (cudaHostAlloc) and GPU
// memory (cudaMalloc), the last two only in a CUDA build. A freed block goes back to its pool and is handed
// out again for a later request of the same size class, so steady-state training allocates nothing from
// the system. Two pool policies:
//   kExact  a block is reused only for a request of exactly its size (rounded to the 64-byte alignment);
//   kRound  sizes are rounded up to a power of two (up to 2^round_cutoff bytes, then to a multiple of
//           2^round_cutoff), so nearby sizes share blocks at the cost of some slack;
//   kNone   no pooling: every Free returns the block to the system.
// A memory reserve keeps a share of the device's memory free: before a fresh allocation that would leave
// less than the reserve free, the pool releases its cached blocks. When the system refuses an allocation,
// the pool releases its cached blocks and tries once more; if that fails too, Alloc throws troupe::Error
// naming the device, the size and the pool's state.
//
// Thread-safety: every member function is thread-safe. Blocks may be freed from any thread (NDArrays free
// theirs on engine worker threads once the last function using them has run).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/context.h"

namespace troupe {

enum class PoolPolicy { kExact, kRound, kNone };
// Bytes in binary units for messages and statistics: "512 B", "1.5 MiB", "4.0 PiB".
std::string FormatBytes(std::uint64_t bytes);
const char* PoolPolicyName(PoolPolicy policy);

struct StorageConfig {
  PoolPolicy cpu_policy = PoolPolicy::kExact;
  PoolPolicy gpu_policy = PoolPolicy::kRound;
  // Share of the device's memory (percent) the pool keeps free by releasing cached blocks first.
  double cpu_reserve_percent = 5.0;
  double gpu_reserve_percent = 5.0;
  // kRound: sizes up to 2^round_cutoff bytes round to a power of two; larger ones to a multiple of it.
  int round_cutoff = 24;

  // Applies TROUPE_CPU_MEM_POOL_TYPE, TROUPE_GPU_MEM_POOL_TYPE (exact|round|none),
  // TROUPE_CPU_MEM_POOL_RESERVE, TROUPE_GPU_MEM_POOL_RESERVE (percent) and TROUPE_MEM_POOL_ROUND_CUTOFF
  // on top of *this. Throws troupe::Error naming the variable on a bad value.
  StorageConfig WithEnv() const;
};

// A block of device memory handed out by Storage.
struct StorageHandle {
  void* dptr = nullptr;
  std::size_t size = 0;  // bytes requested
  Context ctx;
};

struct StorageStats {
  Context ctx;
  PoolPolicy policy = PoolPolicy::kExact;
  std::uint64_t bytes_in_use = 0;   // held by live blocks (their pooled block sizes)
  std::uint64_t bytes_cached = 0;   // free blocks kept by the pool for reuse
  std::uint64_t peak_bytes_in_use = 0;
  std::uint64_t allocs = 0;         // Alloc calls
  std::uint64_t hits = 0;           // of which served from the pool's cache
  std::uint64_t system_allocs = 0;  // blocks obtained from the system (malloc, cudaMalloc, ...)
  std::uint64_t system_frees = 0;   // blocks returned to the system
  std::uint64_t blocks_in_use = 0;
  std::uint64_t blocks_cached = 0;
  double hit_rate() const { return allocs == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(allocs); }
  std::string ToString() const;
};

class Storage {
 public:
  // The process-wide storage (configured from StorageConfig{}.WithEnv() on first use). Returned as a
  // shared_ptr so that arrays freed during static destruction keep it alive.
  static const std::shared_ptr<Storage>& Get();
  // An independent storage (tests, benchmarks).
  static std::shared_ptr<Storage> Create(const StorageConfig& config);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // A block of at least `size` bytes on `ctx`, 64-byte aligned (size 0 gives a valid, unique pointer).
  // Throws troupe::Error when the device has no memory left (after one release-and-retry), when the
  // device does not exist, or for pinned/GPU memory in a build without CUDA.
  StorageHandle Alloc(std::size_t size, Context ctx);
  // Returns the block to its pool (or to the system under kNone).
  void Free(StorageHandle handle);
  // Returns the block to the system at once, bypassing the pool.
  void DirectFree(StorageHandle handle);
  // Returns every cached (free) block of `ctx`'s pool to the system; blocks in use are untouched.
  // Returns the number of bytes released.
  std::uint64_t ReleaseAll(Context ctx);
  // ReleaseAll for every device.
  std::uint64_t ReleaseAll();

  StorageStats Stats(Context ctx) const;
  std::vector<StorageStats> AllStats() const;
  // Starts `ctx`'s peak_bytes_in_use afresh at its bytes in use now (to measure the peak of one piece of work).
  void ResetPeak(Context ctx);
  const StorageConfig& config() const;

  struct Impl;

 private:
  explicit Storage(const StorageConfig& config);
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe
