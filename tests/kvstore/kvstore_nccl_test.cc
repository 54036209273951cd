// KVStore "nccl": pushes of one value per GPU summed with NCCL all-reduce, pulls to every device, the
// updater and SetOptimizer, keys stored on a device outside the push (a CPU, another GPU), several GPU sets
// in one store, string keys, priorities, other dtypes, the naive engine, errors (and that the store keeps
// working after them), and a random workload compared with a sequential model computed here.
//
// Every test uses at most one value per GPU for a key (the store's rule: two values of a key on one GPU
// are an error), so it runs with 1, 2 or all of the machine's GPUs. Without a GPU every test but the first
// skips; the first checks that Create("nccl") is then a clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "actors/runtime.h"
#include "kvstore/kvstore.h"
#include "tests/common/op_test_util.h"
#include "tests/common/test_params.h"

namespace troupe {
namespace {

using test::ExpectError;
using Vec = std::vector<float>;

NDArray Make(const Vec& v, const TShape& s, Context ctx, Engine* engine = nullptr) {
  return NDArray::FromVector<float>(v, s, ctx, engine);
}

Vec Get(const NDArray& a) { return a.ToVector<float>(); }

Vec Random(std::size_t n, std::mt19937* rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Vec v(n);
  for (auto& x : v) x = u(*rng);
  return v;
}

// NCCL adds in an order of its own choosing (ring or tree): float results match a host sum to rounding.
void ExpectNear(const Vec& got, const Vec& want, const std::string& what, float tol = 1e-5f) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << what << " [" << i << "]";
}

Vec SumOf(const std::vector<Vec>& vs) {
  Vec s = vs[0];
  for (std::size_t d = 1; d < vs.size(); ++d) {
    for (std::size_t i = 0; i < s.size(); ++i) s[i] += vs[d][i];
  }
  return s;
}

Context Gpu(int i) { return Context::GPU(i); }

TEST(KVStoreNcclNoGpuTest, CreateWithoutAGpuIsAClearError) {
  if (Runtime::GpuCount() > 0) GTEST_SKIP() << "this machine has a GPU";
  ExpectError([] { KVStore::Create("nccl"); }, {"nccl", "needs GPUs", "use local or device"});
}

class KVStoreNcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    gpus_ = Runtime::GpuCount();
    if (gpus_ == 0) GTEST_SKIP() << "no CUDA device on this machine";
  }

  // How many GPUs a test pushes from: 1, 2 and all of them (each count once).
  std::vector<int> Counts() const {
    std::vector<int> c = {1};
    if (gpus_ >= 2) c.push_back(2);
    if (gpus_ > 2) c.push_back(gpus_);
    return c;
  }

  int gpus_ = 0;
};

TEST_F(KVStoreNcclTest, CreateTypeAndRank) {
  auto kv = KVStore::Create("nccl");
  EXPECT_EQ(kv->type(), "nccl");
  EXPECT_EQ(kv->rank(), 0);
  EXPECT_EQ(kv->num_workers(), 1);
  kv->Barrier();
}

TEST_F(KVStoreNcclTest, PushSumsAcrossGpusAndPullFillsEveryDevice) {
  std::mt19937 rng(1);
  const TShape s0{2, 3}, s1{5};
  for (int ndev : Counts()) {
    SCOPED_TRACE("ndev=" + std::to_string(ndev));
    auto kv = KVStore::Create("nccl");
    // Key 3 lives on gpu(0), key 9 on the last GPU of the push.
    kv->Init({3, 9}, {Make(Random(6, &rng), s0, Gpu(0)), Make(Random(5, &rng), s1, Gpu(ndev - 1))});
    for (int round = 0; round < 3; ++round) {
      std::vector<int> keys;
      std::vector<NDArray> vals;
      std::vector<Vec> h0, h1;
      for (int d = 0; d < ndev; ++d) {
        h0.push_back(Random(6, &rng));
        h1.push_back(Random(5, &rng));
        keys.insert(keys.end(), {3, 9});
        vals.push_back(Make(h0.back(), s0, Gpu(d)));
        vals.push_back(Make(h1.back(), s1, Gpu(d)));
      }
      kv->Push(keys, vals);
      // Every GPU of the push, and the host.
      std::vector<int> pull_keys;
      std::vector<NDArray> outs;
      for (int d = 0; d <= ndev; ++d) {
        const Context c = d < ndev ? Gpu(d) : Context::CPU();
        pull_keys.insert(pull_keys.end(), {3, 9});
        outs.push_back(NDArray::Zeros(s0, c));
        outs.push_back(NDArray::Zeros(s1, c));
      }
      kv->Pull(pull_keys, outs);
      const float tol = 1e-5f * static_cast<float>(ndev);
      for (int d = 0; d <= ndev; ++d) {
        const std::string where = outs[2 * d].ctx().ToString();
        ExpectNear(Get(outs[2 * d]), SumOf(h0), "key 3 on " + where, tol);
        ExpectNear(Get(outs[2 * d + 1]), SumOf(h1), "key 9 on " + where, tol);
      }
    }
  }
}

