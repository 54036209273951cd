// The dependency engine: runs pushed functions in an order that respects their declared reads and writes.
//
// The rule (MXNet's, DESIGN.md §3): two functions that write a common variable, or where one writes and
// the other reads it, run in push order; readers between two writers may run together. Push is
// thread-safe: pushes from several threads are ordered by when their Push call returned.
//
// Errors: an exception thrown by a function (or an error passed to an async function's callback) poisons
// the variables it writes. A later function that reads or writes a poisoned variable is skipped (and
// poisons what it writes) unless its property is kNoSkip or kDeleteVar. WaitForVar rethrows the
// variable's error once and clears the poison; WaitForAll rethrows the first error since the previous
// WaitForAll (one already rethrown by WaitForVar is not thrown again). Scratch variables (VarKind::kScratch:
// temporary space, generator state) hold nothing that flows from one function to the next, so a failure
// never poisons them: a function that failed while holding the temporary space does not fail every later
// user of it. The engine never aborts the process.
//
// Thread-safety: every member function is thread-safe unless stated otherwise. Functions run on the
// engine's worker threads; a function must not call WaitForVar/WaitForAll (it would wait for itself).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "actors/config.h"
#include "base/context.h"
#include "actors/device.h"
#include "base/error.h"

namespace caf {
class actor_system;
}

namespace troupe {

// A variable: an engine token standing for a resource that functions read or write.
class Var {
 public:
  // Number of writes completed on this variable so far (reads leave it unchanged).
  std::uint64_t version() const noexcept { return version_.load(std::memory_order_acquire); }
  // Number of writes pushed on this variable so far, counted when each push is made (version() counts them as
  // they complete). Two readings on the pushing thread tell whether that thread, or one ordered before it,
  // pushed a write in between.
  std::uint64_t writes_pushed() const noexcept { return pushed_.load(std::memory_order_relaxed); }
  // Unique among every variable this process has had: an engine recycles deleted variables' memory, never
  // their ids. (id, version) names one state of one variable; operators key caches with it.
  std::uint64_t id() const noexcept { return id_; }

 protected:
  Var() : id_(NextId()) {}
  ~Var() = default;
  // A fresh id, for an engine that hands out a recycled variable.
  static std::uint64_t NextId() noexcept;
  // A counter only (it orders nothing): relaxed, one uncontended add per written variable of a push.
  void CountPushedWrite() noexcept { pushed_.fetch_add(1, std::memory_order_relaxed); }
  std::atomic<std::uint64_t> version_{0};
  std::atomic<std::uint64_t> pushed_{0};
  std::uint64_t id_;
};
using VarHandle = Var*;

class Opr;  // a pre-built operator (NewOperator); opaque
using OprHandle = Opr*;

enum class FnProperty : int {
  kNormal = 0,
  kCopyFromGPU = 1,     // a copy from GPU to CPU: runs on the GPU's copy-out lane
  kCopyToGPU = 2,       // a copy from CPU to GPU: runs on the GPU's copy-in lane
  kCPUPrioritized = 3,  // runs on the CPU device's priority lane
  kAsync = 4,           // cheap to start; completes later through its callback. On CPU the actor engine starts it
                        // in the dependency shard that grants it (no hop to a worker), as MXNet starts kAsync on
                        // the pushing thread: it must not block
  kDeleteVar = 5,       // deletes a variable (DeleteVariable); never skipped
  kGPUPrioritized = 6,  // runs on the GPU's priority lane
  kNoSkip = 7,          // runs even when a variable it touches is poisoned
};
const char* FnPropertyName(FnProperty prop);

// Handed to an AsyncFn; call it exactly once, from any thread, when the function's work is done.
// Pass an exception_ptr to report a failure (it poisons the function's written variables).
class CallbackOnComplete {
 public:
  using Fn = void (*)(void* engine, void* block, std::exception_ptr error);
  CallbackOnComplete() = default;
  CallbackOnComplete(Fn fn, void* engine, void* block) : fn_(fn), engine_(engine), block_(block) {}
  void operator()(std::exception_ptr error = nullptr) const {
    if (fn_ != nullptr) fn_(engine_, block_, std::move(error));
  }

 private:
  Fn fn_ = nullptr;
  void* engine_ = nullptr;
  void* block_ = nullptr;
};

using SyncFn = std::function<void(RunContext)>;
using AsyncFn = std::function<void(RunContext, CallbackOnComplete)>;

enum class EngineType { kActor, kNaive };
const char* EngineTypeName(EngineType type);

struct EngineConfig {
  EngineType type = EngineType::kActor;
  RuntimeConfig runtime;
  // Run inside this actor system instead of starting one (must outlive the engine). Actor engine only.
  caf::actor_system* actor_system = nullptr;

