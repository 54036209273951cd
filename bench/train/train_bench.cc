// The training benchmark (see train_bench.h for what it measures and why).
//
// Layout: the data (preloaded Fashion-MNIST batches), the anchor (the network's GEMMs, found from the
// symbol's shapes), one workload (Module step vs anchor, checks), and the report (JSON, table on stdout).
#include "bench/train/train_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "actors/runtime.h"
#include "base/context.h"
#include "base/error.h"
#include "bench/common/bench_util.h"
#include "bench/common/cpu_kernels.h"
#include "bench/common/measure.h"
#include "bench/common/training.h"
#include "engine/engine.h"
#include "io/io.h"
#include "graph/amp.h"
#include "nn/block.h"
#include "nn/loss.h"
#include "nn/trainer.h"
#include "op/autograd.h"
#include "graph/models.h"
#include "graph/symbol.h"
#include "op/initializer.h"
#include "tensor/kernel_stats.h"
#include "tensor/ndarray.h"
#include "tensor/resource.h"
#include "tensor/storage.h"
#include "train/train.h"

// OpenBLAS's own call (openblas_config.h is not in every cblas.h): the anchors record the thread count.
extern "C" int openblas_get_num_threads(void);

#ifndef TROUPE_VERSION
#define TROUPE_VERSION "unknown"
#endif

namespace troupe::bench {
namespace {

constexpr double kMinTime = 0.2;
constexpr double kTargetRatio = 0.8;
constexpr int kBatches = 16;  // preloaded batches the steps cycle through
constexpr int kQuickBatches = 2;
constexpr double kChance = 0.5;  // training accuracy over the preloaded batches must beat this
constexpr double kResNetFloor = 0.2;  // resnet18's floor (see RunWorkload's checks)
constexpr int kSyntheticBatches = 2;  // random batches the steps alternate between (their values cost nothing)
constexpr const char* kInference = "resnet18-infer";
constexpr const char* kResNet50 = "resnet50";

// ---------------------------------------------------------------------------------------------------
// The anchor: the GEMMs of the network's FullyConnected and Convolution layers for one step.

struct Gemm {
  bool ta, tb;  // transposed
  int m, n, k;
  int repeat;  // per step (per image for convolutions)
};

struct GemmPlan {
  std::vector<Gemm> gemms;
  double flops = 0;                 // per step
  std::vector<std::string> layers;  // a line per layer, for the JSON
};

// Walks the symbol's weights in ListArguments order (the layer order): 2-d weights are FullyConnected
// layers (num_hidden x input), 4-d ones Convolutions (F x C x KH x KW, output shape from the internals).
// training false: the forward products only.
GemmPlan PlanGemms(const Symbol& net, const TShape& data_shape, bool training) {
  const Symbol internals = net.GetInternals();
  std::vector<TShape> arg_shapes, out_shapes, aux_shapes;
  std::string why;
  if (!internals.InferShape({{"data", data_shape}}, &arg_shapes, &out_shapes, &aux_shapes, &why)) {
    throw Error("troupe bench train: cannot infer the network's shapes: " + why);
  }
  std::map<std::string, TShape> outputs;
  const std::vector<std::string> out_names = internals.ListOutputs();
  for (std::size_t i = 0; i < out_names.size(); ++i) outputs[out_names[i]] = out_shapes[i];
  const std::vector<std::string> args = internals.ListArguments();
  const int batch = static_cast<int>(data_shape[0]);
  GemmPlan plan;
  bool first = true;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& name = args[i];
    const std::string suffix = "_weight";
    if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const std::string layer = name.substr(0, name.size() - suffix.size());
    const TShape& w = arg_shapes[i];
    if (w.ndim() == 2) {
      const int n = static_cast<int>(w[0]), k = static_cast<int>(w[1]);
      plan.gemms.push_back({false, true, batch, n, k, 1});                           // Y = X W^T
      if (training) plan.gemms.push_back({true, false, n, k, batch, 1});             // dW = dY^T X
      if (training && !first) plan.gemms.push_back({false, false, batch, k, n, 1});  // dX = dY W
      plan.flops += 2.0 * batch * n * k * (!training ? 1 : first ? 2 : 3);
      plan.layers.push_back(layer + ": FullyConnected " + std::to_string(batch) + "x" + std::to_string(k) + " -> " +
                            std::to_string(n));
    } else if (w.ndim() == 4) {
      const auto found = outputs.find(layer + "_output");
      if (found == outputs.end()) throw Error("troupe bench train: no output shape for layer " + layer);
      const int f = static_cast<int>(w[0]);
      const int ckk = static_cast<int>(w[1] * w[2] * w[3]);
      const int hw = static_cast<int>(found->second[2] * found->second[3]);
      plan.gemms.push_back({false, false, f, hw, ckk, batch});                           // Y = W col
      if (training) plan.gemms.push_back({false, true, f, ckk, hw, batch});              // dW += dY col^T
      if (training && !first) plan.gemms.push_back({true, false, ckk, hw, f, batch});    // dcol = W^T dY
      plan.flops += 2.0 * batch * f * hw * ckk * (!training ? 1 : first ? 2 : 3);
      plan.layers.push_back(layer + ": Convolution " + std::to_string(f) + " filters, CKK " + std::to_string(ckk) +
                            ", output " + std::to_string(hw) + " positions, per image");
    } else {
      continue;
    }
    first = false;
  }
  if (plan.gemms.empty()) throw Error("troupe bench train: the network has no FullyConnected or Convolution weight");
  return plan;
}

// Buffers for one GEMM (random values: they do not change a product's time), and the call.
class GemmRunner {
 public:
  explicit GemmRunner(const GemmPlan& plan) : plan_(plan) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (const Gemm& g : plan_.gemms) {
      Buffers b;
      b.a.resize(static_cast<std::size_t>(g.m) * g.k);
      b.b.resize(static_cast<std::size_t>(g.k) * g.n);
      b.c.resize(static_cast<std::size_t>(g.m) * g.n);
      for (float& v : b.a) v = u(rng);
      for (float& v : b.b) v = u(rng);
      buffers_.push_back(std::move(b));
    }
  }
  void Step() {
    for (std::size_t i = 0; i < plan_.gemms.size(); ++i) {
      const Gemm& g = plan_.gemms[i];
      Buffers& b = buffers_[i];
      const int lda = g.ta ? g.m : g.k;
      const int ldb = g.tb ? g.k : g.n;
      for (int r = 0; r < g.repeat; ++r) {
        Sgemm(g.ta, g.tb, g.m, g.n, g.k, b.a.data(), lda, b.b.data(), ldb, 0.0f, b.c.data(), g.n);
      }
      KeepAlive(b.c.data());
    }
  }

