// `troupe train`: see tools/train_command.h.
#include "tools/train_command.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "io/io.h"
#include "kvstore/kvstore.h"
#include "graph/models.h"
#include "tools/symbol_net.h"
#include "train/train.h"

namespace troupe::tools {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kFashionMnist = "/usr/share/datasets/fashion-mnist";

bool StartsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

bool Exists(const std::string& path) { return ::access(path.c_str(), R_OK) == 0; }

// "cpu:0,cpu:1" or "gpu:0" (a bare "cpu" / "gpu" is device 0).
std::vector<Context> ParseDevices(const std::string& text) {
  std::vector<Context> out;
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) {
    const auto colon = item.find(':');
    const std::string kind = item.substr(0, colon);
    int id = 0;
    if (colon != std::string::npos) {
      const std::string num = item.substr(colon + 1);
      char* end = nullptr;
      const long v = std::strtol(num.c_str(), &end, 10);
      if (num.empty() || *end != '\0' || v < 0 || v > 1023) {
        throw Error("--devices: bad device '" + item + "' (want cpu:N or gpu:N)");
      }
      id = static_cast<int>(v);
    }
    if (kind == "cpu") {
      out.push_back(Context::CPU(id));
    } else if (kind == "gpu") {
      out.push_back(Context::GPU(id));
    } else {
      throw Error("--devices: bad device '" + item + "' (want cpu:N or gpu:N)");
    }
  }
  if (out.empty()) throw Error("--devices: no device given (e.g. cpu:0 or cpu:0,cpu:1)");
  return out;
}

// What Fit reads of --data: at most `max_batches` batches of `base` per epoch (0: all; --train-images,
// --test-images), and labels of shape (batch, 1) (CSVIter's with label_shape (1)) as (batch) for
// SoftmaxOutput. The reshaped labels are views: no copy.
class FitIter : public DataIter {
 public:
  FitIter(std::unique_ptr<DataIter> base, std::int64_t max_batches) : base_(std::move(base)), max_(max_batches) {}
  void BeforeFirst() override {
    base_->BeforeFirst();
    done_ = 0;
  }
  bool Next() override {
    if (max_ > 0 && done_ >= max_) return false;
    if (!base_->Next()) return false;
    ++done_;
    batch_ = base_->Value();
    for (auto& l : batch_.label) l = l.Reshape(Flat(l.shape()));
    return true;
  }
  const DataBatch& Value() const override { return batch_; }
  std::vector<TShape> DataShapes() const override { return base_->DataShapes(); }
  std::vector<TShape> LabelShapes() const override {
    std::vector<TShape> shapes = base_->LabelShapes();
    for (auto& s : shapes) s = Flat(s);
    return shapes;
  }

 private:
  static TShape Flat(const TShape& s) { return s.ndim() == 2 && s[1] == 1 ? TShape{s[0]} : s; }
  std::unique_ptr<DataIter> base_;
  std::int64_t max_;
  std::int64_t done_ = 0;
  DataBatch batch_;
};

// DIR/name, or DIR/name.gz when only that exists (MNISTIter reads both).
std::string IdxFile(const std::string& dir, const std::string& name) {
  const std::string plain = dir + "/" + name;
  if (Exists(plain)) return plain;
  if (Exists(plain + ".gz")) return plain + ".gz";
  throw Error("no " + plain + " or " + plain + ".gz (idx data needs train-images-idx3-ubyte, "
              "train-labels-idx1-ubyte, t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte)");
}

std::string RequireFile(const std::string& path, const std::string& what) {
  if (!Exists(path)) throw Error("cannot read " + path + " (" + what + ")");
  return path;
}

// The training (train = true) or test iterator of --data, part `part` of `parts` of the samples.
// "1,28,28" or "(1, 28, 28)" -> "(1,28,28)": three positive integers.
std::string ParseDataShape(const std::string& text) {
  std::string digits;
  for (char c : text) {
    if (c != '(' && c != ')' && c != ' ') digits += c;
  }
  std::stringstream list(digits);
  std::vector<long> dims;
  for (std::string item; std::getline(list, item, ',');) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > 65536) dims.push_back(-1);
    else dims.push_back(v);
  }
  if (dims.size() != 3 || std::count(dims.begin(), dims.end(), -1) > 0 || (dims[0] != 1 && dims[0] != 3)) {
    throw Error("--data-shape '" + text + "': want C,H,W with C 1 or 3, e.g. 1,28,28 or 3,32,32");
  }
  return "(" + std::to_string(dims[0]) + "," + std::to_string(dims[1]) + "," + std::to_string(dims[2]) + ")";
}

