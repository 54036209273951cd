#include "engine/internal/dependency_shard.h"

#include <algorithm>
#include <cassert>

#include "engine/internal/actor_engine.h"
#include "engine/internal/order_check.h"

namespace troupe::internal {

void Shard::Drain() {
  for (;;) {
    if (DrainOnce()) continue;
    // Poll for a moment before sleeping: a wake-up costs a message and two context switches.
    if (SpinUntil(spin_us_, [this] { return inbox_size_.load(std::memory_order_relaxed) != 0; })) continue;
    std::lock_guard<SpinLock> lock(mu_);
    if (inbox_.empty()) {
      asleep_ = true;
      break;
    }
  }
}

bool Shard::DrainOnce(std::size_t max_events) noexcept {
  {
    std::lock_guard<SpinLock> lock(mu_);
    if (draining_ || inbox_.empty()) return false;
    draining_ = true;
    if (inbox_.size() <= max_events) {
      events_.swap(inbox_);
    } else {
      const auto cut = inbox_.begin() + static_cast<std::ptrdiff_t>(max_events);
      events_.assign(inbox_.begin(), cut);
      inbox_.erase(inbox_.begin(), cut);
    }
    inbox_size_.store(inbox_.size(), std::memory_order_relaxed);
  }
  tl_draining_ = true;
  for (const Event& e : events_) {
    switch (e.kind) {
      case EventKind::kPush:
        HandlePush(e.block);
        break;
      case EventKind::kComplete:
        HandleComplete(e.block);
        break;
      case EventKind::kLaneDone:
        HandleLaneDone(e.block);
        break;
    }
    // Blocks counted in order by that event may let the waiters of their variables follow them on the lane.
    while (!revisit_.empty()) {
      ActorVar* v = revisit_.back();
      revisit_.pop_back();
      GrantWaiting(v);
    }
  }
  events_.clear();
  FlushDispatch();
  for (OprBlock* b : recycle_) engine_->ReleaseRef(b);
  recycle_.clear();
  bool wake = false;
  {
    std::lock_guard<SpinLock> lock(mu_);
    draining_ = false;
    // Events left behind while the actor went to sleep (a bounded pass of another thread): wake it.
    if (!inbox_.empty() && asleep_) {
      asleep_ = false;
      wake = true;
    }
  }
  tl_draining_ = false;
  if (wake) actor_.Wake();
  return true;
}

void Shard::HandlePush(OprBlock* b) {
  Opr* o = b->opr;
  if (OrderCheck::enabled()) ForEachVar(o, [b](ActorVar* v, bool write) { OrderCheck::Pushed(v, b, write); });
  // Classify every variable: grantable now, chainable behind one block, or must wait.
  classes_.clear();
  OprBlock* host = nullptr;
  bool chainable = o->num_shards == 1;  // all variables live here
  ForEachVar(o, [&](ActorVar* v, bool write) {
    Settle(v);
    const VarQueue<OprBlock>& q = v->queue;
    if (q.has_waiters()) {
      classes_.push_back(kWait);
      chainable = false;
      return;
    }
    if (!q.Conflicts(write)) {
      classes_.push_back(kDirect);
      return;
    }
    OprBlock* h = q.ChainHost(write);
    if (h != nullptr && (host == nullptr || host == h)) {
      host = h;
      classes_.push_back(kChain);
    } else {
      classes_.push_back(kWait);
      chainable = false;
    }
  });

  // A block its in-order lane can order behind every holder goes there rather than behind host: it then joins
  // the lane groups and needs no completion message, and blocks pushed after it can be ordered behind it
  // too (a continuation is no lane group member, so whatever conflicts with it would have to wait for its
  // completion). Otherwise, if b conflicts with host on every variable host holds, b takes those holds over:
  // host then needs no completion message (the common case in a dependent chain without in-order lanes).
  bool inherit = host != nullptr && chainable && CanInherit(host, o);
  if (host != nullptr && chainable && b->in_order_lane != nullptr) {
    std::size_t i = 0;
    bool ordered = true;
    ForEachVar(o, [&](ActorVar* v, bool) {
      ordered = ordered && (classes_[i++] == kDirect || v->queue.CanGrantOrdered(b->in_order_lane, b->priority));
    });
    if (ordered) chainable = inherit = false;
  }
  if (host != nullptr && chainable) {
    OprBlock* expected = nullptr;
    if (host->next.compare_exchange_strong(expected, inherit ? Tag(b, kInheritsHolds) : b,
                                           std::memory_order_acq_rel)) {
      // b now runs right after host on host's completer: every variable becomes active at once.
      // A host in lane groups keeps its place there (and this shard keeps its reference while it is a
      // group's last member); any other host's completion never comes here once b inherits.
      const bool host_in_lane = host->in_order_counted;
      std::size_t i = 0;
      ForEachVar(o, [&](ActorVar* v, bool write) {
        v->queue.GrantChained(b, write, classes_[i++] == kChain, inherit, host_in_lane);
      });
      if (inherit && !host_in_lane) recycle_.push_back(host);  // this shard's reference
      return;  // pending_grants stays untouched: host's completer runs b
    }
    // host has already finished: its completion is on its way; wait for it like everyone else.
  }

  // Grant what is free; a conflict on a variable whose holders all run before b on b's in-order lane is no
  // reason to wait (VarQueue::GrantOrdered); the rest waits in push order.
  int granted = 0;
  std::size_t i = 0;
  ForEachVar(o, [&](ActorVar* v, bool write) {
    VarQueue<OprBlock>& q = v->queue;
    if (classes_[i++] == kDirect) {
      q.Grant(b, write);
      ++granted;
    } else if (q.CanGrantOrdered(b->in_order_lane, b->priority)) {
      q.GrantOrdered(write);
      b->ordered_grant = true;
      ++granted;
    } else {
      q.Enqueue(b, write, &entries_);
    }
  });
  if (granted > 0) Grant(b, granted);
  // b waits for some variables; where it waits behind a lane group, the group's last member must say when
  // it has run (it may have run already: ArmNotify then grants what it can at once).
  if (granted < static_cast<int>(classes_.size())) ForEachVar(o, [this](ActorVar* v, bool) { ArmNotify(v); });
}

// True when `o` (classified in classes_) has a kChain entry on every variable `host` holds, writing every
// variable host writes.
bool Shard::CanInherit(OprBlock* host, Opr* o) const {
  const Opr* h = host->opr;
  if (h->num_shards != 1 || h->prop == FnProperty::kDeleteVar || h->internal_barrier) return false;
  auto position = [o](ActorVar* v) -> long {  // index of v in ForEachVar order, or -1
    auto c = std::lower_bound(o->const_vars.begin(), o->const_vars.end(), v);
    if (c != o->const_vars.end() && *c == v) return c - o->const_vars.begin();
    auto m = std::lower_bound(o->mutable_vars.begin(), o->mutable_vars.end(), v);
    if (m != o->mutable_vars.end() && *m == v) return static_cast<long>(o->const_vars.size()) + (m - o->mutable_vars.begin());
    return -1;
  };
  // A hold passes on only at the same strength or stronger: if host writes v and b only reads it, later
  // readers would see no writer on v and run before host.
  const long first_write = static_cast<long>(o->const_vars.size());
  for (ActorVar* v : h->const_vars) {
    const long i = position(v);
    if (i < 0 || classes_[i] != kChain) return false;
  }
  for (ActorVar* v : h->mutable_vars) {
    const long i = position(v);
    if (i < first_write || classes_[i] != kChain) return false;
  }
  return true;
}

void Shard::GrantWaiting(ActorVar* v) {
  VarQueue<OprBlock>& q = v->queue;
  Settle(v);
  q.GrantWaiting(
      &entries_,
      [this](OprBlock* b, bool ordered) {
        b->ordered_grant = b->ordered_grant || ordered;
        Grant(b, 1);
      },
      [](const OprBlock* b) { return InOrderSlot{b->in_order_lane, b->priority}; });
  while (q.chain_tail() != nullptr && q.has_waiters() && TryChainWaiter(q.front()->request, q.chain_tail())) {
  }
  ArmNotify(v);
}

void Shard::ArmNotify(ActorVar* v) {
  VarQueue<OprBlock>& q = v->queue;
  if (!q.has_waiters() || !q.lane_busy()) return;
  OprBlock* last = q.lane_last();
  if (!last->lane_notify.load(std::memory_order_relaxed)) last->lane_notify.store(true, std::memory_order_seq_cst);
  // The worker stores lane_done, then reads lane_notify: if it has not run yet, it will post kLaneDone.
  if (!last->lane_done.load(std::memory_order_seq_cst)) return;
  GrantWaiting(v);  // it has run: settle and grant here (a kLaneDone event may still come; it finds nothing)
}

// `f` waits at the front of a variable's queue, for that variable only. If its conflict there is with a
// chain ending in `tail`, chain f behind tail now instead of waiting for tail's completion: a backlog of
// dependent functions is then chained in one pass.
bool Shard::TryChainWaiter(OprBlock* f, OprBlock* tail) {
  // Only a waiter with this one variable left: looking at the fronts of several variables costs a cache miss
  // each (the waiter's block and variables are cold behind a long backlog) for a rare success (on the random
  // workload with two workers, 82% of the calls failed, and 99% of the successes had one variable left).
  if (f->pending_grants.load(std::memory_order_relaxed) != 1) return false;
  Opr* o = f->opr;
  // A block granted somewhere behind in-order holders must reach its lane after them, not run as tail's
  // continuation.
  if (o->num_shards != 1 || f->ordered_grant) return false;
  classes_.clear();
  int fronts = 0;
  bool ok = true;
  bool any_chain = false;
  ForEachVar(o, [&](ActorVar* u, bool write) {
    const VarQueue<OprBlock>& q = u->queue;
    if (!q.has_waiters() || q.front()->request != f) {
      classes_.push_back(kHeld);
      return;
    }
    ++fronts;
    if (!q.Conflicts(write)) {
      classes_.push_back(kDirect);
    } else if (q.chain_tail() == tail && q.ChainHost(write) == tail) {
      classes_.push_back(kChain);
      any_chain = true;
    } else {
      classes_.push_back(kWait);
      ok = false;
    }
  });
  // The one variable f still waits for must be the front counted above.
  if (!ok || !any_chain || fronts != 1) return false;
  const bool inherit = CanInherit(tail, o);
  OprBlock* expected = nullptr;
  if (!tail->next.compare_exchange_strong(expected, inherit ? Tag(f, kInheritsHolds) : f,
                                          std::memory_order_acq_rel)) {
    return false;
  }
  const bool tail_in_lane = tail->in_order_counted;
  std::size_t i = 0;
  ForEachVar(o, [&](ActorVar* u, bool write) {
    const VarClass c = static_cast<VarClass>(classes_[i++]);
    if (c == kHeld) return;
    u->queue.PopFront(&entries_);
    u->queue.GrantChained(f, write, c == kChain, inherit, tail_in_lane);
  });
  f->pending_grants.store(0, std::memory_order_relaxed);  // tail's completer runs f
  if (inherit && !tail_in_lane) recycle_.push_back(tail);
  return true;
}

void Shard::HandleComplete(OprBlock* b) {
  Opr* o = b->opr;
  const bool deletes = o->prop == FnProperty::kDeleteVar;
  ForEachVar(o, [&](ActorVar* v, bool write) {
    v->queue.Release(b, write);
    if (deletes) {
      assert(v->queue.idle() && !v->queue.has_waiters());
      engine_->FreeVar(v);  // DeleteVariable: every earlier function on v has completed
    } else {
      GrantWaiting(v);
    }
  });
  recycle_.push_back(b);
}

// A block in lane groups has run and a request waits for a group it ends: settle its variables' groups and
// grant. The event carries its own reference on the block.
void Shard::HandleLaneDone(OprBlock* b) {
  ForEachVar(b->opr, [this](ActorVar* v, bool) { GrantWaiting(v); });
  recycle_.push_back(b);
}

void Shard::Dispatch(OprBlock* b) {
  if (RunsWhereReady(*b->opr, b->ctx)) {
    RunContext rctx{b->ctx, nullptr};
    OprBlock* next = engine_->Execute(b, rctx, nullptr);
    if (next != nullptr) engine_->RunOrSubmitContinuation(next, nullptr, nullptr);
    return;
  }
  if (b->in_order_lane != nullptr) {
    // Only a single-shard block has an in-order lane, so only this shard touches its flags here; a block of
    // several shards keeps Submit's false (another shard may read it as a chain tail meanwhile).
    b->in_order_counted = false;
    // Move b into its variables' lane groups (invariant 4), all or none: later blocks for the same lane need
    // not wait for its completion, and it posts none. Its batch is flushed in this pass, after every block
    // moved before it.
    bool compatible = true;
    ForEachVar(b->opr, [&](ActorVar* v, bool) {
      compatible = compatible && v->queue.InOrderCompatible(b->in_order_lane, b->priority);
    });
    if (compatible) {
      ForEachVar(b->opr, [&](ActorVar* v, bool write) {
        OprBlock* previous = v->queue.NoteInOrder(b, write, b->in_order_lane, b->priority);
        ++b->lane_pins;
        Unpin(previous);
        if (v->queue.has_waiters()) revisit_.push_back(v);
      });
      b->in_order_counted = true;
    }
  }
  for (Batch& batch : batches_) {
    if (batch.device == b->device && batch.lane == b->lane) {
      batch.tasks.push_back(b);
      return;
    }
  }
  batches_.push_back(Batch{b->device, b->lane, {b}});
}

void Shard::FlushDispatch() {
  for (Batch& batch : batches_) {
    if (!batch.tasks.empty()) {
      batch.device->SubmitBatch(batch.tasks.data(), batch.tasks.size(), batch.lane);
      batch.tasks.clear();
    }
  }
}

}  // namespace troupe::internal
