// The resource manager: Philox streams (known answers, seeding, reproducibility, independent devices),
// temporary space, and that users of one resource copy are serialised by its engine variable.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <numeric>

#include "actors/runtime.h"
#include "tensor/detail/philox.h"
#include "tensor/ndarray.h"
#include "tensor/resource.h"
#include "tests/common/scoped_env.h"
#include "tests/common/test_params.h"

namespace troupe {
namespace {

constexpr Context kCpu = Context::CPU(0);

// Known-answer tests of Philox4x32-10 from the Random123 distribution (kat_vectors).
TEST(PhiloxTest, KnownAnswers) {
  struct Kat {
    std::uint32_t ctr[4], key[2], out[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    std::uint32_t out[4];
    internal::Philox4x32x10(k.ctr, k.key[0], k.key[1], out);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], k.out[i]) << std::hex << "word " << i;
  }
  std::uint32_t out[4];
  Philox4x32(0, 0, out);  // the public entry point: counter (0, 0, 0, 0), key 0
  EXPECT_EQ(out[0], 0x6627e8d5u);
}

class ResourceTest : public ::testing::TestWithParam<test::EngineParam> {
 protected:
  void SetUp() override { engine_ = test::MakeEngine(GetParam()); }
  void TearDown() override { engine_.reset(); }

  std::vector<float> Uniform(Context ctx, std::int64_t n) {
    NDArray a(TShape({n}), ctx, DType::kFloat32, engine_.get());
    a.SampleUniform(0, 1);
    return a.ToVector<float>();
  }

  std::unique_ptr<Engine> engine_;
};

TEST_P(ResourceTest, TheSameSeedGivesTheSameNumbers) {
  ResourceManager* rm = ResourceManager::Get(engine_.get());
  EXPECT_EQ(rm, ResourceManager::Get(engine_.get()));  // one per engine
  rm->SeedRandom(42);
  const auto a = Uniform(kCpu, 1001);
  const auto b = Uniform(kCpu, 1001);
  EXPECT_NE(a, b);  // the stream moves on
  rm->SeedRandom(42);
  EXPECT_EQ(Uniform(kCpu, 1001), a);
  EXPECT_EQ(Uniform(kCpu, 1001), b);
  rm->SeedRandom(43);
  EXPECT_NE(Uniform(kCpu, 1001), a);

  // A second engine seeded alike draws the same numbers: reproducible across runs, not only within one.
  auto other = Engine::Create(test::MakeConfig(GetParam()));
  ResourceManager::Get(other.get())->SeedRandom(42);
  NDArray c(TShape({1001}), kCpu, DType::kFloat32, other.get());
  c.SampleUniform(0, 1);
  EXPECT_EQ(c.ToVector<float>(), a);
}

TEST_P(ResourceTest, SeedingIsOrderedWithTheRandomOperationsAroundIt) {
  ResourceManager* rm = ResourceManager::Get(engine_.get());
  NDArray x(TShape({64}), kCpu, DType::kFloat32, engine_.get());
  NDArray y(TShape({64}), kCpu, DType::kFloat32, engine_.get());
  x.SampleNormal(0, 1);
  rm->SeedRandom(7);  // pushed: runs after x's sampling, before y's
  y.SampleNormal(0, 1);
  rm->SeedRandom(7);
  NDArray z(TShape({64}), kCpu, DType::kFloat32, engine_.get());
  z.SampleNormal(0, 1);
  EXPECT_EQ(y.ToVector<float>(), z.ToVector<float>());
  EXPECT_NE(x.ToVector<float>(), y.ToVector<float>());
}

TEST_P(ResourceTest, TwoDevicesGiveIndependentStreams) {
  ResourceManager* rm = ResourceManager::Get(engine_.get());
  rm->SeedRandom(1);
  const auto a = Uniform(Context::CPU(0), 20000);
  const auto b = Uniform(Context::CPU(1), 20000);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_NE(a, b);
  // Independent: the sample correlation of the two streams is near 0 (|r| < 4/sqrt(n) fails 1 in 10^4).
  double ma = 0, mb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ma += a[i];
    mb += b[i];
  }
  ma /= a.size();
  mb /= b.size();
  double sab = 0, saa = 0, sbb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  EXPECT_LT(std::fabs(sab / std::sqrt(saa * sbb)), 4.0 / std::sqrt(20000.0));
  // Reseeding one device leaves the other's stream alone.
  rm->SeedRandom(1);
  rm->SeedRandom(Context::CPU(1), 99);
  EXPECT_EQ(Uniform(Context::CPU(0), 20000), a);
  EXPECT_NE(Uniform(Context::CPU(1), 20000), b);
}

