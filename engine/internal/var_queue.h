// VarQueue — one variable's queue of read and write requests and the rules that grant them (MXNet's
// VersionedVarBlock/ThreadedVar). A pure data structure: no threads, no engine, no CAF; the dependency shard
// that owns the variable drives it, and tests/engine/var_queue_test.cc drives it against a sequential model.
//
// A request is an opaque R* (the engine's OprBlock; a test's own struct). For one variable a request either
// reads or writes it. The rule (DESIGN.md §3): two requests of which at least one writes run in push order;
// readers between two writers may run together.
//
// Ways a request becomes active (holds the variable):
//  - Grant:        nothing it conflicts with is active and nobody waits: granted at once.
//  - Enqueue, then GrantWaiting after a Release: granted in push order (FIFO), readers in a batch.
//  - GrantChained: the request runs right after the chain tail, on the tail's completing thread, so it may
//                  hold the variable together with the tail ("ordering for free" through continuations).
//  - GrantOrdered: every active holder sits in the lane group of one in-order executor (a CPU lane with one
//                  worker) at the same priority, and the request will be handed to that executor after them,
//                  so the executor's FIFO orders them ("ordering for free" through the lane).
//
// The lane group. A granted request handed to an in-order executor may leave the counted holders for the
// variable's lane group (NoteInOrder). Members of the group are never released: they run one at a time, in
// the order they joined, so the group is over once its last member has run, and the owner asks exactly that
// (Settle, with a predicate saying whether a request has run). A member's completion therefore needs no
// message to the owner at all. The owner keeps the last member alive while it is lane_last() (the engine
// holds a reference), so the pointer stays valid for that question.
//
// Invariants (between calls):
//  1. active_reads() >= 0, active_writes() >= 0 count the holders outside the lane group. Counting only
//     Grant and GrantWaiting grants, a variable has either one writer or any number of readers, the lane
//     group included; more than one holder with a writer among them happens only when the holders are
//     ordered by a chain (chain_tail() != null covers them) or by the in-order executor (the lane group,
//     plus requests granted by GrantOrdered that will join it).
//  2. Waiters are in push order, and a waiter is never granted ahead of an earlier waiter. A request is
//     enqueued only when it cannot be granted at once, and once anyone waits every later request waits too
//     (no Grant, GrantChained or GrantOrdered while has_waiters(); the caller checks).
//  3. chain_tail(), when set, is an active request after which every active holder (lane group included) has
//     run or will have run once it completes: the holders form one serial chain ending at the tail.
//     chain_tail_writes() says whether the tail holds the variable for writing. A tail that joins the lane
//     group is lane_last() (any later grant moves or clears the tail first), so it stays valid as a pointer.
//  4. lane_last() is null (no group) or the member that joined last, on in_order_lane() at
//     in_order_priority(); lane_writes() says whether any member writes. Only granted requests join, so
//     while anyone waits the group grows only by requests granted before the waiters came.
//
// Thread-safety: none. One thread at a time (the holder of the owning shard's turn) calls everything.
#pragma once

#include <cassert>
#include <memory>
#include <vector>

namespace troupe::internal {

// Wait-queue nodes for the VarQueues of one owner: an intrusive free list grown in chunks, so that queuing a
// request allocates nothing in steady state (unlike a std::deque that allocates and frees chunks as it fills
// and drains). Thread-safety: none (the owner's).
template <class R>
class VarQueueEntryPool {
 public:
  struct Entry {
    R* request = nullptr;
    bool write = false;
    Entry* next = nullptr;
  };

  Entry* New(R* request, bool write) {
    if (free_ == nullptr) Grow();
    Entry* e = free_;
    free_ = e->next;
    e->request = request;
    e->write = write;
    e->next = nullptr;
    return e;
  }
  void Free(Entry* e) {
    e->next = free_;
    free_ = e;
  }

 private:
  static constexpr int kChunk = 1024;
  void Grow() {
    chunks_.push_back(std::make_unique<Entry[]>(kChunk));
    Entry* chunk = chunks_.back().get();
    for (int i = 0; i < kChunk; ++i) {
      chunk[i].next = free_;
      free_ = &chunk[i];
    }
  }
  std::vector<std::unique_ptr<Entry[]>> chunks_;
  Entry* free_ = nullptr;
};

// The in-order executor a request will be handed to (null lane: none), and its priority there.
struct InOrderSlot {
  const void* lane = nullptr;
  int priority = 0;
};

template <class R>
class VarQueue {
 public:
  using Pool = VarQueueEntryPool<R>;
  using Entry = typename Pool::Entry;

