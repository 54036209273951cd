// Timestamps for the engine's profile records (engine/profiler.h): two per function while profiling, so
// they must be cheap. On x86-64 the time-stamp counter (about 15 ns to read here, against 37 ns for the
// steady clock; invariant on the machines troupe runs on), elsewhere the steady clock. Records keep raw
// ticks; TakeProfile converts them to steady-clock nanoseconds with a TickConverter.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/engine.h"

namespace troupe::internal {

std::int64_t SteadyClockNs();

// Inline: two reads per profiled function.
inline std::int64_t ProfileTicks() {
#if defined(__x86_64__)
  return static_cast<std::int64_t>(__builtin_ia32_rdtsc());
#else
  return SteadyClockNs();
#endif
}

// Ticks -> steady-clock nanoseconds, calibrated between the library's load and the converter's construction
// (the longer apart, the finer).
class TickConverter {
 public:
  TickConverter();
  std::int64_t ToNs(std::int64_t ticks) const;
  double ns_per_tick() const { return ns_per_tick_; }

 private:
  std::int64_t ticks0_, ns0_;
  double ns_per_tick_;
};

// Converts records taken with ProfileTicks to steady-clock nanoseconds, in place (each engine's TakeProfile).
void ProfileTicksToNs(std::vector<ProfileRecord>* records);

}  // namespace troupe::internal