 private:
  struct Buffers {
    std::vector<float> a, b, c;
  };
  const GemmPlan& plan_;
  std::vector<Buffers> buffers_;
};

// Measures the workload's figure (r->figure, made by `step`) alternated with the GEMMs of `plan` alone
// (r->anchor, described by `anchor_what`); on a GPU the figure alone: the anchor is the CPU's sgemm.
void MeasureAgainstGemms(WorkloadReport* r, const Body& step, const GemmPlan& plan, Context ctx, int repeat,
                         const std::string& anchor_what) {
  if (ctx.is_gpu()) {
    MeasureInterleaved({{&r->figure, step}}, repeat, kMinTime);
    return;
  }
  r->anchor = MakeSeries("sgemm", anchor_what);
  auto gemm = std::make_shared<GemmRunner>(plan);
  const AnchorVar anchor_var;
  MeasureInterleaved(
      {{&r->figure, step}, {&r->anchor, OnWorker(Context::CPU(0), anchor_var.get(), [gemm] { gemm->Step(); })}},
      repeat, kMinTime);
}

// ---------------------------------------------------------------------------------------------------
// One workload

// The network of a training workload, the shape of one image and the number of classes: what `troupe train
// --model` trains (ResNet-18: the CIFAR stem, as Gluon's thumbnail variant, on 28 x 28 images), and ResNet-50 v1
// in its ImageNet shape.
struct TrainingModel {
  Symbol net;
  TShape image;
  int classes;
};
// (batch, image...): the data shape of a batch.
TShape BatchShape(int batch, const TShape& image) {
  std::vector<std::int64_t> dims{batch};
  for (int i = 0; i < image.ndim(); ++i) dims.push_back(image[i]);
  return TShape(dims);
}
TrainingModel ModelOf(const std::string& model) {
  if (model == "mlp") return {models::MLP(), TShape({1, 28, 28}), 10};
  if (model == "lenet") return {models::LeNet(), TShape({1, 28, 28}), 10};
  if (model == kResNet50) return {models::ResNet(50, 1000, false), TShape({3, 224, 224}), 1000};
  return {models::ResNet(18, 10, true), TShape({1, 28, 28}), 10};
}

// --synthetic: `count` batches of `batch` images of shape `image`, uniform in [0, 1), and labels uniform over
// the classes, made once on `ctx` (so that a step copies them within the device, as the preloaded Fashion-MNIST
// batches are copied within the host).
std::vector<DataBatch> SyntheticBatches(int batch, const TShape& image, int classes, int count, Context ctx) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::uniform_int_distribution<int> label(0, classes - 1);
  const TShape shape = BatchShape(batch, image);
  std::vector<DataBatch> out(static_cast<std::size_t>(count));
  for (DataBatch& b : out) {
    std::vector<float> pixels(static_cast<std::size_t>(shape.Size()));
    for (float& v : pixels) v = pixel(rng);
    std::vector<float> labels(static_cast<std::size_t>(batch));
    for (float& v : labels) v = static_cast<float>(label(rng));
    b.data.push_back(NDArray::FromVector(pixels, shape, Context::CPU(0)).CopyTo(ctx));
    b.label.push_back(NDArray::FromVector(labels, TShape({batch}), Context::CPU(0)).CopyTo(ctx));
  }
  for (const DataBatch& b : out) {
    b.data[0].WaitToRead();
    b.label[0].WaitToRead();
  }
  return out;
}

// --dtype: the training workloads' arithmetic type (bfloat16, float16: amp::ConvertSymbol's target).
DType TargetDType(const std::string& dtype) {
  return dtype == "bfloat16" ? DType::kBfloat16 : dtype == "float16" ? DType::kFloat16 : DType::kFloat32;
}

// The storage's peak bytes in use on ctx over one more step (everything held counts: parameters, optimizer
// states, bound executors, and what the step allocates), and the bytes in use before it.
std::pair<std::uint64_t, std::uint64_t> PeakOfOneStep(const Body& step, Context ctx) {
  Engine::Get()->WaitForAll();
  Storage* storage = Storage::Get().get();
  storage->ResetPeak(ctx);
  const std::uint64_t before = storage->Stats(ctx).bytes_in_use;
  step(1, Clock::now() + std::chrono::hours(1));
  Engine::Get()->WaitForAll();
  return {storage->Stats(ctx).peak_bytes_in_use, before};
}

