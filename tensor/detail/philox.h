// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a counter-based
// generator, the same function on the host and in CUDA kernels, so both devices draw identical numbers
// from the same (key, counter).
//
// Declared surface of the tensor module (detail/: never installed): Dropout and rrelu in op/ draw their
// numbers with it. Pure functions: thread-safe.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"  // TROUPE_HOST_DEVICE

namespace troupe::internal {

// The full generator: a 128-bit counter (four words) and a 64-bit key (two words).
TROUPE_HOST_DEVICE inline void Philox4x32x10(const std::uint32_t ctr[4], std::uint32_t k0, std::uint32_t k1,
                                             std::uint32_t out[4]) {
  std::uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(0xD2511F53u) * c0;
    const std::uint64_t p1 = static_cast<std::uint64_t>(0xCD9E8D57u) * c2;
    const std::uint32_t n0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const std::uint32_t n1 = static_cast<std::uint32_t>(p1);
    const std::uint32_t n2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3 ^ k1;
    const std::uint32_t n3 = static_cast<std::uint32_t>(p0);
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

// troupe's streams: a 64-bit block counter (the upper two counter words are 0) and a 64-bit key.
TROUPE_HOST_DEVICE inline void PhiloxBlock(std::uint64_t key, std::uint64_t counter, std::uint32_t out[4]) {
  const std::uint32_t ctr[4] = {static_cast<std::uint32_t>(counter), static_cast<std::uint32_t>(counter >> 32), 0, 0};
  Philox4x32x10(ctr, static_cast<std::uint32_t>(key), static_cast<std::uint32_t>(key >> 32), out);
}

// Word `i` of a fill that starts at block `base`: block base + i/4, word i%4.
TROUPE_HOST_DEVICE inline std::uint32_t PhiloxWord(std::uint64_t key, std::uint64_t base, std::uint64_t i) {
  std::uint32_t r[4];
  PhiloxBlock(key, base + i / 4, r);
  return r[i % 4];
}

// A 64-bit mix (splitmix64's finaliser): derives independent keys from (seed, device, copy).
TROUPE_HOST_DEVICE inline std::uint64_t Mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace troupe::internal
