// Worker programs of the distributed KVStore's semantic tests, shared by the cluster hosted in
// one test process (kvstore_dist_test.cc) and the cluster of real processes (kvstore_dist_process_test.cc,
// through the dist_node program). Each runs on one worker of a cluster of 2 servers and 2 workers and throws
// std::runtime_error describing the first value that differs from the expected one.
//
// Expected values are computed independently of the store: sums of what each worker pushed (sync), the
// optimizer's rule applied by hand, the 2-bit code with its residual applied by hand.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvstore/dist.h"
#include "kvstore/kvstore.h"
#include "tensor/ndarray.h"

namespace troupe::dist_test {

inline void ExpectValues(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) {
    throw std::runtime_error(what + ": " + std::to_string(got.size()) + " values, expected " + std::to_string(want.size()));
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= 1e-5f * std::max(1.f, std::fabs(want[i])))) {
      throw std::runtime_error(what + ": value " + std::to_string(i) + " is " + std::to_string(got[i]) + ", expected " +
                               std::to_string(want[i]));
    }
  }
}

inline NDArray Filled(const TShape& shape, float v) { return NDArray::Full(shape, v, Context::CPU(0)); }

inline std::vector<float> Ramp(std::int64_t n, float scale) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = scale * static_cast<float>(i % 97 - 40);
  return v;
}

// dist_sync, no optimizer: each round's pushed sum replaces the value; Push+Pull and PushPull; two keys.
inline void SyncRounds(KVStore& kv) {
  const int r = kv.rank();
  const TShape shape{4, 5};
  kv.Init({3, 8}, {Filled(shape, 1.f + static_cast<float>(r)), Filled(TShape{7}, 5.f)});
  NDArray out(shape, Context::CPU(0));
  kv.Pull({3}, {out});
  ExpectValues("after Init (worker 0's value)", out.ToVector<float>(), std::vector<float>(20, 1.f));
  for (int round = 1; round <= 3; ++round) {
    kv.Push({3}, {Filled(shape, static_cast<float>((r + 1) * round))});
    kv.Pull({3}, {out});
    ExpectValues("round " + std::to_string(round) + " push+pull", out.ToVector<float>(),
                 std::vector<float>(20, static_cast<float>(3 * round)));
    NDArray out8(TShape{7}, Context::CPU(0));
    kv.PushPull({8}, {Filled(TShape{7}, static_cast<float>(10 * round + r))}, {out8});
    ExpectValues("round " + std::to_string(round) + " pushpull", out8.ToVector<float>(),
                 std::vector<float>(7, static_cast<float>(20 * round + 1)));
  }
  if (kv.num_workers() != 2) throw std::runtime_error("num_workers() is " + std::to_string(kv.num_workers()));
}

// dist_sync with sgd on the servers: w = w - lr * (g0 + g1) per round.
inline void SyncOptimizer(KVStore& kv) {
  const int r = kv.rank();
  kv.Init({0}, {Filled(TShape{3, 3}, 1.f)});
  kv.SetOptimizer(OptimizerConfig("sgd", {{"learning_rate", "0.5"}}));
  NDArray out(TShape{3, 3}, Context::CPU(0));
  float w = 1.f;
  for (int round = 1; round <= 4; ++round) {
    kv.PushPull({0}, {Filled(TShape{3, 3}, static_cast<float>(r + 1) * round)}, {out});
    w -= 0.5f * 3.f * static_cast<float>(round);
    ExpectValues("sgd round " + std::to_string(round), out.ToVector<float>(), std::vector<float>(9, w));
  }
}

// dist_async with sgd: every push is applied at once; after a barrier the sum of all pushes is in.
inline void AsyncSgd(KVStore& kv) {
  const int r = kv.rank();
  kv.Init({1}, {Filled(TShape{16}, 100.f)});
  kv.SetOptimizer(OptimizerConfig("sgd", {{"learning_rate", "1"}}));
  for (int i = 0; i < 10; ++i) kv.Push({1}, {Filled(TShape{16}, static_cast<float>(r + 1))});
  NDArray out(TShape{16}, Context::CPU(0));
  kv.Pull({1}, {out});
  out.WaitToRead();  // this worker's pushes are in
  kv.Barrier();      // and the other's
  kv.Pull({1}, {out});
  ExpectValues("async after barrier", out.ToVector<float>(), std::vector<float>(16, 100.f - 10.f * 3.f));
}

