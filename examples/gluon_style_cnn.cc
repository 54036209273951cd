// gluon_style_cnn — a LeNet written as a C++ block (nn/), trained imperatively on Fashion-MNIST with autograd
// and a Trainer, hybridized, and exported for MXNet: the way Gluon scripts train.
//
// Shown: a HybridBlock with child layers, deferred shapes (no input sizes given), Initialize, Hybridize,
// a DataLoader with background workers over the MNIST files, RecordScope + Backward + Trainer::Step, the
// accuracy metric, and Export (PREFIX-symbol.json and PREFIX-%04d.params, loadable by MXNet 1.9.1's
// SymbolBlock.imports and by nn::SymbolBlock::Imports), with PREFIX-check.params: a test batch and the block's
// outputs on it.
//
// --kvstore dist_sync (or dist_device_sync / dist_async) trains on a cluster started by `troupe launch`: each
// worker takes its part of the training images and batch / workers of every batch, and the Trainer pushes the
// gradients and pulls the weights the servers updated, so that a step is the single process's step over the
// whole batch:
//   troupe launch -n 2 -s 1 -- gluon_style_cnn --kvstore dist_sync
//
// --compare-module trains the same network with the Module (graph/models.h's LeNet symbol) from the same
// initial parameters over the same batches, epoch by epoch, and prints both test accuracies: the two paths
// compute the same model.
//
// Usage: gluon_style_cnn [--epochs N] [--batch-size B] [--lr X] [--momentum M] [--train-images N (0 = all)]
//                        [--test-images N (0 = all)] [--seed S] [--workers W] [--imperative]
//                        [--export PREFIX] [--compare-module] [--kvstore TYPE] [--data-dir DIR]
//                        [--min-accuracy A]
// Exit status 0 when the final test accuracy reaches --min-accuracy (and, with --compare-module, the two
// accuracies are within 0.005).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "graph/models.h"
#include "io/io.h"
#include "kvstore/dist.h"
#include "kvstore/kvstore.h"
#include "nn/basic_layers.h"
#include "nn/block.h"
#include "nn/conv_layers.h"
#include "nn/data_loader.h"
#include "nn/loss.h"
#include "nn/trainer.h"
#include "op/autograd.h"
#include "op/initializer.h"
#include "tensor/resource.h"
#include "train/train.h"

namespace {

using troupe::NDArray;
using troupe::Symbol;
namespace nn = troupe::nn;

// LeNet: conv 5x5x20 -> tanh -> max pool 2 -> conv 5x5x50 -> tanh -> max pool 2 -> dense 500 tanh -> dense 10.
// The prefixes give the parameters the Module symbol's names (conv1_weight, ..., fc2_bias).
class LeNet : public nn::HybridBlock {
 public:
  LeNet() : HybridBlock("", "lenet") {
    conv1_ = RegisterChild("conv1", std::make_shared<nn::Conv2D>(20, std::vector<int>{5, 5}, std::vector<int>{},
                                                                 std::vector<int>{}, std::vector<int>{}, 1, "tanh",
                                                                 true, 0, "", "zeros", "conv1_"));
    pool1_ = RegisterChild("pool1", std::make_shared<nn::MaxPool2D>());
    conv2_ = RegisterChild("conv2", std::make_shared<nn::Conv2D>(50, std::vector<int>{5, 5}, std::vector<int>{},
                                                                 std::vector<int>{}, std::vector<int>{}, 1, "tanh",
                                                                 true, 0, "", "zeros", "conv2_"));
    pool2_ = RegisterChild("pool2", std::make_shared<nn::MaxPool2D>());
    flatten_ = RegisterChild("flatten", std::make_shared<nn::Flatten>());
    fc1_ = RegisterChild("fc1", std::make_shared<nn::Dense>(500, "tanh", true, true, 0, "", "zeros", "fc1_"));
    fc2_ = RegisterChild("fc2", std::make_shared<nn::Dense>(10, "", true, true, 0, "", "zeros", "fc2_"));
  }
  std::vector<Symbol> HybridForward(const std::vector<Symbol>& x) override {
    Symbol y = (*pool1_)((*conv1_)(x.at(0)));
    y = (*flatten_)((*pool2_)((*conv2_)(y)));
    return {(*fc2_)((*fc1_)(y))};
  }