TEST_F(KVStoreNcclTest, PullWithoutPushReturnsInitValue) {
  auto kv = KVStore::Create("nccl");
  NDArray init = Make({1, 2, 3, 4}, TShape{4}, Gpu(gpus_ - 1));
  kv->Init(std::vector<int>{0}, {init});
  init = 100.0;  // the store holds a copy
  NDArray g = NDArray::Zeros(TShape{4}, Gpu(0)), c = NDArray::Zeros(TShape{4}, Context::CPU());
  kv->Pull({0, 0}, {g, c});
  ExpectNear(Get(g), {1, 2, 3, 4}, "gpu");
  ExpectNear(Get(c), {1, 2, 3, 4}, "cpu");
}

TEST_F(KVStoreNcclTest, UpdaterCalledOncePerKeyPerPushWithMergedValue) {
  std::mt19937 rng(2);
  for (int ndev : Counts()) {
    SCOPED_TRACE("ndev=" + std::to_string(ndev));
    auto kv = KVStore::Create("nccl");
    const TShape shape{7};
    const Context init_ctx = Gpu(ndev - 1);
    std::map<int, Vec> ref = {{0, Random(7, &rng)}, {1, Random(7, &rng)}};
    kv->Init({0, 1}, {Make(ref[0], shape, init_ctx), Make(ref[1], shape, init_ctx)});
    std::map<int, int> calls;
    std::map<int, NDArray> seen;  // a copy of the merged value of the latest call, per key
    kv->SetUpdater([&](int key, const NDArray& merged, NDArray* stored) {
      ++calls[key];
      // As "device": the store and the update on the device of the key's first value.
      EXPECT_EQ(stored->ctx(), init_ctx);
      EXPECT_EQ(merged.ctx(), init_ctx);
      seen[key] = merged.CopyTo(Context::CPU());
      // store = 2 * store + merged, so that a swapped or stale operand would show.
      *stored *= 2.0;
      *stored += merged;
    });
    for (int r = 0; r < 3; ++r) {
      std::vector<int> keys;
      std::vector<NDArray> vals;
      std::map<int, std::vector<Vec>> hv;
      for (int d = 0; d < ndev; ++d) {
        for (int key : {1, 0}) {  // keys out of order and interleaved
          hv[key].push_back(Random(7, &rng));
          keys.push_back(key);
          vals.push_back(Make(hv[key].back(), shape, Gpu(d)));
        }
      }
      kv->Push(keys, vals, /*priority=*/r);
      for (int key : {0, 1}) {
        EXPECT_EQ(calls[key], r + 1) << "key " << key;
        const Vec sum = SumOf(hv[key]);
        ExpectNear(Get(seen[key]), sum, "merged of key " + std::to_string(key), 1e-5f * static_cast<float>(ndev));
        for (std::size_t i = 0; i < sum.size(); ++i) ref[key][i] = 2.0f * ref[key][i] + sum[i];
      }
    }
    for (int key : {0, 1}) {
      for (int d = 0; d < ndev; ++d) {
        NDArray out = NDArray::Zeros(shape, Gpu(d));
        kv->Pull({key}, {out});
        ExpectNear(Get(out), ref[key], "key " + std::to_string(key), 1e-4f);
      }
    }
  }
}

