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
  std::string model;
};

// The resolved run of `model` (the steps' default depends on it: a ResNet-18 step is about 10^4 MLP steps).
Resolved Resolve(const TrainDistBenchOptions& o, const std::string& model) {
  const bool resnet = model == "resnet18";
  const int steps = o.steps > 0 ? o.steps : (resnet ? (o.quick ? 2 : 5) : (o.quick ? 10 : 100));
  return {o.repeat > 0 ? o.repeat : (o.quick ? 1 : kTrainDistDefaultRepeat), steps, o.batch_size, model};
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
  const bool resnet = r.model == "resnet18";
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
  // ResNet-18's BatchNorm moving statistics are young after a few steps: score it with each batch's own.
  t.accuracy = BatchesAccuracy(mod, batches, &t.problems, /*is_train=*/resnet);
  std::map<std::string, NDArray> args, aux;
  mod->GetParams(&args, &aux);
  for (const auto& [name, a] : args) {
    for (float v : a.ToVector<float>()) t.checksum += std::fabs(v);
  }
  return t;
}

// A Module of `model` ("mlp", "resnet18") for batches of `batch` images, initialised with seed 1, SGD with
// lr 0.05 and momentum 0.9 (rescale 1 / total batch, as Module sets it from the store's workers).
std::unique_ptr<Module> MakeModule(const std::string& model, int batch, const std::shared_ptr<KVStore>& store) {
  ResourceManager::Get()->SeedRandom(1);
  auto mod = std::make_unique<Module>(model == "resnet18" ? models::ResNet(18) : models::MLP());
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
  const Resolved r = Resolve(o, o.models.front());
  Json result;
  std::vector<std::string> failures;
  try {
    std::shared_ptr<KVStore> kv = KVStore::Create("dist_sync");
    const int rank = kv->rank(), workers = kv->num_workers();
    const int batch = r.batch / workers;
    // Worker k trains on batches [k * n, (k + 1) * n) of the file: its own data.
    std::vector<DataBatch> all = LoadMnistBatches(o.mnist_dir, batch, kBatchesPerWorker * workers, "train-dist");
    std::vector<DataBatch> mine(all.begin() + rank * kBatchesPerWorker, all.begin() + (rank + 1) * kBatchesPerWorker);
    auto mod = MakeModule(r.model, batch, kv);
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

// The parameters of a Module (floats) and how many arrays they are (the keys a step pushes and pulls).
std::pair<std::int64_t, int> ParameterCount(Module* mod) {
  std::map<std::string, NDArray> args, aux;
  mod->GetParams(&args, &aux);
  std::int64_t n = 0;
  for (const auto& [name, a] : args) n += static_cast<std::int64_t>(a.shape().Size());
  return {n, static_cast<int>(args.size())};
}

// dist_sync with `w` workers and `servers` servers on the wire (loopback when null): one entry of the
// model's "dist_sync" list.
Json MeasureDist(const TrainDistBenchOptions& o, const Resolved& r, const NetnsWire* wire, int servers, int w,
                 double single_ips, std::vector<std::string>* failures) {
  std::fprintf(stderr, "troupe bench train-dist: %s, %s: dist_sync, %d server(s), %d worker(s) of batch %d...\n",
               r.model.c_str(), wire != nullptr ? wire->Summary().c_str() : "loopback", servers, w, r.batch / w);
  std::vector<Json> results;
  {
    ChildCluster cluster(servers, w, kChildTimeoutMs, wire);
    std::vector<std::unique_ptr<proc::Process>> ws;
    for (int k = 0; cluster.started() && k < w; ++k) {
      ws.push_back(cluster.StartWorker(
          k, {proc::SelfExe(), "bench", "train-dist", "--role", "worker", "--models", r.model, "--repeat",
              std::to_string(r.repeat), "--steps", std::to_string(r.steps), "--batch-size", std::to_string(r.batch),
              "--mnist-dir", o.mnist_dir}));
    }
    results = CollectWorkerResults(ws, kChildTimeoutMs, failures);
    cluster.Wait(kChildTimeoutMs, failures);
  }
  // The slowest worker sets the pace of a sync step; every worker must hold the same parameters.
  double step_s = 0;
  for (const Json& res : results) {
    if (!res.contains("step_seconds")) continue;
    step_s = std::max(step_s, MedianOf(res["step_seconds"].get<std::vector<double>>()));
    const double sum0 = results.front().value("checksum", 0.0), sum = res.value("checksum", 0.0);
    if (std::fabs(sum - sum0) > 1e-6 * std::max(1.0, std::fabs(sum0))) {
      failures->push_back(r.model + Fmt(", dist_sync with %g workers: the workers' parameters differ", w) +
                          " (checksums " + Fmt("%.9g", sum0) + " and " + Fmt("%.9g", sum) + ")");
    }
    if (!o.quick && res.value("accuracy", 0.0) <= kChance) {
      failures->push_back(r.model + ": a dist_sync worker's accuracy is " + Fmt("%.3f", res.value("accuracy", 0.0)) +
                          " after training; training does not work");
    }
  }
  const double ips = step_s > 0 ? r.batch / step_s : 0;
  return {{"net", wire != nullptr ? wire->Applied() : Json{{"mode", "loopback"}}},
          {"workers", w},
          {"servers", servers},
          {"batch_per_worker", r.batch / w},
          {"step_seconds_median", step_s},
          {"images_per_s", ips},
          {"ratio_vs_single_process", single_ips > 0 ? ips / single_ips : 0},
          {"worker_results", results}};
}

int RunCoordinator(const TrainDistBenchOptions& o) {
  for (int w : o.workers) {
    if (w < 1 || o.batch_size % w != 0) {
      std::fprintf(stderr, "troupe bench train-dist: --batch-size %d must split evenly over %d workers\n",
                   o.batch_size, w);
      return 2;
    }
  }
  if (const std::string why = NetUnavailable(o.net); !why.empty()) {
    std::fprintf(stderr, "troupe bench train-dist: --net netns: %s\n", why.c_str());
    return 2;
  }
  const std::string started = UtcNow();
  std::vector<std::string> failures;
  const int max_servers = *std::max_element(o.servers.begin(), o.servers.end());
  const int max_workers = *std::max_element(o.workers.begin(), o.workers.end());
  Json models = Json::array();
  for (const std::string& model : o.models) {
    const Resolved r = Resolve(o, model);
    std::fprintf(stderr, "troupe bench train-dist: %s: single process, batch %d, %d runs of %d steps...\n",
                 model.c_str(), r.batch, r.repeat, r.steps);
    Trained single;
    std::pair<std::int64_t, int> params{0, 0};
    try {
      auto mod = MakeModule(model, r.batch, nullptr);
      params = ParameterCount(mod.get());
      single = TrainSteps(mod.get(), LoadMnistBatches(o.mnist_dir, r.batch, kBatchesPerWorker, "train-dist"), r);
    } catch (const std::exception& e) {
      failures.push_back(model + ", single process: " + e.what());
    }
    for (const std::string& p : single.problems) failures.push_back(model + ", single process: " + p);
    if (!o.quick && single.accuracy <= kChance) {
      failures.push_back(model + ", single process: accuracy " + Fmt("%.3f", single.accuracy) +
                         " after training; training does not work");
    }
    const double single_ips = single.step_seconds.empty() ? 0 : r.batch / MedianOf(single.step_seconds);
    Json dist = Json::array();
    for (const std::string& mode : o.net.modes) {
      std::unique_ptr<NetnsWire> wire;
      if (mode == "netns") {
        try {
          wire = std::make_unique<NetnsWire>(ClusterNodes(max_servers, max_workers), o.net.shaping);
        } catch (const std::exception& e) {
          failures.push_back(e.what());
          continue;
        }
        if (const Json a = wire->Applied(); a.contains("latency_note")) {
          std::fprintf(stderr, "troupe bench train-dist: %s\n", a["latency_note"].get<std::string>().c_str());
        }
      }
      for (const int servers : o.servers) {
        for (const int w : o.workers) dist.push_back(MeasureDist(o, r, wire.get(), servers, w, single_ips, &failures));
      }
      if (wire) {
        for (const std::string& p : wire->TearDown()) failures.push_back("netns teardown: " + p);
      }
    }
    models.push_back({{"model", model},
                      {"parameters", params.first},
                      {"parameter_arrays", params.second},
                      {"steps", r.steps},
                      {"single_process",
                       {{"step_seconds", single.step_seconds},
                        {"step_seconds_median", single.step_seconds.empty() ? 0 : MedianOf(single.step_seconds)},
                        {"images_per_s", single_ips},
                        {"accuracy", single.accuracy}}},
                      {"dist_sync", dist}});
  }

  const Resolved r0 = Resolve(o, o.models.front());
  Json root;
  root["benchmark"] = "train-dist";
  root["troupe_version"] = TROUPE_VERSION;
  root["started"] = started;
  root["finished"] = UtcNow();
  root["machine"] = {{"cores", AvailableCores()}, {"cpu", CpuModel()}};
  root["config"] = {{"quick", o.quick},          {"repeat", r0.repeat},     {"steps", o.steps},
                    {"warmup_steps", kWarmupSteps}, {"batch_size", r0.batch}, {"workers", o.workers},
                    {"servers", o.servers},      {"models", o.models},      {"model", o.models.front()},
                    {"type", "dist_sync"},       {"net", o.net.modes},      {"net_rate_gbit", o.net.shaping.rate_gbit},
                    {"net_latency_us", o.net.shaping.latency_us},
                    {"optimizer", "sgd, learning_rate 0.05, momentum 0.9, rescale_grad 1/batch_size"},
                    {"data", "Fashion-MNIST t10k, preloaded batches per process"}};
  // The first model at the top level too, where the results before --models had it.
  root["single_process"] = models.front()["single_process"];
  root["dist_sync"] = models.front()["dist_sync"];
  root["models"] = models;
  root["notes"] = {"images/s = the total batch / the median seconds per step (dist: of the slowest worker)",
                   "ratio = dist_sync images/s / single-process images/s with the same total batch, same run",
                   "net: loopback = every process on 127.0.0.1; netns = each process in a network namespace of its "
                   "own on a bridge, links shaped as dist_sync[].net says (latency_us_applied 0 where the kernel "
                   "has no netem)"};
  root["failures"] = failures;
  root["ok"] = failures.empty();

  std::printf("train-dist: total batch %d, %d runs (%d cores)\n", r0.batch, r0.repeat, AvailableCores());
  for (const Json& m : models) {
    std::printf(" %s (%.2f M parameters in %d arrays), %d steps per run\n", m["model"].get<std::string>().c_str(),
                m["parameters"].get<double>() / 1e6, m["parameter_arrays"].get<int>(), m["steps"].get<int>());
    std::printf("  single process                           %9.1f images/s\n",
                m["single_process"]["images_per_s"].get<double>());
    for (const Json& d : m["dist_sync"]) {
      std::printf("  %-8s dist_sync, %d worker(s), %d server(s) %9.1f images/s   ratio %.2f\n",
                  d["net"]["mode"].get<std::string>().c_str(), d["workers"].get<int>(), d["servers"].get<int>(),
                  d["images_per_s"].get<double>(), d["ratio_vs_single_process"].get<double>());
    }
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
    "dist_sync training across processes against training the same total batch in one process, in the same "
    "run: what the network and the servers cost. Models (--models): mlp (the Fashion-MNIST MLP, about 0.1 M "
    "parameters) and resnet18 (ResNet-18 with the thumbnail stem, about 11.2 M parameters). A step = Forward, "
    "Backward and Update of a Module on a preloaded Fashion-MNIST batch (t10k), 5 warm-up steps, then --repeat "
    "runs of --steps steps. Single process: batch --batch-size, SGD in process. dist_sync with W workers (each "
    "W in --workers) and S servers (each S in --servers): a scheduler, S servers and W workers as processes "
    "(copies of this executable), each worker a Module of batch --batch-size / W on its own batches, the "
    "servers running SGD. Wires (--net): loopback (127.0.0.1), netns (each process in a network namespace of "
    "its own, veth pairs to a bridge, 10.88.x.x addresses, links shaped with tc: tbf at --net-rate-gbit, "
    "netem delay of --net-latency-us where the kernel has netem, else rate only and the JSON says so; made by "
    "the run as root and removed at its end, also when it fails or is killed), or loopback,netns for both in "
    "one command. Figures: images/s = total batch / seconds per step (the slowest worker's median), and its "
    "ratio to the single process (above 1 is not expected on 2 cores). Checks: the workers of a run end with "
    "equal parameters, training beats chance (not with --quick), every process exits 0. Exit status: 0 when "
    "every check passed, 1 when one failed (the JSON says which), 2 on bad usage or when netns was asked for "
    "and namespaces cannot be made.";

constexpr const char* kTrainDistBenchmarkExamples =
    "Examples:\n"
    "  troupe bench train-dist --json train-dist.json\n"
    "      the MLP, batch 100, 1 and 2 workers, 5 runs of 100 steps (under a minute on 2 cores)\n"
    "  troupe bench train-dist --models mlp,resnet18 --workers 2 --servers 1,2 --net loopback,netns --json t.json\n"
    "      both models on both wires with 1 and 2 servers (netns: as root; ResNet-18: 5 runs of 5 steps)\n"
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
  options->Add("--steps", &o->steps, "Steps per run (default 100 for mlp, 5 for resnet18; 10 and 2 with --quick)")
      .Range(1, 1000000)
      .TypeName("N");
  options->Add("--models", &o->models, "Models to measure")
      .Delimiter(',')
      .Choices({"mlp", "resnet18"})
      .TypeName("LIST")
      .ShowDefault();
  options->Add("--batch-size", &o->batch_size, "The total batch of a step (split over the workers)")
      .Range(2, 4096)
      .TypeName("B")
      .ShowDefault();
  options->Add("--workers", &o->workers, "Worker counts to measure")
      .Delimiter(',')
      .Range(1, 64)
      .TypeName("LIST")
      .ShowDefault();
  options->Add("--servers", &o->servers, "Server counts to measure")
      .Delimiter(',')
      .Range(1, 64)
      .TypeName("LIST")
      .ShowDefault();
  DeclareNetOptions(&o->net, options);
  options->Add("--mnist-dir", &o->mnist_dir, "Folder of the Fashion-MNIST t10k-* .gz files")
      .TypeName("DIR")
      .ShowDefault();
  options->Add("--role", &o->role, "").Choices({"worker"}).Hidden();  // hidden
}

}  // namespace

Benchmark TrainDistBenchmark() {
  return MakeBenchmark<TrainDistBenchOptions>(
      "train-dist", "dist_sync training (MLP, ResNet-18; servers and workers as processes; loopback or netns) against one process",
      std::string(kTrainDistBenchmarkDescription) + "\n\n" + kTrainDistBenchmarkExamples + "\n",
      &DeclareTrainDistBenchmarkOptions, &RunTrainDistBench);
}

}  // namespace troupe::bench
