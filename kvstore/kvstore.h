// KVStore — parameter synchronisation (the seed's two-level parameter server; DESIGN.md §3). This issue's
// level: the devices of one machine. Keys are ints or strings; a value is an NDArray per device.
//
// Semantics (MXNet's):
//   - Init(keys, values): each key once, with its initial value (copied into the store).
//   - Push(keys, values): the values of a key (one per device: the key repeated in `keys`) are summed; with
//     an updater (SetUpdater / SetOptimizer) the store's value becomes updater(key, sum, stored), otherwise
//     the sum replaces the stored value.
//   - Pull(keys, outs): each output receives the stored value (a key repeated for several devices' outputs).
//   - PushPull: Push then Pull, the pull ordered after the push.
//   - Everything is pushed to the engine and returns at once; reading an output waits. Functions of a
//     higher `priority` (MXNet: earlier layers get larger priorities, -index) are run first when several
//     are ready.
//   - Errors (uninitialised key, wrong shape or dtype, a key initialised twice, a string key mixed with int
//     keys) are troupe::Error thrown at the call, naming the key; the store stays usable.
// Types: "local" (the store and the reduction on cpu(0), update on cpu(0)), "device" (the store, the
// reduction and the update on the device of the key's first Init value), "nccl" (as "device", but a push
// takes GPU values only, at most one per GPU for a key, summed by one NCCL all-reduce across those GPUs;
// MXNet's KVStoreNCCL). Contexts cpu(0), cpu(1), ... are distinct devices. On the host the reduction reads
// every CPU value in place (one engine function per key reading the values' variables and writing the
// key's merge buffer); values on other devices are first copied to the reduction device. Without an
// updater a push's sum becomes the stored value (no extra copy).
// "nccl" (kvstore/src/kvstore_nccl.cc, in the GPU backend loaded on demand: base/gpu_module.h): Create("nccl")
// throws troupe::Error in a build without CUDA, when the backend cannot be loaded, or on a machine without a
// GPU. A push of a key is one engine function (ncclAllReduce per value in one NCCL
// group, on communicators made once per set of GPUs); the sum is then copied to the key's device when
// that device took no part in the push. Pulls copy the stored value to any device. Two values of a key on
// one GPU, a CPU value or a bool array in a push are errors; so is gradient compression (as in MXNet).
// Gradient compression ("device" only, as MXNet): with SetGradientCompression on, Push quantizes each value
// to 2 bits on its device (kvstore/gradient_compression.h; residuals kept per key and device), decodes on the
// reduction device and sums the decoded values (MXNet's CommDevice::ReduceCompressed). CPU float32 only.
// The dist types (a cluster of scheduler, servers and workers over TCP) are described in kvstore/dist.h.
//
// Thread-safety: one thread drives a KVStore (as MXNet's); the arrays it fills may be read from any thread.
#pragma once

#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tensor/ndarray.h"
#include "op/optimizer.h"
#include "op/param.h"

namespace troupe {

class KVStore {
 public:
  // updater(key, merged gradient, stored weight): updates the stored weight in place (pushes its work).
  using Updater = std::function<void(int key, const NDArray& merged, NDArray* stored)>;

  // "local", "device", "nccl", or "dist_sync", "dist_async", "dist_device_sync" (a worker of the cluster
  // the DMLC_* environment describes: DistConfig::FromEnv, kvstore/dist.h). Throws troupe::Error for an
  // unknown type (listing the known ones) or a dist cluster that cannot be joined.
  static std::unique_ptr<KVStore> Create(const std::string& type = "local");
  virtual ~KVStore() = default;

  const std::string& type() const { return type_; }
  virtual int rank() const { return 0; }
  virtual int num_workers() const { return 1; }

  virtual void Init(const std::vector<int>& keys, const std::vector<NDArray>& values) = 0;
  // Push, Pull and PushPull are the same steps for every type: every argument is checked (one array per
  // key, each key initialised, each array with its key's shape, dtype and engine, then the type's own
  // checks) before anything is pushed, so an error leaves the store as it was; then the type gets the
  // keys' groups (PushGroups, PullGroups, PushPullGroups). Nothing waits: the engine orders the work.
  void Push(const std::vector<int>& keys, const std::vector<NDArray>& values, int priority = 0);
  void Pull(const std::vector<int>& keys, const std::vector<NDArray>& outs, int priority = 0);
  void PushPull(const std::vector<int>& keys, const std::vector<NDArray>& values, const std::vector<NDArray>& outs,
                int priority = 0);

  // String keys: mapped to int keys on first use (Init); mixing them with int keys in one store is an error.
  void Init(const std::vector<std::string>& keys, const std::vector<NDArray>& values);
  void Push(const std::vector<std::string>& keys, const std::vector<NDArray>& values, int priority = 0);
  void Pull(const std::vector<std::string>& keys, const std::vector<NDArray>& outs, int priority = 0);
  void PushPull(const std::vector<std::string>& keys, const std::vector<NDArray>& values,
                const std::vector<NDArray>& outs, int priority = 0);