TEST_F(KVStoreNcclTest, SetOptimizerSgdMatchesReference) {
  std::mt19937 rng(3);
  const float lr = 0.1f, mom = 0.9f, wd = 0.01f;
  for (int ndev : Counts()) {
    SCOPED_TRACE("ndev=" + std::to_string(ndev));
    auto kv = KVStore::Create("nccl");
    kv->SetOptimizer({"sgd", {{"learning_rate", "0.1"}, {"momentum", "0.9"}, {"wd", "0.01"}}});
    ASSERT_NE(kv->optimizer(), nullptr);
    Vec w = Random(10, &rng), m(10, 0.0f);
    kv->Init({5}, {Make(w, TShape{10}, Gpu(0))});
    for (int step = 0; step < 4; ++step) {
      std::vector<Vec> g;
      std::vector<NDArray> vals;
      for (int d = 0; d < ndev; ++d) {
        g.push_back(Random(10, &rng));
        vals.push_back(Make(g.back(), TShape{10}, Gpu(d)));
      }
      kv->Push(std::vector<int>(ndev, 5), vals);
      const Vec sum = SumOf(g);
      for (std::size_t i = 0; i < w.size(); ++i) {  // MXNet's sgd_mom_update
        m[i] = mom * m[i] - lr * (sum[i] + wd * w[i]);
        w[i] += m[i];
      }
    }
    std::vector<NDArray> outs;
    for (int d = 0; d < ndev; ++d) outs.push_back(NDArray::Zeros(TShape{10}, Gpu(d)));
    kv->Pull(std::vector<int>(ndev, 5), outs);
    for (const auto& o : outs) ExpectNear(Get(o), w, "weight", 1e-4f);
  }
}

TEST_F(KVStoreNcclTest, PushPullInPlaceAndToOtherOutputs) {
  std::mt19937 rng(4);
  for (int ndev : Counts()) {
    SCOPED_TRACE("ndev=" + std::to_string(ndev));
    auto kv = KVStore::Create("nccl");
    kv->Init(std::vector<int>{0}, {NDArray::Zeros(TShape{3, 4}, Gpu(0))});
    std::vector<Vec> h;
    std::vector<NDArray> grads;
    for (int d = 0; d < ndev; ++d) {
      h.push_back(Random(12, &rng));
      grads.push_back(Make(h.back(), TShape{3, 4}, Gpu(d)));
    }
    // In place, as Gluon's trainer does: each gradient array receives the sum.
    kv->PushPull(std::vector<int>(ndev, 0), grads, grads);
    for (const auto& g : grads) ExpectNear(Get(g), SumOf(h), "in place", 1e-5f * static_cast<float>(ndev));
    // Again, from the summed arrays, into separate outputs: ndev * sum.
    std::vector<NDArray> outs;
    for (int d = 0; d < ndev; ++d) outs.push_back(NDArray::Zeros(TShape{3, 4}, Gpu(d)));
    kv->PushPull(std::vector<int>(ndev, 0), grads, outs, -1);
    Vec want = SumOf(h);
    for (auto& x : want) x *= static_cast<float>(ndev);
    for (const auto& o : outs) ExpectNear(Get(o), want, "outputs", 1e-4f);
  }
}

// The key's device takes no part in the push: the store is on a CPU, or on a GPU that pushes nothing.
TEST_F(KVStoreNcclTest, KeyStoredOnADeviceOutsideThePush) {
  std::mt19937 rng(5);
  for (int ndev : Counts()) {
    for (bool with_updater : {false, true}) {
      SCOPED_TRACE("ndev=" + std::to_string(ndev) + (with_updater ? " updater" : ""));
      auto kv = KVStore::Create("nccl");
      Vec ref = Random(9, &rng);
      kv->Init({0}, {Make(ref, TShape{9}, Context::CPU())});
      if (with_updater) {
        kv->SetUpdater([](int, const NDArray& merged, NDArray* stored) {
          EXPECT_EQ(stored->ctx(), Context::CPU());
          EXPECT_EQ(merged.ctx(), Context::CPU());
          *stored -= merged;
        });
      }
      for (int r = 0; r < 2; ++r) {
        std::vector<Vec> h;
        std::vector<NDArray> vals;
        for (int d = 0; d < ndev; ++d) {
          h.push_back(Random(9, &rng));
          vals.push_back(Make(h.back(), TShape{9}, Gpu(d)));
        }
        kv->Push(std::vector<int>(ndev, 0), vals);
        const Vec s = SumOf(h);
        for (std::size_t i = 0; i < s.size(); ++i) ref[i] = with_updater ? ref[i] - s[i] : s[i];
      }
      NDArray c = NDArray::Zeros(TShape{9}, Context::CPU(1)), g = NDArray::Zeros(TShape{9}, Gpu(ndev - 1));
      kv->Pull({0, 0}, {c, g});
      ExpectNear(Get(c), ref, "cpu(1)", 1e-4f);
      ExpectNear(Get(g), ref, "gpu", 1e-4f);
    }
  }
  if (gpus_ >= 2) {
    auto kv = KVStore::Create("nccl");
    kv->Init({1}, {NDArray::Zeros(TShape{3}, Gpu(1))});
    kv->Push({1}, {Make({1, 2, 3}, TShape{3}, Gpu(0))});  // gpu(1) takes no part
    NDArray out = NDArray::Zeros(TShape{3}, Gpu(1));
    kv->Pull({1}, {out});
    ExpectNear(Get(out), {1, 2, 3}, "key on gpu(1) pushed from gpu(0)");
  }
}

