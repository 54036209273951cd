// NDArray on a GPU: copies between host, pinned memory and the device (on the copy lanes), the GPU pool,
// cuBLAS Dot, elementwise kernels and random sampling, each compared with the CPU path. Skips without a
// CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "actors/runtime.h"
#include "tensor/detail/kernels.h"
#include "tensor/ndarray.h"

namespace troupe {
namespace {

constexpr Context kGpu = Context::GPU(0);
constexpr Context kCpu = Context::CPU(0);

class NDArrayGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Runtime::GpuCount() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  }
};

std::vector<float> RandomFloats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2, 2);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

TEST_F(NDArrayGpuTest, CopiesRoundTripThroughTheDeviceAndPinnedMemory) {
  const auto values = RandomFloats(1 << 20, 1);
  NDArray host = NDArray::FromVector(values, TShape({1024, 1024}));
  NDArray dev = host.CopyTo(kGpu);
  EXPECT_EQ(dev.ctx(), kGpu);
  NDArray dev2 = dev.CopyTo(kGpu);  // device to device
  NDArray pinned = dev2.CopyTo(Context::CPUPinned(0));
  EXPECT_EQ(pinned.ctx(), Context::CPUPinned(0));
  pinned += 1;  // pinned memory is worked on by the CPU
  NDArray back = pinned.CopyTo(kGpu).CopyTo(kCpu);
  auto got = back.ToVector<float>();
  for (std::size_t i = 0; i < values.size(); ++i) ASSERT_EQ(got[i], values[i] + 1) << i;
  EXPECT_EQ(dev.ToVector<float>(), values);  // SyncCopyToCPU from the device
  std::vector<float> in = RandomFloats(16, 2);
  NDArray small(TShape({16}), kGpu);
  small.SyncCopyFromCPU(in.data(), in.size() * sizeof(float));
  EXPECT_EQ(small.ToVector<float>(), in);
  EXPECT_GT(Storage::Get()->Stats(Context::CPUPinned(0)).allocs, 0u);
  // Views of device arrays copy only their rows.
  EXPECT_EQ(dev.Slice(3, 4).ToVector<float>(), std::vector<float>(values.begin() + 3 * 1024, values.begin() + 4 * 1024));
  if (Runtime::GpuCount() > 1) {
    NDArray other = dev.CopyTo(Context::GPU(1));
    EXPECT_EQ(other.ToVector<float>(), values);
  }
}

TEST_F(NDArrayGpuTest, ElementwiseKernelsMatchTheCpu) {
  const auto a = RandomFloats(100003, 3), b = RandomFloats(100003, 4);
  NDArray ca = NDArray::FromVector(a, TShape({100003})), cb = NDArray::FromVector(b, TShape({100003}));
  NDArray ga = ca.CopyTo(kGpu), gb = cb.CopyTo(kGpu);
  EXPECT_EQ((ga + gb).ToVector<float>(), (ca + cb).ToVector<float>());
  EXPECT_EQ((ga - gb * 3).ToVector<float>(), (ca - cb * 3).ToVector<float>());
  EXPECT_EQ((ga / gb).ToVector<float>(), (ca / cb).ToVector<float>());  // IEEE division on both
  ga *= gb;
  ca *= cb;
  EXPECT_EQ(ga.ToVector<float>(), ca.ToVector<float>());
  NDArray gi = NDArray::FromVector(std::vector<std::int32_t>{7, -7, 5, INT32_MIN}, TShape({4}), kGpu);
  NDArray gz = NDArray::FromVector(std::vector<std::int32_t>{2, 2, 0, -1}, TShape({4}), kGpu);
  EXPECT_EQ((gi / gz).ToVector<std::int32_t>(), (std::vector<std::int32_t>{3, -3, 0, INT32_MIN}));
  NDArray h = NDArray::Full(TShape({5}), 2.5, kGpu, DType::kFloat16);
  EXPECT_EQ(static_cast<float>(h.AsType(DType::kFloat32).ToVector<float>()[4]), 2.5f);
  EXPECT_EQ(NDArray::Full(TShape({3}), -3.7, kGpu, DType::kFloat32).AsType(DType::kInt8).ToVector<std::int8_t>(),
            (std::vector<std::int8_t>{-3, -3, -3}));
}

