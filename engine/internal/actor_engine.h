// ActorEngine — the actor engine's front end (MXNet's ThreadedEngine): Push, Wait, Execute and Finish.
//
// Life of a function: Push -> an OprBlock from the BlockPool -> a kPush event to its Shard(s) -> the shards
// grant each variable in push order (VarQueue), chain the block behind a predecessor, or let its in-order
// lane order it -> when all are granted the block goes to its device lane -> a worker runs it (Execute) ->
// Finish records errors and versions, posts kComplete to the shard(s), runs or submits the continuation ->
// the shards release the variables, grant waiters and recycle the block.
//
// Invariants:
//  1. submitted_ counts blocks handed to Submit, finished_ those that went through Finish; a block is
//     finished exactly once (CallbackSlot rejects a second callback), so WaitForAll may return when equal.
//  2. A function spanning several shards is posted to them under multi_shard_push_mu_, so every shard sees
//     such functions in one global order (no two can each hold a variable the other waits for).
//  3. Variable and block objects are never freed while the engine lives (pools), so late events and stale
//     callbacks never touch freed memory.
//
// Thread-safety: the Engine methods are thread-safe (engine/engine.h); Execute runs on the thread that
// runs the block, Finish on the thread that completes it.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "actors/runtime.h"
#include "engine/internal/block_pool.h"
#include "engine/internal/engines.h"
#include "engine/internal/opr_block.h"
#include "engine/internal/profile_log.h"

namespace troupe::internal {

class Shard;

class ActorEngine final : public Engine {
 public:
  explicit ActorEngine(const EngineConfig& config);
  ~ActorEngine() override;

  EngineType type() const override { return EngineType::kActor; }
  VarHandle NewVariable(VarKind kind = VarKind::kValue) override;
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
  // Runs one block on the calling thread (a device worker, or a shard for barriers). Returns a
  // continuation to run next, if any.
  OprBlock* Execute(OprBlock* b, const RunContext& rctx, const WorkerInfo* worker);
  // Whether the caller may then drain a sleeping shard itself (Shard::Post): never (a GPU stream's
  // completion), a device worker when no continuation waits for it to run next, or a foreign thread
  // completing a callback always (it handles the completion, then runs the continuation).
  enum class FinishDrain { kNo, kIfNoContinuation, kYes };
  OprBlock* Finish(OprBlock* b, std::exception_ptr error, FinishDrain drain = FinishDrain::kNo);
  void RunOrSubmitContinuation(OprBlock* next, const WorkerInfo* worker, const RunContext* rctx);
  void ReleaseRef(OprBlock* b) {
    if (b->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) Recycle(b);
  }
  void FreeVar(ActorVar* v);

 private:
  static void OnCallback(void* block, void* gen, std::exception_ptr error);
  void Recycle(OprBlock* b);
  void PrepareOpr(Opr* o, const char* name);
  Device* DeviceFor(Context ctx);
  static Lane LaneFor(Context ctx, FnProperty prop);
  const void* InOrderLane(const OprBlock* b) const;
  void Submit(OprBlock* b, Context ctx, int priority, bool profiling);
  void RecordError(const std::exception_ptr& e);
  void FillAsync(OprBlock* b, const std::vector<VarHandle>& const_vars, const std::vector<VarHandle>& mutable_vars,
                 FnProperty prop, const char* name);
  void NoteFinished();

  std::shared_ptr<Runtime> runtime_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::mutex multi_shard_push_mu_;  // invariant 2
  // Per CPU lane kind (Lane::kNormal, Lane::kPriority): whether such lanes have several workers, and whether
  // their in-order queue is in use. A lane with one worker runs its tasks in submission order, so it orders
  // every function it can (InOrderLane). A lane with several workers orders them on its in-order queue
  // (Task::in_order: one worker at a time) only while the functions its workers ran lately are short, so
  // that one worker running them back to back costs less than handing them out in parallel: each worker
  // keeps a moving average of its synchronous functions' run time (NoteRunTime), and flips ordered_ when its
  // average crosses the bounds below.
  bool many_workers_[2] = {false, false};
  alignas(64) std::atomic<bool> ordered_[2] = {false, false};
  // The lane kind's last timed function ran longer than unorder_above_ticks_: one more in a row stops the
  // ordering. Written only around long functions, so a short one's check reads a line that changes only when
  // a function runs long or ordered_ flips.
  std::atomic<bool> ran_long_[2] = {false, false};
  std::int64_t order_below_ticks_ = 0;    // start ordering once a worker's average falls below this
  std::int64_t unorder_above_ticks_ = 0;  // stop once it rises above this (or two functions in a row run longer)
  void NoteRunTime(Lane lane, std::int64_t ticks);

  BlockPool blocks_{this};

  // Variable pool (invariant 3).
  std::mutex var_mu_;
  std::deque<ActorVar> all_vars_;     // guarded by var_mu_
  std::vector<ActorVar*> free_vars_;  // guarded by var_mu_

  // User operators, freed when their last reference goes.
  std::mutex opr_mu_;
  std::unordered_map<Opr*, std::unique_ptr<Opr>> oprs_;  // guarded by opr_mu_

  // Devices by context; CPU ids < kFastDevices are looked up without a lock.
  static constexpr int kFastDevices = 64;
  std::atomic<Device*> cpu_devices_[kFastDevices] = {};

  // Quiescence counting (invariant 1): pushers bump submitted_, finishers bump finished_ (separate cache
  // lines, so a pusher and a worker do not trade one line per function); WaitForAll waits until equal.
  // wait_target_ is the largest submitted_ a WaitForAll has seen: no waiter can return before finished_
  // reaches it, so finishers wake the waiters only from there on (not once per function: each wake-up is a
  // futex call, and the waiter's spin and sleep again).
  alignas(64) std::atomic<std::uint64_t> submitted_{0};
  alignas(64) std::atomic<std::uint64_t> finished_{0};
  alignas(64) std::atomic<int> all_waiters_{0};
  std::atomic<std::uint64_t> wait_target_{0};
  std::atomic<int> foreign_finishers_{0};  // callbacks finishing blocks on threads the engine does not own
  std::atomic<std::uint64_t> skipped_{0};
  std::mutex error_mu_;
  std::exception_ptr global_error_;  // guarded by error_mu_
  std::atomic<bool> profiling_{false};
  ProfileLog profile_;  // the functions run while profiling
};

}  // namespace troupe::internal