// Keys of one push reduced over different sets of GPUs (communicators made per set and reused).
TEST_F(KVStoreNcclTest, KeysOverDifferentGpuSets) {
  std::mt19937 rng(6);
  auto kv = KVStore::Create("nccl");
  const TShape shape{16};
  kv->Init({0, 1, 2},
           {NDArray::Zeros(shape, Gpu(0)), NDArray::Zeros(shape, Gpu(gpus_ - 1)), NDArray::Zeros(shape, Gpu(0))});
  for (int r = 0; r < 3; ++r) {
    std::vector<int> keys;
    std::vector<NDArray> vals;
    std::map<int, std::vector<Vec>> h;
    auto add = [&](int key, int dev) {
      h[key].push_back(Random(16, &rng));
      keys.push_back(key);
      vals.push_back(Make(h[key].back(), shape, Gpu(dev)));
    };
    for (int d = 0; d < gpus_; ++d) add(0, d);       // every GPU
    add(1, gpus_ - 1);                               // the last GPU only
    for (int d = gpus_ - 1; d >= 0; --d) add(2, d);  // every GPU, values in reverse order
    kv->Push(keys, vals, r % 2 == 0 ? 1 : -1);
    std::vector<NDArray> outs;
    for (int key : {0, 1, 2}) outs.push_back(NDArray::Zeros(shape, Gpu(key % gpus_)));
    kv->Pull({0, 1, 2}, outs);
    const float tol = 1e-5f * static_cast<float>(gpus_);
    for (int key : {0, 1, 2}) ExpectNear(Get(outs[key]), SumOf(h[key]), "key " + std::to_string(key), tol);
  }
}