TEST_F(NDArrayGpuTest, CublasDotMatchesOpenBlas) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const int m = 37, k = 129, n = 65;
      const auto av = RandomFloats(m * k, 5), bv = RandomFloats(k * n, 6);
      NDArray a = NDArray::FromVector(av, ta ? TShape({k, m}) : TShape({m, k}));
      NDArray b = NDArray::FromVector(bv, tb ? TShape({n, k}) : TShape({k, n}));
      const auto cpu = Dot(a, b, ta, tb).ToVector<float>();
      NDArray gc = Dot(a.CopyTo(kGpu), b.CopyTo(kGpu), ta, tb);
      EXPECT_EQ(gc.shape(), TShape({m, n}));
      const auto gpu = gc.ToVector<float>();
      for (std::size_t i = 0; i < cpu.size(); ++i) ASSERT_NEAR(gpu[i], cpu[i], 1e-3) << ta << tb << " " << i;
    }
  }
  NDArray d = NDArray::FromVector(std::vector<double>{1, 2, 3, 4}, TShape({2, 2}), kGpu);
  NDArray acc = NDArray::Ones(TShape({2, 2}), kGpu, DType::kFloat64);
  Dot(d, d, &acc, false, false, true);
  EXPECT_EQ(acc.ToVector<double>(), (std::vector<double>{8, 11, 16, 23}));
}

TEST_F(NDArrayGpuTest, RandomNumbersMatchTheCpuKernels) {
  NDArray g(TShape({4099}), kGpu);
  NDArray c(TShape({4099}), kCpu);
  std::vector<float> gv(4099);
  // The same (key, base) on both devices: the same uniform numbers, and normal ones to rounding.
  auto engine = Engine::Get();
  const TBlob gt = g.data(), ct = c.data();
  engine->PushSync([gt](RunContext r) { internal::GpuSample(internal::Distribution::kUniform, gt, 1234, 77, -1, 1, r.stream); }, kGpu, {},
                   {g.var()});
  engine->PushSync([ct](RunContext) { internal::CpuSample(internal::Distribution::kUniform, ct, 1234, 77, -1, 1); }, kCpu, {}, {c.var()});
  EXPECT_EQ(g.ToVector<float>(), c.ToVector<float>());
  engine->PushSync([gt](RunContext r) { internal::GpuSample(internal::Distribution::kNormal, gt, 99, 5, 0, 1, r.stream); }, kGpu, {}, {g.var()});
  engine->PushSync([ct](RunContext) { internal::CpuSample(internal::Distribution::kNormal, ct, 99, 5, 0, 1); }, kCpu, {}, {c.var()});
  const auto gn = g.ToVector<float>(), cn = c.ToVector<float>();
  for (std::size_t i = 0; i < gn.size(); ++i) ASSERT_NEAR(gn[i], cn[i], 1e-4) << i;
  // Through the resource manager: seeded, reproducible.
  ResourceManager::Get()->SeedRandom(5);
  g.SampleUniform(0, 1);
  const auto first = g.ToVector<float>();
  ResourceManager::Get()->SeedRandom(5);
  g.SampleUniform(0, 1);
  EXPECT_EQ(g.ToVector<float>(), first);
}

TEST_F(NDArrayGpuTest, PoolReusesDeviceMemoryAndReportsOutOfMemory) {
  auto storage = Storage::Create(StorageConfig{});
  StorageHandle a = storage->Alloc(1 << 20, kGpu);
  void* p = a.dptr;
  storage->Free(a);
  StorageHandle b = storage->Alloc(1 << 20, kGpu);
  EXPECT_EQ(b.dptr, p);
  storage->Free(b);
  EXPECT_EQ(storage->ReleaseAll(kGpu), 1u << 20);
  try {
    storage->Alloc(std::size_t{1} << 50, kGpu);
    FAIL() << "a 1 PiB GPU allocation succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory on gpu(0)"), std::string::npos) << e.what();
  }
  StorageHandle ok = storage->Alloc(64, kGpu);  // still usable
  storage->Free(ok);
  // Temporary space on the device.
  const Resource r = ResourceManager::Get()->Request(kGpu, ResourceRequest::kTempSpace);
  void* space = nullptr;
  Engine::Get()->PushSync([&](RunContext) { space = r.get_space(1 << 16); }, kGpu, {}, {r.var()});
  Engine::Get()->WaitForAll();
  EXPECT_NE(space, nullptr);
}

}  // namespace
}  // namespace troupe
