// The element-wise binary operators of MXNet 1.9 beyond + - * / (its elemwise_binary_op_extended/_logic and
// elemwise_binary_broadcast_op_extended/_logic): maximum, minimum, power, mod, hypot, the comparisons and
// the logical operators, each in an equal-shape form (_maximum, _equal, ...) and a broadcasting form
// (broadcast_maximum, broadcast_equal, ...), from one table of element formulas (binary.cc registers them).
//
// Gradients are MXNet's: maximum passes the gradient to lhs where lhs >= rhs and to rhs elsewhere, minimum
// to lhs where lhs <= rhs; mod's is 1 for lhs and -floor(lhs / rhs) for rhs; the comparisons and logical
// operators pass none. Pure functions: thread-safe. Compiles under nvcc: kernels' code is TROUPE_HOST_DEVICE.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "tensor/tensor.h"

namespace troupe::binary {

enum class BinaryMath : int {
  kMaximum, kMinimum, kPower, kMod, kHypot,
  kEqual, kNotEqual, kGreater, kGreaterEqual, kLesser, kLesserEqual, kLogicalAnd, kLogicalOr, kLogicalXor
};

// Whether gradients flow at all (the comparisons and logical operators give zero gradients).
inline bool HasGradient(BinaryMath op) { return static_cast<int>(op) <= static_cast<int>(BinaryMath::kHypot); }

// Python's modulo (the result takes the divisor's sign; 0 for a zero divisor), computed in double as MXNet's
// mshadow_op::mod does.
TROUPE_HOST_DEVICE inline double ModDouble(double a, double b) {
  if (b == 0) return 0;
  const double r = fmod(a, b);
  return r != 0 && ((r < 0) != (b < 0)) ? r + b : r;
}

// a ^ b for integers: by repeated squaring (wrapping as integer arithmetic does) for b >= 0, so the result is
// exact on every device (a double pow may land just below an integer, which truncation would then lose);
// through double pow for b < 0 (0 or +-1 but for a zero base).
template <typename T>
TROUPE_HOST_DEVICE inline T IntegerPower(T a, T b) {
  if constexpr (std::is_signed_v<T>) {
    if (b < T(0)) return static_cast<T>(pow(static_cast<double>(a), static_cast<double>(b)));
  }
  using U = std::make_unsigned_t<T>;
  U result = 1, base = static_cast<U>(a);
  for (T e = b; e > T(0); e = static_cast<T>(e / 2)) {
    if (e % 2 != 0) result = static_cast<U>(result * base);
    base = static_cast<U>(base * base);
  }
  return static_cast<T>(result);
}

template <typename T>
TROUPE_HOST_DEVICE inline T Apply(BinaryMath op, T a, T b) {
  switch (op) {
    case BinaryMath::kMaximum: return a > b ? a : b;
    case BinaryMath::kMinimum: return a < b ? a : b;
    case BinaryMath::kPower:
      if constexpr (std::is_floating_point_v<T>) {
        if constexpr (sizeof(T) == 4) return powf(a, b); else return pow(a, b);
      } else {
        return IntegerPower(a, b);
      }
    case BinaryMath::kMod: return static_cast<T>(ModDouble(static_cast<double>(a), static_cast<double>(b)));
    case BinaryMath::kHypot:
      if constexpr (sizeof(T) == 4 && std::is_floating_point_v<T>) {
        return hypotf(a, b);
      } else {
        return static_cast<T>(hypot(static_cast<double>(a), static_cast<double>(b)));
      }
    case BinaryMath::kEqual: return a == b ? T(1) : T(0);
    case BinaryMath::kNotEqual: return a != b ? T(1) : T(0);
    case BinaryMath::kGreater: return a > b ? T(1) : T(0);
    case BinaryMath::kGreaterEqual: return a >= b ? T(1) : T(0);
    case BinaryMath::kLesser: return a < b ? T(1) : T(0);
    case BinaryMath::kLesserEqual: return a <= b ? T(1) : T(0);
    case BinaryMath::kLogicalAnd: return (a != T(0) && b != T(0)) ? T(1) : T(0);
    case BinaryMath::kLogicalOr: return (a != T(0) || b != T(0)) ? T(1) : T(0);
    case BinaryMath::kLogicalXor: return ((a != T(0)) != (b != T(0))) ? T(1) : T(0);
  }
  return T(0);
}

// og times d(a op b)/da and d(a op b)/db (floating-point types only).
template <typename T>
TROUPE_HOST_DEVICE inline void Gradients(BinaryMath op, T og, T a, T b, T* ga, T* gb) {
  constexpr bool f = sizeof(T) == 4;
  switch (op) {
    case BinaryMath::kMaximum:
      *ga = a >= b ? og : T(0);
      *gb = a >= b ? T(0) : og;
      return;
    case BinaryMath::kMinimum:
      *ga = a <= b ? og : T(0);
      *gb = a <= b ? T(0) : og;
      return;
    case BinaryMath::kPower: {
      const T y = f ? powf(a, b) : pow(a, b);
      *ga = og * b * (f ? powf(a, b - T(1)) : pow(a, b - T(1)));
      *gb = og * y * (f ? logf(a) : log(a));
      return;
    }
    case BinaryMath::kMod:
      *ga = og;
      *gb = og * -(f ? floorf(a / b) : floor(a / b));
      return;
    case BinaryMath::kHypot: {
      const T h = f ? hypotf(a, b) : hypot(a, b);
      *ga = og * a / h;
      *gb = og * b / h;
      return;
    }
    default:
      *ga = T(0);
      *gb = T(0);
      return;
  }
}

// where(condition, x, y): the elements of x per element of condition (1, or a row of x when condition is
// 1-D with x's first dimension).
inline std::int64_t WhereRowSize(std::int64_t cond_size, std::int64_t x_size) {
  return cond_size == x_size ? 1 : (cond_size == 0 ? 1 : x_size / cond_size);
}

// The operators of the table: each function's equal-shape and broadcasting names (binary.cc registers them
// for the CPU, binary.cu for the GPU).
struct MathDef {
  BinaryMath op;
  const char* elemwise;    // the equal-shape form
  const char* broadcast;   // the broadcasting form
  const char* text;
};
inline constexpr MathDef kMathDefs[] = {
    {BinaryMath::kMaximum, "_maximum", "broadcast_maximum", "The element-wise maximum."},
    {BinaryMath::kMinimum, "_minimum", "broadcast_minimum", "The element-wise minimum."},
    {BinaryMath::kPower, "_power", "broadcast_power", "lhs raised to the power rhs."},
    {BinaryMath::kMod, "_mod", "broadcast_mod", "Python's modulo: the remainder takes the divisor's sign."},
    {BinaryMath::kHypot, "_hypot", "broadcast_hypot", "sqrt(lhs^2 + rhs^2)."},
    {BinaryMath::kEqual, "_equal", "broadcast_equal", "1 where lhs == rhs, else 0."},
    {BinaryMath::kNotEqual, "_not_equal", "broadcast_not_equal", "1 where lhs != rhs, else 0."},
    {BinaryMath::kGreater, "_greater", "broadcast_greater", "1 where lhs > rhs, else 0."},
    {BinaryMath::kGreaterEqual, "_greater_equal", "broadcast_greater_equal", "1 where lhs >= rhs, else 0."},
    {BinaryMath::kLesser, "_lesser", "broadcast_lesser", "1 where lhs < rhs, else 0."},
    {BinaryMath::kLesserEqual, "_lesser_equal", "broadcast_lesser_equal", "1 where lhs <= rhs, else 0."},
    {BinaryMath::kLogicalAnd, "_logical_and", "broadcast_logical_and", "1 where both are non-zero, else 0."},
    {BinaryMath::kLogicalOr, "_logical_or", "broadcast_logical_or", "1 where either is non-zero, else 0."},
    {BinaryMath::kLogicalXor, "_logical_xor", "broadcast_logical_xor", "1 where exactly one is non-zero."},
};

}  // namespace troupe::binary