TEST_F(KVStoreNcclTest, StringKeysAndPriorities) {
  auto kv = KVStore::Create("nccl");
  const int ndev = std::min(gpus_, 2);
  kv->Init(std::vector<std::string>{"fc1_weight", "fc1_bias"},
           {Make({1, 2}, TShape{2}, Gpu(0)), Make({5}, TShape{1}, Gpu(ndev - 1))});
  std::vector<int> seen_keys;
  kv->SetUpdater([&](int key, const NDArray& merged, NDArray* stored) {
    seen_keys.push_back(key);
    *stored += merged;
  });
  std::vector<std::string> keys;
  std::vector<NDArray> vals;
  for (int d = 0; d < ndev; ++d) {
    keys.insert(keys.end(), {"fc1_weight", "fc1_bias"});
    vals.push_back(Make({1, 1}, TShape{2}, Gpu(d)));
    vals.push_back(Make({1}, TShape{1}, Gpu(d)));
  }
  kv->Push(keys, vals, /*priority=*/-3);
  EXPECT_EQ(seen_keys.size(), 2u);
  const float n = static_cast<float>(ndev);
  NDArray w = NDArray::Zeros(TShape{2}, Gpu(ndev - 1)), b = NDArray::Zeros(TShape{1}, Context::CPU());
  kv->Pull(std::vector<std::string>{"fc1_weight", "fc1_bias"}, {w, b}, 7);
  ExpectNear(Get(w), {1 + n, 2 + n}, "fc1_weight");
  ExpectNear(Get(b), {5 + n}, "fc1_bias");
  // Errors name the string key, and the store keeps working.
  ExpectError([&] { kv->Pull(std::vector<std::string>{"fc2_weight"}, {w}); }, {"'fc2_weight'", "Init"});
  ExpectError([&] { kv->Push(std::vector<std::string>{"fc1_bias"}, {Make({1}, TShape{1}, Context::CPU())}); },
              {"'fc1_bias'", "cpu(0)"});
  ExpectError([&] { kv->Pull(std::vector<int>{0}, {w}); }, {"string keys"});
  NDArray o = NDArray::Zeros(TShape{2}, Gpu(0));
  kv->PushPull(std::vector<std::string>{"fc1_weight"}, {Make({1, 1}, TShape{2}, Gpu(0))}, {o});
  ExpectNear(Get(o), {2 + n, 3 + n}, "fc1_weight after PushPull");

  // Priorities reorder ready work, never results (MXNet: earlier layers get larger priorities).
  std::mt19937 rng(7);
  const int nkeys = 8;
  auto kv2 = KVStore::Create("nccl");
  std::vector<Vec> ref(nkeys);
  for (int k = 0; k < nkeys; ++k) {
    ref[k] = Random(64, &rng);
    kv2->Init({k}, {Make(ref[k], TShape{64}, Gpu(k % gpus_))});
  }
  kv2->SetOptimizer({"sgd", {{"learning_rate", "0.5"}}});
  for (int round = 0; round < 3; ++round) {
    for (int k = nkeys - 1; k >= 0; --k) {  // backward order: last layer first
      std::vector<Vec> g;
      std::vector<NDArray> gv;
      for (int d = 0; d < gpus_; ++d) {
        g.push_back(Random(64, &rng));
        gv.push_back(Make(g.back(), TShape{64}, Gpu(d)));
      }
      kv2->Push(std::vector<int>(gpus_, k), gv, -k);
      const Vec s = SumOf(g);
      for (std::size_t i = 0; i < s.size(); ++i) ref[k][i] -= 0.5f * s[i];
    }
  }
  std::vector<NDArray> outs;
  std::vector<int> pkeys;
  for (int k = 0; k < nkeys; ++k) {
    pkeys.push_back(k);
    outs.push_back(NDArray::Zeros(TShape{64}, Gpu((k + 1) % gpus_)));
  }
  kv2->Pull(pkeys, outs, 1000);
  for (int k = 0; k < nkeys; ++k) ExpectNear(Get(outs[k]), ref[k], "key " + std::to_string(k), 1e-4f);
}

TEST_F(KVStoreNcclTest, OtherDTypes) {
  auto kv = KVStore::Create("nccl");
  const int ndev = gpus_;
  kv->Init({0, 1, 2},
           {NDArray::Zeros(TShape{3}, Gpu(0), DType::kInt32), NDArray::Zeros(TShape{2}, Gpu(0), DType::kFloat64),
            NDArray::Zeros(TShape{2}, Gpu(ndev - 1), DType::kInt64)});
  std::vector<int> keys;
  std::vector<NDArray> vals;
  for (int d = 0; d < ndev; ++d) {
    const int f = 1 << d;  // distinct per GPU, exact sums in any order
    keys.insert(keys.end(), {0, 1, 2});
    vals.push_back(NDArray::FromVector<std::int32_t>({f, 10 * f, 100 * f}, TShape{3}, Gpu(d)));
    vals.push_back(NDArray::FromVector<double>({0.5 * f, 0.25 * f}, TShape{2}, Gpu(d)));
    vals.push_back(NDArray::FromVector<std::int64_t>({std::int64_t{1} << 40, -f}, TShape{2}, Gpu(d)));
  }
  kv->Push(keys, vals);
  const int total = (1 << ndev) - 1;
  NDArray i = NDArray::Zeros(TShape{3}, Gpu(ndev - 1), DType::kInt32);
  NDArray f = NDArray::Zeros(TShape{2}, Context::CPU(), DType::kFloat64);
  NDArray l = NDArray::Zeros(TShape{2}, Gpu(0), DType::kInt64);
  kv->Pull({0, 1, 2}, {i, f, l});
  EXPECT_EQ(i.ToVector<std::int32_t>(), (std::vector<std::int32_t>{total, 10 * total, 100 * total}));
  EXPECT_EQ(f.ToVector<double>(), (std::vector<double>{0.5 * total, 0.25 * total}));
  EXPECT_EQ(l.ToVector<std::int64_t>(), (std::vector<std::int64_t>{ndev * (std::int64_t{1} << 40), -total}));
}

