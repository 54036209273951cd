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
      (tasks[i]->in_order && options_.workers > 1 ? in_order_ : ready_).Push(tasks[i]);
    }
    Published();
    // Wake as many sleepers as there are tasks that spinning workers will not pick up.
    std::size_t uncovered = Available();
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

std::size_t LaneGroup::Available() const { return ready_.size() + (in_order_held_ ? 0 : in_order_.size()); }

void LaneGroup::Published() {
  queued_.store(ready_.size() + in_order_.size(), std::memory_order_relaxed);
  available_.store(Available(), std::memory_order_relaxed);
  int top = ready_.TopPriority();
  if (!in_order_.empty()) top = std::max(top, in_order_.TopPriority());
  top_priority_.store(top, std::memory_order_relaxed);
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

Task* LaneGroup::ReadyQueue::Top() const {
  for (const Level& level : levels_) {
    if (!level.fifo.empty()) return level.fifo.front();
  }
  return nullptr;
}

Task* LaneGroup::Pop(Worker* w, int* wake) {
  *wake = -1;
  std::lock_guard<SpinLock> lock(mu_);
  if (w->holds_in_order) {  // its in-order task has finished: the next one may start
    w->holds_in_order = false;
    in_order_held_ = false;
  }
  bool take_in_order = false;
  if (!in_order_held_ && !in_order_.empty()) {
    const Task* a = in_order_.Top();
    const Task* b = ready_.empty() ? nullptr : ready_.Top();
    take_in_order = b == nullptr || a->priority > b->priority || (a->priority == b->priority && a->seq < b->seq);
  }
  Task* t = nullptr;
  if (take_in_order) {
    t = in_order_.Pop();
    in_order_held_ = true;
    w->holds_in_order = true;
  } else if (!ready_.empty()) {
    t = ready_.Pop();
  }
  Published();
  if (t == nullptr) return nullptr;
  running_.fetch_add(1, std::memory_order_relaxed);
  // Tasks this worker could not take while it held the in-order queue may be left for a sleeper now.
  if (!sleepers_.empty() && Available() > static_cast<std::size_t>(spinning_.load(std::memory_order_relaxed))) {
    *wake = sleepers_.back();
    sleepers_.pop_back();
  }
  return t;
}

bool LaneGroup::SpinForWork() {
  if (options_.spin_us <= 0) return false;
  spinning_.fetch_add(1, std::memory_order_seq_cst);
  const bool found = SpinUntil(options_.spin_us, [this] { return available_.load(std::memory_order_relaxed) > 0; });
  spinning_.fetch_sub(1, std::memory_order_seq_cst);
  return found;
}

bool LaneGroup::Sleep(int index) {
  std::lock_guard<SpinLock> lock(mu_);
  if (Available() != 0) return false;
  sleepers_.push_back(index);
  return true;
}

void LaneGroup::Drain(Worker* w) {
  if (w->info.thread_id == 0) w->info.thread_id = CurrentThreadId();
  if (options_.on_worker_wake) options_.on_worker_wake();
  for (;;) {
    int wake = -1;
    if (Task* t = Pop(w, &wake)) {
      if (wake >= 0) workers_[wake]->actor.Wake();
      const bool in_order = t->in_order;  // read before Run: t may be recycled by then
      t->Run(options_.rctx, w->info);  // Task::Run never throws: the engine catches user errors
      // Only this thread writes its counts: a load and a store, no read-modify-write.
      w->executed.store(w->executed.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      if (in_order) {
        w->executed_in_order.store(w->executed_in_order.load(std::memory_order_relaxed) + 1,
                                   std::memory_order_relaxed);
      }
      running_.fetch_sub(1, std::memory_order_release);  // after the counts: running 0 means they are final
      continue;
    }
    if (SpinForWork()) continue;
    if (Sleep(w->info.index)) return;
  }
}

LaneStats LaneGroup::Stats() const {
  LaneStats s;
  s.queued = queued_.load(std::memory_order_relaxed);
  s.running = running_.load(std::memory_order_acquire);  // first: with 0, the counts below are final
  for (const auto& w : workers_) {
    s.executed += w->executed.load(std::memory_order_relaxed);
    s.executed_in_order += w->executed_in_order.load(std::memory_order_relaxed);
  }
  return s;
}

void LaneGroup::CollectActors(std::vector<caf::actor>* out) const {
  for (const auto& w : workers_) {
    if (w->actor.spawned()) out->push_back(w->actor.handle());
  }
}

}  // namespace troupe::internal