void RecordPeak(WorkloadReport* r, const Body& step, Context ctx) {
  const auto [peak, before] = PeakOfOneStep(step, ctx);
  r->details["step_peak_bytes"] = peak;
  r->details["step_bytes_in_use_before"] = before;
  r->details["step_peak_meaning"] =
      "the storage pool's peak bytes in use on the device over one step after the timed runs (parameters, "
      "optimizer states, bound executors and everything the step allocates), and the bytes in use before it";
}

// The logits of a model network: the input of its SoftmaxOutput (the last FullyConnected's output).
Symbol Logits(const Symbol& net) {
  const Symbol internals = net.GetInternals();
  const std::vector<std::string> outs = internals.ListOutputs();
  for (std::size_t i = outs.size(); i-- > 0;) {
    const std::string& n = outs[i];
    if (n.size() > 7 && n.compare(n.size() - 7, 7, "_output") == 0 && n != "softmax_output" &&
        n.rfind("fc", 0) == 0) {
      return internals[i];
    }
  }
  throw Error("troupe bench train: no fully connected output before the softmax");
}

// The step through the module API (--api hybrid / imperative): the network as a SymbolBlock of its logits (a
// HybridBlock: run operator by operator, or as one CachedOp when hybridized), softmax cross-entropy, autograd
// and a Trainer with the Module's optimizer. Returns the body and, through *accuracy, a check of the block
// over the batches.
struct NNStep {
  Body step;
  std::function<double(const std::vector<DataBatch>&)> accuracy;
};
NNStep MakeNNStep(const Symbol& net, const std::string& api, int batch, Context ctx,
                  const std::vector<DataBatch>& batches) {
  auto block = std::make_shared<nn::SymbolBlock>(Logits(net), std::vector<std::string>{"data"});
  ResourceManager::Get()->SeedRandom(1);
  block->Initialize("xavier", {ctx});
  (*block)(batches[0].data[0]);  // completes the deferred shapes
  auto loss_fn = std::make_shared<nn::SoftmaxCrossEntropyLoss>();
  if (api == "hybrid") {
    block->Hybridize();
    loss_fn->Hybridize();
  }
  auto trainer = std::make_shared<nn::Trainer>(
      block->CollectParams(), OptimizerConfig{"sgd", {{"learning_rate", "0.05"}, {"momentum", "0.9"}}});
  auto next = std::make_shared<std::size_t>(0);
  NNStep s;
  s.step = [=](std::int64_t calls, Clock::time_point deadline) {
    return TimedLoop(
        calls, deadline,
        [&] {
          const DataBatch& b = batches[*next];
          *next = (*next + 1) % batches.size();
          NDArray loss;
          {
            autograd::RecordScope record;
            loss = (*loss_fn)((*block)(b.data[0]), b.label[0]);
          }
          autograd::Backward({loss});
          trainer->Step(batch);
        },
        [] { Engine::Get()->WaitForAll(); });
  };
  s.accuracy = [block](const std::vector<DataBatch>& bs) {
    auto metric = EvalMetric::Create("acc");
    for (const DataBatch& b : bs) metric->Update(b.label, {(*block)(b.data[0])});
    return metric->Get();
  };
  return s;
}

