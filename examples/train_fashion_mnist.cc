// train_fashion_mnist — train an MLP or a LeNet-style network on Fashion-MNIST with the Module, as MXNet's
// example/image-classification/train_mnist.py does.
//
// Shown: a network from graph/models.h, MNISTIter over the idx files (the Debian package
// dataset-fashion-mnist), Module::Fit with SGD, the Speedometer progress line, the per-epoch train and
// test accuracy, and checkpoints in MXNet's naming (PREFIX-symbol.json, PREFIX-0003.params, and the
// optimizer's PREFIX-0003.states) that a later run resumes from with --begin-epoch.
//
// Usage: train_fashion_mnist [--model mlp|lenet] [--epochs N] [--batch-size B] [--lr X] [--momentum M]
//                            [--lr-step-epochs E1,E2,... --lr-factor F]
//                            [--train-images N (0 = all)] [--test-images N (0 = all)]
//                            [--checkpoint PREFIX] [--begin-epoch K]
//                            [--data-dir DIR] [--seed S] [--frequent F] [--engine actor|naive]
//                            [--min-accuracy A]
// Exit status 0 when the final test accuracy reaches --min-accuracy (default 0: always).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "io/io.h"
#include "graph/models.h"
#include "train/train.h"

namespace {

constexpr std::int64_t kTrainImages = 60000;  // Fashion-MNIST's training set
constexpr std::int64_t kTestImages = 10000;

void Usage() {
  std::puts(
      "usage: train_fashion_mnist [--model mlp|lenet] [--epochs N] [--batch-size B] [--lr X] [--momentum M]\n"
      "                           [--lr-step-epochs E1,E2,... --lr-factor F]\n"
      "                           [--train-images N (0 = all)] [--test-images N (0 = all)]\n"
      "                           [--checkpoint PREFIX] [--begin-epoch K]\n"
      "                           [--data-dir DIR] [--seed S] [--frequent F] [--engine actor|naive]\n"
      "                           [--min-accuracy A]\n"
      "Trains on Fashion-MNIST (MNISTIter over DIR/*-idx*-ubyte.gz; a subset is the first 1/k of a file)\n"
      "with SGD, printing the progress line every F batches and the train / test accuracy every epoch.\n"
      "--checkpoint writes PREFIX-symbol.json and PREFIX-%04d.params (+ .states) after every epoch;\n"
      "--begin-epoch K resumes from PREFIX-K.\n"
      "Exits 1 when the final test accuracy is below --min-accuracy.");
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "mlp", checkpoint, data_dir = "/usr/share/datasets/fashion-mnist";
  int epochs = 10, batch_size = 100, begin_epoch = 0, frequent = 100;
  double lr = 0.05, momentum = 0.9, min_accuracy = 0;
  std::int64_t train_images = 0, test_images = 0;
  std::vector<int> lr_steps;  // epochs after which the learning rate is multiplied by lr_factor
  double lr_factor = 0.1;
  std::uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--model" && has_value) {
      model = argv[++i];
    } else if (arg == "--epochs" && has_value) {
      epochs = std::atoi(argv[++i]);
    } else if (arg == "--batch-size" && has_value) {
      batch_size = std::atoi(argv[++i]);
    } else if (arg == "--lr" && has_value) {
      lr = std::atof(argv[++i]);
    } else if (arg == "--lr-step-epochs" && has_value) {
      // "10,15": MXNet's train_mnist.py option (a MultiFactorScheduler at epoch boundaries).
      lr_steps.clear();
      std::stringstream list(argv[++i]);
      for (std::string item; std::getline(list, item, ',');) {
        if (!item.empty()) lr_steps.push_back(std::atoi(item.c_str()));
      }
    } else if (arg == "--lr-factor" && has_value) {
      lr_factor = std::atof(argv[++i]);
    } else if (arg == "--momentum" && has_value) {
      momentum = std::atof(argv[++i]);
    } else if (arg == "--train-images" && has_value) {
      train_images = std::atoll(argv[++i]);
    } else if (arg == "--test-images" && has_value) {
      test_images = std::atoll(argv[++i]);
    } else if (arg == "--checkpoint" && has_value) {
      checkpoint = argv[++i];
    } else if (arg == "--begin-epoch" && has_value) {
      begin_epoch = std::atoi(argv[++i]);
    } else if (arg == "--data-dir" && has_value) {
      data_dir = argv[++i];
    } else if (arg == "--seed" && has_value) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--frequent" && has_value) {
      frequent = std::atoi(argv[++i]);
    } else if (arg == "--min-accuracy" && has_value) {
      min_accuracy = std::atof(argv[++i]);
    } else if (arg == "--engine" && has_value) {
      // The process's default engine (Engine::Get) is chosen from TROUPE_ENGINE on first use; the data
      // iterators and the module all use it.
      const std::string e = argv[++i];
      if (e != "actor" && e != "naive") {
        Usage();
        return 2;
      }
      ::setenv("TROUPE_ENGINE", e.c_str(), 1);
    } else {
      Usage();
      return arg == "--help" ? 0 : 2;
    }
  }
  if ((model != "mlp" && model != "lenet") || epochs < 1 || batch_size < 1 || train_images < 0 || test_images < 0 ||
      begin_epoch < 0) {
    Usage();
    return 2;
  }
  try {
    // A subset: part 0 of the training file split into `parts` contiguous parts (MNISTIter's num_parts).
    const int parts = train_images == 0 ? 1 : static_cast<int>(std::max<std::int64_t>(1, kTrainImages / train_images));
    const int test_parts =
        test_images == 0 ? 1 : static_cast<int>(std::max<std::int64_t>(1, kTestImages / test_images));
    const std::string bs = std::to_string(batch_size);
    auto train = troupe::CreateDataIter("MNISTIter", {{"image", data_dir + "/train-images-idx3-ubyte.gz"},
                                                      {"label", data_dir + "/train-labels-idx1-ubyte.gz"},
                                                      {"batch_size", bs},
                                                      {"shuffle", "True"},
                                                      {"seed", std::to_string(seed)},
                                                      {"num_parts", std::to_string(parts)},
                                                      {"part_index", "0"}});
    auto test = troupe::CreateDataIter("MNISTIter", {{"image", data_dir + "/t10k-images-idx3-ubyte.gz"},
                                                     {"label", data_dir + "/t10k-labels-idx1-ubyte.gz"},
                                                     {"batch_size", bs},
                                                     {"shuffle", "False"},
                                                     {"num_parts", std::to_string(test_parts)},
                                                     {"part_index", "0"}});
    troupe::Symbol net = model == "mlp" ? troupe::models::MLP() : troupe::models::LeNet();
    troupe::Module mod(net);

    // The learning rate of an epoch: lr times lr_factor for every step epoch already passed (so a resumed
    // run starts with the rate the uninterrupted one had).
    auto lr_at = [&](int epoch) {
      double r = lr;
      for (int s : lr_steps) r *= epoch >= s ? lr_factor : 1.0;
      return r;
    };
    troupe::FitOptions o;
    o.optimizer.type = "sgd";
    o.optimizer.params = {{"learning_rate", std::to_string(lr_at(begin_epoch))},
                          {"momentum", std::to_string(momentum)}};
    o.num_epoch = epochs;
    o.begin_epoch = begin_epoch;
    o.seed = seed;
    o.checkpoint_prefix = checkpoint;
    auto log = [](const std::string& line) { std::printf("%s\n", line.c_str()); };
    o.batch_end_callbacks.push_back(troupe::Speedometer(batch_size, frequent, log));
    // Epoch time and images/s over the training batches (the test pass, which Fit runs before the epoch
    // callbacks, is left out).
    auto epoch_start = std::chrono::steady_clock::now(), last_batch = epoch_start;
    std::int64_t epoch_batches = 0;
    o.batch_end_callbacks.push_back([&](const troupe::BatchEndParam& p) {
      last_batch = std::chrono::steady_clock::now();
      if (p.nbatch == 1) epoch_start = last_batch;
      epoch_batches = p.nbatch;
    });
    double final_accuracy = 0;
    o.epoch_end_callbacks.push_back([&](int epoch, const troupe::EvalMetric& tm, const troupe::EvalMetric* em) {
      const double secs = std::chrono::duration<double>(last_batch - epoch_start).count();
      // The first batch's time is outside the window (its callback starts the clock).
      const double ips = secs > 0 ? static_cast<double>((epoch_batches - 1) * batch_size) / secs : 0;
      std::printf("Epoch[%d] Train-%s=%f\n", epoch, tm.name().c_str(), tm.Get());
      std::printf("Epoch[%d] Time cost=%.3f (%.0f images/s, %lld training images)\n", epoch, secs, ips,
                  static_cast<long long>(tm.num_samples()));
      if (em) {
        std::printf("Epoch[%d] Validation-%s=%f\n", epoch, em->name().c_str(), em->Get());
        final_accuracy = em->Get();
      }
      std::fflush(stdout);
      if (lr_at(epoch + 1) != lr_at(epoch)) {
        mod.optimizer()->SetLearningRate(static_cast<float>(lr_at(epoch + 1)));
        std::printf("Epoch[%d] learning rate now %g\n", epoch + 1, lr_at(epoch + 1));
      }
    });
    std::printf("train_fashion_mnist: model %s, %d epochs from %d, batch %d, sgd lr %g momentum %g, %s\n",
                model.c_str(), epochs, begin_epoch, batch_size, lr, momentum,
                parts == 1 ? "all 60000 training images"
                           : ("part 0 of " + std::to_string(parts) + " of the training images").c_str());
    mod.Fit(train.get(), test.get(), o);
    if (begin_epoch >= epochs) final_accuracy = mod.Score(test.get()).second;
    std::printf("final test accuracy %.4f\n", final_accuracy);
    if (final_accuracy < min_accuracy) {
      std::printf("below --min-accuracy %.4f\n", min_accuracy);
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_fashion_mnist: %s\n", e.what());
    return 1;
  }
}
