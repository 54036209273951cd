// Optimizers: declarative configurations (a type name and keyword parameters, never code, so that a
// configuration can travel to a KVStore server) and the updates they describe, applied to NDArrays through
// the engine. MXNet 1.9's update rules (src/operator/optimizer_op-inl.h and python/mxnet/optimizer), with
// its parameter names; every type takes learning_rate, wd (0), rescale_grad (1), clip_gradient (-1: none) and
// multi_precision (false: for float16 and bfloat16 weights, the update runs on a float32 copy of the weight,
// kept with the index's states, with the gradient converted to float32, and the weight is that copy rounded;
// float32 and float64 weights are updated as they are):
//
//   "sgd":  learning_rate (0.01), momentum (0)
//           g = clip(rescale_grad * grad) + wd * weight
//           momentum == 0: weight -= lr * g
//           else:          mom = momentum * mom - lr * g; weight += mom
//   "nag":  learning_rate (0.01), momentum (0); Nesterov momentum, MXNet's NAG / nag_mom_update:
//           momentum == 0: as "sgd" without momentum
//           else: g = clip(rescale_grad * grad) + wd * weight; mom = momentum * mom;
//                 weight' = weight - mom + (momentum + 1) * (mom - lr * g);
//                 mom -= lr * (clip(rescale_grad * grad) + wd * weight')
//           (MXNet 1.9's kernel runs in place, so the momentum's weight-decay term reads the already updated
//           weight'; with wd == 0 this is the textbook rule mom' = momentum mom - lr g,
//           weight' = weight + momentum mom' - lr g. Checked against MXNet 1.9.1.)
//   "adam": learning_rate (0.001), beta1 (0.9), beta2 (0.999), epsilon (1e-8); with t the update count of
//           that index:
//           g = clip(rescale_grad * grad + wd * weight) (MXNet 1.9's adam_update clips after adding the
//           weight decay, unlike sgd); m = beta1 m + (1 - beta1) g;
//           v = beta2 v + (1 - beta2) g^2; lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t);
//           weight -= lr_t * m / (sqrt(v) + epsilon)
//   "adagrad": learning_rate (0.01), eps (1e-7); MXNet's AdaGrad (dense):
//           g = clip(rescale_grad * grad); history += g^2;
//           weight -= lr * (g / sqrt(history + eps) + wd * weight)
//   "rmsprop": learning_rate (0.001), gamma1 (0.9), gamma2 (0.9), epsilon (1e-8), centered (False),
//           clip_weights (-1: none); g = clip(rescale_grad * grad + wd * weight);
//           centered == False (Tieleman & Hinton, rmsprop_update):
//             n = (1 - gamma1) g^2 + gamma1 n; weight -= lr * g / sqrt(n + epsilon)
//           centered == True (Graves, rmspropalex_update):
//             n = (1 - gamma1) g^2 + gamma1 n; gm = (1 - gamma1) g + gamma1 gm;
//             delta = gamma2 delta - lr * g / sqrt(n - gm^2 + epsilon); weight += delta
//           then weight = clip(weight, clip_weights).
//
// Learning-rate schedules (OptimizerConfig::lr_scheduler, MXNet's mx.lr_scheduler) replace the constant
// learning_rate: lr = schedule(num_update), num_update being the largest update count over all indices so
// far (MXNet's Optimizer.num_update: the first update of any index sees 1), then times the index's lr_mult.
// base_lr (optional) defaults to the optimizer's learning_rate; giving both with different values is an
// error (MXNet silently lets learning_rate win for some schedulers and not others). Every schedule takes
// warmup_steps (0), warmup_begin_lr (0, <= base_lr) and warmup_mode ("linear" | "constant"):
//   n < warmup_steps: linear: warmup_begin_lr + (base_lr - warmup_begin_lr) * n / warmup_steps;
//                     constant: warmup_begin_lr
//   "factor":      step (>= 1, required), factor (1, in [0, 1]), stop_factor_lr (1e-8):
//                  base_lr * factor^k, k = max(0, ceil(n / step) - 1) (MXNet's "n > count + step" loop, counted from
//                  update 0, not from the end of the warm-up), never below stop_factor_lr
//   "multifactor": step (increasing list of update counts >= 1, required), factor (1, in [0, 1]):
//                  base_lr * factor^(number of steps s with n > s)
//   "cosine":      max_update (> warmup_steps, required), final_lr (0):
//                  final_lr + (base_lr - final_lr) * (1 + cos(pi * (n - warmup_steps) /
//                  (max_update - warmup_steps))) / 2 up to max_update, final_lr after it
// The schedule is a function of num_update alone, and num_update follows from the per-index step counts
// that SaveStates records, so a run resumed from saved states continues the schedule exactly.
//
// Thread-safety: one thread calls Update on an Optimizer (the update itself runs on the engine, ordered by
// the arrays' variables: it reads grad and writes weight and the index's state).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensor/ndarray.h"
#include "op/param.h"

