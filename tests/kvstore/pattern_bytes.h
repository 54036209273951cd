// Deterministic pseudo-random bytes for the KVStore wire tests (a linear congruential sequence per seed),
// so that a frame that arrives shifted, cut or mixed with another differs from what was sent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace troupe::test {

inline std::vector<std::byte> PatternBytes(std::size_t n, unsigned seed) {
  std::vector<std::byte> out(n);
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& b : out) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<std::byte>(x >> 24);
  }
  return out;
}

}  // namespace troupe::test