  // Back to a fresh variable (a pooled variable object reused). The queue must be empty.
  void Reset() { *this = VarQueue(); }

  int active_reads() const { return active_reads_; }
  int active_writes() const { return active_writes_; }
  int active() const { return active_reads_ + active_writes_; }  // outside the lane group
  bool has_waiters() const { return head_ != nullptr; }
  const Entry* front() const { return head_; }
  R* chain_tail() const { return chain_tail_; }
  bool chain_tail_writes() const { return chain_tail_writes_; }
  R* lane_last() const { return lane_last_; }
  bool lane_busy() const { return lane_last_ != nullptr; }
  bool lane_writes() const { return lane_writes_; }
  const void* in_order_lane() const { return in_order_lane_; }
  int in_order_priority() const { return in_order_priority_; }
  // Nobody holds the variable (lane group included).
  bool idle() const { return active() == 0 && !lane_busy(); }

  // Whether a new request would conflict with the active holders (waiters aside).
  bool Conflicts(bool write) const {
    return write ? !idle() : active_writes_ > 0 || lane_writes_;
  }
  // Whether a new request may be granted at once (Grant).
  bool CanGrant(bool write) const { return !has_waiters() && !Conflicts(write); }
  // The request a new one may be chained behind (it conflicts with the tail itself), or null. A reader never
  // chains behind another reader: readers between two writers must be free to run together.
  R* ChainHost(bool write) const {
    return chain_tail_ != nullptr && (write || chain_tail_writes_) ? chain_tail_ : nullptr;
  }
  // Whether a request to be handed to the in-order executor `lane` at `priority` may be granted now
  // (GrantOrdered): nobody waits, every holder is in the lane group, and the group is that executor's.
  bool CanGrantOrdered(const void* lane, int priority) const {
    return !has_waiters() && LaneOrders(lane, priority);
  }

  // Grants `r` at once. Requires CanGrant(write).
  void Grant(R* r, bool write) {
    assert(CanGrant(write));
    const bool was_idle = idle();
    (write ? active_writes_ : active_reads_)++;
    SetTail(was_idle ? r : nullptr, write);
  }

  // Grants a request that will be handed to the in-order executor after every holder. Requires
  // CanGrantOrdered(lane, priority) for its executor. The holders no longer form a chain.
  void GrantOrdered(bool write) {
    (write ? active_writes_ : active_reads_)++;
    SetTail(nullptr, false);
  }

  // Makes `r` active as the continuation of a host: `via_chain` when r conflicts here and was chained
  // behind the tail (then it becomes the tail), else r is granted here at once (CanGrant held). With
  // `inherit`, r takes over the host's hold: the host's completion will never be released here (a host in
  // the lane group, `host_in_lane`, keeps its place there: nothing to take over from the counts).
  void GrantChained(R* r, bool write, bool via_chain, bool inherit, bool host_in_lane) {
    const bool was_idle = idle();
    if (inherit && via_chain && !host_in_lane) (chain_tail_writes_ ? active_writes_ : active_reads_)--;
    (write ? active_writes_ : active_reads_)++;
    if (via_chain || was_idle) {
      SetTail(r, write);
    } else {
      SetTail(nullptr, false);
    }
  }

  // Queues `r` behind the waiters (FIFO).
  void Enqueue(R* r, bool write, Pool* pool) {
    Entry* e = pool->New(r, write);
    (tail_ != nullptr ? tail_->next : head_) = e;
    tail_ = e;
  }
  // Removes the front waiter (the caller grants it some other way: GrantChained).
  void PopFront(Pool* pool) {
    Entry* e = head_;
    head_ = e->next;
    if (head_ == nullptr) tail_ = nullptr;
    pool->Free(e);
  }