// One training workload on `ctx`. `mnist`: the preloaded Fashion-MNIST batches (unused with --synthetic, which
// makes the workload's own). On a GPU there is no anchor (the GEMM anchor is the CPU's sgemm).
void RunWorkload(WorkloadReport* r, const std::string& model, const TrainBenchOptions& o, Context ctx,
                 const std::vector<DataBatch>& mnist) {
  const int batch = o.batch_size;
  const TrainingModel spec = ModelOf(model);
  const TShape data_shape = BatchShape(batch, spec.image);
  const std::vector<DataBatch> batches =
      o.synthetic ? SyntheticBatches(batch, spec.image, spec.classes, kSyntheticBatches, ctx) : mnist;
  const GemmPlan plan = PlanGemms(spec.net, data_shape, true);  // the float32 products (the anchor)
  Symbol net = spec.net;
  if (o.dtype != "float32") {
    amp::ConvertOptions convert;
    convert.target_dtype = TargetDType(o.dtype);
    net = amp::ConvertSymbol(spec.net, convert);
  }
  const bool gpu = ctx.is_gpu();
  r->items = batch;
  r->details = {{"model", model == kResNet50 ? "resnet50 (v1, ImageNet: 3 x 224 x 224, 1000 classes)" : model},
                {"batch_size", batch},
                {"ctx", ctx.ToString()},
                {"dtype", o.dtype == "float32" ? "float32"
                                               : o.dtype + " (amp::ConvertSymbol; parameters and optimizer float32)"},
                {"data", o.synthetic ? "synthetic: " + std::to_string(batches.size()) + " batches of " +
                                           data_shape.ToString() + " uniform in [0, 1), labels uniform over " +
                                           std::to_string(spec.classes) + " classes, made on " + ctx.ToString()
                                     : "Fashion-MNIST t10k, " + std::to_string(batches.size()) + " preloaded batches"},
                {"optimizer", "sgd, learning_rate 0.05, momentum 0.9, rescale_grad 1/batch"},
                {"gemm_gflop_per_step", plan.flops / 1e9},
                {"gemm_layers", plan.layers}};
  if (gpu) {
    r->details["anchor"] = "none: the GEMM anchor is the CPU's sgemm";
  } else {
    r->details["gemm_library"] = SgemmLibrary();
    r->details["blas_threads"] = openblas_get_num_threads();
  }

  if (o.api != "module") {
    r->details["api"] = o.api == "hybrid"
                            ? "module API (nn/): the network as a SymbolBlock and the loss, both hybridized (CachedOp), "
                              "autograd::Backward, Trainer::Step"
                            : "module API (nn/): the network as a SymbolBlock and the loss run operator by operator "
                              "(recorded by autograd), autograd::Backward, Trainer::Step";
    NNStep nn_step = MakeNNStep(net, o.api, batch, ctx, batches);
    r->figure = MakeSeries(o.api == "hybrid" ? "hybridized block step" : "imperative block step",
                           "record the block and the loss, Backward, Trainer::Step (sgd), then wait");
    MeasureAgainstGemms(r, nn_step.step, plan, ctx, o.repeat,
                        "the network's FullyConnected / Convolution GEMMs for one step, alone (" + SgemmLibrary() + ")");
    RecordPeak(r, nn_step.step, ctx);
    const double accuracy = nn_step.accuracy(batches);
    r->details["train_accuracy_after"] = accuracy;
    r->details["train_accuracy_after_meaning"] = "the block's predictions (prediction mode) over the batches after the "
                                                 "timed steps; must be > 0.5 (not checked for ResNets or --synthetic)";
    if (!o.quick && !o.synthetic && model.rfind("resnet", 0) != 0 && accuracy <= kChance) {
      r->errors.push_back("training accuracy over the preloaded batches is " + Fmt("%.3f", accuracy) +
                          " after the timed steps (must be above 0.5); training does not work");
    }
    return;
  }
  ResourceManager::Get()->SeedRandom(1);
  auto module = std::make_shared<Module>(net, std::vector<std::string>{"data"},
                                         std::vector<std::string>{"softmax_label"}, ctx);
  module->Bind({data_shape}, {TShape({batch})});
  module->InitParams(*Initializer::Create("xavier"));
  module->InitOptimizer(
      {"sgd", {{"learning_rate", "0.05"}, {"momentum", "0.9"}, {"rescale_grad", Fmt("%.9g", 1.0 / batch)}}});

  r->figure = MakeSeries("Module step", "copy a batch in, Forward(true), Backward, SGD update, then wait");
  auto next = std::make_shared<std::size_t>(0);
  // Seconds per step spent inside the BLAS products (CpuGemm, summed over threads), one entry per run of
  // the body; the last `repeat` entries belong to the timed runs (MeasureInterleaved runs them last).
  auto gemm_per_step = std::make_shared<std::vector<double>>();
  Body step = [=](std::int64_t calls, Clock::time_point deadline) {
    const std::int64_t ns0 = CpuGemmNanoseconds();
    const RunResult run = TimedLoop(
        calls, deadline,
        [&] {
          const DataBatch& b = batches[*next];
          *next = (*next + 1) % batches.size();
          module->Forward(b, true);
          module->Backward();
          module->Update();
        },
        [] { Engine::Get()->WaitForAll(); });
    const double gemm_s = static_cast<double>(CpuGemmNanoseconds() - ns0) * 1e-9;
    gemm_per_step->push_back(run.calls > 0 ? gemm_s / static_cast<double>(run.calls) : 0.0);
    return run;
  };
  MeasureAgainstGemms(r, step, plan, ctx, o.repeat,
                      "the network's FullyConnected / Convolution GEMMs for one step, alone (" + SgemmLibrary() +
                          ", one engine function per step on the CPU worker)");
  if (r->figure.measured()) r->details["gemm_tflop_per_s"] = plan.flops / r->figure.Median() / 1e12;
  // The in-run bound (CPU): per timed run, the step's own BLAS time against the step's time.
  const std::size_t runs = r->figure.seconds.size();
  if (!gpu && runs > 0 && gemm_per_step->size() >= runs) {
    std::vector<double> gemm(gemm_per_step->end() - static_cast<std::ptrdiff_t>(runs), gemm_per_step->end());
    std::vector<double> ratios;
    for (std::size_t i = 0; i < runs; ++i) ratios.push_back(gemm[i] / r->figure.seconds[i]);
    r->details["inrun_gemm_s_per_step"] = gemm;
    r->details["inrun_gemm_s_per_step_median"] = MedianOf(gemm);
    r->details["inrun_gemm_bound_images_per_s"] = batch / MedianOf(gemm);
    r->details["inrun_ratio"] = MedianOf(ratios);
  }
  RecordPeak(r, step, ctx);  // after the in-run figures: its call adds an entry to gemm_per_step

  // Checks: probabilities, and that the steps trained the network (accuracy over the preloaded batches).
  // The ResNets are judged with each batch's own BatchNorm statistics: after the dozen or so steps of a run their
  // moving statistics are still far from the data's (MXNet's are too), so an inference pass says nothing yet;
  // ResNet-18 must beat twice the chance of guessing (0.1) there. Synthetic labels are random: nothing to learn,
  // so only the probabilities are checked.
  const bool resnet = model.rfind("resnet", 0) == 0;
  const double floor = resnet ? kResNetFloor : kChance;
  std::vector<std::string> problems;
  const double accuracy = BatchesAccuracy(module.get(), batches, &problems, resnet);
  r->details["train_accuracy_after"] = accuracy;
  r->details["train_accuracy_after_meaning"] =
      o.synthetic ? "not checked: --synthetic labels are random (the outputs are still checked to be probabilities)"
      : resnet    ? "Forward(true) (batch statistics) over the preloaded batches after the timed steps; must be > 0.2"
                  : "Forward(false) over the preloaded batches after the timed steps; must be > 0.5";
  for (const std::string& p : problems) r->errors.push_back(p);
  if (!o.quick && !o.synthetic && accuracy <= floor) {
    r->errors.push_back("training accuracy over the preloaded batches is " + Fmt("%.3f", accuracy) +
                        " after the timed steps (must be above " + Fmt("%.1f", floor) + "); training does not work");
  }
}