 private:
  std::shared_ptr<nn::Conv2D> conv1_, conv2_;
  std::shared_ptr<nn::MaxPool2D> pool1_, pool2_;
  std::shared_ptr<nn::Flatten> flatten_;
  std::shared_ptr<nn::Dense> fc1_, fc2_;
};

void Usage() {
  std::puts(
      "usage: gluon_style_cnn [--epochs N] [--batch-size B] [--lr X] [--momentum M] [--train-images N (0 = all)]\n"
      "                       [--test-images N (0 = all)] [--seed S] [--workers W] [--imperative]\n"
      "                       [--export PREFIX] [--compare-module] [--kvstore TYPE] [--data-dir DIR]\n"
      "                       [--min-accuracy A]\n"
      "Trains a LeNet block on Fashion-MNIST with autograd and a Trainer (sgd), hybridized unless --imperative,\n"
      "with W DataLoader workers (default 1); prints the test accuracy every epoch. --export writes\n"
      "PREFIX-symbol.json and PREFIX-%04d.params after the last epoch. --compare-module trains the Module on\n"
      "the same batches from the same start and prints its accuracy too. --kvstore dist_sync: a worker of a\n"
      "cluster started by `troupe launch -n W -s S -- gluon_style_cnn ...` (each worker trains on its part of\n"
      "the images with batch B / W; worker 0 exports).\n"
      "Exits 1 when the final test accuracy is below --min-accuracy, or the Module's differs by more than 0.005.");
}

// A data set of the first `images` images of an MNIST file pair (0: all), unshuffled.
std::shared_ptr<nn::ArrayDataset> Load(const std::string& dir, const std::string& stem, std::int64_t total,
                                       std::int64_t images) {
  const int parts = images == 0 ? 1 : static_cast<int>(std::max<std::int64_t>(1, total / images));
  auto it = troupe::CreateDataIter("MNISTIter", {{"image", dir + "/" + stem + "-images-idx3-ubyte.gz"},
                                                 {"label", dir + "/" + stem + "-labels-idx1-ubyte.gz"},
                                                 {"batch_size", "1000"},
                                                 {"shuffle", "False"},
                                                 {"num_parts", std::to_string(parts)},
                                                 {"part_index", "0"}});
  return nn::ArrayDataset::FromIter(it.get());
}

// Test accuracy of predictions computed by `predict` over the test set (whole batches only: the Module is
// bound to one batch size).
template <typename F>
double Accuracy(const std::shared_ptr<nn::ArrayDataset>& test, int batch_size, F predict) {
  auto metric = troupe::EvalMetric::Create("acc");
  nn::DataLoader loader(test, batch_size, false, "discard");
  std::vector<NDArray> b;
  while (loader.Next(&b)) metric->Update({b[1]}, {predict(b)});
  return metric->Get();
}

}  // namespace

