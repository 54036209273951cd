// Trainer: applies an optimizer to a block's parameters after autograd's backward pass (Gluon's
// gluon.Trainer), on one device, several, or a cluster through the KVStore.
//
//   nn::Trainer trainer(net->CollectParams(), {"sgd", {{"learning_rate", "0.1"}, {"momentum", "0.9"}}});
//   {
//     autograd::RecordScope record;
//     loss = loss_fn((*net)(x), y);
//   }
//   autograd::Backward({loss});
//   trainer.Step(batch_size);                     // gradients scaled by 1 / batch_size
//
// Where the optimizer runs, as Gluon decides it:
//   - one device, no cluster: here, on each parameter's array (no store);
//   - several devices (the parameters initialised on a context list): the store ("local" or "device") sums
//     every device's gradient into every device's gradient buffer, and each device updates its own copy
//     (optimizer index parameter * devices + device, so each keeps its own states);
//   - a cluster ("dist_sync", "dist_device_sync", "dist_async"; the process is a worker started by `troupe
//     launch`, kvstore/dist.h): the servers run the optimizer, each step pushes the gradients and pulls the
//     weights (one PushPull per parameter). Every worker starts from worker 0's initial parameters (the
//     first step initialises the store and pulls). The servers' rescale_grad is fixed by the first step
//     (the configured rescale_grad over its batch_size): a later step with another batch size is an error.
//     The store sums the workers' gradients: pass the global batch size (per-worker batch times workers) for
//     the single-process mean.
// The optimizer's rescale_grad is multiplied by 1 / batch_size at every step (Gluon's rule: a loss already
// averaged over the batch passes 1). Weight decay applies to every parameter times its wd_mult (Gluon's
// rule; Module instead leaves out biases), the learning rate times its lr_mult.
//
// Stale gradients: a parameter whose gradient buffer was not written since the previous step (no backward
// pass reached it) is an error naming it, unless ignore_stale_grad, which skips it (Gluon's rule).
// Parameters with grad_req kNullOp are not trained.
//
// Thread-safety: one thread drives a Trainer.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kvstore/kvstore.h"
#include "nn/parameter.h"
#include "op/optimizer.h"

namespace troupe::nn {

class Trainer {
 public:
  // kvstore: a KVStore::Create type used with several devices or a cluster ("local", "device", "dist_sync",
  // "dist_device_sync", "dist_async"); store: an existing store instead (a dist program creates its store
  // first to learn its rank). Throws troupe::Error for a bad optimizer configuration or parameters on
  // different device lists.
  Trainer(const ParameterDict& params, const OptimizerConfig& optimizer, std::string kvstore = "device",
          std::shared_ptr<KVStore> store = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // AllReduceGrads then Update (on a cluster: one PushPull). Throws troupe::Error for a batch size below 1,
  // an uninitialised parameter, a stale gradient (see above) or a changed batch size on a cluster.
  void Step(int batch_size, bool ignore_stale_grad = false);
  // Sums every parameter's gradient over the devices into each device's buffer (nothing with one device).
  // Not on a cluster, where the servers update (troupe::Error).
  void AllReduceGrads();
  // The optimizer step from the gradients as they are, scaled by 1 / batch_size. Not on a cluster.
  void Update(int batch_size, bool ignore_stale_grad = false);

  float learning_rate() const;
  void SetLearningRate(float lr);
  Optimizer* optimizer() const;
  // The store, or null (one device and no cluster, or before the first step).
  KVStore* kvstore() const;
  // The optimizer's states (Optimizer::SaveStates / LoadStates); on a cluster they live on the servers
  // (troupe::Error).
  void SaveStates(const std::string& path) const;
  void LoadStates(const std::string& path);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe::nn