// ResNet-18 inference (the ImageNet variant, 1000 classes) on one 3 x 224 x 224 image at a time, the way
// MXNet's users ran it with a Module: Forward(is_train false), then wait for the output. Random pixels
// (the latency does not depend on them) and Xavier weights. Anchor: the forward GEMMs in im2col shapes (none on
// a GPU).
void RunInference(WorkloadReport* r, const TrainBenchOptions& o, Context ctx) {
  const Symbol net = models::ResNet(18, 1000, false);
  const TShape data_shape({1, 3, 224, 224});
  const GemmPlan plan = PlanGemms(net, data_shape, false);
  r->items = 1;
  r->details = {{"model", "resnet18 (ImageNet variant, 1000 classes)"},
                {"batch_size", 1},
                {"ctx", ctx.ToString()},
                {"data", "one random 3 x 224 x 224 image"},
                {"gemm_gflop_per_step", plan.flops / 1e9}};
  if (ctx.is_gpu()) {
    r->details["anchor"] = "none: the GEMM anchor is the CPU's sgemm";
  } else {
    r->details["gemm_library"] = SgemmLibrary();
    r->details["blas_threads"] = openblas_get_num_threads();
  }
  ResourceManager::Get()->SeedRandom(1);
  auto module = std::make_shared<Module>(net, std::vector<std::string>{"data"},
                                         std::vector<std::string>{"softmax_label"}, ctx);
  module->Bind({data_shape}, {TShape({1})}, false);
  module->InitParams(*Initializer::Create("xavier"));
  DataBatch b;
  std::vector<float> pixels(static_cast<std::size_t>(data_shape.Size()));
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float& v : pixels) v = u(rng);
  b.data.push_back(NDArray::FromVector(pixels, data_shape, Context::CPU(0)).CopyTo(ctx));
  b.label.push_back(NDArray::Full(TShape({1}), 0.0, ctx));
  r->figure = MakeSeries("Module forward", "Forward(false) on one image, then wait for the output");
  Body step = [=](std::int64_t calls, Clock::time_point deadline) {
    return TimedLoop(calls, deadline, [&] {
      module->Forward(b, false);
      module->GetOutputs().at(0).WaitToRead();
    });
  };
  MeasureAgainstGemms(r, step, plan, ctx, o.repeat,
                      "the network's forward GEMMs for one image, alone (" + SgemmLibrary() +
                          ", one engine function per image on the CPU worker)");
  if (r->figure.measured()) {
    r->details["latency_ms_median"] = r->figure.Median() * 1e3;
    r->details["latency_ms_best"] = r->figure.Best() * 1e3;
  }
  std::vector<std::string> problems;
  BatchesAccuracy(module.get(), {b}, &problems);  // the checks only: its output is a probability row
  for (const std::string& p : problems) r->errors.push_back(p);
}

// The in-run ratio (the step's own BLAS time / the step's time, median over the timed runs), when the
// workload was measured and its checks passed.
std::optional<double> InRunRatio(const WorkloadReport& r) {
  if (!r.ok() || !r.details.contains("inrun_ratio")) return std::nullopt;
  return r.details["inrun_ratio"].get<double>();
}
std::optional<double> InRunBound(const WorkloadReport& r) {
  if (!r.ok() || !r.details.contains("inrun_gemm_bound_images_per_s")) return std::nullopt;
  return r.details["inrun_gemm_bound_images_per_s"].get<double>();
}

// ---------------------------------------------------------------------------------------------------
// The run and its report

class TrainBench {
 public:
  explicit TrainBench(TrainBenchOptions o) : opt_(std::move(o)), t0_(Clock::now()) {}
  int Run();

 private:
  void Log(const std::string& line) const {
    std::fprintf(stderr, "[bench train %6.1f s] %s\n", Seconds(t0_, Clock::now()), line.c_str());
  }
  Json BuildJson() const;
  void PrintTable() const;

  TrainBenchOptions opt_;
  Context ctx_;  // --ctx, parsed
  Clock::time_point t0_;
  std::string started_;
  std::map<std::string, WorkloadReport> reports_;
  std::vector<std::string> failures_;
};

