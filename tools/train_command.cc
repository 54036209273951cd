// `troupe train`: see tools/train_command.h.
#include "tools/train_command.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "io/io.h"
#include "kvstore/kvstore.h"
#include "graph/amp.h"
#include "graph/models.h"
#include "tools/symbol_net.h"
#include "train/train.h"

namespace troupe::tools {
namespace {

using Clock = std::chrono::steady_clock;


bool StartsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

bool Exists(const std::string& path) { return ::access(path.c_str(), R_OK) == 0; }


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
    const std::string dir = kind == "idx" ? path : kFashionMnistDir;
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

std::unique_ptr<DataIter> MakeDataIter(const std::string& data, bool train, int batch_size, int parts, int part,
                                       std::uint64_t seed, const std::string& data_shape, bool shuffle,
                                       std::int64_t max_images) {
  return std::make_unique<FitIter>(MakeIter(data, train, batch_size, parts, part, seed, data_shape, shuffle),
                                   max_images > 0 ? (max_images + batch_size - 1) / batch_size : 0);
}

namespace {

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

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

// "key=value" items of a repeated option -> Kwargs; a key given twice or a missing '=' is an error naming
// the option.
Kwargs ParseKeyValues(const std::vector<std::string>& items, const std::string& option) {
  Kwargs out;
  for (const std::string& item : items) {
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
      throw Error(option + " '" + item + "': want key=value, e.g. " + option +
                  (option == "--optimizer-param" ? " beta1=0.8" : " final_lr=0.001"));
    }
    const std::string key = item.substr(0, eq);
    for (const auto& [k, v] : out) {
      if (k == key) throw Error(option + ": " + key + " given twice");
    }
    out.emplace_back(key, item.substr(eq + 1));
  }
  return out;
}

bool OptimizerHasMomentum(const std::string& type) { return type == "sgd" || type == "nag"; }

// The default learning rate of each optimizer here (MXNet's defaults, but 0.05 for sgd and nag: what trains
// the built-in models in a few epochs).
double DefaultLr(const std::string& type) {
  if (type == "adam" || type == "rmsprop") return 0.001;
  if (type == "adagrad") return 0.01;
  return 0.05;
}

// The checks that need nothing but the options: bad combinations of the optimizer, schedule, metric and
// output flags. Returns the message of the first problem, empty when none.
std::string CheckOptions(const TrainOptions& o) {
  try {
    const auto types = Optimizer::ListTypes();
    if (std::find(types.begin(), types.end(), o.optimizer) == types.end()) {
      return "--optimizer " + o.optimizer + ": unknown (sgd, nag, adam, adagrad or rmsprop)";
    }
    if (o.momentum_given && !OptimizerHasMomentum(o.optimizer)) {
      return "--momentum is a parameter of sgd and nag, not of " + o.optimizer +
             (o.optimizer == "rmsprop" ? " (centered rmsprop's momentum is --optimizer-param gamma2=...)"
                                       : " (leave it out)");
    }
    const Kwargs params = ParseKeyValues(o.optimizer_params, "--optimizer-param");
    for (const auto& [k, v] : params) {
      if (k == "learning_rate" || k == "wd" || k == "momentum" || k == "lr_scheduler") {
        return "--optimizer-param " + k + ": use " +
               (k == "learning_rate" ? std::string("--lr") : k == "lr_scheduler" ? "--lr-scheduler" : "--" + k) +
               " instead";
      }
    }
    const Kwargs sched = ParseKeyValues(o.lr_scheduler_params, "--lr-scheduler-param");
    for (const auto& [k, v] : sched) {
      if (k == "step" || k == "factor" || k == "max_update" || k == "base_lr" || k.rfind("warmup_", 0) == 0) {
        return "--lr-scheduler-param " + k + ": set by " +
               (k == "step" || k == "max_update" ? std::string("--lr-step-epochs / --epochs (in epochs)")
                : k == "factor"                  ? "--lr-factor"
                : k == "base_lr"                 ? "--lr"
                : k == "warmup_steps"            ? "--warmup-epochs (in epochs)"
                                                 : "--" + std::regex_replace(k, std::regex("_"), "-")) +
               " instead";
      }
    }
    const std::vector<int> steps = ParseEpochList(o.lr_step_epochs);
    const std::string& s = o.lr_scheduler;
    if (!s.empty() && s != "factor" && s != "multifactor" && s != "cosine") {
      return "--lr-scheduler " + s + ": unknown (factor, multifactor or cosine)";
    }
    if (s == "factor" && steps.size() != 1) {
      return "--lr-scheduler factor needs --lr-step-epochs N (one value: the epochs between two decays by "
             "--lr-factor)";
    }
    if (s == "multifactor" && steps.empty()) {
      return "--lr-scheduler multifactor needs --lr-step-epochs E1,E2,... (the epochs after which the rate is "
             "multiplied by --lr-factor)";
    }
    if (s == "cosine" && !steps.empty()) {
      return "--lr-step-epochs goes with the factor and multifactor schedules, not cosine (which decays from --lr "
             "to final_lr over the --epochs; --lr-scheduler-param final_lr=X)";
    }
    if (s.empty() && !sched.empty()) return "--lr-scheduler-param needs --lr-scheduler (factor, multifactor or cosine)";
    if (o.warmup_epochs > 0 && s.empty() && steps.empty()) {
      return "--warmup-epochs needs a schedule to warm up to: --lr-scheduler factor, multifactor or cosine";
    }
    if (o.warmup_epochs > 0 && o.warmup_epochs >= o.epochs && s == "cosine") {
      return "--warmup-epochs " + std::to_string(o.warmup_epochs) + " must be below --epochs " +
             std::to_string(o.epochs) + " with the cosine schedule (it decays after the warm-up)";
    }
    if (o.resume > 0 && s == "cosine") {
      return "--resume with --lr-scheduler cosine: the checkpoint's optimizer states (MXNet's format) do not "
             "keep the update count, so the cosine cannot continue where it stopped; train the whole run at once "
             "or resume with a factor or multifactor schedule";
    }
    if (o.resume > 0 && o.warmup_epochs > o.resume) {
      return "--resume " + std::to_string(o.resume) + " inside the warm-up (--warmup-epochs " +
             std::to_string(o.warmup_epochs) + "): the checkpoint does not keep the update count the warm-up needs";
    }
    if (o.save_period > 1 && o.checkpoint.empty()) return "--save-period needs --checkpoint PREFIX";
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The metrics of --metric (a comma list, or repeated) and --top-k, as (EvalMetric::Create name, params):
// validated, in order, each once.
std::vector<std::pair<std::string, Kwargs>> ParseMetrics(const TrainOptions& o) {
  std::vector<std::pair<std::string, Kwargs>> out;
  std::vector<std::string> seen;
  auto canonical = [](const std::string& n) -> std::string {
    if (n == "accuracy") return "acc";
    if (n == "top_k_accuracy") return "top_k_acc";
    if (n == "cross-entropy") return "ce";
    return n;
  };
  const int k = o.top_k > 0 ? o.top_k : 5;
  for (const std::string& entry : o.metrics) {
    std::stringstream list(entry);
    for (std::string name; std::getline(list, name, ',');) {
      name.erase(0, name.find_first_not_of(' '));
      name.erase(name.find_last_not_of(' ') + 1);
      const auto known = EvalMetric::ListNames();
      if (std::find(known.begin(), known.end(), name) == known.end()) {
        throw Error("--metric " + name + ": unknown; known: acc, top_k_acc (with --top-k K), ce, mse, mae, rmse, "
                    "f1, perplexity (MXNet's names; accuracy, top_k_accuracy and cross-entropy too)");
      }
      const std::string c = canonical(name);
      if (std::find(seen.begin(), seen.end(), c) != seen.end()) throw Error("--metric " + name + " given twice");
      seen.push_back(c);
      Kwargs params;
      if (c == "top_k_acc") params.emplace_back("top_k", std::to_string(k));
      out.emplace_back(c, params);
    }
  }
  if (o.top_k > 0 && std::find(seen.begin(), seen.end(), "top_k_acc") == seen.end()) {
    out.emplace_back("top_k_acc", Kwargs{{"top_k", std::to_string(k)}});  // MXNet fit.py's --top-k
  }
  if (out.empty()) throw Error("--metric: no metric given (e.g. --metric acc,ce)");
  for (const auto& [name, params] : out) EvalMetric::Create(name, params);  // parameters checked
  return out;
}

std::unique_ptr<CompositeEvalMetric> MakeMetrics(const std::vector<std::pair<std::string, Kwargs>>& specs) {
  auto all = std::make_unique<CompositeEvalMetric>();
  for (const auto& [name, params] : specs) all->Add(EvalMetric::Create(name, params));
  return all;
}

// An output PREFIX (PREFIX-symbol.json, PREFIX-0001.params ...) can be written: its directory exists and is
// writable, and files of it that exist already are writable. Throws troupe::Error naming the path.
void CheckWritablePrefix(const std::string& prefix, const std::string& option) {
  namespace fs = std::filesystem;
  const fs::path p(prefix);
  if (prefix.empty() || !p.has_filename()) {
    throw Error(option + " '" + prefix + "': want a file prefix such as ck/mlp (files ck/mlp-symbol.json, "
                "ck/mlp-0001.params ...), not a directory");
  }
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    throw Error(option + " " + prefix + ": the directory " + dir.string() + " does not exist (create it first: mkdir -p " +
                dir.string() + ")");
  }
  if (!fs::is_directory(dir, ec)) throw Error(option + " " + prefix + ": " + dir.string() + " is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    throw Error(option + " " + prefix + ": the directory " + dir.string() + " is not writable");
  }
  const std::string symbol_file = prefix + "-symbol.json";
  if (fs::exists(symbol_file, ec) && ::access(symbol_file.c_str(), W_OK) != 0) {
    throw Error(option + " " + prefix + ": " + symbol_file + " exists and is not writable");
  }
}

// The training samples (what `all` gives in one pass, padding left out) split into a training and a
// validation iterator: a permutation drawn from `seed` (std::mt19937_64 and a Fisher-Yates of our own, so
// that every standard library draws the same) puts round(fraction x N) samples into the validation part.
struct ValidationSplit {
  std::unique_ptr<DataIter> train, val;
  std::int64_t train_size = 0, val_size = 0;
};

ValidationSplit SplitValidation(DataIter* all, double fraction, int batch_size, std::uint64_t seed, bool shuffle) {
  std::vector<float> x, y;
  TShape item;  // a batch's data shape: the samples' shape after the first axis
  std::int64_t per_sample = -1;
  all->BeforeFirst();
  while (all->Next()) {
    const DataBatch& b = all->Value();
    const std::int64_t rows = b.data.at(0).shape()[0] - b.num_batch_padd;
    if (per_sample < 0) {
      item = b.data[0].shape();
      per_sample = b.data[0].Size() / b.data[0].shape()[0];
    }
    const std::vector<float> xv = b.data[0].AsType(DType::kFloat32).ToVector<float>();
    const std::vector<float> yv = b.label.at(0).AsType(DType::kFloat32).ToVector<float>();
    if (static_cast<std::int64_t>(yv.size()) != b.label[0].shape()[0]) {
      throw Error("--val-fraction: the data's labels have shape " + b.label[0].shape().ToString() +
                  "; one label per sample is needed");
    }
    x.insert(x.end(), xv.begin(), xv.begin() + rows * per_sample);
    y.insert(y.end(), yv.begin(), yv.begin() + rows);
  }
  const auto n = static_cast<std::int64_t>(y.size());
  if (per_sample < 0) throw Error("--val-fraction: the training data is empty");
  const auto n_val = static_cast<std::int64_t>(std::llround(fraction * static_cast<double>(n)));
  if (n_val < 1 || n_val >= n) {
    throw Error("--val-fraction " + Fixed(fraction, 4) + " of " + std::to_string(n) + " training images holds out " +
                std::to_string(n_val) + ": want at least one image for validation and one for training");
  }
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  std::mt19937_64 rng(seed);
  for (std::int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(i + 1));
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  auto part = [&](std::int64_t from, std::int64_t to, bool shuffled) {
    std::vector<float> px, py;
    px.reserve(static_cast<std::size_t>((to - from) * per_sample));
    for (std::int64_t i = from; i < to; ++i) {
      const std::int64_t s = order[static_cast<std::size_t>(i)];
      px.insert(px.end(), x.begin() + s * per_sample, x.begin() + (s + 1) * per_sample);
      py.push_back(y[static_cast<std::size_t>(s)]);
    }
    TShape shape = item;
    shape[0] = to - from;
    return MakeNDArrayIter({NDArray::FromVector<float>(px, shape)}, {NDArray::FromVector<float>(py, TShape{to - from})},
                           batch_size, shuffled, "pad", seed);
  };
  ValidationSplit split;
  split.val = part(0, n_val, false);
  split.train = part(n_val, n, shuffle);
  split.val_size = n_val;
  split.train_size = n - n_val;
  return split;
}

// Batches per epoch of an iterator: one pass (the data sets here are read into memory or decoded fast).
std::int64_t CountBatches(DataIter* it) {
  std::int64_t n = 0;
  it->BeforeFirst();
  while (it->Next()) ++n;
  return n;
}

// The progress of one epoch: a bar redrawn in place on a terminal, or MXNet's Speedometer lines every
// `frequent` batches, and the epoch's time and speed for its summary.
class Progress {
 public:
  Progress(std::string mode, int batch_size, int epochs, int frequent)
      : mode_(std::move(mode)), batch_(batch_size), epochs_(epochs), frequent_(std::max(1, frequent)) {}
  void set_total(std::int64_t batches) { total_ = batches; }
  bool wants_bar() const { return mode_ == "bar"; }
  bool wants_lines() const { return mode_ == "lines"; }

  // After batch `nbatch` (1-based) of `epoch`: `batch_secs` is how long that batch took, `so_far` the
  // epoch's training metric, `local` the metric since the last line (lines mode; reset here after a line).
  void Batch(int epoch, std::int64_t nbatch, double batch_secs, const EvalMetric& so_far, EvalMetric* local) {
    const auto now = Clock::now();
    last_ = now;
    nbatch_ = nbatch;
    if (nbatch == 1) {
      start_ = now - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(batch_secs));
      last_draw_ = now;
      tic_ = now;  // Speedometer's tic: the end of the first batch
    }
    if (mode_ == "bar") {
      if (nbatch != total_ && std::chrono::duration<double>(now - last_draw_).count() < 0.1) return;
      last_draw_ = now;
      constexpr int kWidth = 30;
      const double frac = total_ > 0 ? std::min(1.0, static_cast<double>(nbatch) / static_cast<double>(total_)) : 0;
      const int filled = static_cast<int>(frac * kWidth);
      std::string bar(static_cast<std::size_t>(filled), '=');
      if (filled < kWidth) bar += '>';
      bar.resize(kWidth, ' ');
      std::string values;
      for (const auto& [name, value] : so_far.GetNameValue()) {
        values += "  " + (name == "cross-entropy" ? std::string("loss") : name == "accuracy" ? "acc" : name) + " " +
                  Fixed(value, 4);
      }
      std::printf("\rEpoch %d/%d [%s] %3d%% %lld/%lld  %.0f img/s%s ", epoch + 1, epochs_, bar.c_str(),
                  static_cast<int>(frac * 100), static_cast<long long>(nbatch), static_cast<long long>(total_),
                  images_per_sec(), values.c_str());
      std::fflush(stdout);
      drawn_ = true;
    } else if (mode_ == "lines") {
      // MXNet 1.9.1's Speedometer (auto_reset=True, as fit.py): its count is the 0-based batch index; a line
      // every `frequent` batches after the first, the speed over them, the metrics since the previous line.
      const std::int64_t count = nbatch - 1;
      if (count == 0 || count % frequent_ != 0) return;
      const double secs = std::chrono::duration<double>(now - tic_).count();
      const double speed = secs > 0 ? static_cast<double>(frequent_) * batch_ / secs : 0;
      std::string line = "Epoch[" + std::to_string(epoch) + "] Batch [" + std::to_string(count - frequent_) + "-" +
                         std::to_string(count) + "]\tSpeed: " + Fixed(speed, 2) + " samples/sec";
      if (local) {
        for (const auto& [name, value] : local->GetNameValue()) line += "\t" + name + "=" + Fixed(value, 6);
        local->Reset();
      }
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
      tic_ = now;
    }
  }
  // Ends the bar's line before the epoch's summary.
  void EndEpoch() {
    if (drawn_) std::printf("\n");
    drawn_ = false;
  }
  // The epoch's training time so far (from the start of its first batch to the end of its last) and speed.
  double seconds() const { return std::chrono::duration<double>(last_ - start_).count(); }
  double images_per_sec() const {
    const double secs = seconds();
    return secs > 0 ? static_cast<double>(nbatch_ * batch_) / secs : 0;
  }

 private:
  std::string mode_;
  int batch_;
  int epochs_;
  int frequent_;
  std::int64_t total_ = 0;
  std::int64_t nbatch_ = 0;
  Clock::time_point start_ = Clock::now(), last_draw_ = Clock::now(), last_ = Clock::now(), tic_ = Clock::now();
  bool drawn_ = false;
};

// "key=value, key=value" of a Kwargs, for the start-up line.
std::string Describe(const Kwargs& kw) {
  std::string out;
  for (const auto& [k, v] : kw) out += (out.empty() ? "" : " ") + k + "=" + v;
  return out;
}

}  // namespace

namespace {

// A number as short as it reads back (0.05, 1e-08), for configurations and the start-up line.
std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.10g", v);
  return buf;
}

// The optimizer configuration of the options, epochs converted to update counts with updates_per_epoch
// (one update per batch on this process or, for dist_sync, per round; dist_async servers count every
// worker's push). *lr gets the starting learning rate.
//
// A checkpoint's optimizer states (MXNet's format) carry no update count, and a cluster's servers start at 0:
// the schedule's count starts again when a run resumes, so (as MXNet's fit.py) the steps are counted from the
// resumed epoch and the decays of the epochs before it are applied to the starting rate. The factor schedule
// becomes the multifactor one with the same decay epochs when the resumed epoch is not a multiple of its step.
OptimizerConfig BuildOptimizerConfig(const TrainOptions& o, std::int64_t updates_per_epoch, double* lr_out) {
  double lr = o.lr > 0 ? o.lr : DefaultLr(o.optimizer);
  const std::vector<int> steps = ParseEpochList(o.lr_step_epochs);
  std::string sched = o.lr_scheduler.empty() && !steps.empty() ? "multifactor" : o.lr_scheduler;
  const int r = o.resume;
  const std::int64_t upe = updates_per_epoch;
  Kwargs sp;
  auto multifactor_from = [&](const std::vector<int>& epochs) {
    std::string list;
    for (int e : epochs) {
      if (e <= r) {
        lr *= o.lr_factor;
        continue;
      }
      list += (list.empty() ? "" : ",") + std::to_string(static_cast<std::int64_t>(e - r) * upe);
    }
    if (list.empty()) {
      sched.clear();  // every decay is behind the resumed epoch: a constant rate
    } else {
      sched = "multifactor";
      sp = {{"step", "(" + list + ")"}, {"factor", Num(o.lr_factor)}};
    }
  };
  if (sched == "factor") {
    const int every = steps.at(0);
    if (r % every == 0) {
      lr *= std::pow(o.lr_factor, r / every);
      sp = {{"step", std::to_string(static_cast<std::int64_t>(every) * upe)}, {"factor", Num(o.lr_factor)}};
    } else {
      std::vector<int> at;
      for (int e = every; e < o.epochs; e += every) at.push_back(e);
      multifactor_from(at);
    }
  } else if (sched == "multifactor") {
    multifactor_from(steps);
  } else if (sched == "cosine") {
    sp = {{"max_update", std::to_string(static_cast<std::int64_t>(o.epochs - r) * upe)}};
  }
  OptimizerConfig config;
  config.type = o.optimizer;
  if (!sched.empty()) {
    if (o.warmup_epochs > r) {
      sp.emplace_back("warmup_steps", std::to_string(static_cast<std::int64_t>(o.warmup_epochs - r) * upe));
      sp.emplace_back("warmup_begin_lr", Num(o.warmup_begin_lr));
      sp.emplace_back("warmup_mode", o.warmup_mode);
    }
    for (auto& kv : ParseKeyValues(o.lr_scheduler_params, "--lr-scheduler-param")) sp.push_back(std::move(kv));
    config.lr_scheduler = sched;
    config.lr_scheduler_params = sp;
  }
  config.params = {{"learning_rate", Num(lr)}, {"wd", Num(o.wd)}};
  if (OptimizerHasMomentum(o.optimizer)) config.params.emplace_back("momentum", Num(o.momentum));
  for (auto& kv : ParseKeyValues(o.optimizer_params, "--optimizer-param")) config.params.push_back(std::move(kv));
  try {
    Optimizer::Create(config);  // every parameter checked now, before any work
  } catch (const Error& e) {
    throw Error(std::string("bad optimizer settings (--optimizer, --optimizer-param, --lr-scheduler, "
                            "--lr-scheduler-param): ") + e.what());
  }
  *lr_out = lr;
  return config;
}

}  // namespace

