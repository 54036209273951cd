#include <climits>

#include "actors/detail/devices.h"
#include "actors/detail/lane_group.h"

namespace troupe::internal {
namespace {

// A CPU device: a normal lane with cpu_workers workers and a lazily started priority lane. Copy lanes
// map to the normal lane (a CPU has no copy engine).
class CpuDevice final : public DeviceImpl {
 public:
  CpuDevice(caf::actor_system& system, Context ctx, const RuntimeConfig& config)
      : DeviceImpl(ctx), workers_(config.cpu_workers) {
    LaneGroup::Options normal;
    normal.lane = Lane::kNormal;
    normal.workers = config.cpu_workers;
    normal.spin_us = config.worker_spin_us;
    normal.rctx = RunContext{ctx, nullptr};
    normal_ = std::make_unique<LaneGroup>(system, this, normal);
    LaneGroup::Options prio = normal;
    prio.lane = Lane::kPriority;
    prio.workers = config.cpu_priority_workers;
    prio.lazy = true;
    priority_ = std::make_unique<LaneGroup>(system, this, prio);
  }

  void Submit(Task* task, Lane lane) override { Group(lane)->Submit(&task, 1); }
  void SubmitBatch(Task* const* tasks, std::size_t n, Lane lane) override { Group(lane)->Submit(tasks, n); }
  int TopQueuedPriority(Lane lane) const override { return Group(lane)->TopPriority(); }
  void CompleteAfterStream(const WorkerInfo&, Task* task) override { task->StreamDone(nullptr); }

  DeviceStats Stats() const override {
    DeviceStats s;
    s.ctx = ctx();
    s.workers = workers_;
    s.lanes[static_cast<int>(Lane::kNormal)] = normal_->Stats();
    s.lanes[static_cast<int>(Lane::kPriority)] = priority_->Stats();
    return s;
  }

  void CollectActors(std::vector<caf::actor>* out) const override {
    normal_->CollectActors(out);
    priority_->CollectActors(out);
  }

 private:
  LaneGroup* Group(Lane lane) const { return lane == Lane::kPriority ? priority_.get() : normal_.get(); }

  int workers_;
  std::unique_ptr<LaneGroup> normal_;
  std::unique_ptr<LaneGroup> priority_;
};

}  // namespace

std::unique_ptr<DeviceImpl> MakeCpuDevice(caf::actor_system& system, Context ctx, const RuntimeConfig& config) {
  auto d = std::make_unique<CpuDevice>(system, ctx, config);
  return d;
}

}  // namespace troupe::internal
