// `troupe train`: trains an MLP, a LeNet-style network or a ResNet (graph/models.h), or the user's MXNet symbol
// file with optional starting parameters (--symbol, tools/symbol_net.h), with the Module (train/train.h)
// on Fashion-MNIST or the user's idx, CSV or RecordIO files, on one or several devices, or as a worker of a
// distributed KVStore cluster started by `troupe launch` (each worker reads its own part of the training
// data). Optimizers, schedules and metrics by MXNet's names; per epoch MXNet's log lines (Epoch[e]
// Train-accuracy=..., Time cost=..., Validation-... with --val-fraction) and the test metrics; within an
// epoch a progress bar on a terminal or MXNet's Speedometer lines; checkpoints in MXNet's naming every
// --save-period epochs and after the last; --resume continues from one. docs/train.md has the options and
// log formats.
//
// Exit status: 0 when the final test accuracy reaches --min-accuracy (default 0), 1 when it does not or
// training failed (the message names the cause), 2 on bad usage.
//
// Thread-safety: none needed; used from main() only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/io.h"

namespace CLI {
class App;
}

namespace troupe::tools {

struct TrainOptions {
  std::string model = "mlp";             // mlp | lenet
  std::string act = "tanh";              // lenet's activation: tanh (MXNet's LeNet) | relu
  double dropout = 0;                    // lenet: Dropout before the last layer (0: none)
  std::string data = "fashion-mnist";    // fashion-mnist | idx:DIR | csv:DIR | rec:DIR
  std::string kvstore = "local";         // local | device | nccl | dist_sync | dist_async | dist_device_sync
  std::string devices = "cpu:0";         // cpu:0,cpu:1 | gpu:0 ...
  int epochs = 10;
  int batch_size = 100;                  // per worker (MXNet's fit.py)
  // Optimizer (op/optimizer.h), MXNet's names: sgd | nag | adam | adagrad | rmsprop.
  std::string optimizer = "sgd";
  double lr = -1;                        // < 0: the default here (sgd, nag 0.05; adam, rmsprop 0.001; adagrad 0.01)
  double momentum = 0.9;                 // sgd and nag
  bool momentum_given = false;           // --momentum on the command line (an error with the others)
  double wd = 0.0001;
  std::vector<std::string> optimizer_params;  // "key=value" (MXNet's optimizer_params: beta1, epsilon, ...)
  // Learning-rate schedule (MXNet's mx.lr_scheduler); epochs are converted to update counts.
  std::string lr_scheduler;              // "" (constant; multifactor when lr_step_epochs is given) | factor |
                                         // multifactor | cosine
  std::string lr_step_epochs;            // "10,15": multiply the rate by lr_factor after these epochs (factor:
                                         // one value, the epochs between two decays)
  double lr_factor = 0.1;
  int warmup_epochs = 0;                 // warm-up of the schedule (warmup_steps = epochs x updates per epoch)
  double warmup_begin_lr = 0;
  std::string warmup_mode = "linear";    // linear | constant
  std::vector<std::string> lr_scheduler_params;  // "key=value" (final_lr, stop_factor_lr)
  // Metrics (EvalMetric::Create names), each entry one name or a comma list.
  std::vector<std::string> metrics = {"acc,ce"};
  int top_k = 0;                         // k of top_k_acc (0: 5); > 0 without top_k_acc in metrics adds it
  double val_fraction = 0;               // held out of the training images for per-epoch validation
  int save_period = 1;                   // checkpoint every N epochs, and after the last
  std::string amp;                       // "" (float32) | bf16: the network converted by amp::ConvertSymbol
  int log_interval = 100;                // batches between two Speedometer lines (--progress lines)
  std::string checkpoint;                // PREFIX: PREFIX-symbol.json, PREFIX-%04d.params (see save_period)
  int resume = 0;                        // > 0: continue from PREFIX-<resume>
  std::int64_t train_images = 0;         // 0: all; else the first N (split over the workers)
  std::int64_t test_images = 0;          // 0: all
  std::uint64_t seed = 1;
  std::string progress = "auto";         // auto | bar | lines | none
  double min_accuracy = 0;
  // A user's network instead of --model (tools/symbol_net.h): MXNet symbol JSON, optional starting
  // parameters, and a regular expression of parameters kept fixed (lr_mult and wd_mult 0).
  std::string symbol;
  std::string params;
  std::string fixed_params;
  std::string data_shape = "1,28,28";    // rec: the images' C,H,W (C 3 decodes to RGB)
  bool shuffle = true;                   // shuffle the training data (idx and rec; csv reads in order)
};

class TrainCommand {
 public:
  // Adds the `train` subcommand to `root`.
  explicit TrainCommand(CLI::App* root);
  bool chosen() const;
  int Run();

 private:
  CLI::App* app_ = nullptr;
  TrainOptions options_;
};

// A --devices list: "cpu:0,cpu:1" or "gpu:0" (a bare "cpu" / "gpu" is device 0). Throws troupe::Error
// naming a bad item.
std::vector<Context> ParseDevices(const std::string& text);

// The iterator of a --data source (fashion-mnist, idx:DIR, csv:DIR, rec:DIR): its training (train = true) or
// test split, part `part` of `parts`, at most `max_images` per epoch (0: all), labels of shape (batch,).
// data_shape: "C,H,W" of rec images (other sources are 1,28,28 and refuse another). shuffle applies to the
// training split. Throws troupe::Error naming a missing file or a bad source.
std::unique_ptr<DataIter> MakeDataIter(const std::string& data, bool train, int batch_size, int parts, int part,
                                       std::uint64_t seed, const std::string& data_shape, bool shuffle,
                                       std::int64_t max_images);

// Runs a training job (what `troupe train` does after parsing). Returns the exit status. Throws
// troupe::Error for bad options (before any work) or a failed run.
int RunTrain(const TrainOptions& options);

// A library error's message as the command-line user should read it: fixes that name C++ API calls
// ("convert one with AsType", "pass allow_extra") said in terms of files and options, and a leading
// "Module::Fit: " left out. Used by train, score and predict.
std::string ForCommandLine(const std::string& library_message);

}  // namespace troupe::tools