namespace troupe {

struct OptimizerConfig {
  // Constructors rather than an aggregate, so that the short form {"sgd", {{"learning_rate", "0.1"}}} leaves
  // the scheduler out without -Wmissing-field-initializers warnings.
  OptimizerConfig() = default;
  OptimizerConfig(std::string optimizer_type, Kwargs optimizer_params = {}, std::string scheduler = {},
                  Kwargs scheduler_params = {})
      : type(std::move(optimizer_type)),
        params(std::move(optimizer_params)),
        lr_scheduler(std::move(scheduler)),
        lr_scheduler_params(std::move(scheduler_params)) {}

  std::string type = "sgd";
  Kwargs params;  // e.g. {{"learning_rate", "0.1"}, {"momentum", "0.9"}}
  // Empty: a constant learning rate; else "factor", "multifactor" or "cosine" with its parameters, e.g.
  // lr_scheduler = "factor", lr_scheduler_params = {{"step", "100"}, {"factor", "0.5"}}.
  std::string lr_scheduler;
  Kwargs lr_scheduler_params;
  // Per-index multipliers of the learning rate and weight decay, index -> (lr_mult, wd_mult) (MXNet's
  // optimizer with idx2name: no weight decay on biases, the symbol's lr_mult / wd_mult attributes). Create
  // applies them (SetMultipliers); they travel with the config, so a dist store's servers use them too.
  std::map<int, std::pair<float, float>> multipliers;
};

class LrScheduler;  // a parsed lr_scheduler; defined in op/src/optimizer.cc

class Optimizer {
 public:
  // Throws troupe::Error for an unknown type or scheduler (listing the known ones) or a bad parameter
  // (naming the optimizer or scheduler and the parameter).
  static std::unique_ptr<Optimizer> Create(const OptimizerConfig& config);
  static std::vector<std::string> ListTypes();
  static std::vector<std::string> ListLrSchedulers();
  bool multi_precision() const { return multi_precision_; }
  virtual ~Optimizer() = default;

  // Pushes one update of weight from grad. index identifies the parameter (its state: momentum, Adam's m
  // and v and step count, created on first use with weight's shape, device and type). Returns at once.
  // Throws troupe::Error when grad and weight differ in shape, type or device.
  void Update(int index, const NDArray& weight, const NDArray& grad);
  // The updates of several indices (weights[i] from grads[i]), with the same results as Update on each in
  // order. sgd pushes them as one engine function (MXNet's multi_sgd_update / multi_sgd_mom_update) when the
  // arrays share a device, dtype and engine; otherwise, and for the other optimizers, one per index. Throws
  // troupe::Error (before pushing anything) when the lists differ in length or an update's arguments are bad.
  void UpdateMulti(const std::vector<int>& indices, const std::vector<NDArray>& weights,
                   const std::vector<NDArray>& grads);
  // How many indices a caller hands to one UpdateMulti (MXNet's MXNET_OPTIMIZER_AGGREGATION_SIZE): for sgd
  // TROUPE_OPTIMIZER_AGGREGATION_SIZE (default 4, as MXNet), 1 for the others.
  virtual int aggregation_size() const { return 1; }
  // UpdateMulti over consecutive groups of up to aggregation_size() (MXNet's Updater grouping).
  void UpdateGrouped(const std::vector<int>& indices, const std::vector<NDArray>& weights,
                     const std::vector<NDArray>& grads);
  // A factor on rescale_grad for the following updates, 1 after Create: Gluon's Trainer sets rescale_grad to
  // the configured value over the batch size at every step. Throws troupe::Error unless positive and finite.
  void SetGradScale(float scale);
  float grad_scale() const { return grad_scale_; }

  // Per-index multipliers of the learning rate and weight decay (MXNet's lr_mult / wd_mult), default 1.
  void SetMultipliers(int index, float lr_mult, float wd_mult);
  // The learning rate at the current num_update() (MXNet's Optimizer.learning_rate): the constant one or the
  // schedule's value. An update counts itself first, so the rate it uses is the schedule at its new count.
  float learning_rate() const;
  // Throws troupe::Error when the configuration has an lr_scheduler (as MXNet does: the schedule owns it).
  void SetLearningRate(float lr);
  // The largest update count over all indices (MXNet's num_update); the schedule's position.
  std::int64_t num_update() const { return num_update_; }
  const OptimizerConfig& config() const { return config_; }

