// Math the activation, normalisation, dropout and softmax operators share on both devices (namespace
// act_norm): float/double overloads of the C library's functions usable in host and device code, the
// Philox uniform numbers of Dropout and rrelu (the same words as the NDArray sampling kernels), and the
// (outer, n, inner) view of a tensor around one axis. Pure functions: thread-safe. Compiles under nvcc.
#pragma once

#include <cmath>
#include <cstdint>

#include "tensor/detail/philox.h"
#include "tensor/tensor.h"

namespace troupe {

namespace act_norm {

// Math on float or double with the C library's functions (available on host and device).
template <typename T>
TROUPE_HOST_DEVICE inline T Exp(T x) {
  if constexpr (sizeof(T) == 4) return expf(x); else return exp(x);
}
template <typename T>
TROUPE_HOST_DEVICE inline T Expm1(T x) {
  if constexpr (sizeof(T) == 4) return expm1f(x); else return expm1(x);
}
template <typename T>
TROUPE_HOST_DEVICE inline T Log1p(T x) {
  if constexpr (sizeof(T) == 4) return log1pf(x); else return log1p(x);
}
template <typename T>
TROUPE_HOST_DEVICE inline T Log(T x) {
  if constexpr (sizeof(T) == 4) return logf(x); else return log(x);
}
template <typename T>
TROUPE_HOST_DEVICE inline T Tanh(T x) {
  if constexpr (sizeof(T) == 4) return tanhf(x); else return tanh(x);
}
template <typename T>
TROUPE_HOST_DEVICE inline T Erf(T x) {
  if constexpr (sizeof(T) == 4) return erff(x); else return erf(x);
}
template <typename T>
TROUPE_HOST_DEVICE inline T Sqrt(T x) {
  if constexpr (sizeof(T) == 4) return sqrtf(x); else return sqrt(x);
}
template <typename T>
TROUPE_HOST_DEVICE inline T Abs(T x) {
  return x < T(0) ? -x : x;
}

// ---- random numbers (Dropout, rrelu) ----
// A uniform number in [0, 1) for element i of a draw that Reserve()d RandomBlocks(n) blocks at `base`:
// the same Philox words as internal::CpuSample/GpuSample's uniform float fill, on both devices.
TROUPE_HOST_DEVICE inline float UniformAt(std::uint64_t key, std::uint64_t base, std::uint64_t i) {
  return static_cast<float>(internal::PhiloxWord(key, base, i) >> 8) * (1.0f / 16777216.0f);
}
inline std::uint64_t RandomBlocks(std::int64_t n) { return (static_cast<std::uint64_t>(n) + 3) / 4; }

// ---- layout helpers ----
// A tensor seen as (outer, n, inner) around one axis.
struct AxisView {
  std::int64_t outer = 1, n = 1, inner = 1;
};
inline AxisView ViewAround(const TShape& s, int axis) {
  AxisView v;
  v.outer = s.ProdDims(0, axis);
  v.n = s[axis];
  v.inner = s.ProdDims(axis + 1, s.ndim());
  return v;
}
}  // namespace act_norm

}  // namespace troupe