// Barrier: worker 0 writes a value (dist_async, no optimizer: a push replaces it); after the barrier worker
// 1 must see it.
inline void BarrierOrder(KVStore& kv) {
  kv.Init({5}, {Filled(TShape{2}, 0.f)});
  if (kv.rank() == 0) {
    kv.Push({5}, {Filled(TShape{2}, 7.f)});
    NDArray wait(TShape{2}, Context::CPU(0));
    kv.Pull({5}, {wait});
    wait.WaitToRead();
  }
  kv.Barrier();
  NDArray out(TShape{2}, Context::CPU(0));
  kv.Pull({5}, {out});
  ExpectValues("after the barrier", out.ToVector<float>(), {7.f, 7.f});
  kv.Barrier();
}

// A key over the bound (set to 1000 by the cluster) is split across both servers; checked through the
// values and through the servers' checkpoints (each holds one part).
inline void BigArray(KVStore& kv, const std::string& checkpoint_dir) {
  const int r = kv.rank();
  const std::int64_t n = 5003;
  kv.Init({9, 10}, {NDArray::FromVector(Ramp(n, 1.f), TShape{n}), Filled(TShape{10}, 0.f)});
  NDArray out(TShape{n}, Context::CPU(0));
  for (int round = 1; round <= 2; ++round) {
    kv.PushPull({9}, {NDArray::FromVector(Ramp(n, static_cast<float>(r + round)), TShape{n})}, {out});
    ExpectValues("split key round " + std::to_string(round), out.ToVector<float>(),
                 Ramp(n, static_cast<float>(1 + 2 * round)));
  }
  kv.Barrier();
  if (r == 0) {
    bool refused = false;  // no peer names a path: the servers write to their own directory
    try {
      kv.Checkpoint(checkpoint_dir);
    } catch (const Error&) {
      refused = true;
    }
    if (!refused) throw std::runtime_error("Checkpoint(dir) named a path to the servers and was not refused");
    kv.Checkpoint();
    std::int64_t total = 0;
    for (int s = 0; s < 2; ++s) {
      std::vector<NDArray> arrays;
      std::vector<std::string> names;
      NDArray::Load((std::filesystem::path(checkpoint_dir) / ("server-" + std::to_string(s) + ".params")).string(),
                    &arrays, &names);
      bool has_part = false;
      for (std::size_t i = 0; i < names.size(); ++i) {
        if (names[i].rfind("key:9:", 0) == 0) {
          has_part = true;
          total += arrays[i].Size();
          if (arrays[i].Size() >= n) throw std::runtime_error("server " + std::to_string(s) + " holds all of key 9");
        }
      }
      if (!has_part) throw std::runtime_error("server " + std::to_string(s) + " holds no part of key 9");
    }
    if (total != n) throw std::runtime_error("the parts of key 9 hold " + std::to_string(total) + " elements");
  }
  kv.Barrier();
}

// 2-bit compression: pushes are quantized against a residual kept per worker; the server sums the codes.
inline void Compression(KVStore& kv) {
  const int r = kv.rank();
  kv.SetGradientCompression({{"type", "2bit"}, {"threshold", "0.5"}});
  const std::int64_t n = 37;
  kv.Init({4}, {Filled(TShape{n}, 0.f)});
  // The reference: each worker's residual and code, by hand.
  std::vector<std::vector<float>> residual(2, std::vector<float>(static_cast<std::size_t>(n), 0.f));
  auto grad = [&](int w, int round) {
    std::vector<float> g(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) g[static_cast<std::size_t>(i)] = 0.3f * static_cast<float>((i + w + round) % 7 - 3);
    return g;
  };
  NDArray out(TShape{n}, Context::CPU(0));
  for (int round = 0; round < 3; ++round) {
    std::vector<float> want(static_cast<std::size_t>(n), 0.f);
    for (int w = 0; w < 2; ++w) {
      const std::vector<float> g = grad(w, round);
      for (std::size_t i = 0; i < g.size(); ++i) {
        const float v = g[i] + residual[static_cast<std::size_t>(w)][i];
        const float code = v >= 0.5f ? 0.5f : (v <= -0.5f ? -0.5f : 0.f);
        residual[static_cast<std::size_t>(w)][i] = v - code;
        want[i] += code;
      }
    }
    kv.PushPull({4}, {NDArray::FromVector(grad(r, round), TShape{n})}, {out});
    ExpectValues("compressed round " + std::to_string(round), out.ToVector<float>(), want);
  }
}

