// `troupe bench train`: training speed of the model definitions (graph/models.h) through the Module,
// against the matrix products they cannot avoid.
//
// What is measured, per workload (mlp, lenet, resnet18: the networks of `troupe train --model`, ResNet-18 with
// the CIFAR stem on 28 x 28 images): a call is one training step of a Module on one batch of
// Fashion-MNIST (batch --batch-size, preloaded into memory from the t10k files so that reading is not
// timed): copy the batch in, Forward(true), Backward, one SGD update (momentum 0.9) per parameter, then
// the timed run waits for the engine to finish. Images/s = batch / seconds per step.
//
// resnet50: the same step for ResNet-50 v1 (models::ResNet(50, 1000, false)) on 3 x 224 x 224 images of 1000
// classes; it needs --synthetic. --synthetic replaces the Fashion-MNIST batches of every training workload by a
// few random batches of the model's input shape with random labels, made on the Module's context.
//
// --ctx gpu:N: the Module runs on that GPU (its absence is a usage error); there is no anchor there.
// --dtype bfloat16 / float16: the training networks converted by amp::ConvertSymbol (MXNet's AMP).
//
// resnet18-infer: one call is Forward(false) of the ImageNet ResNet-18 (1000 classes) on one random
// 3 x 224 x 224 image, then the wait for its output: the latency MXNet's users measured with a Module.
//
// The anchor (the in-run bound, CPU only): the sgemm calls of the network's FullyConnected and Convolution
// layers for one step (forward only for resnet18-infer), alone, in the library of the operators' products
// (oneDNN's dnnl_sgemm, or OpenBLAS with TROUPE_DNNL=0), in engine functions on the CPU worker with its
// kernel-thread count (bench/common/cpu_kernels.h says why): FullyConnected forward Y = X W^T, backward
// dW = dY^T X and dX = dY W (none for the first layer, whose input needs no gradient); Convolution per image in
// im2col shapes: forward (F x CKK)(CKK x HW), backward-weight (F x HW)(HW x CKK), backward-data (CKK x F)(F x HW)
// (none for the first layer). They stay the float32 products with --dtype.
// "Images/s if only kernel time counted" = batch / anchor seconds. The ratio is anchor time / step time;
// the target is >= 0.8 for the MLP at batch 128 (LeNet is reported, im2col/col2im and the activations
// being outside the bound).
//
// In-run checks: the network's outputs are probabilities (finite, each row sums to 1), and training on the
// preloaded batches works: the training accuracy over them after the timed runs is above chance (0.5,
// ResNet-18 0.2 on each batch's own BatchNorm statistics; with --quick or --synthetic only the probabilities
// are checked: synthetic labels are random).
#pragma once

#include <string>
#include <vector>

#include "bench/common/registry.h"

namespace troupe::bench {

struct TrainBenchOptions {
  std::string json_path;  // required
  bool quick = false;     // few batches, one repetition: a smoke run for CTest
  int repeat = 0;         // timed runs per figure; 0: kTrainDefaultRepeat (1 with quick)
  std::vector<std::string> workloads = {"mlp", "lenet"};  // also resnet18, resnet50, resnet18-infer
  int batch_size = 128;
  // Random batches of each model's input shape and random labels instead of Fashion-MNIST (resnet50 needs it).
  bool synthetic = false;
  // The Module's context (Context::Parse): "cpu" or "gpu:N".
  std::string ctx = "cpu";
  // The training workloads' arithmetic: "float32", or "bfloat16" / "float16" (the network converted by
  // amp::ConvertSymbol; parameters and the optimizer stay float32).
  std::string dtype = "float32";
  // How the training step is written: "module" (Module: Forward, Backward, Update), or with the module API
  // (nn/): the same network as a block, softmax cross-entropy, autograd and a Trainer, "hybrid" (block and loss
  // hybridized into CachedOps) or "imperative" (operator by operator).
  std::string api = "module";
  std::string mnist_dir = "/usr/share/datasets/fashion-mnist";
};

inline constexpr int kTrainDefaultRepeat = 5;

const std::vector<std::string>& TrainBenchWorkloads();
int RunTrainBench(const TrainBenchOptions& options);

// `troupe bench train`: the name, options, help and run function above, for the bench registry
// (bench/benchmarks.h).
Benchmark TrainBenchmark();

}  // namespace troupe::bench
