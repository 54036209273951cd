#include "actors/detail/lane_group.h"

#include <algorithm>
#include <chrono>

#include "base/thread_id.h"

namespace troupe::internal {

LaneGroup::LaneGroup(caf::actor_system& system, Device* device, Options options)
    : system_(system), device_(device), options_(std::move(options)) {
  workers_.reserve(options_.workers);
  for (int i = 0; i < options_.workers; ++i) {
    auto w = std::make_unique<Worker>();
    w->info = WorkerInfo{device_, options_.lane, i, 0};
    workers_.push_back(std::move(w));
  }
  // Every worker starts asleep; Submit wakes them.
  for (int i = options_.workers - 1; i >= 0; --i) sleepers_.push_back(i);
  if (!options_.lazy) std::call_once(started_, [this] { StartWorkers(); });
}

LaneGroup::~LaneGroup() { std::lock_guard<SpinLock> lock(mu_); }

void LaneGroup::StartWorkers() {
  for (auto& w : workers_) {
    Worker* raw = w.get();
    raw->actor.Spawn(system_, [this, raw] { Drain(raw); }, options_.detached);
  }
}

void LaneGroup::Submit(Task* const* tasks, std::size_t n) {
  if (n == 0) return;
  if (options_.lazy) std::call_once(started_, [this] { StartWorkers(); });
  int to_wake[8];
  int n_wake = 0;
  {
    std::lock_guard<SpinLock> lock(mu_);
    for (std::size_t i = 0; i < n; ++i) {
      tasks[i]->seq = next_seq_++;
      ready_.Push(tasks[i]);
    }
    queued_.store(ready_.size(), std::memory_order_relaxed);
    top_priority_.store(ready_.TopPriority(), std::memory_order_relaxed);
    // Wake as many sleepers as there are tasks that spinning workers will not pick up.
    std::size_t uncovered = ready_.size();
    int spinning = spinning_.load(std::memory_order_relaxed);
    uncovered = uncovered > static_cast<std::size_t>(spinning) ? uncovered - spinning : 0;
    while (uncovered > 0 && !sleepers_.empty() && n_wake < 8) {
      to_wake[n_wake++] = sleepers_.back();
      sleepers_.pop_back();
      --uncovered;
    }
  }
  for (int i = 0; i < n_wake; ++i) workers_[to_wake[i]]->actor.Wake();
}

void LaneGroup::ReadyQueue::Push(Task* t) {
  std::size_t i = 0;
  while (i < levels_.size() && levels_[i].priority > t->priority) ++i;
  if (i == levels_.size() || levels_[i].priority != t->priority) {
    if (levels_.size() >= kKeptLevels) {  // drop an empty level first, so that levels_ stays short
      for (std::size_t e = 0; e < levels_.size(); ++e) {
        if (levels_[e].fifo.empty()) {
          levels_.erase(levels_.begin() + static_cast<std::ptrdiff_t>(e));
          if (e < i) --i;
          break;
        }
      }
    }
    levels_.insert(levels_.begin() + static_cast<std::ptrdiff_t>(i), Level{t->priority, {}});
  }
  levels_[i].fifo.push_back(t);
  ++size_;
}

Task* LaneGroup::ReadyQueue::Pop() {
  for (Level& level : levels_) {
    if (!level.fifo.empty()) {
      Task* t = level.fifo.front();
      level.fifo.pop_front();
      --size_;
      return t;
    }
  }
  return nullptr;
}

int LaneGroup::ReadyQueue::TopPriority() const {
  for (const Level& level : levels_) {
    if (!level.fifo.empty()) return level.priority;
  }
  return INT_MIN;
}

Task* LaneGroup::Pop() {
  std::lock_guard<SpinLock> lock(mu_);
  if (ready_.empty()) return nullptr;
  Task* t = ready_.Pop();
  queued_.store(ready_.size(), std::memory_order_relaxed);
  top_priority_.store(ready_.TopPriority(), std::memory_order_relaxed);
  running_.fetch_add(1, std::memory_order_relaxed);
  return t;
}

bool LaneGroup::SpinForWork() {
  if (options_.spin_us <= 0) return false;
  spinning_.fetch_add(1, std::memory_order_seq_cst);
  const bool found = SpinUntil(options_.spin_us, [this] { return queued_.load(std::memory_order_relaxed) > 0; });
  spinning_.fetch_sub(1, std::memory_order_seq_cst);
  return found;
}

bool LaneGroup::Sleep(int index) {
  std::lock_guard<SpinLock> lock(mu_);
  if (!ready_.empty()) return false;
  sleepers_.push_back(index);
  return true;
}

void LaneGroup::Drain(Worker* w) {
  if (w->info.thread_id == 0) w->info.thread_id = CurrentThreadId();
  if (options_.on_worker_wake) options_.on_worker_wake();
  for (;;) {
    if (Task* t = Pop()) {
      t->Run(options_.rctx, w->info);  // Task::Run never throws: the engine catches user errors
      running_.fetch_sub(1, std::memory_order_relaxed);
      executed_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (SpinForWork()) continue;
    if (Sleep(w->info.index)) return;
  }
}

LaneStats LaneGroup::Stats() const {
  LaneStats s;
  s.queued = queued_.load(std::memory_order_relaxed);
  s.running = running_.load(std::memory_order_relaxed);
  s.executed = executed_.load(std::memory_order_relaxed);
  return s;
}

void LaneGroup::CollectActors(std::vector<caf::actor>* out) const {
  for (const auto& w : workers_) {
    if (w->actor.spawned()) out->push_back(w->actor.handle());
  }
}

}  // namespace troupe::internal