TEST_F(KVStoreNcclTest, ErrorsNameTheKeyAndLeaveTheStoreUsable) {
  auto kv = KVStore::Create("nccl");
  kv->Init({1}, {Make({1, 2, 3}, TShape{3}, Gpu(0))});
  const int ndev = std::min(gpus_, 2);
  NDArray good0 = Make({1, 1, 1}, TShape{3}, Gpu(0));
  NDArray good1 = Make({2, 2, 2}, TShape{3}, Gpu(ndev - 1));
  const std::vector<int> good_keys = ndev == 2 ? std::vector<int>{1, 1} : std::vector<int>{1};
  const std::vector<NDArray> good = ndev == 2 ? std::vector<NDArray>{good0, good1} : std::vector<NDArray>{good0};
  const Vec expect = ndev == 2 ? Vec{3, 3, 3} : Vec{1, 1, 1};
  NDArray out = NDArray::Zeros(TShape{3}, Gpu(ndev - 1));
  auto check_usable = [&](const std::string& after) {
    kv->Push(good_keys, good);
    kv->Pull({1}, {out});
    ExpectNear(Get(out), expect, "after " + after);
  };

  ExpectError([&] { kv->Pull({7}, {out}); }, {"Pull", "key 7", "not been initialised"});
  check_usable("pull of an uninitialised key");
  ExpectError([&] { kv->Push({1, 7}, {good0, good1}); }, {"Push", "key 7", "not been initialised"});
  check_usable("push of an uninitialised key");
  ExpectError([&] { kv->Push({1}, {NDArray::Zeros(TShape{4}, Gpu(0))}); }, {"Push", "key 1", "shape", "(4,)", "(3,)"});
  check_usable("a push of a wrong shape");
  ExpectError([&] { kv->Push({1}, {NDArray::Zeros(TShape{3}, Gpu(0), DType::kFloat64)}); },
              {"Push", "key 1", "dtype", "float64", "float32"});
  check_usable("a push of a wrong dtype");
  ExpectError([&] { kv->Pull({1}, {NDArray::Zeros(TShape{2, 2}, Gpu(0))}); }, {"Pull", "key 1", "shape"});
  check_usable("a pull into a wrong shape");
  ExpectError([&] { kv->Init({1}, {good0}); }, {"Init", "key 1", "twice"});
  check_usable("a second Init");
  ExpectError([&] { kv->Init({4, 4}, {good0, good1}); }, {"Init", "key 4", "twice"});
  ExpectError([&] { kv->Pull({4}, {out}); }, {"key 4", "not been initialised"});  // nothing of it was kept
  ExpectError([&] { kv->Push({1, 1}, {good0}); }, {"Push", "2 keys", "1 value"});
  ExpectError([&] { kv->Pull({1}, {out, out}); }, {"Pull", "1 keys", "2 outputs"});
  ExpectError([&] { kv->Push({1}, {NDArray()}); }, {"key 1", "none"});
  check_usable("count mismatches and a none array");
  // What NCCL needs: GPU values, one per GPU for a key, a dtype it sums.
  ExpectError(
      [&] {
        kv->Push({1}, {Make({1, 1, 1}, TShape{3}, Context::CPU())});
      },
      {"Push", "key 1", "cpu(0)", "GPU", "use local or device"});
  check_usable("a CPU value");
  ExpectError(
      [&] {
        kv->Push({1, 1}, {good0, Make({5, 5, 5}, TShape{3}, Gpu(0))});
      },
      {"Push", "key 1", "values 0 and 1", "gpu(0)", "one value per GPU"});
  check_usable("two values on one GPU");
  kv->Init({5}, {NDArray::Zeros(TShape{2}, Gpu(0), DType::kBool)});
  ExpectError([&] { kv->Push({5}, {NDArray::Zeros(TShape{2}, Gpu(0), DType::kBool)}); }, {"key 5", "bool", "NCCL"});
  check_usable("a bool push");
  // A check of a later key fails: nothing of the push is done, not even the first key's part.
  ExpectError(
      [&] {
        kv->Push({1, 5}, {Make({9, 9, 9}, TShape{3}, Gpu(0)), NDArray::Zeros(TShape{2}, Gpu(0), DType::kBool)});
      },
      {"key 5", "bool"});
  kv->Pull({1}, {out});
  ExpectNear(Get(out), expect, "after a push whose second key failed");
  // PushPull checks its outputs before pushing: a bad output leaves the stored value alone.
  ExpectError([&] { kv->PushPull({1}, {good0}, {NDArray::Zeros(TShape{9}, Gpu(0))}); }, {"PushPull", "key 1", "shape"});
  kv->Pull({1}, {out});
  ExpectNear(Get(out), expect, "after a failed PushPull");
  // No gradient compression (as MXNet's KVStoreNCCL).
  ExpectError([&] { kv->SetGradientCompression({{"type", "2bit"}, {"threshold", "0.5"}}); }, {"nccl", "device"});
  EXPECT_TRUE(kv->gradient_compression().empty());
  check_usable("SetGradientCompression");
}