Json TrainBench::BuildJson() const {
  Json root;
  root["benchmark"] = "train";
  root["troupe_version"] = TROUPE_VERSION;
  root["started"] = started_;
  root["finished"] = UtcNow();
  root["machine"] = {{"cores", AvailableCores()}, {"cpu", CpuModel()}};
  root["config"] = {{"quick", opt_.quick},
                    {"repeat", opt_.repeat},
                    {"min_time_s", kMinTime},
                    {"workloads", opt_.workloads},
                    {"batch_size", opt_.batch_size},
                    {"ctx", ctx_.ToString()},
                    {"dtype", opt_.dtype},
                    {"api", opt_.api},
                    {"synthetic", opt_.synthetic},
                    {"mnist_dir", opt_.synthetic ? Json() : Json(opt_.mnist_dir)}};
  if (ctx_.is_gpu()) root["machine"]["gpus"] = Runtime::GpuCount();
  Json targets = Json::array();
  for (const std::string& w : opt_.workloads) {
    const auto found = reports_.find(w);
    if (found == reports_.end()) continue;
    const WorkloadReport& r = found->second;
    const double items = static_cast<double>(r.items);
    const auto per_s = [items](double t) { return items / t; };
    Json j;
    j["config"] = r.details;
    j["step"] = SeriesJson(r.figure, "images_per_s", per_s);
    j["gemm_bound"] = SeriesJson(r.anchor, "images_per_s", per_s);
    j["inrun_ratio"] = OptNum(InRunRatio(r));
    j["gemm_alone_ratio"] = OptNum(r.Ratio());
    j["gemm_alone_ratio_best"] = OptNum(r.RatioBest());
    j["errors"] = r.errors;
    j["ok"] = r.ok();
    root[w] = j;
    if (w == "mlp" && opt_.batch_size == 128) {
      const std::optional<double> ratio = InRunRatio(r);
      targets.push_back({{"name", "mlp at batch 128: in-run GEMM time / training step time >= 0.8"},
                         {"ratio", OptNum(ratio)},
                         {"target", kTargetRatio},
                         {"met", ratio.has_value() && *ratio >= kTargetRatio}});
    }
  }
  Json notes = Json::array();
  notes.push_back(
      "A call is one training step on a preloaded batch (copy in, Forward(true), Backward, SGD update per "
      "parameter); a timed run ends by waiting for the engine. images/s = batch / seconds per step.");
  notes.push_back(
      "inrun_ratio (the target's figure): the seconds the step itself spent inside BLAS products (CpuGemm, "
      "timed in the library, summed over threads) / the step's seconds, median over the timed runs; "
      "inrun_gemm_bound_images_per_s = batch / those BLAS seconds: images/s if only kernel time counted.");
  notes.push_back(
      "gemm_bound (gemm_alone_ratio): the sgemm calls of the FullyConnected and Convolution layers for one step "
      "(im2col shapes per image for convolutions; no data gradient for the first layer), alone, in the library of "
      "the operators' products (gemm_library) on the CPU worker with its kernel-thread count, on cache-warm "
      "buffers. gemm_alone_ratio = their time / step time.");
  notes.push_back(
      "resnet18-infer: one call is Forward(false) of the ImageNet ResNet-18 on one 3 x 224 x 224 image and the wait "
      "for its output; images/s = 1 / latency (latency_ms_median in its config); its anchor is the forward GEMMs.");
  if (opt_.synthetic) {
    notes.push_back(
        "synthetic: each workload steps through random batches of its input shape (uniform in [0, 1)) with random "
        "labels, made once on the Module's context; the accuracy check does not apply (nothing to learn), the "
        "outputs are still checked to be probabilities.");
  }
  if (ctx_.is_gpu()) {
    notes.push_back(
        "ctx " + ctx_.ToString() + ": the Module runs on the GPU; there is no anchor (the GEMM anchor is the CPU's "
        "sgemm), so no ratio. gemm_tflop_per_s = the float32 GEMM operations of a step (gemm_gflop_per_step) / "
        "the step's median seconds: the arithmetic rate a step implies.");
  }
  if (opt_.dtype != "float32") {
    notes.push_back("dtype " + opt_.dtype +
                    ": the training workloads' networks are converted by amp::ConvertSymbol (MXNet's AMP lists); "
                    "parameters and the optimizer stay float32, and the anchor stays the float32 products.");
  }
  if (opt_.quick) notes.push_back("quick: few batches, one run; the figures say nothing about speed.");
  root["notes"] = notes;
  root["targets"] = targets;
  root["failures"] = failures_;
  root["ok"] = failures_.empty();
  return root;
}

void TrainBench::PrintTable() const {
  const auto cell = [](std::optional<double> v, const char* format) { return v ? Fmt(format, *v) : std::string("-"); };
  std::printf("troupe bench train: batch %d, %d timed runs per figure (medians), %s, %s%s, machine: %d cores\n",
              opt_.batch_size, opt_.repeat, ctx_.ToString().c_str(), opt_.dtype.c_str(),
              opt_.synthetic ? ", synthetic data" : "", AvailableCores());
  std::printf("\n  %-14s %10s %16s %9s %16s %9s  %s\n", "model", "images/s", "in-run bound/s", "in-run", "GEMMs alone/s",
              "alone", "check");
  for (const std::string& w : opt_.workloads) {
    const auto found = reports_.find(w);
    if (found == reports_.end()) continue;
    const WorkloadReport& r = found->second;
    std::printf("  %-14s %10s %16s %9s %16s %9s  %s\n", w.c_str(), cell(r.ItemsPerSecond(r.figure), "%.0f").c_str(),
                cell(InRunBound(r), "%.0f").c_str(), cell(InRunRatio(r), "%.3f").c_str(),
                cell(r.ItemsPerSecond(r.anchor), "%.0f").c_str(), cell(r.Ratio(), "%.3f").c_str(),
                r.ok() ? "ok" : "FAILED");
  }
  std::printf("\nin-run checks: %s\n", failures_.empty() ? "all passed" : "FAILED (see stderr and the JSON)");
  std::fflush(stdout);
}

