// Module: MXNet's mx.mod.Module (python/mxnet/module/module.py, executor_group.py's data parallelism and
// base_module.py's fit, score, predict), over troupe's Executor.
//
// Parameters live in the training executor's argument arrays. Evaluation on batches of another shape (a
// test iterator with another batch size) runs through a second executor bound to the same parameter
// arrays (MXNet's shared module), so no copy is made and nothing is rebound per epoch.
//
// Several contexts: `exec` is the first context's executor, `others` the rest, one per batch slice. The
// optimizer stays owned by the module and becomes the KVStore's updater (what KVStore::SetOptimizer does),
// so that the store can be recreated when the parameters are replaced (InitParams / SetParams / Bind: the
// store's copy of a weight can only be set by Init) without losing the optimizer's states, and checkpoints
// and resume use the same optimizer as on one context. Batches of another shape (evaluation with another
// batch size) run on the first context only, through a shared executor as above.
//
// Reproducibility: Fit seeds the device generators with options.seed before initialising, and again at the
// start of every epoch with a seed derived from (seed, epoch). An epoch's random draws (Dropout masks ...)
// therefore do not depend on what ran before it, which is what lets a run resumed from a checkpoint match
// an uninterrupted one.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "actors/config.h"
#include "base/error.h"
#include "op/imperative.h"
#include "tensor/resource.h"
#include "train/internal/checkpoint.h"
#include "train/train.h"

