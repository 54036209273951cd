// Training: evaluation metrics, checkpoints in MXNet's naming and the Module that fits a Symbol to data
// (MXNet's mx.mod.Module on one device).
//
// Module binds an Executor for the symbol with the iterator's batch shape, initialises the parameters,
// and runs Fit: per batch, copy the batch into the executor's data and label arrays, Forward(true),
// Backward, one optimizer update per parameter, update the training metric, call the batch callbacks;
// per epoch, reset the training iterator, evaluate on the evaluation iterator, write a checkpoint, call the
// epoch callbacks. The last batch's padding (DataBatch::num_batch_padd) is left out of the metrics and of
// Predict's result.
//
// Checkpoints as MXNet writes them: "<prefix>-symbol.json" and "<prefix>-<epoch, 4 digits>.params" (the
// arguments as "arg:<name>", the auxiliary states as "aux:<name>"), plus "<prefix>-<epoch>.states" with the
// optimizer's states, so that Fit resumes exactly where it stopped.
//
// Data parallelism (MXNet's Module with a context list and update_on_kvstore): with several contexts the
// batch is split along axis 0 into one slice per context (MXNet's _split_input_slice: B / k rows each, the
// first B % k slices one row more), each context runs its own Executor on its slice, and Update pushes
// every parameter's gradients of all contexts to a KVStore (FitOptions::kvstore) which sums them, applies
// the optimizer to its copy of the weight and pulls the result back into every context's weight.
// Auxiliary states (BatchNorm's moving statistics) are not synchronised through the store: after each step
// the first context's are copied to the others. Outputs, metrics, Score and Predict see the slices'
// outputs concatenated in slice order; GetParams and checkpoints read the first context's parameters
// (all contexts hold the same ones). With one context everything runs as on one device, without a store.
//
// Distributed training (FitOptions::kvstore "dist_sync", "dist_async" or "dist_device_sync"; the process is
// a worker started by `troupe launch`, kvstore/dist.h): the store is created by InitOptimizer (it joins the
// cluster), the servers run the optimizer (its config travels with the per-parameter multipliers; with
// dist_sync rescale_grad is 1 / (batch * workers), MXNet's rule), and Fit starts every worker from worker
// 0's initial parameters (Init, then Pull). Each worker reads its own part of the data (give the iterator
// num_parts / part_index). Worker 0 writes the checkpoints, without the optimizer's states (they live on
// the servers: KVStore::Checkpoint); resuming starts the servers' optimizer states afresh. Replacing the
// parameters (InitParams, SetParams, Bind) after the first Update is an error: the servers hold them.
//
// Thread-safety: a Module is driven by one thread. Callbacks run on that thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/io.h"
#include "kvstore/kvstore.h"
#include "graph/executor.h"
#include "graph/symbol.h"
#include "op/initializer.h"
#include "tensor/ndarray.h"
#include "op/optimizer.h"
#include "train/loss_scaler.h"

