#include "tensor/storage.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "actors/config.h"
#include "base/spinlock.h"
#include "base/address_space.h"
#include "base/error.h"
#include "base/gpu_module.h"
#include "actors/runtime.h"
#include "tensor/detail/kernels.h"

namespace troupe {

std::string FormatBytes(std::uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024.0 && u < 6) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), v == static_cast<double>(static_cast<std::uint64_t>(v)) ? "%.0f %s" : "%.1f %s", v,
                units[u]);
  return buf;
}

const char* PoolPolicyName(PoolPolicy policy) {
  switch (policy) {
    case PoolPolicy::kExact: return "exact";
    case PoolPolicy::kRound: return "round";
    case PoolPolicy::kNone: return "none";
  }
  return "invalid";
}

namespace {

constexpr std::size_t kAlign = 64;

PoolPolicy PolicyFromName(const std::string& name) {
  if (name == "exact") return PoolPolicy::kExact;
  if (name == "round") return PoolPolicy::kRound;
  return PoolPolicy::kNone;
}


// MemAvailable and MemTotal of this machine, in bytes; false when /proc/meminfo cannot be read.
bool CpuMemInfo(std::size_t* available, std::size_t* total) {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::size_t kb = 0, got = 0;
  std::string unit;
  while (got < 2 && in >> key >> kb >> unit) {
    if (key == "MemAvailable:") {
      *available = kb * 1024;
      ++got;
    } else if (key == "MemTotal:") {
      *total = kb * 1024;
      ++got;
    }
  }
  return got == 2;
}

// Free blocks by block size. The hit path must beat malloc, so common sizes index a flat table directly
// (exact policy: multiples of 64 bytes up to 1 MiB; round policy: powers of two), and only the rest go
// through a hash map.
class FreeLists {
 public:
  FreeLists(PoolPolicy policy, int round_cutoff)
      : policy_(policy), flat_(policy == PoolPolicy::kRound ? static_cast<std::size_t>(round_cutoff) + 1
                                                           : kExactFlatMax / kAlign) {}

  // The list for `block`, or null when none was ever made.
  std::vector<void*>* Find(std::size_t block) {
    const std::size_t i = Index(block);
    if (i != kNoIndex) return &flat_[i];
    Recent& r = recent_[Slot(block)];
    if (r.block == block) return r.list;
    auto it = rest_.find(block);
    if (it == rest_.end()) return nullptr;
    r = {block, &it->second};
    return r.list;
  }
  std::vector<void*>& Get(std::size_t block) {
    const std::size_t i = Index(block);
    if (i != kNoIndex) return flat_[i];
    Recent& r = recent_[Slot(block)];
    if (r.block != block) r = {block, &rest_[block]};
    return *r.list;
  }
  // Moves every free block out (to be returned to the system outside the lock).
  std::vector<void*> TakeAll() {
    std::vector<void*> all;
    for (auto& list : flat_) {
      all.insert(all.end(), list.begin(), list.end());
      list.clear();
    }
    for (auto& [size, list] : rest_) {  // the lists stay (empty): recent_ points at them
      all.insert(all.end(), list.begin(), list.end());
      list.clear();
    }
    return all;
  }

 private:
  static constexpr std::size_t kExactFlatMax = std::size_t{1} << 20;
  static constexpr std::size_t kNoIndex = ~std::size_t{0};

  std::size_t Index(std::size_t block) const {
    if (policy_ == PoolPolicy::kRound) {
      if (!std::has_single_bit(block)) return kNoIndex;
      const auto i = static_cast<std::size_t>(std::countr_zero(block));
      return i < flat_.size() ? i : kNoIndex;
    }
    return block <= kExactFlatMax ? block / kAlign - 1 : kNoIndex;
  }

  // A direct-mapped cache in front of rest_ for the sizes in use (a map lookup costs a division and a
  // chain walk; references to unordered_map values stay valid, and lists are never erased).
  struct Recent {
    std::size_t block = 0;
    std::vector<void*>* list = nullptr;
  };
  static std::size_t Slot(std::size_t block) { return ((block >> 6) * 0x9E3779B97F4A7C15ull) >> 58; }

  const PoolPolicy policy_;
  std::vector<std::vector<void*>> flat_;
  std::unordered_map<std::size_t, std::vector<void*>> rest_;
  std::array<Recent, 64> recent_{};
};

// One device's pool.
class DevicePool {
 public:
  DevicePool(Context ctx, PoolPolicy policy, double reserve_percent, int round_cutoff)
      : ctx_(ctx),
        policy_(policy),
        reserve_percent_(reserve_percent),
        round_cutoff_(round_cutoff),
        free_(policy, round_cutoff) {}

  ~DevicePool() { ReleaseAll(); }

