// Helpers every benchmark workload shares for describing the run in its JSON: the machine and the time.
#pragma once

#include <string>

namespace troupe::bench {

// The CPU's model name from /proc/cpuinfo ("unknown" when it cannot be read).
std::string CpuModel();
// The current time in UTC, ISO 8601 ("2026-11-23T04:12:00Z").
std::string UtcNow();

}  // namespace troupe::bench
