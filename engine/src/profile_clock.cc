// Timestamps for the engine's profile records: see engine/internal/profile_clock.h.
#include "engine/internal/profile_clock.h"

#include <chrono>

namespace troupe::internal {

std::int64_t SteadyClockNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

// Ticks and steady time taken together: the calibration's start, when the library loads (before any record).
struct Anchor {
  std::int64_t ticks = ProfileTicks();
  std::int64_t ns = SteadyClockNs();
};
const Anchor load_anchor;

}  // namespace

TickConverter::TickConverter() {
  const Anchor& a = load_anchor;
  Anchor now;
  // At least 1 ms between the two readings, so that reading jitter stays below 1e-4 of the rate.
  while (now.ns - a.ns < 1000000) now = Anchor();
  ticks0_ = a.ticks;
  ns0_ = a.ns;
  const double dticks = static_cast<double>(now.ticks - a.ticks);
  const double dns = static_cast<double>(now.ns - a.ns);
#if defined(__x86_64__)
  ns_per_tick_ = dticks > 0 && dns > 0 ? dns / dticks : 1.0;
#else
  ns_per_tick_ = 1.0;  // ticks are nanoseconds already
  (void)dticks;
  (void)dns;
#endif
}

std::int64_t TickConverter::ToNs(std::int64_t ticks) const {
  return ns0_ + static_cast<std::int64_t>(static_cast<double>(ticks - ticks0_) * ns_per_tick_);
}

void ProfileTicksToNs(std::vector<ProfileRecord>* records) {
  if (records->empty()) return;
  const TickConverter ticks;
  for (ProfileRecord& r : *records) {
    r.begin_ns = ticks.ToNs(r.begin_ns);
    r.end_ns = ticks.ToNs(r.end_ns);
  }
}

}  // namespace troupe::internal