namespace troupe {

namespace {

using Clock = std::chrono::steady_clock;

std::string JoinNames(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::string ShapesText(const std::vector<TShape>& shapes) {
  std::string s = "[";
  for (std::size_t i = 0; i < shapes.size(); ++i) s += (i ? ", " : "") + shapes[i].ToString();
  return s + "]";
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Copies a batch array into an executor input, converting the type or the shape when they differ only in
// form (labels (B,) into (B, 1), int labels into float).
void CopyInput(const NDArray& from, const NDArray& to, const std::string& name) {
  NDArray src = from;
  if (src.Size() != to.Size()) {
    throw Error("Module: input '" + name + "' of shape " + from.shape().ToString() + " does not fit the bound shape " +
                to.shape().ToString() + " (bind with the iterator's DataShapes / LabelShapes)");
  }
  if (src.dtype() != to.dtype()) src = src.AsType(to.dtype());
  if (!(src.shape() == to.shape())) src = src.Reshape(to.shape());
  CopyFromTo(src, to);
}

// Copies given[name] into `to` (shapes must match; `who` names the caller in the error). False when `given`
// has no value for name.
bool CopyGivenParam(const char* who, const std::string& name, const std::map<std::string, NDArray>& given,
                    const NDArray& to) {
  const auto it = given.find(name);
  if (it == given.end()) return false;
  if (!(it->second.shape() == to.shape())) {
    throw Error(std::string(who) + ": parameter '" + name + "' has shape " + it->second.shape().ToString() +
                " but the symbol needs " + to.shape().ToString());
  }
  CopyInput(it->second, to, name);
  return true;
}

std::uint64_t EpochSeed(std::uint64_t seed, int epoch) {
  // splitmix64 of (seed, epoch): distinct epochs get unrelated streams.
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (static_cast<std::uint64_t>(epoch) + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Whether the optimizer keeps nothing between updates (plain SGD without momentum or a learning-rate
// schedule, whose position is part of the states): then a run resumes exactly from a checkpoint without a
// .states file (one written by MXNet, say).
bool StatelessSgd(const OptimizerConfig& c) {
  if (c.type != "sgd" || !c.lr_scheduler.empty()) return false;
  for (const auto& kv : c.params) {
    if (kv.first == "momentum" && param_detail::ParseReal(kv.second) != 0) return false;
  }
  return true;
}

}  // namespace

struct Module::Impl {
  Symbol symbol;
  std::vector<std::string> data_names, label_names;
  Context ctx;                    // contexts[0]
  std::vector<Context> contexts;  // one or more
  ExecutorOptions options;

  std::vector<std::string> arg_names, aux_names, output_names;
  std::vector<std::string> param_names;  // arguments that are neither data nor labels, in argument order
  std::vector<int> param_arg_index;      // their index in arg_names

  std::unique_ptr<Executor> exec;  // the training (or first bound) executor
  std::vector<TShape> data_shapes, label_shapes;
  bool for_training = false;
  bool params_initialized = false;
  // Executors for other input shapes sharing exec's parameter arrays, by data + label shapes.
  std::map<std::string, std::unique_ptr<Executor>> shared_execs;
  Executor* current = nullptr;  // the executor of the last Forward

  std::unique_ptr<Optimizer> optimizer;

  // Data parallelism (contexts.size() > 1).
  std::vector<std::unique_ptr<Executor>> others;         // contexts 1 .. k-1
  std::vector<std::pair<std::int64_t, std::int64_t>> slices;  // [begin, end) of each context's rows
  bool dp_current = false;                                // the last Forward ran on every context
  std::vector<NDArray> merged_outputs;                     // the slices' outputs concatenated (GetOutputs)
  bool merged_valid = false;
  std::string kvstore_type = "local";
  // Created by Update on first use (a dist store: by InitOptimizer, which needs its number of workers);
  // reset when parameters are replaced. kv_ready: its keys are initialised (Update's first step).
  std::shared_ptr<KVStore> kv;  // shared: a store given to Fit (FitOptions::store) stays the caller's too
  bool kv_ready = false;
  UpdatePlace update_setting = UpdatePlace::kAuto;
  UpdatePlace update_place = UpdatePlace::kAuto;  // resolved when kv is created
  std::vector<std::pair<float, float>> multipliers;  // per parameter: (lr_mult, wd_mult) given to the optimizer

  std::shared_ptr<LossScaler> loss_scaler;  // SetLossScaler; null: no loss scaling
  bool multi() const { return contexts.size() > 1; }
  bool dist() const { return kvstore_type.rfind("dist", 0) == 0; }
  // Update goes through the store: several contexts, or a cluster.
  bool uses_store() const { return multi() || dist(); }
  // Parameter position -> name: the keys of MXNet's states when a KVStore updates.
  std::map<int, std::string> ParamKeyNames() const {
    std::map<int, std::string> out;
    for (std::size_t p = 0; p < param_names.size(); ++p) out[static_cast<int>(p)] = param_names[p];
    return out;
  }

  // The store's values are stale (the parameters were replaced, or the updater changed): a local store is
  // recreated on the next Update. A dist store cannot be re-initialised (the servers hold rank 0's values and
  // the other workers' rounds), so replacing parameters after its first Update is an error.
  void ResetStore(const char* what) {
    if (!dist()) {
      kv.reset();
      kv_ready = false;
      return;
    }
    if (kv_ready) {
      throw Error(std::string("Module::") + what + ": the parameters live on the '" + kvstore_type +
                  "' cluster's servers since the first Update and cannot be replaced there");
    }
  }
  // MXNet's _initialize_kvstore (Update's first step; Fit's start for a cluster, so that every worker trains
  // from worker 0's initial values).
  void InitStore() {
    const auto& args = exec->arg_arrays();
    const auto& grads = exec->grad_arrays();
    auto has_grad = [&](int i) { return static_cast<std::size_t>(i) < grads.size() && !grads[i].is_none(); };
    const std::size_t k = contexts.size();
    // On the store: it holds the weights and the optimizer runs on it (key = parameter index, the
    // optimizer's index as on one context; for a cluster the servers run it). On the devices: it only sums
    // (no updater; a push's sum replaces the stored value).
    std::int64_t largest = 0;
    for (int i : param_arg_index) largest = std::max<std::int64_t>(largest, args[i].Size());
    // Loss scaling on a cluster decides on the summed gradients, after the store's round trip, so the
    // workers run the optimizer (the servers would update before the decision).
    const bool scaled_dist = loss_scaler && dist();
    update_place = ResolveUpdatePlace(scaled_dist && update_setting == UpdatePlace::kAuto ? UpdatePlace::kDevices
                                                                                            : update_setting,
                                      kvstore_type, largest);
    if (scaled_dist) RequireWorkerUpdates();
    KVStore* store = EnsureStore();
    Optimizer* opt = optimizer.get();
    if (update_place == UpdatePlace::kStore) {
      if (dist()) {
        store->SetOptimizer(opt->config());  // the servers run it (with the multipliers, under the same keys)
      } else {
        store->SetUpdater([opt](int key, const NDArray& merged, NDArray* stored) { opt->Update(key, *stored, merged); });
      }
    } else {
      // The multipliers under the indices the devices use (as MXNet's idx2name for update on the devices).
      for (std::size_t p = 0; p < multipliers.size(); ++p) {
        const auto [lr_mult, wd_mult] = multipliers[p];
        for (std::size_t c = 0; c < k; ++c) opt->SetMultipliers(static_cast<int>(p * k + c), lr_mult, wd_mult);
      }
    }
    std::vector<int> keys;
    for (std::size_t p = 0; p < param_names.size(); ++p) {
      const int i = param_arg_index[p];
      if (!has_grad(i)) continue;
      store->Init({static_cast<int>(p)}, {args[i]});
      keys.push_back(static_cast<int>(p));
    }
    if (dist()) {
      // A cluster's servers took worker 0's values: every worker starts from them.
      for (int p : keys) {
        const int i = param_arg_index[static_cast<std::size_t>(p)];
        std::vector<NDArray> w;
        for (std::size_t c = 0; c < k; ++c) w.push_back(ExecAt(c)->arg_arrays()[i]);
        store->Pull(std::vector<int>(k, p), w, -p);
      }
    }
    kv_ready = true;
  }
  // Loss scaling with a cluster store needs the update on the workers (see InitStore).
  void RequireWorkerUpdates() const {
    if (kvstore_type.find("async") != std::string::npos) {
      throw Error("Module::Update: dynamic loss scaling needs a synchronous store: with " + kvstore_type +
                  " the servers apply each worker's push as it arrives, so a step cannot be skipped on every "
                  "worker; use dist_sync or dist_device_sync, or bfloat16 (no loss scaling)");
    }
    if (update_place != UpdatePlace::kStore) return;
    throw Error("Module::Update: dynamic loss scaling with the " + kvstore_type +
                " kvstore runs the optimizer on the workers, after the gradients are summed (a step that overflows "
                "on one worker is skipped on every worker), but the update place is the store; use "
                "UpdatePlace::kDevices or kAuto (TROUPE_UPDATE_ON_KVSTORE=0 or unset)");
  }
  KVStore* EnsureStore() {
    if (!kv) {
      kv = KVStore::Create(kvstore_type);
      kv_ready = false;
    }
    return kv.get();
  }
  Executor* ExecAt(std::size_t i) const { return i == 0 ? exec.get() : others[i - 1].get(); }

  // Copies the first context's parameters and auxiliary states to the other contexts (pushed, no wait).
  void Broadcast(bool params_too) {
    if (!multi() || !exec) return;
    const auto& args = exec->arg_arrays();
    const auto& aux = exec->aux_arrays();
    for (const auto& o : others) {
      if (params_too) {
        for (int i : param_arg_index) CopyFromTo(args[i], o->arg_arrays()[i]);
      }
      for (std::size_t i = 0; i < aux.size(); ++i) CopyFromTo(aux[i], o->aux_arrays()[i]);
    }
  }

  bool IsInput(const std::string& name) const {
    for (const auto& n : data_names)
      if (n == name) return true;
    for (const auto& n : label_names)
      if (n == name) return true;
    return false;
  }

  int ArgIndex(const std::string& name) const {
    for (std::size_t i = 0; i < arg_names.size(); ++i)
      if (arg_names[i] == name) return static_cast<int>(i);
    return -1;
  }

  // The given names that are not parameters (arguments other than inputs) or auxiliary states.
  std::vector<std::string> ExtraNames(const std::map<std::string, NDArray>& arg_params,
                                      const std::map<std::string, NDArray>& aux_params) const {
    std::vector<std::string> extra;
    for (const auto& [name, arr] : arg_params) {
      if (ArgIndex(name) < 0 || IsInput(name)) extra.push_back(name);
    }
    const std::set<std::string> aux_set(aux_names.begin(), aux_names.end());
    for (const auto& [name, arr] : aux_params) {
      if (!aux_set.count(name)) extra.push_back(name);
    }
    return extra;
  }

  void RequireBound(const char* what) const {
    if (!exec) throw Error(std::string("Module::") + what + ": the module is not bound; call Bind first (or Fit)");
  }

  // The input shapes as a map for SimpleBind / InferShape; labels that are not arguments are left out
  // (a symbol used for prediction may have no label input).
  std::map<std::string, TShape> InputShapes(const std::vector<TShape>& ds, const std::vector<TShape>& ls) const {
    if (ds.size() != data_names.size()) {
      throw Error("Module::Bind: " + std::to_string(ds.size()) + " data shapes for the data names [" +
                  JoinNames(data_names) + "] (give one shape per name)");
    }
    if (!ls.empty() && ls.size() != label_names.size()) {
      throw Error("Module::Bind: " + std::to_string(ls.size()) + " label shapes for the label names [" +
                  JoinNames(label_names) + "] (give one shape per name, or none)");
    }
    std::map<std::string, TShape> shapes;
    for (std::size_t i = 0; i < ds.size(); ++i) {
      if (ArgIndex(data_names[i]) < 0) {
        throw Error("Module::Bind: data name '" + data_names[i] +
                    "' is not an argument of the symbol (arguments: " + JoinNames(arg_names) + ")");
      }
      shapes[data_names[i]] = ds[i];
    }
    for (std::size_t i = 0; i < ls.size(); ++i) {
      if (ArgIndex(label_names[i]) >= 0) shapes[label_names[i]] = ls[i];
    }
    return shapes;
  }

  static std::string ShapeKey(const std::vector<TShape>& ds, const std::vector<TShape>& ls) {
    return ShapesText(ds) + "|" + ShapesText(ls);
  }

  // The executor whose inputs have the batch's shapes: exec, or a shared one bound on first use.
  Executor* ExecFor(const DataBatch& batch) {
    std::vector<TShape> ds, ls;
    for (const auto& a : batch.data) ds.push_back(a.shape());
    for (const auto& a : batch.label) ls.push_back(a.shape());
    if (ds.size() != data_names.size()) {
      throw Error("Module::Forward: the batch has " + std::to_string(ds.size()) + " data arrays for the data names [" +
                  JoinNames(data_names) + "]");
    }
    bool same = ds == data_shapes;
    if (same) {
      for (std::size_t i = 0; i < ls.size() && i < label_shapes.size(); ++i) {
        if (ArgIndex(label_names[i]) >= 0 && ls[i].Size() != label_shapes[i].Size()) same = false;
      }
    }
    if (same) return exec.get();
    const std::string key = ShapeKey(ds, ls);
    auto it = shared_execs.find(key);
    if (it != shared_execs.end()) return it->second.get();
    std::vector<TShape> arg_shapes, out_shapes, aux_shapes;
    std::string why;
    if (!symbol.InferShape(InputShapes(ds, ls), &arg_shapes, &out_shapes, &aux_shapes, &why)) {
      throw Error("Module: cannot infer the shapes for batch shapes " + ShapesText(ds) + ": " + why);
    }
    std::vector<NDArray> args = exec->arg_arrays();
    for (std::size_t i = 0; i < arg_names.size(); ++i) {
      if (IsInput(arg_names[i])) {
        args[i] = NDArray::Zeros(arg_shapes[i], ctx, exec->arg_arrays()[i].dtype(), args[i].engine());
      } else if (!(arg_shapes[i] == args[i].shape())) {
        throw Error("Module: batch shapes " + ShapesText(ds) + " change the shape of parameter '" + arg_names[i] +
                    "' from " + args[i].shape().ToString() + " to " + arg_shapes[i].ToString() +
                    " (only the batch size may change)");
      }
    }
    ExecutorOptions opts = options;
    if (!opts.engine && !args.empty()) opts.engine = args[0].engine();
    auto e = Executor::Bind(symbol, ctx, args, {}, {kNullOp}, exec->aux_arrays(), opts);
    Executor* raw = e.get();
    shared_execs[key] = std::move(e);
    return raw;
  }

  void LoadInputs(Executor* e, const DataBatch& batch) {
    const auto& args = e->arg_arrays();
    for (std::size_t i = 0; i < data_names.size(); ++i) {
      CopyInput(batch.data[i], args[ArgIndex(data_names[i])], data_names[i]);
    }
    for (std::size_t i = 0; i < label_names.size() && i < batch.label.size(); ++i) {
      const int idx = ArgIndex(label_names[i]);
      if (idx >= 0) CopyInput(batch.label[i], args[idx], label_names[i]);
    }
  }

  Engine* engine() const {
    if (exec && !exec->arg_arrays().empty()) return exec->arg_arrays()[0].engine();
    return options.engine ? options.engine : Engine::Get();
  }
};

Module::Module(Symbol symbol, std::vector<std::string> data_names, std::vector<std::string> label_names, Context ctx,
               ExecutorOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.symbol = std::move(symbol);
  m.data_names = std::move(data_names);
  m.label_names = std::move(label_names);
  m.ctx = ctx;
  m.contexts = {ctx};
  m.options = options;
  m.arg_names = m.symbol.ListArguments();
  m.aux_names = m.symbol.ListAuxiliaryStates();
  m.output_names = m.symbol.ListOutputs();
  for (const auto& d : m.data_names) {
    if (m.ArgIndex(d) < 0) {
      throw Error("Module: data name '" + d +
                  "' is not an argument of the symbol (arguments: " + JoinNames(m.arg_names) + ")");
    }
  }
  for (std::size_t i = 0; i < m.arg_names.size(); ++i) {
    if (!m.IsInput(m.arg_names[i])) {
      m.param_names.push_back(m.arg_names[i]);
      m.param_arg_index.push_back(static_cast<int>(i));
    }
  }
}

Module::Module(Symbol symbol, std::vector<std::string> data_names, std::vector<std::string> label_names,
               std::vector<Context> contexts, ExecutorOptions options)
    : Module(std::move(symbol), std::move(data_names), std::move(label_names),
             contexts.empty() ? Context::CPU() : contexts[0], options) {
  if (contexts.empty()) {
    throw Error("Module: an empty context list; give at least one context (cpu(0), cpu(1), ...)");
  }
  impl_->contexts = std::move(contexts);
}

Module::~Module() = default;

bool Module::bound() const { return impl_->exec != nullptr; }
const Symbol& Module::symbol() const { return impl_->symbol; }
Executor* Module::executor() const { return impl_->exec.get(); }
Optimizer* Module::optimizer() const { return impl_->optimizer.get(); }
KVStore* Module::kvstore() const { return impl_->kv.get(); }
const std::vector<Context>& Module::contexts() const { return impl_->contexts; }

Executor* Module::executor(int i) const {
  const Impl& m = *impl_;
  if (i < 0 || static_cast<std::size_t>(i) >= m.contexts.size()) {
    throw Error("Module::executor: context index " + std::to_string(i) + " out of range (the module has " +
                std::to_string(m.contexts.size()) + " contexts)");
  }
  if (!m.exec) return nullptr;
  return m.ExecAt(static_cast<std::size_t>(i));
}

void Module::SetKVStoreType(const std::string& type) {
  Impl& m = *impl_;
  if (type != m.kvstore_type) {
    m.kv.reset();  // a dist store leaves its cluster (unless its creator holds it too)
    m.kv_ready = false;
  }
  m.kvstore_type = type;
}

void Module::SetKVStore(std::shared_ptr<KVStore> store) {
  Impl& m = *impl_;
  if (!store) throw Error("Module::SetKVStore: no store");
  if (store == m.kv) return;
  m.kvstore_type = store->type();
  m.kv = std::move(store);
  m.kv_ready = false;
}

void Module::FinalizeKVStore() {
  if (impl_->kv) impl_->kv->Finalize();
}

void Module::SetUpdatePlace(UpdatePlace place) {
  Impl& m = *impl_;
  if (place != m.update_setting) m.ResetStore("SetUpdatePlace");  // the store is made for one place
  m.update_setting = place;
}

UpdatePlace Module::update_place() const { return impl_->kv_ready ? impl_->update_place : UpdatePlace::kAuto; }

UpdatePlace ResolveUpdatePlace(UpdatePlace place, const std::string& kvstore_type, std::int64_t largest_param) {
  if (place != UpdatePlace::kAuto) return place;
  int forced = -1;
  if (EnvInt("TROUPE_UPDATE_ON_KVSTORE", 0, 1, &forced)) return forced == 1 ? UpdatePlace::kStore : UpdatePlace::kDevices;
  constexpr std::int64_t kBig = 1024 * 1024 * 16;  // MXNet's model.py threshold, in elements
  return kvstore_type == "local" && largest_param > kBig ? UpdatePlace::kDevices : UpdatePlace::kStore;
}

void Module::Bind(const std::vector<TShape>& data_shapes, const std::vector<TShape>& label_shapes, bool for_training) {
  Impl& m = *impl_;
  const auto shapes = m.InputShapes(data_shapes, label_shapes);
  // Rebinding keeps the parameters already set.
  std::map<std::string, NDArray> args, aux;
  if (m.exec && m.params_initialized) GetParams(&args, &aux);
  std::map<std::string, OpReqType> by_name;
  for (const auto& n : m.data_names) by_name[n] = kNullOp;
  for (const auto& n : m.label_names) {
    if (m.ArgIndex(n) >= 0) by_name[n] = kNullOp;
  }
  if (m.multi()) {
    // MXNet's _split_input_slice: B / k rows per context, the first B % k contexts one more.
    const std::int64_t k = static_cast<std::int64_t>(m.contexts.size());
    const std::int64_t batch = data_shapes[0].ndim() < 1 ? 0 : data_shapes[0][0];
    if (batch < k) {
      throw Error("Module::Bind: batch size " + std::to_string(batch) + " is smaller than the number of contexts (" +
                  std::to_string(k) + "); use a batch of at least " + std::to_string(k) + " or fewer contexts");
    }
    for (std::size_t i = 0; i < data_shapes.size(); ++i) {
      if (data_shapes[i].ndim() < 1 || data_shapes[i][0] != batch) {
        throw Error("Module::Bind: data shape " + data_shapes[i].ToString() + " of '" + m.data_names[i] +
                    "' does not have the batch size " + std::to_string(batch) +
                    " on axis 0 (every input is split along axis 0 across the contexts)");
      }
    }
    for (std::size_t i = 0; i < label_shapes.size(); ++i) {
      if (label_shapes[i].ndim() < 1 || label_shapes[i][0] != batch) {
        throw Error("Module::Bind: label shape " + label_shapes[i].ToString() + " of '" + m.label_names[i] +
                    "' does not have the batch size " + std::to_string(batch) +
                    " on axis 0 (every input is split along axis 0 across the contexts)");
      }
    }
  }
  m.shared_execs.clear();
  m.current = nullptr;
  m.ResetStore("Bind");
  m.others.clear();  // with exec: a failed multi-context bind below leaves the module unbound
  m.slices.clear();
  m.dp_current = false;
  m.merged_valid = false;
  const OpReqType req = for_training ? kWriteTo : kNullOp;
  if (!m.multi()) {
    m.exec = Executor::SimpleBind(m.symbol, m.ctx, shapes, req, by_name, m.options);
  } else {
    const std::int64_t k = static_cast<std::int64_t>(m.contexts.size());
    const std::int64_t batch = data_shapes[0][0];
    const std::int64_t step = batch / k, extra = batch % k;
    std::int64_t at = 0;
    m.exec.reset();
    std::vector<std::unique_ptr<Executor>> built;
    for (std::int64_t i = 0; i < k; ++i) {
      const std::int64_t rows = step + (i < extra ? 1 : 0);
      m.slices.emplace_back(at, at + rows);
      at += rows;
      std::vector<TShape> ds = data_shapes, ls = label_shapes;
      for (auto& s : ds) s[0] = rows;
      for (auto& s : ls) s[0] = rows;
      built.push_back(Executor::SimpleBind(m.symbol, m.contexts[static_cast<std::size_t>(i)], m.InputShapes(ds, ls),
                                           req, by_name, m.options));
    }
    m.exec = std::move(built[0]);
    for (std::size_t i = 1; i < built.size(); ++i) m.others.push_back(std::move(built[i]));
  }
  m.data_shapes = data_shapes;
  m.label_shapes = label_shapes;
  m.for_training = for_training;
  if (m.params_initialized) SetParams(args, aux);
}

void Module::InitParams(const Initializer& initializer, const std::map<std::string, NDArray>& arg_params,
                        const std::map<std::string, NDArray>& aux_params, bool allow_extra) {
  Impl& m = *impl_;
  m.RequireBound("InitParams");
  if (!allow_extra) {
    const std::vector<std::string> extra = m.ExtraNames(arg_params, aux_params);
    if (!extra.empty()) {
      throw Error("Module::InitParams: [" + JoinNames(extra) + "] are not parameters of the symbol (parameters: " +
                  JoinNames(m.param_names) + "; pass allow_extra to ignore them)");
    }
  }
  auto fill = [&](const std::string& name, NDArray arr, const std::map<std::string, NDArray>& given) {
    if (!CopyGivenParam("Module::InitParams", name, given, arr)) initializer(name, &arr);
  };
  const auto& args = m.exec->arg_arrays();
  for (std::size_t p = 0; p < m.param_names.size(); ++p) fill(m.param_names[p], args[m.param_arg_index[p]], arg_params);
  const auto& aux = m.exec->aux_arrays();
  for (std::size_t i = 0; i < m.aux_names.size(); ++i) fill(m.aux_names[i], aux[i], aux_params);
  m.params_initialized = true;
  m.Broadcast(true);
  m.ResetStore("InitParams");  // the store's weights are the old ones
}

void Module::InitOptimizer(const OptimizerConfig& config) {
  Impl& m = *impl_;
  m.RequireBound("InitOptimizer");
  if (!m.for_training) {
    throw Error("Module::InitOptimizer: the module is bound with for_training false; bind for training first");
  }
  OptimizerConfig c = config;
  bool has_rescale = false;
  for (const auto& kv : c.params) has_rescale = has_rescale || kv.first == "rescale_grad";
  if (m.dist()) m.ResetStore("InitOptimizer");  // the servers would keep the old optimizer
  if (!has_rescale) {
    // MXNet's Module: the gradient is a sum over the batch, the update uses its mean. dist_sync sums the
    // workers' gradients, so the mean is over every worker's batch (MXNet's batch_size *= num_workers).
    std::int64_t batch = m.data_shapes.empty() || m.data_shapes[0].ndim() < 1 ? 1 : m.data_shapes[0][0];
    if (m.dist() && m.kvstore_type.find("async") == std::string::npos) batch *= m.EnsureStore()->num_workers();
    c.params.emplace_back("rescale_grad", param_detail::PrintReal(1.0 / static_cast<double>(batch)));
  }
  m.multipliers.clear();
  // MXNet's Optimizer.set_wd_mult: no weight decay except on weights and gammas, then the symbol's
  // lr_mult / wd_mult attributes.
  const auto attrs = m.symbol.ListAttrs();
  for (std::size_t p = 0; p < m.param_names.size(); ++p) {
    const std::string& name = m.param_names[p];
    float lr_mult = 1.0f;
    float wd_mult = EndsWith(name, "_weight") || EndsWith(name, "_gamma") ? 1.0f : 0.0f;
    auto it = attrs.find(name);
    if (it != attrs.end()) {
      for (const char* key : {"lr_mult", "__lr_mult__"}) {
        auto a = it->second.find(key);
        if (a != it->second.end()) lr_mult = static_cast<float>(param_detail::ParseReal(a->second));
      }
      for (const char* key : {"wd_mult", "__wd_mult__"}) {
        auto a = it->second.find(key);
        if (a != it->second.end()) wd_mult = static_cast<float>(param_detail::ParseReal(a->second));
      }
    }
    c.multipliers[static_cast<int>(p)] = {lr_mult, wd_mult};  // Create applies them; a dist store sends them
    m.multipliers.emplace_back(lr_mult, wd_mult);
  }
  m.optimizer = Optimizer::Create(c);
  if (!m.dist()) m.ResetStore("InitOptimizer");  // its updater is the old optimizer
}

void Module::Forward(const DataBatch& batch, bool is_train) {
  Impl& m = *impl_;
  m.RequireBound("Forward");
  Executor* e = m.ExecFor(batch);
  if (is_train && e != m.exec.get()) {
    throw Error("Module::Forward: a training batch must have the bound shapes " + ShapesText(m.data_shapes) + " (got " +
                batch.data[0].shape().ToString() + "); rebind for the new shapes");
  }
  m.merged_valid = false;
  if (m.multi() && e == m.exec.get()) {
    // Each context gets its rows of every input (views of the batch, copied by the engine).
    for (std::size_t c = 0; c < m.contexts.size(); ++c) {
      const auto [begin, end] = m.slices[c];
      DataBatch part;
      for (const auto& a : batch.data) part.data.push_back(a.Slice(begin, end));
      for (const auto& a : batch.label) part.label.push_back(a.Slice(begin, end));
      Executor* ec = m.ExecAt(c);
      m.LoadInputs(ec, part);
      ec->Forward(is_train);
    }
    m.current = m.exec.get();
    m.dp_current = true;
    return;
  }
  m.LoadInputs(e, batch);
  e->Forward(is_train);
  m.current = e;
  m.dp_current = false;
}

void Module::Backward() {
  Impl& m = *impl_;
  m.RequireBound("Backward");
  if (!m.for_training) throw Error("Module::Backward: the module is bound with for_training false");
  const float scale = m.loss_scaler ? static_cast<float>(m.loss_scaler->scale()) : 1.0f;
  m.exec->SetLossScale(scale);
  m.exec->Backward();
  for (const auto& o : m.others) {
    o->SetLossScale(scale);
    o->Backward();
  }
}

void Module::SetLossScaler(std::shared_ptr<LossScaler> scaler) { impl_->loss_scaler = std::move(scaler); }
LossScaler* Module::loss_scaler() const { return impl_->loss_scaler.get(); }

namespace {

// Dynamic loss scaling's half of a step: whether the gradients of `execs` (scaled by the scaler's scale) are
// all finite, recorded in the scaler; when they are, they are divided by that scale. A skipped step's
// gradients are zeroed where they accumulate (kAddTo), so that the next step does not add onto them.
bool CheckAndUnscale(LossScaler* scaler, const std::vector<Executor*>& execs) {
  const double used = scaler->scale();
  bool finite = true;
  for (Executor* e : execs) {
    std::vector<NDArray> grads;
    for (const NDArray& g : e->grad_arrays()) {
      if (!g.is_none()) grads.push_back(g);
    }
    // multi_all_finite of at most 200 arrays a call, as MXNet's LossScaler.
    for (std::size_t b = 0; b < grads.size() && finite; b += 200) {
      const std::vector<NDArray> chunk(grads.begin() + static_cast<std::ptrdiff_t>(b),
                                       grads.begin() + static_cast<std::ptrdiff_t>(std::min(grads.size(), b + 200)));
      const NDArray flag = Invoke("multi_all_finite", chunk, {{"num_arrays", std::to_string(chunk.size())}})[0];
      finite = flag.CopyTo(Context::CPU()).ToVector<float>().at(0) != 0.0f;
    }
  }
  if (scaler->Step(!finite)) {
    for (Executor* e : execs) {
      const auto& grads = e->grad_arrays();
      const auto& req = e->grad_req();
      for (std::size_t i = 0; i < grads.size(); ++i) {
        if (!grads[i].is_none() && i < req.size() && req[i] == kAddTo) {
          NDArray g = grads[i];
          g = 0.0;
        }
      }
    }
    return false;
  }
  for (Executor* e : execs) {
    for (const NDArray& g : e->grad_arrays()) {
      if (g.is_none()) continue;
      NDArray h = g;
      h *= 1.0 / used;
    }
  }
  return true;
}

}  // namespace

void Module::Update() {
  Impl& m = *impl_;
  m.RequireBound("Update");
  if (!m.optimizer) throw Error("Module::Update: no optimizer; call InitOptimizer first");
  std::vector<Executor*> execs{m.exec.get()};
  for (const auto& o : m.others) execs.push_back(o.get());
  // Loss scaling: on one process the check comes first (every device's gradient is here); on a cluster it
  // comes after the store summed the workers' gradients, so that every worker sees the same sums and skips
  // the same steps.
  if (m.loss_scaler && !m.dist() && !CheckAndUnscale(m.loss_scaler.get(), execs)) return;  // overflow: skipped
  const auto& args = m.exec->arg_arrays();
  const auto& grads = m.exec->grad_arrays();
  auto has_grad = [&](int i) { return static_cast<std::size_t>(i) < grads.size() && !grads[i].is_none(); };
  if (!m.uses_store()) {
    std::vector<int> indices;
    std::vector<NDArray> weights, gs;
    for (std::size_t p = 0; p < m.param_names.size(); ++p) {
      const int i = m.param_arg_index[p];
      if (!has_grad(i)) continue;
      indices.push_back(static_cast<int>(p));
      weights.push_back(args[i]);
      gs.push_back(grads[i]);
    }
    m.optimizer->UpdateGrouped(indices, weights, gs);
    return;
  }
  const std::size_t k = m.contexts.size();
  if (!m.kv_ready) m.InitStore();
  if (m.loss_scaler && m.dist()) m.RequireWorkerUpdates();  // a scaler set after the store was made
  const bool on_store = m.update_place == UpdatePlace::kStore;
  // MXNet's _update_params(_on_kvstore): the last layers first (their gradients are ready first), priority
  // -index so that the first layers' pulls run first when several are ready. On the devices the sum is
  // pulled into every device's gradient.
  if (m.dist()) {
    // A cluster store: one PushPull for every parameter (MXNet 1.9's pushpull; one round trip per key), in
    // parameter order, so that the store sends the keys bound for one server together (the first layer's
    // first; kvstore/dist.h). A key sent alone starts as soon as backward produced its gradient (the executor
    // ends a segment at every gradient), a frame of several keys once all of its gradients are there; the
    // next Forward waits only on the weights it reads.
    std::vector<int> keys;
    std::vector<NDArray> g, w;
    for (std::size_t r = 0; r < m.param_names.size(); ++r) {
      const int i = m.param_arg_index[r];
      if (!has_grad(i)) continue;
      for (std::size_t c = 0; c < k; ++c) {
        keys.push_back(static_cast<int>(r));
        g.push_back(m.ExecAt(c)->grad_arrays()[i]);
        w.push_back(m.ExecAt(c)->arg_arrays()[i]);
      }
    }
    if (!keys.empty()) m.kv->PushPull(keys, g, on_store ? w : g, 0);
    if (m.loss_scaler && !CheckAndUnscale(m.loss_scaler.get(), execs)) return;  // overflow: skipped everywhere
  }
  for (std::size_t r = m.param_names.size(); !m.dist() && r-- > 0;) {
    const int i = m.param_arg_index[r];
    if (!has_grad(i)) continue;
    const int key = static_cast<int>(r);
    std::vector<NDArray> g, w;
    for (std::size_t c = 0; c < k; ++c) {
      g.push_back(m.ExecAt(c)->grad_arrays()[i]);
      w.push_back(m.ExecAt(c)->arg_arrays()[i]);
    }
    const std::vector<int> keys(k, key);
    m.kv->Push(keys, g, -key);
    m.kv->Pull(keys, on_store ? w : g, -key);
  }
  if (!on_store) {
    // Each device updates its copy: optimizer index parameter * k + device (MXNet's index*num_device+k),
    // so every device has its own states on its own memory; up to aggregation_size() per call.
    for (std::size_t c = 0; c < k; ++c) {
      const auto& ca = m.ExecAt(c)->arg_arrays();
      const auto& cg = m.ExecAt(c)->grad_arrays();
      std::vector<int> indices;
      std::vector<NDArray> weights, gs;
      for (std::size_t p = 0; p < m.param_names.size(); ++p) {
        const int i = m.param_arg_index[p];
        if (!has_grad(i)) continue;
        indices.push_back(static_cast<int>(p * k + c));
        weights.push_back(ca[i]);
        gs.push_back(cg[i]);
      }
      m.optimizer->UpdateGrouped(indices, weights, gs);
    }
  }
  // Auxiliary states are not reduced (as MXNet's update does not touch them); keep the contexts equal.
  m.Broadcast(false);
}

const std::vector<NDArray>& Module::GetOutputs() const {
  Impl& m = *impl_;
  m.RequireBound("GetOutputs");
  if (!m.multi() || !m.dp_current) return (m.current ? m.current : m.exec.get())->outputs();
  if (m.merged_valid) return m.merged_outputs;
  // The slices' outputs concatenated in slice order on the first context (copies pushed, no wait). An output
  // without the batch on axis 0 (a scalar loss, say) is the first context's.
  const auto& outs0 = m.exec->outputs();
  const std::int64_t batch = m.slices.back().second;
  if (m.merged_outputs.size() != outs0.size()) m.merged_outputs.assign(outs0.size(), NDArray());
  for (std::size_t o = 0; o < outs0.size(); ++o) {
    bool split = outs0[o].shape().ndim() >= 1;
    for (std::size_t c = 0; split && c < m.contexts.size(); ++c) {
      const auto& out = m.ExecAt(c)->outputs()[o];
      split = out.shape().ndim() >= 1 && out.shape()[0] == m.slices[c].second - m.slices[c].first;
    }
    if (!split) {
      m.merged_outputs[o] = outs0[o];
      continue;
    }
    TShape shape = outs0[o].shape();
    shape[0] = batch;
    NDArray& merged = m.merged_outputs[o];
    if (merged.is_none() || !(merged.shape() == shape) || merged.dtype() != outs0[o].dtype()) {
      merged = NDArray(shape, m.ctx, outs0[o].dtype(), outs0[o].engine());
    }
    for (std::size_t c = 0; c < m.contexts.size(); ++c) {
      CopyFromTo(m.ExecAt(c)->outputs()[o], merged.Slice(m.slices[c].first, m.slices[c].second));
    }
  }
  m.merged_valid = true;
  return m.merged_outputs;
}

void Module::UpdateMetric(EvalMetric* metric, const DataBatch& batch) const {
  const auto& outs = GetOutputs();
  // As MXNet: the first len(labels) outputs are the predictions of the labels.
  if (outs.size() < batch.label.size()) {
    throw Error("Module::UpdateMetric: " + std::to_string(batch.label.size()) + " labels but the symbol has only " +
                std::to_string(outs.size()) + " outputs");
  }
  std::vector<NDArray> preds(outs.begin(), outs.begin() + static_cast<std::ptrdiff_t>(batch.label.size()));
  metric->Update(batch.label, preds, batch.num_batch_padd);
}

void Module::GetParams(std::map<std::string, NDArray>* arg_params, std::map<std::string, NDArray>* aux_params) const {
  const Impl& m = *impl_;
  m.RequireBound("GetParams");
  if (arg_params) {
    arg_params->clear();
    const auto& args = m.exec->arg_arrays();
    for (std::size_t p = 0; p < m.param_names.size(); ++p) {
      (*arg_params)[m.param_names[p]] = args[m.param_arg_index[p]].CopyTo(Context::CPU());
    }
  }
  if (aux_params) {
    aux_params->clear();
    const auto& aux = m.exec->aux_arrays();
    for (std::size_t i = 0; i < m.aux_names.size(); ++i) (*aux_params)[m.aux_names[i]] = aux[i].CopyTo(Context::CPU());
  }
}

void Module::SetParams(const std::map<std::string, NDArray>& arg_params,
                       const std::map<std::string, NDArray>& aux_params, bool allow_missing) {
  Impl& m = *impl_;
  m.RequireBound("SetParams");
  std::vector<std::string> missing;
  const std::vector<std::string> extra = m.ExtraNames(arg_params, aux_params);
  if (!extra.empty()) {
    throw Error("Module::SetParams: [" + JoinNames(extra) +
                "] are not parameters of the symbol (parameters: " + JoinNames(m.param_names) + ")");
  }
  auto set = [&](const std::string& name, const NDArray& to, const std::map<std::string, NDArray>& given) {
    if (!CopyGivenParam("Module::SetParams", name, given, to)) missing.push_back(name);
  };
  const auto& args = m.exec->arg_arrays();
  for (std::size_t p = 0; p < m.param_names.size(); ++p) set(m.param_names[p], args[m.param_arg_index[p]], arg_params);
  const auto& aux = m.exec->aux_arrays();
  for (std::size_t i = 0; i < m.aux_names.size(); ++i) set(m.aux_names[i], aux[i], aux_params);
  if (!missing.empty() && !allow_missing) {
    throw Error("Module::SetParams: no value for [" + JoinNames(missing) + "] (pass allow_missing to keep them)");
  }
  if (missing.empty()) m.params_initialized = true;
  m.Broadcast(true);
  m.ResetStore("SetParams");  // the store's weights are the old ones
}

void Module::SaveCheckpoint(const std::string& prefix, int epoch) const {
  const Impl& m = *impl_;
  std::map<std::string, NDArray> args, aux;
  GetParams(&args, &aux);
  ::troupe::SaveCheckpoint(prefix, epoch, m.symbol, args, aux);
  // A cluster's optimizer states live on its servers (KVStore::Checkpoint writes them there), as MXNet's
  // save_optimizer_states refuses for dist stores.
  const bool states_on_servers = m.dist() && m.kv_ready && m.update_place == UpdatePlace::kStore;
  if (m.optimizer && !states_on_servers) {
    // MXNet's format. A local store that updates keys the states by the parameter's name there (MXNet's
    // update_on_kvstore), the other cases by the index the optimizer sees.
    std::map<int, std::string> key_names;
    if (m.multi() && !m.dist() && m.kv_ready && m.update_place == UpdatePlace::kStore) key_names = m.ParamKeyNames();
    m.optimizer->SaveStates(checkpoint_detail::CheckpointStatesPath(prefix, epoch), Optimizer::StatesFormat::kMXNet,
                            key_names);
  }
}

std::pair<std::string, double> Module::Score(DataIter* data, const std::string& metric) {
  auto mt = EvalMetric::Create(metric);
  data->BeforeFirst();
  while (data->Next()) {
    const DataBatch& batch = data->Value();
    Forward(batch, false);
    UpdateMetric(mt.get(), batch);
  }
  return {mt->name(), mt->Get()};
}

std::vector<NDArray> Module::Predict(DataIter* data) {
  std::vector<std::vector<NDArray>> parts;  // per output, the kept rows of every batch (on the CPU)
  data->BeforeFirst();
  while (data->Next()) {
    const DataBatch& batch = data->Value();
    Forward(batch, false);
    const auto& outs = GetOutputs();
    parts.resize(outs.size());
    for (std::size_t o = 0; o < outs.size(); ++o) {
      const std::int64_t keep = outs[o].shape()[0] - batch.num_batch_padd;
      if (keep <= 0) continue;
      // A copy now (pushed): the next Forward overwrites the output.
      parts[o].push_back(outs[o].Slice(0, keep).CopyTo(Context::CPU()));
    }
  }
  std::vector<NDArray> result;
  for (const auto& p : parts) {
    if (p.empty()) {
      result.emplace_back();
      continue;
    }
    TShape shape = p[0].shape();
    std::int64_t rows = 0;
    for (const auto& a : p) rows += a.shape()[0];
    shape[0] = rows;
    NDArray all(shape, Context::CPU(), p[0].dtype(), p[0].engine());
    std::int64_t at = 0;
    for (const auto& a : p) {
      CopyFromTo(a, all.Slice(at, at + a.shape()[0]));
      at += a.shape()[0];
    }
    result.push_back(all);
  }
  return result;
}

void Module::Fit(DataIter* train, DataIter* eval, const FitOptions& options) {
  Impl& m = *impl_;
  if (!train) throw Error("Module::Fit: no training iterator");
  // Used with several contexts, or for a cluster.
  if (options.store) {
    SetKVStore(options.store);
  } else {
    SetKVStoreType(options.kvstore);
  }
  SetUpdatePlace(options.update_place);
  if (options.begin_epoch < 0 || options.num_epoch < options.begin_epoch) {
    throw Error("Module::Fit: begin_epoch " + std::to_string(options.begin_epoch) + " and num_epoch " +
                std::to_string(options.num_epoch) + " do not make a range (need 0 <= begin_epoch <= num_epoch)");
  }
  if (options.begin_epoch > 0 && options.checkpoint_prefix.empty()) {
    throw Error("Module::Fit: begin_epoch " + std::to_string(options.begin_epoch) +
                " resumes from a checkpoint; set checkpoint_prefix");
  }
  if (options.checkpoint_period < 1) {
    throw Error("Module::Fit: checkpoint_period " + std::to_string(options.checkpoint_period) + " must be >= 1");
  }
  if (!m.exec || !m.for_training || m.data_shapes != train->DataShapes() ||
      (!m.label_shapes.empty() && m.label_shapes != train->LabelShapes())) {
    Bind(train->DataShapes(), train->LabelShapes(), true);  // keeps parameters already set
  }
  ResourceManager* rm = ResourceManager::Get(m.engine());
  rm->SeedRandom(options.seed);

  // Parameters: from the checkpoint when resuming, else initialised (kept when set already).
  std::map<std::string, NDArray> ckpt_args, ckpt_aux;
  const bool resume = options.begin_epoch > 0;
  if (resume) {
    checkpoint_detail::LoadCheckpointParams(
        checkpoint_detail::CheckpointParamsPath(options.checkpoint_prefix, options.begin_epoch), &ckpt_args, &ckpt_aux);
  }
  if (resume || !m.params_initialized) {
    auto init = Initializer::Create(options.initializer, options.initializer_params);
    if (resume) {
      InitParams(*init, ckpt_args, ckpt_aux, false);
    } else {
      InitParams(*init, options.arg_params, options.aux_params, false);
    }
  }
  if (!m.optimizer) InitOptimizer(options.optimizer);
  if (resume) {
    const std::string states = checkpoint_detail::CheckpointStatesPath(options.checkpoint_prefix, options.begin_epoch);
    if (std::FILE* f = std::fopen(states.c_str(), "rb")) {
      std::fclose(f);
      m.optimizer->LoadStates(states, m.ParamKeyNames());  // a name key is the parameter's store key
    } else if (!StatelessSgd(options.optimizer) && !m.dist()) {
      // An optimizer with state cannot resume exactly without it. (A cluster's servers start with fresh
      // states, as in MXNet's dist training; their own checkpoints keep states across server restarts.)
      throw Error("Module::Fit: resuming at epoch " + std::to_string(options.begin_epoch) + " needs " + states +
                  " (the optimizer's states, written by Fit's checkpoints)");
    }
  }

  if (m.dist() && !m.kv_ready) m.InitStore();  // every worker starts from worker 0's parameters
  // In a cluster worker 0 writes the checkpoints (every worker holds the same parameters).
  const bool writes_checkpoints = !options.checkpoint_prefix.empty() && (!m.dist() || m.kv->rank() == 0);

  auto make_metric = [&] {
    if (!options.make_metric) return EvalMetric::Create(options.eval_metric);
    auto made = options.make_metric();
    if (!made) throw Error("Module::Fit: FitOptions::make_metric returned no metric");
    return made;
  };
  auto train_metric = make_metric();
  auto eval_metric = eval ? make_metric() : nullptr;
  for (int epoch = options.begin_epoch; epoch < options.num_epoch; ++epoch) {
    rm->SeedRandom(EpochSeed(options.seed, epoch));
    train_metric->Reset();
    train->BeforeFirst();
    std::int64_t nbatch = 0;
    auto tic = Clock::now();
    while (train->Next()) {
      const DataBatch& batch = train->Value();
      Forward(batch, true);
      Backward();
      Update();
      UpdateMetric(train_metric.get(), batch);
      ++nbatch;
      if (!options.batch_end_callbacks.empty()) {
        const auto now = Clock::now();
        const double secs = std::chrono::duration<double>(now - tic).count();
        tic = now;
        BatchEndParam p;
        p.epoch = epoch;
        p.nbatch = nbatch;
        p.metric = train_metric.get();
        const double n = batch.data.empty() ? 0 : static_cast<double>(batch.data[0].shape()[0]);
        p.samples_per_sec = secs > 0 ? n / secs : 0;
        for (const auto& cb : options.batch_end_callbacks) cb(p);
      }
    }
    if (eval) {
      eval_metric->Reset();
      eval->BeforeFirst();
      while (eval->Next()) {
        const DataBatch& batch = eval->Value();
        Forward(batch, false);
        UpdateMetric(eval_metric.get(), batch);
      }
    }
    // MXNet's do_checkpoint: checkpoint k holds the parameters after k epochs.
    if (writes_checkpoints && (epoch + 1) % options.checkpoint_period == 0) {
      SaveCheckpoint(options.checkpoint_prefix, epoch + 1);
    }
    for (const auto& cb : options.epoch_end_callbacks) cb(epoch, *train_metric, eval_metric.get());
  }
  // Leave the parameters written when Fit returns (errors of the last updates surface here).
  for (std::size_t c = 0; c < m.contexts.size(); ++c) {
    for (const auto& a : m.ExecAt(c)->arg_arrays()) a.WaitToRead();
  }
}

BatchEndCallback Speedometer(int batch_size, int frequent, std::function<void(const std::string&)> log) {
  struct State {
    bool init = false;
    std::int64_t last_count = 0;
    std::int64_t tic_count = 0;
    Clock::time_point tic;
  };
  auto st = std::make_shared<State>();
  if (frequent < 1) frequent = 1;
  return [st, batch_size, frequent, log](const BatchEndParam& p) {
    const std::int64_t count = p.nbatch;
    if (st->last_count > count) st->init = false;  // a new epoch
    st->last_count = count;
    if (!st->init) {
      st->init = true;
      st->tic = Clock::now();
      st->tic_count = count;
      return;
    }
    if (count % frequent != 0) return;
    const double secs = std::chrono::duration<double>(Clock::now() - st->tic).count();
    const double samples = static_cast<double>((count - st->tic_count) * batch_size);
    char buf[256];
    // MXNet 1.9.1's Speedometer line (auto_reset=False form: the metric is the epoch's so far).
    int len = std::snprintf(buf, sizeof(buf), "Epoch[%d] Batch [0-%lld]\tSpeed: %.2f samples/sec", p.epoch,
                            static_cast<long long>(count), secs > 0 ? samples / secs : 0.0);
    std::string line(buf, static_cast<std::size_t>(len));
    if (p.metric) {
      for (const auto& [name, value] : p.metric->GetNameValue()) {
        std::snprintf(buf, sizeof(buf), "\t%s=%f", name.c_str(), value);
        line += buf;
      }
    }
    if (log) {
      log(line);
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    st->tic = Clock::now();
    st->tic_count = count;
  };
}

}  // namespace troupe