std::unique_ptr<DataIter> MakeIter(const std::string& data, bool train, int batch_size, int parts, int part,
                                   std::uint64_t seed, const std::string& data_shape, bool shuffle) {
  const std::string shape = ParseDataShape(data_shape);
  const std::string shuffled = train && shuffle ? "True" : "False";
  const auto colon = data.find(':');
  const std::string kind = data.substr(0, colon);
  const std::string path = colon == std::string::npos ? std::string() : data.substr(colon + 1);
  if (kind != "fashion-mnist" && path.empty()) {
    throw Error("--data '" + data + "': want fashion-mnist, idx:DIR, csv:DIR or rec:DIR");
  }
  Kwargs common{{"batch_size", std::to_string(batch_size)},
                {"num_parts", std::to_string(parts)},
                {"part_index", std::to_string(part)}};
  auto with = [&](Kwargs kw) {
    kw.insert(kw.end(), common.begin(), common.end());
    return kw;
  };
  if (kind != "rec" && shape != "(1,28,28)") {
    throw Error("--data-shape " + data_shape + " is for rec: images; " + kind + " data is 1,28,28");
  }
  if (kind == "fashion-mnist" || kind == "idx") {
    const std::string dir = kind == "idx" ? path : kFashionMnist;
    if (kind != "idx" && !Exists(dir + "/train-images-idx3-ubyte.gz")) {
      throw Error("Fashion-MNIST is not installed at " + dir + " (Debian package dataset-fashion-mnist; "
                  "scripts/setup installs it)");
    }
    const std::string prefix = train ? "train" : "t10k";
    return CreateDataIter("MNISTIter", with({{"image", IdxFile(dir, prefix + "-images-idx3-ubyte")},
                                             {"label", IdxFile(dir, prefix + "-labels-idx1-ubyte")},
                                             {"shuffle", shuffled},
                                             {"seed", std::to_string(seed)}}));
  }
  const std::string split = train ? "train" : "test";
  if (kind == "csv") {
    return CreateDataIter("CSVIter",
                          with({{"data_csv", RequireFile(path + "/" + split + "-data.csv", "784 values a row")},
                                {"label_csv", RequireFile(path + "/" + split + "-label.csv", "one label a row")},
                                {"data_shape", "(1,28,28)"}}));
  }
  if (kind == "rec") {
    Kwargs kw{{"path_imgrec", RequireFile(path + "/" + split + ".rec", "JPEG images, troupe im2rec")},
              {"data_shape", shape},
              {"scale", "0.00392156862745098"},  // 1/255, as MNISTIter
              {"shuffle", shuffled},
              {"seed", std::to_string(seed)}};
    if (Exists(path + "/" + split + ".idx")) kw.emplace_back("path_imgidx", path + "/" + split + ".idx");
    return CreateDataIter("ImageRecordIter", with(kw));
  }
  throw Error("--data '" + data + "': unknown source '" + kind + "' (want fashion-mnist, idx:DIR, csv:DIR or rec:DIR)");
}

}  // namespace

std::unique_ptr<DataIter> MakeDataIter(const std::string& data, bool train, int batch_size, int parts, int part,
                                       std::uint64_t seed, const std::string& data_shape, bool shuffle,
                                       std::int64_t max_images) {
  return std::make_unique<FitIter>(MakeIter(data, train, batch_size, parts, part, seed, data_shape, shuffle),
                                   max_images > 0 ? (max_images + batch_size - 1) / batch_size : 0);
}

namespace {

// "10,15" -> {10, 15}: increasing epochs >= 1.
std::vector<int> ParseEpochList(const std::string& text) {
  std::vector<int> out;
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > 100000 || (!out.empty() && v <= out.back())) {
      throw Error("--lr-step-epochs '" + text + "': want increasing epochs >= 1, e.g. 10,15");
    }
    out.push_back(static_cast<int>(v));
  }
  return out;
}

