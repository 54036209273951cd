// The actor engine's units of work and of dependency (MXNet's OprBlock, ThreadedVar and ThreadedOpr):
//  - ActorVar: a variable; its VarQueue is owned by one dependency shard.
//  - Opr: a function with its (deduplicated, sorted) variables; pushed any number of times.
//  - OprBlock: one push of an Opr, as the shards queue it and the devices run it. Pooled (BlockPool).
//
// Invariants:
//  1. A variable belongs to one shard for the life of its object (pooled objects keep it), so a late
//     completion for a deleted incarnation never reaches another shard's queues.
//  2. ActorVar::queue is touched only by the holder of its shard's turn (Shard). ActorVar::error is touched
//     only by a thread running a function that holds the variable; the dependency rule orders those threads.
//  3. OprBlock::next holds the continuation (chained by a shard), tagged kInheritsHolds when the
//     continuation took over every hold of the block (its completion is then never posted to the shards), or
//     kChainClosed once the block finished (nothing can be chained behind it any more).
//  4. OprBlock::refs: one per shard that processes the completion (for a block in lane groups: that keeps it
//     while it is a group's last member), one for Execute, one for Finish, and one per kLaneDone event in
//     flight; the block returns to the pool when the last goes (BlockPool never frees it while the engine lives, so a
//     stale callback is detected through CallbackSlot).
//
// Thread-safety: as stated per field.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "actors/device.h"
#include "engine/engine.h"
#include "engine/internal/engines.h"
#include "engine/internal/var_queue.h"

namespace troupe::internal {

class ActorEngine;
struct OprBlock;

class ActorVar final : public Var {
 public:
  explicit ActorVar(int shard) : shard_(shard) {}
  void BumpVersion() { version_.fetch_add(1, std::memory_order_acq_rel); }
  using Var::CountPushedWrite;
  void Reset() {
    version_.store(0, std::memory_order_relaxed);
    pushed_.store(0, std::memory_order_relaxed);
    id_ = NextId();
    error = nullptr;
    queue.Reset();
  }
  int shard() const { return shard_; }

  std::exception_ptr error;  // invariant 2
  bool scratch = false;      // Engine::VarKind::kScratch: never poisoned; set before the variable is handed out

  // On its own cache line: the dependency shard writes it for every function, while workers read `error`
  // and bump the version (above) — sharing one line made every grant a cache miss for both.
  alignas(64) VarQueue<OprBlock> queue;  // invariant 2

 private:
  const int shard_;  // invariant 1
};

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

constexpr std::uintptr_t kChainClosedBits = 1;
constexpr std::uintptr_t kInheritsHolds = 2;
inline OprBlock* const kChainClosed = reinterpret_cast<OprBlock*>(kChainClosedBits);
inline OprBlock* Tag(OprBlock* b, std::uintptr_t bits) {
  return reinterpret_cast<OprBlock*>(reinterpret_cast<std::uintptr_t>(b) | bits);
}

// Whether a function runs on the thread that makes it ready (the pusher draining a sleeping shard, the shard
// granting it, the thread completing the function it was chained behind) rather than on a worker of its
// lane: WaitForVar's function only hands over an error and wakes one thread, and a CPU kAsync function only
// starts work that completes through its callback (FnProperty). A hop to a worker would buy nothing.
inline bool RunsWhereReady(const Opr& o, const Context& ctx) {
  return o.internal_barrier || (o.prop == FnProperty::kAsync && !ctx.is_gpu());
}

struct OprBlock final : Task {
  ActorEngine* engine = nullptr;
  Opr* opr = nullptr;  // &own_opr for PushAsync/PushSync, a user's operator for Push
  Opr own_opr;
  Context ctx;
  Lane lane = Lane::kNormal;
  Device* device = nullptr;
  bool profiling = false;
  std::int64_t begin_ns = 0;
  // Set by the pusher: the identity of the in-order executor this block runs on (its device's CPU lane when
  // that lane has one worker, or orders its short functions: Task::in_order is then set too), or null when
  // the block may not be ordered by its lane (a lane of several workers running long functions, a GPU, a
  // function that completes later through a callback, one spanning several shards).
  const void* in_order_lane = nullptr;
  // Set by the shard that dispatched the block to in_order_lane and moved it into its variables' lane groups
  // (VarQueue::NoteInOrder), before the block reaches the lane; read by the worker that finishes it. Such a
  // block posts no completion: its shard learns it has run from lane_done.
  bool in_order_counted = false;
  // Variables whose lane group has this block as its last member (VarQueue::lane_last): the shard keeps its
  // reference on the block until none is left. Owned by the shard's turn holder.
  int lane_pins = 0;
  // A block in lane groups: set by its worker once the block has finished; lane_notify, set by the shard when
  // a request waits for a group this block ends, asks the worker to post a kLaneDone event then. Both
  // seq_cst: the worker stores lane_done and reads lane_notify, the shard stores lane_notify and reads
  // lane_done, so at least one of them sees the other.
  std::atomic<bool> lane_done{false};
  std::atomic<bool> lane_notify{false};
  // Set by the shard when it granted a variable to the block by the in-order rule (VarQueue::GrantOrdered):
  // the block must then reach its lane behind those holders, so it may no longer become a continuation.
  // Owned by the shard's turn holder.
  bool ordered_grant = false;
  std::uint64_t check_id = 0;  // OrderCheck's name for this push (when the check is on)

  std::atomic<int> pending_grants{0};    // variables not yet granted
  std::atomic<OprBlock*> next{nullptr};  // invariant 3
  std::atomic<int> refs{0};              // invariant 4
  OprBlock* free_next = nullptr;         // link in the block pool's free lists
  CallbackSlot callback;
  std::uint64_t callback_gen = 0;
  bool completed_inline = false;  // the callback was called on the running worker, inside fn

  void Run(const RunContext& rctx, const WorkerInfo& worker) override;
  void StreamDone(std::exception_ptr error) override;
};

inline bool HoldsForWrite(const Opr* o, const ActorVar* v) {
  return std::binary_search(o->mutable_vars.begin(), o->mutable_vars.end(), v);
}

}  // namespace troupe::internal
