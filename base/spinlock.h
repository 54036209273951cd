// SpinLock — a tiny test-and-test-and-set lock for critical sections of a few dozen instructions
// (queue pushes and pops). Yields after a short spin so that it stays sane when threads outnumber cores.
#pragma once

#include <atomic>
#include <chrono>
#include <thread>

namespace troupe {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Polls `ready` for up to `spin_us` microseconds: pause instructions first, then yields so that a
// spinning thread hands its core to runnable threads when they outnumber the cores. True when ready.
template <class Ready>
bool SpinUntil(int spin_us, Ready&& ready) {
  if (spin_us <= 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  for (int i = 0;; ++i) {
    if (ready()) return true;
    if (i < 32) {
      CpuRelax();
    } else {
      std::this_thread::yield();
      if (std::chrono::steady_clock::now() >= deadline) return ready();
    }
  }
}

class SpinLock {
 public:
  void lock() noexcept {
    for (int spins = 0;; ++spins) {
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < 64) {
          CpuRelax();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace troupe
