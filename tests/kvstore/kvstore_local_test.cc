// KVStore "local" and "device" on CPU devices cpu(0..3): push/pull sums, the updater, SetOptimizer,
// PushPull, string keys, priorities, errors (and that the store keeps working after them), and a random
// workload compared with a sequential model computed here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <future>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "actors/runtime.h"
#include "kvstore/kvstore.h"
#include "tests/common/op_test_util.h"

namespace troupe {
namespace {

using test::ExpectError;
using Vec = std::vector<float>;

const std::vector<std::string> kTypes = {"local", "device"};

NDArray Make(const Vec& v, const TShape& s, Context ctx) { return NDArray::FromVector<float>(v, s, ctx); }

OptimizerConfig Config(const std::string& type, const Kwargs& params) {
  OptimizerConfig c;
  c.type = type;
  c.params = params;
  return c;
}

Vec Get(const NDArray& a) { return a.ToVector<float>(); }

Vec Random(std::size_t n, std::mt19937* rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Vec v(n);
  for (auto& x : v) x = u(*rng);
  return v;
}

void ExpectNear(const Vec& got, const Vec& want, const std::string& what, float tol = 1e-5f) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << what << " [" << i << "]";
}

// Sum of per-device vectors in device order (the order the store adds them in, so float results match).
Vec SumOf(const std::vector<Vec>& vs) {
  Vec s = vs[0];
  for (std::size_t d = 1; d < vs.size(); ++d) {
    for (std::size_t i = 0; i < s.size(); ++i) s[i] += vs[d][i];
  }
  return s;
}

TEST(KVStoreLocalTest, CreateTypesAndRank) {
  for (const auto& t : kTypes) {
    auto kv = KVStore::Create(t);
    EXPECT_EQ(kv->type(), t);
    EXPECT_EQ(kv->rank(), 0);
    EXPECT_EQ(kv->num_workers(), 1);
    kv->Barrier();  // a no-op on one machine
  }
  ExpectError([] { KVStore::Create("bogus"); }, {"bogus", "local", "device", "nccl"});
}

TEST(KVStoreLocalTest, NcclWithoutGpuIsAClearError) {
  // Without CUDA or without a GPU "nccl" is a clear error; with one it works (kvstore_nccl_test).
  if (Runtime::GpuCount() > 0) GTEST_SKIP() << "this machine has a GPU: nccl is covered by kvstore_nccl_test";
  ExpectError([] { KVStore::Create("nccl"); }, {"nccl", "needs GPUs", "use local or device"});
}

TEST(KVStoreLocalTest, PushSumsAndPullFillsEveryDevice) {
  std::mt19937 rng(1);
  const TShape s0{2, 3}, s1{5};
  for (const auto& type : kTypes) {
    for (int ndev = 1; ndev <= 4; ++ndev) {
      SCOPED_TRACE(type + " ndev=" + std::to_string(ndev));
      auto kv = KVStore::Create(type);
      kv->Init({3, 9}, {Make(Random(6, &rng), s0, Context::CPU()), Make(Random(5, &rng), s1, Context::CPU())});
      for (int round = 0; round < 3; ++round) {
        std::vector<int> keys;
        std::vector<NDArray> vals;
        std::vector<Vec> h0, h1;
        for (int d = 0; d < ndev; ++d) {
          h0.push_back(Random(6, &rng));
          h1.push_back(Random(5, &rng));
          keys.insert(keys.end(), {3, 9});
          vals.push_back(Make(h0.back(), s0, Context::CPU(d)));
          vals.push_back(Make(h1.back(), s1, Context::CPU(d)));
        }
        kv->Push(keys, vals);
        std::vector<NDArray> outs;
        for (int d = 0; d < ndev; ++d) {
          outs.push_back(NDArray::Zeros(s0, Context::CPU(d)));
          outs.push_back(NDArray::Zeros(s1, Context::CPU(d)));
        }
        kv->Pull(keys, outs);
        for (int d = 0; d < ndev; ++d) {
          EXPECT_EQ(outs[2 * d].ctx(), Context::CPU(d));
          ExpectNear(Get(outs[2 * d]), SumOf(h0), "key 3 on cpu(" + std::to_string(d) + ")");
          ExpectNear(Get(outs[2 * d + 1]), SumOf(h1), "key 9 on cpu(" + std::to_string(d) + ")");
        }
      }
    }
  }
}

TEST(KVStoreLocalTest, PullWithoutPushReturnsInitValue) {
  for (const auto& type : kTypes) {
    auto kv = KVStore::Create(type);
    NDArray init = Make({1, 2, 3, 4}, TShape{4}, Context::CPU(2));
    kv->Init(std::vector<int>{0}, {init});
    init = 100.0;  // the store holds a copy
    NDArray out = NDArray::Zeros(TShape{4}, Context::CPU(1));
    kv->Pull(std::vector<int>{0}, {out});
    ExpectNear(Get(out), {1, 2, 3, 4}, type);
  }
}

TEST(KVStoreLocalTest, UpdaterCalledOncePerKeyPerRoundWithMergedValue) {
  std::mt19937 rng(2);
  for (const auto& type : kTypes) {
    for (int ndev = 1; ndev <= 4; ++ndev) {
      SCOPED_TRACE(type + " ndev=" + std::to_string(ndev));
      auto kv = KVStore::Create(type);
      const TShape shape{7};
      const Context init_ctx = Context::CPU(ndev - 1);
      std::map<int, Vec> ref = {{0, Random(7, &rng)}, {1, Random(7, &rng)}};
      kv->Init({0, 1}, {Make(ref[0], shape, init_ctx), Make(ref[1], shape, init_ctx)});
      std::map<int, int> calls;
      std::map<int, NDArray> seen;  // a copy of the merged value of the latest call, per key
      kv->SetUpdater([&](int key, const NDArray& merged, NDArray* stored) {
        ++calls[key];
        // "device" keeps the store on the device of the key's first value, "local" on cpu(0).
        EXPECT_EQ(stored->ctx(), type == "device" ? init_ctx : Context::CPU(0));
        EXPECT_EQ(merged.ctx(), stored->ctx());
        seen[key] = merged.CopyTo(Context::CPU());
        // store = 2 * store + merged, so that a swapped or stale operand would show.
        *stored *= 2.0;
        *stored += merged;
      });
      const int rounds = 3;
      for (int r = 0; r < rounds; ++r) {
        std::vector<int> keys;
        std::vector<NDArray> vals;
        std::map<int, std::vector<Vec>> hv;
        for (int d = 0; d < ndev; ++d) {
          for (int key : {1, 0}) {  // keys out of order and interleaved
            hv[key].push_back(Random(7, &rng));
            keys.push_back(key);
            vals.push_back(Make(hv[key].back(), shape, Context::CPU(d)));
          }
        }
        kv->Push(keys, vals, /*priority=*/r);
        for (int key : {0, 1}) {
          EXPECT_EQ(calls[key], r + 1) << "key " << key;
          const Vec sum = SumOf(hv[key]);
          ExpectNear(Get(seen[key]), sum, "merged of key " + std::to_string(key));
          for (std::size_t i = 0; i < sum.size(); ++i) ref[key][i] = 2.0f * ref[key][i] + sum[i];
        }
      }
      for (int key : {0, 1}) {
        for (int d = 0; d < ndev; ++d) {
          NDArray out = NDArray::Zeros(shape, Context::CPU(d));
          kv->Pull({key}, {out});
          ExpectNear(Get(out), ref[key], "key " + std::to_string(key), 1e-4f);
        }
      }
    }
  }
}

TEST(KVStoreLocalTest, SetOptimizerSgdMatchesReference) {
  std::mt19937 rng(3);
  const float lr = 0.1f, mom = 0.9f, wd = 0.01f;
  for (const auto& type : kTypes) {
    for (int ndev = 1; ndev <= 4; ++ndev) {
      SCOPED_TRACE(type + " ndev=" + std::to_string(ndev));
      auto kv = KVStore::Create(type);
      kv->SetOptimizer(Config("sgd", {{"learning_rate", "0.1"}, {"momentum", "0.9"}, {"wd", "0.01"}}));
      ASSERT_NE(kv->optimizer(), nullptr);
      Vec w = Random(10, &rng), m(10, 0.0f);
      kv->Init({5}, {Make(w, TShape{10}, Context::CPU())});
      for (int step = 0; step < 4; ++step) {
        std::vector<Vec> g;
        std::vector<NDArray> vals;
        for (int d = 0; d < ndev; ++d) {
          g.push_back(Random(10, &rng));
          vals.push_back(Make(g.back(), TShape{10}, Context::CPU(d)));
        }
        kv->Push(std::vector<int>(ndev, 5), vals);
        const Vec sum = SumOf(g);
        for (std::size_t i = 0; i < w.size(); ++i) {  // MXNet's sgd_mom_update
          m[i] = mom * m[i] - lr * (sum[i] + wd * w[i]);
          w[i] += m[i];
        }
      }
      std::vector<NDArray> outs;
      for (int d = 0; d < ndev; ++d) outs.push_back(NDArray::Zeros(TShape{10}, Context::CPU(d)));
      kv->Pull(std::vector<int>(ndev, 5), outs);
      for (const auto& o : outs) ExpectNear(Get(o), w, "weight", 1e-5f);
    }
  }
  auto kv = KVStore::Create("local");
  ExpectError([&] { kv->SetOptimizer(Config("no_such_optimizer", {})); }, {"no_such_optimizer"});
  EXPECT_EQ(kv->optimizer(), nullptr);
}

TEST(KVStoreLocalTest, PushPullInPlaceAndToOtherOutputs) {
  std::mt19937 rng(4);
  for (const auto& type : kTypes) {
    for (int ndev = 1; ndev <= 4; ++ndev) {
      SCOPED_TRACE(type + " ndev=" + std::to_string(ndev));
      auto kv = KVStore::Create(type);
      kv->Init(std::vector<int>{0}, {NDArray::Zeros(TShape{3, 4}, Context::CPU())});
      std::vector<Vec> h;
      std::vector<NDArray> grads;
      for (int d = 0; d < ndev; ++d) {
        h.push_back(Random(12, &rng));
        grads.push_back(Make(h.back(), TShape{3, 4}, Context::CPU(d)));
      }
      // In place, as Gluon's trainer does: each gradient array receives the sum.
      kv->PushPull(std::vector<int>(ndev, 0), grads, grads);
      for (const auto& g : grads) ExpectNear(Get(g), SumOf(h), "in place");
      // Again, from the summed arrays, into separate outputs: ndev * sum.
      std::vector<NDArray> outs;
      for (int d = 0; d < ndev; ++d) outs.push_back(NDArray::Zeros(TShape{3, 4}, Context::CPU(d)));
      kv->PushPull(std::vector<int>(ndev, 0), grads, outs, -1);
      Vec want = SumOf(h);
      for (auto& x : want) x *= static_cast<float>(ndev);
      for (const auto& o : outs) ExpectNear(Get(o), want, "outputs", 1e-4f);
    }
  }
}

TEST(KVStoreLocalTest, StringKeys) {
  for (const auto& type : kTypes) {
    SCOPED_TRACE(type);
    auto kv = KVStore::Create(type);
    kv->Init(std::vector<std::string>{"fc1_weight", "fc1_bias"},
             {Make({1, 2}, TShape{2}, Context::CPU()), Make({5}, TShape{1}, Context::CPU())});
    std::vector<int> seen_keys;
    kv->SetUpdater([&](int key, const NDArray& merged, NDArray* stored) {
      seen_keys.push_back(key);
      *stored += merged;
    });
    kv->Push(std::vector<std::string>{"fc1_weight", "fc1_weight", "fc1_bias"},
             {Make({1, 1}, TShape{2}, Context::CPU(0)), Make({2, 2}, TShape{2}, Context::CPU(1)),
              Make({1}, TShape{1}, Context::CPU(1))});
    EXPECT_EQ(seen_keys.size(), 2u);
    NDArray w = NDArray::Zeros(TShape{2}, Context::CPU(1)), b = NDArray::Zeros(TShape{1}, Context::CPU(0));
    kv->Pull(std::vector<std::string>{"fc1_weight", "fc1_bias"}, {w, b});
    ExpectNear(Get(w), {4, 5}, "fc1_weight");
    ExpectNear(Get(b), {6}, "fc1_bias");
    NDArray o = NDArray::Zeros(TShape{2}, Context::CPU(0));
    kv->PushPull(std::vector<std::string>{"fc1_weight"}, {Make({1, 1}, TShape{2}, Context::CPU(0))}, {o});
    ExpectNear(Get(o), {5, 6}, "fc1_weight after PushPull");

    // Errors name the string key, and the store keeps working.
    ExpectError([&] { kv->Pull(std::vector<std::string>{"fc2_weight"}, {o}); }, {"'fc2_weight'", "Init"});
    ExpectError([&] { kv->Init(std::vector<std::string>{"fc1_bias"}, {b}); }, {"'fc1_bias'", "twice"});
    ExpectError([&] { kv->Push(std::vector<std::string>{"fc1_bias"}, {o}); }, {"'fc1_bias'", "shape"});
    ExpectError([&] { kv->Pull(std::vector<int>{0}, {o}); }, {"string keys"});  // mixing int keys in
    kv->Pull(std::vector<std::string>{"fc1_weight"}, {o});
    ExpectNear(Get(o), {5, 6}, "fc1_weight after the errors");
  }
  auto kv = KVStore::Create("local");
  kv->Init(std::vector<int>{0}, {NDArray::Zeros(TShape{1}, Context::CPU())});
  ExpectError([&] { kv->Init(std::vector<std::string>{"a"}, {NDArray::Zeros(TShape{1}, Context::CPU())}); },
              {"'a'", "int keys"});
}

TEST(KVStoreLocalTest, PrioritiesAcceptedAndResultsUnchanged) {
  // MXNet gives earlier layers larger priorities (-index); priorities reorder ready work, never results.
  std::mt19937 rng(5);
  const int nkeys = 12, ndev = 3;
  auto kv = KVStore::Create("local");
  std::vector<Vec> ref(nkeys);
  for (int k = 0; k < nkeys; ++k) {
    ref[k] = Random(64, &rng);
    kv->Init({k}, {Make(ref[k], TShape{64}, Context::CPU())});
  }
  kv->SetOptimizer(Config("sgd", {{"learning_rate", "0.5"}}));
  for (int round = 0; round < 3; ++round) {
    for (int k = nkeys - 1; k >= 0; --k) {  // backward order: last layer first
      std::vector<Vec> g;
      std::vector<NDArray> vals;
      for (int d = 0; d < ndev; ++d) {
        g.push_back(Random(64, &rng));
        vals.push_back(Make(g.back(), TShape{64}, Context::CPU(d)));
      }
      kv->Push(std::vector<int>(ndev, k), vals, -k);
      const Vec s = SumOf(g);
      for (std::size_t i = 0; i < s.size(); ++i) ref[k][i] -= 0.5f * s[i];
    }
  }
  std::vector<NDArray> outs;
  std::vector<int> keys;
  for (int k = 0; k < nkeys; ++k) {
    keys.push_back(k);
    outs.push_back(NDArray::Zeros(TShape{64}, Context::CPU(k % ndev)));
  }
  kv->Pull(keys, outs, 1000);
  for (int k = 0; k < nkeys; ++k) ExpectNear(Get(outs[k]), ref[k], "key " + std::to_string(k), 1e-5f);
}

TEST(KVStoreLocalTest, ErrorsNameTheKeyAndLeaveTheStoreUsable) {
  for (const auto& type : kTypes) {
    SCOPED_TRACE(type);
    auto kv = KVStore::Create(type);
    kv->Init({1}, {Make({1, 2, 3}, TShape{3}, Context::CPU())});
    NDArray good0 = Make({1, 1, 1}, TShape{3}, Context::CPU(0));
    NDArray good1 = Make({2, 2, 2}, TShape{3}, Context::CPU(1));
    NDArray out = NDArray::Zeros(TShape{3}, Context::CPU(1));
    Vec expect = {1, 2, 3};
    auto check_usable = [&](const std::string& after) {
      kv->Push({1, 1}, {good0, good1});
      expect = {3, 3, 3};
      kv->Pull({1}, {out});
      ExpectNear(Get(out), expect, "after " + after);
    };

    ExpectError([&] { kv->Pull({7}, {out}); }, {"Pull", "key 7", "not been initialised"});
    check_usable("pull of an uninitialised key");
    ExpectError([&] { kv->Push({1, 7}, {good0, good1}); }, {"Push", "key 7", "not been initialised"});
    check_usable("push of an uninitialised key");
    ExpectError(
        [&] {
          kv->Push({1, 1}, {good0, NDArray::Zeros(TShape{4}, Context::CPU(1))});
        },
        {"Push", "key 1", "shape", "(4,)", "(3,)"});
    check_usable("a push of a wrong shape");
    ExpectError([&] { kv->Push({1}, {NDArray::Zeros(TShape{3}, Context::CPU(), DType::kFloat64)}); },
                {"Push", "key 1", "dtype", "float64", "float32"});
    check_usable("a push of a wrong dtype");
    ExpectError([&] { kv->Pull({1}, {NDArray::Zeros(TShape{2, 2}, Context::CPU())}); }, {"Pull", "key 1", "shape"});
    check_usable("a pull into a wrong shape");
    ExpectError([&] { kv->Init({1}, {good0}); }, {"Init", "key 1", "twice"});
    check_usable("a second Init");
    ExpectError([&] { kv->Init({4, 4}, {good0, good1}); }, {"Init", "key 4", "twice"});
    ExpectError([&] { kv->Pull({4}, {out}); }, {"key 4", "not been initialised"});  // nothing of it was kept
    ExpectError([&] { kv->Push({1, 1}, {good0}); }, {"Push", "2 keys", "1 value"});
    check_usable("a count mismatch in Push");
    ExpectError([&] { kv->Pull({1}, {out, out}); }, {"Pull", "1 keys", "2 outputs"});
    ExpectError([&] { kv->Init({2}, {}); }, {"Init", "1 keys", "0 values"});
    ExpectError([&] { kv->Push({1}, {NDArray()}); }, {"key 1", "none"});
    // PushPull checks its outputs before pushing: a bad output leaves the stored value alone.
    ExpectError([&] { kv->PushPull({1}, {good1}, {NDArray::Zeros(TShape{9}, Context::CPU())}); },
                {"PushPull", "key 1", "shape"});
    kv->Pull({1}, {out});
    ExpectNear(Get(out), {3, 3, 3}, "after a failed PushPull");
    check_usable("a failed PushPull");
  }
}

TEST(KVStoreLocalTest, PushAndPullReturnWithoutWaiting) {
  // The gradient's producer is held open; Push and Pull must return at once (a wait inside them would hang
  // here) and the output must only be written once the producer completes.
  if (Engine::Get()->type() == EngineType::kNaive) GTEST_SKIP() << "the naive engine runs every push at once";
  for (const auto& type : kTypes) {
    auto kv = KVStore::Create(type);
    kv->Init({0}, {NDArray::Zeros(TShape{4}, Context::CPU())});
    NDArray g = NDArray::Zeros(TShape{4}, Context::CPU(1));
    NDArray out = NDArray::Zeros(TShape{4}, Context::CPU(2));
    out.WaitToRead();
    std::promise<CallbackOnComplete> started;
    const TBlob gb = g.data();
    g.engine()->PushAsync(
        [&started, gb](RunContext, CallbackOnComplete done) {
          std::fill_n(gb.dptr_as<float>(), 4, 7.0f);
          started.set_value(done);  // completed by the test thread below
        },
        Context::CPU(1), {}, {g.var()}, FnProperty::kAsync);
    CallbackOnComplete done = started.get_future().get();
    const std::uint64_t before = out.var()->version();
    kv->Push({0}, {g});
    kv->Pull({0}, {out});
    EXPECT_EQ(out.var()->version(), before) << type << ": the pull ran before the gradient was ready";
    done();
    ExpectNear(Get(out), {7, 7, 7, 7}, type);
  }
}

TEST(KVStoreLocalTest, OtherDTypes) {
  for (const auto& type : kTypes) {
    auto kv = KVStore::Create(type);
    kv->Init({0, 1}, {NDArray::Zeros(TShape{3}, Context::CPU(), DType::kInt32),
                      NDArray::Zeros(TShape{2}, Context::CPU(), DType::kFloat64)});
    kv->Push({0, 0, 0, 1, 1}, {NDArray::FromVector<std::int32_t>({1, 2, 3}, TShape{3}, Context::CPU(0)),
                               NDArray::FromVector<std::int32_t>({10, 20, 30}, TShape{3}, Context::CPU(1)),
                               NDArray::FromVector<std::int32_t>({100, 200, 300}, TShape{3}, Context::CPU(2)),
                               NDArray::FromVector<double>({0.5, 1e-12}, TShape{2}, Context::CPU(0)),
                               NDArray::FromVector<double>({0.25, 1.0}, TShape{2}, Context::CPU(3))});
    NDArray i = NDArray::Zeros(TShape{3}, Context::CPU(1), DType::kInt32);
    NDArray f = NDArray::Zeros(TShape{2}, Context::CPU(2), DType::kFloat64);
    kv->Pull({0, 1}, {i, f});
    EXPECT_EQ(i.ToVector<std::int32_t>(), (std::vector<std::int32_t>{111, 222, 333})) << type;
    EXPECT_EQ(f.ToVector<double>(), (std::vector<double>{0.75, 1.0 + 1e-12})) << type;
  }
}

TEST(KVStoreLocalTest, GradientCompressionConfigIsStored) {
  auto dev = KVStore::Create("device");
  EXPECT_TRUE(dev->gradient_compression().empty());
  dev->SetGradientCompression({{"type", "2bit"}, {"threshold", "0.25"}});
  EXPECT_EQ(dev->gradient_compression(), (Kwargs{{"type", "2bit"}, {"threshold", "0.25"}}));
  ExpectError([&] { dev->SetGradientCompression({{"type", "2bit"}, {"threshold", "-1"}}); }, {"threshold", "-1"});
  ExpectError([&] { dev->SetGradientCompression({{"type", "1bit"}}); }, {"1bit", "2bit"});
  EXPECT_EQ(dev->gradient_compression(), (Kwargs{{"type", "2bit"}, {"threshold", "0.25"}}));  // unchanged
  dev->SetGradientCompression({{"type", "none"}});
  EXPECT_TRUE(dev->gradient_compression().empty());
  auto local = KVStore::Create("local");
  ExpectError([&] { local->SetGradientCompression({{"type", "2bit"}}); }, {"local", "device"});
}

// A random workload (pushes from random subsets of devices, pulls, push-pulls, over several keys, with
// and without an updater) compared with a sequential model of the store.
TEST(KVStoreLocalTest, RandomWorkloadMatchesSequentialModel) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::printf("RandomWorkloadMatchesSequentialModel seed %u\n", seed);
  std::mt19937 rng(seed);
  for (const auto& type : kTypes) {
    for (int ndev = 1; ndev <= 4; ++ndev) {
      for (bool with_updater : {false, true}) {
        SCOPED_TRACE(type + " ndev=" + std::to_string(ndev) + (with_updater ? " updater" : ""));
        auto kv = KVStore::Create(type);
        const int nkeys = 4;
        std::vector<TShape> shapes = {TShape{8}, TShape{2, 5}, TShape{1}, TShape{3, 3}};
        std::vector<Vec> model(nkeys);
        for (int k = 0; k < nkeys; ++k) {
          model[k] = Random(static_cast<std::size_t>(shapes[k].Size()), &rng);
          kv->Init({k}, {Make(model[k], shapes[k], Context::CPU(static_cast<int>(rng() % ndev)))});
        }
        // updater: stored = 0.5 * stored - merged
        if (with_updater) {
          kv->SetUpdater([](int, const NDArray& merged, NDArray* stored) {
            *stored *= 0.5;
            *stored -= merged;
          });
        }
        std::vector<std::pair<NDArray, Vec>> checks;  // pulled arrays and what they must hold
        for (int op = 0; op < 40; ++op) {
          const int kind = static_cast<int>(rng() % 3);  // 0 push, 1 pull, 2 pushpull
          std::vector<int> keys;
          std::vector<NDArray> vals, outs;
          std::map<int, std::vector<Vec>> pushed;
          const int nk = 1 + static_cast<int>(rng() % nkeys);
          for (int j = 0; j < nk; ++j) {
            const int k = static_cast<int>(rng() % nkeys);
            if (std::find(keys.begin(), keys.end(), k) != keys.end()) continue;
            const int copies = 1 + static_cast<int>(rng() % ndev);
            for (int c = 0; c < copies; ++c) {
              const Context ctx = Context::CPU(static_cast<int>(rng() % ndev));
              keys.push_back(k);
              Vec v = Random(model[k].size(), &rng);
              pushed[k].push_back(v);
              vals.push_back(Make(v, shapes[k], ctx));
              outs.push_back(NDArray::Zeros(shapes[k], Context::CPU(static_cast<int>(rng() % ndev))));
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
  }
}

}  // namespace
}  // namespace troupe
