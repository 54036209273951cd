// GPU device (built into the GPU backend, libtroupe_gpu.so, and reached through GpuDeviceTable; see
// actors/src/gpu_forward.cc): one CUDA stream per lane, each driven by one worker actor, and one
// completion actor per lane that waits on CUDA events in order, so the engine learns that a function's
// kernels finished without a stream synchronise after every function.
#include <cuda_runtime.h>

#include <deque>
#include <mutex>
#include <string>

#include "base/error.h"
#include "actors/detail/devices.h"
#include "actors/detail/lane_group.h"

namespace troupe::internal {
namespace {

std::string CudaMessage(const char* what, cudaError_t e) {
  return std::string(what) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

void CheckCuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(CudaMessage(what, e));
}

// Waits for recorded events in FIFO order on its own thread and reports completion to their tasks.
class EventPoller {
 public:
  EventPoller(caf::actor_system& system, int dev_id) : dev_id_(dev_id) {
    actor_.Spawn(system, [this] { Drain(); }, /*detached=*/true);
  }
  ~EventPoller() {
    std::lock_guard<SpinLock> lock(mu_);
    for (cudaEvent_t e : free_) cudaEventDestroy(e);
  }

  // Records an event on `stream` (call on the thread that enqueued the work) and queues `task`.
  void Track(cudaStream_t stream, Task* task) {
    cudaEvent_t ev = nullptr;
    {
      std::lock_guard<SpinLock> lock(mu_);
      if (!free_.empty()) {
        ev = free_.back();
        free_.pop_back();
      }
    }
    cudaError_t err = cudaSuccess;
    if (ev == nullptr) err = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventBlockingSync);
    if (err == cudaSuccess) err = cudaEventRecord(ev, stream);
    if (err != cudaSuccess) {
      task->StreamDone(std::make_exception_ptr(Error(CudaMessage("cudaEventRecord", err))));
      return;
    }
    bool wake = false;
    {
      std::lock_guard<SpinLock> lock(mu_);
      pending_.push_back({ev, task});
      if (asleep_) {
        asleep_ = false;
        wake = true;
      }
    }
    if (wake) actor_.Wake();
  }

  const caf::actor& handle() const { return actor_.handle(); }

 private:
  struct Item {
    cudaEvent_t event;
    Task* task;
  };

  void Drain() {
    cudaSetDevice(dev_id_);
    for (;;) {
      Item item;
      {
        std::lock_guard<SpinLock> lock(mu_);
        if (pending_.empty()) {
          asleep_ = true;
          return;
        }
        item = pending_.front();
        pending_.pop_front();
      }
      cudaError_t err = cudaEventSynchronize(item.event);
      std::exception_ptr error;
      if (err != cudaSuccess) error = std::make_exception_ptr(Error(CudaMessage("CUDA stream work", err)));
      item.task->StreamDone(error);
      std::lock_guard<SpinLock> lock(mu_);
      free_.push_back(item.event);
    }
  }

  int dev_id_;
  WakeableActor actor_;
  SpinLock mu_;
  std::deque<Item> pending_;
  std::vector<cudaEvent_t> free_;
  bool asleep_ = true;
};

class GpuDevice final : public DeviceImpl {
 public:
  GpuDevice(caf::actor_system& system, Context ctx, const RuntimeConfig& config) : DeviceImpl(ctx) {
    const int dev = ctx.dev_id;
    CheckCuda(cudaSetDevice(dev), "cudaSetDevice");
    for (int i = 0; i < kNumLanes; ++i) {
      CheckCuda(cudaStreamCreateWithFlags(&streams_[i], cudaStreamNonBlocking), "cudaStreamCreate");
    }
    for (int i = 0; i < kNumLanes; ++i) {
      LaneGroup::Options o;
      o.lane = static_cast<Lane>(i);
      o.workers = 1;  // one thread per stream keeps launches in submission order
      o.spin_us = config.worker_spin_us;
      o.lazy = i != static_cast<int>(Lane::kNormal);
      o.rctx = RunContext{ctx, &streams_[i]};
      o.on_worker_wake = [dev] { cudaSetDevice(dev); };
      lanes_[i] = std::make_unique<LaneGroup>(system, this, o);
      pollers_[i] = std::make_unique<EventPoller>(system, dev);
    }
  }

  ~GpuDevice() override {
    for (cudaStream_t s : streams_) {
      if (s != nullptr) cudaStreamDestroy(s);
    }
  }

  void Submit(Task* task, Lane lane) override { Group(lane)->Submit(&task, 1); }
  void SubmitBatch(Task* const* tasks, std::size_t n, Lane lane) override { Group(lane)->Submit(tasks, n); }
  int TopQueuedPriority(Lane lane) const override { return Group(lane)->TopPriority(); }
  void CompleteAfterStream(const WorkerInfo& worker, Task* task) override {
    const int i = static_cast<int>(worker.lane);
    pollers_[i]->Track(streams_[i], task);
  }

  DeviceStats Stats() const override {
    DeviceStats s;
    s.ctx = ctx();
    s.workers = kNumLanes;
    for (int i = 0; i < kNumLanes; ++i) s.lanes[i] = lanes_[i]->Stats();
    return s;
  }

  void CollectActors(std::vector<caf::actor>* out) const override {
    for (const auto& l : lanes_) l->CollectActors(out);
    for (const auto& p : pollers_) out->push_back(p->handle());
  }

 private:
  LaneGroup* Group(Lane lane) const { return lanes_[static_cast<int>(lane)].get(); }

  cudaStream_t streams_[kNumLanes] = {};
  std::unique_ptr<LaneGroup> lanes_[kNumLanes];
  std::unique_ptr<EventPoller> pollers_[kNumLanes];
};

int CudaDeviceCountImpl() {
  int n = 0;
  // No GPU makes this return an error (cudaErrorNoDevice, 35, or the driver stub's): treat any error as 0.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state
    return 0;
  }
  return n;
}

std::unique_ptr<DeviceImpl> MakeGpuDeviceImpl(caf::actor_system& system, Context ctx, const RuntimeConfig& config) {
  const int n = CudaDeviceCountImpl();
  if (ctx.dev_id < 0 || ctx.dev_id >= n) {
    throw Error("no CUDA device " + ctx.ToString() + ": this process sees " + std::to_string(n) +
                " GPU(s); use a CPU context (cpu:0) or a gpu id below the count");
  }
  return std::make_unique<GpuDevice>(system, ctx, config);
}

const GpuDeviceTable kTable{&CudaDeviceCountImpl, &MakeGpuDeviceImpl};

}  // namespace
}  // namespace troupe::internal

// The actors module's entry into the GPU backend (kGpuDeviceTableSymbol).
extern "C" __attribute__((visibility("default"))) const troupe::internal::GpuDeviceTable* troupe_gpu_device_table() {
  return &troupe::internal::kTable;
}
