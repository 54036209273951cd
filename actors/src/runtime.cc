#include "actors/runtime.h"

#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "actors/config.h"
#include "base/address_space.h"
#include "base/error.h"
#include "actors/detail/devices.h"
#include "actors/detail/wakeable.h"
#include "caf/all.hpp"

extern "C" void openblas_set_num_threads(int num_threads);
extern "C" int openblas_get_num_threads();

namespace troupe {
namespace {

// Sets OpenBLAS's thread count. Raising it past the threads OpenBLAS has started starts more, and each new
// thread maps a work buffer (kOpenBlasBufferBytes) as it starts; when it cannot, it spins forever and every
// product it is given waits for it (base/address_space.h). So under an address-space limit the count goes
// only as high as the space allows, with a warning naming the limit: fewer BLAS threads, never a hang.
void SetBlasThreads(int wanted) {
  static std::mutex mu;
  static int started = -1;  // the most threads OpenBLAS has had (it never stops one)
  std::lock_guard<std::mutex> lock(mu);
  if (started < 0) started = std::max(1, openblas_get_num_threads());  // what it started when it was loaded
  int n = std::max(1, wanted);
  while (n > started && !AddressSpaceAvailable(static_cast<std::size_t>(n - started) * kOpenBlasBufferBytes)) --n;
  if (n < wanted) {
    std::fprintf(stderr, "troupe: using %d OpenBLAS thread(s), not %d: each needs a %zu MiB buffer and %s\n", n,
                 wanted, kOpenBlasBufferBytes >> 20, AddressSpaceNote().c_str());
  }
  openblas_set_num_threads(n);
  started = std::max(started, n);
}

// Under an address-space limit, caps glibc's malloc arenas. glibc gives threads that allocate up to
// 8 x cores arenas, and each reserves 64 MiB of address space (no memory) when it is made: with the CAF,
// engine, OpenMP and prefetch threads that was 7 arenas, 440 MiB, more than half of what a CPU training
// mapped, and under `ulimit -v` the space they reserve is what thread stacks and OpenBLAS's buffers then
// lack. Allocations made from fewer arenas only contend a little more. Without a limit nothing changes.
void CapMallocArenas() {
  static std::once_flag once;
  std::call_once(once, [] {
    const std::size_t limit = AddressSpaceLimit();
    if (limit == 0 || std::getenv("MALLOC_ARENA_MAX") != nullptr) return;  // the user's choice wins
    const std::size_t arenas = std::max<std::size_t>(2, limit / (std::size_t{512} << 20));  // <= 1/8 of it
    mallopt(M_ARENA_MAX, static_cast<int>(std::min<std::size_t>(arenas, 1024)));
  });
}

}  // namespace
}  // namespace troupe

namespace troupe {

struct Runtime::Impl {
  RuntimeConfig config;
  std::unique_ptr<caf::actor_system_config> own_config;
  std::unique_ptr<caf::actor_system> own_system;
  caf::actor_system* system = nullptr;

  bool blas_auto = false;  // blas_threads was left to troupe: it follows the number of CPU devices

  mutable std::mutex mu;
  std::unordered_map<Context, std::unique_ptr<internal::DeviceImpl>> devices;  // guarded by mu
  int cpu_devices = 0;                                                         // guarded by mu
};

std::shared_ptr<Runtime> Runtime::Create(const RuntimeConfig& config, caf::actor_system* external) {
  CapMallocArenas();  // before the runtime's threads start allocating
  auto impl = std::make_unique<Impl>();
  impl->config = config.Resolved();
  impl->blas_auto = config.blas_threads == 0;
  if (external != nullptr) {
    impl->system = external;
  } else {
    impl->own_config = std::make_unique<caf::actor_system_config>();
    impl->own_config->set("scheduler.max-threads", static_cast<size_t>(impl->config.scheduler_threads));
    // 'sharing' workers sleep on a condition variable; the default work-stealing policy polls with up to
    // 10 ms naps, which would add that latency to any actor woken from idle.
    impl->own_config->set("scheduler.policy", caf::atom("sharing"));
    impl->own_config->set("logger.verbosity", caf::atom("quiet"));
    internal::LoggerRefGuard guard;  // the thread that creates the engine need not be the one that ends it
    impl->own_system = std::make_unique<caf::actor_system>(*impl->own_config);
    impl->system = impl->own_system.get();
  }
  // workers x BLAS threads <= cores (DESIGN.md §6).
  SetBlasThreads(impl->config.blas_threads);
  return std::shared_ptr<Runtime>(new Runtime(std::move(impl)));
}

Runtime::Runtime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Runtime::~Runtime() {
  std::vector<caf::actor> actors;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (const auto& [ctx, dev] : impl_->devices) dev->CollectActors(&actors);
  }
  internal::StopAndWait(*impl_->system, actors);
  actors.clear();  // a detached actor's thread ends only when the last handle to it is gone
  impl_->devices.clear();
  impl_->own_system.reset();  // joins the scheduler threads
}

caf::actor_system& Runtime::system() { return *impl_->system; }
bool Runtime::owns_system() const { return impl_->own_system != nullptr; }
const RuntimeConfig& Runtime::config() const { return impl_->config; }

Device* Runtime::GetDevice(Context ctx) {
  // Pinned host memory is host memory: functions on it run on cpu(0)'s workers, not on a worker set of
  // their own (pinned(i) names the GPU the memory is pinned for, not a CPU).
  if (ctx.dev_type == DeviceType::kCPUPinned) {
    if (ctx.dev_id < 0) throw Error("invalid device " + ctx.ToString() + ": device ids are >= 0");
    ctx = Context::CPU(0);
  }
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto it = impl_->devices.find(ctx);
  if (it != impl_->devices.end()) return it->second.get();
  std::unique_ptr<internal::DeviceImpl> dev;
  switch (ctx.dev_type) {
    case DeviceType::kCPU:
      if (ctx.dev_id < 0) throw Error("invalid device " + ctx.ToString() + ": device ids are >= 0");
      dev = internal::MakeCpuDevice(*impl_->system, ctx, impl_->config);
      // Every CPU device has its own workers, and each worker's BLAS calls use the process-wide OpenBLAS
      // thread count: keep (CPU devices x workers) x BLAS threads <= cores (DESIGN.md §6), or k devices on
      // the same cores oversubscribe them k times (data-parallel training over cpu(0..k-1)). The count is
      // not raised again when devices go unused.
      if (impl_->blas_auto) {
        ++impl_->cpu_devices;
        SetBlasThreads(DefaultBlasThreads(impl_->cpu_devices, impl_->config.cpu_workers, impl_->config.host_processes));
      }
      break;
    case DeviceType::kGPU:
      dev = internal::MakeGpuDevice(*impl_->system, ctx, impl_->config);
      break;
    default:
      throw Error("invalid device type " + std::to_string(static_cast<int>(ctx.dev_type)) +
                  ": use Context::CPU(i) or Context::GPU(i)");
  }
  Device* raw = dev.get();
  impl_->devices.emplace(ctx, std::move(dev));
  return raw;
}

std::vector<DeviceStats> Runtime::Stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  std::vector<DeviceStats> out;
  for (const auto& [ctx, dev] : impl_->devices) out.push_back(dev->Stats());
  return out;
}

int Runtime::GpuCount() { return internal::CudaDeviceCount(); }

}  // namespace troupe
