// The actor engine.
//
// Shape (DESIGN.md §1, §7):
//  - Dependency actors ("shards"): each owns the queues of the variables that map to it. Producers (pushing
//    threads, workers reporting completion) append events to the shard's inbox and ring its doorbell (one
//    CAF message) only when it sleeps. A device worker reporting a completion to a sleeping shard takes its
//    turn instead (Shard::Post): one thread at a time holds a shard's turn and touches its queues, the
//    actor's thread or such a worker.
//  - Device actors (actors/): ready functions go to the lane of their device; workers run them.
//  - "Ordering for free": a function whose every conflicting predecessor is one function T (or the tail of
//    a chain that ends in T) is attached to T as its continuation instead of waiting for T's completion
//    message; whoever completes T runs it (inline on T's worker when that is the right lane) — one hop per
//    function in a dependent chain instead of two.
//
// Life of a function: Push -> OprBlock from the pool -> kPush event to its shard(s) -> the shard grants
// each variable in push order (or chains the block) -> when all are granted the block goes to its device
// lane -> a worker runs it -> Finish records errors and versions, posts kComplete to the shard(s), runs or
// submits the continuation -> the shards release the variables, grant waiters and recycle the block.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "actors/detail/lane_group.h"
#include "base/spinlock.h"
#include "actors/detail/wakeable.h"
#include "actors/runtime.h"
#include "engine/internal/engines.h"
#include "engine/internal/profile_clock.h"
#include "engine/internal/profile_log.h"

namespace troupe {
class Opr;
}

namespace troupe::internal {
namespace {

class ActorEngine;
struct OprBlock;

class ActorVar final : public Var {
 public:
  void BumpVersion() { version_.fetch_add(1, std::memory_order_acq_rel); }
  // A pooled variable object keeps its shard for life: a late completion event for a function of a
  // deleted incarnation may still be on its way to another shard, which must not mistake a reused object
  // for one of its own.
  explicit ActorVar(int shard) : shard_(shard) {}
  void Reset() {
    version_.store(0, std::memory_order_relaxed);
    error = nullptr;
    waiting = WaitQueue{};
    active_reads = 0;
    active_writes = 0;
    chain_tail = nullptr;
  }
  int shard() const { return shard_; }

  // Read and written only by the thread running a function that holds this variable; the dependency
  // rule orders those threads, so no lock is needed.
  std::exception_ptr error;

  // Owned by whoever holds shard()'s turn (its actor, or a worker draining it): no other thread touches these.
  struct Entry {
    OprBlock* block;
    bool write;
    Entry* next = nullptr;
  };
  // Entries not yet granted, in push order: an intrusive FIFO whose nodes come from the shard's free list
  // (no allocation per entry, unlike a std::deque that allocates and frees chunks as it fills and drains).
  struct WaitQueue {
    Entry* head = nullptr;
    Entry* tail = nullptr;
    bool empty() const { return head == nullptr; }
    const Entry& front() const { return *head; }
    void push_back(Entry* e) {
      e->next = nullptr;
      (tail != nullptr ? tail->next : head) = e;
      tail = e;
    }
    Entry* pop_front() {
      Entry* e = head;
      head = e->next;
      if (head == nullptr) tail = nullptr;
      return e;
    }
  };
  // On its own cache line: the dependency actor writes these for every function, while workers read
  // `error` and bump the version (above) — sharing one line made every grant a cache miss for both.
  alignas(64) WaitQueue waiting;
  int active_reads = 0;          // granted and not completed
  int active_writes = 0;         // granted and not completed (> 1 only through chaining)
  OprBlock* chain_tail = nullptr;  // the active entries form one serial chain ending here (or null)

 private:
  const int shard_;
};

}  // namespace
}  // namespace troupe::internal

namespace troupe {
// A function with its dependencies; pushed any number of times. Reference-counted: the owner's reference
// (dropped by DeleteOperator) plus one per block in flight.
class Opr {
 public:
  AsyncFn async_fn;
  SyncFn sync_fn;
  std::vector<internal::ActorVar*> const_vars;
  std::vector<internal::ActorVar*> mutable_vars;
  FnProperty prop = FnProperty::kNormal;
  std::string name;
  std::uint64_t shard_mask = 0;  // shards that own at least one variable
  int num_shards = 0;
  bool internal_barrier = false;  // WaitForVar: ordered like a write, no version change, runs in the shard
  std::atomic<int> refs{1};

  void Clear() {
    async_fn = nullptr;
    sync_fn = nullptr;
    const_vars.clear();
    mutable_vars.clear();
    prop = FnProperty::kNormal;
    name.clear();
    shard_mask = 0;
    num_shards = 0;
    internal_barrier = false;
  }
};
}  // namespace troupe

namespace troupe::internal {
namespace {

// OprBlock::next holds the continuation, tagged: kInheritsHolds when the continuation took over every
// variable hold of its host (so the host's completion needs no message), or kChainClosed once the host
// finished (nothing can be chained behind it any more).
constexpr std::uintptr_t kChainClosedBits = 1;
constexpr std::uintptr_t kInheritsHolds = 2;
OprBlock* const kChainClosed = reinterpret_cast<OprBlock*>(kChainClosedBits);
inline OprBlock* Tag(OprBlock* b, std::uintptr_t bits) {
  return reinterpret_cast<OprBlock*>(reinterpret_cast<std::uintptr_t>(b) | bits);
}

// One push of an operator: what the shards queue and the devices run. Pooled; never freed while the
// engine lives (so a stale callback can be detected through CallbackSlot).
struct OprBlock final : Task {
  ActorEngine* engine = nullptr;
  Opr* opr = nullptr;  // &own_opr for PushAsync/PushSync, a user's operator for Push
  Opr own_opr;
  Context ctx;
  Lane lane = Lane::kNormal;
  Device* device = nullptr;
  bool profiling = false;
  std::int64_t begin_ns = 0;