int TrainBench::Run() {
  auto bad = [](const std::string& what) {
    std::fprintf(stderr, "troupe bench train: %s\n", what.c_str());
    return 2;
  };
  if (opt_.json_path.empty()) return bad("--json FILE is required");
  if (opt_.repeat < 0 || opt_.repeat > 1000) return bad("--repeat must be in 1..1000");
  if (opt_.batch_size < 1 || opt_.batch_size > 4096) return bad("--batch-size must be in 1..4096");
  if (opt_.workloads.empty()) {
    return bad("--workloads needs one or more of mlp, lenet, resnet18, resnet50, resnet18-infer");
  }
  for (const std::string& w : opt_.workloads) {
    const auto& known = TrainBenchWorkloads();
    if (std::find(known.begin(), known.end(), w) == known.end()) {
      return bad("unknown workload '" + w + "' (known: mlp, lenet, resnet18, resnet50, resnet18-infer)");
    }
    if (w == kResNet50 && !opt_.synthetic) {
      return bad("resnet50 needs --synthetic (its inputs are 3 x 224 x 224 ImageNet images, not Fashion-MNIST)");
    }
  }
  if (opt_.dtype != "float32" && opt_.dtype != "bfloat16" && opt_.dtype != "float16") {
    return bad("--dtype must be float32, bfloat16 or float16, not '" + opt_.dtype + "'");
  }
  if (opt_.api != "module" && std::find(opt_.workloads.begin(), opt_.workloads.end(), std::string(kInference)) !=
                                  opt_.workloads.end()) {
    return bad("--api " + opt_.api + " applies to the training workloads; leave resnet18-infer out");
  }
  try {
    ctx_ = Context::Parse(opt_.ctx);
  } catch (const Error&) {
    ctx_ = Context::CPUPinned();  // refused below with the others
  }
  if (ctx_.dev_type == DeviceType::kCPUPinned) return bad("--ctx must be cpu or gpu:N, not '" + opt_.ctx + "'");
  if (ctx_.is_gpu()) {
    // Loads the GPU backend in a build with CUDA; 0 without CUDA, a driver or a device.
    const int gpus = Runtime::GpuCount();
    if (ctx_.dev_id >= gpus) {
      return bad("--ctx " + opt_.ctx + " needs CUDA device " + std::to_string(ctx_.dev_id) + ", and this " +
                 (gpus == 0 ? std::string("machine has none (no driver, no device, or a build without CUDA)")
                            : "machine has " + std::to_string(gpus)) +
                 "; run with --ctx cpu to measure on the CPU");
    }
  }
  if (opt_.repeat == 0) opt_.repeat = opt_.quick ? 1 : kTrainDefaultRepeat;
  {
    std::ofstream probe(opt_.json_path, std::ios::trunc);
    if (!probe) return bad("can not write " + opt_.json_path);
  }
  started_ = UtcNow();
  // The runtime sets OpenBLAS's thread count when it starts, and the anchor must run with the count the engine's
  // workers use: start the engine first.
  Engine::Get();
  std::vector<DataBatch> batches;
  const bool mnist =
      !opt_.synthetic && std::any_of(opt_.workloads.begin(), opt_.workloads.end(), [](const std::string& w) {
        return w != kInference;
      });
  if (mnist) {
    try {
      batches = LoadMnistBatches(opt_.mnist_dir, opt_.batch_size, opt_.quick ? kQuickBatches : kBatches,
                                 "troupe bench train");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "troupe bench train: %s\n", e.what());
      return 1;
    }
  }
  Log("warm-up + " + std::to_string(opt_.repeat) + " timed runs per figure; " + std::to_string(AvailableCores()) +
      " cores (" + CpuModel() + "), OpenBLAS threads " + std::to_string(openblas_get_num_threads()) + "; " +
      ctx_.ToString() + ", " + opt_.dtype + (opt_.synthetic ? ", synthetic data" : ""));
  for (const std::string& w : opt_.workloads) {
    WorkloadReport& r = reports_[w];
    r.selected = true;
    try {
      if (w == kInference) {
        RunInference(&r, opt_, ctx_);
      } else {
        RunWorkload(&r, w, opt_, ctx_, batches);
      }
    } catch (const std::exception& e) {
      r.errors.push_back(std::string("threw: ") + e.what());
      Log(w + ": FAILED: " + e.what());
      Drain();
    }
    const auto f = [&r](const Series& s) {
      return s.measured() ? Fmt("%.0f", static_cast<double>(r.items) / s.Median()) : std::string("-");
    };
    const auto g = [](std::optional<double> v) { return v ? Fmt("%.3f", *v) : std::string("-"); };
    Log(w + ": " + f(r.figure) + " images/s; in-run GEMM share " + g(InRunRatio(r)) + "; GEMMs alone " + f(r.anchor) +
        " images/s (ratio " + g(r.Ratio()) + ")" + (r.ok() ? "" : "  FAILED"));
    r.CollectFailures(w, &failures_);
  }
  Drain();
  for (const std::string& f : failures_) Log("check failed: " + f);
  const bool written = WriteJsonFile(opt_.json_path, BuildJson(), "troupe bench train");
  PrintTable();
  Log("wrote " + opt_.json_path);
  return (failures_.empty() && written) ? 0 : 1;
}

}  // namespace

const std::vector<std::string>& TrainBenchWorkloads() {
  static const std::vector<std::string> kWorkloads = {"mlp", "lenet", "resnet18", kResNet50, kInference};
  return kWorkloads;
}

int RunTrainBench(const TrainBenchOptions& options) {
  TrainBench bench(options);
  return bench.Run();
}