// Batches per epoch of an iterator: one pass (the data sets here are read into memory or decoded fast).
std::int64_t CountBatches(DataIter* it) {
  std::int64_t n = 0;
  it->BeforeFirst();
  while (it->Next()) ++n;
  return n;
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

// The progress of one epoch: a bar redrawn in place on a terminal, or a line every `frequent` batches.
class Progress {
 public:
  Progress(std::string mode, int batch_size, int epochs) : mode_(std::move(mode)), batch_(batch_size), epochs_(epochs) {}
  void set_total(std::int64_t batches) { total_ = batches; }
  bool wants_bar() const { return mode_ == "bar"; }

  void Batch(int epoch, std::int64_t nbatch, double accuracy, double loss) {
    const auto now = Clock::now();
    last_ = now;
    nbatch_ = nbatch;
    if (nbatch == 1) {
      start_ = now;  // the first batch's time is outside the window (as Speedometer)
      last_draw_ = now;
      return;
    }
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double ips = secs > 0 ? static_cast<double>((nbatch - 1) * batch_) / secs : 0;
    if (mode_ == "bar") {
      if (nbatch != total_ && std::chrono::duration<double>(now - last_draw_).count() < 0.1) return;
      last_draw_ = now;
      constexpr int kWidth = 30;
      const double frac = total_ > 0 ? std::min(1.0, static_cast<double>(nbatch) / static_cast<double>(total_)) : 0;
      const int filled = static_cast<int>(frac * kWidth);
      std::string bar(static_cast<std::size_t>(filled), '=');
      if (filled < kWidth) bar += '>';
      bar.resize(kWidth, ' ');
      std::printf("\rEpoch %d/%d [%s] %3d%% %lld/%lld  %.0f img/s  loss %.4f  acc %.4f ", epoch + 1, epochs_,
                  bar.c_str(), static_cast<int>(frac * 100), static_cast<long long>(nbatch),
                  static_cast<long long>(total_), ips, loss, accuracy);
      std::fflush(stdout);
      drawn_ = true;
    } else if (mode_ == "lines" && nbatch % frequent_ == 0) {
      std::printf("Epoch[%d] Batch [%lld]\tSpeed: %.2f samples/sec\taccuracy=%f\tloss=%f\n", epoch,
                  static_cast<long long>(nbatch), ips, accuracy, loss);
      std::fflush(stdout);
    }
  }
  // Ends the bar's line before the epoch's summary.
  void EndEpoch() {
    if (drawn_) std::printf("\n");
    drawn_ = false;
  }
  void set_frequent(int f) { frequent_ = std::max(1, f); }
  // The epoch's training time and speed so far (from the end of its first batch to the end of its last).
  double seconds() const { return std::chrono::duration<double>(last_ - start_).count(); }
  double images_per_sec() const {
    const double secs = seconds();
    return secs > 0 ? static_cast<double>((nbatch_ - 1) * batch_) / secs : 0;
  }

 private:
  std::string mode_;
  int batch_;
  int epochs_;
  int frequent_ = 100;
  std::int64_t total_ = 0;
  std::int64_t nbatch_ = 0;
  Clock::time_point start_ = Clock::now(), last_draw_ = Clock::now(), last_ = Clock::now();
  bool drawn_ = false;
};

}  // namespace