int main(int argc, char** argv) {
  int epochs = 10, batch_size = 100, workers = 1;
  double lr = 0.05, momentum = 0.9, min_accuracy = 0;
  std::int64_t train_images = 0, test_images = 0;
  std::uint64_t seed = 1;
  bool hybridize = true, compare = false;
  std::string data_dir = troupe::kFashionMnistDir, export_prefix, kvstore = "device";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--epochs" && has_value) {
      epochs = std::atoi(argv[++i]);
    } else if (arg == "--batch-size" && has_value) {
      batch_size = std::atoi(argv[++i]);
    } else if (arg == "--lr" && has_value) {
      lr = std::atof(argv[++i]);
    } else if (arg == "--momentum" && has_value) {
      momentum = std::atof(argv[++i]);
    } else if (arg == "--train-images" && has_value) {
      train_images = std::atoll(argv[++i]);
    } else if (arg == "--test-images" && has_value) {
      test_images = std::atoll(argv[++i]);
    } else if (arg == "--seed" && has_value) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--workers" && has_value) {
      workers = std::atoi(argv[++i]);
    } else if (arg == "--kvstore" && has_value) {
      kvstore = argv[++i];
    } else if (arg == "--export" && has_value) {
      export_prefix = argv[++i];
    } else if (arg == "--data-dir" && has_value) {
      data_dir = argv[++i];
    } else if (arg == "--min-accuracy" && has_value) {
      min_accuracy = std::atof(argv[++i]);
    } else if (arg == "--imperative") {
      hybridize = false;
    } else if (arg == "--compare-module") {
      compare = true;
    } else {
      Usage();
      return arg == "--help" ? 0 : 2;
    }
  }
  if (epochs < 1 || batch_size < 1 || workers < 0 || train_images < 0 || test_images < 0) {
    Usage();
    return 2;
  }
  const bool dist = kvstore.rfind("dist", 0) == 0;
  if (dist) {
    // Scheduler or server (MXNet's habit: one program for every role): run the role until the cluster ends.
    const int role_status = troupe::RunDistRoleFromEnv();
    if (role_status >= 0) return role_status;
    if (std::getenv("DMLC_ROLE") == nullptr) {
      std::fprintf(stderr, "gluon_style_cnn: --kvstore %s is for a worker of a cluster; start it with\n"
                           "  troupe launch -n 2 -s 1 -- %s --kvstore %s\n", kvstore.c_str(), argv[0], kvstore.c_str());
      return 2;
    }
    if (compare) {
      std::fprintf(stderr, "gluon_style_cnn: --compare-module runs in one process; leave out --kvstore %s\n",
                   kvstore.c_str());
      return 2;
    }
  }
  try {
    // On a cluster: join it first (rank and worker count decide this worker's part of the data).
    std::shared_ptr<troupe::KVStore> store;
    int rank = 0, num_workers = 1;
    if (dist) {
      store = troupe::KVStore::Create(kvstore);
      rank = store->rank();
      num_workers = store->num_workers();
      if (batch_size % num_workers != 0) {
        throw troupe::Error("--batch-size " + std::to_string(batch_size) + " is not a multiple of the " +
                            std::to_string(num_workers) + " workers");
      }
    }
    auto train = Load(data_dir, "train", 60000, train_images);
    if (dist) {
      // This worker's contiguous part of the training images.
      const auto [begin, end] = troupe::ShardRange(train->size(), num_workers, rank, "gluon_style_cnn");
      std::vector<NDArray> part;
      for (const NDArray& f : train->fields()) {
        part.push_back(f.Slice(static_cast<std::int64_t>(begin), static_cast<std::int64_t>(end)));
      }
      train = std::make_shared<nn::ArrayDataset>(part);
    }
    auto test = Load(data_dir, "t10k", 10000, test_images);
    const int local_batch = batch_size / num_workers;
    std::printf("gluon_style_cnn: %zu training and %zu test images, %d epochs, batch %d, sgd lr %g momentum %g, %s%s\n",
                train->size(), test->size(), epochs, batch_size, lr, momentum, hybridize ? "hybridized" : "imperative",
                dist ? (", worker " + std::to_string(rank) + " of " + std::to_string(num_workers) + " (" + kvstore +
                        ", batch " + std::to_string(local_batch) + " here)").c_str()
                     : "");

    auto net = std::make_shared<LeNet>();
    troupe::ResourceManager::Get()->SeedRandom(seed);
    net->Initialize("xavier");
    (*net)(NDArray::Zeros({1, 1, 28, 28}, troupe::Context::CPU()));  // completes the deferred shapes
    if (hybridize) net->Hybridize();
    const troupe::OptimizerConfig sgd{"sgd", {{"learning_rate", std::to_string(lr)}, {"momentum", std::to_string(momentum)}}};
    nn::Trainer trainer(net->CollectParams(), sgd, kvstore, store);
    nn::SoftmaxCrossEntropyLoss loss_fn;

    // The Module on the same symbol-level network, from the block's initial parameters.
    std::unique_ptr<troupe::Module> mod;
    if (compare) {
      mod = std::make_unique<troupe::Module>(troupe::models::LeNet());
      mod->Bind({troupe::TShape{batch_size, 1, 28, 28}}, {troupe::TShape{batch_size}});
      std::map<std::string, NDArray> start;
      for (const auto& p : net->CollectParams()) start[p->name()] = p->Data().CopyTo(troupe::Context::CPU());
      mod->InitParams(*troupe::Initializer::Create("xavier"), start);
      troupe::OptimizerConfig c = sgd;
      c.params.emplace_back("rescale_grad", std::to_string(1.0 / batch_size));
      mod->InitOptimizer(c);
    }

    double accuracy = 0, module_accuracy = 0;
    for (int epoch = 0; epoch < epochs; ++epoch) {
      // The same order for both paths: a loader per path and epoch, seeded by the epoch.
      nn::DataLoader loader(train, local_batch, true, "discard", workers, seed + static_cast<std::uint64_t>(epoch));
      auto metric = troupe::EvalMetric::Create("acc");
      std::vector<NDArray> b;
      const auto t0 = std::chrono::steady_clock::now();
      while (loader.Next(&b)) {
        NDArray out, loss;
        {
          troupe::autograd::RecordScope record;
          out = (*net)(b[0]);
          loss = loss_fn(out, b[1]);
        }
        troupe::autograd::Backward({loss});
        trainer.Step(batch_size);  // the whole batch: on a cluster the servers sum every worker's gradients
        metric->Update({b[1]}, {out});
      }
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      accuracy = Accuracy(test, batch_size, [&](const std::vector<NDArray>& t) { return (*net)(t[0]); });
      std::printf("Epoch[%d] Train-accuracy=%f Validation-accuracy=%f Time cost=%.3f (%.0f images/s)\n", epoch,
                  metric->Get(), accuracy, secs, static_cast<double>(loader.num_batches() * local_batch) / secs);
      if (mod) {
        nn::DataLoader same(train, batch_size, true, "discard", workers, seed + static_cast<std::uint64_t>(epoch));
        const auto m0 = std::chrono::steady_clock::now();
        while (same.Next(&b)) {
          troupe::DataBatch batch;
          batch.data = {b[0]};
          batch.label = {b[1]};
          mod->Forward(batch, true);
          mod->Backward();
          mod->Update();
        }
        mod->GetOutputs()[0].WaitToRead();
        const double msecs = std::chrono::duration<double>(std::chrono::steady_clock::now() - m0).count();
        module_accuracy = Accuracy(test, batch_size, [&](const std::vector<NDArray>& t) {
          troupe::DataBatch batch;
          batch.data = {t[0]};
          batch.label = {t[1]};
          mod->Forward(batch, false);
          return mod->GetOutputs()[0].CopyTo(troupe::Context::CPU());
        });
        std::printf("Epoch[%d] Module Validation-accuracy=%f Time cost=%.3f (difference %+.4f)\n", epoch,
                    module_accuracy, msecs, accuracy - module_accuracy);
      }
      std::fflush(stdout);
    }
    if (store) store->Finalize();  // leaves the cluster in order
    if (!export_prefix.empty() && rank == 0) {
      net->Hybridize();
      net->Export(export_prefix, epochs);
      // A test batch and this block's outputs on it, for checking the export elsewhere (MXNet's
      // SymbolBlock.imports: bench/nn/mxnet_imports.py).
      nn::DataLoader first(test, batch_size);
      std::vector<NDArray> t;
      first.Next(&t);
      NDArray::Save(export_prefix + "-check.params", {t[0], (*net)(t[0])}, {"data", "output"});
      std::printf("exported %s-symbol.json and %s-%04d.params (a test batch and its outputs: %s-check.params)\n",
                  export_prefix.c_str(), export_prefix.c_str(), epochs, export_prefix.c_str());
    }
    std::printf("final test accuracy %.4f\n", accuracy);
    if (accuracy < min_accuracy) {
      std::printf("below --min-accuracy %.4f\n", min_accuracy);
      return 1;
    }
    if (compare && std::abs(accuracy - module_accuracy) > 0.005) {
      std::printf("the Module's accuracy %.4f differs by more than 0.005\n", module_accuracy);
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gluon_style_cnn: %s\n", e.what());
    return 1;
  }
}