  // The states of every index (for checkpoints, MXNet's `.states` files), in one of two formats:
  //
  // kMXNet (the default): what MXNet 1.9's Module.save_optimizer_states writes, pickle.dumps(updater.states)
  //   with Python 3.8+'s default protocol 4, byte for byte as CPython writes it: a dict index -> the state
  //   MXNet's create_state makes, None (sgd and nag without momentum), an NDArray (sgd and nag: momentum;
  //   adagrad: history) or a tuple of NDArrays (adam: (mean, var); rmsprop: (n,), centered (n, g, delta)),
  //   each NDArray pickled by its __reduce__ (mxnet.ndarray.ndarray.NDArray with {'handle': its record}).
  //   With multi_precision, an index of a half-precision weight holds MXNet's pair (float32 weight, state).
  //   MXNet's Module.load_optimizer_states reads it. The format has no update counts (MXNet keeps them in
  //   the optimizer object, pickled only with dump_optimizer=True): after loading it every index counts
  //   from zero again, as in MXNet after load_optimizer_states, so adam's bias correction and a schedule
  //   restart.
  // kTroupe: NDArray::Save/Load's format (.params), names "<index>:<state>" (state: "momentum" for sgd and
  //   nag with momentum, "mean" and "var" for adam, "history" for adagrad, "n" or, centered, "n", "g",
  //   "delta" for rmsprop; "weight32": multi_precision's float32 weight), "<index>:step" counts and
  //   "optimizer:<type>"; a loaded optimizer also takes
  //   num_update and so its schedule's position from the counts, so that a resumed run continues exactly
  //   (a KVStore server's own checkpoints use it).
  //
  // LoadStates reads both (a pickle starts with PROTO, 0x80). It throws troupe::Error naming the file for a
  // troupe file of another optimizer type, and for a pickle whose state of an index does not have this
  // optimizer's layout (naming the index, what it holds and what was expected: the pickle does not record
  // the type, so optimizers with the same layout, say sgd with momentum and adagrad, cannot be told apart),
  // for pickles with anything but MXNet's states (dump_optimizer=True's optimizer object, other globals,
  // opcodes outside protocols 2 to 5: the error names the opcode and byte offset) and for a multi_precision
  // (weight32, state) pair when this optimizer is not multi_precision. An array's shape and dtype are checked against the weight at its first update
  // (the error names the file).
  //
  // key_names (kMXNet only): indices whose key is the parameter's name. MXNet's Module keys its states by
  // the parameter's position (index * number of devices + device when the devices update) but, when a
  // KVStore updates (several devices, update_on_kvstore), by the parameter's name; SaveStates writes these
  // indices as str keys, LoadStates reads str keys as the index of that name (an unknown name is an error).
  enum class StatesFormat { kMXNet, kTroupe };
  void SaveStates(const std::string& path, StatesFormat format = StatesFormat::kMXNet,
                  const std::map<int, std::string>& key_names = {}) const;
  void LoadStates(const std::string& path, const std::map<int, std::string>& key_names = {});

 protected:
  explicit Optimizer(OptimizerConfig config) : config_(std::move(config)) {}
  float grad_scale_ = 1.0f;  // SetGradScale
  // The type's update of one index (Update, after multi_precision's substitution of the float32 copy) and of
  // several (UpdateMulti; the default runs UpdateOne on each).
  virtual void UpdateOne(int index, const NDArray& weight, const NDArray& grad) = 0;
  virtual void UpdateGroup(const std::vector<int>& indices, const std::vector<NDArray>& weights,
                           const std::vector<NDArray>& grads);
  // The learning rate of an update of index, after CountUpdate(index): schedule(num_update) or the constant
  // one, times lr_mult.
  float lr_of(int index) const;
  float wd_of(int index, float wd) const;
  // The state arrays of an index, created (zeros like weight) on first use; names as in SaveStates.
  std::vector<NDArray>& StateOf(int index, const NDArray& weight, const std::vector<std::string>& names);
  // Counts one update of index (before its learning rate is taken, as MXNet's _update_count) and returns
  // the index's new count t.
  std::int64_t CountUpdate(int index);

  // How this configuration keeps an index's states: their names (as StateOf's) and whether MXNet's
  // create_state returns them as a tuple (adam, rmsprop) or, one state, as a bare NDArray (sgd and nag
  // momentum, adagrad history); no names: None.
  struct StateLayout {
    std::vector<std::string> names;
    bool tuple = false;
  };
  virtual StateLayout Layout() const = 0;

  OptimizerConfig config_;
  float learning_rate_ = 0.01f;

 private:
  std::map<int, std::pair<float, float>> multipliers_;
  std::map<int, std::vector<NDArray>> states_;
  std::map<int, std::vector<std::string>> state_names_;
  std::map<int, std::int64_t> steps_;
  bool multi_precision_ = false;
  std::map<int, NDArray> masters_;  // multi_precision: the float32 weight of each half-precision index
  NDArray& MasterOf(int index, const NDArray& weight);
  std::int64_t num_update_ = 0;
  std::string states_file_;  // the file the states were loaded from, for StateOf's errors
  std::shared_ptr<const LrScheduler> scheduler_;  // null: constant learning_rate_
  void InitScheduler();
  void SaveTroupeStates(const std::string& path) const;
  void LoadTroupeStates(const std::string& path);
  void LoadMXNetStates(const std::string& path, const std::string& bytes,
                       const std::map<int, std::string>& key_names);
};

}  // namespace troupe