namespace troupe {

// ------------------------------------------------------------------------------------------ metrics
// A metric accumulates over batches. labels and preds are one array per label / output; preds of a
// classifier are (batch, classes) probabilities. num_pad: the last rows of the batch to leave out.
class EvalMetric {
 public:
  // MXNet 1.9's metrics (python/mxnet/metric.py) by their names and aliases:
  //   "acc" / "accuracy"                 accuracy: argmax of the row == label
  //   "top_k_acc" / "top_k_accuracy"     top_k_accuracy_<k> (params {"top_k", "5"}, default 1): the label
  //                                      among the k highest scores
  //   "ce" / "cross-entropy"             cross-entropy: mean of -log(p[label] + eps) (param eps, 1e-12)
  //   "mse", "mae", "rmse"               per batch the mean over every element of (label - pred)^2,
  //                                      |label - pred| or its root, labels and predictions of one dimension
  //                                      reshaped to (batch, 1) and broadcast against each other as numpy does
  //                                      (so a (batch,) label against (batch, classes) scores compares the
  //                                      label with every column); the metric is the mean of the batches'
  //                                      values (num_samples() counts batches, as MXNet's num_inst)
  //   "f1"                               binary F1 of class 1 (argmax of the row; labels with more than two
  //                                      distinct values in a batch are an error); param average "macro"
  //                                      (default: the mean of the batches' F1) or "micro" (F1 of all counts)
  //   "perplexity"                       exp(mean over the labels of -log(max(1e-10, p[label]))), p picked
  //                                      along the last axis; param ignore_label (default none): labels of
  //                                      that value are not counted
  // Throws troupe::Error for an unknown name (listing the known ones) or a bad parameter.
  static std::unique_ptr<EvalMetric> Create(const std::string& name, const Kwargs& params = {});
  // The names Create knows, aliases included.
  static std::vector<std::string> ListNames();
  virtual ~EvalMetric() = default;
  virtual void Update(const std::vector<NDArray>& labels, const std::vector<NDArray>& preds, int num_pad = 0) = 0;
  virtual void Reset();
  // "accuracy", "top_k_accuracy_5", "cross-entropy", "mse", "mae", "rmse", "f1", "perplexity"; a
  // composite's is "composite".
  const std::string& name() const { return name_; }
  // The mean over the samples (or batches) seen since Reset (NaN when none); perplexity: exp of the mean.
  virtual double Get() const;
  // (name, value) of every metric this one holds (MXNet's get_name_value): one pair, or a composite's.
  virtual std::vector<std::pair<std::string, double>> GetNameValue() const { return {{name_, Get()}}; }
  std::int64_t num_samples() const { return num_inst_; }

 protected:
  explicit EvalMetric(std::string name) : name_(std::move(name)) {}
  std::string name_;
  double sum_metric_ = 0;
  std::int64_t num_inst_ = 0;
};

// Several metrics updated together (MXNet's CompositeEvalMetric, what mx.metric.create(["acc", "ce"])
// makes). Get() is the first metric's value; GetNameValue() gives every metric's, in the order added.
class CompositeEvalMetric : public EvalMetric {
 public:
  CompositeEvalMetric() : EvalMetric("composite") {}
  // Throws troupe::Error for a null metric.
  void Add(std::unique_ptr<EvalMetric> metric);
  const std::vector<std::unique_ptr<EvalMetric>>& metrics() const { return metrics_; }
  void Update(const std::vector<NDArray>& labels, const std::vector<NDArray>& preds, int num_pad = 0) override;
  void Reset() override;
  double Get() const override;
  std::vector<std::pair<std::string, double>> GetNameValue() const override;