TEST_P(ResourceTest, SamplesHaveTheRightDistribution) {
  ResourceManager::Get(engine_.get())->SeedRandom(3);
  const std::int64_t n = 200000;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    NDArray u(TShape({n}), kCpu, dtype, engine_.get());
    NDArray g(TShape({n}), kCpu, dtype, engine_.get());
    u.SampleUniform(-2, 6);
    g.SampleNormal(1.5, 3);
    std::vector<double> uv, gv;
    if (dtype == DType::kFloat32) {
      for (float v : u.ToVector<float>()) uv.push_back(v);
      for (float v : g.ToVector<float>()) gv.push_back(v);
    } else {
      uv = u.ToVector<double>();
      gv = g.ToVector<double>();
    }
    auto mean_var = [](const std::vector<double>& v) {
      double m = std::accumulate(v.begin(), v.end(), 0.0) / v.size(), s = 0;
      for (double x : v) s += (x - m) * (x - m);
      return std::pair<double, double>(m, s / v.size());
    };
    for (double x : uv) ASSERT_TRUE(x >= -2 && x < 6) << x;
    auto [um, uvar] = mean_var(uv);
    EXPECT_NEAR(um, 2.0, 0.05) << DTypeName(dtype);           // sd of the mean: 8/sqrt(12 n) = 0.005
    EXPECT_NEAR(uvar, 64.0 / 12.0, 0.1) << DTypeName(dtype);  // 5.33
    auto [gm, gvar] = mean_var(gv);
    EXPECT_NEAR(gm, 1.5, 0.05) << DTypeName(dtype);
    EXPECT_NEAR(gvar, 9.0, 0.2) << DTypeName(dtype);
  }
  NDArray i(TShape({4}), kCpu, DType::kInt32, engine_.get());
  EXPECT_THROW(i.SampleUniform(0, 1), Error);
  NDArray f(TShape({4}), kCpu, DType::kFloat32, engine_.get());
  EXPECT_THROW(f.SampleUniform(1, 0), Error);
  EXPECT_THROW(f.SampleNormal(0, -1), Error);
}

