#include "tensor/resource.h"

#include <cmath>
#include <mutex>
#include <unordered_map>

#include "actors/config.h"
#include "tensor/detail/kernels.h"
#include "tensor/detail/philox.h"
#include "tensor/storage.h"
#include "actors/runtime.h"

namespace troupe {

void Philox4x32(std::uint64_t key, std::uint64_t counter, std::uint32_t out[4]) {
  internal::PhiloxBlock(key, counter, out);
}

namespace {

template <typename T>
void FillHost(RandomGenerator* g, internal::Distribution dist, T* out, std::size_t n, double p1, double p2) {
  const TBlob blob(out, TShape({static_cast<std::int64_t>(n)}), DTypeOf<T>(), Context::CPU());
  const std::uint64_t base = g->Reserve(internal::SampleBlocks(static_cast<std::int64_t>(n), DTypeOf<T>(), dist));
  internal::CpuSample(dist, blob, g->key(), base, p1, p2);
}

}  // namespace

void RandomGenerator::FillUniform(float* out, std::size_t n, float lo, float hi) {
  FillHost(this, internal::Distribution::kUniform, out, n, lo, hi);
}
void RandomGenerator::FillNormal(float* out, std::size_t n, float mean, float stddev) {
  FillHost(this, internal::Distribution::kNormal, out, n, mean, stddev);
}
void RandomGenerator::FillUniform(double* out, std::size_t n, double lo, double hi) {
  FillHost(this, internal::Distribution::kUniform, out, n, lo, hi);
}
void RandomGenerator::FillNormal(double* out, std::size_t n, double mean, double stddev) {
  FillHost(this, internal::Distribution::kNormal, out, n, mean, stddev);
}

namespace internal {

// One copy of a device's temporary space: a block from Storage that grows on demand.
struct TempSpace {
  std::shared_ptr<Storage> storage;
  Context ctx;
  StorageHandle handle;

  void* Get(std::size_t bytes) {
    if (handle.dptr == nullptr || handle.size < bytes) {
      // Every earlier user of this copy has finished (they held its variable), so the old block is idle.
      storage->Free(handle);
      handle = {};
      handle = storage->Alloc(bytes, ctx);
    }
    return handle.dptr;
  }
  ~TempSpace() { storage->Free(handle); }
};

}  // namespace internal

RandomGenerator* Resource::get_random() const {
  if (type_ != ResourceRequest::kRandom && type_ != ResourceRequest::kParallelRandom) {
    throw Error("Resource::get_random on a temporary-space resource: request kRandom or kParallelRandom");
  }
  return static_cast<RandomGenerator*>(state_);
}

void* Resource::get_space(std::size_t bytes) const {
  if (type_ != ResourceRequest::kTempSpace) {
    throw Error("Resource::get_space on a random resource: request kTempSpace");
  }
  return static_cast<internal::TempSpace*>(state_)->Get(bytes);
}

TBlob Resource::get_space(const TShape& shape, DType dtype) const {
  void* p = get_space(static_cast<std::size_t>(shape.Size()) * DTypeSize(dtype));
  return TBlob(p, shape, dtype, ctx_);
}

ResourceConfig ResourceConfig::WithEnv() const {
  ResourceConfig c = *this;
  EnvInt("TROUPE_CPU_TEMP_COPY", 1, 64, &c.cpu_temp_copies);
  EnvInt("TROUPE_GPU_TEMP_COPY", 1, 64, &c.gpu_temp_copies);
  EnvInt("TROUPE_CPU_PARALLEL_RAND_COPY", 1, 64, &c.cpu_parallel_random_copies);
  EnvInt("TROUPE_GPU_PARALLEL_RAND_COPY", 1, 64, &c.gpu_parallel_random_copies);
  double seed = 0;
  if (EnvDouble("TROUPE_RANDOM_SEED", 0, 9007199254740992.0, &seed)) c.seed = static_cast<std::uint64_t>(seed);
  return c;
}

namespace {

// The key of generator `copy` (0: kRandom, 1..: kParallelRandom copies) of device `ctx` under `seed`.
std::uint64_t DeriveKey(std::uint64_t seed, Context ctx, int copy) {
  const std::uint64_t dev = static_cast<std::uint64_t>(ctx.dev_type) << 32 | static_cast<std::uint32_t>(ctx.dev_id);
  return internal::Mix64(internal::Mix64(seed) ^ internal::Mix64(dev + 0x51ED270B) ^
                         internal::Mix64(static_cast<std::uint64_t>(copy) + 0xA0761D64));
}

struct Guarded {
  VarHandle var = nullptr;
  std::shared_ptr<void> state;  // RandomGenerator or internal::TempSpace
};

struct DeviceResources {
  Context ctx;
  Guarded random;
  std::vector<Guarded> parallel;
  std::vector<Guarded> temp;
  unsigned next_parallel = 0;
  unsigned next_temp = 0;
};

}  // namespace

struct ResourceManager::Impl {
  Engine* engine = nullptr;
  ResourceConfig config;
  std::mutex mu;
  std::uint64_t seed = 0;
  std::unordered_map<Context, std::uint64_t> device_seeds;  // SeedRandom(ctx, s) overrides
  std::unordered_map<Context, std::unique_ptr<DeviceResources>> devices;

  std::uint64_t SeedOf(Context ctx) const {
    auto it = device_seeds.find(ctx);
    return it == device_seeds.end() ? seed : it->second;
  }