// Many pushes in a row without waiting, then the store destroyed before anything is read: the engine
// keeps what the pushed functions use alive, and the pulls see the state as of their call.
TEST_F(KVStoreNcclTest, ManyPushesWithoutWaitingThenTheStoreGoes) {
  std::mt19937 rng(8);
  for (bool with_updater : {false, true}) {
    SCOPED_TRACE(with_updater ? "updater" : "no updater");
    auto kv = KVStore::Create("nccl");
    Vec ref = Random(1000, &rng);
    kv->Init({0}, {Make(ref, TShape{1000}, Gpu(0))});
    if (with_updater) {
      kv->SetUpdater([](int, const NDArray& merged, NDArray* stored) { *stored += merged; });
    }
    std::vector<std::pair<NDArray, Vec>> checks;
    for (int r = 0; r < 10; ++r) {
      std::vector<Vec> h;
      std::vector<NDArray> vals;
      for (int d = 0; d < gpus_; ++d) {
        h.push_back(Random(1000, &rng));
        vals.push_back(Make(h.back(), TShape{1000}, Gpu(d)));
      }
      kv->Push(std::vector<int>(gpus_, 0), vals);
      const Vec s = SumOf(h);
      for (std::size_t i = 0; i < s.size(); ++i) ref[i] = with_updater ? ref[i] + s[i] : s[i];
      if (r % 3 == 0) {
        NDArray o = NDArray::Zeros(TShape{1000}, Gpu(r % gpus_));
        kv->Pull({0}, {o});
        checks.emplace_back(o, ref);
      }
    }
    NDArray last = NDArray::Zeros(TShape{1000}, Context::CPU());
    kv->Pull({0}, {last});
    checks.emplace_back(last, ref);
    kv.reset();
    for (std::size_t c = 0; c < checks.size(); ++c) {
      ExpectNear(Get(checks[c].first), checks[c].second, "pull " + std::to_string(c), 1e-4f);
    }
  }
}

// The naive engine runs GPU functions on the legacy default stream without synchronising after them.
TEST_F(KVStoreNcclTest, WorksOnTheNaiveEngine) {
  std::mt19937 rng(9);
  const std::unique_ptr<Engine> engine = test::MakeEngine({EngineType::kNaive, 1, 0});
  ASSERT_NE(engine, nullptr);
  Engine* e = engine.get();
  {
    auto kv = KVStore::Create("nccl");
    Vec ref = Random(33, &rng);
    kv->Init({0}, {Make(ref, TShape{33}, Gpu(0), e)});
    kv->SetUpdater([](int, const NDArray& merged, NDArray* stored) { *stored += merged; });
    for (int r = 0; r < 3; ++r) {
      std::vector<Vec> h;
      std::vector<NDArray> vals;
      for (int d = 0; d < gpus_; ++d) {
        h.push_back(Random(33, &rng));
        vals.push_back(Make(h.back(), TShape{33}, Gpu(d), e));
        vals.back() *= 2.0;  // a kernel on the default stream just before the push
        for (auto& x : h.back()) x *= 2.0f;
      }
      kv->Push(std::vector<int>(gpus_, 0), vals);
      const Vec s = SumOf(h);
      for (std::size_t i = 0; i < s.size(); ++i) ref[i] += s[i];
    }
    NDArray out = NDArray::Zeros(TShape{33}, Gpu(gpus_ - 1), DType::kFloat32, e);
    kv->Pull({0}, {out});
    ExpectNear(Get(out), ref, "naive engine", 1e-4f);
    // A value of another engine than the key's is an error.
    ExpectError([&] { kv->Push({0}, {NDArray::Zeros(TShape{33}, Gpu(0))}); }, {"key 0", "another engine"});
  }
}

