// Devices: where functions run. One device per Context, each made of lanes of worker actors.
//
// A CPU device has a normal lane (RuntimeConfig::cpu_workers workers sharing one ready queue) and a
// priority lane (kCPUPrioritized). A GPU device (built with CUDA) has a compute lane, two copy lanes and a
// priority lane, one CUDA stream each. Every worker is a CAF actor running on its own thread (never on a
// CAF scheduler thread), so blocking work never stalls the actor system.
//
// Thread-safety: Submit/SubmitBatch/Stats may be called from any thread. Task::Run is called on a worker
// thread, exactly once per submission. Within a lane, a ready task with a higher priority runs first;
// equal priorities run in submission order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "base/context.h"

namespace troupe {

enum class Lane : std::uint8_t { kNormal = 0, kPriority = 1, kCopyIn = 2, kCopyOut = 3 };
inline constexpr int kNumLanes = 4;
const char* LaneName(Lane lane);

class Device;

// Identifies the worker a task runs on.
struct WorkerInfo {
  Device* device = nullptr;
  Lane lane = Lane::kNormal;
  int index = 0;     // worker index within the lane
  int thread_id = 0; // process-unique small id of the worker thread (for profiles)
};

// A unit of work handed to a device. Owned by the submitter; must outlive its Run (and StreamDone).
class Task {
 public:
  // Runs the work on a worker of the lane it was submitted to.
  virtual void Run(const RunContext& rctx, const WorkerInfo& worker) = 0;
  // GPU only: called (from the device's completion thread) once everything that Run enqueued on the
  // stream has finished, when Run asked for it with Device::CompleteAfterStream.
  virtual void StreamDone(std::exception_ptr error) { (void)error; }

  int priority = 0;
  // Set by the submitter: the task runs after every in-order task submitted to the same lane before it at
  // the same priority has finished, one in-order task at a time (a lane with one worker runs every task so).
  // Other tasks of a lane with several workers run beside them. (Beside `priority`, in what was padding: the
  // engine's blocks keep their layout.)
  bool in_order = false;
  std::uint64_t seq = 0;  // assigned by the device: FIFO order among equal priorities

 protected:
  ~Task() = default;
};

struct LaneStats {
  std::size_t queued = 0;   // ready, waiting for a worker
  std::size_t running = 0;  // being run by a worker now
  std::uint64_t executed = 0;
  std::uint64_t executed_in_order = 0;  // of those, in-order tasks run one at a time (Task::in_order)
};

struct DeviceStats {
  Context ctx;
  int workers = 0;
  LaneStats lanes[kNumLanes];
};

class Device {
 public:
  virtual ~Device() = default;
  Context ctx() const { return ctx_; }

  virtual void Submit(Task* task, Lane lane) = 0;
  virtual void SubmitBatch(Task* const* tasks, std::size_t n, Lane lane) = 0;
  // The highest priority among queued tasks of `lane`, or INT_MIN when none is queued. A hint: may be stale.
  virtual int TopQueuedPriority(Lane lane) const = 0;
  // GPU: arrange for task->StreamDone to be called once the work enqueued so far on the worker's stream
  // finishes (tracked with CUDA events, not a stream synchronise). CPU: calls StreamDone at once.
  virtual void CompleteAfterStream(const WorkerInfo& worker, Task* task) = 0;
  virtual DeviceStats Stats() const = 0;

 protected:
  explicit Device(Context ctx) : ctx_(ctx) {}

 private:
  Context ctx_;
};

}  // namespace troupe
