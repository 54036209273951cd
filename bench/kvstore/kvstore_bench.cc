// The KVStore benchmark (see kvstore_bench.h for what it measures and why).
//
// Layout: the model (ResNet-50's key sizes, scaled), the anchor (memcpy on T threads), one workload (push +
// pull on k devices vs the anchor, checks), and the report (JSON, table on stdout).
#include "bench/kvstore/kvstore_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "actors/config.h"
#include "base/error.h"
#include "bench/common/bench_util.h"
#include "bench/common/measure.h"
#include "bench/common/training.h"
#include "engine/engine.h"
#include "io/io.h"
#include "kvstore/kvstore.h"
#include "graph/models.h"
#include "op/initializer.h"
#include "tensor/ndarray.h"
#include "tensor/resource.h"
#include "train/train.h"

extern "C" void openblas_set_num_threads(int num_threads);

#ifndef TROUPE_VERSION
#define TROUPE_VERSION "unknown"
#endif

namespace troupe::bench {
namespace {

constexpr double kMinTime = 0.3;
constexpr double kQuickMinTime = 0.02;
constexpr double kTargetRatio = 0.5;
constexpr int kMlpBatches = 16;  // preloaded batches the MLP steps cycle through
constexpr int kMlpQuickBatches = 2;
constexpr double kChance = 0.5;  // training accuracy over the preloaded batches must beat this
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// ---------------------------------------------------------------------------------------------------
// The model: the element counts of ResNet-50 v1's trainable parameters, in layer order, as MXNet 1.9.1's
// Gluon model zoo builds it (mx.gluon.model_zoo.vision.resnet50_v1(), 224x224 input; every parameter whose
// grad_req is not 'null': convolution weights and biases, BatchNorm gamma and beta, the final Dense layer;
// 193 arrays, 25,575,912 floats = 97.6 MiB). The benchmark scales every size by the same factor to reach
// the requested model size, keeping the mix of a few large and many small keys that makes a real model's
// synchronisation cost more than its bytes.
constexpr std::int64_t kResNet50Sizes[] = {
    9408,    64,     64,      4096,    64,      64,      64,      36864,   64,     64,      16384,   256,     256,
    256,     16384,  256,     256,     16384,   64,      64,      64,      36864,  64,      64,      16384,   256,
    256,     256,    16384,   64,      64,      64,      36864,   64,      64,     16384,   256,     256,     256,
    32768,   128,    128,     128,     147456,  128,     128,     65536,   512,    512,     512,     131072,  512,
    512,     65536,  128,     128,     128,     147456,  128,     128,     65536,  512,     512,     512,     65536,
    128,     128,    128,     147456,  128,     128,     65536,   512,     512,    512,     65536,   128,     128,
    128,     147456, 128,     128,     65536,   512,     512,     512,     131072, 256,     256,     256,     589824,
    256,     256,    262144,  1024,    1024,    1024,    524288,  1024,    1024,   262144,  256,     256,     256,
    589824,  256,    256,     262144,  1024,    1024,    1024,    262144,  256,    256,     256,     589824,  256,
    256,     262144, 1024,    1024,    1024,    262144,  256,     256,     256,    589824,  256,     256,     262144,
    1024,    1024,   1024,    262144,  256,     256,     256,     589824,  256,    256,     262144,  1024,    1024,
    1024,    262144, 256,     256,     256,     589824,  256,     256,     262144, 1024,    1024,    1024,    524288,
    512,     512,    512,     2359296, 512,     512,     1048576, 2048,    2048,   2048,    2097152, 2048,    2048,
    1048576, 512,    512,     512,     2359296, 512,     512,     1048576, 2048,   2048,    2048,    1048576, 512,
    512,     512,    2359296, 512,     512,     1048576, 2048,    2048,    2048,   2048000, 1000};
constexpr std::int64_t kResNet50Total = 25575912;

// The key sizes (float32 elements) scaled so that they sum to exactly `mib` MiB (rounded to whole floats):
// each size times the factor, rounded, at least 1; the largest key absorbs the rounding.
std::vector<std::int64_t> ScaledKeySizes(double mib) {
  const auto total = static_cast<std::int64_t>(std::llround(mib * kMiB / 4.0));
  const double factor = static_cast<double>(total) / static_cast<double>(kResNet50Total);
  std::vector<std::int64_t> sizes;
  std::int64_t sum = 0;
  for (std::int64_t s : kResNet50Sizes) {
    sizes.push_back(std::max<std::int64_t>(1, std::llround(static_cast<double>(s) * factor)));
    sum += sizes.back();
  }
  auto largest = std::max_element(sizes.begin(), sizes.end());
  *largest += total - sum;
  if (*largest < 1) throw Error("troupe bench kvstore-local: --model-mib " + Fmt("%g", mib) + " is too small");
  return sizes;
}

// The value device d pushes for element j of key `key`: an integer in 1..7 times (d + 1), so that any sum
// over up to thousands of devices is exact in float32.
float PushedValue(int key, std::int64_t j, int d) { return static_cast<float>((d + 1) * ((j + key) % 7 + 1)); }
// The sum over k devices, computed directly (not by the store): sum_{d<k} (d + 1) * v = v * k (k + 1) / 2.
float ExpectedSum(int key, std::int64_t j, int k) {
  return static_cast<float>(static_cast<std::int64_t>(k) * (k + 1) / 2 * ((j + key) % 7 + 1));
}

// ---------------------------------------------------------------------------------------------------
// The anchor: std::memcpy of `bytes` between two touched buffers (as bench/ndarray's anchor), in equal
// parts over `threads` threads. The threads are started per call: tens of microseconds against the
// milliseconds that copying the model's bytes takes.
class ParallelCopy {
 public:
  ParallelCopy(std::size_t bytes, int threads) : bytes_(bytes), threads_(threads), src_(bytes), dst_(bytes, 0) {
    for (std::size_t i = 0; i < bytes; ++i) src_[i] = static_cast<char>(i * 131 + 7);
  }
  void Copy() {
    const std::size_t part = (bytes_ + threads_ - 1) / threads_;
    const auto copy_part = [this, part](int t) {
      const std::size_t b = std::min(bytes_, part * static_cast<std::size_t>(t));
      const std::size_t e = std::min(bytes_, b + part);
      std::memcpy(dst_.data() + b, src_.data() + b, e - b);
    };
    std::vector<std::thread> team;
    for (int t = 1; t < threads_; ++t) team.emplace_back(copy_part, t);
    copy_part(0);
    for (std::thread& t : team) t.join();
    KeepAlive(dst_.data());
  }
  bool Matches() const { return std::memcmp(dst_.data(), src_.data(), bytes_) == 0; }