std::string ForCommandLine(const std::string& library_message) {
  // Fixes that speak to a C++ caller, said for the command line. Longer phrases first.
  static const std::pair<const char*, const char*> kRewrites[] = {
      {"; pass allow_extra to ignore them", "; the file holds arrays of another network"},
      {" (pass allow_missing to keep them)", " (the file lacks them)"},
      {"; convert one to the other's dtype first (NDArray::AsType; astype() in troupe shell)",
       "; both must have the same data type"},
      {"; convert it to a number type first (NDArray::AsType; astype() in troupe shell)", " (use float32 data)"},
      {" (convert the array to float32 first)", " (use float32 data)"},
      {"; use AsType or Reshape first", "; the file's arrays must have the network's shapes and data types"},
      {"; copy one to the other's device first (NDArray::CopyTo)", ""},
      {" (copy it with CopyTo)", ""},
      {" written by Fit's checkpoints", " written with every checkpoint of troupe train"},
      {"; set checkpoint_prefix", "; give --checkpoint PREFIX"},
      {"; call Bind first (or Fit)", ""},
      {" or set label_width=1", " (troupe reads one label per image)"},
  };
  // "Module::Fit: " and the like name the C++ call that failed, which says nothing to a command-line user.
  std::string msg = std::regex_replace(library_message, std::regex("^Module::[A-Za-z]+: "), "");
  for (const auto& [from, to] : kRewrites) {
    for (auto at = msg.find(from); at != std::string::npos; at = msg.find(from, at + std::strlen(to))) {
      msg.replace(at, std::strlen(from), to);
    }
  }
  return msg;
}

