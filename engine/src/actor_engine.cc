// The actor engine's front end: Push, Wait, Execute and Finish (engine/internal/actor_engine.h). The
// dependency shards are in dependency_shard.cc, the variable queue's rules in engine/internal/var_queue.h,
// the block pool in block_pool.cc.
#include "engine/internal/actor_engine.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <thread>

#include "actors/detail/wakeable.h"
#include "engine/internal/dependency_shard.h"
#include "engine/internal/order_check.h"
#include "engine/internal/profile_clock.h"
#include "engine/profiler.h"

namespace troupe::internal {
namespace {

// Whether one-worker CPU lanes order the blocks queued on them (VarQueue::GrantOrdered); false makes every
// conflicting block wait for its predecessors' completions (or run as a continuation), for A/B measurements.
// It was off for a while: with it on, kvstore_local_test's random workload under ThreadSanitizer pulled wrong
// values in 8 runs of 10. The cause was not the rule but what came with it: a one-worker lane's worker held
// up to 32 completions and posted them in batches (it also corrupted the heap in dist_sync training, 1 run in
// 15); that batching is gone (git history: kMaxHeldCompletions). With the rule back on, the same test passed
// 17 of 17 runs under ThreadSanitizer, and every suite passes with the dependency rule checked at run time
// (TROUPE_ENGINE_CHECK_ORDER, on in the engine, kvstore_local and ndarray_random suites).
constexpr bool kInOrderLanes = true;
// Whether CPU lanes with several workers order their short functions (ActorEngine::ordered_); false keeps
// them unordered, for A/B measurements.
constexpr bool kOrderShortFunctions = true;

thread_local OprBlock* tl_running_block = nullptr;

// The bounds of ActorEngine::ordered_, in nanoseconds. A hand-off from the dependency shard to a second
// worker and the completion back cost about 1-2 us on the 2-core machines troupe is measured on; functions
// shorter than that gain nothing from running in parallel. A worker turns ordering on once its moving
// average falls below kOrderBelowNs, and off as soon as two functions in a row on the lane ran longer than
// kUnorderAboveNs (the average then restarts from kUnorderAboveNs, not from that function's time). One long
// function alone changes nothing: on a machine with more threads than cores a worker is preempted in the
// middle of a short function every few milliseconds, and each needless stop costs far more than the
// preemption (the pusher, far ahead, pushes hundreds of functions unordered, and the ordered ones behind
// them wait in the variables' queues until it stops; random_mixed with two workers: median 346 against 284
// ns per function, faster in 12 of 14 alternating runs, bench/engine/results/README.md).
constexpr std::int64_t kOrderBelowNs = 1000;
constexpr std::int64_t kUnorderAboveNs = 4000;
// The newest function's weight in the moving average, 1/2^kRunTimeShift: the average covers the last 64 or
// so functions, so a few short functions among long ones do not turn ordering on (from the upper bound it
// takes about 90 short functions in a row).
constexpr int kRunTimeShift = 6;
// A worker thread's moving average of its synchronous functions' run time, in ticks. It starts at the upper
// bound: a lane orders nothing until its functions proved short.
thread_local std::int64_t tl_run_ticks = 0;
thread_local const void* tl_run_ticks_owner = nullptr;  // the engine whose worker this thread is

}  // namespace

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
// ActorEngine

ActorEngine::ActorEngine(const EngineConfig& config)
    : runtime_(Runtime::Create(config.runtime, config.actor_system)) {
  const RuntimeConfig& rc = runtime_->config();
  many_workers_[static_cast<int>(Lane::kNormal)] = rc.cpu_workers > 1;
  many_workers_[static_cast<int>(Lane::kPriority)] = rc.cpu_priority_workers > 1;
  static const double ns_per_tick = TickConverter().ns_per_tick();  // once per process (may wait up to 1 ms)
  order_below_ticks_ = static_cast<std::int64_t>(kOrderBelowNs / ns_per_tick);
  unorder_above_ticks_ = static_cast<std::int64_t>(kUnorderAboveNs / ns_per_tick);
  for (int i = 0; i < rc.dependency_shards; ++i) {
    shards_.push_back(std::make_unique<Shard>(this, i, rc.worker_spin_us));
    shards_.back()->Spawn(runtime_->system(), rc.detached_dependency_actors);
  }
}

ActorEngine::~ActorEngine() {
  DestroyExtensions();
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
  Profiler::Get().Detach(this);
  std::vector<caf::actor> actors;
  for (const auto& s : shards_) actors.push_back(s->handle());
  // The shards drain their inboxes (completions posted before WaitForAll returned) before they stop.
  StopAndWait(runtime_->system(), actors);
  actors.clear();
  shards_.clear();   // drop the last handles: a detached actor's thread ends when its actor is destroyed
  runtime_.reset();  // stops the device actors
  for (auto& [op, owned] : oprs_) owned.reset();
}

VarHandle ActorEngine::NewVariable(VarKind kind) {
  std::lock_guard<std::mutex> lock(var_mu_);
  ActorVar* v;
  if (!free_vars_.empty()) {
    v = free_vars_.back();
    free_vars_.pop_back();
  } else {
    v = &all_vars_.emplace_back(static_cast<int>(all_vars_.size() % shards_.size()));
  }
  v->Reset();
  v->scratch = kind == VarKind::kScratch;
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
  blocks_.Free(b);
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

// The in-order executor a block runs on, when its lane runs it one at a time in submission order with the
// lane's other in-order tasks (a CPU lane with one worker: Device, "equal priorities run in submission
// order"; a CPU lane with several workers while ordered_ says its functions are short: Task::in_order) and
// the block's function is over when it returns (a synchronous function: an asynchronous one may complete
// later, after the lane started the next task). Only single-shard blocks: their one shard dispatches them, so
// it knows the order in which they reach the lane.
const void* ActorEngine::InOrderLane(const OprBlock* b) const {
  const Opr* o = b->opr;
  if (!kInOrderLanes || b->ctx.dev_type != DeviceType::kCPU || !o->sync_fn || o->internal_barrier ||
      o->num_shards != 1 || o->prop == FnProperty::kDeleteVar || o->prop == FnProperty::kAsync) {
    return nullptr;
  }
  const int kind = static_cast<int>(b->lane);
  if (many_workers_[kind] && !(kOrderShortFunctions && ordered_[kind].load(std::memory_order_relaxed))) {
    return nullptr;
  }
  // One identity per (device, lane): an address inside the device object.
  return reinterpret_cast<const char*>(b->device) + kind;
}

void ActorEngine::NoteRunTime(Lane lane, std::int64_t ticks) {
  if (tl_run_ticks_owner != this) {  // a worker thread serves one engine; a new engine's starts afresh
    tl_run_ticks_owner = this;
    tl_run_ticks = unorder_above_ticks_;
  }
  std::atomic<bool>& ran_long = ran_long_[static_cast<int>(lane)];
  if (ticks > unorder_above_ticks_) {
    if (!ran_long.exchange(true, std::memory_order_relaxed)) return;  // maybe a preemption: wait for the next
    tl_run_ticks = unorder_above_ticks_ + 1;
  } else {
    if (ran_long.load(std::memory_order_relaxed)) ran_long.store(false, std::memory_order_relaxed);
    tl_run_ticks += (ticks - tl_run_ticks) >> kRunTimeShift;
  }
  std::atomic<bool>& ordered = ordered_[static_cast<int>(lane)];
  const bool now = ordered.load(std::memory_order_relaxed);
  if (!now && tl_run_ticks < order_below_ticks_) {
    ordered.store(true, std::memory_order_relaxed);
  } else if (now && tl_run_ticks > unorder_above_ticks_) {
    ordered.store(false, std::memory_order_relaxed);
  }
}

void ActorEngine::Submit(OprBlock* b, Context ctx, int priority, bool profiling) {
  Opr* o = b->opr;
  try {
    b->device = o->internal_barrier ? nullptr : DeviceFor(ctx);
  } catch (...) {
    if (o != &b->own_opr) o->refs.fetch_sub(1, std::memory_order_relaxed);
    b->opr = nullptr;
    b->own_opr.Clear();
    blocks_.Free(b);
    throw;
  }
  if (!o->internal_barrier) {  // WaitForVar's barrier is ordered like a write but writes nothing
    for (ActorVar* v : o->mutable_vars) v->CountPushedWrite();
  }
  b->ctx = ctx;
  b->lane = LaneFor(ctx, o->prop);
  b->priority = priority;
  b->profiling = profiling || profiling_.load(std::memory_order_relaxed);
  b->completed_inline = false;
  b->in_order_lane = InOrderLane(b);
  b->in_order = b->in_order_lane != nullptr;
  b->in_order_counted = false;
  b->lane_pins = 0;
  b->lane_done.store(false, std::memory_order_relaxed);
  b->lane_notify.store(false, std::memory_order_relaxed);
  b->ordered_grant = false;
  if (OrderCheck::enabled()) b->check_id = OrderCheck::NewId();
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
    // A function that runs where it becomes ready is granted and started on the pushing thread when the
    // shard sleeps, as MXNet starts a ready kAsync function on its pusher: no wake-up of the shard's actor.
    shards_[__builtin_ctzll(o->shard_mask)]->Post(EventKind::kPush, b, RunsWhereReady(*o, ctx));
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
  OprBlock* b = blocks_.Alloc();
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
    blocks_.Free(b);
    throw;
  }
}

void ActorEngine::PushAsync(AsyncFn fn, Context ctx, const std::vector<VarHandle>& const_vars,
                            const std::vector<VarHandle>& mutable_vars, FnProperty prop, int priority,
                            const char* name) {
  OprBlock* b = blocks_.Alloc();
  b->own_opr.async_fn = std::move(fn);
  FillAsync(b, const_vars, mutable_vars, prop, name);
  Submit(b, ctx, priority, false);
}

void ActorEngine::PushSync(SyncFn fn, Context ctx, const std::vector<VarHandle>& const_vars,
                           const std::vector<VarHandle>& mutable_vars, FnProperty prop, int priority,
                           const char* name) {
  OprBlock* b = blocks_.Alloc();
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
  OprBlock* b = blocks_.Alloc();
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
  const std::uint64_t f = finished_.fetch_add(1, std::memory_order_seq_cst) + 1;
  if (all_waiters_.load(std::memory_order_seq_cst) != 0 && f >= wait_target_.load(std::memory_order_seq_cst)) {
    finished_.notify_all();
  }
}

void ActorEngine::WaitForAll() {
  all_waiters_.fetch_add(1, std::memory_order_seq_cst);
  for (;;) {
    const std::uint64_t s = submitted_.load(std::memory_order_seq_cst);
    // Raise the target before reading finished_ (seq_cst both sides): either this thread sees the finish
    // that reaches s, or that finisher sees the target and wakes it.
    std::uint64_t t = wait_target_.load(std::memory_order_seq_cst);
    while (t < s && !wait_target_.compare_exchange_weak(t, s, std::memory_order_seq_cst)) {
    }
    const std::uint64_t f = finished_.load(std::memory_order_seq_cst);
    if (f == submitted_.load(std::memory_order_seq_cst)) break;
    if (f < s) finished_.wait(f, std::memory_order_seq_cst);
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
  if (OrderCheck::enabled()) OrderCheck::Started(b);
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
    // On a CPU lane with several workers the run time decides whether the lane orders functions.
    const bool timed = worker != nullptr && !rctx.ctx.is_gpu() && many_workers_[static_cast<int>(b->lane)];
    const std::int64_t start = timed ? ProfileTicks() : 0;
    try {
      o->sync_fn(rctx);
    } catch (...) {
      error = std::current_exception();
    }
    if (timed) NoteRunTime(b->lane, ProfileTicks() - start);
    if (rctx.ctx.is_gpu() && worker != nullptr && !error) {
      // Complete when the stream has run what fn enqueued; StreamDone finishes the block.
      worker->device->CompleteAfterStream(*worker, b);
    } else {
      next = Finish(b, error, drain);
    }
  } else {
    tl_running_block = b;
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
  if (OrderCheck::enabled()) OrderCheck::Finished(b);
  if (error) {
    for (ActorVar* v : o->mutable_vars) {
      if (!v->scratch) v->error = error;
    }
    if (!o->internal_barrier) RecordError(error);
  }
  if (!o->internal_barrier && o->prop != FnProperty::kDeleteVar) {
    for (ActorVar* v : o->mutable_vars) v->BumpVersion();
  }
  if (b->profiling) profile_.Record(o->name, b->ctx, static_cast<int>(b->lane), b->begin_ns, ProfileTicks());
  const auto raw = reinterpret_cast<std::uintptr_t>(b->next.exchange(kChainClosed, std::memory_order_acq_rel));
  auto* next = reinterpret_cast<OprBlock*>(raw & ~(kChainClosedBits | kInheritsHolds));
  // With a continuation a worker runs it next, and the actor handles the completion meanwhile.
  const bool here = drain == FinishDrain::kYes || (drain == FinishDrain::kIfNoContinuation && next == nullptr);
  if (b->in_order_counted) {
    // In lane groups (Shard invariant 4): no completion to post; the shard learns from lane_done that b has
    // run. The function's captures go now: the shard may keep the block while it ends a group.
    if (o == &b->own_opr) o->sync_fn = nullptr;
    b->lane_done.store(true, std::memory_order_seq_cst);
    if (b->lane_notify.load(std::memory_order_seq_cst)) {  // a request waits for a group b ends
      b->refs.fetch_add(1, std::memory_order_relaxed);     // the event's reference
      shards_[__builtin_ctzll(o->shard_mask)]->Post(EventKind::kLaneDone, b, here);
    }
  } else if ((raw & kInheritsHolds) == 0) {
    // Tell the shards, unless the continuation inherited every hold (then there is nothing to release).
    for (std::uint64_t m = o->shard_mask; m != 0; m &= m - 1) {
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
    // A function that runs where it becomes ready runs here: a thread finishing a network answer starts the
    // request chained behind it (the next PushPull after a Wait) itself, instead of waking a worker for it.
    if (RunsWhereReady(*next->opr, next->ctx)) {
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

std::unique_ptr<Engine> MakeActorEngine(const EngineConfig& config) { return std::make_unique<ActorEngine>(config); }

}  // namespace troupe::internal