  // The size of the block that serves a request of `size` bytes; 0 when it would overflow.
  std::size_t BlockSize(std::size_t size) const {
    if (size > (std::size_t{1} << 62)) return 0;
    std::size_t s = std::max<std::size_t>(size, 1);
    s = (s + kAlign - 1) & ~(kAlign - 1);
    if (policy_ != PoolPolicy::kRound) return s;
    const std::size_t cutoff = std::size_t{1} << round_cutoff_;
    if (s <= cutoff) return std::bit_ceil(s);
    return (s + cutoff - 1) / cutoff * cutoff;
  }

  StorageHandle Alloc(std::size_t size) {
    const std::size_t block = BlockSize(size);
    if (block == 0) {
      throw Error("cannot allocate " + std::to_string(size) + " bytes on " + ctx_.ToString() +
                  ": the size is larger than any device can hold");
    }
    {
      std::lock_guard<SpinLock> lock(mu_);
      ++stats_.allocs;
      if (policy_ != PoolPolicy::kNone) {
        std::vector<void*>* list = free_.Find(block);
        if (list != nullptr && !list->empty()) {
          void* p = list->back();
          list->pop_back();
          ++stats_.hits;
          stats_.bytes_cached -= block;
          --stats_.blocks_cached;
          TakeLocked(block);
          return {p, size, ctx_};
        }
      }
    }
    // Miss: keep the reserve free, then ask the system (once more after releasing the cache).
    KeepReserve(block);
    std::string error;
    void* p = SystemAlloc(block, &error);
    std::uint64_t released = 0;
    if (p == nullptr) {
      released = ReleaseAll();
      p = SystemAlloc(block, &error);
    }
    if (p == nullptr) {
      const StorageStats s = Stats();
      std::ostringstream os;
      os << "out of memory on " << ctx_.ToString() << ": cannot allocate " << FormatBytes(size) << " (" << size
         << " bytes";
      if (block != size) os << ", a " << block << "-byte block";
      os << ")";
      if (!error.empty()) os << " (" << error << ")";
      os << "; released " << FormatBytes(released) << " of cached blocks and retried; " << FormatBytes(s.bytes_in_use)
         << " in use in " << s.blocks_in_use << " blocks. Free arrays you no longer need or use a smaller batch.";
      throw Error(os.str());
    }
    std::lock_guard<SpinLock> lock(mu_);
    ++stats_.system_allocs;
    TakeLocked(block);
    return {p, size, ctx_};
  }

  void Free(const StorageHandle& h, bool direct) {
    if (h.dptr == nullptr) return;
    const std::size_t block = BlockSize(h.size);
    {
      std::lock_guard<SpinLock> lock(mu_);
      stats_.bytes_in_use -= block;
      --stats_.blocks_in_use;
      if (!direct && policy_ != PoolPolicy::kNone) {
        free_.Get(block).push_back(h.dptr);
        stats_.bytes_cached += block;
        ++stats_.blocks_cached;
        return;
      }
      ++stats_.system_frees;
    }
    SystemFree(h.dptr);
  }

  std::uint64_t ReleaseAll() {
    std::vector<void*> blocks;
    std::uint64_t bytes = 0;
    {
      std::lock_guard<SpinLock> lock(mu_);
      blocks = free_.TakeAll();
      bytes = stats_.bytes_cached;
      stats_.system_frees += stats_.blocks_cached;
      stats_.bytes_cached = 0;
      stats_.blocks_cached = 0;
    }
    for (void* p : blocks) SystemFree(p);
    return bytes;
  }

  void ResetPeak() {
    std::lock_guard<SpinLock> lock(mu_);
    stats_.peak_bytes_in_use = stats_.bytes_in_use;
  }

  StorageStats Stats() const {
    std::lock_guard<SpinLock> lock(mu_);
    StorageStats s = stats_;
    s.ctx = ctx_;
    s.policy = policy_;
    return s;
  }

 private:
  void TakeLocked(std::size_t block) {
    stats_.bytes_in_use += block;
    ++stats_.blocks_in_use;
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  }

  // Releases the cache when a fresh block would leave less than the reserve free. Only worth asking the
  // device when there is a cache to release; the answer is reused for 10 ms (reading /proc/meminfo costs
  // about 17 us, which a burst of misses would otherwise pay each time).
  void KeepReserve(std::size_t block) {
    {
      std::lock_guard<SpinLock> lock(mu_);
      if (stats_.bytes_cached == 0 || reserve_percent_ <= 0) return;
    }
    std::size_t avail = 0, total = 0;
    {
      std::lock_guard<std::mutex> lock(meminfo_mu_);
      const auto now = std::chrono::steady_clock::now();
      if (!meminfo_known_ || now - meminfo_at_ > std::chrono::milliseconds(10)) {
        meminfo_known_ = ctx_.dev_type == DeviceType::kGPU ? internal::GpuMemInfo(ctx_.dev_id, &avail_, &total_)
                                                            : CpuMemInfo(&avail_, &total_);
        meminfo_at_ = now;
      }
      if (!meminfo_known_) return;
      avail = avail_;
      total = total_;
    }
    const double reserve = static_cast<double>(total) * reserve_percent_ / 100.0;
    if (static_cast<double>(avail) - static_cast<double>(block) < reserve) {
      ReleaseAll();
      std::lock_guard<std::mutex> lock(meminfo_mu_);
      meminfo_known_ = false;  // what the device has free just changed
    }
  }

