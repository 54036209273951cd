// Trainer (nn/trainer.h).
#include "nn/trainer.h"

#include <cmath>
#include <cstdint>
#include <utility>

#include "base/error.h"
#include "engine/engine.h"
#include "op/param.h"

namespace troupe::nn {

struct Trainer::Impl {
  std::vector<std::shared_ptr<Parameter>> params;  // the trained ones (grad_req not kNullOp)
  OptimizerConfig config;
  std::unique_ptr<Optimizer> optimizer;
  std::string kv_type;
  std::shared_ptr<KVStore> kv;
  bool kv_ready = false;
  int dist_batch = 0;  // the batch size the servers' rescale_grad was set for
  std::size_t devices = 0;
  // Per parameter and device: the gradient's pushed writes at the previous step (stale check).
  std::vector<std::vector<std::uint64_t>> seen;
  // Set by AllReduceGrads (before its pulls write the gradients) for the following Update.
  std::vector<char> pending_fresh;

  bool dist() const { return kv_type.rfind("dist", 0) == 0; }
  bool uses_store() const { return dist() || devices > 1; }

  void CheckReady() {
    for (const auto& p : params) {
      if (!p->initialized()) {
        throw Error("Trainer: parameter '" + p->name() + "' is not initialised" +
                    (p->deferred() ? std::string(" (deferred: run a forward pass first)") : std::string()));
      }
    }
    if (devices == 0) {
      devices = params.empty() ? 1 : params[0]->ListCtx().size();
      for (const auto& p : params) {
        if (p->ListCtx() != params[0]->ListCtx()) {
          throw Error("Trainer: parameters '" + params[0]->name() + "' and '" + p->name() +
                      "' are on different devices; initialise every trained parameter on the same context list");
        }
      }
      seen.assign(params.size(), std::vector<std::uint64_t>(devices, 0));
    }
  }

  // Which parameters have a fresh gradient on every device (as AllReduceGrads found them, when it ran since
  // the last update); throws for a stale one unless ignored.
  std::vector<bool> Fresh(bool ignore_stale) {
    std::vector<bool> fresh(params.size(), true);
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (!pending_fresh.empty()) {
        fresh[i] = pending_fresh[i] != 0;
      } else {
        const auto grads = params[i]->ListGrad();
        for (std::size_t c = 0; c < grads.size(); ++c) {
          if (grads[c].var()->writes_pushed() == seen[i][c]) fresh[i] = false;
        }
      }
      if (!fresh[i] && !ignore_stale) {
        pending_fresh.clear();
        throw Error("Trainer: the gradient of parameter '" + params[i]->name() +
                    "' was not written by a backward pass since the last step (the model did not use it?); pass "
                    "ignore_stale_grad to skip such parameters");
      }
    }
    pending_fresh.clear();
    return fresh;
  }
  void MarkSeen() {
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto grads = params[i]->ListGrad();
      for (std::size_t c = 0; c < grads.size(); ++c) seen[i][c] = grads[c].var()->writes_pushed();
    }
  }

  void InitStore(int batch_size) {
    if (!kv) kv = KVStore::Create(kv_type);
    if (dist()) {
      // The servers run the optimizer: its configuration with this step's rescale_grad and the multipliers.
      OptimizerConfig c = config;
      double rescale = 1.0;
      for (auto it = c.params.begin(); it != c.params.end();) {
        if (it->first == "rescale_grad") {
          rescale = param_detail::ParseReal(it->second);
          it = c.params.erase(it);
        } else {
          ++it;
        }
      }
      c.params.emplace_back("rescale_grad", param_detail::PrintReal(rescale / batch_size));
      for (std::size_t i = 0; i < params.size(); ++i) {
        c.multipliers[static_cast<int>(i)] = {params[i]->lr_mult, params[i]->wd_mult};
      }
      kv->SetOptimizer(c);
      dist_batch = batch_size;
    }
    for (std::size_t i = 0; i < params.size(); ++i) kv->Init({static_cast<int>(i)}, {params[i]->Data()});
    if (dist()) {
      // Every worker starts from the values the servers took (worker 0's).
      for (std::size_t i = 0; i < params.size(); ++i) {
        const auto data = params[i]->ListData();
        kv->Pull(std::vector<int>(data.size(), static_cast<int>(i)), data, -static_cast<int>(i));
      }
    }
    kv_ready = true;
  }

  void RunOptimizer(int batch_size, const std::vector<bool>& fresh) {
    optimizer->SetGradScale(static_cast<float>(1.0 / batch_size));
    for (std::size_t c = 0; c < devices; ++c) {
      std::vector<int> indices;
      std::vector<NDArray> weights, grads;
      for (std::size_t i = 0; i < params.size(); ++i) {
        if (!fresh[i]) continue;
        indices.push_back(static_cast<int>(i * devices + c));
        weights.push_back(params[i]->ListData()[c]);
        grads.push_back(params[i]->ListGrad()[c]);
      }
      optimizer->UpdateGrouped(indices, weights, grads);
    }
  }
};