  // Whether an active holder handed to the in-order executor `lane` at `priority` may join the lane group.
  bool InOrderCompatible(const void* lane, int priority) const {
    return !lane_busy() || (in_order_lane_ == lane && in_order_priority_ == priority);
  }
  // Moves the active holder `r` (holding for `write`), just handed to the in-order executor `lane` at
  // `priority`, from the counts into the lane group. Requires InOrderCompatible(lane, priority). Returns the
  // member it replaces as lane_last() (null if none), which the owner no longer needs to keep alive.
  R* NoteInOrder(R* r, bool write, const void* lane, int priority) {
    assert(InOrderCompatible(lane, priority));
    (write ? active_writes_ : active_reads_)--;
    assert(active_reads_ >= 0 && active_writes_ >= 0);
    R* previous = lane_last_;
    assert(previous == nullptr || chain_tail_ != previous);  // invariant 3
    in_order_lane_ = lane;
    in_order_priority_ = priority;
    lane_writes_ = lane_writes_ || write;
    lane_last_ = r;
    return previous;
  }
  // Ends the lane group when its last member has run (ran(lane_last()) is true): returns that member (the
  // owner may let it go), else null.
  template <class Ran>
  R* Settle(Ran&& ran) {
    if (lane_last_ == nullptr || !ran(lane_last_)) return nullptr;
    R* last = lane_last_;
    if (chain_tail_ == last) SetTail(nullptr, false);
    lane_last_ = nullptr;
    lane_writes_ = false;
    return last;
  }

  // Ends `r`'s hold (an active holder outside the lane group). Call GrantWaiting next.
  void Release(R* r, bool write) {
    (write ? active_writes_ : active_reads_)--;
    assert(active_reads_ >= 0 && active_writes_ >= 0);
    if (chain_tail_ == r || idle()) SetTail(nullptr, false);
  }

  // Grants waiters from the front while the rule allows: one writer once nothing is active, or every reader
  // up to the next writer once no writer is active. Calls granted(R*) for each, in push order.
  template <class F>
  void GrantWaiting(Pool* pool, F&& granted) {
    GrantWaiting(pool, [&granted](R* r, bool) { granted(r); }, [](const R*) { return InOrderSlot{}; });
  }
  // As above, and also grants the front waiter when every holder is in the lane group of its in-order
  // executor (slot_of(r) names it; GrantOrdered's rule for a waiter at the front). Calls granted(r, ordered),
  // where `ordered` says which rule granted r; it may move r into the lane group (NoteInOrder) before
  // returning, which lets the next waiter follow it.
  template <class F, class SlotOf>
  void GrantWaiting(Pool* pool, F&& granted, SlotOf&& slot_of) {
    while (head_ != nullptr) {
      R* r = head_->request;
      const bool write = head_->write;
      if (!Conflicts(write)) {
        PopFront(pool);
        if (write) {
          active_writes_ = 1;
          SetTail(r, true);
        } else {
          SetTail(idle() ? r : nullptr, false);
          ++active_reads_;
        }
        granted(r, false);
        continue;
      }
      if (!OnlyLaneGroupHolds()) return;  // no lane can order r (and r's slot, on a cold block, stays untouched)
      const InOrderSlot slot = slot_of(r);
      if (!LaneOrders(slot.lane, slot.priority)) return;
      PopFront(pool);
      GrantOrdered(write);
      granted(r, true);
    }
  }

 private:
  // Every holder is in the lane group, and the group belongs to `lane` at `priority`.
  bool LaneOrders(const void* lane, int priority) const {
    return lane != nullptr && OnlyLaneGroupHolds() && in_order_lane_ == lane && in_order_priority_ == priority;
  }
  bool OnlyLaneGroupHolds() const { return lane_busy() && active() == 0; }
  void SetTail(R* r, bool write) {
    chain_tail_ = r;
    chain_tail_writes_ = r != nullptr && write;
  }

  Entry* head_ = nullptr;
  Entry* tail_ = nullptr;
  int active_reads_ = 0;        // granted, not released, not in the lane group
  int active_writes_ = 0;       // as above (> 1 only through chaining or GrantOrdered)
  R* chain_tail_ = nullptr;     // invariant 3
  bool chain_tail_writes_ = false;
  R* lane_last_ = nullptr;      // invariant 4
  bool lane_writes_ = false;
  int in_order_priority_ = 0;
  const void* in_order_lane_ = nullptr;
};

}  // namespace troupe::internal