TEST_P(ResourceTest, TempSpaceGrowsAndCopiesAreSerialised) {
  test::ScopedEnv copies("TROUPE_CPU_TEMP_COPY", "2");
  auto engine = Engine::Create(test::MakeConfig(GetParam()));  // its manager reads the variable
  ResourceManager* rm = ResourceManager::Get(engine.get());
  const Resource r0 = rm->Request(kCpu, ResourceRequest::kTempSpace);
  const Resource r1 = rm->Request(kCpu, ResourceRequest::kTempSpace);
  const Resource r2 = rm->Request(kCpu, ResourceRequest::kTempSpace);
  EXPECT_NE(r0.var(), r1.var());
  EXPECT_EQ(r0.var(), r2.var());  // two copies, handed out in turn
  EXPECT_THROW(r0.get_random(), Error);
  // By key: one key always gets the same copy (key % copies), whatever came before.
  EXPECT_EQ(rm->Request(kCpu, ResourceRequest::kTempSpace, 7).var(), rm->Request(kCpu, ResourceRequest::kTempSpace, 9).var());
  EXPECT_NE(rm->Request(kCpu, ResourceRequest::kTempSpace, 7).var(), rm->Request(kCpu, ResourceRequest::kTempSpace, 8).var());
  EXPECT_EQ(rm->Request(kCpu, ResourceRequest::kTempSpace, 4).var(), rm->Request(kCpu, ResourceRequest::kTempSpace, 4).var());

  // Many functions on the same copy, on up to 4 workers: never two at once, and the space they see grows.
  std::atomic<int> inside{0}, max_inside{0};
  std::atomic<std::size_t> checksum{0};
  for (int i = 0; i < 200; ++i) {
    const std::size_t bytes = 64 * (i + 1);
    engine->PushSync(
        [&, r0, bytes, i](RunContext) {
          const int now = ++inside;
          int seen = max_inside.load();
          while (now > seen && !max_inside.compare_exchange_weak(seen, now)) {
          }
          auto* p = static_cast<unsigned char*>(r0.get_space(bytes));
          EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u);
          std::memset(p, i & 0xff, bytes);  // the whole requested size is writable
          std::size_t sum = 0;
          for (std::size_t k = 0; k < bytes; k += 64) sum += p[k];
          checksum += sum;
          --inside;
        },
        kCpu, {}, {r0.var()});
  }
  engine->WaitForAll();
  EXPECT_EQ(max_inside.load(), 1);
  std::size_t expected = 0;
  for (int i = 0; i < 200; ++i) expected += static_cast<std::size_t>(i & 0xff) * (i + 1);
  EXPECT_EQ(checksum.load(), expected);
  const TBlob blob = [&] {
    TBlob b;
    engine->PushSync([&](RunContext) { b = r1.get_space(TShape({3, 5}), DType::kFloat64); }, kCpu, {}, {r1.var()});
    engine->WaitForAll();
    return b;
  }();
  EXPECT_NE(blob.dptr, nullptr);
  EXPECT_EQ(blob.shape, TShape({3, 5}));
  EXPECT_EQ(blob.ctx, kCpu);
}

TEST_P(ResourceTest, ParallelRandomCopiesAreIndependentGenerators) {
  test::ScopedEnv copies("TROUPE_CPU_PARALLEL_RAND_COPY", "3");
  auto engine = Engine::Create(test::MakeConfig(GetParam()));
  ResourceManager* rm = ResourceManager::Get(engine.get());
  std::vector<Resource> rs;
  for (int i = 0; i < 3; ++i) rs.push_back(rm->Request(kCpu, ResourceRequest::kParallelRandom));
  const Resource random = rm->Request(kCpu, ResourceRequest::kRandom);
  std::vector<std::uint64_t> keys(4);
  for (int i = 0; i < 3; ++i) {
    engine->PushSync([&, i](RunContext) { keys[i] = rs[i].get_random()->key(); }, kCpu, {}, {rs[i].var()});
  }
  engine->PushSync([&](RunContext) { keys[3] = random.get_random()->key(); }, kCpu, {}, {random.var()});
  engine->WaitForAll();
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(std::unique(keys.begin(), keys.end()), keys.end());  // four different streams
  EXPECT_THROW(rs[0].get_space(16), Error);
  // The host fill helpers draw what the kernels draw.
  std::vector<float> host(10);
  engine->PushSync([&](RunContext) { rs[1].get_random()->FillUniform(host.data(), host.size(), 0.f, 1.f); }, kCpu, {},
                   {rs[1].var()});
  engine->WaitForAll();
  for (float v : host) EXPECT_TRUE(v >= 0 && v < 1) << v;
}

TEST_P(ResourceTest, DevicesThatDoNotExistAreRefused) {
  ResourceManager* rm = ResourceManager::Get(engine_.get());
  if (Runtime::GpuCount() == 0) {
    EXPECT_THROW(rm->Request(Context::GPU(0), ResourceRequest::kRandom), Error);
  }
  EXPECT_THROW(rm->Request(Context::GPU(1000), ResourceRequest::kTempSpace), Error);
}

INSTANTIATE_TEST_SUITE_P(Engines, ResourceTest, ::testing::ValuesIn(test::AllEngines()), test::EngineParamName);

}  // namespace
}  // namespace troupe