 private:
  std::vector<std::unique_ptr<EvalMetric>> metrics_;
};

// ------------------------------------------------------------------------------------------ checkpoints
// Writes prefix-symbol.json and prefix-%04d.params (epoch). Throws troupe::Error naming the file.
void SaveCheckpoint(const std::string& prefix, int epoch, const Symbol& symbol,
                    const std::map<std::string, NDArray>& arg_params,
                    const std::map<std::string, NDArray>& aux_params);
// Reads them back (arrays on the CPU). Throws troupe::Error naming the file; a name without "arg:"/"aux:"
// is an error naming it.
void LoadCheckpoint(const std::string& prefix, int epoch, Symbol* symbol,
                    std::map<std::string, NDArray>* arg_params, std::map<std::string, NDArray>* aux_params);

// ------------------------------------------------------------------------------------------ the module
struct BatchEndParam {
  int epoch = 0;
  std::int64_t nbatch = 0;           // batches done in this epoch
  const EvalMetric* metric = nullptr;  // the training metric so far in this epoch
  double samples_per_sec = 0;        // since the previous callback (Speedometer's figure)
};
using BatchEndCallback = std::function<void(const BatchEndParam&)>;
// epoch (0-based, the one just finished), the training metric, the evaluation metric (null without
// eval data).
using EpochEndCallback = std::function<void(int epoch, const EvalMetric& train, const EvalMetric* eval)>;

// MXNet's Speedometer (auto_reset=False): logs "Epoch[e] Batch [0-n]\tSpeed: x samples/sec\taccuracy=y" (a
// "\tname=value" per metric of a composite) every `frequent`
// batches through `log` (stderr when null).
BatchEndCallback Speedometer(int batch_size, int frequent = 50, std::function<void(const std::string&)> log = {});

// With several contexts, where the optimizer runs (MXNet's update_on_kvstore; the seed's reduction
// strategies):
//   kStore    the store sums the gradients and updates its copy of the weights, which every device pulls
//             ("local": reduce and update on the CPU; "device": reduce and update on a device);
//   kDevices  the store only sums; every device pulls the sum and updates its own copy with its own optimizer
//             states ("local": all-reduce on the CPU, then update on the devices);
//   kAuto     MXNet's choice (model.py _create_kvstore): kDevices for "local" when some parameter has more
//             than 16M elements, else kStore. The setting TROUPE_UPDATE_ON_KVSTORE (1: kStore, 0: kDevices;
//             MXNet's MXNET_UPDATE_ON_KVSTORE) forces it.
// Both give the same weights; kDevices spreads the optimizer's work over the devices.
enum class UpdatePlace { kAuto, kStore, kDevices };
// The place kAuto resolves to for a store type and the largest parameter's element count (kStore and
// kDevices are returned as given). Throws troupe::Error for a bad TROUPE_UPDATE_ON_KVSTORE.
UpdatePlace ResolveUpdatePlace(UpdatePlace place, const std::string& kvstore_type, std::int64_t largest_param);

struct FitOptions {
  OptimizerConfig optimizer;                 // rescale_grad defaults to 1 / batch_size when not given
  std::string initializer = "xavier";        // Initializer::Create name
  Kwargs initializer_params;
  std::string eval_metric = "acc";           // EvalMetric::Create name
  // When set, the training and the evaluation metric are each made by it (a CompositeEvalMetric for several,
  // MXNet's fit(eval_metric=[...])), and eval_metric is not used.
  std::function<std::unique_ptr<EvalMetric>()> make_metric;
  int begin_epoch = 0;                       // > 0 with checkpoint_prefix: resume from that checkpoint
  int num_epoch = 1;                         // train epochs begin_epoch .. num_epoch - 1
  std::uint64_t seed = 0;                    // ResourceManager::SeedRandom before initialising
  std::string checkpoint_prefix;             // empty: no checkpoints
  int checkpoint_period = 1;                 // epochs between checkpoints
  std::vector<BatchEndCallback> batch_end_callbacks;
  std::vector<EpochEndCallback> epoch_end_callbacks;
  // KVStore::Create type synchronising the parameters when the module has several contexts ("local",
  // "device", "nccl"), or a cluster's "dist_sync" / "dist_async" / "dist_device_sync" (any number of
  // contexts; see the file comment). A non-dist type is unused with one context.
  std::string kvstore = "local";
  // An existing store to use instead (MXNet's fit(kvstore=kv)): a dist program creates its store first to
  // learn its rank and the number of workers for the data partition (num_parts / part_index), then fits.
  std::shared_ptr<KVStore> store;
  UpdatePlace update_place = UpdatePlace::kAuto;  // with several contexts (see UpdatePlace)
  // Starting parameters (MXNet's fit(arg_params=, aux_params=)): when Fit initialises (not resuming, or the
  // module's parameters not set yet), these are copied over the initializer's values; the parameters not
  // given keep the initializer's (MXNet's allow_missing=True). A name that is no parameter of the symbol, or
  // a shape that differs from the symbol's, is an error naming it.
  std::map<std::string, NDArray> arg_params;
  std::map<std::string, NDArray> aux_params;
};

class Module {
 public:
  // data_names / label_names: the symbol's arguments fed from DataBatch::data / ::label, in order.
  explicit Module(Symbol symbol, std::vector<std::string> data_names = {"data"},
                  std::vector<std::string> label_names = {"softmax_label"}, Context ctx = Context::CPU(),
                  ExecutorOptions options = {});
  // Data-parallel over the contexts (cpu(0), cpu(1), ... or GPUs): see the file comment. One context is the
  // same as the constructor above. Throws troupe::Error for an empty list.
  Module(Symbol symbol, std::vector<std::string> data_names, std::vector<std::string> label_names,
         std::vector<Context> contexts, ExecutorOptions options = {});
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Binds for the given input shapes (one per data / label name). for_training false: no gradients.
  // With several contexts the shapes are the whole batch's; a batch smaller than the number of contexts is
  // an error.
  void Bind(const std::vector<TShape>& data_shapes, const std::vector<TShape>& label_shapes,
            bool for_training = true);
  bool bound() const;
  // Initialises every parameter (arguments that are not data or labels, and the auxiliary states) with
  // the initializer, then copies the given ones over them (shapes must match; names not in the symbol
  // are an error unless allow_extra).
  void InitParams(const Initializer& initializer, const std::map<std::string, NDArray>& arg_params = {},
                  const std::map<std::string, NDArray>& aux_params = {}, bool allow_extra = false);
  void InitOptimizer(const OptimizerConfig& config);
  // The optimizer (with several contexts it is the KVStore's updater, so its states are the ones a
  // checkpoint saves).
  Optimizer* optimizer() const;
  // The KVStore type Update creates on first use with several contexts, or a dist type (any number of
  // contexts; InitOptimizer joins the cluster). Fit sets it from FitOptions. Changing it drops the store.
  void SetKVStoreType(const std::string& type);
  // Uses `store` (its type becomes the module's; Fit does this for FitOptions::store). Until the first
  // Update the module has not touched it. Throws troupe::Error for a null store.
  void SetKVStore(std::shared_ptr<KVStore> store);
  // Leaves the cluster of a dist store in order (KVStore::Finalize); without it, the end of a dist store
  // the module holds alone counts as this worker's failure. A no-op for local stores or none.
  void FinalizeKVStore();
  // With several contexts: where Update runs the optimizer (Fit sets it from FitOptions).
  void SetUpdatePlace(UpdatePlace place);
  // Dynamic loss scaling (train/loss_scaler.h), for float16 mixed precision; null turns it off (the default).
  // With a scaler, Backward starts the loss outputs' gradients at its scale, and Update checks every gradient
  // (multi_all_finite): a step with an infinity or NaN is skipped (no parameter changes; the scaler halves its
  // scale), otherwise the gradients are divided by the scale and the optimizer runs. With a dist KVStore the
  // check reads the gradients summed over the workers (the store's PushPull comes first), so every worker
  // skips the same steps and keeps the same scale; the optimizer then runs on the workers (UpdatePlace kAuto
  // resolves to kDevices; kStore, or dist_async, is an error at Update).
  void SetLossScaler(std::shared_ptr<LossScaler> scaler);
  LossScaler* loss_scaler() const;
  // kStore or kDevices as resolved by the first Update (kAuto before it, or with one context).
  UpdatePlace update_place() const;
  // The store synchronising the contexts or the cluster's workers: null with one context and a non-dist
  // type, or before the first Update (a dist store: before InitOptimizer).
  KVStore* kvstore() const;

