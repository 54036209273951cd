// LaneGroup — the workers of one lane of a device and the ready queue they share.
//
// Ready tasks wait in one FIFO per priority (higher priority first, submission order within one). Each
// worker is a detached CAF actor (its own thread). An idle worker polls the queue for
// RuntimeConfig::worker_spin_us, then records itself as asleep and returns to its mailbox; Submit wakes
// sleepers with one message each, and only as many as there are tasks not already covered by spinning
// workers.
//
// In a lane with several workers, in-order tasks (Task::in_order) wait in a second such queue that one
// worker at a time drains: the worker that pops one holds that queue until it pops again, so they run one
// after the other in submission order (per priority), while the other workers run the rest. Between the two
// queues a worker takes the higher priority, then the earlier submission. A lane with one worker keeps one
// queue: it runs every task in order anyway.
//
// Thread-safety: Submit, TopPriority and Stats are thread-safe. Workers are started lazily on first Submit
// when `lazy` is set (the CPU priority lane), so idle lanes cost no threads.
#pragma once

#include <atomic>
#include <climits>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "actors/device.h"
#include "base/spinlock.h"
#include "actors/detail/wakeable.h"

namespace troupe::internal {

class LaneGroup {
 public:
  struct Options {
    Lane lane = Lane::kNormal;
    int workers = 1;
    int spin_us = 0;
    bool lazy = false;
    bool detached = true;
    RunContext rctx;                        // handed to every task of this lane
    std::function<void()> on_worker_wake;   // e.g. cudaSetDevice on the worker's thread
  };

  LaneGroup(caf::actor_system& system, Device* device, Options options);
  // Call only after the workers have stopped (StopAndWait). Takes the queue lock once: every worker's last
  // drain ended under it, so what the workers did happens-before the owner frees anything they touched —
  // in troupe's own (sanitizer-visible) code rather than only through CAF's actor termination.
  ~LaneGroup();
  LaneGroup(const LaneGroup&) = delete;
  LaneGroup& operator=(const LaneGroup&) = delete;

  void Submit(Task* const* tasks, std::size_t n);
  int TopPriority() const { return top_priority_.load(std::memory_order_relaxed); }
  LaneStats Stats() const;
  // Appends the worker actors to `out` (for StopAndWait).
  void CollectActors(std::vector<caf::actor>* out) const;

 private:
  struct Worker {
    WakeableActor actor;
    WorkerInfo info;
    bool holds_in_order = false;  // ran the last in-order task popped (guarded by mu_)
    std::atomic<std::uint64_t> executed{0};           // written by this worker only
    std::atomic<std::uint64_t> executed_in_order{0};  // written by this worker only
  };

  void StartWorkers();  // under start_mu_
  void Drain(Worker* w);
  // The next task for `w` (null: none available), after w gives back the in-order queue if it held it.
  // Sets *wake to a sleeper to wake, or -1.
  Task* Pop(Worker* w, int* wake);
  std::size_t Available() const;  // tasks a worker may pop now; under mu_
  void Published();               // queued_, available_ and top_priority_ from the queues; under mu_
  bool SpinForWork();
  bool Sleep(int index);
  // The ready tasks: one FIFO per priority, highest priority first. A lane mostly sees one or two
  // priorities, so finding a level is a short scan, and a push or pop costs O(1) however many tasks wait
  // (a binary heap cost O(log n) cache misses per pop once an engine queued thousands of tasks ahead).
  class ReadyQueue {
   public:
    bool empty() const { return size_ == 0; }
    std::size_t size() const { return size_; }
    void Push(Task* t);
    Task* Top() const;  // the task Pop returns; requires !empty()
    Task* Pop();  // requires !empty()
    int TopPriority() const;  // INT_MIN when empty

   private:
    // A ring buffer that only grows: once a lane has seen its deepest queue, pushes and pops allocate
    // nothing (a std::deque allocated and freed a chunk every 64 tasks).
    class Fifo {
     public:
      bool empty() const { return count_ == 0; }
      Task* front() const { return buf_[head_]; }
      void push_back(Task* t) {
        if (count_ == buf_.size()) Grow();
        buf_[(head_ + count_) & (buf_.size() - 1)] = t;
        ++count_;
      }
      void pop_front() {
        head_ = (head_ + 1) & (buf_.size() - 1);
        --count_;
      }

     private:
      void Grow() {
        std::vector<Task*> bigger(buf_.empty() ? 64 : buf_.size() * 2);  // a power of two
        for (std::size_t i = 0; i < count_; ++i) bigger[i] = buf_[(head_ + i) & (buf_.size() - 1)];
        buf_.swap(bigger);
        head_ = 0;
      }
      std::vector<Task*> buf_;
      std::size_t head_ = 0;
      std::size_t count_ = 0;
    };
    struct Level {
      int priority;
      Fifo fifo;
    };
    static constexpr std::size_t kKeptLevels = 4;  // empty levels kept (no allocation churn) up to this many
    std::vector<Level> levels_;  // by priority, highest first
    std::size_t size_ = 0;
  };

  caf::actor_system& system_;
  Device* device_;
  Options options_;

  std::once_flag started_;
  std::vector<std::unique_ptr<Worker>> workers_;

  mutable SpinLock mu_;
  ReadyQueue ready_;                 // guarded by mu_
  ReadyQueue in_order_;              // guarded by mu_: in-order tasks of a lane with several workers
  bool in_order_held_ = false;       // guarded by mu_: a worker runs an in-order task (holds in_order_)
  std::vector<int> sleepers_;        // guarded by mu_
  std::uint64_t next_seq_ = 0;       // guarded by mu_
  std::atomic<std::size_t> queued_{0};     // tasks in both queues (Stats)
  std::atomic<std::size_t> available_{0};  // Available(): what spinning workers poll
  std::atomic<int> spinning_{0};
  std::atomic<std::size_t> running_{0};
  std::atomic<int> top_priority_{INT_MIN};
};

}  // namespace troupe::internal