  DeviceResources* Device(Context ctx) {
    auto it = devices.find(ctx);
    if (it != devices.end()) return it->second.get();
    internal::CheckDeviceExists(ctx);
    auto d = std::make_unique<DeviceResources>();
    d->ctx = ctx;
    const bool gpu = ctx.is_gpu();
    const std::uint64_t s = SeedOf(ctx);
    d->random = {engine->NewVariable(Engine::VarKind::kScratch), std::make_shared<RandomGenerator>(DeriveKey(s, ctx, 0))};
    const int np = gpu ? config.gpu_parallel_random_copies : config.cpu_parallel_random_copies;
    for (int i = 0; i < np; ++i) {
      d->parallel.push_back({engine->NewVariable(Engine::VarKind::kScratch), std::make_shared<RandomGenerator>(DeriveKey(s, ctx, i + 1))});
    }
    const int nt = gpu ? config.gpu_temp_copies : config.cpu_temp_copies;
    for (int i = 0; i < nt; ++i) {
      auto space = std::make_shared<internal::TempSpace>();
      space->storage = Storage::Get();
      space->ctx = ctx;
      d->temp.push_back({engine->NewVariable(Engine::VarKind::kScratch), std::move(space)});
    }
    DeviceResources* raw = d.get();
    devices.emplace(ctx, std::move(d));
    return raw;
  }

  // Pushes a function that rekeys every generator of `d` (ordered with the random operations around it).
  void PushSeed(DeviceResources* d, std::uint64_t s) {
    std::vector<VarHandle> vars = {d->random.var};
    std::vector<std::pair<RandomGenerator*, std::uint64_t>> keys = {
        {static_cast<RandomGenerator*>(d->random.state.get()), DeriveKey(s, d->ctx, 0)}};
    for (std::size_t i = 0; i < d->parallel.size(); ++i) {
      vars.push_back(d->parallel[i].var);
      keys.emplace_back(static_cast<RandomGenerator*>(d->parallel[i].state.get()),
                        DeriveKey(s, d->ctx, static_cast<int>(i) + 1));
    }
    engine->PushSync(
        [keys](RunContext) {
          for (const auto& [g, key] : keys) g->Seed(key);
        },
        d->ctx, {}, vars, FnProperty::kNoSkip, 0, "SeedRandom");
  }
};

ResourceManager::ResourceManager(Engine* engine, const ResourceConfig& config) : impl_(std::make_unique<Impl>()) {
  impl_->engine = engine;
  impl_->config = config;
  impl_->seed = config.seed;
}

ResourceManager::~ResourceManager() {
  for (auto& [ctx, d] : impl_->devices) {
    std::vector<Guarded> all = d->parallel;
    all.insert(all.end(), d->temp.begin(), d->temp.end());
    all.push_back(d->random);
    for (Guarded& g : all) {
      // The state (a generator, or temporary space going back to the pool) is freed after every function
      // that uses it has run.
      std::shared_ptr<void> state = std::move(g.state);
      impl_->engine->DeleteVariable([state](RunContext) mutable { state.reset(); }, ctx,
                                    g.var);
    }
  }
}

ResourceManager* ResourceManager::Get(Engine* engine) {
  if (engine == nullptr) engine = Engine::Get();
  static const char kKey = 0;  // its address identifies the extension
  std::shared_ptr<void> ext = engine->GetExtension(&kKey, [engine] {
    return std::shared_ptr<void>(std::make_shared<ResourceManager>(engine, ResourceConfig{}.WithEnv()));
  });
  return static_cast<ResourceManager*>(ext.get());
}

Resource ResourceManager::Request(Context ctx, ResourceRequest req) { return Pick(ctx, req, nullptr); }

Resource ResourceManager::Request(Context ctx, ResourceRequest req, std::uint64_t key) {
  return Pick(ctx, req, &key);
}

Resource ResourceManager::Pick(Context ctx, ResourceRequest req, const std::uint64_t* key) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  DeviceResources* d = impl_->Device(ctx);
  const Guarded* g = nullptr;
  switch (req.type) {
    case ResourceRequest::kRandom:
      g = &d->random;
      break;
    case ResourceRequest::kParallelRandom:
      g = &d->parallel[d->next_parallel++ % d->parallel.size()];
      break;
    case ResourceRequest::kTempSpace:
      g = &d->temp[(key != nullptr ? *key : d->next_temp++) % d->temp.size()];
      break;
    default:
      throw Error("ResourceManager::Request: unknown resource type " + std::to_string(static_cast<int>(req.type)));
  }
  Resource r;
  r.type_ = req.type;
  r.ctx_ = ctx;
  r.var_ = g->var;
  r.state_ = g->state.get();
  return r;
}

void ResourceManager::SeedRandom(std::uint64_t seed) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->seed = seed;
  impl_->device_seeds.clear();
  for (auto& [ctx, d] : impl_->devices) impl_->PushSeed(d.get(), seed);
}

void ResourceManager::SeedRandom(Context ctx, std::uint64_t seed) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->device_seeds[ctx] = seed;
  auto it = impl_->devices.find(ctx);
  if (it != impl_->devices.end()) impl_->PushSeed(it->second.get(), seed);
}

Engine* ResourceManager::engine() const { return impl_->engine; }

}  // namespace troupe