TrainCommand::TrainCommand(CLI::App* root) {
  app_ = root->add_subcommand("train", "Train an MLP, LeNet, ResNet or your MXNet symbol on Fashion-MNIST (or your data), "
                                       "locally or distributed");
  app_->footer(
      "Trains with the Module (MXNet's mx.mod.Module) and MXNet's optimizers (sgd, nag, adam, adagrad, rmsprop), "
      "learning-rate schedules (factor, multifactor, cosine, with warm-up) and metrics (acc, top_k_acc, ce, mse, "
      "mae, rmse, f1, perplexity) by their MXNet names; epochs are converted to update counts. Per epoch it "
      "prints MXNet's lines (Epoch[E] Train-accuracy=..., Epoch[E] Time cost=..., Epoch[E] Validation-...=... with "
      "--val-fraction) and the test set's (Epoch[E] Test-accuracy=...); within an epoch a progress bar when stdout "
      "is a terminal, else MXNet's Speedometer lines every --log-interval batches (Epoch[E] Batch [100-200]\\tSpeed: "
      "... samples/sec\\taccuracy=...); --progress none keeps only the per-epoch lines. The end: final test "
      "accuracy X. Checkpoints in MXNet's naming (PREFIX-symbol.json, PREFIX-0003.params; .states when not "
      "distributed) every --save-period epochs and after the last; the output directory is checked before "
      "training. --batch-size is per worker, as in MXNet's fit.py (dist_sync averages over every worker's "
      "batch). With a dist_* --kvstore the process is a worker of a cluster: start it with troupe launch; each "
      "worker reads its own part of the training images (num_parts = workers) and worker 0 writes the "
      "checkpoints; the servers run the optimizer with every setting given here. docs/train.md has the "
      "details.\n"
      "Data: fashion-mnist (/usr/share/datasets/fashion-mnist, Debian dataset-fashion-mnist); idx:DIR "
      "(DIR/train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, "
      "each plain or .gz); csv:DIR (DIR/train-data.csv with 784 values a row, train-label.csv, test-data.csv, "
      "test-label.csv); rec:DIR (DIR/train.rec and test.rec of 28x28 images, troupe im2rec; .idx used when "
      "present; --data-shape 3,32,32 for other sizes or RGB). --val-fraction F holds F of the training images "
      "out for validation (drawn with --seed); the test images stay for the test accuracy.\n"
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
      "  troupe train --optimizer nag --momentum 0.9 --wd 1e-4 --lr-scheduler cosine --warmup-epochs 2\n"
      "  troupe train --optimizer adam --lr 0.001 --optimizer-param beta1=0.8 --optimizer-param epsilon=1e-6\n"
      "  troupe train --optimizer rmsprop --optimizer-param centered=True --optimizer-param gamma2=0.95\n"
      "  troupe train --metric acc,ce,top_k_acc --top-k 3 --val-fraction 0.1 --progress lines --log-interval 50\n"
      "  troupe train --epochs 10 --checkpoint ck/mlp --save-period 4     # ck/mlp-0004, -0008, -0010\n"
      "  troupe train --model resnet18 --lr 0.05 --train-images 500 --test-images 200 --epochs 2   # ~1 min\n"
      "  troupe launch -n 2 -s 1 -- troupe train --kvstore dist_sync --batch-size 50\n"
      "  troupe train --symbol net-symbol.json --params net-0000.params --data rec:imgs --lr 0.05 --checkpoint ft\n"
      "  troupe train --symbol net-symbol.json --params net-0000.params --fixed-params 'conv' --epochs 2\n");
  TrainOptions& o = options_;
  app_->add_option("--model", o.model,
                   "Network: mlp (128-64-10), lenet (two conv layers), resnet18, resnet34 or resnet50 (ResNet v1 "
                   "with the CIFAR stem, models::ResNet; resnet50 with bottleneck blocks; slow on a CPU: use "
                   "--train-images)")
      ->check(CLI::IsMember({"mlp", "lenet", "resnet18", "resnet34", "resnet50"}))
      ->capture_default_str();
  app_->add_option("--amp", o.amp,
                   "Mixed precision: bf16 converts the network as MXNet's AMP does (mx.contrib.amp.convert_symbol "
                   "with target_dtype bfloat16): convolutions and fully connected layers compute in bfloat16, "
                   "parameters and the optimizer stay float32. fp16 does the same in float16 with MXNet's dynamic "
                   "loss scaling (from 2^16, halved and the step skipped when a gradient overflows, doubled after "
                   "2000 clean steps; with a dist kvstore every worker checks the summed gradients, so all skip the same "
                   "steps, and the workers run the optimizer)")
      ->check(CLI::IsMember({"bf16", "fp16"}));
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
  app_->add_option("--optimizer", o.optimizer, "sgd, nag (Nesterov), adam, adagrad or rmsprop (MXNet's update rules)")
      ->check(CLI::IsMember({"sgd", "nag", "adam", "adagrad", "rmsprop"}))
      ->capture_default_str();
  app_->add_option("--lr", o.lr, "Learning rate (default: sgd and nag 0.05, adam and rmsprop 0.001, adagrad 0.01)")
      ->check(CLI::PositiveNumber);
  app_->add_option("--momentum", o.momentum, "Momentum of sgd and nag (an error with the other optimizers)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app_->add_option("--wd", o.wd, "Weight decay (weights only, as MXNet)")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app_->add_option("--optimizer-param", o.optimizer_params,
                   "KEY=VALUE, repeated: any other parameter of the optimizer, as MXNet's optimizer_params: adam beta1, "
                   "beta2, epsilon; adagrad eps; rmsprop gamma1, gamma2, epsilon, centered, clip_weights; every "
                   "optimizer rescale_grad, clip_gradient");
  app_->add_option("--lr-scheduler", o.lr_scheduler,
                   "factor (decay by --lr-factor every --lr-step-epochs N epochs), multifactor (after each of the "
                   "--lr-step-epochs), cosine (from --lr to final_lr over the --epochs); default: multifactor when "
                   "--lr-step-epochs is given, else a constant rate")
      ->check(CLI::IsMember({"factor", "multifactor", "cosine"}));
  app_->add_option("--lr-step-epochs", o.lr_step_epochs,
                   "Epochs after which the rate is multiplied by --lr-factor, e.g. 10,15 (factor: one value, the "
                   "epochs between two decays)");
  app_->add_option("--lr-factor", o.lr_factor, "Learning-rate decay factor")->check(CLI::Range(0.0, 1.0))->capture_default_str();
  app_->add_option("--warmup-epochs", o.warmup_epochs, "Epochs of the schedule's warm-up from --warmup-begin-lr to --lr")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  app_->add_option("--warmup-begin-lr", o.warmup_begin_lr, "The rate the warm-up starts from")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app_->add_option("--warmup-mode", o.warmup_mode, "linear (rise to --lr) or constant (--warmup-begin-lr throughout)")
      ->check(CLI::IsMember({"linear", "constant"}))
      ->capture_default_str();
  app_->add_option("--lr-scheduler-param", o.lr_scheduler_params,
                   "KEY=VALUE, repeated: another parameter of the schedule: cosine final_lr, factor stop_factor_lr");
  app_->add_option("--metric", o.metrics,
                   "Metrics, a comma list or repeated: acc, top_k_acc (k from --top-k), ce, mse, mae, rmse, f1 (binary), "
                   "perplexity (MXNet's names)")
      ->default_str("acc,ce");
  app_->add_option("--top-k", o.top_k, "k of top_k_acc (default 5); alone it adds top_k_acc to the metrics (MXNet fit.py)")
      ->check(CLI::Range(1, 1000000));
  app_->add_option("--val-fraction", o.val_fraction,
                   "Hold this fraction of the training images out for validation (Epoch[E] Validation-... lines; "
                   "drawn with --seed)")
      ->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
  app_->add_option("--checkpoint", o.checkpoint,
                   "PREFIX: write PREFIX-symbol.json and PREFIX-%04d.params (see --save-period); the directory must exist");
  app_->add_option("--save-period", o.save_period, "Checkpoint every N epochs, and after the last")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app_->add_option("--resume", o.resume, "Continue from PREFIX-<EPOCH> (needs --checkpoint)")->check(CLI::Range(1, 100000));
  app_->add_option("--train-images", o.train_images, "Train on the first N images per epoch (0: all; per worker: N / workers)")
      ->check(CLI::NonNegativeNumber);
  app_->add_option("--test-images", o.test_images, "Test on the first N test images (0: all)")->check(CLI::NonNegativeNumber);
  app_->add_option("--seed", o.seed, "Seed of the initialisation, the shuffle and the validation split")->capture_default_str();
  app_->add_option("--progress", o.progress,
                   "auto (a bar on a terminal, else lines), bar, lines (MXNet's Speedometer every --log-interval "
                   "batches) or none (only the per-epoch lines)")
      ->check(CLI::IsMember({"auto", "bar", "lines", "none"}))
      ->capture_default_str();
  app_->add_option("--log-interval", o.log_interval, "Batches between two Speedometer lines (MXNet's disp_batches)")
      ->check(CLI::Range(1, 1 << 30))
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
  options_.momentum_given = app_->count("--momentum") > 0;
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
  // Bad combinations of options: before any work, with the exit status of bad usage.
  std::string problem = CheckOptions(options_);
  if (problem.empty()) {
    try {
      ParseMetrics(options_);
      double lr = 0;
      BuildOptimizerConfig(options_, 1, &lr);
    } catch (const Error& e) {
      problem = e.what();
    }
  }
  if (!problem.empty()) {
    std::fprintf(stderr, "troupe train: %s\n", problem.c_str());
    return 2;
  }
  try {
    return RunTrain(options_);
  } catch (const std::exception& e) {
    throw Error(ForCommandLine(e.what()));
  }
}

