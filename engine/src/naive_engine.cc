// The naive engine: runs every function on the pushing thread, at once, in push order. It is the
// reference the actor engine is checked against and a debugging aid (TROUPE_ENGINE=naive). Pushes from
// several threads are serialised by one lock, so the rule holds trivially; a function that pushes from
// inside its body runs the inner function inline (the lock is recursive).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "base/thread_id.h"
#include "actors/runtime.h"
#include "engine/internal/engines.h"
#include "engine/internal/profile_clock.h"
#include "engine/profiler.h"

namespace troupe::internal {
namespace {

class NaiveVar final : public Var {
 public:
  void BumpVersion() { version_.fetch_add(1, std::memory_order_release); }
  using Var::CountPushedWrite;
  std::exception_ptr error;  // guarded by the engine's lock
  bool scratch = false;      // Engine::VarKind::kScratch: never poisoned
};

}  // namespace
}  // namespace troupe::internal

namespace troupe {
// Opr is opaque in the public header; each engine defines what it holds. The naive engine's one:
class Opr {
 public:
  AsyncFn fn;
  std::vector<internal::NaiveVar*> const_vars;
  std::vector<internal::NaiveVar*> mutable_vars;
  FnProperty prop = FnProperty::kNormal;
  std::string name;
};
}  // namespace troupe

namespace troupe::internal {
namespace {


class NaiveEngine final : public Engine {
 public:
  explicit NaiveEngine(const EngineConfig&) {}
  ~NaiveEngine() override {
    DestroyExtensions();
    Profiler::Get().Detach(this);
  }

  EngineType type() const override { return EngineType::kNaive; }

  VarHandle NewVariable(VarKind kind = VarKind::kValue) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    vars_.emplace_back(std::make_unique<NaiveVar>());
    vars_.back()->scratch = kind == VarKind::kScratch;
    return vars_.back().get();
  }

  OprHandle NewOperator(AsyncFn fn, const std::vector<VarHandle>& const_vars,
                        const std::vector<VarHandle>& mutable_vars, FnProperty prop, const char* name) override {
    auto op = std::make_unique<Opr>();
    op->fn = std::move(fn);
    op->const_vars = Cast(const_vars);
    op->mutable_vars = Cast(mutable_vars);
    op->prop = prop;
    op->name = name ? name : "";
    DeduplicateVars(&op->const_vars, &op->mutable_vars, name);
    std::lock_guard<std::recursive_mutex> lock(mu_);
    Opr* raw = op.get();
    oprs_.emplace(raw, std::move(op));
    return raw;
  }

  void DeleteOperator(OprHandle op) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    oprs_.erase(op);  // every push of it has already run
  }