TrainCommand::TrainCommand(CLI::App* root) {
  app_ = root->add_subcommand("train", "Train an MLP, LeNet, ResNet or your MXNet symbol on Fashion-MNIST (or your data), "
                                       "locally or distributed");
  app_->footer(
      "Trains with the Module (MXNet's mx.mod.Module): SGD with momentum or Adam, a progress bar per epoch "
      "(images/s, loss, accuracy) when stdout is a terminal and plain lines otherwise, the test accuracy after "
      "every epoch, and checkpoints in MXNet's naming (PREFIX-symbol.json, PREFIX-0003.params; .states when "
      "not distributed). --batch-size is per worker, as in MXNet's fit.py (dist_sync averages over every "
      "worker's batch). With a dist_* --kvstore the process is a worker of a cluster: start it with troupe "
      "launch; each worker reads its own part of the training images (num_parts = workers) and worker 0 "
      "writes the checkpoints.\n"
      "Data: fashion-mnist (/usr/share/datasets/fashion-mnist, Debian dataset-fashion-mnist); idx:DIR "
      "(DIR/train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, "
      "each plain or .gz); csv:DIR (DIR/train-data.csv with 784 values a row, train-label.csv, test-data.csv, "
      "test-label.csv); rec:DIR (DIR/train.rec and test.rec of 28x28 images, troupe im2rec; .idx used when "
      "present; --data-shape 3,32,32 for other sizes or RGB).\n"
      "Your network (--symbol): an MXNet 1.x symbol file (mx.sym save, a checkpoint's PREFIX-symbol.json, "
      "Gluon's export). Its output must be a loss head (SoftmaxOutput ...); when it is not (a Gluon export "
      "ends in the logits) SoftmaxOutput is added on top with the label input softmax_label, and the log says "
      "so. The data input is the symbol's first argument that is neither a parameter nor the label (\"data\" "
      "in MXNet's files); its shape is the iterator's, (batch, 1, 28, 28) unless --data-shape says otherwise. "
      "--params (a checkpoint's .params with arg:/aux: names, or plain names) sets the parameters it names; "
      "the others are initialised as for the built-in models (xavier; biases 0, gammas 1). A parameter of the "
      "wrong shape for the data is an error naming both shapes. Checkpoints hold the symbol with its loss "
      "head, so troupe score and troupe predict take them as they are.\n"
      "Exit status: 0 when the final test accuracy reaches --min-accuracy, 1 otherwise or on failure, 2 on bad "
      "usage.\n\n"
      "Examples:\n"
      "  troupe train                                  # MLP, 10 epochs on Fashion-MNIST, one CPU device\n"
      "  troupe train --model lenet --epochs 5 --checkpoint lenet\n"
      "  troupe train --model lenet --epochs 8 --checkpoint lenet --resume 5\n"
      "  troupe train --devices cpu:0,cpu:1 --kvstore local\n"
      "  troupe train --epochs 20 --lr-step-epochs 10     # 0.89 test accuracy\n"
      "  troupe train --model lenet --batch-size 50 --epochs 12 --lr-step-epochs 8 --wd 0.0005   # 0.91\n"
      "  troupe train --optimizer adam --lr 0.001 --data idx:/data/mnist\n"
      "  troupe train --model resnet18 --lr 0.05 --train-images 500 --test-images 200 --epochs 2   # ~1 min\n"
      "  troupe launch -n 2 -s 1 -- troupe train --kvstore dist_sync --batch-size 50\n"
      "  troupe train --symbol net-symbol.json --params net-0000.params --data rec:imgs --lr 0.05 --checkpoint ft\n"
      "  troupe train --symbol net-symbol.json --params net-0000.params --fixed-params 'conv' --epochs 2\n");
  TrainOptions& o = options_;
  app_->add_option("--model", o.model,
                   "Network: mlp (128-64-10), lenet (two conv layers), resnet18 or resnet34 (ResNet v1 with the "
                   "CIFAR stem, models::ResNet; slow on a CPU: use --train-images)")
      ->check(CLI::IsMember({"mlp", "lenet", "resnet18", "resnet34"}))
      ->capture_default_str();
  app_->add_option("--act", o.act, "LeNet's activation: tanh (MXNet's example) or relu")
      ->check(CLI::IsMember({"tanh", "relu"}))
      ->capture_default_str();
  app_->add_option("--dropout", o.dropout, "LeNet: Dropout with this probability before the last layer (0: none)")
      ->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
  app_->add_option("--data", o.data, "fashion-mnist, idx:DIR, csv:DIR or rec:DIR")->capture_default_str();
  app_->add_option("--kvstore", o.kvstore, "local, device, nccl, dist_sync, dist_async or dist_device_sync")
      ->check(CLI::IsMember({"local", "device", "nccl", "dist_sync", "dist_async", "dist_device_sync"}))
      ->capture_default_str();
  app_->add_option("--devices", o.devices, "Devices, e.g. cpu:0,cpu:1 or gpu:0 (the batch is split over them)")
      ->capture_default_str();
  app_->add_option("--epochs", o.epochs, "Epochs to train (the last epoch number with --resume)")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app_->add_option("--batch-size", o.batch_size, "Batch size per worker")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app_->add_option("--optimizer", o.optimizer, "sgd (with --momentum) or adam")
      ->check(CLI::IsMember({"sgd", "adam"}))
      ->capture_default_str();
  app_->add_option("--lr", o.lr, "Learning rate (default: sgd 0.05, adam 0.001)")->check(CLI::PositiveNumber);
  app_->add_option("--momentum", o.momentum, "SGD momentum")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app_->add_option("--wd", o.wd, "Weight decay (weights only, as MXNet)")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app_->add_option("--lr-step-epochs", o.lr_step_epochs, "Epochs after which the rate is multiplied by --lr-factor, e.g. 10,15");
  app_->add_option("--lr-factor", o.lr_factor, "Learning-rate decay factor")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app_->add_option("--checkpoint", o.checkpoint, "PREFIX: write PREFIX-symbol.json and PREFIX-%04d.params every epoch");
  app_->add_option("--resume", o.resume, "Continue from PREFIX-<EPOCH> (needs --checkpoint)")->check(CLI::Range(1, 100000));
  app_->add_option("--train-images", o.train_images, "Train on the first N images per epoch (0: all; per worker: N / workers)")
      ->check(CLI::NonNegativeNumber);
  app_->add_option("--test-images", o.test_images, "Test on the first N test images (0: all)")->check(CLI::NonNegativeNumber);
  app_->add_option("--seed", o.seed, "Seed of the initialisation and the shuffle")->capture_default_str();
  app_->add_option("--progress", o.progress, "auto (a bar on a terminal, else lines), bar, lines or none")
      ->check(CLI::IsMember({"auto", "bar", "lines", "none"}))
      ->capture_default_str();
  app_->add_option("--min-accuracy", o.min_accuracy, "Exit 1 when the final test accuracy is below this")
      ->check(CLI::Range(0.0, 1.0));
  app_->add_option("--symbol", o.symbol, "Train this MXNet symbol JSON file instead of --model");
  app_->add_option("--params", o.params, "With --symbol: starting parameters (.params; arg:/aux: or plain names)");
  app_->add_option("--fixed-params", o.fixed_params,
                   "With --symbol: parameters whose names match this regular expression are not trained");
  app_->add_option("--data-shape", o.data_shape, "rec: data: the images' C,H,W (C 1: gray, 3: RGB)")
      ->capture_default_str();
  app_->add_flag("--shuffle,!--no-shuffle", o.shuffle, "Shuffle the training data (idx and rec; default on)");
}