// A random workload (pushes from random subsets of GPUs, pulls, push-pulls, over several keys stored on
// random devices, with and without an updater) compared with a sequential model of the store.
TEST_F(KVStoreNcclTest, RandomWorkloadMatchesSequentialModel) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::printf("RandomWorkloadMatchesSequentialModel seed %u\n", seed);
  std::mt19937 rng(seed);
  for (bool with_updater : {false, true}) {
    SCOPED_TRACE(with_updater ? "updater" : "no updater");
    auto kv = KVStore::Create("nccl");
    const int nkeys = 4;
    const std::vector<TShape> shapes = {TShape{8}, TShape{2, 5}, TShape{1}, TShape{3, 3}};
    auto random_ctx = [&] {
      const int i = static_cast<int>(rng() % static_cast<unsigned>(gpus_ + 1));
      return i == gpus_ ? Context::CPU(static_cast<int>(rng() % 2)) : Gpu(i);
    };
    std::vector<Vec> model(nkeys);
    for (int k = 0; k < nkeys; ++k) {
      model[k] = Random(static_cast<std::size_t>(shapes[k].Size()), &rng);
      kv->Init({k}, {Make(model[k], shapes[k], random_ctx())});
    }
    // updater: stored = 0.5 * stored - merged
    if (with_updater) {
      kv->SetUpdater([](int, const NDArray& merged, NDArray* stored) {
        *stored *= 0.5;
        *stored -= merged;
      });
    }
    std::vector<std::pair<NDArray, Vec>> checks;
    for (int op = 0; op < 30; ++op) {
      const int kind = static_cast<int>(rng() % 3);  // 0 push, 1 pull, 2 pushpull
      std::vector<int> keys;
      std::vector<NDArray> vals, outs;
      std::map<int, std::vector<Vec>> pushed;
      const int nk = 1 + static_cast<int>(rng() % nkeys);
      for (int j = 0; j < nk; ++j) {
        const int k = static_cast<int>(rng() % nkeys);
        if (std::find(keys.begin(), keys.end(), k) != keys.end()) continue;
        // A random non-empty subset of the GPUs, in random order.
        std::vector<int> devs(static_cast<std::size_t>(gpus_));
        for (int d = 0; d < gpus_; ++d) devs[static_cast<std::size_t>(d)] = d;
        std::shuffle(devs.begin(), devs.end(), rng);
        devs.resize(1 + rng() % static_cast<unsigned>(gpus_));
        for (int d : devs) {
          keys.push_back(k);
          Vec v = Random(model[k].size(), &rng);
          pushed[k].push_back(v);
          vals.push_back(Make(v, shapes[k], Gpu(d)));
          outs.push_back(NDArray::Zeros(shapes[k], random_ctx()));
        }
      }
      const int priority = static_cast<int>(rng() % 7) - 3;
      if (kind != 1) {
        for (auto& [k, vs] : pushed) {
          const Vec s = SumOf(vs);
          for (std::size_t i = 0; i < s.size(); ++i) model[k][i] = with_updater ? 0.5f * model[k][i] - s[i] : s[i];
        }
      }
      if (kind == 0) kv->Push(keys, vals, priority);
      if (kind == 1) kv->Pull(keys, outs, priority);
      if (kind == 2) kv->PushPull(keys, vals, outs, priority);
      if (kind != 0) {
        for (std::size_t i = 0; i < keys.size(); ++i) checks.emplace_back(outs[i], model[keys[i]]);
      }
    }
    // Read everything at the end: the pulls must have captured the state as of their call.
    for (std::size_t c = 0; c < checks.size(); ++c) {
      ExpectNear(Get(checks[c].first), checks[c].second, "pull " + std::to_string(c), 1e-4f);
    }
  }
}

}  // namespace
}  // namespace troupe
