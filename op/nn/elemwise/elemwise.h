// The element arithmetic of the element-wise SimpleOps (elemwise_*, *_scalar, broadcast_*, smooth_l1), shared
// by the CPU functions (elemwise.cc) and the CUDA ones (elemwise.cu), so both devices compute the same
// formulas (namespace tensor_ops).
//
// Properties are immutable after Init (thread-safe to share); helpers are pure functions. Compiles under
// nvcc (the .cu file includes it): no CAF or Cap'n Proto, and what runs in kernels is TROUPE_HOST_DEVICE.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "op/internal/op_util.h"
#include "op/operator.h"
#include "op/param.h"
#include "tensor/tensor.h"
#include "tensor/detail/elementwise.h"

namespace troupe {

namespace tensor_ops {

// Scalar forms: _plus_scalar (x + s), _minus_scalar (x - s), _rminus_scalar (s - x), _mul_scalar (x * s),
// _div_scalar (x / s), _rdiv_scalar (s / x); the comparisons (_greater_scalar ... _not_equal_scalar: 1 where
// true, 0 where not, in the input's type; no gradient flows through them), _maximum_scalar, _minimum_scalar,
// _power_scalar (x ^ s) and _rpower_scalar (s ^ x).
enum class ScalarOp : int {
  kPlus, kMinus, kRMinus, kMul, kDiv, kRDiv,
  kGreater, kGreaterEqual, kLesser, kLesserEqual, kEqual, kNotEqual,
  kMaximum, kMinimum, kPower, kRPower
};

// pow and log in T's own precision, on both devices.
template <typename T>
TROUPE_HOST_DEVICE inline T PowT(T a, T b) {
  if constexpr (sizeof(T) == sizeof(float)) {
    return powf(a, b);
  } else {
    return pow(a, b);
  }
}
template <typename T>
TROUPE_HOST_DEVICE inline T LogT(T a) {
  if constexpr (sizeof(T) == sizeof(float)) {
    return logf(a);
  } else {
    return log(a);
  }
}

template <typename T>
TROUPE_HOST_DEVICE inline T ScalarForward(ScalarOp op, T x, T s) {
  switch (op) {
    case ScalarOp::kPlus: return x + s;
    case ScalarOp::kMinus: return x - s;
    case ScalarOp::kRMinus: return s - x;
    case ScalarOp::kMul: return x * s;
    case ScalarOp::kDiv: return x / s;
    case ScalarOp::kRDiv: return s / x;
    case ScalarOp::kGreater: return x > s ? T(1) : T(0);
    case ScalarOp::kGreaterEqual: return x >= s ? T(1) : T(0);
    case ScalarOp::kLesser: return x < s ? T(1) : T(0);
    case ScalarOp::kLesserEqual: return x <= s ? T(1) : T(0);
    case ScalarOp::kEqual: return x == s ? T(1) : T(0);
    case ScalarOp::kNotEqual: return x != s ? T(1) : T(0);
    case ScalarOp::kMaximum: return x > s ? x : s;
    case ScalarOp::kMinimum: return x < s ? x : s;
    case ScalarOp::kPower: return PowT(x, s);
    case ScalarOp::kRPower: return PowT(s, x);
  }
  return T(0);
}
// d/dx times og; x (the input) is read only where ScalarGradNeedsInput says so. The gradients at ties are
// MXNet's: _maximum_scalar passes it where x >= s, _minimum_scalar where x <= s.
template <typename T>
TROUPE_HOST_DEVICE inline T ScalarBackward(ScalarOp op, T og, T x, T s) {
  switch (op) {
    case ScalarOp::kPlus:
    case ScalarOp::kMinus: return og;
    case ScalarOp::kRMinus: return -og;
    case ScalarOp::kMul: return og * s;
    case ScalarOp::kDiv: return og / s;
    case ScalarOp::kRDiv: return -og * s / (x * x);
    case ScalarOp::kGreater:
    case ScalarOp::kGreaterEqual:
    case ScalarOp::kLesser:
    case ScalarOp::kLesserEqual:
    case ScalarOp::kEqual:
    case ScalarOp::kNotEqual: return T(0);
    case ScalarOp::kMaximum: return x >= s ? og : T(0);
    case ScalarOp::kMinimum: return x <= s ? og : T(0);
    case ScalarOp::kPower: return og * s * PowT(x, s - T(1));
    case ScalarOp::kRPower: return og * PowT(s, x) * LogT(s);
  }
  return T(0);
}
inline bool ScalarGradNeedsInput(ScalarOp op) {
  return op == ScalarOp::kRDiv || op == ScalarOp::kMaximum || op == ScalarOp::kMinimum || op == ScalarOp::kPower ||
         op == ScalarOp::kRPower;
}

// Gradients of lhs op rhs with respect to each operand, times og.
template <typename T>
TROUPE_HOST_DEVICE inline T BinaryGradLhs(internal::BinaryOp op, T og, T /*lhs*/, T rhs) {
  switch (op) {
    case internal::BinaryOp::kAdd:
    case internal::BinaryOp::kSub: return og;
    case internal::BinaryOp::kMul: return og * rhs;
    case internal::BinaryOp::kDiv: return og / rhs;
  }
  return T(0);
}
template <typename T>
TROUPE_HOST_DEVICE inline T BinaryGradRhs(internal::BinaryOp op, T og, T lhs, T rhs) {
  switch (op) {
    case internal::BinaryOp::kAdd: return og;
    case internal::BinaryOp::kSub: return -og;
    case internal::BinaryOp::kMul: return og * lhs;
    case internal::BinaryOp::kDiv: return -og * lhs / (rhs * rhs);
  }
  return T(0);
}
// Whether the gradients read the operands (mul, div) or only out_grad (add, sub).
inline bool BinaryGradNeedsInputs(internal::BinaryOp op) {
  return op == internal::BinaryOp::kMul || op == internal::BinaryOp::kDiv;
}

// smooth_l1 with sigma = scalar (MXNet's mshadow_op::smooth_l1_loss / smooth_l1_gradient):
// f(x) = 0.5 (sigma x)^2 for |x| < 1/sigma^2, |x| - 0.5/sigma^2 otherwise.
template <typename T>
TROUPE_HOST_DEVICE inline T SmoothL1(T x, T sigma) {
  const T s2 = sigma * sigma;
  if (x > T(1) / s2) return x - T(0.5) / s2;
  if (x < T(-1) / s2) return -x - T(0.5) / s2;
  return T(0.5) * x * x * s2;
}
template <typename T>
TROUPE_HOST_DEVICE inline T SmoothL1Grad(T x, T sigma) {
  const T s2 = sigma * sigma;
  if (x > T(1) / s2) return T(1);
  if (x < T(-1) / s2) return T(-1);
  return s2 * x;
}

}  // namespace tensor_ops

}  // namespace troupe