  void Forward(const DataBatch& batch, bool is_train);
  void Backward();
  void Update();  // one optimizer step for every parameter with a gradient
  const std::vector<NDArray>& GetOutputs() const;
  void UpdateMetric(EvalMetric* metric, const DataBatch& batch) const;

  // Trains (binding and initialising on first use from the iterator's shapes). Resumes from
  // options.checkpoint_prefix at options.begin_epoch when begin_epoch > 0. Throws troupe::Error naming what
  // is wrong (a missing checkpoint, shapes the symbol rejects ...).
  void Fit(DataIter* train, DataIter* eval, const FitOptions& options);
  // One pass over the iterator (reset first) with the metric; returns (name, value).
  std::pair<std::string, double> Score(DataIter* data, const std::string& metric = "acc");
  // The outputs over one pass (reset first), concatenated along the batch axis, padding removed: one array
  // per output, on the CPU.
  std::vector<NDArray> Predict(DataIter* data);

  // Copies of the current parameters on the CPU.
  void GetParams(std::map<std::string, NDArray>* arg_params, std::map<std::string, NDArray>* aux_params) const;
  void SetParams(const std::map<std::string, NDArray>& arg_params, const std::map<std::string, NDArray>& aux_params,
                 bool allow_missing = false);
  // SaveCheckpoint of the current parameters, plus prefix-%04d.states when an optimizer is set.
  void SaveCheckpoint(const std::string& prefix, int epoch) const;

  const Symbol& symbol() const;
  Executor* executor() const;  // null before Bind; the first context's with several
  const std::vector<Context>& contexts() const;
  // The executor of context i (0 <= i < contexts().size()); null before Bind.
  Executor* executor(int i) const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe
