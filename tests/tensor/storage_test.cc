// Storage: pooling (exact and round policies), statistics, ReleaseAll, the reserve, out-of-memory errors,
// and that NDArrays give their memory back to the pool.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>
#include <vector>

#include "actors/runtime.h"
#include "tensor/ndarray.h"
#include "tensor/storage.h"
#include "tests/common/scoped_env.h"

namespace troupe {
namespace {

constexpr Context kCpu = Context::CPU(0);

StorageConfig Policy(PoolPolicy p) {
  StorageConfig c;
  c.cpu_policy = p;
  c.cpu_reserve_percent = 0;
  return c;
}

TEST(StorageTest, FreedBlockIsReusedForTheNextSameSizeRequest) {
  auto storage = Storage::Create(Policy(PoolPolicy::kExact));
  StorageHandle a = storage->Alloc(1000, kCpu);
  ASSERT_NE(a.dptr, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.dptr) % 64, 0u);
  EXPECT_EQ(a.size, 1000u);
  std::memset(a.dptr, 7, 1000);
  void* first = a.dptr;
  storage->Free(a);
  StorageHandle b = storage->Alloc(1000, kCpu);
  EXPECT_EQ(b.dptr, first);
  StorageStats s = storage->Stats(kCpu);
  EXPECT_EQ(s.allocs, 2u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.system_allocs, 1u);
  EXPECT_DOUBLE_EQ(s.hit_rate(), 0.5);
  // A different size is not served from that block under the exact policy.
  StorageHandle c = storage->Alloc(5000, kCpu);
  EXPECT_NE(c.dptr, first);
  storage->Free(b);
  storage->Free(c);
}

TEST(StorageTest, RoundPolicySharesBlocksOfNearbySizes) {
  auto storage = Storage::Create(Policy(PoolPolicy::kRound));
  StorageHandle a = storage->Alloc(1000, kCpu);
  void* p = a.dptr;
  storage->Free(a);
  StorageHandle b = storage->Alloc(1020, kCpu);  // both round to 1024
  EXPECT_EQ(b.dptr, p);
  EXPECT_EQ(storage->Stats(kCpu).bytes_in_use, 1024u);
  storage->Free(b);
  StorageHandle c = storage->Alloc(1030, kCpu);  // 2048: another block
  EXPECT_NE(c.dptr, p);
  EXPECT_EQ(storage->Stats(kCpu).bytes_in_use, 2048u);
  storage->Free(c);
  // Above the cutoff (2^24 by default) sizes round to a multiple of it.
  StorageHandle big = storage->Alloc((std::size_t{1} << 24) + 1, kCpu);
  EXPECT_EQ(storage->Stats(kCpu).bytes_in_use, std::size_t{1} << 25);
  storage->Free(big);
}

TEST(StorageTest, NonePolicyNeverPools) {
  auto storage = Storage::Create(Policy(PoolPolicy::kNone));
  for (int i = 0; i < 5; ++i) storage->Free(storage->Alloc(4096, kCpu));
  StorageStats s = storage->Stats(kCpu);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.system_allocs, 5u);
  EXPECT_EQ(s.system_frees, 5u);
  EXPECT_EQ(s.bytes_cached, 0u);
}

TEST(StorageTest, StatisticsAddUp) {
  auto storage = Storage::Create(Policy(PoolPolicy::kExact));
  std::mt19937 rng(5);
  std::vector<StorageHandle> live;
  std::uint64_t expected_in_use = 0;
  auto block = [](std::size_t n) { return (std::max<std::size_t>(n, 1) + 63) / 64 * 64; };
  for (int i = 0; i < 2000; ++i) {
    if (live.empty() || rng() % 3 != 0) {
      const std::size_t size = 64 * (1 + rng() % 20) - rng() % 3;
      live.push_back(storage->Alloc(size, kCpu));
      expected_in_use += block(size);
    } else {
      const std::size_t k = rng() % live.size();
      expected_in_use -= block(live[k].size);
      storage->Free(live[k]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
    const StorageStats s = storage->Stats(kCpu);
    ASSERT_EQ(s.bytes_in_use, expected_in_use);
    ASSERT_EQ(s.blocks_in_use, live.size());
    ASSERT_EQ(s.allocs, s.hits + s.system_allocs);
    // Every block obtained from the system is in use, cached, or was returned to the system.
    ASSERT_EQ(s.system_allocs, s.blocks_in_use + s.blocks_cached + s.system_frees);
    ASSERT_GE(s.peak_bytes_in_use, s.bytes_in_use);
  }
  for (auto& h : live) storage->Free(h);
  const StorageStats s = storage->Stats(kCpu);
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_GT(s.hits, 0u);
  EXPECT_NE(s.ToString().find("hit rate"), std::string::npos);
}

TEST(StorageTest, ResetPeakStartsThePeakAtTheBytesInUse) {
  auto storage = Storage::Create(Policy(PoolPolicy::kExact));
  StorageHandle a = storage->Alloc(4096, kCpu), b = storage->Alloc(8192, kCpu);
  storage->Free(b);
  EXPECT_EQ(storage->Stats(kCpu).peak_bytes_in_use, 4096u + 8192u);
  storage->ResetPeak(kCpu);
  EXPECT_EQ(storage->Stats(kCpu).peak_bytes_in_use, 4096u);
  StorageHandle c = storage->Alloc(1024, kCpu);
  storage->Free(c);
  EXPECT_EQ(storage->Stats(kCpu).peak_bytes_in_use, 4096u + 1024u);
  storage->Free(a);
  storage->ResetPeak(Context::CPU(3));  // a device without a pool: nothing to do
}

TEST(StorageTest, ReleaseAllReturnsCachedMemoryAndKeepsBlocksInUse) {
  auto storage = Storage::Create(Policy(PoolPolicy::kExact));
  StorageHandle keep = storage->Alloc(100000, kCpu);
  std::vector<StorageHandle> hs;
  for (int i = 0; i < 10; ++i) hs.push_back(storage->Alloc(4096 * (i + 1), kCpu));
  for (auto& h : hs) storage->Free(h);
  const StorageStats before = storage->Stats(kCpu);
  EXPECT_EQ(before.blocks_cached, 10u);
  EXPECT_EQ(before.bytes_cached, 4096u * 55);
  EXPECT_EQ(storage->ReleaseAll(kCpu), 4096u * 55);
  const StorageStats after = storage->Stats(kCpu);
  EXPECT_EQ(after.bytes_cached, 0u);
  EXPECT_EQ(after.blocks_cached, 0u);
  EXPECT_EQ(after.system_frees, 10u);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  std::memset(keep.dptr, 1, 100000);  // still ours
  // After a release the next request goes to the system again.
  StorageHandle again = storage->Alloc(4096, kCpu);
  EXPECT_EQ(storage->Stats(kCpu).system_allocs, 12u);
  storage->Free(again);
  storage->Free(keep);
  EXPECT_EQ(storage->ReleaseAll(), 4096u + (100000 + 63) / 64 * 64);
  EXPECT_EQ(storage->ReleaseAll(Context::CPU(3)), 0u);  // a device never used: nothing to release
}

TEST(StorageTest, ReserveReleasesTheCacheBeforeAFreshAllocation) {
  StorageConfig c = Policy(PoolPolicy::kExact);
  c.cpu_reserve_percent = 100;  // keep "all" memory free: every fresh allocation first drops the cache
  auto storage = Storage::Create(c);
  storage->Free(storage->Alloc(4096, kCpu));
  EXPECT_EQ(storage->Stats(kCpu).blocks_cached, 1u);
  StorageHandle h = storage->Alloc(8192, kCpu);  // a miss
  EXPECT_EQ(storage->Stats(kCpu).blocks_cached, 0u);
  EXPECT_EQ(storage->Stats(kCpu).system_frees, 1u);
  storage->Free(h);

  c.cpu_reserve_percent = 0;
  auto keeping = Storage::Create(c);
  keeping->Free(keeping->Alloc(4096, kCpu));
  StorageHandle h2 = keeping->Alloc(8192, kCpu);
  EXPECT_EQ(keeping->Stats(kCpu).blocks_cached, 1u);
  keeping->Free(h2);
}

TEST(StorageTest, ImpossibleAllocationGivesAClearErrorAndTheStorageStaysUsable) {
  auto storage = Storage::Create(Policy(PoolPolicy::kExact));
  storage->Free(storage->Alloc(4096, kCpu));  // something cached: released by the retry
  const std::size_t huge = std::size_t{1} << 52;  // 4 PiB
  try {
    storage->Alloc(huge, kCpu);
    FAIL() << "a 4 PiB allocation succeeded";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out of memory on cpu(0)"), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(huge)), std::string::npos) << m;
    EXPECT_NE(m.find("4 PiB"), std::string::npos) << m;
    EXPECT_NE(m.find("released 4 KiB"), std::string::npos) << m;  // the release-and-retry happened
  }
  EXPECT_EQ(storage->Stats(kCpu).bytes_cached, 0u);
  try {
    storage->Alloc(~std::size_t{0} - 10, kCpu);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("larger than any device"), std::string::npos) << e.what();
  }
  StorageHandle ok = storage->Alloc(64, kCpu);
  EXPECT_NE(ok.dptr, nullptr);
  storage->Free(ok);
  // An NDArray of an impossible size fails at construction, with the same message.
  try {
    NDArray a(TShape({1ll << 30, 1ll << 20}), kCpu, DType::kFloat32);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory on cpu(0)"), std::string::npos) << e.what();
  }
}

TEST(StorageTest, DevicesThatDoNotExistAreRefused) {
  auto storage = Storage::Create(StorageConfig{});
  if (Runtime::GpuCount() == 0) {
    try {
      storage->Alloc(16, Context::GPU(0));
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("gpu(0)"), std::string::npos) << e.what();
    }
    EXPECT_THROW(storage->Alloc(16, Context::CPUPinned(0)), Error);
  }
  EXPECT_THROW(storage->Alloc(16, Context::GPU(1000)), Error);
  EXPECT_THROW(storage->Alloc(16, Context::CPU(-1)), Error);
}