// String keys.
inline void StringKeys(KVStore& kv) {
  const int r = kv.rank();
  kv.Init(std::vector<std::string>{"fc1_weight", "fc1_bias"}, {Filled(TShape{2, 2}, 0.f), Filled(TShape{2}, 0.f)});
  NDArray w(TShape{2, 2}, Context::CPU(0)), b(TShape{2}, Context::CPU(0));
  kv.PushPull(std::vector<std::string>{"fc1_weight", "fc1_bias"},
              {Filled(TShape{2, 2}, static_cast<float>(r + 1)), Filled(TShape{2}, static_cast<float>(10 * (r + 1)))}, {w, b});
  ExpectValues("fc1_weight", w.ToVector<float>(), std::vector<float>(4, 3.f));
  ExpectValues("fc1_bias", b.ToVector<float>(), std::vector<float>(2, 30.f));
  bool refused = false;
  try {
    kv.Pull(std::vector<std::string>{"missing"}, {b});
  } catch (const std::exception&) {
    refused = true;
  }
  if (!refused) throw std::runtime_error("a pull of an unknown string key was accepted");
}

// Workers with different numbers of batches: worker 0 does 2 rounds and leaves (its store is destroyed by
// the caller right after), worker 1 goes on alone for 3 more rounds.
inline void UnevenBatches(KVStore& kv) {
  const int r = kv.rank();
  kv.Init({2}, {Filled(TShape{8}, 0.f)});
  NDArray out(TShape{8}, Context::CPU(0));
  const int rounds = r == 0 ? 2 : 5;
  for (int round = 1; round <= rounds; ++round) {
    kv.PushPull({2}, {Filled(TShape{8}, static_cast<float>(r + 1))}, {out});
    const std::vector<float> v = out.ToVector<float>();
    // Rounds 1-2 sum both workers (3); later ones only worker 1's push (2).
    const float want = round <= 2 ? 3.f : 2.f;
    ExpectValues("uneven round " + std::to_string(round) + " on worker " + std::to_string(r), v,
                 std::vector<float>(8, want));
  }
}

// Every scenario above by name (the dist_node program takes the name on its command line).
inline const std::map<std::string, std::function<void(KVStore&, const std::string&)>>& Scenarios() {
  static const std::map<std::string, std::function<void(KVStore&, const std::string&)>> all{
      {"sync_rounds", [](KVStore& kv, const std::string&) { SyncRounds(kv); }},
      {"sync_optimizer", [](KVStore& kv, const std::string&) { SyncOptimizer(kv); }},
      {"async_sgd", [](KVStore& kv, const std::string&) { AsyncSgd(kv); }},
      {"barrier", [](KVStore& kv, const std::string&) { BarrierOrder(kv); }},
      {"big_array", [](KVStore& kv, const std::string& dir) { BigArray(kv, dir); }},
      {"compression", [](KVStore& kv, const std::string&) { Compression(kv); }},
      {"string_keys", [](KVStore& kv, const std::string&) { StringKeys(kv); }},
      {"uneven_batches", [](KVStore& kv, const std::string&) { UnevenBatches(kv); }},
  };
  return all;
}

// The store type a scenario runs with.
inline std::string ScenarioType(const std::string& name) {
  return name == "async_sgd" || name == "barrier" ? "dist_async" : "dist_sync";
}

}  // namespace troupe::dist_test
