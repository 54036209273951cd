// Small helpers every operator of the library (op/nn) shares on both devices: the float-only and the
// number dtype dispatch and axis normalisation, with one error text each so that every operator reports the same
// problem the same way.
//
// Compiles under nvcc (-std=c++20): the .cu operators include it through their op/nn/*.h headers. The
// helpers here are host code; the per-element request (Assign) that kernels use is in op/operator.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "base/error.h"
#include "op/operator.h"
#include "tensor/detail/vector_math.h"  // VecFloatToBf16
#include "tensor/tensor.h"

namespace troupe::internal {

// The error FloatSwitch throws: "<op>: element type <t> is not supported; use float32 or float64".
// Out of line of the switch so that the hot path is two comparisons and a call.
[[noreturn]] inline void ThrowNotFloat(std::string_view op, DType dtype) {
  throw Error(std::string(op) + ": element type " + DTypeName(dtype) + " is not supported; use float32 or float64");
}

// Runs fn(float{}) or fn(double{}) and returns its result: the library's operators compute in exactly these
// two element types (on the CPU and on the GPU); any other is a troupe::Error naming `op` and the type.
template <typename Fn>
decltype(auto) FloatSwitch(DType dtype, std::string_view op, Fn&& fn) {
  if (dtype == DType::kFloat32) return fn(float{});
  if (dtype == DType::kFloat64) return fn(double{});
  ThrowNotFloat(op, dtype);
}

// Whether T is one of the two 16-bit float types, which store and multiply in 16 bits but add up in float.
template <typename T>
inline constexpr bool kIsHalf = std::is_same_v<T, half_t> || std::is_same_v<T, bf16_t>;
// The type sums and other arithmetic on T are done in: float for the half types, T otherwise.
template <typename T>
using AccType = std::conditional_t<kIsHalf<T>, float, T>;

// Like FloatSwitch, with float16 and bfloat16 too (fn(half_t{}), fn(bf16_t{})): for the operators that run on
// half-precision arrays, computing in AccType. Any other type is a troupe::Error naming `op` and the type.
template <typename Fn>
decltype(auto) FloatHalfSwitch(DType dtype, std::string_view op, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: return fn(float{});
    case DType::kFloat64: return fn(double{});
    case DType::kFloat16: return fn(half_t{});
    case DType::kBfloat16: return fn(bf16_t{});
    default: break;
  }
  throw Error(std::string(op) + ": element type " + DTypeName(dtype) +
              " is not supported; use float32, float64, float16 or bfloat16");
}

// Assign (op/operator.h) for every float type: a half type's kAddTo adds in float and rounds once.
template <typename T, typename V>
inline void AssignAcc(T* out, OpReqType req, V v) {
  if constexpr (kIsHalf<T>) {
    if (req == kAddTo) {
      *out = T(static_cast<float>(*out) + static_cast<float>(v));
    } else if (req != kNullOp) {
      *out = T(static_cast<float>(v));
    }
  } else {
    Assign(out, req, static_cast<T>(v));
  }
}

// Runs fn with a value of the element type for the types MXNet's element-wise and data-movement operators
// accept on integers as well as floats: float32, float64, uint8, int8, int32, int64; any other is a
// troupe::Error naming `op` and the type.
template <typename Fn>
decltype(auto) NumberSwitch(DType dtype, std::string_view op, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: return fn(float{});
    case DType::kFloat64: return fn(double{});
    case DType::kUint8: return fn(std::uint8_t{});
    case DType::kInt8: return fn(std::int8_t{});
    case DType::kInt32: return fn(std::int32_t{});
    case DType::kInt64: return fn(std::int64_t{});
    default: break;
  }
  throw Error(std::string(op) + ": element type " + DTypeName(dtype) +
              " is not supported; use float32, float64, uint8, int8, int32 or int64");
}

// "<op> has no implementation for <ctx>" (naming the missing CUDA support in a build without it): what
// CreateGpuOperator and SimpleOp throw for a device without functions.
[[noreturn]] void ThrowNoImplementation(const std::string& op, Context ctx);
// Loads the GPU backend, whose static initialisers register the GPU operators (op/src/operator.cc); false
// without CUDA or when it cannot be loaded. Call before looking up GPU code, with no registry lock held.
bool LoadGpuOperators();

// An axis parameter in [-ndim, ndim) as a dimension index in [0, ndim); otherwise a troupe::Error naming the
// operator, the parameter, the value and the accepted range.
inline int NormalizeAxis(int axis, int ndim, std::string_view op, std::string_view param) {
  if (axis < -ndim || axis >= ndim) {
    throw Error(std::string(op) + ": parameter '" + std::string(param) + "' is " + std::to_string(axis) +
                " but the input has " + std::to_string(ndim) + " dimensions; use an axis in [" + std::to_string(-ndim) +
                ", " + std::to_string(ndim) + ")");
  }
  return axis < 0 ? axis + ndim : axis;
}

// Sum of f(i) for i in [0, n) in independent partial sums, which the compiler turns into vector adds (a
// single running sum is a dependency chain it may not reorder without -ffast-math): the bias gradients'
// reduction over every output position and BatchNorm's statistics run at memory speed this way.
template <typename T, typename F>
T SumEach(std::int64_t n, F&& f) {
  constexpr int kLanes = 16;
  T acc[kLanes] = {};
  std::int64_t q = 0;
  for (; q + kLanes <= n; q += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += f(q + j);
  }
  T s = T(0);
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  for (; q < n; ++q) s += f(q);
  return s;
}

// Sum of n contiguous values (SumEach of p[i]).
template <typename T>
T SumContiguous(const T* p, std::int64_t n) {
  return SumEach<T>(n, [p](std::int64_t i) { return p[i]; });
}

// out[i] = f(i) (or += f(i) under kAddTo; nothing under kNullOp) for i in [0, n), with the request decided
// once outside the loop so that the compiler can vectorise it (Assign per element leaves a branch in it).
template <typename T, typename F>
void AssignEach(T* out, std::int64_t n, OpReqType req, F&& f) {
  if (req == kNullOp) return;
  if constexpr (kIsHalf<T>) {
    // f returns the value in float: a chunk of values in float first (that loop vectorises like float32's),
    // then one rounding pass to the half type (for bfloat16 the vector conversion, at memory speed). The
    // chunk is computed before any of it is written, so out may be f's input.
    constexpr std::int64_t kChunk = 512;
    float buf[kChunk];
    for (std::int64_t b = 0; b < n; b += kChunk) {
      const std::int64_t m = n - b < kChunk ? n - b : kChunk;
      for (std::int64_t j = 0; j < m; ++j) buf[j] = static_cast<float>(f(b + j));
      if (req == kAddTo) {
        for (std::int64_t j = 0; j < m; ++j) buf[j] += static_cast<float>(out[b + j]);
      }
      if constexpr (std::is_same_v<T, bf16_t>) {
        VecFloatToBf16(buf, reinterpret_cast<std::uint16_t*>(out + b), m);
      } else {
        for (std::int64_t j = 0; j < m; ++j) out[b + j] = T(buf[j]);
      }
    }
  } else if (req == kAddTo) {
    for (std::int64_t i = 0; i < n; ++i) out[i] += f(i);
  } else {
    for (std::int64_t i = 0; i < n; ++i) out[i] = f(i);
  }
}

}  // namespace troupe::internal