  // type from TROUPE_ENGINE=actor|naive and the runtime from TROUPE_* (RuntimeConfig::WithEnv).
  // Throws troupe::Error naming the variable on a bad value.
  static EngineConfig FromEnv();
};

// One function's execution, recorded when profiling is on.
struct ProfileRecord {
  std::string name;
  Context ctx;
  int lane = 0;       // troupe::Lane as int
  int thread_id = 0;  // small per-process id of the worker thread
  std::int64_t begin_ns = 0;  // steady clock
  std::int64_t end_ns = 0;
};

struct EngineStats {
  std::uint64_t pushed = 0;     // functions pushed (internal ones included)
  std::uint64_t completed = 0;  // functions completed (run or skipped)
  std::uint64_t skipped = 0;    // functions skipped because of a poisoned variable
  std::uint64_t pending = 0;    // pushed and not yet completed
  std::vector<DeviceStats> devices;  // per device and lane: queued, running, executed (actor engine)
};

class Engine {
 public:
  virtual ~Engine() = default;

  // The process-wide engine, created on first use from EngineConfig::FromEnv(). When the main thread has used it,
  // its pending work is finished as the main thread ends (before the process's static objects are destroyed), so
  // a program may end without waiting for its last results.
  static Engine* Get();
  // An independent engine (tests, several nodes in one process).
  static std::unique_ptr<Engine> Create(const EngineConfig& config);

  virtual EngineType type() const = 0;

  // kValue: a value that functions pass on (an array's data). kScratch: only ordered, never poisoned.
  enum class VarKind { kValue, kScratch };
  virtual VarHandle NewVariable(VarKind kind = VarKind::kValue) = 0;
  // A reusable operator: fn with its dependencies, pushed any number of times with Push. Duplicate
  // variables are merged; a variable both read and written counts as written.
  virtual OprHandle NewOperator(AsyncFn fn, const std::vector<VarHandle>& const_vars,
                                const std::vector<VarHandle>& mutable_vars,
                                FnProperty prop = FnProperty::kNormal, const char* name = nullptr) = 0;
  // Frees `op` once every push of it made so far has finished. Do not push it afterwards.
  virtual void DeleteOperator(OprHandle op) = 0;
  virtual void Push(OprHandle op, Context exec_ctx, int priority = 0, bool profiling = false) = 0;
  virtual void PushAsync(AsyncFn fn, Context exec_ctx, const std::vector<VarHandle>& const_vars,
                         const std::vector<VarHandle>& mutable_vars, FnProperty prop = FnProperty::kNormal,
                         int priority = 0, const char* name = nullptr) = 0;
  virtual void PushSync(SyncFn fn, Context exec_ctx, const std::vector<VarHandle>& const_vars,
                        const std::vector<VarHandle>& mutable_vars, FnProperty prop = FnProperty::kNormal,
                        int priority = 0, const char* name = nullptr) = 0;
  // Runs delete_fn after every function pushed earlier on `var`, then frees the variable. The handle
  // must not be used after this call.
  virtual void DeleteVariable(SyncFn delete_fn, Context exec_ctx, VarHandle var) = 0;
  // Blocks until every function pushed before on `var` (readers and writers) has finished; rethrows the
  // variable's error, once.
  virtual void WaitForVar(VarHandle var) = 0;
  // Blocks until every function pushed before has finished; rethrows the first error since the last
  // WaitForAll.
  virtual void WaitForAll() = 0;

  // Profiling: while on, every function's begin/end is recorded (Push(..., profiling=true) records one
  // operator's pushes even while off). Off costs one relaxed load per function.
  virtual void SetProfiling(bool on) = 0;
  // Returns and clears the records collected so far.
  virtual std::vector<ProfileRecord> TakeProfile() = 0;
  virtual EngineStats Stats() const = 0;

  // Services other modules build on one engine and that must live exactly as long as it (the ops
  // module's resource manager, whose variables belong to this engine). Returns the object stored under
  // `key`, creating it with `make` on first use. Extensions are destroyed, newest first, when the engine
  // is destroyed: after the work pushed so far has run and while the engine still runs functions, so an
  // extension's destructor may push (to delete its variables). Thread-safe.
  std::shared_ptr<void> GetExtension(const void* key, const std::function<std::shared_ptr<void>()>& make);

 protected:
  // Called first by every concrete engine's destructor.
  void DestroyExtensions();

 private:
  std::mutex extensions_mu_;
  std::vector<std::pair<const void*, std::shared_ptr<void>>> extensions_;
};

}  // namespace troupe
