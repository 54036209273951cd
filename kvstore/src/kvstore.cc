// KVStore: the factory, string keys, the optimizer as updater and the compression configuration. The
// local types live in kvstore_local.cc, "nccl" in kvstore_nccl.cc, which is built into the GPU backend
// (libtroupe_gpu.so, loaded on first use: base/gpu_module.h).
#include "kvstore/kvstore.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "base/error.h"
#include "base/gpu_module.h"
#include "kvstore/dist.h"
#include "kvstore/internal/gpu_table.h"
#include "kvstore/internal/store_checks.h"

namespace troupe {

namespace internal {
// Defined in kvstore_local.cc: "local" and "device".
std::unique_ptr<KVStore> CreateLocalKVStore(const std::string& type);
// "nccl", from the GPU backend (kvstore_nccl.cc); throws troupe::Error without CUDA, when the backend cannot
// be loaded, or without a GPU.
std::unique_ptr<KVStore> CreateNcclKVStore() {
  if (!GpuModuleBuilt()) {
    throw Error(
        "KVStore::Create(\"nccl\"): nccl needs GPUs and this build of troupe has no CUDA (configure with nvcc "
        "present, or -DTROUPE_USE_CUDA=ON); use local or device");
  }
  const GpuKVStoreTable* table = nullptr;
  try {
    table = &GpuModuleTable<GpuKVStoreTable>(kGpuKVStoreTableSymbol);
  } catch (const Error& e) {
    throw Error(std::string("KVStore::Create(\"nccl\"): nccl needs GPUs and ") + e.what() + "; use local or device");
  }
  return table->create_nccl();
}
}  // namespace internal

// Marks the int-key calls made by a string-key overload (their keys are mapped ones, not the user's).
class StringKeyCall {
 public:
  explicit StringKeyCall(KVStore* kv) : kv_(kv), saved_(kv->in_string_call_) { kv_->in_string_call_ = true; }
  ~StringKeyCall() { kv_->in_string_call_ = saved_; }
  StringKeyCall(const StringKeyCall&) = delete;
  StringKeyCall& operator=(const StringKeyCall&) = delete;