// --- `troupe bench train`: its declaration (bench/common/registry.h) ---------------------------------
namespace {

constexpr const char* kTrainBenchmarkDescription =
    "Measure training steps of the model definitions (graph/models.h) through the Module against the "
    "matrix products they cannot avoid, each figure alternated with its anchor in the same run. A call is one "
    "training step on a batch of Fashion-MNIST preloaded from the t10k files in --mnist-dir (copy the batch "
    "in, Forward(true), Backward, SGD with momentum per parameter); a timed run ends by waiting for the engine. "
    "The anchor is the network's sgemm calls for one step (FullyConnected forward, weight and data "
    "gradients; Convolution the same in im2col shapes per image; no data gradient for the first layer), "
    "alone, in the operators' library (oneDNN's dnnl_sgemm, or OpenBLAS with TROUPE_DNNL=0) in engine "
    "functions on the CPU worker with its kernel-thread count: images/s if only the GEMMs counted (ResNet-18 "
    "uses Winograd convolutions, which need fewer operations than the GEMMs). The workloads mlp, lenet and "
    "resnet18 (the CIFAR stem on 28 x 28 images) train; resnet50 trains ResNet-50 v1 in its ImageNet shape "
    "(3 x 224 x 224, 1000 classes) and needs --synthetic; resnet18-infer times one-image inference of the "
    "ImageNet ResNet-18 (3 x 224 x 224, Forward(false) then wait; --batch-size does not apply), against its "
    "forward GEMMs, and reports the latency in ms. --synthetic steps through random batches of each model's "
    "input shape with random labels instead of Fashion-MNIST. --ctx gpu:N runs the Module on GPU N, without "
    "an anchor (the anchor is the CPU's sgemm; the JSON gives the GEMM TFLOP/s a step implies instead); it "
    "fails with exit status 2 on a machine or build without that GPU. --dtype bfloat16 or float16 converts "
    "the training networks with MXNet's AMP (the anchor stays the float32 products). The "
    "ratio is anchor time / step time; the target is >= 0.8 for the MLP at batch 128 (reported, not enforced). "
    "Checks: the outputs are probabilities (finite, rows sum to 1) and, except with --quick or --synthetic "
    "(random labels: nothing to learn), the training accuracy over the preloaded batches after the timed "
    "steps is above 0.5 (ResNet-18: 0.2, on each batch's own BatchNorm statistics). Progress goes to stderr, "
    "a table to stdout. Exit status: 0 when every check passed, 1 when one failed (the JSON says which), 2 on "
    "bad usage.";

constexpr const char* kTrainBenchmarkExamples =
    "Examples:\n"
    "  troupe bench train --json train.json\n"
    "      MLP and LeNet at batch 128\n"
    "  troupe bench train --quick --json /tmp/smoke.json\n"
    "      two batches, one run: checks that the harness and the in-run checks pass\n"
    "  troupe bench train --workloads resnet18 --batch-size 64 --repeat 3 --json resnet.json\n"
    "      ResNet-18 training steps at batch 64 (about a second each on 2 cores)\n"
    "  troupe bench train --workloads resnet18 --batch-size 64 --dtype bfloat16 --json r18-bf16.json\n"
    "      the same in bfloat16 mixed precision\n"
    "  troupe bench train --workloads lenet,resnet18 --api hybrid --json nn.json\n"
    "      the same networks written with the module API (a hybridized block, a loss, autograd, a Trainer);\n"
    "      compare with --api module; the JSON's step_peak_bytes is a step's peak memory\n"
    "  troupe bench train --workloads resnet50 --synthetic --ctx gpu:0 --batch-size 128 --json r50.json\n"
    "      ResNet-50 training steps on GPU 0 on random ImageNet-shaped batches\n"
    "  troupe bench train --workloads resnet18-infer --json infer.json\n"
    "      ResNet-18 inference latency, one 224 x 224 image\n"
    "  troupe bench train --workloads mlp --batch-size 256 --json mlp256.json\n"
    "      only the MLP, at batch 256";

void DeclareTrainBenchmarkOptions(TrainBenchOptions* o, BenchOptionList* options) {
  options->Add("--json", &o->json_path, "Write the results to FILE (pretty-printed JSON)").Required().TypeName("FILE");
  options->Add("--quick", &o->quick, "Two batches, one repetition: a smoke run for CTest");
  options
      ->Add("--repeat", &o->repeat,
            "Timed runs per figure; the median and the best are reported (default " +
                std::to_string(kTrainDefaultRepeat) + ", 1 with --quick)")
      .Range(1, 1000)
      .TypeName("R");
  options
      ->Add("--workloads", &o->workloads,
            "Which models: any of mlp, lenet, resnet18, resnet50 (training steps; resnet50 needs --synthetic) and "
            "resnet18-infer (one-image inference)")
      .Delimiter(',')
      .Choices(TrainBenchWorkloads())
      .TypeName("LIST")
      .ShowDefault();
  options->Add("--batch-size", &o->batch_size, "Images per training step").Range(1, 4096).TypeName("B").ShowDefault();
  options->Add("--synthetic", &o->synthetic,
               "Random batches of each model's input shape and random labels instead of Fashion-MNIST (required "
               "for resnet50); the training-accuracy check does not apply, the probability checks do");
  options
      ->Add("--ctx", &o->ctx,
            "The Module's device: cpu, or gpu:N (no anchor there; exit status 2 without that GPU)")
      .TypeName("DEVICE")
      .ShowDefault();
  options
      ->Add("--dtype", &o->dtype,
            "Arithmetic of the training workloads: float32, or bfloat16 / float16 (MXNet's AMP conversion: "
            "convolutions and fully connected layers in that type, float32 parameters and optimizer)")
      .Choices({"float32", "bfloat16", "float16"})
      .TypeName("TYPE")
      .ShowDefault();
  options
      ->Add("--api", &o->api,
            "How the training step is written: module (Module Forward/Backward/Update), or the module API (nn/): "
            "hybrid (the network as a hybridized block, softmax cross-entropy loss, autograd, Trainer) or "
            "imperative (the same run operator by operator)")
      .Choices({"module", "hybrid", "imperative"})
      .TypeName("API")
      .ShowDefault();
  options->Add("--mnist-dir", &o->mnist_dir, "Folder of the Fashion-MNIST t10k-* .gz files")
      .TypeName("DIR")
      .ShowDefault();
}

}  // namespace

Benchmark TrainBenchmark() {
  return MakeBenchmark<TrainBenchOptions>(
      "train", "Training steps (MLP, LeNet, ResNet-18, ResNet-50) and ResNet-18 inference against their GEMMs alone",
      std::string(kTrainBenchmarkDescription) + "\n\n" + kTrainBenchmarkExamples + "\n", &DeclareTrainBenchmarkOptions,
      &RunTrainBench);
}

}  // namespace troupe::bench