int RunTrain(const TrainOptions& o) {
  if (const std::string problem = CheckOptions(o); !problem.empty()) throw Error(problem);
  const auto metric_specs = ParseMetrics(o);
  if (o.symbol.empty()) {
    for (const auto& [name, params] : metric_specs) {
      if (name == "f1") {
        throw Error("--metric f1 is binary (two classes); the built-in models classify 10 (train a two-class "
                    "network with --symbol and data labelled 0 and 1)");
      }
    }
  }
  const bool dist = StartsWith(o.kvstore, "dist");
  const std::vector<Context> devices = ParseDevices(o.devices);
  // Output paths before any work (a cluster's worker 0 writes the checkpoints: checked once it knows its rank).
  if (!o.checkpoint.empty() && !dist) CheckWritablePrefix(o.checkpoint, "--checkpoint");
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
    if (!o.checkpoint.empty() && rank == 0) CheckWritablePrefix(o.checkpoint, "--checkpoint");
  }
  const bool writes_checkpoints = !o.checkpoint.empty() && rank == 0;
  const std::string mode = o.progress == "auto" ? (::isatty(STDOUT_FILENO) ? "bar" : "lines") : o.progress;
  const int per_batch = o.batch_size;
  std::unique_ptr<DataIter> train =
      MakeDataIter(o.data, true, per_batch, workers, rank, o.seed, o.data_shape, o.val_fraction > 0 ? false : o.shuffle,
                   o.train_images > 0 ? std::max<std::int64_t>(1, o.train_images / workers) : 0);
  std::unique_ptr<DataIter> val;
  std::string val_note;
  if (o.val_fraction > 0) {
    ValidationSplit split = SplitValidation(train.get(), o.val_fraction, per_batch, o.seed, o.shuffle);
    train = std::move(split.train);
    val = std::move(split.val);
    val_note = "; validation: " + std::to_string(split.val_size) + " of " +
               std::to_string(split.val_size + split.train_size) + " training images held out (--val-fraction " +
               Num(o.val_fraction) + ")";
  }
  auto test = MakeDataIter(o.data, false, per_batch, 1, 0, o.seed, o.data_shape, false, o.test_images);

  Progress progress(mode, per_batch, o.epochs, o.log_interval);
  const bool scheduled = !o.lr_scheduler.empty() || !o.lr_step_epochs.empty();
  // Batches per epoch on this worker: the bar's length and the schedule's unit.
  const std::int64_t per_epoch = progress.wants_bar() || scheduled ? CountBatches(train.get()) : 0;
  progress.set_total(per_epoch);

  FitOptions fit;
  double lr = 0;
  fit.optimizer = BuildOptimizerConfig(o, o.kvstore == "dist_async" ? per_epoch * workers : per_epoch, &lr);
  fit.make_metric = [&metric_specs] { return std::unique_ptr<EvalMetric>(MakeMetrics(metric_specs)); };
  fit.num_epoch = o.epochs;
  fit.begin_epoch = o.resume;
  fit.seed = o.seed;
  fit.checkpoint_prefix = o.checkpoint;
  fit.checkpoint_period = o.save_period;
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
          : o.model == "resnet34" ? models::ResNet(34, 10, true)
                                  : models::ResNet(50, 10, true);
  }
  if (!o.amp.empty()) {
    // MXNet's AMP: the symbol gains amp_cast nodes; parameters, optimizer states, metrics and checkpoints'
    // arrays stay float32 (the saved symbol is the converted one, which MXNet 1.9 loads too).
    amp::ConvertOptions convert;
    convert.target_dtype = o.amp == "fp16" ? DType::kFloat16 : DType::kBfloat16;
    convert.data_names = std::vector<std::string>{data_name};
    if (!label_name.empty()) convert.data_names->push_back(label_name);
    const std::size_t before = net.GetInternals().NumOutputs();
    net = amp::ConvertSymbol(net, convert);
    const char* type = o.amp == "fp16" ? "float16" : "bfloat16";
    std::printf("troupe train: mixed precision %s (--amp %s): %zu casts added; convolutions and fully connected "
                "layers compute in %s, parameters, optimizer and loss stay float32%s\n",
                type, o.amp.c_str(), net.GetInternals().NumOutputs() - before, type,
                o.amp == "fp16" ? "; dynamic loss scaling from 65536" : "");
  }
  std::vector<std::string> label_names;
  if (!label_name.empty()) label_names.push_back(label_name);
  Module mod(net, {data_name}, label_names, devices);
  if (o.amp == "fp16") mod.SetLossScaler(std::make_shared<LossScaler>());
  // The test set's metrics: the training ones, with the accuracy for the final test accuracy.
  auto test_specs = metric_specs;
  if (std::none_of(test_specs.begin(), test_specs.end(), [](const auto& s) { return s.first == "acc"; })) {
    test_specs.insert(test_specs.begin(), {"acc", {}});
  }
  auto test_metric = MakeMetrics(test_specs);
  // Speedometer's metrics since its last line (--progress lines), from the batch the iterator holds.
  std::unique_ptr<CompositeEvalMetric> local = progress.wants_lines() ? MakeMetrics(metric_specs) : nullptr;
  double final_accuracy = std::nan("");
  fit.batch_end_callbacks.push_back([&](const BatchEndParam& p) {
    if (local) {
      if (p.nbatch == 1) local->Reset();
      mod.UpdateMetric(local.get(), train->Value());
    }
    const double batch_secs = p.samples_per_sec > 0 ? per_batch / p.samples_per_sec : 0;
    progress.Batch(p.epoch, p.nbatch, batch_secs, *p.metric, local.get());
  });
  fit.epoch_end_callbacks.push_back([&](int epoch, const EvalMetric& tm, const EvalMetric* em) {
    progress.EndEpoch();
    // MXNet 1.9.1's Module.fit lines, then the test set's and troupe's speed figure.
    for (const auto& [name, value] : tm.GetNameValue()) std::printf("Epoch[%d] Train-%s=%f\n", epoch, name.c_str(), value);
    std::printf("Epoch[%d] Time cost=%.3f\n", epoch, progress.seconds());
    if (const LossScaler* ls = mod.loss_scaler()) {
      std::printf("Epoch[%d] AMP loss scale=%g, %lld of %lld steps skipped (a gradient overflowed)\n", epoch, ls->scale(),
                  static_cast<long long>(ls->skipped()), static_cast<long long>(ls->steps()));
    }
    if (writes_checkpoints && (epoch + 1) % o.save_period == 0) {
      std::printf("Saved checkpoint to \"%s-%04d.params\"\n", o.checkpoint.c_str(), epoch + 1);
    }
    if (em) {
      for (const auto& [name, value] : em->GetNameValue()) {
        std::printf("Epoch[%d] Validation-%s=%f\n", epoch, name.c_str(), value);
      }
    }
    test_metric->Reset();
    test->BeforeFirst();
    while (test->Next()) {
      const DataBatch& batch = test->Value();
      mod.Forward(batch, false);
      mod.UpdateMetric(test_metric.get(), batch);
    }
    for (const auto& [name, value] : test_metric->GetNameValue()) {
      std::printf("Epoch[%d] Test-%s=%f\n", epoch, name.c_str(), value);
      if (name == "accuracy") final_accuracy = value;
    }
    std::printf("Epoch[%d] Speed: %.2f samples/sec\n", epoch, progress.images_per_sec());
    std::fflush(stdout);
  });

  std::string where = devices.size() == 1 ? o.devices : o.devices + " with a " + o.kvstore + " store";
  if (dist) {
    where = o.kvstore + " worker " + std::to_string(rank) + " of " + std::to_string(workers) + " on " + o.devices;
  }
  std::printf("troupe train: %s on %s, %s, batch %d, %s lr %g%s, epochs %d..%d%s\n", model_name.c_str(),
              o.data.c_str(), where.c_str(), per_batch, o.optimizer.c_str(), lr,
              OptimizerHasMomentum(o.optimizer) ? (" momentum " + Fixed(o.momentum, 2)).c_str() : "", o.resume + 1,
              o.epochs, o.train_images > 0 ? (", first " + std::to_string(o.train_images) + " training images").c_str() : "");
  std::string metric_names;
  for (const auto& [name, value] : MakeMetrics(metric_specs)->GetNameValue()) {
    metric_names += (metric_names.empty() ? "" : ", ") + name;
  }
  std::printf("troupe train: optimizer %s %s", fit.optimizer.type.c_str(), Describe(fit.optimizer.params).c_str());
  if (!fit.optimizer.lr_scheduler.empty()) {
    std::printf("; lr_scheduler %s %s (update counts, %lld per epoch)", fit.optimizer.lr_scheduler.c_str(),
                Describe(fit.optimizer.lr_scheduler_params).c_str(),
                static_cast<long long>(o.kvstore == "dist_async" ? per_epoch * workers : per_epoch));
  }
  std::printf("; metrics %s%s\n", metric_names.c_str(), val_note.c_str());
  std::fflush(stdout);
  mod.Fit(train.get(), val.get(), fit);
  // The last epoch's checkpoint when --save-period skipped it.
  if (writes_checkpoints && o.epochs % o.save_period != 0) {
    mod.SaveCheckpoint(o.checkpoint, o.epochs);
    std::printf("Saved checkpoint to \"%s-%04d.params\"\n", o.checkpoint.c_str(), o.epochs);
  }
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