 private:
  KVStore* kv_;
  bool saved_;
};

namespace {

constexpr const char* kKnownTypes = "local, device, nccl, dist_sync, dist_async, dist_device_sync";

}  // namespace

std::unique_ptr<KVStore> KVStore::Create(const std::string& type) {
  if (type == "local" || type == "device") return internal::CreateLocalKVStore(type);
  if (type == "nccl") return internal::CreateNcclKVStore();
  if (type == "dist_sync" || type == "dist_async" || type == "dist_device_sync") {
    return CreateDistKVStore(type, DistConfig::FromEnv());
  }
  throw Error("KVStore::Create: unknown type '" + type + "'; known types: " + kKnownTypes);
}

int KVStore::IntKey(const std::string& key, bool create) {
  if (int_keys_used_) {
    throw Error("KVStore: string key '" + key +
                "' used in a store that already uses int keys; use one kind of key per store");
  }
  const auto it = std::find(string_keys_.begin(), string_keys_.end(), key);
  if (it != string_keys_.end()) return static_cast<int>(it - string_keys_.begin());
  if (!create) throw Error("KVStore: key '" + key + "' has not been initialised; call Init first");
  string_keys_.push_back(key);
  return static_cast<int>(string_keys_.size()) - 1;
}

void KVStore::NoteIntKeys(const char* op) {
  if (in_string_call_) return;
  if (!string_keys_.empty()) {
    throw Error(std::string("KVStore::") + op +
                ": int keys used in a store that already uses string keys; use one kind of key per store");
  }
  int_keys_used_ = true;
}

std::string KVStore::KeyName(int key) const {
  if (in_string_call_ && key >= 0 && static_cast<std::size_t>(key) < string_keys_.size()) {
    return "'" + string_keys_[static_cast<std::size_t>(key)] + "'";
  }
  return std::to_string(key);
}

void KVStore::Push(const std::vector<int>& keys, const std::vector<NDArray>& values, int priority) {
  NoteIntKeys("Push");
  CheckOpen("Push");
  const KeyGroups groups = internal::CheckArrays("Push", keys, values, "value", [this](int k) { return StoredOf(k); },
                                                 [this](int k) { return KeyName(k); });
  CheckPushValues("Push", groups, values);
  PushGroups(groups, values, priority);
}

void KVStore::Pull(const std::vector<int>& keys, const std::vector<NDArray>& outs, int priority) {
  NoteIntKeys("Pull");
  CheckOpen("Pull");
  const KeyGroups groups = internal::CheckArrays("Pull", keys, outs, "output", [this](int k) { return StoredOf(k); },
                                                 [this](int k) { return KeyName(k); });
  PullGroups(groups, outs, priority);
}

void KVStore::PushPull(const std::vector<int>& keys, const std::vector<NDArray>& values,
                       const std::vector<NDArray>& outs, int priority) {
  NoteIntKeys("PushPull");
  CheckOpen("PushPull");
  // Both halves are checked before either is pushed, so a bad output does not leave a push behind.
  auto stored = [this](int k) { return StoredOf(k); };
  auto name = [this](int k) { return KeyName(k); };
  const KeyGroups pushes = internal::CheckArrays("PushPull", keys, values, "value", stored, name);
  const KeyGroups pulls = internal::CheckArrays("PushPull", keys, outs, "output", stored, name);
  CheckPushValues("PushPull", pushes, values);
  PushPullGroups(pushes, values, pulls, outs, priority);
}

void KVStore::PushPullGroups(const KeyGroups& pushes, const std::vector<NDArray>& values, const KeyGroups& pulls,
                             const std::vector<NDArray>& outs, int priority) {
  PushGroups(pushes, values, priority);
  PullGroups(pulls, outs, priority);
}

void KVStore::Init(const std::vector<std::string>& keys, const std::vector<NDArray>& values) {
  internal::CheckKeyCount("Init", keys.size(), values.size(), "value");
  std::vector<int> ints;
  const std::size_t before = string_keys_.size();
  for (const auto& k : keys) ints.push_back(IntKey(k, true));
  StringKeyCall guard(this);
  try {
    Init(ints, values);
  } catch (...) {
    string_keys_.resize(before);  // the new names were never initialised
    throw;
  }
}

void KVStore::Push(const std::vector<std::string>& keys, const std::vector<NDArray>& values, int priority) {
  internal::CheckKeyCount("Push", keys.size(), values.size(), "value");
  std::vector<int> ints;
  for (const auto& k : keys) ints.push_back(IntKey(k, false));
  StringKeyCall guard(this);
  Push(ints, values, priority);
}

void KVStore::Pull(const std::vector<std::string>& keys, const std::vector<NDArray>& outs, int priority) {
  internal::CheckKeyCount("Pull", keys.size(), outs.size(), "output");
  std::vector<int> ints;
  for (const auto& k : keys) ints.push_back(IntKey(k, false));
  StringKeyCall guard(this);
  Pull(ints, outs, priority);
}

void KVStore::PushPull(const std::vector<std::string>& keys, const std::vector<NDArray>& values,
                       const std::vector<NDArray>& outs, int priority) {
  internal::CheckKeyCount("PushPull", keys.size(), values.size(), "value");
  internal::CheckKeyCount("PushPull", keys.size(), outs.size(), "output");
  std::vector<int> ints;
  for (const auto& k : keys) ints.push_back(IntKey(k, false));
  StringKeyCall guard(this);
  PushPull(ints, values, outs, priority);
}

void KVStore::SetOptimizer(const OptimizerConfig& config) {
  std::unique_ptr<Optimizer> opt = Optimizer::Create(config);  // throws for a bad config: keep the old one
  Optimizer* raw = opt.get();
  SetUpdater([raw](int key, const NDArray& merged, NDArray* stored) { raw->Update(key, *stored, merged); });
  optimizer_ = std::move(opt);
}

void KVStore::Checkpoint(const std::string& /*dir*/) {
  throw Error("KVStore::Checkpoint: a '" + type_ +
              "' store has no servers to checkpoint; save its values with NDArray::Save (dist types only)");
}

void KVStore::SetGradientCompression(const Kwargs& params) {
  std::string type;
  std::string threshold = "0.5";
  for (const auto& [k, v] : params) {
    if (k == "type") {
      type = v;
    } else if (k == "threshold") {
      threshold = v;
    } else {
      throw Error("KVStore::SetGradientCompression: unknown parameter '" + k + "'; known: type, threshold");
    }
  }
  if (type.empty()) throw Error("KVStore::SetGradientCompression: missing parameter 'type' (2bit or none)");
  if (type == "none") {
    compression_.clear();
    return;
  }
  if (type != "2bit") {
    throw Error("KVStore::SetGradientCompression: unknown type '" + type + "'; known types: 2bit, none");
  }
  if (type_ == "local") {
    throw Error(
        "KVStore::SetGradientCompression: gradient compression is not supported by a 'local' store "
        "(as in MXNet); use Create(\"device\") or a dist type");
  }
  char* end = nullptr;
  const double t = std::strtod(threshold.c_str(), &end);
  if (threshold.empty() || end == nullptr || *end != '\0' || !(t > 0.0)) {
    throw Error("KVStore::SetGradientCompression: threshold '" + threshold + "' must be a number > 0");
  }
  compression_ = {{"type", "2bit"}, {"threshold", threshold}};
}

}  // namespace troupe