Trainer::Trainer(const ParameterDict& params, const OptimizerConfig& optimizer, std::string kvstore,
                 std::shared_ptr<KVStore> store)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  for (const auto& p : params) {
    if (p->grad_req() != kNullOp) m.params.push_back(p);
  }
  m.config = optimizer;
  m.optimizer = Optimizer::Create(optimizer);
  m.kv = std::move(store);
  m.kv_type = m.kv ? m.kv->type() : std::move(kvstore);
}

Trainer::~Trainer() = default;

void Trainer::Step(int batch_size, bool ignore_stale_grad) {
  Impl& m = *impl_;
  if (batch_size < 1) throw Error("Trainer::Step: batch_size must be at least 1, got " + std::to_string(batch_size));
  m.CheckReady();
  if (!m.dist()) {
    AllReduceGrads();
    Update(batch_size, ignore_stale_grad);
    return;
  }
  if (!m.kv_ready) m.InitStore(batch_size);
  if (batch_size != m.dist_batch) {
    throw Error("Trainer::Step: batch_size " + std::to_string(batch_size) + " differs from the first step's (" +
                std::to_string(m.dist_batch) + "), which set the servers' rescale_grad");
  }
  const std::vector<bool> fresh = m.Fresh(ignore_stale_grad);
  std::vector<int> keys;
  std::vector<NDArray> grads, weights;
  for (std::size_t i = 0; i < m.params.size(); ++i) {
    if (!fresh[i]) continue;
    const auto g = m.params[i]->ListGrad(), w = m.params[i]->ListData();
    for (std::size_t c = 0; c < g.size(); ++c) {
      keys.push_back(static_cast<int>(i));
      grads.push_back(g[c]);
      weights.push_back(w[c]);
    }
  }
  if (!keys.empty()) m.kv->PushPull(keys, grads, weights, 0);
  m.MarkSeen();
}

void Trainer::AllReduceGrads() {
  Impl& m = *impl_;
  m.CheckReady();
  if (m.dist()) throw Error("Trainer::AllReduceGrads: with a " + m.kv_type + " store the servers update; call Step");
  if (!m.uses_store()) return;
  if (!m.kv_ready) m.InitStore(1);
  // Which gradients backward wrote, decided before the pulls below write them all.
  const std::vector<bool> fresh = m.Fresh(true);
  m.pending_fresh.assign(fresh.begin(), fresh.end());
  // The last parameters first (their gradients are ready first), as Gluon's priorities.
  for (std::size_t i = m.params.size(); i-- > 0;) {
    const auto g = m.params[i]->ListGrad();
    const std::vector<int> keys(g.size(), static_cast<int>(i));
    m.kv->Push(keys, g, -static_cast<int>(i));
    m.kv->Pull(keys, g, -static_cast<int>(i));
  }
  m.MarkSeen();
}

void Trainer::Update(int batch_size, bool ignore_stale_grad) {
  Impl& m = *impl_;
  if (batch_size < 1) throw Error("Trainer::Update: batch_size must be at least 1, got " + std::to_string(batch_size));
  m.CheckReady();
  if (m.dist()) throw Error("Trainer::Update: with a " + m.kv_type + " store the servers update; call Step");
  if (m.devices > 1) {
    // Each device's multipliers under its index (set once; cheap to repeat).
    for (std::size_t i = 0; i < m.params.size(); ++i) {
      for (std::size_t c = 0; c < m.devices; ++c) {
        m.optimizer->SetMultipliers(static_cast<int>(i * m.devices + c), m.params[i]->lr_mult, m.params[i]->wd_mult);
      }
    }
  } else {
    for (std::size_t i = 0; i < m.params.size(); ++i) {
      m.optimizer->SetMultipliers(static_cast<int>(i), m.params[i]->lr_mult, m.params[i]->wd_mult);
    }
  }
  const std::vector<bool> fresh = m.Fresh(ignore_stale_grad);
  m.RunOptimizer(batch_size, fresh);
  m.MarkSeen();
}

float Trainer::learning_rate() const { return impl_->optimizer->learning_rate(); }
void Trainer::SetLearningRate(float lr) {
  if (impl_->dist()) throw Error("Trainer::SetLearningRate: with a " + impl_->kv_type + " store the servers update");
  impl_->optimizer->SetLearningRate(lr);
}
Optimizer* Trainer::optimizer() const { return impl_->optimizer.get(); }
KVStore* Trainer::kvstore() const { return impl_->kv_ready ? impl_->kv.get() : nullptr; }

void Trainer::SaveStates(const std::string& path) const {
  if (impl_->dist()) throw Error("Trainer::SaveStates: with a " + impl_->kv_type + " store the states live on the servers");
  impl_->optimizer->SaveStates(path);
}

void Trainer::LoadStates(const std::string& path) {
  if (impl_->dist()) throw Error("Trainer::LoadStates: with a " + impl_->kv_type + " store the states live on the servers");
  impl_->optimizer->LoadStates(path);
}

}  // namespace troupe::nn