  void Push(OprHandle op, Context ctx, int, bool profiling) override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    Run(*op, ctx, profiling);
  }

  void PushAsync(AsyncFn fn, Context ctx, const std::vector<VarHandle>& const_vars,
                 const std::vector<VarHandle>& mutable_vars, FnProperty prop, int, const char* name) override {
    Opr op;
    op.fn = std::move(fn);
    op.const_vars = Cast(const_vars);
    op.mutable_vars = Cast(mutable_vars);
    op.prop = prop;
    if (name != nullptr) op.name = name;
    DeduplicateVars(&op.const_vars, &op.mutable_vars, name);
    std::lock_guard<std::recursive_mutex> lock(mu_);
    Run(op, ctx, false);
  }

  void PushSync(SyncFn fn, Context ctx, const std::vector<VarHandle>& const_vars,
                const std::vector<VarHandle>& mutable_vars, FnProperty prop, int priority, const char* name) override {
    PushAsync(
        [f = std::move(fn)](RunContext rctx, CallbackOnComplete cb) {
          f(rctx);
          cb();
        },
        ctx, const_vars, mutable_vars, prop, priority, name);
  }

  void DeleteVariable(SyncFn delete_fn, Context ctx, VarHandle var) override {
    PushSync(std::move(delete_fn), ctx, {}, {var}, FnProperty::kDeleteVar, 0, "DeleteVariable");
    std::lock_guard<std::recursive_mutex> lock(mu_);
    for (auto it = vars_.begin(); it != vars_.end(); ++it) {
      if (it->get() == var) {
        vars_.erase(it);
        break;
      }
    }
  }

  void WaitForVar(VarHandle var) override {
    std::exception_ptr error;
    {
      std::lock_guard<std::recursive_mutex> lock(mu_);
      auto* v = static_cast<NaiveVar*>(var);
      error = std::exchange(v->error, nullptr);
      if (error && error == global_error_) global_error_ = nullptr;
    }
    if (error) std::rethrow_exception(error);
  }

  void WaitForAll() override {
    std::exception_ptr error;
    {
      std::lock_guard<std::recursive_mutex> lock(mu_);
      error = std::exchange(global_error_, nullptr);
    }
    if (error) std::rethrow_exception(error);
  }

  void SetProfiling(bool on) override { profiling_.store(on, std::memory_order_relaxed); }
  std::vector<ProfileRecord> TakeProfile() override {
    std::vector<ProfileRecord> out;
    {
      std::lock_guard<std::recursive_mutex> lock(mu_);
      out = std::exchange(profile_, {});
    }
    ProfileTicksToNs(&out);  // the records hold ProfileTicks
    return out;
  }
  EngineStats Stats() const override {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    return stats_;
  }

 private:
  static std::vector<NaiveVar*> Cast(const std::vector<VarHandle>& vs) {
    std::vector<NaiveVar*> out;
    out.reserve(vs.size());
    for (VarHandle v : vs) out.push_back(static_cast<NaiveVar*>(v));
    return out;
  }

  // Runs `op` now; called with mu_ held.
  void Run(const Opr& op, Context ctx, bool profiling) {
    if (ctx.is_gpu() && Runtime::GpuCount() <= ctx.dev_id) {
      throw Error("cannot push '" + op.name + "' to " + ctx.ToString() + ": no such CUDA device");
    }
    ++stats_.pushed;
    for (NaiveVar* v : op.mutable_vars) v->CountPushedWrite();
    std::exception_ptr poison;
    for (const auto* list : {&op.const_vars, &op.mutable_vars}) {
      for (NaiveVar* v : *list) {
        if (v->error && !poison) poison = v->error;
      }
    }
    std::exception_ptr error;
    const bool record = profiling || profiling_.load(std::memory_order_relaxed);
    const std::int64_t begin = record ? ProfileTicks() : 0;
    if (poison && !NeverSkipped(op.prop)) {
      error = poison;
      ++stats_.skipped;
    } else {
      // The default stream (a null cudaStream_t) on GPU: the naive engine does not own streams.
      static void* const kDefaultStream = nullptr;
      RunContext rctx{ctx, ctx.is_gpu() ? const_cast<void**>(&kDefaultStream) : nullptr};
      CallbackSlot* slot = AcquireSlot();
      const std::uint64_t gen = slot->Arm();
      CallbackOnComplete cb(&NaiveEngine::OnComplete, slot, reinterpret_cast<void*>(gen));
      try {
        op.fn(rctx, cb);
      } catch (...) {
        if (!slot->Complete(gen, std::current_exception(), true)) LogCallbackMisuse(op.name.c_str());
      }
      // An async function may complete from another thread: the naive engine waits for it.
      slot->Wait(gen);
      error = slot->TakeError();
      free_slots_.push_back(slot);
    }
    if (record) profile_.push_back(ProfileRecord{op.name, ctx, 0, CurrentThreadId(), begin, ProfileTicks()});
    if (error) {
      for (NaiveVar* v : op.mutable_vars) {
        if (!v->scratch) v->error = error;
      }
      if (!global_error_) global_error_ = error;
    }
    for (NaiveVar* v : op.mutable_vars) v->BumpVersion();
    ++stats_.completed;
  }

  static void OnComplete(void* slot, void* gen, std::exception_ptr error) {
    if (!static_cast<CallbackSlot*>(slot)->Complete(reinterpret_cast<std::uintptr_t>(gen), std::move(error), true)) {
      LogCallbackMisuse(nullptr);
    }
  }

  // Called with mu_ held. Slots live as long as the engine (see CallbackSlot).
  CallbackSlot* AcquireSlot() {
    if (free_slots_.empty()) {
      slots_.emplace_back();
      return &slots_.back();
    }
    CallbackSlot* s = free_slots_.back();
    free_slots_.pop_back();
    return s;
  }

  std::deque<CallbackSlot> slots_;
  std::vector<CallbackSlot*> free_slots_;
  mutable std::recursive_mutex mu_;
  std::deque<std::unique_ptr<NaiveVar>> vars_;
  std::unordered_map<Opr*, std::unique_ptr<Opr>> oprs_;
  std::exception_ptr global_error_;
  std::atomic<bool> profiling_{false};
  std::vector<ProfileRecord> profile_;
  EngineStats stats_;
};

}  // namespace

std::unique_ptr<Engine> MakeNaiveEngine(const EngineConfig& config) { return std::make_unique<NaiveEngine>(config); }

}  // namespace troupe::internal
