#include "base/thread_id.h"

#include <atomic>

namespace troupe {

int CurrentThreadId() {
  static std::atomic<int> next{1};
  thread_local int id = next.fetch_add(1, std::memory_order_relaxed);
  return id;
}

}  // namespace troupe
