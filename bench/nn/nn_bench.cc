// `troupe bench nn` (see nn_bench.h).
#include "bench/nn/nn_bench.h"

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/common/bench_util.h"
#include "bench/common/measure.h"
#include "engine/engine.h"
#include "nn/basic_layers.h"
#include "nn/block.h"
#include "nn/loss.h"
#include "op/autograd.h"
#include "tensor/resource.h"

#ifndef TROUPE_VERSION
#define TROUPE_VERSION "unknown"
#endif

namespace troupe::bench {
namespace {

constexpr double kMinTime = 0.2;
constexpr int kClasses = 10;
constexpr int kLossOps = 4;  // log_softmax, pick, negative, mean

std::shared_ptr<nn::HybridSequential> MakeNet(const NNBenchOptions& o, const std::string& prefix) {
  auto net = std::make_shared<nn::HybridSequential>(prefix);
  for (int i = 0; i < o.layers; ++i) {
    net->Add(std::make_shared<nn::Dense>(o.width, "relu", true, true, o.width, "", "zeros",
                                         prefix + "dense" + std::to_string(i) + "_"));
  }
  net->Add(std::make_shared<nn::Dense>(kClasses, "", true, true, o.width, "", "zeros", prefix + "out_"));
  return net;
}

struct Path {
  std::shared_ptr<nn::HybridSequential> net;
  std::shared_ptr<nn::SoftmaxCrossEntropyLoss> loss;
  NDArray last_loss;
};

// One step: record, Backward, wait.
Body StepOf(std::shared_ptr<Path> p, NDArray x, NDArray y) {
  return [p, x, y](std::int64_t calls, Clock::time_point deadline) {
    return TimedLoop(calls, deadline, [&] {
      {
        autograd::RecordScope record;
        p->last_loss = (*p->loss)((*p->net)(x), y);
      }
      autograd::Backward({p->last_loss});
      Engine::Get()->WaitForAll();
    });
  };
}

int Run(const NNBenchOptions& opt) {
  NNBenchOptions o = opt;
  auto bad = [](const std::string& what) {
    std::fprintf(stderr, "troupe bench nn: %s\n", what.c_str());
    return 2;
  };
  if (o.json_path.empty()) return bad("--json FILE is required");
  if (o.layers < 1 || o.width < 1 || o.batch < 1) return bad("--layers, --width and --batch must be at least 1");
  if (o.repeat == 0) o.repeat = o.quick ? 1 : kNNDefaultRepeat;
  const std::string started = UtcNow();
  Engine::Get();
  ResourceManager::Get()->SeedRandom(7);
  NDArray x(TShape{o.batch, o.width}, Context::CPU());
  x.SampleUniform(-1, 1);
  std::vector<float> labels;
  for (int i = 0; i < o.batch; ++i) labels.push_back(static_cast<float>(i % kClasses));
  const NDArray y = NDArray::FromVector(labels, {o.batch});
  auto imperative = std::make_shared<Path>(), hybrid = std::make_shared<Path>();
  imperative->net = MakeNet(o, "imp_");
  hybrid->net = MakeNet(o, "hyb_");
  imperative->net->Initialize("xavier");
  // The same parameters on both paths.
  auto pi = imperative->net->CollectParams(), ph = hybrid->net->CollectParams();
  ph.Initialize("zeros");
  for (std::size_t i = 0; i < pi.size(); ++i) ph.list()[i]->SetData(pi.list()[i]->Data());
  imperative->loss = std::make_shared<nn::SoftmaxCrossEntropyLoss>();
  hybrid->loss = std::make_shared<nn::SoftmaxCrossEntropyLoss>();
  hybrid->net->Hybridize();
  hybrid->loss->Hybridize();
  const int ops = 2 * o.layers + 1 + kLossOps;

  Series imp = MakeSeries("imperative step", "record the block (operator by operator) and the loss, Backward, wait");
  Series hyb = MakeSeries("hybridized step", "record the hybridized block and loss (two CachedOps), Backward, wait");
  std::fprintf(stderr, "[bench nn] %d Dense layers of %d, batch %d: %d recorded operators per imperative step\n",
               o.layers, o.width, o.batch, ops);
  MeasureInterleaved({{&imp, StepOf(imperative, x, y)}, {&hyb, StepOf(hybrid, x, y)}}, o.repeat,
                     o.quick ? 0.005 : kMinTime);
  Drain();

  std::vector<std::string> failures;
  // Checks: the same loss and first-layer gradient both ways.
  const auto li = imperative->last_loss.ToVector<float>(), lh = hybrid->last_loss.ToVector<float>();
  for (std::size_t i = 0; i < li.size(); ++i) {
    if (std::abs(li[i] - lh[i]) > 1e-5f * std::max(1.0f, std::abs(lh[i]))) {
      failures.push_back("loss " + std::to_string(i) + ": imperative " + std::to_string(li[i]) + ", hybridized " +
                         std::to_string(lh[i]));
      break;
    }
  }
  const auto gi = pi.list()[0]->Grad().ToVector<float>(), gh = ph.list()[0]->Grad().ToVector<float>();
  for (std::size_t i = 0; i < gi.size(); ++i) {
    if (std::abs(gi[i] - gh[i]) > 1e-5f * std::max(1.0f, std::abs(gh[i]))) {
      failures.push_back("first layer's weight gradient differs at " + std::to_string(i));
      break;
    }
  }
  for (const Series* s : {&imp, &hyb}) {
    for (const auto& e : s->errors) failures.push_back(s->name + ": " + e);
  }

  const double us_per_op = imp.measured() ? imp.Median() * 1e6 / ops : 0;
  Json root;
  root["benchmark"] = "nn";
  root["troupe_version"] = TROUPE_VERSION;
  root["started"] = started;
  root["finished"] = UtcNow();
  root["machine"] = {{"cores", AvailableCores()}, {"cpu", CpuModel()}};
  root["config"] = {{"layers", o.layers}, {"width", o.width}, {"batch", o.batch}, {"repeat", o.repeat},
                    {"quick", o.quick}, {"recorded_operators_per_imperative_step", ops}};
  root["imperative_step"] = SeriesJson(imp, "steps_per_s", [](double t) { return 1 / t; });
  root["hybridized_step"] = SeriesJson(hyb, "steps_per_s", [](double t) { return 1 / t; });
  root["imperative_us_per_recorded_operator"] = us_per_op;
  root["anchor"] =
      "MXNet 1.9.1 Gluon, not hybridized, on the same network: bench/nn/mxnet/imperative_overhead.py prints its "
      "microseconds per recorded operator (goal: troupe at most 0.5x)";
  root["failures"] = failures;
  root["ok"] = failures.empty();
  const bool written = WriteJsonFile(o.json_path, root, "troupe bench nn");
  std::printf("troupe bench nn: %d Dense(%d) layers, batch %d, %d timed runs (medians)\n", o.layers, o.width, o.batch,
              o.repeat);
  std::printf("  imperative step  %9.1f us  (%d recorded operators: %.2f us each)\n",
              imp.measured() ? imp.Median() * 1e6 : 0.0, ops, us_per_op);
  std::printf("  hybridized step  %9.1f us\n", hyb.measured() ? hyb.Median() * 1e6 : 0.0);
  std::printf("checks: %s\n", failures.empty() ? "all passed" : "FAILED");
  for (const auto& f : failures) std::fprintf(stderr, "troupe bench nn: check failed: %s\n", f.c_str());
  return failures.empty() && written ? 0 : 1;
}

void Declare(NNBenchOptions* o, BenchOptionList* options) {
  options->Add("--json", &o->json_path, "Write the results to FILE (pretty-printed JSON)").Required().TypeName("FILE");
  options->Add("--quick", &o->quick, "One short run: a smoke run for CTest");
  options->Add("--repeat", &o->repeat, "Timed runs per figure (default 5, 1 with --quick)").Range(1, 1000).TypeName("R");
  options->Add("--layers", &o->layers, "Dense(width, relu) layers before the output layer").Range(1, 1000)
      .TypeName("N").ShowDefault();
  options->Add("--width", &o->width, "Features per layer").Range(1, 4096).TypeName("W").ShowDefault();
  options->Add("--batch", &o->batch, "Rows per batch").Range(1, 4096).TypeName("B").ShowDefault();
}

}  // namespace

int RunNNBench(const NNBenchOptions& options) { return Run(options); }

Benchmark NNBenchmark() {
  return MakeBenchmark<NNBenchOptions>(
      "nn", "The module API's imperative overhead per recorded operator (against MXNet's Gluon, run separately)",
      "A stack of tiny Dense layers and softmax cross-entropy: one step records the forward pass, runs Backward and "
      "waits; run operator by operator and hybridized, interleaved. Reports microseconds per recorded operator of "
      "the imperative step; bench/nn/mxnet/imperative_overhead.py prints MXNet 1.9.1's on the same network.\n\n"
      "Examples:\n  troupe bench nn --json nn.json\n  troupe bench nn --layers 50 --width 64 --json nn.json\n",
      &Declare, &RunNNBench);
}

}  // namespace troupe::bench
