// The iterators' shuffle: Fisher-Yates over std::mt19937_64 with a multiply-shift draw, so that a seed gives
// the same order with every standard library (std::shuffle's order is implementation-defined).
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace troupe::internal {

// Permutes *order in place from `seed`. The multiply-shift maps a 64-bit draw onto [0, i) with a bias below
// 2^-40 for any data set size.
inline void ShuffleOrder(std::vector<std::size_t>* order, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (std::size_t i = order->size(); i > 1; --i) {
    const auto j = static_cast<std::size_t>((static_cast<unsigned __int128>(rng()) * i) >> 64);
    std::swap((*order)[i - 1], (*order)[j]);
  }
}

}  // namespace troupe::internal
