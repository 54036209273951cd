// `troupe bench train-dist`: see bench/train/train_dist_bench.h.
#include "bench/train/train_dist_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/config.h"
#include "bench/common/bench_util.h"
#include "bench/common/measure.h"
#include "bench/common/multi_process.h"
#include "bench/common/training.h"
#include "engine/engine.h"
#include "kvstore/kvstore.h"
#include "graph/models.h"
#include "op/initializer.h"
#include "tensor/resource.h"
#include "proc/process.h"
#include "train/train.h"

#ifndef TROUPE_VERSION
#define TROUPE_VERSION "unknown"
#endif

namespace troupe::bench {
namespace {

constexpr int kChildTimeoutMs = 600000;
constexpr int kWarmupSteps = 5;
constexpr int kBatchesPerWorker = 20;  // preloaded batches each process cycles through
constexpr double kChance = 0.5;        // accuracy over the preloaded batches that training must beat

struct Resolved {
  int repeat, steps, batch;
};

Resolved Resolve(const TrainDistBenchOptions& o) {
  return {o.repeat > 0 ? o.repeat : (o.quick ? 1 : kTrainDistDefaultRepeat), o.steps > 0 ? o.steps : (o.quick ? 10 : 100),
          o.batch_size};
}

// What one training process measured.
struct Trained {
  std::vector<double> step_seconds;  // per timed run
  double accuracy = 0;
  double checksum = 0;  // sum over every parameter of sum(|w|) (equal on the workers of a dist_sync run)
  std::vector<std::string> problems;
};

// Trains `mod` (bound, initialised, optimizer set; with a dist store set) on `batches`: warm-up, then the
// timed runs.
Trained TrainSteps(Module* mod, const std::vector<DataBatch>& batches, const Resolved& r) {
  Trained t;
  std::size_t next = 0;
  auto step = [&] {
    const DataBatch& b = batches[next];
    next = (next + 1) % batches.size();
    mod->Forward(b, true);
    mod->Backward();
    mod->Update();
  };
  for (int i = 0; i < kWarmupSteps; ++i) step();
  Engine::Get()->WaitForAll();
  for (int rep = 0; rep < r.repeat; ++rep) {
    const auto t0 = Clock::now();
    for (int i = 0; i < r.steps; ++i) step();
    Engine::Get()->WaitForAll();
    t.step_seconds.push_back(Seconds(t0, Clock::now()) / r.steps);
  }
  t.accuracy = BatchesAccuracy(mod, batches, &t.problems);
  std::map<std::string, NDArray> args, aux;
  mod->GetParams(&args, &aux);
  for (const auto& [name, a] : args) {
    for (float v : a.ToVector<float>()) t.checksum += std::fabs(v);
  }
  return t;
}

// A Module of the MLP for batches of `batch` images, initialised with seed 1, SGD with lr 0.05 and momentum
// 0.9 (rescale 1 / total batch, as Module sets it from the store's workers).
std::unique_ptr<Module> MakeModule(int batch, const std::shared_ptr<KVStore>& store) {
  ResourceManager::Get()->SeedRandom(1);
  auto mod = std::make_unique<Module>(models::MLP());
  mod->Bind({TShape({batch, 1, 28, 28})}, {TShape({batch})});
  mod->InitParams(*Initializer::Create("xavier"));
  if (store) mod->SetKVStore(store);
  mod->InitOptimizer({"sgd", {{"learning_rate", "0.05"}, {"momentum", "0.9"}}});
  return mod;
}

Json TrainedJson(const Trained& t) {
  return {{"step_seconds", t.step_seconds}, {"accuracy", t.accuracy}, {"checksum", t.checksum},
          {"problems", t.problems}};
}

int RunWorker(const TrainDistBenchOptions& o) {
  const Resolved r = Resolve(o);
  Json result;
  std::vector<std::string> failures;
  try {
    std::shared_ptr<KVStore> kv = KVStore::Create("dist_sync");
    const int rank = kv->rank(), workers = kv->num_workers();
    const int batch = r.batch / workers;
    // Worker k trains on batches [k * n, (k + 1) * n) of the file: its own data.
    std::vector<DataBatch> all = LoadMnistBatches(o.mnist_dir, batch, kBatchesPerWorker * workers, "train-dist");
    std::vector<DataBatch> mine(all.begin() + rank * kBatchesPerWorker, all.begin() + (rank + 1) * kBatchesPerWorker);
    auto mod = MakeModule(batch, kv);
    const Trained t = TrainSteps(mod.get(), mine, r);
    result = TrainedJson(t);
    result["rank"] = rank;
    result["batch"] = batch;
    for (const std::string& p : t.problems) failures.push_back("worker " + std::to_string(rank) + ": " + p);
    kv->Finalize();
  } catch (const std::exception& e) {
    failures.push_back(std::string("worker: ") + e.what());
  }
  return PrintWorkerResult(std::move(result), failures);
}

int RunCoordinator(const TrainDistBenchOptions& o) {
  const Resolved r = Resolve(o);
  const std::string started = UtcNow();
  std::vector<std::string> failures;
  for (int w : o.workers) {
    if (w < 1 || r.batch % w != 0) {
      std::fprintf(stderr, "troupe bench train-dist: --batch-size %d must split evenly over %d workers\n", r.batch, w);
      return 2;
    }
  }
  std::fprintf(stderr, "troupe bench train-dist: single process, batch %d, %d runs of %d steps...\n", r.batch,
               r.repeat, r.steps);
  Trained single;
  try {
    auto mod = MakeModule(r.batch, nullptr);
    single = TrainSteps(mod.get(), LoadMnistBatches(o.mnist_dir, r.batch, kBatchesPerWorker, "train-dist"), r);
  } catch (const std::exception& e) {
    failures.push_back(std::string("single process: ") + e.what());
  }
  for (const std::string& p : single.problems) failures.push_back("single process: " + p);
  if (!o.quick && single.accuracy <= kChance) {
    failures.push_back("single process: accuracy " + Fmt("%.3f", single.accuracy) + " after training; training does not work");
  }
  const double single_ips = single.step_seconds.empty() ? 0 : r.batch / MedianOf(single.step_seconds);

  Json dist = Json::array();
  std::vector<std::pair<int, double>> ratios;
  for (int w : o.workers) {
    std::fprintf(stderr, "troupe bench train-dist: dist_sync, 1 server, %d worker(s) of batch %d...\n", w, r.batch / w);
    std::vector<Json> results;
    {
      ChildCluster cluster(1, w, kChildTimeoutMs);
      std::vector<std::unique_ptr<proc::Process>> ws;
      for (int k = 0; cluster.started() && k < w; ++k) {
        ws.push_back(std::make_unique<proc::Process>(
            "worker",
            std::vector<std::string>{proc::SelfExe(), "bench", "train-dist", "--role", "worker", "--repeat",
                                     std::to_string(r.repeat), "--steps", std::to_string(r.steps), "--batch-size",
                                     std::to_string(r.batch), "--mnist-dir", o.mnist_dir},
            cluster.worker_env()));
      }
      results = CollectWorkerResults(ws, kChildTimeoutMs, &failures);
      cluster.Wait(kChildTimeoutMs, &failures);
    }
    // The slower worker sets the pace of a sync step; every worker must hold the same parameters.
    double step_s = 0;
    for (const Json& res : results) {
      if (!res.contains("step_seconds")) continue;
      step_s = std::max(step_s, MedianOf(res["step_seconds"].get<std::vector<double>>()));
      const double sum0 = results.front().value("checksum", 0.0), sum = res.value("checksum", 0.0);
      if (std::fabs(sum - sum0) > 1e-6 * std::max(1.0, std::fabs(sum0))) {
        failures.push_back(Fmt("dist_sync with %g workers: the workers' parameters differ", w) + " (checksums " +
                           Fmt("%.9g", sum0) + " and " + Fmt("%.9g", sum) + ")");
      }
      if (!o.quick && res.value("accuracy", 0.0) <= kChance) {
        failures.push_back("a dist_sync worker's accuracy is " + Fmt("%.3f", res.value("accuracy", 0.0)) +
                           " after training; training does not work");
      }
    }
    const double ips = step_s > 0 ? r.batch / step_s : 0;
    const double ratio = single_ips > 0 ? ips / single_ips : 0;
    ratios.emplace_back(w, ratio);
    dist.push_back({{"workers", w},
                    {"servers", 1},
                    {"batch_per_worker", r.batch / w},
                    {"step_seconds_median", step_s},
                    {"images_per_s", ips},
                    {"ratio_vs_single_process", ratio},
                    {"worker_results", results}});
  }

  Json root;
  root["benchmark"] = "train-dist";
  root["troupe_version"] = TROUPE_VERSION;
  root["started"] = started;
  root["finished"] = UtcNow();
  root["machine"] = {{"cores", AvailableCores()}, {"cpu", CpuModel()}};
  root["config"] = {{"quick", o.quick}, {"repeat", r.repeat},  {"steps", r.steps}, {"warmup_steps", kWarmupSteps},
                    {"batch_size", r.batch}, {"workers", o.workers}, {"model", "mlp"}, {"type", "dist_sync"},
                    {"optimizer", "sgd, learning_rate 0.05, momentum 0.9, rescale_grad 1/batch_size"},
                    {"data", "Fashion-MNIST t10k, preloaded batches per process"}};
  root["single_process"] = {{"step_seconds", single.step_seconds},
                            {"step_seconds_median", single.step_seconds.empty() ? 0 : MedianOf(single.step_seconds)},
                            {"images_per_s", single_ips},
                            {"accuracy", single.accuracy}};
  root["dist_sync"] = dist;
  root["notes"] = {"images/s = the total batch / the median seconds per step (dist: of the slower worker)",
                   "ratio = dist_sync images/s / single-process images/s with the same total batch, same run"};
  root["failures"] = failures;
  root["ok"] = failures.empty();

  std::printf("train-dist: MLP, total batch %d, %d steps x %d runs (%d cores)\n", r.batch, r.steps, r.repeat,
              AvailableCores());
  std::printf("  single process                 %9.0f images/s\n", single_ips);
  for (std::size_t i = 0; i < dist.size(); ++i) {
    std::printf("  dist_sync, %d worker(s), 1 server %9.0f images/s   ratio %.2f\n", ratios[i].first,
                dist[i]["images_per_s"].get<double>(), ratios[i].second);
  }
  for (const std::string& f : failures) std::printf("  FAILED: %s\n", f.c_str());
  const bool written = WriteJsonFile(o.json_path, root, "troupe bench train-dist");
  return failures.empty() && written ? 0 : 1;
}

}  // namespace

int RunTrainDistBench(const TrainDistBenchOptions& options) {
  if (options.role == "worker") return RunWorker(options);
  if (options.json_path.empty()) {
    std::fprintf(stderr, "troupe bench train-dist: --json FILE is required\n");
    return 2;
  }
  return RunCoordinator(options);
}

// --- `troupe bench train-dist`: its declaration (bench/common/registry.h) ---------------------------------
namespace {

constexpr const char* kTrainDistBenchmarkDescription =
    "dist_sync training of the MLP across processes on loopback against training the same total batch in one "
    "process, in the same run: what the network and the server cost. A step = Forward, Backward and Update of a "
    "Module on a preloaded Fashion-MNIST batch (t10k), 5 warm-up steps, then --repeat runs of --steps steps. "
    "Single process: batch --batch-size, SGD in process. dist_sync with W workers (each W in --workers): a "
    "scheduler, 1 server and W workers as processes (copies of this executable), each worker a Module of "
    "batch --batch-size / W on its own batches, the server running SGD. Figures: images/s = total batch / "
    "seconds per step (the slower worker's median), and its ratio to the single process (above 1 is not "
    "expected on 2 cores). Checks: the workers of a run end with equal parameters, training beats chance "
    "(not with --quick), every process exits 0.";

constexpr const char* kTrainDistBenchmarkExamples =
    "Examples:\n"
    "  troupe bench train-dist --json train-dist.json\n"
    "      batch 100, 1 and 2 workers, 5 runs of 100 steps (under a minute on 2 cores)\n"
    "  troupe bench train-dist --quick --json /tmp/smoke.json\n"
    "      10 steps, one run: checks that the processes and the checks work";

void DeclareTrainDistBenchmarkOptions(TrainDistBenchOptions* o, BenchOptionList* options) {
  options->Add("--json", &o->json_path, "Write the results to FILE (pretty-printed JSON)").TypeName("FILE");
  options->Add("--quick", &o->quick, "10 steps, one run: a smoke run for CTest");
  options
      ->Add("--repeat", &o->repeat,
            "Timed runs; the median is reported (default " + std::to_string(kTrainDistDefaultRepeat) +
                ", 1 with --quick)")
      .Range(1, 1000)
      .TypeName("R");
  options->Add("--steps", &o->steps, "Steps per run (default 100, 10 with --quick)").Range(1, 1000000).TypeName("N");
  options->Add("--batch-size", &o->batch_size, "The total batch of a step (split over the workers)")
      .Range(2, 4096)
      .TypeName("B")
      .ShowDefault();
  options->Add("--workers", &o->workers, "Worker counts to measure")
      .Delimiter(',')
      .Range(1, 64)
      .TypeName("LIST")
      .ShowDefault();
  options->Add("--mnist-dir", &o->mnist_dir, "Folder of the Fashion-MNIST t10k-* .gz files")
      .TypeName("DIR")
      .ShowDefault();
  options->Add("--role", &o->role, "").Choices({"worker"}).Hidden();  // hidden
}

}  // namespace

Benchmark TrainDistBenchmark() {
  return MakeBenchmark<TrainDistBenchOptions>(
      "train-dist", "dist_sync MLP training (1 server, 1 and 2 worker processes) against one process",
      std::string(kTrainDistBenchmarkDescription) + "\n\n" + kTrainDistBenchmarkExamples + "\n",
      &DeclareTrainDistBenchmarkOptions, &RunTrainDistBench);
}

}  // namespace troupe::bench