bool TrainCommand::chosen() const { return app_->parsed(); }

int TrainCommand::Run() {
  if (options_.symbol.empty() && (!options_.params.empty() || !options_.fixed_params.empty())) {
    std::fprintf(stderr, "troupe train: --params and --fixed-params go with --symbol FILE (your network)\n");
    return 2;
  }
  if (!options_.symbol.empty() && app_->count("--model") > 0) {
    std::fprintf(stderr, "troupe train: give --model or --symbol, not both\n");
    return 2;
  }
  if (options_.resume > 0 && options_.checkpoint.empty()) {
    std::fprintf(stderr, "troupe train: --resume needs --checkpoint PREFIX (the checkpoint to continue from)\n");
    return 2;
  }
  if (options_.resume >= options_.epochs) {
    std::fprintf(stderr, "troupe train: --resume %d must be below --epochs %d (the last epoch to train)\n",
                 options_.resume, options_.epochs);
    return 2;
  }
  return RunTrain(options_);
}

int RunTrain(const TrainOptions& o) {
  const bool dist = StartsWith(o.kvstore, "dist");
  const std::vector<Context> devices = ParseDevices(o.devices);
  std::shared_ptr<KVStore> store;
  int rank = 0, workers = 1;
  if (dist) {
    if (std::getenv("DMLC_PS_ROOT_PORT") == nullptr) {
      throw Error("--kvstore " + o.kvstore + " makes this process a worker of a cluster; start it with troupe "
                  "launch, e.g. troupe launch -n 2 -s 1 -- troupe train --kvstore " + o.kvstore);
    }
    store = KVStore::Create(o.kvstore);  // joins the cluster: this worker's rank, the number of workers
    rank = store->rank();
    workers = store->num_workers();
  }
  const std::string mode = o.progress == "auto" ? (::isatty(STDOUT_FILENO) ? "bar" : "lines") : o.progress;
  const int per_batch = o.batch_size;
  auto train = MakeDataIter(o.data, true, per_batch, workers, rank, o.seed, o.data_shape, o.shuffle,
                            o.train_images > 0 ? std::max<std::int64_t>(1, o.train_images / workers) : 0);
  auto test = MakeDataIter(o.data, false, per_batch, 1, 0, o.seed, o.data_shape, false, o.test_images);

  Progress progress(mode, per_batch, o.epochs);
  const std::vector<int> step_epochs = ParseEpochList(o.lr_step_epochs);
  // Batches per epoch on this worker: the bar's length and the schedule's unit.
  const std::int64_t per_epoch = progress.wants_bar() || !step_epochs.empty() ? CountBatches(train.get()) : 0;
  progress.set_total(per_epoch);

  double lr = o.lr > 0 ? o.lr : (o.optimizer == "adam" ? 0.001 : 0.05);
  FitOptions fit;
  fit.optimizer.type = o.optimizer;
  // --lr-step-epochs as MXNet's fit.py: a multifactor schedule in update counts (one update per batch and
  // parameter on this process or, for dist_sync, per round; dist_async servers count every worker's push).
  // A resumed run continues the count from the optimizer's saved states; a cluster's servers start at 0, so
  // the steps are made relative to the resumed epoch and the rate starts decayed (fit.py's rule).
  if (!step_epochs.empty()) {
    const std::int64_t updates_per_epoch = o.kvstore == "dist_async" ? per_epoch * workers : per_epoch;
    const bool relative = dist && o.resume > 0;
    std::string steps;
    for (int e : step_epochs) {
      if (relative && e <= o.resume) {
        lr *= o.lr_factor;
        continue;
      }
      const std::int64_t at = static_cast<std::int64_t>(relative ? e - o.resume : e) * updates_per_epoch;
      steps += (steps.empty() ? "" : ",") + std::to_string(at);
    }
    if (!steps.empty()) {
      fit.optimizer.lr_scheduler = "multifactor";
      fit.optimizer.lr_scheduler_params = {{"step", "(" + steps + ")"}, {"factor", Fixed(o.lr_factor, 8)}};
    }
  }
  fit.optimizer.params = {{"learning_rate", Fixed(lr, 8)}, {"wd", Fixed(o.wd, 8)}};
  if (o.optimizer == "sgd") fit.optimizer.params.emplace_back("momentum", Fixed(o.momentum, 8));
  fit.num_epoch = o.epochs;
  fit.begin_epoch = o.resume;
  fit.seed = o.seed;
  fit.checkpoint_prefix = o.checkpoint;
  fit.kvstore = o.kvstore;
  fit.store = store;

  Symbol net;
  std::string data_name = "data", label_name = "softmax_label";
  std::string model_name = o.model;
  if (!o.symbol.empty()) {
    // A user's symbol: its loss head, inputs and starting parameters, checked against the data's shapes.
    SymbolNet user = LoadSymbolNet(o.symbol, o.params);
    CheckInputs(user, train->DataShapes().at(0), train->LabelShapes().at(0), o.data);
    net = user.symbol;
    data_name = user.data_name;
    label_name = user.label_name;
    model_name = o.symbol;
    std::printf("troupe train: %s: data input '%s' %s, %s head", o.symbol.c_str(), data_name.c_str(),
                train->DataShapes().at(0).ToString().c_str(), user.head_op.c_str());
    if (user.added_head) std::printf(" added (the symbol ends without a loss; label input 'softmax_label')");
    std::printf("\n");
    if (!o.params.empty()) {
      std::printf("troupe train: %zu of %zu parameters loaded from %s, %zu initialised (xavier)",
                  user.loaded, user.param_names.size(), o.params.c_str(), user.param_names.size() - user.loaded);
      if (!user.unused_params.empty()) {
        std::printf("; %zu arrays of the file are not in the symbol and are not used (e.g. %s)",
                    user.unused_params.size(), user.unused_params[0].c_str());
      }
      std::printf("\n");
    } else {
      std::printf("troupe train: %zu parameters initialised (xavier)\n", user.param_names.size());
    }
    if (!o.fixed_params.empty()) {
      std::regex re;
      try {
        re = std::regex(o.fixed_params);
      } catch (const std::regex_error& e) {
        throw Error("--fixed-params '" + o.fixed_params + "' is not a regular expression: " + e.what());
      }
      // MXNet's fixed_param_names, by the optimizer's multipliers: these parameters never change.
      const Symbol internals = net.GetInternals();
      const std::vector<std::string> outputs = internals.ListOutputs();
      std::size_t fixed = 0;
      for (const std::string& p : user.param_names) {
        if (!std::regex_search(p, re)) continue;
        const auto at = std::find(outputs.begin(), outputs.end(), p);
        if (at == outputs.end()) continue;
        Symbol var = internals[static_cast<std::size_t>(at - outputs.begin())];
        var.SetAttr("__lr_mult__", "0");
        var.SetAttr("__wd_mult__", "0");
        ++fixed;
      }
      if (fixed == 0) throw Error("--fixed-params '" + o.fixed_params + "' matches no parameter of " + o.symbol);
      std::printf("troupe train: %zu parameters fixed (--fixed-params %s)\n", fixed, o.fixed_params.c_str());
    }
    fit.arg_params = user.arg_params;
    fit.aux_params = user.aux_params;
  } else {
    net = o.model == "mlp"        ? models::MLP()
          : o.model == "lenet"    ? models::LeNet(10, o.act, o.dropout)
          : o.model == "resnet18" ? models::ResNet(18, 10, true)
                                  : models::ResNet(34, 10, true);
  }
  std::vector<std::string> label_names;
  if (!label_name.empty()) label_names.push_back(label_name);
  Module mod(net, {data_name}, label_names, devices);
  // The loss (cross-entropy) beside the accuracy Fit keeps: from the batch the iterator holds.
  auto loss = EvalMetric::Create("ce");
  double final_accuracy = std::nan("");
  fit.batch_end_callbacks.push_back([&](const BatchEndParam& p) {
    if (p.nbatch == 1) loss->Reset();
    const DataBatch& batch = train->Value();
    if (mode != "none") loss->Update(batch.label, mod.GetOutputs(), batch.num_batch_padd);
    progress.Batch(p.epoch, p.nbatch, p.metric->Get(), loss->Get());
  });
  fit.epoch_end_callbacks.push_back([&](int epoch, const EvalMetric& tm, const EvalMetric* em) {
    progress.EndEpoch();
    std::printf("Epoch[%d] Train-accuracy=%f", epoch, tm.Get());
    if (mode != "none") std::printf(" Train-loss=%f", loss->Get());
    if (em) {
      std::printf(" Test-accuracy=%f", em->Get());
      final_accuracy = em->Get();
    }
    std::printf(" Time=%.1fs (%.0f images/s)\n", progress.seconds(), progress.images_per_sec());
    std::fflush(stdout);
  });

  std::string where = devices.size() == 1 ? o.devices : o.devices + " with a " + o.kvstore + " store";
  if (dist) {
    where = o.kvstore + " worker " + std::to_string(rank) + " of " + std::to_string(workers) + " on " + o.devices;
  }
  std::printf("troupe train: %s on %s, %s, batch %d, %s lr %g%s, epochs %d..%d%s\n", model_name.c_str(),
              o.data.c_str(), where.c_str(), per_batch, o.optimizer.c_str(), lr,
              o.optimizer == "sgd" ? (" momentum " + Fixed(o.momentum, 2)).c_str() : "", o.resume + 1, o.epochs,
              o.train_images > 0 ? (", first " + std::to_string(o.train_images) + " training images").c_str() : "");
  std::fflush(stdout);
  mod.Fit(train.get(), test.get(), fit);
  if (std::isnan(final_accuracy)) final_accuracy = mod.Score(test.get()).second;
  std::printf("final test accuracy %.4f\n", final_accuracy);
  std::fflush(stdout);
  // The clean leave (a dist store's end without it fails the job for every worker); throws when the job
  // failed elsewhere.
  if (store) store->Finalize();
  if (final_accuracy < o.min_accuracy) {
    std::printf("below --min-accuracy %.4f\n", o.min_accuracy);
    return 1;
  }
  return 0;
}

}  // namespace troupe::tools