 private:
  std::size_t bytes_;
  int threads_;
  std::vector<char> src_, dst_;
};

// ---------------------------------------------------------------------------------------------------
// One workload: k devices.

struct DevicesReport {
  int devices = 0;
  int anchor_threads = 0;
  std::int64_t model_bytes = 0;
  std::int64_t bytes_moved = 0;  // per call: model bytes x devices x 2
  WorkloadReport r;

  double GiBps(double s) const { return s > 0 ? static_cast<double>(bytes_moved) / kGiB / s : 0.0; }
  // MXNet's tools/bandwidth/measure.py: size * 2 * (k - 1) / k / seconds, in GB (1e9) per device.
  double MXNetGBps(double s) const {
    return s > 0 ? static_cast<double>(model_bytes) * 2.0 * (devices - 1) / devices / s / 1e9 : 0.0;
  }
};

void CheckPulled(DevicesReport* dr, const std::vector<std::int64_t>& sizes,
                 const std::vector<std::vector<NDArray>>& weights) {
  const int k = dr->devices;
  const int nkeys = static_cast<int>(sizes.size());
  std::int64_t total = 0;
  for (int i = 0; i < nkeys; ++i) {
    const bool full = i == 0 || i == nkeys / 2 || i == nkeys - 1;
    for (int d = 0; d < k; ++d) {
      const NDArray& w = weights[i][d];
      if (w.Size() != sizes[i]) {
        dr->r.errors.push_back("key " + std::to_string(i) + " on cpu(" + std::to_string(d) + "): pulled " +
                               std::to_string(w.Size()) + " elements, expected " + std::to_string(sizes[i]));
        continue;
      }
      if (d == 0) total += sizes[i];
      const std::vector<float> v = w.ToVector<float>();
      std::int64_t wrong = 0, first = -1;
      const auto check = [&](std::int64_t j) {
        if (v[static_cast<std::size_t>(j)] != ExpectedSum(i, j, k)) {
          if (first < 0) first = j;
          ++wrong;
        }
      };
      if (full) {
        for (std::int64_t j = 0; j < sizes[i]; ++j) check(j);
      } else {
        check(0);
        check(sizes[i] - 1);
      }
      if (wrong > 0 && dr->r.errors.size() < 8) {
        const auto f = static_cast<std::size_t>(first);
        dr->r.errors.push_back("key " + std::to_string(i) + " on cpu(" + std::to_string(d) +
                               "): " + std::to_string(wrong) +
                               " pulled values differ from the sum of the pushes (first at " + std::to_string(first) +
                               ": " + Fmt("%.9g", v[f]) + ", expected " + Fmt("%.9g", ExpectedSum(i, first, k)) + ")");
      }
    }
  }
  if (total * 4 != dr->model_bytes) {
    dr->r.errors.push_back("the pulled model holds " + std::to_string(total * 4) + " bytes, expected " +
                           std::to_string(dr->model_bytes));
  }
}

void RunDevices(DevicesReport* dr, const std::vector<std::int64_t>& sizes, int repeat, double min_time) {
  const int k = dr->devices;
  const int nkeys = static_cast<int>(sizes.size());
  WorkloadReport& r = dr->r;
  r.selected = true;
  std::int64_t elements = 0;
  for (std::int64_t s : sizes) elements += s;
  dr->model_bytes = elements * 4;
  dr->bytes_moved = dr->model_bytes * k * 2;
  r.items = dr->bytes_moved;

  // The store on cpu(0) ("local"), zeros; gradients and weights on every device.
  std::unique_ptr<KVStore> kv = KVStore::Create("local");
  std::vector<std::vector<NDArray>> grads(nkeys), weights(nkeys);
  for (int i = 0; i < nkeys; ++i) {
    const TShape shape({sizes[i]});
    kv->Init({i}, {NDArray::Full(shape, 0.0, Context::CPU(0))});
    std::vector<float> host(static_cast<std::size_t>(sizes[i]));
    for (int d = 0; d < k; ++d) {
      for (std::int64_t j = 0; j < sizes[i]; ++j) host[static_cast<std::size_t>(j)] = PushedValue(i, j, d);
      grads[i].push_back(NDArray::FromVector(host, shape, Context::CPU(d)));
      weights[i].push_back(NDArray::Full(shape, 0.0, Context::CPU(d)));
    }
  }
  Drain();
  auto copy = std::make_shared<ParallelCopy>(static_cast<std::size_t>(dr->bytes_moved), dr->anchor_threads);

  r.figure = MakeSeries("push+pull", "for every key (priority -index): Push of its " + std::to_string(k) +
                                         " gradients, Pull into " + std::to_string(k) +
                                         " weights; then WaitToRead on every weight");
  r.anchor = MakeSeries("memcpy", "std::memcpy of the bytes moved between two touched buffers, in equal parts on " +
                                      std::to_string(dr->anchor_threads) + " threads");
  const std::vector<int> per_device_keys(static_cast<std::size_t>(k), 0);
  const Body push_pull = [&](std::int64_t calls, Clock::time_point deadline) {
    return TimedLoop(calls, deadline, [&] {
      for (int i = 0; i < nkeys; ++i) {
        const std::vector<int> keys(static_cast<std::size_t>(k), i);
        kv->Push(keys, grads[i], -i);
        kv->Pull(keys, weights[i], -i);
      }
      for (const std::vector<NDArray>& ws : weights) {
        for (const NDArray& w : ws) w.WaitToRead();
      }
    });
  };
  const Body anchor = [&](std::int64_t calls, Clock::time_point deadline) {
    return TimedLoop(calls, deadline, [&] { copy->Copy(); });
  };
  MeasureInterleaved({{&r.figure, push_pull}, {&r.anchor, anchor}}, repeat, min_time);
  Drain();
  if (r.figure.measured()) CheckPulled(dr, sizes, weights);
  if (r.anchor.measured() && !copy->Matches()) r.errors.push_back("memcpy: the destination differs from the source");
  r.details = {{"devices", k},
               {"contexts", "cpu(0) .. cpu(" + std::to_string(k - 1) + ")"},
               {"kvstore", "local"},
               {"keys", nkeys},
               {"model_bytes", dr->model_bytes},
               {"bytes_moved_per_call", dr->bytes_moved},
               {"anchor_threads", dr->anchor_threads}};
}

// ---------------------------------------------------------------------------------------------------
// mlp: a Module on cpu(0), cpu(1) against one on cpu(0).

std::shared_ptr<Module> MakeMlpModule(const std::vector<Context>& contexts, int batch) {
  ResourceManager::Get()->SeedRandom(1);
  auto module = std::make_shared<Module>(models::MLP(), std::vector<std::string>{"data"},
                                         std::vector<std::string>{"softmax_label"}, contexts);
  module->Bind({TShape({batch, 1, 28, 28})}, {TShape({batch})});
  module->InitParams(*Initializer::Create("xavier"));
  module->InitOptimizer(
      {"sgd", {{"learning_rate", "0.05"}, {"momentum", "0.9"}, {"rescale_grad", Fmt("%.9g", 1.0 / batch)}}});
  return module;
}

void RunMlp(WorkloadReport* r, const KVStoreBenchOptions& o, int workers, int repeat, double min_time) {
  const int batch = o.batch_size;
  r->selected = true;
  r->items = batch;
  const std::vector<DataBatch> batches =
      LoadMnistBatches(o.mnist_dir, batch, o.quick ? kMlpQuickBatches : kMlpBatches, "troupe bench kvstore-local");
  auto two = MakeMlpModule({Context::CPU(0), Context::CPU(1)}, batch);
  auto one = MakeMlpModule({Context::CPU(0)}, batch);
  r->details = {{"model", "mlp (graph/models.h: 128, 64 hidden)"},
                {"batch_size", batch},
                {"data", "Fashion-MNIST t10k, " + std::to_string(batches.size()) + " preloaded batches"},
                {"optimizer", "sgd, learning_rate 0.05, momentum 0.9, rescale_grad 1/batch"},
                {"kvstore", "local (the 2-device module's; the 1-device module updates in place)"}};
  r->figure = MakeSeries("mlp on cpu(0), cpu(1)", "Module step (Forward(true), Backward, Update), then wait");
  r->anchor = MakeSeries("mlp on cpu(0)", "the same step of a Module on one device");
  // OpenBLAS's thread count is process-wide and troupe lowers it as CPU devices start (DefaultBlasThreads):
  // each module runs with the count it would have in a process of its own, unless TROUPE_BLAS_THREADS fixes
  // it. The pushes of this run wait for the previous run (WaitForAll), so no product of the other module is
  // running when the count changes.
  int fixed_blas = 0;
  const bool blas_fixed = EnvInt("TROUPE_BLAS_THREADS", 0, 1024, &fixed_blas) && fixed_blas > 0;
  r->details["blas_threads_2_devices"] = blas_fixed ? fixed_blas : DefaultBlasThreads(2, workers);
  r->details["blas_threads_1_device"] = blas_fixed ? fixed_blas : DefaultBlasThreads(1, workers);
  const auto body = [&batches, blas_fixed, workers](std::shared_ptr<Module> module) {
    auto next = std::make_shared<std::size_t>(0);
    const int devices = static_cast<int>(module->contexts().size());
    return Body([&batches, module, next, blas_fixed, workers, devices](std::int64_t calls, Clock::time_point deadline) {
      if (!blas_fixed) openblas_set_num_threads(DefaultBlasThreads(devices, workers));
      return TimedLoop(
          calls, deadline,
          [&] {
            const DataBatch& b = batches[*next];
            *next = (*next + 1) % batches.size();
            module->Forward(b, true);
            module->Backward();
            module->Update();
          },
          [] { Engine::Get()->WaitForAll(); });
    });
  };
  MeasureInterleaved({{&r->figure, body(two)}, {&r->anchor, body(one)}}, repeat, min_time);
  std::vector<std::string> problems;
  const double acc_two = BatchesAccuracy(two.get(), batches, &problems);
  const double acc_one = BatchesAccuracy(one.get(), batches, &problems);
  r->details["train_accuracy_after_2_devices"] = acc_two;
  r->details["train_accuracy_after_1_device"] = acc_one;
  for (const std::string& p : problems) r->errors.push_back(p);
  if (!o.quick) {
    for (const auto& [acc, what] : {std::pair{acc_two, "2 devices"}, std::pair{acc_one, "1 device"}}) {
      if (acc <= kChance) {
        r->errors.push_back(std::string(what) + ": training accuracy over the preloaded batches is " +
                            Fmt("%.3f", acc) + " after the timed steps; training does not work");
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// The run and its report

class KVStoreBench {
 public:
  explicit KVStoreBench(KVStoreBenchOptions o) : opt_(std::move(o)), t0_(Clock::now()) {}
  int Run();

 private:
  void Log(const std::string& line) const {
    std::fprintf(stderr, "[bench kvstore-local %6.1f s] %s\n", Seconds(t0_, Clock::now()), line.c_str());
  }
  int AnchorThreads(int devices) const {
    return opt_.anchor_threads > 0 ? opt_.anchor_threads : cpu_workers_ * devices;
  }
  Json BuildJson() const;
  void PrintTable() const;

  KVStoreBenchOptions opt_;
  Clock::time_point t0_;
  std::string started_;
  std::string runtime_config_;
  int cpu_workers_ = 1;
  std::vector<std::int64_t> sizes_;
  std::map<int, DevicesReport> reports_;
  WorkloadReport mlp_;
  std::vector<std::string> failures_;

  bool Selected(const std::string& w) const {
    return std::find(opt_.workloads.begin(), opt_.workloads.end(), w) != opt_.workloads.end();
  }
};

Json KVStoreBench::BuildJson() const {
  Json root;
  root["benchmark"] = "kvstore-local";
  root["troupe_version"] = TROUPE_VERSION;
  root["started"] = started_;
  root["finished"] = UtcNow();
  root["machine"] = {{"cores", AvailableCores()}, {"cpu", CpuModel()}};
  root["config"] = {{"quick", opt_.quick},
                    {"repeat", opt_.repeat},
                    {"min_time_s", opt_.quick ? kQuickMinTime : kMinTime},
                    {"devices", opt_.devices},
                    {"model_mib", opt_.model_mib},
                    {"anchor_threads_option", opt_.anchor_threads},
                    {"workloads", opt_.workloads},
                    {"batch_size", opt_.batch_size},
                    {"mnist_dir", opt_.mnist_dir},
                    {"runtime", runtime_config_}};
  std::int64_t elements = 0;
  for (std::int64_t s : sizes_) elements += s;
  root["model"] = {{"source",
                    "trainable parameters of ResNet-50 v1 (MXNet 1.9.1 Gluon model zoo, resnet50_v1: 193 arrays, "
                    "25,575,912 floats), every size scaled by the same factor"},
                   {"keys", sizes_.size()},
                   {"elements", elements},
                   {"bytes", elements * 4},
                   {"dtype", "float32"},
                   {"largest_key_elements", sizes_.empty() ? 0 : *std::max_element(sizes_.begin(), sizes_.end())},
                   {"smallest_key_elements", sizes_.empty() ? 0 : *std::min_element(sizes_.begin(), sizes_.end())}};
  root["bytes_moved"] =
      "per call: model bytes x devices x 2 (every device pushes its whole gradient and pulls the whole model); "
      "GiB/s = bytes moved / 2^30 / seconds per call. mxnet_gb_per_s_per_device is MXNet's "
      "tools/bandwidth/measure.py figure: model bytes x 2 x (devices - 1) / devices / seconds / 1e9.";
  Json results = Json::array();
  Json targets = Json::array();
  for (int k : opt_.devices) {
    const auto found = reports_.find(k);
    if (found == reports_.end()) continue;
    const DevicesReport& dr = found->second;
    const WorkloadReport& r = dr.r;
    Json j;
    j["config"] = r.details;
    j["push_pull"] = SeriesJson(r.figure, "gib_per_s", [&dr](double s) { return dr.GiBps(s); });
    j["memcpy_bound"] = SeriesJson(r.anchor, "gib_per_s", [&dr](double s) { return dr.GiBps(s); });
    j["mxnet_gb_per_s_per_device"] = r.figure.measured() ? Json(dr.MXNetGBps(r.figure.Median())) : Json(nullptr);
    j["ratio"] = OptNum(r.Ratio());
    j["ratio_best"] = OptNum(r.RatioBest());
    j["errors"] = r.errors;
    j["ok"] = r.ok();
    results.push_back(j);
    const std::optional<double> ratio = r.Ratio();
    targets.push_back({{"name", std::to_string(k) + " devices: push+pull GiB/s / memcpy GiB/s >= 0.5"},
                       {"ratio", OptNum(ratio)},
                       {"target", kTargetRatio},
                       {"met", ratio.has_value() && *ratio >= kTargetRatio}});
  }
  root["push_pull"] = results;
  if (mlp_.selected) {
    const double items = static_cast<double>(mlp_.items);
    const auto per_s = [items](double t) { return items / t; };
    Json j;
    j["config"] = mlp_.details;
    j["two_devices"] = SeriesJson(mlp_.figure, "images_per_s", per_s);
    j["one_device"] = SeriesJson(mlp_.anchor, "images_per_s", per_s);
    j["speedup"] = OptNum(mlp_.Ratio());
    j["speedup_best"] = OptNum(mlp_.RatioBest());
    j["speedup_meaning"] =
        "images/s on cpu(0), cpu(1) / images/s on cpu(0) (medians; = 1-device step time / 2-device step time). "
        "Null when a check failed.";
    j["errors"] = mlp_.errors;
    j["ok"] = mlp_.ok();
    root["mlp_2_devices_vs_1"] = j;
  }
  Json notes = Json::array();
  notes.push_back(
      "A call is one round of MXNet's tools/bandwidth/measure.py: for every key in order (priority -index) "
      "KVStore::Push of its gradients from cpu(0) .. cpu(k-1), then Pull into one weight array per device; the "
      "call ends with WaitToRead on every weight. The store is \"local\" (stored values and reduction on "
      "cpu(0)), no updater: the pulled value is the sum of the pushes.");
  notes.push_back(
      "memcpy_bound: std::memcpy of the same bytes moved per call between two touched buffers (as bench/ndarray's "
      "memcpy anchor), in equal parts on anchor_threads threads = the engine's worker threads for the devices "
      "(RuntimeConfig::cpu_workers per CPU device x devices), started per call. ratio = memcpy seconds / "
      "push+pull seconds (medians) = push+pull GiB/s / memcpy GiB/s; null when a check failed.");
  notes.push_back(
      "Checks: every pulled array has its key's size, the model's bytes add up; the first, middle and last "
      "key's pulled values equal the sum of the pushes at every element, every other key's at its first and "
      "last element (integer-valued floats: the sums are exact).");
  notes.push_back(
      "mlp_2_devices_vs_1: one training step (Forward(true), Backward, Update; SGD with momentum) of the MLP "
      "through a Module on cpu(0), cpu(1) (the batch split in two, the parameters synchronised through a "
      "\"local\" KVStore that runs the optimizer) and on cpu(0) alone, alternated; a timed run ends by waiting "
      "for the engine. Each CPU device has its own cpu_workers worker threads (runtime config above).");
  if (opt_.quick) notes.push_back("quick: a small model, two batches, one run; the figures say nothing about speed.");
  root["notes"] = notes;
  root["targets"] = targets;
  root["failures"] = failures_;
  root["ok"] = failures_.empty();
  return root;
}

void KVStoreBench::PrintTable() const {
  const auto cell = [](std::optional<double> v, const char* format) { return v ? Fmt(format, *v) : std::string("-"); };
  std::printf(
      "troupe bench kvstore-local: %zu keys, %s MiB model, %d timed runs per figure (medians), machine: %d "
      "cores\n",
      sizes_.size(), Fmt("%g", opt_.model_mib).c_str(), opt_.repeat, AvailableCores());
  std::printf("\n  %-8s %8s %14s %14s %12s %9s  %s\n", "devices", "threads", "push+pull GiB/s", "memcpy GiB/s",
              "MXNet GB/s", "ratio", "check");
  for (int k : opt_.devices) {
    const auto found = reports_.find(k);
    if (found == reports_.end()) continue;
    const DevicesReport& dr = found->second;
    const WorkloadReport& r = dr.r;
    const auto gib = [&dr](const Series& s) {
      return s.measured() ? std::optional<double>(dr.GiBps(s.Median())) : std::nullopt;
    };
    const std::optional<double> mx =
        r.figure.measured() ? std::optional<double>(dr.MXNetGBps(r.figure.Median())) : std::nullopt;
    std::printf("  %-8d %8d %15s %14s %12s %9s  %s\n", k, dr.anchor_threads, cell(gib(r.figure), "%.2f").c_str(),
                cell(gib(r.anchor), "%.2f").c_str(), cell(mx, "%.2f").c_str(), cell(r.Ratio(), "%.3f").c_str(),
                r.ok() ? "ok" : "FAILED");
  }
  if (mlp_.selected) {
    std::printf("\nmlp, batch %d  [images/s]\n  %12s %12s %9s  %s\n", opt_.batch_size, "cpu(0),cpu(1)", "cpu(0)",
                "speedup", "check");
    std::printf("  %12s %12s %9s  %s\n", cell(mlp_.ItemsPerSecond(mlp_.figure), "%.0f").c_str(),
                cell(mlp_.ItemsPerSecond(mlp_.anchor), "%.0f").c_str(), cell(mlp_.Ratio(), "%.3f").c_str(),
                mlp_.ok() ? "ok" : "FAILED");
  }
  std::printf("\nin-run checks: %s\n", failures_.empty() ? "all passed" : "FAILED (see stderr and the JSON)");
  std::fflush(stdout);
}

int KVStoreBench::Run() {
  auto bad = [](const std::string& what) {
    std::fprintf(stderr, "troupe bench kvstore-local: %s\n", what.c_str());
    return 2;
  };
  if (opt_.json_path.empty()) return bad("--json FILE is required");
  if (opt_.repeat < 0 || opt_.repeat > 1000) return bad("--repeat must be in 1..1000");
  if (opt_.devices.empty()) return bad("--devices needs one or more device counts");
  if (opt_.workloads.empty()) return bad("--workloads needs one or more of push_pull, mlp");
  for (const std::string& w : opt_.workloads) {
    const auto& known = KVStoreBenchWorkloads();
    if (std::find(known.begin(), known.end(), w) == known.end()) {
      return bad("unknown workload '" + w + "' (known: push_pull, mlp)");
    }
  }
  if (opt_.batch_size < 2 || opt_.batch_size > 4096) return bad("--batch-size must be in 2..4096");
  for (int k : opt_.devices) {
    if (k < 1 || k > 64) return bad("--devices: " + std::to_string(k) + " is not in 1..64");
  }
  if (opt_.anchor_threads < 0 || opt_.anchor_threads > 1024) return bad("--anchor-threads must be in 1..1024");
  if (opt_.model_mib < 0 || opt_.model_mib > 4096) return bad("--model-mib must be in (0, 4096]");
  if (opt_.model_mib == 0) opt_.model_mib = opt_.quick ? kKVStoreQuickModelMiB : kKVStoreDefaultModelMiB;
  if (opt_.repeat == 0) opt_.repeat = opt_.quick ? 1 : kKVStoreDefaultRepeat;
  {
    std::ofstream probe(opt_.json_path, std::ios::trunc);
    if (!probe) return bad("can not write " + opt_.json_path);
  }
  started_ = UtcNow();
  try {
    sizes_ = ScaledKeySizes(opt_.model_mib);
    // The engine's configuration (Engine::Get() builds it from the same environment): its workers per CPU
    // device set the anchor's thread count. Start the engine before anything is timed.
    const RuntimeConfig runtime = EngineConfig::FromEnv().runtime.Resolved();
    runtime_config_ = runtime.ToString();
    cpu_workers_ = runtime.cpu_workers;
    NDArray probe = NDArray::Full(TShape({4}), 1.0, Context::CPU(0));
    probe.WaitToRead();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe bench kvstore-local: %s\n", e.what());
    return 1;
  }
  const double min_time = opt_.quick ? kQuickMinTime : kMinTime;
  Log("warm-up + " + std::to_string(opt_.repeat) + " timed runs per figure; " + std::to_string(sizes_.size()) +
      " keys, " + Fmt("%g", opt_.model_mib) + " MiB; " + std::to_string(AvailableCores()) + " cores (" + CpuModel() +
      "), engine " + runtime_config_);
  for (int k : Selected("push_pull") ? opt_.devices : std::vector<int>{}) {
    DevicesReport& dr = reports_[k];
    dr.devices = k;
    dr.anchor_threads = AnchorThreads(k);
    try {
      RunDevices(&dr, sizes_, opt_.repeat, min_time);
    } catch (const std::exception& e) {
      dr.r.errors.push_back(std::string("threw: ") + e.what());
      Log(std::to_string(k) + " devices: FAILED: " + e.what());
      Drain();
    }
    const WorkloadReport& r = dr.r;
    const auto f = [&dr](const Series& s) {
      return s.measured() ? Fmt("%.2f", dr.GiBps(s.Median())) : std::string("-");
    };
    const std::optional<double> ratio = r.Ratio();
    Log(std::to_string(k) + " devices: push+pull " + f(r.figure) + " GiB/s; memcpy on " +
        std::to_string(dr.anchor_threads) + " threads " + f(r.anchor) + " GiB/s (ratio " +
        (ratio ? Fmt("%.3f", *ratio) : std::string("-")) + ")" + (r.ok() ? "" : "  FAILED"));
    r.CollectFailures(std::to_string(k) + " devices", &failures_);
  }
  if (Selected("mlp")) {
    try {
      RunMlp(&mlp_, opt_, cpu_workers_, opt_.repeat, min_time);
    } catch (const std::exception& e) {
      mlp_.selected = true;
      mlp_.errors.push_back(std::string("threw: ") + e.what());
      Log(std::string("mlp: FAILED: ") + e.what());
      Drain();
    }
    const auto f = [this](const Series& s) {
      return s.measured() ? Fmt("%.0f", static_cast<double>(mlp_.items) / s.Median()) : std::string("-");
    };
    const std::optional<double> speedup = mlp_.Ratio();
    Log("mlp: " + f(mlp_.figure) + " images/s on 2 devices, " + f(mlp_.anchor) + " on 1 (speedup " +
        (speedup ? Fmt("%.3f", *speedup) : std::string("-")) + ")" + (mlp_.ok() ? "" : "  FAILED"));
    mlp_.CollectFailures("mlp", &failures_);
  }
  Drain();
  for (const std::string& f : failures_) Log("check failed: " + f);
  const bool written = WriteJsonFile(opt_.json_path, BuildJson(), "troupe bench kvstore-local");
  PrintTable();
  Log("wrote " + opt_.json_path);
  return (failures_.empty() && written) ? 0 : 1;
}

}  // namespace

const std::vector<std::string>& KVStoreBenchWorkloads() {
  static const std::vector<std::string> kWorkloads = {"push_pull", "mlp"};
  return kWorkloads;
}

int RunKVStoreBench(const KVStoreBenchOptions& options) {
  KVStoreBench bench(options);
  return bench.Run();
}

// --- `troupe bench kvstore-local`: its declaration (bench/common/registry.h) ---------------------------------
namespace {

constexpr const char* kKVStoreLocalBenchmarkDescription =
    "Measure parameter synchronisation across the CPU devices of one machine through a \"local\" KVStore "
    "against the memory bandwidth it cannot beat, each figure alternated with its anchor in the same run. (a) "
    "push_pull: a call is one round of MXNet's tools/bandwidth/measure.py: for every key in order (priority "
    "-index), Push of one gradient per device from cpu(0) .. cpu(k-1), then Pull into one weight array per "
    "device, and the call ends by waiting for every weight. The model is the trainable parameters of ResNet-50 "
    "v1 (MXNet's Gluon model zoo: 193 arrays) with every size scaled to --model-mib MiB (64 by default). Bytes "
    "moved per call = model bytes x devices x 2 (each device pushes and pulls the whole model), in GiB/s; "
    "MXNet's own figure (model bytes x 2 x (k-1)/k per second per device) is in the JSON too. The anchor is "
    "std::memcpy of the same bytes between two touched buffers, in equal parts on as many threads as the "
    "engine has workers for the devices (cpu_workers x devices). Every figure runs once untimed (warm-up, "
    "which also sizes a run) and then --repeat times; the median and the best run are reported. The ratio is "
    "memcpy time / push+pull time; the target is >= 0.5 (reported, not enforced). Checks: every pulled array "
    "has its key's size; the pulled values equal the sum of the pushed ones (every element of the first, "
    "middle and last key, the first and last element of the others); the memcpy destination equals its source. "
    "(b) mlp: training images/s of the MLP through a Module on cpu(0), cpu(1) (data-parallel, parameters "
    "synchronised through a \"local\" KVStore) against the same Module on cpu(0), alternated; a call is one "
    "step (Forward(true), Backward, Update with SGD) on a Fashion-MNIST batch preloaded from the t10k files in "
    "--mnist-dir, a timed run ends by waiting for the engine; the ratio is the speedup; checks: the outputs "
    "are probabilities and, except with --quick, both modules' training accuracy over the preloaded batches is "
    "above 0.5. Progress goes to stderr, a table to stdout. Exit status: 0 when every check passed, 1 when one "
    "failed (the JSON says which, with \"ok\": false), 2 on bad usage.";

constexpr const char* kKVStoreLocalBenchmarkExamples =
    "Examples:\n"
    "  troupe bench kvstore-local --json kvstore.json\n"
    "      64 MiB model on 2 and 4 devices (about 30-60 s on 2 cores)\n"
    "  troupe bench kvstore-local --quick --json /tmp/smoke.json\n"
    "      a 2 MiB model, one run: checks that the harness and the in-run checks pass\n"
    "  troupe bench kvstore-local --devices 2,4,8 --model-mib 128 --json big.json\n"
    "      more devices and a larger model\n"
    "  TROUPE_CPU_WORKERS=2 troupe bench kvstore-local --json w2.json\n"
    "      TROUPE_* settings apply to the engine; the anchor follows its worker count (the config is in the JSON)\n"
    "  troupe bench kvstore-local --workloads mlp --batch-size 256 --json mlp.json\n"
    "      only the MLP on 2 devices against 1, at batch 256";

void DeclareKVStoreLocalBenchmarkOptions(KVStoreBenchOptions* o, BenchOptionList* options) {
  options->Add("--json", &o->json_path, "Write the results to FILE (pretty-printed JSON)").Required().TypeName("FILE");
  options->Add("--quick", &o->quick,
               "A " + FormatNumber(kKVStoreQuickModelMiB) + " MiB model, one repetition: a smoke run for CTest");
  options
      ->Add("--repeat", &o->repeat,
            "Timed runs per figure; the median and the best are reported (default " +
                std::to_string(kKVStoreDefaultRepeat) + ", 1 with --quick)")
      .Range(1, 1000)
      .TypeName("R");
  options->Add("--devices", &o->devices, "Device counts to measure (contexts cpu(0) .. cpu(k-1))")
      .Delimiter(',')
      .Range(1, 64)
      .TypeName("LIST")
      .ShowDefault();
  options
      ->Add("--model-mib", &o->model_mib,
            "Model size in MiB, the ResNet-50 key sizes scaled to it (default " +
                FormatNumber(kKVStoreDefaultModelMiB) + ", " + FormatNumber(kKVStoreQuickModelMiB) + " with --quick)")
      .Range(0.001, 4096.0)
      .TypeName("MIB");
  options
      ->Add("--anchor-threads", &o->anchor_threads,
            "Threads of the memcpy anchor (default: the engine's workers, cpu_workers x devices)")
      .Range(1, 1024)
      .TypeName("T");
  options->Add("--workloads", &o->workloads, "Which workloads: any of push_pull, mlp")
      .Delimiter(',')
      .Choices(KVStoreBenchWorkloads())
      .TypeName("LIST")
      .ShowDefault();
  options->Add("--batch-size", &o->batch_size, "mlp: images per training step (split over the devices)")
      .Range(2, 4096)
      .TypeName("B")
      .ShowDefault();
  options->Add("--mnist-dir", &o->mnist_dir, "mlp: folder of the Fashion-MNIST t10k-* .gz files")
      .TypeName("DIR")
      .ShowDefault();
}

}  // namespace

Benchmark KVStoreLocalBenchmark() {
  return MakeBenchmark<KVStoreBenchOptions>(
      "kvstore-local", "KVStore push+pull over CPU devices against memcpy; MLP on 2 devices against 1",
      std::string(kKVStoreLocalBenchmarkDescription) + "\n\n" + kKVStoreLocalBenchmarkExamples + "\n",
      &DeclareKVStoreLocalBenchmarkOptions, &RunKVStoreBench);
}

}  // namespace troupe::bench
