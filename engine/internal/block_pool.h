// BlockPool — where the actor engine's OprBlocks come from and go back to.
//
// Blocks are never freed while the pool lives: a callback invoked late (twice, or after its function
// completed) must still find its block to be detected as stale (CallbackSlot).
//
// Invariants:
//  1. Every block the pool made is in all_blocks_ until the pool dies; a block is on at most one of the
//     free lists (recycled_, alloc_free_) and only while nobody else holds it.
//  2. Recyclers (shards, workers, callback threads) push onto the lock-free stack recycled_; allocating
//     threads take the whole stack at once into alloc_free_ under alloc_mu_, so the two sides share one cache
//     line per batch, not per block, and taking everything at once has no ABA problem.
//
// Thread-safety: Alloc and Free are thread-safe.
#pragma once

#include <atomic>
#include <deque>
#include <memory>

#include "base/spinlock.h"
#include "engine/internal/opr_block.h"

namespace troupe::internal {

class BlockPool {
 public:
  explicit BlockPool(ActorEngine* engine) : engine_(engine) {}
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // A free block (engine set, everything else as the last Free left it).
  OprBlock* Alloc() {
    std::lock_guard<SpinLock> lock(alloc_mu_);
    if (alloc_free_ == nullptr) alloc_free_ = recycled_.exchange(nullptr, std::memory_order_acquire);
    if (alloc_free_ != nullptr) {
      OprBlock* b = alloc_free_;
      alloc_free_ = b->free_next;
      return b;
    }
    return Grow();
  }
  // Returns `b` to the pool; nobody may touch it afterwards.
  void Free(OprBlock* b) {
    OprBlock* head = recycled_.load(std::memory_order_relaxed);
    do {
      b->free_next = head;
    } while (!recycled_.compare_exchange_weak(head, b, std::memory_order_release, std::memory_order_relaxed));
  }

 private:
  OprBlock* Grow();  // under alloc_mu_

  ActorEngine* const engine_;
  alignas(64) std::atomic<OprBlock*> recycled_{nullptr};
  alignas(64) SpinLock alloc_mu_;
  OprBlock* alloc_free_ = nullptr;                    // guarded by alloc_mu_
  std::deque<std::unique_ptr<OprBlock>> all_blocks_;  // guarded by alloc_mu_
};

}  // namespace troupe::internal
