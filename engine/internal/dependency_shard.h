// Shard — a dependency actor: it owns the VarQueues of the variables that map to it, grants their requests
// in push order and hands fully granted blocks to their device lanes (DESIGN.md §1, §7).
//
// Producers (pushing threads, workers reporting completions) append events to the shard's inbox and ring its
// doorbell (one CAF message) only when it sleeps. A device worker or a foreign thread reporting a completion
// takes the shard's turn instead when nobody holds it (Post with drain_here) — the actor asleep, or awake
// but only polling — and drains the inbox once on its own thread: no doorbell, and the blocks the completion
// makes ready are dispatched without waiting for the actor's thread to get a core.
//
// Invariants:
//  1. One thread at a time holds the shard's turn: the one that set draining_ (under mu_, in DrainOnce) until
//     it clears it. Only the turn's holder touches the queues of this shard's variables, the entry pool and
//     the scratch below; mu_ orders one holder's work before the next's. asleep_ says whether the actor
//     waits for a doorbell; whoever clears it makes sure the inbox gets drained (drains or rings), and a
//     holder leaving events behind for a sleeping actor rings it.
//  2. Events of the inbox are handled in the order they were posted; a block's push event precedes its
//     completion event on every shard (a block completes only after all its shards granted it).
//  3. A block is dispatched (handed to its lane, or run here) once, when its last variable is granted; blocks
//     granted in one pass reach each (device, lane) in one batch, in grant order.
//  4. A block counted in order (OprBlock::in_order_counted) was dispatched by this shard to its in-order lane
//     and moved into the lane groups of its variables (VarQueue::NoteInOrder); it posts no completion. Its
//     lane_pins counts the groups it is the last member of, and this shard's reference on it is dropped
//     when that count reaches 0. A request that waits behind a group asks its last member for a kLaneDone
//     event (ArmNotify); every other look at a group settles it if its last member has run.
//
// Thread-safety: Post is thread-safe; everything else runs on the turn's holder.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "actors/detail/wakeable.h"
#include "base/spinlock.h"
#include "engine/internal/opr_block.h"
#include "engine/internal/var_queue.h"

namespace troupe::internal {

enum class EventKind : std::uint8_t { kPush, kComplete, kLaneDone };

class Shard {
 public:
  Shard(ActorEngine* engine, int index, int spin_us) : engine_(engine), index_(index), spin_us_(spin_us) {}
  // After the actor stopped: the last drain (the actor's or a worker's) ended under mu_, so taking it orders
  // everything done with the queues before the engine frees blocks and variables (visible to sanitizers,
  // unlike CAF's own termination).
  ~Shard() { std::lock_guard<SpinLock> lock(mu_); }
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  void Spawn(caf::actor_system& system, bool detached) {
    actor_.Spawn(system, [this] { Drain(); }, detached);
  }
  const caf::actor& handle() const { return actor_.handle(); }

  // Thread-safe. Rings the doorbell only when the actor sleeps. With `drain_here` (a device worker or a
  // foreign thread reporting a completion, a thread pushing a function the shard runs itself) the caller
  // takes the sleeping actor's turn instead (invariant 1) and drains one bounded pass on its own thread.
  void Post(EventKind kind, OprBlock* b, bool drain_here = false) { Post(kind, &b, 1, drain_here); }
  // Posts n events of one kind at once (one lock, at most one wake-up).
  void Post(EventKind kind, OprBlock* const* blocks, std::size_t n, bool drain_here) {
    bool wake = false;
    bool few = false;
    {
      std::lock_guard<SpinLock> lock(mu_);
      for (std::size_t i = 0; i < n; ++i) inbox_.push_back(Event{kind, blocks[i]});
      inbox_size_.store(inbox_.size(), std::memory_order_relaxed);
      few = inbox_.size() <= n + kAwakeDrainBacklog;
      if (asleep_) {
        asleep_ = false;
        wake = true;
      }
    }
    if (!wake) {
      // The actor is awake, but maybe only polling: a completion is handled here at once when nobody holds
      // the turn (DrainOnce takes it only then), instead of waiting for the actor's thread to get a core.
      // Only with a short backlog: a worker that took over a long one (a pusher far ahead) would stop
      // running functions for it.
      if (kDrainWhileAwake && drain_here && few && !tl_draining_) DrainOnce(kInlineEvents);
      return;
    }
    if (!drain_here || tl_draining_) {  // never a drain inside a drain (of this shard or another)
      actor_.Wake();
      return;
    }
    DrainOnce(kInlineEvents);
    {
      std::lock_guard<SpinLock> lock(mu_);
      if (inbox_.empty()) {
        asleep_ = true;
        return;
      }
    }
    actor_.Wake();  // more came in meanwhile: the actor takes over (a worker drains one pass at most)
  }