  std::atomic<int> pending_grants{0};          // variables not yet granted
  std::atomic<OprBlock*> next{nullptr};        // continuation, or kChainClosed once this block finished
  // References: one per shard that will process the completion, one for Execute (released when it stops
  // touching the block) and one for Finish (released as its last act: completion may come after Execute
  // returned — GPU stream work, an async callback from another thread — and a continuation that inherited
  // the holds has already released the shards' share).
  std::atomic<int> refs{0};
  OprBlock* free_next = nullptr;               // link in the engine's free list
  CallbackSlot callback;
  std::uint64_t callback_gen = 0;
  bool completed_inline = false;  // the callback was called on the running worker, inside fn

  void Run(const RunContext& rctx, const WorkerInfo& worker) override;
  void StreamDone(std::exception_ptr error) override;
};

enum class EventKind : std::uint8_t { kPush, kComplete };
struct Event {
  EventKind kind;
  OprBlock* block;
};

thread_local OprBlock* tl_running_block = nullptr;
thread_local bool tl_draining = false;  // this thread holds a shard's turn (Shard::DrainOnce)
thread_local const WorkerInfo* tl_worker = nullptr;

// How a block's entry on one variable can proceed: granted at once, chained behind the variable's chain
// tail, made to wait, or (kHeld) already granted earlier.
enum VarClass : std::uint8_t { kDirect, kChain, kWait, kHeld };

// A dependency actor and the variable queues it owns.
class Shard {
 public:
  Shard(ActorEngine* engine, int index, int spin_us) : engine_(engine), index_(index), spin_us_(spin_us) {}
  // After the actor stopped: the last drain (the actor's or a worker's) ended under mu_, so taking it orders
  // everything done with the queues before the engine frees blocks and variables (visible to sanitizers,
  // unlike CAF's own termination).
  ~Shard() { std::lock_guard<SpinLock> lock(mu_); }
  void Spawn(caf::actor_system& system, bool detached) {
    actor_.Spawn(system, [this] { Drain(); }, detached);
  }
  const caf::actor& handle() const { return actor_.handle(); }