TEST(StorageTest, DirectFreeBypassesThePool) {
  auto storage = Storage::Create(Policy(PoolPolicy::kExact));
  storage->DirectFree(storage->Alloc(4096, kCpu));
  EXPECT_EQ(storage->Stats(kCpu).blocks_cached, 0u);
  EXPECT_EQ(storage->Stats(kCpu).system_frees, 1u);
}

TEST(StorageTest, ConcurrentAllocAndFreeKeepTheBooks) {
  auto storage = Storage::Create(Policy(PoolPolicy::kRound));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<StorageHandle> mine;
      for (int i = 0; i < 5000; ++i) {
        if (mine.size() < 8 && (mine.empty() || rng() % 2)) {
          mine.push_back(storage->Alloc(256 << (rng() % 6), kCpu));
          static_cast<char*>(mine.back().dptr)[0] = static_cast<char>(t);
        } else {
          storage->Free(mine.back());
          mine.pop_back();
        }
      }
      for (auto& h : mine) storage->Free(h);
    });
  }
  for (auto& th : threads) th.join();
  const StorageStats s = storage->Stats(kCpu);
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.blocks_in_use, 0u);
  EXPECT_EQ(s.system_allocs, s.blocks_cached + s.system_frees);
  EXPECT_GT(s.hit_rate(), 0.9);
}

TEST(StorageTest, ConfigFromEnvironment) {
  {
    test::ScopedEnv p("TROUPE_CPU_MEM_POOL_TYPE", "round");
    test::ScopedEnv r("TROUPE_GPU_MEM_POOL_RESERVE", "12.5");
    const StorageConfig c = StorageConfig{}.WithEnv();
    EXPECT_EQ(c.cpu_policy, PoolPolicy::kRound);
    EXPECT_DOUBLE_EQ(c.gpu_reserve_percent, 12.5);
  }
  {
    test::ScopedEnv p("TROUPE_CPU_MEM_POOL_TYPE", "bogus");
    try {
      StorageConfig{}.WithEnv();
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("TROUPE_CPU_MEM_POOL_TYPE"), std::string::npos) << e.what();
    }
  }
  {
    test::ScopedEnv r("TROUPE_CPU_MEM_POOL_RESERVE", "150");
    EXPECT_THROW(StorageConfig{}.WithEnv(), Error);
  }
}

TEST(StorageTest, NDArraysGiveTheirMemoryBackToThePool) {
  const auto& storage = Storage::Get();
  Engine* engine = Engine::Get();
  engine->WaitForAll();
  const StorageStats before = storage->Stats(kCpu);
  {
    NDArray a(TShape({1000, 100}), kCpu);
    a = 1.0;
    NDArray b = a.Slice(10, 20);  // a view keeps the memory alive too
    b += 1.0;
    EXPECT_EQ(storage->Stats(kCpu).bytes_in_use, before.bytes_in_use + 400000);
  }
  engine->WaitForAll();  // the deferred free has run
  const StorageStats after = storage->Stats(kCpu);
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  {
    NDArray again(TShape({1000, 100}), kCpu);  // served from the cache
    EXPECT_EQ(storage->Stats(kCpu).hits, after.hits + 1);
  }
  engine->WaitForAll();
}

}  // namespace
}  // namespace troupe
