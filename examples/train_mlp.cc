// train_mlp — the C++ training API at its shortest: a program to copy and change.
//
// Shown: a network built by hand with the Symbol API (Variable, FullyConnected, Activation, SoftmaxOutput),
// MNISTIter over Fashion-MNIST's idx files (the Debian package dataset-fashion-mnist), Module::Fit with SGD,
// and Module::Score on the test set. train_fashion_mnist does the same with every option (models.h
// networks, learning-rate steps, checkpoints, resuming); this one is the minimum.
//
// Usage: train_mlp [--data-dir DIR] [--epochs N] [--parts K] [--min-accuracy A]
//   --parts K trains on the first 1/K of the training set and tests on the first 1/K of the test set
//   (MNISTIter's num_parts), for a quick run.
// Exit status 0 when the test accuracy reaches --min-accuracy (default 0), 1 below it or on an error
// (a missing data file is named), 2 on bad arguments.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "io/io.h"
#include "graph/symbol.h"
#include "train/train.h"

using troupe::Symbol;

int main(int argc, char** argv) {
  std::string dir = "/usr/share/datasets/fashion-mnist";
  int epochs = 5, parts = 1;
  double min_accuracy = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--data-dir" && i + 1 < argc) {
      dir = argv[++i];
    } else if (arg == "--epochs" && i + 1 < argc) {
      epochs = std::atoi(argv[++i]);
    } else if (arg == "--parts" && i + 1 < argc) {
      parts = std::atoi(argv[++i]);
    } else if (arg == "--min-accuracy" && i + 1 < argc) {
      min_accuracy = std::atof(argv[++i]);
    } else {
      std::puts("usage: train_mlp [--data-dir DIR] [--epochs N] [--parts K] [--min-accuracy A]\n"
                "Trains a 784-128-64-10 MLP on Fashion-MNIST (DIR/*-idx*-ubyte.gz) with SGD and reports the\n"
                "test accuracy; --parts K uses the first 1/K of each set. Exits 1 below --min-accuracy.");
      return arg == "--help" || arg == "-h" ? 0 : 2;
    }
  }
  if (epochs < 1 || parts < 1) {
    std::fprintf(stderr, "train_mlp: --epochs and --parts must be >= 1\n");
    return 2;
  }
  try {
    // The network: data -> 128 relu -> 64 relu -> 10 -> softmax. FullyConnected flattens (batch, 1, 28, 28)
    // itself; the weights and biases become arguments named fc1_weight, fc1_bias, ...
    Symbol net = Symbol::Variable("data");
    net = Symbol::Create("FullyConnected", {{"num_hidden", "128"}}, {net}, "fc1");
    net = Symbol::Create("Activation", {{"act_type", "relu"}}, {net}, "relu1");
    net = Symbol::Create("FullyConnected", {{"num_hidden", "64"}}, {net}, "fc2");
    net = Symbol::Create("Activation", {{"act_type", "relu"}}, {net}, "relu2");
    net = Symbol::Create("FullyConnected", {{"num_hidden", "10"}}, {net}, "fc3");
    net = Symbol::Create("SoftmaxOutput", {}, {net}, "softmax");  // its label argument: softmax_label

    // The data: batches of 100 images and labels, the training set shuffled.
    auto mnist = [&](const std::string& set, bool shuffle) {
      return troupe::CreateDataIter("MNISTIter", {{"image", dir + "/" + set + "-images-idx3-ubyte.gz"},
                                                  {"label", dir + "/" + set + "-labels-idx1-ubyte.gz"},
                                                  {"batch_size", "100"},
                                                  {"shuffle", shuffle ? "True" : "False"},
                                                  {"num_parts", std::to_string(parts)}});
    };
    auto train = mnist("train", true);
    auto test = mnist("t10k", false);

    // Fit: binds the network to the batch shapes, initialises the weights (Xavier), and runs SGD for
    // `epochs` passes, printing the training and test accuracy after each.
    troupe::Module mod(net);  // inputs "data" and "softmax_label", on the CPU
    troupe::FitOptions options;
    options.optimizer.type = "sgd";
    options.optimizer.params = {{"learning_rate", "0.05"}, {"momentum", "0.9"}};
    options.num_epoch = epochs;
    options.epoch_end_callbacks.push_back([](int epoch, const troupe::EvalMetric& train_metric,
                                             const troupe::EvalMetric* test_metric) {
      std::printf("epoch %d: train %s %.4f, test %s %.4f\n", epoch, train_metric.name().c_str(), train_metric.Get(),
                  test_metric->name().c_str(), test_metric->Get());
    });
    mod.Fit(train.get(), test.get(), options);

    const double accuracy = mod.Score(test.get(), "acc").second;
    std::printf("test accuracy %.4f (%s)\n", accuracy, accuracy >= min_accuracy ? "ok" : "below --min-accuracy");
    return accuracy >= min_accuracy ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_mlp: %s\n", e.what());
    return 1;
  }
}