  // Thread-safe. Rings the doorbell only when the actor sleeps. With `drain_here` (a device worker or a
  // foreign thread reporting a completion, a thread pushing a function the shard runs itself) the caller
  // takes the sleeping actor's turn instead: it drains the inbox once on its own thread and hands the shard
  // back, saving the two thread wake-ups of a doorbell (the actor's, then the next thread's for the work it
  // dispatches). Whoever clears asleep_ holds the drain turn, so the
  // queues still have one owner at a time, and mu_ orders one owner's work before the next's.
  void Post(EventKind kind, OprBlock* b, bool drain_here = false) {
    bool wake = false;
    {
      std::lock_guard<SpinLock> lock(mu_);
      inbox_.push_back(Event{kind, b});
      inbox_size_.store(inbox_.size(), std::memory_order_relaxed);
      if (asleep_) {
        asleep_ = false;
        wake = true;
      }
    }
    if (!wake) return;
    if (!drain_here || tl_draining) {  // never a drain inside a drain (of this shard or another)
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
  void Drain();
  // One pass over at most max_events events of the inbox, in order; false when it was empty. noexcept: an
  // exception here (memory exhaustion in the bookkeeping) would leave the turn held forever.
  bool DrainOnce(std::size_t max_events = SIZE_MAX) noexcept;
  // A worker's pass is bounded, so that it soon returns to running functions; the actor takes the rest.
  static constexpr std::size_t kInlineEvents = 32;
  void HandlePush(OprBlock* b);
  void HandleComplete(OprBlock* b);
  void GrantWaiting(ActorVar* v);
  void Grant(OprBlock* b, int n);
  bool CanInherit(OprBlock* host, Opr* o) const;
  bool TryChainWaiter(OprBlock* f, OprBlock* tail);
  // Makes b (just chained behind a host) active on v. `cls` is b's kDirect/kChain class on v; when
  // `inherited_from` is set, b takes over that host's hold on each kChain variable.
  static void ActivateChained(ActorVar* v, bool write, OprBlock* b, std::uint8_t cls, OprBlock* inherited_from) {
    const bool was_idle = v->active_reads + v->active_writes == 0;
    if (inherited_from != nullptr && cls == kChain) {
      (HoldsForWrite(inherited_from->opr, v) ? v->active_writes : v->active_reads)--;
    }
    (write ? v->active_writes : v->active_reads)++;
    v->chain_tail = (cls == kChain || was_idle) ? b : nullptr;
  }
  static bool HoldsForWrite(const Opr* o, ActorVar* v) {
    return std::binary_search(o->mutable_vars.begin(), o->mutable_vars.end(), v);
  }
  // A block may follow `tail` on v when it conflicts with tail itself there. A reader never chains behind
  // another reader: readers between two writers must be free to run together on different workers.
  static bool ChainableBehind(OprBlock* tail, ActorVar* v, bool write) {
    return tail != nullptr && (write || HoldsForWrite(tail->opr, v));
  }
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

  ActorEngine* engine_;
  int index_;
  WakeableActor actor_;

  SpinLock mu_;
  std::vector<Event> inbox_;  // guarded by mu_
  bool asleep_ = true;        // guarded by mu_
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

  // Wait-queue nodes, owned by the turn's holder.
  ActorVar::Entry* NewEntry(OprBlock* b, bool write) {
    if (free_entries_ == nullptr) {
      entry_chunks_.push_back(std::make_unique<ActorVar::Entry[]>(kEntryChunk));
      ActorVar::Entry* chunk = entry_chunks_.back().get();
      for (int i = 0; i < kEntryChunk; ++i) {
        chunk[i].next = free_entries_;
        free_entries_ = &chunk[i];
      }
    }
    ActorVar::Entry* e = free_entries_;
    free_entries_ = e->next;
    e->block = b;
    e->write = write;
    return e;
  }
  void FreeEntry(ActorVar::Entry* e) {
    e->next = free_entries_;
    free_entries_ = e;
  }
  static constexpr int kEntryChunk = 1024;
  std::vector<std::unique_ptr<ActorVar::Entry[]>> entry_chunks_;
  ActorVar::Entry* free_entries_ = nullptr;
};

class ActorEngine final : public Engine {
 public:
  explicit ActorEngine(const EngineConfig& config);
  ~ActorEngine() override;

  EngineType type() const override { return EngineType::kActor; }
  VarHandle NewVariable() override;
  OprHandle NewOperator(AsyncFn fn, const std::vector<VarHandle>& const_vars,
                        const std::vector<VarHandle>& mutable_vars, FnProperty prop, const char* name) override;
  void DeleteOperator(OprHandle op) override;
  void Push(OprHandle op, Context ctx, int priority, bool profiling) override;
  void PushAsync(AsyncFn fn, Context ctx, const std::vector<VarHandle>& const_vars,
                 const std::vector<VarHandle>& mutable_vars, FnProperty prop, int priority,
                 const char* name) override;
  void PushSync(SyncFn fn, Context ctx, const std::vector<VarHandle>& const_vars,
                const std::vector<VarHandle>& mutable_vars, FnProperty prop, int priority, const char* name) override;
  void DeleteVariable(SyncFn delete_fn, Context ctx, VarHandle var) override;
  void WaitForVar(VarHandle var) override;
  void WaitForAll() override;
  void SetProfiling(bool on) override { profiling_.store(on, std::memory_order_relaxed); }
  std::vector<ProfileRecord> TakeProfile() override;
  EngineStats Stats() const override;

  // Called by blocks, shards and callbacks.
  OprBlock* Execute(OprBlock* b, const RunContext& rctx, const WorkerInfo* worker);
  // Whether the caller may then drain a sleeping shard itself (Shard::Post): never (a GPU stream's
  // completion), a device worker when no continuation waits for it to run next, or a foreign thread
  // completing a callback always (it handles the completion, then runs the continuation).
  enum class FinishDrain { kNo, kIfNoContinuation, kYes };
  OprBlock* Finish(OprBlock* b, std::exception_ptr error, FinishDrain drain = FinishDrain::kNo);
  void RunOrSubmitContinuation(OprBlock* next, const WorkerInfo* worker, const RunContext* rctx);
  void ReleaseRef(OprBlock* b);
  void FreeVar(ActorVar* v);
  Shard* shard(int i) { return shards_[i].get(); }
  int num_shards() const { return static_cast<int>(shards_.size()); }

 private:
  static void OnCallback(void* block, void* gen, std::exception_ptr error);
  OprBlock* AllocBlock();
  void Recycle(OprBlock* b);
  void PrepareOpr(Opr* o, const char* name);
  Device* DeviceFor(Context ctx);
  static Lane LaneFor(Context ctx, FnProperty prop);
  void Submit(OprBlock* b, Context ctx, int priority, bool profiling);
  void RecordError(const std::exception_ptr& e);
  void FillAsync(OprBlock* b, const std::vector<VarHandle>& const_vars, const std::vector<VarHandle>& mutable_vars,
                 FnProperty prop, const char* name);

  std::shared_ptr<Runtime> runtime_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::mutex multi_shard_push_mu_;  // orders pushes that span several shards

  // Block pool. Recyclers (shards, workers) push freed blocks onto a lock-free stack; allocating threads
  // take the whole stack at once into alloc_free_, so the two sides share one cache line per batch, not
  // per block (and taking everything at once has no ABA problem).
  void PushFree(OprBlock* b);
  alignas(64) std::atomic<OprBlock*> recycled_{nullptr};
  alignas(64) SpinLock alloc_mu_;
  OprBlock* alloc_free_ = nullptr;                    // guarded by alloc_mu_
  std::deque<std::unique_ptr<OprBlock>> all_blocks_;  // guarded by alloc_mu_

  // Variable pool.
  std::mutex var_mu_;
  std::deque<ActorVar> all_vars_;     // guarded by var_mu_
  std::vector<ActorVar*> free_vars_;  // guarded by var_mu_

  // User operators, freed when their last reference goes.
  std::mutex opr_mu_;
  std::unordered_map<Opr*, std::unique_ptr<Opr>> oprs_;  // guarded by opr_mu_

  // Devices by context; CPU ids < kFastDevices are looked up without a lock.
  static constexpr int kFastDevices = 64;
  std::atomic<Device*> cpu_devices_[kFastDevices] = {};

  // Quiescence counting: pushers bump submitted_, finishers bump finished_ (separate cache lines, so a
  // pusher and a worker do not trade one line per function); WaitForAll waits until they are equal.
  void NoteFinished();
  alignas(64) std::atomic<std::uint64_t> submitted_{0};
  alignas(64) std::atomic<std::uint64_t> finished_{0};
  alignas(64) std::atomic<int> all_waiters_{0};
  std::atomic<int> foreign_finishers_{0};  // callbacks finishing blocks on threads the engine does not own
  std::atomic<std::uint64_t> skipped_{0};
  std::mutex error_mu_;
  std::exception_ptr global_error_;  // guarded by error_mu_
  std::atomic<bool> profiling_{false};
  ProfileLog profile_;  // the functions run while profiling
  bool stopping_ = false;
};

// ---------------------------------------------------------------------------------------------------------
// OprBlock

void OprBlock::Run(const RunContext& rctx, const WorkerInfo& worker) {
  ActorEngine* e = engine;
  OprBlock* next = e->Execute(this, rctx, &worker);
  if (next != nullptr) e->RunOrSubmitContinuation(next, &worker, &rctx);
}

void OprBlock::StreamDone(std::exception_ptr error) {
  ActorEngine* e = engine;
  OprBlock* next = e->Finish(this, std::move(error));
  if (next != nullptr) e->RunOrSubmitContinuation(next, nullptr, nullptr);
}

// ---------------------------------------------------------------------------------------------------------
// Shard

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
    if (inbox_.empty()) return false;
    if (inbox_.size() <= max_events) {
      events_.swap(inbox_);
    } else {
      const auto cut = inbox_.begin() + static_cast<std::ptrdiff_t>(max_events);
      events_.assign(inbox_.begin(), cut);
      inbox_.erase(inbox_.begin(), cut);
    }
    inbox_size_.store(inbox_.size(), std::memory_order_relaxed);
  }
  tl_draining = true;
  for (const Event& e : events_) {
    if (e.kind == EventKind::kPush) {
      HandlePush(e.block);
    } else {
      HandleComplete(e.block);
    }
  }
  events_.clear();
  FlushDispatch();
  for (OprBlock* b : recycle_) engine_->ReleaseRef(b);
  recycle_.clear();
  tl_draining = false;
  return true;
}

void Shard::HandlePush(OprBlock* b) {
  Opr* o = b->opr;
  // Classify every variable: grantable now, chainable behind one block, or must wait.
  classes_.clear();
  OprBlock* host = nullptr;
  bool chainable = o->num_shards == 1;  // all variables live here
  ForEachVar(o, [&](ActorVar* v, bool write) {
    if (!v->waiting.empty()) {
      classes_.push_back(kWait);
      chainable = false;
      return;
    }
    const bool conflict = write ? (v->active_reads + v->active_writes > 0) : (v->active_writes > 0);
    if (!conflict) {
      classes_.push_back(kDirect);
    } else if (ChainableBehind(v->chain_tail, v, write) && (host == nullptr || host == v->chain_tail)) {
      host = v->chain_tail;
      classes_.push_back(kChain);
    } else {
      classes_.push_back(kWait);
      chainable = false;
    }
  });

  if (host != nullptr && chainable) {
    // If b conflicts with host on every variable host holds, b can take those holds over: host then
    // needs no completion message at all (the common case in a dependent chain).
    const bool inherit = CanInherit(host, o);
    OprBlock* expected = nullptr;
    if (host->next.compare_exchange_strong(expected, inherit ? Tag(b, kInheritsHolds) : b,
                                           std::memory_order_acq_rel)) {
      // b now runs right after host on host's completer: every variable becomes active at once.
      std::size_t i = 0;
      ForEachVar(o, [&](ActorVar* v, bool write) { ActivateChained(v, write, b, classes_[i++], inherit ? host : nullptr); });
      if (inherit) recycle_.push_back(host);  // this shard's reference: host's completion never comes here
      return;  // pending_grants stays untouched: host's completer runs b
    }
    // host has already finished: its completion is on its way; wait for it like everyone else.
  }

  int granted = 0;
  std::size_t i = 0;
  ForEachVar(o, [&](ActorVar* v, bool write) {
    if (classes_[i++] == kDirect) {
      const bool was_idle = v->active_reads + v->active_writes == 0;
      (write ? v->active_writes : v->active_reads)++;
      v->chain_tail = was_idle ? b : nullptr;
      ++granted;
    } else {
      v->waiting.push_back(NewEntry(b, write));
    }
  });
  if (granted > 0) Grant(b, granted);
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

void Shard::Grant(OprBlock* b, int n) {
  if (b->pending_grants.fetch_sub(n, std::memory_order_acq_rel) == n) Dispatch(b);
}

void Shard::GrantWaiting(ActorVar* v) {
  while (!v->waiting.empty()) {
    const ActorVar::Entry& e = v->waiting.front();
    OprBlock* b = e.block;
    if (e.write) {
      if (v->active_reads + v->active_writes != 0) break;
      FreeEntry(v->waiting.pop_front());
      v->active_writes = 1;
      v->chain_tail = b;
      Grant(b, 1);
      break;
    }
    if (v->active_writes != 0) break;
    FreeEntry(v->waiting.pop_front());
    v->chain_tail = v->active_reads == 0 ? b : nullptr;
    ++v->active_reads;
    Grant(b, 1);
  }
  while (v->chain_tail != nullptr && !v->waiting.empty() && TryChainWaiter(v->waiting.front().block, v->chain_tail)) {
  }
}

// `f` waits at the front of some variables' queues. If every remaining wait of f is at a front and each
// conflict is with a chain ending in `tail`, chain f behind tail now instead of waiting for tail's
// completion: a backlog of dependent functions is then chained in one pass.
bool Shard::TryChainWaiter(OprBlock* f, OprBlock* tail) {
  Opr* o = f->opr;
  if (o->num_shards != 1) return false;
  classes_.clear();
  int fronts = 0;
  bool ok = true;
  bool any_chain = false;
  ForEachVar(o, [&](ActorVar* u, bool write) {
    if (u->waiting.empty() || u->waiting.front().block != f) {
      classes_.push_back(kHeld);
      return;
    }
    ++fronts;
    const bool conflict = write ? (u->active_reads + u->active_writes > 0) : (u->active_writes > 0);
    if (!conflict) {
      classes_.push_back(kDirect);
    } else if (u->chain_tail == tail && ChainableBehind(tail, u, write)) {
      classes_.push_back(kChain);
      any_chain = true;
    } else {
      classes_.push_back(kWait);
      ok = false;
    }
  });
  // Every variable f still waits for must be one of the fronts counted above.
  if (!ok || !any_chain || fronts != f->pending_grants.load(std::memory_order_relaxed)) return false;
  const bool inherit = CanInherit(tail, o);
  OprBlock* expected = nullptr;
  if (!tail->next.compare_exchange_strong(expected, inherit ? Tag(f, kInheritsHolds) : f,
                                          std::memory_order_acq_rel)) {
    return false;
  }
  std::size_t i = 0;
  ForEachVar(o, [&](ActorVar* u, bool write) {
    const VarClass c = static_cast<VarClass>(classes_[i++]);
    if (c == kHeld) return;
    FreeEntry(u->waiting.pop_front());
    ActivateChained(u, write, f, c, inherit ? tail : nullptr);
  });
  f->pending_grants.store(0, std::memory_order_relaxed);  // tail's completer runs f
  if (inherit) recycle_.push_back(tail);
  return true;
}

void Shard::HandleComplete(OprBlock* b) {
  Opr* o = b->opr;
  const bool deletes = o->prop == FnProperty::kDeleteVar;
  ForEachVar(o, [&](ActorVar* v, bool write) {
    (write ? v->active_writes : v->active_reads)--;
    if (v->chain_tail == b || v->active_reads + v->active_writes == 0) v->chain_tail = nullptr;
    if (deletes) {
      engine_->FreeVar(v);  // DeleteVariable: every earlier function on v has completed
    } else {
      GrantWaiting(v);
    }
  });
  recycle_.push_back(b);
}

void Shard::Dispatch(OprBlock* b) {
  if (b->opr->internal_barrier || (b->opr->prop == FnProperty::kAsync && !b->ctx.is_gpu())) {
    // WaitForVar's function only hands over an error and wakes one thread, and a CPU kAsync function only
    // starts work that completes through its callback (FnProperty): run it here, no hop to a worker.
    RunContext rctx{b->ctx, nullptr};
    OprBlock* next = engine_->Execute(b, rctx, nullptr);
    if (next != nullptr) engine_->RunOrSubmitContinuation(next, nullptr, nullptr);
    return;
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

// ---------------------------------------------------------------------------------------------------------
// ActorEngine

ActorEngine::ActorEngine(const EngineConfig& config)
    : runtime_(Runtime::Create(config.runtime, config.actor_system)) {
  const RuntimeConfig& rc = runtime_->config();
  for (int i = 0; i < rc.dependency_shards; ++i) {
    shards_.push_back(std::make_unique<Shard>(this, i, rc.worker_spin_us));
    shards_.back()->Spawn(runtime_->system(), rc.detached_dependency_actors);
  }
}

ActorEngine::~ActorEngine() {
  DestroyExtensions();  // they may push (deleting their variables): the engine must still be running
  // Pending work runs to completion (errors are dropped: nobody is left to see them).
  try {
    for (;;) {
      try {
        WaitForAll();
        break;
      } catch (...) {
      }
    }
  } catch (...) {
  }
  // A callback on a thread of the user's may still be leaving Finish (recycling its block, notifying).
  while (foreign_finishers_.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  std::vector<caf::actor> actors;
  for (const auto& s : shards_) actors.push_back(s->handle());
  // The shards drain their inboxes (completions posted before WaitForAll returned) before they stop.
  StopAndWait(runtime_->system(), actors);
  actors.clear();
  shards_.clear();   // drop the last handles: a detached actor's thread ends when its actor is destroyed
  runtime_.reset();  // stops the device actors
  for (auto& [op, owned] : oprs_) owned.reset();
}

VarHandle ActorEngine::NewVariable() {
  std::lock_guard<std::mutex> lock(var_mu_);
  ActorVar* v;
  if (!free_vars_.empty()) {
    v = free_vars_.back();
    free_vars_.pop_back();
  } else {
    v = &all_vars_.emplace_back(static_cast<int>(all_vars_.size() % shards_.size()));
  }
  v->Reset();
  return v;
}

void ActorEngine::FreeVar(ActorVar* v) {
  std::lock_guard<std::mutex> lock(var_mu_);
  v->error = nullptr;
  free_vars_.push_back(v);
}

void ActorEngine::PrepareOpr(Opr* o, const char* name) {
  DeduplicateVars(&o->const_vars, &o->mutable_vars, name);
  o->shard_mask = 0;
  for (const auto* list : {&o->const_vars, &o->mutable_vars}) {
    for (ActorVar* v : *list) o->shard_mask |= std::uint64_t{1} << v->shard();
  }
  o->num_shards = __builtin_popcountll(o->shard_mask);
}

OprHandle ActorEngine::NewOperator(AsyncFn fn, const std::vector<VarHandle>& const_vars,
                                   const std::vector<VarHandle>& mutable_vars, FnProperty prop, const char* name) {
  auto op = std::make_unique<Opr>();
  op->async_fn = std::move(fn);
  for (VarHandle v : const_vars) op->const_vars.push_back(static_cast<ActorVar*>(v));
  for (VarHandle v : mutable_vars) op->mutable_vars.push_back(static_cast<ActorVar*>(v));
  op->prop = prop;
  if (name != nullptr) op->name = name;
  PrepareOpr(op.get(), name);
  Opr* raw = op.get();
  std::lock_guard<std::mutex> lock(opr_mu_);
  oprs_.emplace(raw, std::move(op));
  return raw;
}

void ActorEngine::DeleteOperator(OprHandle op) {
  if (op->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    std::lock_guard<std::mutex> lock(opr_mu_);
    oprs_.erase(op);
  }
}

OprBlock* ActorEngine::AllocBlock() {
  std::lock_guard<SpinLock> lock(alloc_mu_);
  if (alloc_free_ == nullptr) alloc_free_ = recycled_.exchange(nullptr, std::memory_order_acquire);
  if (alloc_free_ != nullptr) {
    OprBlock* b = alloc_free_;
    alloc_free_ = b->free_next;
    return b;
  }
  auto owned = std::make_unique<OprBlock>();
  owned->engine = this;
  all_blocks_.push_back(std::move(owned));
  return all_blocks_.back().get();
}

void ActorEngine::PushFree(OprBlock* b) {
  OprBlock* head = recycled_.load(std::memory_order_relaxed);
  do {
    b->free_next = head;
  } while (!recycled_.compare_exchange_weak(head, b, std::memory_order_release, std::memory_order_relaxed));
}

void ActorEngine::Recycle(OprBlock* b) {
  Opr* o = b->opr;
  if (o != &b->own_opr) {
    if (o->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(opr_mu_);
      oprs_.erase(o);  // DeleteOperator was called and this was its last push
    }
  } else {
    b->own_opr.Clear();
  }
  b->opr = nullptr;
  b->next.store(nullptr, std::memory_order_relaxed);
  PushFree(b);
}

void ActorEngine::ReleaseRef(OprBlock* b) {
  if (b->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) Recycle(b);
}

Device* ActorEngine::DeviceFor(Context ctx) {
  if (ctx.dev_type == DeviceType::kCPU && ctx.dev_id >= 0 && ctx.dev_id < kFastDevices) {
    Device* d = cpu_devices_[ctx.dev_id].load(std::memory_order_acquire);
    if (d != nullptr) return d;
    d = runtime_->GetDevice(ctx);
    cpu_devices_[ctx.dev_id].store(d, std::memory_order_release);
    return d;
  }
  return runtime_->GetDevice(ctx);  // throws troupe::Error for a GPU that does not exist
}

Lane ActorEngine::LaneFor(Context ctx, FnProperty prop) {
  if (ctx.is_gpu()) {
    switch (prop) {
      case FnProperty::kCopyToGPU:
        return Lane::kCopyIn;
      case FnProperty::kCopyFromGPU:
        return Lane::kCopyOut;
      case FnProperty::kGPUPrioritized:
        return Lane::kPriority;
      default:
        return Lane::kNormal;
    }
  }
  return prop == FnProperty::kCPUPrioritized ? Lane::kPriority : Lane::kNormal;
}

void ActorEngine::Submit(OprBlock* b, Context ctx, int priority, bool profiling) {
  Opr* o = b->opr;
  try {
    b->device = o->internal_barrier ? nullptr : DeviceFor(ctx);
  } catch (...) {
    if (o != &b->own_opr) o->refs.fetch_sub(1, std::memory_order_relaxed);
    b->opr = nullptr;
    b->own_opr.Clear();
    PushFree(b);
    throw;
  }
  b->ctx = ctx;
  b->lane = LaneFor(ctx, o->prop);
  b->priority = priority;
  b->profiling = profiling || profiling_.load(std::memory_order_relaxed);
  b->completed_inline = false;
  b->callback_gen = b->callback.Arm();
  const int nvars = static_cast<int>(o->const_vars.size() + o->mutable_vars.size());
  b->pending_grants.store(nvars, std::memory_order_relaxed);
  b->refs.store(o->num_shards + 2, std::memory_order_relaxed);
  submitted_.fetch_add(1, std::memory_order_seq_cst);
  if (nvars == 0) {
    b->device->Submit(b, b->lane);
    return;
  }
  if (o->num_shards == 1) {
    // A function the shard runs itself (a CPU kAsync function, WaitForVar's) is granted and started on the
    // pushing thread when the shard sleeps, as MXNet starts a ready kAsync function on its pusher: no wake-up
    // of the shard's actor in between.
    const bool runs_in_shard = o->internal_barrier || (o->prop == FnProperty::kAsync && !ctx.is_gpu());
    shards_[__builtin_ctzll(o->shard_mask)]->Post(EventKind::kPush, b, runs_in_shard);
    return;
  }
  // A function spanning several shards must reach them in one global order, or two such functions could
  // each hold a variable the other waits for.
  std::lock_guard<std::mutex> lock(multi_shard_push_mu_);
  for (std::uint64_t m = o->shard_mask; m != 0; m &= m - 1) {
    shards_[__builtin_ctzll(m)]->Post(EventKind::kPush, b);
  }
}

void ActorEngine::Push(OprHandle op, Context ctx, int priority, bool profiling) {
  op->refs.fetch_add(1, std::memory_order_relaxed);
  OprBlock* b = AllocBlock();
  b->opr = op;
  Submit(b, ctx, priority, profiling);
}

void ActorEngine::FillAsync(OprBlock* b, const std::vector<VarHandle>& const_vars,
                            const std::vector<VarHandle>& mutable_vars, FnProperty prop, const char* name) {
  Opr& o = b->own_opr;
  o.const_vars.assign(reinterpret_cast<ActorVar* const*>(const_vars.data()),
                      reinterpret_cast<ActorVar* const*>(const_vars.data()) + const_vars.size());
  o.mutable_vars.assign(reinterpret_cast<ActorVar* const*>(mutable_vars.data()),
                        reinterpret_cast<ActorVar* const*>(mutable_vars.data()) + mutable_vars.size());
  o.prop = prop;
  if (name != nullptr) o.name.assign(name);
  b->opr = &o;
  try {
    PrepareOpr(&o, name);
  } catch (...) {
    o.Clear();
    b->opr = nullptr;
    PushFree(b);
    throw;
  }
}

void ActorEngine::PushAsync(AsyncFn fn, Context ctx, const std::vector<VarHandle>& const_vars,
                            const std::vector<VarHandle>& mutable_vars, FnProperty prop, int priority,
                            const char* name) {
  OprBlock* b = AllocBlock();
  b->own_opr.async_fn = std::move(fn);
  FillAsync(b, const_vars, mutable_vars, prop, name);
  Submit(b, ctx, priority, false);
}

void ActorEngine::PushSync(SyncFn fn, Context ctx, const std::vector<VarHandle>& const_vars,
                           const std::vector<VarHandle>& mutable_vars, FnProperty prop, int priority,
                           const char* name) {
  OprBlock* b = AllocBlock();
  b->own_opr.sync_fn = std::move(fn);
  FillAsync(b, const_vars, mutable_vars, prop, name);
  Submit(b, ctx, priority, false);
}

void ActorEngine::DeleteVariable(SyncFn delete_fn, Context ctx, VarHandle var) {
  PushSync(std::move(delete_fn), ctx, {}, {var}, FnProperty::kDeleteVar, 0, "DeleteVariable");
}

void ActorEngine::WaitForVar(VarHandle var) {
  struct Waiter {
    std::atomic<int> done{0};
    std::exception_ptr error;
  };
  auto waiter = std::make_shared<Waiter>();
  auto* v = static_cast<ActorVar*>(var);
  OprBlock* b = AllocBlock();
  // Ordered like a write (after every earlier reader and writer), but changes no version and never skips.
  b->own_opr.sync_fn = [waiter, v](RunContext) {
    waiter->error = std::exchange(v->error, nullptr);  // rethrown once: the variable is clean again
    waiter->done.store(1, std::memory_order_release);
    waiter->done.notify_one();
  };
  b->own_opr.internal_barrier = true;
  FillAsync(b, {}, {var}, FnProperty::kNoSkip, "WaitForVar");
  Submit(b, Context::CPU(0), 0, false);
  waiter->done.wait(0, std::memory_order_acquire);
  if (waiter->error) {
    {
      std::lock_guard<std::mutex> lock(error_mu_);
      if (global_error_ == waiter->error) global_error_ = nullptr;
    }
    std::rethrow_exception(waiter->error);
  }
}

void ActorEngine::NoteFinished() {
  finished_.fetch_add(1, std::memory_order_seq_cst);
  if (all_waiters_.load(std::memory_order_seq_cst) != 0) finished_.notify_all();
}

void ActorEngine::WaitForAll() {
  all_waiters_.fetch_add(1, std::memory_order_seq_cst);
  for (;;) {
    const std::uint64_t f = finished_.load(std::memory_order_seq_cst);
    if (f == submitted_.load(std::memory_order_seq_cst)) break;
    finished_.wait(f, std::memory_order_seq_cst);
  }
  all_waiters_.fetch_sub(1, std::memory_order_seq_cst);
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    error = std::exchange(global_error_, nullptr);
  }
  if (error) std::rethrow_exception(error);
}

void ActorEngine::RecordError(const std::exception_ptr& e) {
  std::lock_guard<std::mutex> lock(error_mu_);
  if (!global_error_) global_error_ = e;
}

// Runs one block on the calling thread (a device worker, or a shard for barriers). Returns a continuation
// to run inline next, if any.
OprBlock* ActorEngine::Execute(OprBlock* b, const RunContext& rctx, const WorkerInfo* worker) {
  Opr* o = b->opr;
  std::exception_ptr poison;
  for (const auto* list : {&o->const_vars, &o->mutable_vars}) {
    for (ActorVar* v : *list) {
      if (v->error) {
        poison = v->error;
        break;
      }
    }
    if (poison) break;
  }
  if (b->profiling) b->begin_ns = ProfileTicks();

  // Off a device worker (in a shard's drain, or a foreign thread running a continuation), the completion
  // may drain a sleeping shard here: no wake-up of its actor for what it makes ready.
  const FinishDrain drain = worker != nullptr ? FinishDrain::kIfNoContinuation : FinishDrain::kYes;
  OprBlock* next = nullptr;
  if (poison && !NeverSkipped(o->prop)) {
    skipped_.fetch_add(1, std::memory_order_relaxed);
    next = Finish(b, poison, drain);
  } else if (o->sync_fn) {
    std::exception_ptr error;
    try {
      o->sync_fn(rctx);
    } catch (...) {
      error = std::current_exception();
    }
    if (rctx.ctx.is_gpu() && worker != nullptr && !error) {
      // Complete when the stream has run what fn enqueued; StreamDone finishes the block.
      worker->device->CompleteAfterStream(*worker, b);
    } else {
      next = Finish(b, error, drain);
    }
  } else {
    tl_running_block = b;
    tl_worker = worker;
    const std::uint64_t gen = b->callback_gen;
    CallbackOnComplete cb(&ActorEngine::OnCallback, b, reinterpret_cast<void*>(gen));
    try {
      o->async_fn(rctx, cb);
    } catch (...) {
      if (!b->callback.Complete(gen, std::current_exception(), false)) {
        std::fprintf(stderr, "troupe: function '%s' threw after calling its completion callback; the error is "
                             "dropped\n", o->name.c_str());
      } else {
        b->completed_inline = true;
      }
    }
    tl_running_block = nullptr;
    tl_worker = nullptr;
    if (b->completed_inline) next = Finish(b, b->callback.TakeError(), drain);
  }
  ReleaseRef(b);  // the execution's reference
  return next;
}

void ActorEngine::OnCallback(void* block, void* gen_ptr, std::exception_ptr error) {
  auto* b = static_cast<OprBlock*>(block);
  const auto gen = reinterpret_cast<std::uintptr_t>(gen_ptr);
  const bool inline_call = tl_running_block == b;
  if (!b->callback.Complete(gen, std::move(error), false)) {
    LogCallbackMisuse(nullptr);
    return;
  }
  if (inline_call) {
    b->completed_inline = true;  // Execute finishes it when fn returns, and may run the continuation inline
    return;
  }
  // A foreign thread (not one the engine joins at shutdown) finishes the block: once Finish has counted it,
  // WaitForAll may return and the engine may be destroyed, so the destructor waits for this thread to leave.
  ActorEngine* e = b->engine;
  e->foreign_finishers_.fetch_add(1, std::memory_order_seq_cst);
  // It also takes a sleeping shard's turn, as a worker does, before it runs the continuation: what the
  // completion makes ready is dispatched from here without waking the shard's actor first.
  OprBlock* next = e->Finish(b, b->callback.TakeError(), FinishDrain::kYes);
  if (next != nullptr) e->RunOrSubmitContinuation(next, nullptr, nullptr);
  e->foreign_finishers_.fetch_sub(1, std::memory_order_seq_cst);  // the last touch of the engine
}

// Records the outcome of `b`, reports completion to its shards and returns its continuation (or null).
// Holds its own reference on `b` until its last line, so `b` stays valid throughout.
OprBlock* ActorEngine::Finish(OprBlock* b, std::exception_ptr error, FinishDrain drain) {
  Opr* o = b->opr;
  if (error) {
    for (ActorVar* v : o->mutable_vars) v->error = error;
    if (!o->internal_barrier) RecordError(error);
  }
  if (!o->internal_barrier && o->prop != FnProperty::kDeleteVar) {
    for (ActorVar* v : o->mutable_vars) v->BumpVersion();
  }
  if (b->profiling) profile_.Record(o->name, b->ctx, static_cast<int>(b->lane), b->begin_ns, ProfileTicks());
  const auto raw = reinterpret_cast<std::uintptr_t>(b->next.exchange(kChainClosed, std::memory_order_acq_rel));
  auto* next = reinterpret_cast<OprBlock*>(raw & ~(kChainClosedBits | kInheritsHolds));
  // Tell the shards, unless the continuation inherited every hold (then there is nothing to release).
  if ((raw & kInheritsHolds) == 0) {
    for (std::uint64_t m = o->shard_mask; m != 0; m &= m - 1) {
      // With a continuation a worker runs it next, and the actor handles the completion meanwhile.
      const bool here = drain == FinishDrain::kYes || (drain == FinishDrain::kIfNoContinuation && next == nullptr);
      shards_[__builtin_ctzll(m)]->Post(EventKind::kComplete, b, here);
    }
  }
  NoteFinished();
  ReleaseRef(b);  // Finish's reference; `b` may be recycled from here on
  return next;
}

// Runs `next` (the continuation of a block that just finished on `worker`) inline when it belongs to the
// same lane and nothing of higher priority waits there; otherwise hands it to its device.
void ActorEngine::RunOrSubmitContinuation(OprBlock* next, const WorkerInfo* worker, const RunContext* rctx) {
  while (next != nullptr) {
    if (next->opr->internal_barrier) {
      next = Execute(next, RunContext{next->ctx, nullptr}, nullptr);
      continue;
    }
    if (worker != nullptr && rctx != nullptr && next->device == worker->device && next->lane == worker->lane &&
        next->device->TopQueuedPriority(next->lane) <= next->priority) {
      next = Execute(next, *rctx, worker);
      continue;
    }
    next->device->Submit(next, next->lane);
    return;
  }
}

std::vector<ProfileRecord> ActorEngine::TakeProfile() { return profile_.Take(); }

EngineStats ActorEngine::Stats() const {
  EngineStats s;
  s.completed = finished_.load(std::memory_order_relaxed);
  s.pushed = submitted_.load(std::memory_order_relaxed);
  s.pending = s.pushed >= s.completed ? s.pushed - s.completed : 0;
  s.skipped = skipped_.load(std::memory_order_relaxed);
  s.devices = runtime_->Stats();
  return s;
}

}  // namespace

std::unique_ptr<Engine> MakeActorEngine(const EngineConfig& config) { return std::make_unique<ActorEngine>(config); }

}  // namespace troupe::internal