 private:
  struct Event {
    EventKind kind;
    OprBlock* block;
  };
  // How a block's request on one variable can proceed: granted at once, chained behind the variable's chain
  // tail, made to wait, or (kHeld) already granted earlier.
  enum VarClass : std::uint8_t { kDirect, kChain, kWait, kHeld };

  void Drain();
  // One pass over at most max_events events of the inbox, in order; false when it was empty. noexcept: an
  // exception here (memory exhaustion in the bookkeeping) would leave the turn held forever.
  bool DrainOnce(std::size_t max_events = SIZE_MAX) noexcept;
  // A worker's pass is bounded, so that it soon returns to running functions; the actor takes the rest.
  static constexpr std::size_t kInlineEvents = 32;
  static constexpr bool kDrainWhileAwake = true;
  static constexpr std::size_t kAwakeDrainBacklog = 4;  // other events the inbox may hold for that
  void HandlePush(OprBlock* b);
  void HandleComplete(OprBlock* b);
  void HandleLaneDone(OprBlock* b);
  // Ends v's lane group if its last member has run (VarQueue::Settle).
  void Settle(ActorVar* v) {
    if (!v->queue.lane_busy()) return;
    Unpin(v->queue.Settle([](OprBlock* last) { return last->lane_done.load(std::memory_order_acquire); }));
  }
  void Unpin(OprBlock* b) {
    if (b != nullptr && --b->lane_pins == 0) recycle_.push_back(b);
  }
  // Makes sure somebody settles v's lane group once its last member has run, when requests wait for it.
  void ArmNotify(ActorVar* v);
  void GrantWaiting(ActorVar* v);
  void Grant(OprBlock* b, int n) {
    if (b->pending_grants.fetch_sub(n, std::memory_order_acq_rel) == n) Dispatch(b);
  }
  bool CanInherit(OprBlock* host, Opr* o) const;
  bool TryChainWaiter(OprBlock* f, OprBlock* tail);
  void Dispatch(OprBlock* b);
  void FlushDispatch();
  template <class F>
  void ForEachVar(Opr* o, F&& f) {  // (var, write) for this shard's variables, reads first
    for (ActorVar* v : o->const_vars) {
      if (v->shard() == index_) f(v, false);
    }
    for (ActorVar* v : o->mutable_vars) {
      if (v->shard() == index_) f(v, true);
    }
  }

  static inline thread_local bool tl_draining_ = false;  // this thread holds a shard's turn (DrainOnce)

  ActorEngine* engine_;
  int index_;
  WakeableActor actor_;

  SpinLock mu_;
  std::vector<Event> inbox_;  // guarded by mu_
  bool asleep_ = true;        // guarded by mu_
  bool draining_ = false;     // guarded by mu_: some thread holds the turn (invariant 1)
  std::atomic<std::size_t> inbox_size_{0};
  int spin_us_;

  // Scratch of the turn's holder.
  std::vector<Event> events_;
  struct Batch {
    Device* device;
    Lane lane;
    std::vector<Task*> tasks;
  };
  std::vector<Batch> batches_;
  std::vector<std::uint8_t> classes_;
  std::vector<OprBlock*> recycle_;
  std::vector<ActorVar*> revisit_;  // variables whose waiters may follow a block just counted in order
  VarQueue<OprBlock>::Pool entries_;  // wait-queue nodes of this shard's variables
};

}  // namespace troupe::internal