  // Brace lists of int keys (kv->Push({3}, {g})) pick these: without them {3} or {0} would also match the
  // string overloads (through vector<string>'s size constructor, or 0 as a null char pointer) and the call
  // would be ambiguous.
  void Init(std::initializer_list<int> keys, const std::vector<NDArray>& values) {
    Init(std::vector<int>(keys), values);
  }
  void Push(std::initializer_list<int> keys, const std::vector<NDArray>& values, int priority = 0) {
    Push(std::vector<int>(keys), values, priority);
  }
  void Pull(std::initializer_list<int> keys, const std::vector<NDArray>& outs, int priority = 0) {
    Pull(std::vector<int>(keys), outs, priority);
  }
  void PushPull(std::initializer_list<int> keys, const std::vector<NDArray>& values, const std::vector<NDArray>& outs,
                int priority = 0) {
    PushPull(std::vector<int>(keys), values, outs, priority);
  }

  virtual void SetUpdater(Updater updater) = 0;
  // An Optimizer created from the config becomes the updater (its index = the key).
  virtual void SetOptimizer(const OptimizerConfig& config);
  Optimizer* optimizer() const { return optimizer_.get(); }
  // MXNet's set_gradient_compression: {"type": "2bit", "threshold": "0.5"}; {"type": "none"} turns it off.
  // Throws troupe::Error for a "local" or "nccl" store (MXNet supports it for device and dist types only),
  // another type or a bad threshold.
  virtual void SetGradientCompression(const Kwargs& params);
  // The stored configuration (empty when off).
  const Kwargs& gradient_compression() const { return compression_; }
  // All workers reach it (a no-op on one machine).
  virtual void Barrier() {}
  // dist types: leaves the cluster in order once this worker's pending calls finished — the only clean
  // leave: a dist store destroyed without Finalize() counts as this worker's failure, and a dist_sync job
  // then fails for every worker with an error naming it. Throws troupe::Error when the job failed (a worker
  // died or failed, the workers' models differ, a wait made no progress), naming why. The store can't be
  // used afterwards (troupe::Error). A no-op for the other types.
  virtual void Finalize() {}
  // dist types (kvstore/dist.h): asks every server to write its checkpoint (values, optimizer configuration
  // and state) to its configured checkpoint directory, and returns when all have written. `dir` must be
  // empty: no peer names a path to a server (troupe::Error otherwise). Other types throw troupe::Error
  // (save their values with NDArray::Save instead).
  virtual void Checkpoint(const std::string& dir = {});

 protected:
  explicit KVStore(std::string type) : type_(std::move(type)) {}

  // key -> the positions of its arrays in the call, keys in increasing order (MXNet's GroupKVPairs).
  using KeyGroups = std::map<int, std::vector<std::size_t>>;
  // The stored value of `key` (what the checks compare arrays with), or null when it is not initialised.
  virtual const NDArray* StoredOf(int key) const = 0;
  // Throws troupe::Error when the store cannot take calls any more (a dist store after Finalize).
  virtual void CheckOpen(const char* /*op*/) const {}
  // The type's own checks of a push's values (gradient compression, NCCL's devices), after the shared ones
  // and before anything is pushed.
  virtual void CheckPushValues(const char* /*op*/, const KeyGroups& /*groups*/, const std::vector<NDArray>& /*values*/) {}
  virtual void PushGroups(const KeyGroups& groups, const std::vector<NDArray>& values, int priority) = 0;
  virtual void PullGroups(const KeyGroups& groups, const std::vector<NDArray>& outs, int priority) = 0;
  // PushGroups then PullGroups, unless the type does both in one step (dist: one round trip).
  virtual void PushPullGroups(const KeyGroups& pushes, const std::vector<NDArray>& values, const KeyGroups& pulls,
                              const std::vector<NDArray>& outs, int priority);
  // The int key of a string key; `create` (Init) maps a new string key to the next int. Throws
  // troupe::Error for an unknown key when !create, or when the store already uses int keys.
  int IntKey(const std::string& key, bool create);
  // Called by a subclass at the start of every int-key entry point: records that int keys are used, and
  // throws troupe::Error when the store uses string keys (unless called through the string overloads).
  void NoteIntKeys(const char* op);
  // A key as the caller wrote it, for error messages: 'name' for string keys, the number otherwise.
  std::string KeyName(int key) const;

  std::string type_;
  std::unique_ptr<Optimizer> optimizer_;
  Kwargs compression_;
  bool int_keys_used_ = false;

 private:
  friend class StringKeyCall;
  std::vector<std::string> string_keys_;  // index = int key
  bool in_string_call_ = false;           // inside a string-key overload (its int keys are mapped ones)
};

}  // namespace troupe
