// Element arithmetic shared by the CPU and CUDA kernels, so both devices compute exactly the same values:
// half and bfloat16 compute in float; integers wrap on overflow, division truncates towards zero and a
// division by zero gives 0 (no trap on any device); conversions to integers saturate (NaN gives 0).
//
// Declared surface of the tensor module (detail/: never installed): the element-wise operators of op/ use
// the same arithmetic. Pure functions: thread-safe.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "tensor/detail/kernels.h"
#include "tensor/tensor.h"

namespace troupe::internal {

// The type arithmetic on T is done in.
template <typename T>
struct ComputeType {
  using type = T;
};
template <> struct ComputeType<half_t> { using type = float; };
template <> struct ComputeType<bf16_t> { using type = float; };

template <typename T>
using Compute = typename ComputeType<T>::type;

template <typename T>
TROUPE_HOST_DEVICE inline T ApplyBinary(BinaryOp op, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case BinaryOp::kAdd: return a + b;
      case BinaryOp::kSub: return a - b;
      case BinaryOp::kMul: return a * b;
      case BinaryOp::kDiv: return a / b;
    }
    return T(0);
  } else {
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case BinaryOp::kAdd: return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
      case BinaryOp::kSub: return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
      case BinaryOp::kMul: return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
      case BinaryOp::kDiv:
        if (b == 0) return T(0);
        if constexpr (std::is_signed_v<T>) {
          if (b == T(-1)) return static_cast<T>(U(0) - static_cast<U>(a));  // MIN / -1 wraps to MIN
        }
        return static_cast<T>(a / b);
    }
    return T(0);
  }
}

// Converts a value to T: floats convert as C++ does; integers saturate, NaN gives 0.
template <typename T, typename From>
TROUPE_HOST_DEVICE inline T ConvertTo(From v) {
  if constexpr (std::is_same_v<T, bool>) {
    return static_cast<double>(v) != 0.0;
  } else if constexpr (std::is_integral_v<T>) {
    if constexpr (std::is_integral_v<From>) {
      if constexpr (std::is_same_v<From, bool>) return static_cast<T>(v ? 1 : 0);
      // Integer to integer: saturate through int64/uint64 comparisons.
      if constexpr (std::is_signed_v<From>) {
        const std::int64_t x = static_cast<std::int64_t>(v);
        if constexpr (std::is_signed_v<T>) {
          if (x < static_cast<std::int64_t>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
          if (x > static_cast<std::int64_t>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
        } else {
          if (x < 0) return T(0);
          if (static_cast<std::uint64_t>(x) > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) {
            return std::numeric_limits<T>::max();
          }
        }
        return static_cast<T>(x);
      } else {
        const std::uint64_t x = static_cast<std::uint64_t>(v);
        if (x > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
        return static_cast<T>(x);
      }
    } else {
      const double x = static_cast<double>(static_cast<Compute<From>>(v));
      if (!(x == x)) return T(0);  // NaN
      if (x <= static_cast<double>(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
      // max() of int64 is not exactly representable: compare against 2^63 (and friends) instead.
      const double limit = static_cast<double>(std::numeric_limits<T>::max()) + 1.0;
      if (x >= limit) return std::numeric_limits<T>::max();
      return static_cast<T>(x);
    }
  } else {
    // To a floating type (float, double, half_t, bf16_t).
    using C = Compute<T>;
    if constexpr (std::is_same_v<From, bool>) return T(static_cast<C>(v ? 1 : 0));
    else return T(static_cast<C>(static_cast<Compute<From>>(v)));
  }
}

}  // namespace troupe::internal
