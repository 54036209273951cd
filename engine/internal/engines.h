// Engine implementations (internal) and helpers they share.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <utility>
#include <memory>
#include <vector>

#include "engine/engine.h"

namespace troupe::internal {

std::unique_ptr<Engine> MakeNaiveEngine(const EngineConfig& config);
std::unique_ptr<Engine> MakeActorEngine(const EngineConfig& config);

// Sorts and deduplicates both lists and removes from `const_vars` every variable that is also written
// (a variable both read and written counts as written). Throws troupe::Error on a null handle.
template <class V>
void DeduplicateVars(std::vector<V*>* const_vars, std::vector<V*>* mutable_vars, const char* op_name) {
  for (auto* list : {const_vars, mutable_vars}) {
    for (V* v : *list) {
      if (v == nullptr) {
        throw Error(std::string("null variable handle pushed with function '") + (op_name ? op_name : "unnamed") +
                    "': create variables with Engine::NewVariable()");
      }
    }
    std::sort(list->begin(), list->end());
    list->erase(std::unique(list->begin(), list->end()), list->end());
  }
  if (!mutable_vars->empty()) {
    auto out = const_vars->begin();
    for (V* v : *const_vars) {
      if (!std::binary_search(mutable_vars->begin(), mutable_vars->end(), v)) *out++ = v;
    }
    const_vars->erase(out, const_vars->end());
  }
}

// The completion state of one call of an AsyncFn. Slots are reused (pooled) and each use gets a new
// generation, so a callback invoked twice, or after its function completed, is detected and ignored
// instead of completing somebody else's function. A slot is never freed while its engine lives.
class CallbackSlot {
 public:
  // Arms the slot for a new call; returns the generation token to hand to the callback.
  std::uint64_t Arm() {
    const std::uint64_t gen = (state_.load(std::memory_order_relaxed) >> 2) + 1;
    error_ = nullptr;
    state_.store(gen << 2, std::memory_order_release);
    return gen;
  }
  // Records completion; false when `gen` is stale or the call already completed.
  bool Complete(std::uint64_t gen, std::exception_ptr error, bool notify) {
    std::uint64_t expected = gen << 2;
    if (!state_.compare_exchange_strong(expected, (gen << 2) | 1, std::memory_order_acq_rel)) return false;
    error_ = std::move(error);
    state_.store((gen << 2) | 2, std::memory_order_release);
    if (notify) state_.notify_all();
    return true;
  }
  bool Done(std::uint64_t gen) const { return state_.load(std::memory_order_acquire) == ((gen << 2) | 2); }
  // Blocks until the call `gen` completed.
  void Wait(std::uint64_t gen) const {
    for (;;) {
      const std::uint64_t s = state_.load(std::memory_order_acquire);
      if (s == ((gen << 2) | 2)) return;
      state_.wait(s, std::memory_order_acquire);
    }
  }
  std::exception_ptr TakeError() { return std::exchange(error_, nullptr); }

 private:
  std::atomic<std::uint64_t> state_{0};
  std::exception_ptr error_;
};

void LogCallbackMisuse(const char* name);

inline bool NeverSkipped(FnProperty prop) { return prop == FnProperty::kNoSkip || prop == FnProperty::kDeleteVar; }

}  // namespace troupe::internal