  void* SystemAlloc(std::size_t block, std::string* error) {
    switch (ctx_.dev_type) {
      case DeviceType::kCPU: {
        void* p = std::aligned_alloc(kAlign, block);
        if (p == nullptr) {
          const std::string note = AddressSpaceNote();
          *error = "the system refused the allocation" + (note.empty() ? std::string() : ": " + note);
        }
        return p;
      }
      case DeviceType::kCPUPinned:
        return internal::GpuHostAlloc(block, error);
      case DeviceType::kGPU:
        return internal::GpuMalloc(ctx_.dev_id, block, error);
    }
    *error = "unknown device type";
    return nullptr;
  }

  void SystemFree(void* p) {
    switch (ctx_.dev_type) {
      case DeviceType::kCPU:
        std::free(p);
        return;
      case DeviceType::kCPUPinned:
        internal::GpuHostFree(p);
        return;
      case DeviceType::kGPU:
        internal::GpuFree(ctx_.dev_id, p);
        return;
    }
  }

  const Context ctx_;
  const PoolPolicy policy_;
  const double reserve_percent_;
  const int round_cutoff_;
  // A spin lock: the critical sections are a few dozen instructions, and a std::mutex's lock and unlock
  // (two atomic read-modify-writes) cost as much as the rest of a pool hit.
  mutable SpinLock mu_;
  FreeLists free_;
  StorageStats stats_;
  std::mutex meminfo_mu_;  // guards the cached device memory figures below
  bool meminfo_known_ = false;
  std::chrono::steady_clock::time_point meminfo_at_;
  std::size_t avail_ = 0, total_ = 0;
};

}  // namespace

namespace internal {

void CheckDeviceExists(Context ctx) {
  if (ctx.dev_id < 0) throw Error("invalid device " + ctx.ToString() + ": device ids are >= 0");
  switch (ctx.dev_type) {
    case DeviceType::kCPU:
      return;
    case DeviceType::kCPUPinned:
    case DeviceType::kGPU: {
      const int gpus = Runtime::GpuCount();
      if (gpus == 0) {
        // Runtime::GpuCount() loaded the GPU backend (if the build has one): say why there is no GPU.
        const std::string why = GpuModuleError();
        throw Error("device " + ctx.ToString() + " is not available: " +
                    (why.empty() ? "CUDA sees no GPU on this machine; use a CPU context (cpu:0)" : why));
      }
      if (ctx.dev_type == DeviceType::kGPU && ctx.dev_id >= gpus) {
        throw Error("device " + ctx.ToString() + " is not available: this machine has " + std::to_string(gpus) +
                    " GPU(s)");
      }
      return;
    }
  }
  throw Error("invalid device type " + std::to_string(static_cast<int>(ctx.dev_type)) +
              ": use a CPU, GPU or pinned-memory context (cpu:0, gpu:0, cpu_pinned:0)");
}

}  // namespace internal

StorageConfig StorageConfig::WithEnv() const {
  StorageConfig c = *this;
  const std::vector<std::string> policies = {"exact", "round", "none"};
  std::string p;
  if (EnvChoice("TROUPE_CPU_MEM_POOL_TYPE", policies, &p)) c.cpu_policy = PolicyFromName(p);
  if (EnvChoice("TROUPE_GPU_MEM_POOL_TYPE", policies, &p)) c.gpu_policy = PolicyFromName(p);
  EnvDouble("TROUPE_CPU_MEM_POOL_RESERVE", 0, 100, &c.cpu_reserve_percent);
  EnvDouble("TROUPE_GPU_MEM_POOL_RESERVE", 0, 100, &c.gpu_reserve_percent);
  EnvInt("TROUPE_MEM_POOL_ROUND_CUTOFF", 6, 40, &c.round_cutoff);
  return c;
}

std::string StorageStats::ToString() const {
  std::ostringstream os;
  os << ctx.ToString() << " (" << PoolPolicyName(policy) << "): in use " << FormatBytes(bytes_in_use) << " in "
     << blocks_in_use << " blocks, cached " << FormatBytes(bytes_cached) << " in " << blocks_cached
     << " blocks, peak " << FormatBytes(peak_bytes_in_use) << ", " << allocs << " allocations, hit rate "
     << static_cast<int>(hit_rate() * 1000 + 0.5) / 10.0 << "%";
  return os.str();
}

struct Storage::Impl {
  StorageConfig config;
  mutable std::mutex mu;  // guards pools (creation); a pool, once made, lives as long as the storage
  std::unordered_map<Context, std::unique_ptr<DevicePool>> pools;
  // Lock-free lookup for the common devices: [device type 1..3][dev_id < 16].
  std::array<std::array<std::atomic<DevicePool*>, 16>, 4> fast{};

  DevicePool* Pool(Context ctx) {
    const int t = static_cast<int>(ctx.dev_type);
    const bool fastable = t >= 1 && t <= 3 && ctx.dev_id >= 0 && ctx.dev_id < 16;
    if (fastable) {
      if (DevicePool* p = fast[t][ctx.dev_id].load(std::memory_order_acquire)) return p;
    }
    std::lock_guard<std::mutex> lock(mu);
    auto it = pools.find(ctx);
    if (it != pools.end()) return it->second.get();
    internal::CheckDeviceExists(ctx);
    const bool gpu = ctx.dev_type == DeviceType::kGPU;
    auto pool = std::make_unique<DevicePool>(ctx, gpu ? config.gpu_policy : config.cpu_policy,
                                             gpu ? config.gpu_reserve_percent : config.cpu_reserve_percent,
                                             config.round_cutoff);
    DevicePool* raw = pool.get();
    pools.emplace(ctx, std::move(pool));
    if (fastable) fast[t][ctx.dev_id].store(raw, std::memory_order_release);
    return raw;
  }

  DevicePool* Existing(Context ctx) const {
    std::lock_guard<std::mutex> lock(mu);
    auto it = pools.find(ctx);
    return it == pools.end() ? nullptr : it->second.get();
  }
};

Storage::Storage(const StorageConfig& config) : impl_(std::make_unique<Impl>()) {
  if (config.round_cutoff < 6 || config.round_cutoff > 40) {
    throw Error("StorageConfig::round_cutoff = " + std::to_string(config.round_cutoff) + " is out of range [6, 40]");
  }
  if (!(config.cpu_reserve_percent >= 0 && config.cpu_reserve_percent <= 100) ||
      !(config.gpu_reserve_percent >= 0 && config.gpu_reserve_percent <= 100)) {
    throw Error("StorageConfig reserve percentages must be in [0, 100]");
  }
  impl_->config = config;
}

Storage::~Storage() = default;

const std::shared_ptr<Storage>& Storage::Get() {
  static const std::shared_ptr<Storage> storage = Create(StorageConfig{}.WithEnv());
  return storage;
}

std::shared_ptr<Storage> Storage::Create(const StorageConfig& config) {
  return std::shared_ptr<Storage>(new Storage(config));  // the constructor is private: make_shared can't reach it
}

StorageHandle Storage::Alloc(std::size_t size, Context ctx) { return impl_->Pool(ctx)->Alloc(size); }

void Storage::Free(StorageHandle handle) {
  if (handle.dptr == nullptr) return;
  impl_->Pool(handle.ctx)->Free(handle, false);
}

void Storage::DirectFree(StorageHandle handle) {
  if (handle.dptr == nullptr) return;
  impl_->Pool(handle.ctx)->Free(handle, true);
}

std::uint64_t Storage::ReleaseAll(Context ctx) {
  DevicePool* p = impl_->Existing(ctx);
  return p == nullptr ? 0 : p->ReleaseAll();
}

std::uint64_t Storage::ReleaseAll() {
  std::vector<DevicePool*> pools;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (auto& [ctx, p] : impl_->pools) pools.push_back(p.get());
  }
  std::uint64_t bytes = 0;
  for (DevicePool* p : pools) bytes += p->ReleaseAll();
  return bytes;
}

StorageStats Storage::Stats(Context ctx) const {
  DevicePool* p = impl_->Existing(ctx);
  if (p != nullptr) return p->Stats();
  StorageStats s;
  s.ctx = ctx;
  s.policy = ctx.dev_type == DeviceType::kGPU ? impl_->config.gpu_policy : impl_->config.cpu_policy;
  return s;
}

void Storage::ResetPeak(Context ctx) {
  DevicePool* p = impl_->Existing(ctx);
  if (p != nullptr) p->ResetPeak();
}

std::vector<StorageStats> Storage::AllStats() const {
  std::vector<StorageStats> out;
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (auto& [ctx, p] : impl_->pools) out.push_back(p->Stats());
  return out;
}

const StorageConfig& Storage::config() const { return impl_->config; }

}  // namespace troupe
