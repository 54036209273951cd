#include "tensor/detail/vector_math.h"

#include <bit>
#include <cstdint>
#include <limits>

namespace troupe::internal {
namespace {

// e^x = p * 2^n with x = n ln2 + r, |r| <= ln2 / 2, and p = e^r by Cephes' expf polynomial. Requires x in
// [ln(FLT_MIN), ln(FLT_MAX)] (callers clamp), so n is in [-126, 128]; 2^n is applied as two exponent-bit
// factors (2^(n-1) * 2 when n > 0) so that n = 128 stays representable. Branch-free: a loop of it vectorises.
inline float ExpCore(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer (in the low bits)
  const float t = x * kLog2e + kRound;
  const float n = t - kRound;
  const std::int32_t ni = std::bit_cast<std::int32_t>(t) - std::bit_cast<std::int32_t>(kRound);
  float r = x - n * 0.693359375f;  // ln2 split in two (Cephes C1, C2): r stays exact
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const std::int32_t high = ni > 0 ? 1 : 0;
  return p * std::bit_cast<float>((ni - high + 127) << 23) * (high != 0 ? 2.0f : 1.0f);
}

inline float Clamp(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

inline float ExpOne(float x) {
  // Above ln(FLT_MAX) the result overflows (inf, as expf); below ln(FLT_MIN) it would be a denormal: 0.
  constexpr float kLnMin = -87.3365447f;
  constexpr float kLnMax = 88.7228394f;
  const float e = ExpCore(Clamp(x, kLnMin, kLnMax));
  const float in_range = x > kLnMax ? std::numeric_limits<float>::infinity() : (x < kLnMin ? 0.0f : e);
  return x != x ? x : in_range;
}

inline float TanhOne(float x) {
  const float a = x < 0.0f ? -x : x;
  // |x| < 0.625: Cephes' tanhf polynomial (no cancellation near 0); else (1 - e) / (1 + e), e = exp(-2|x|),
  // which is in (0, 1] and reaches 0 (tanh = 1) for |x| > 43.6.
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float e = ExpCore(Clamp(-2.0f * a, -87.3f, 0.0f));
  const float big_abs = (1.0f - e) / (1.0f + e);
  const float big = x < 0.0f ? -big_abs : big_abs;
  const float r = a < 0.625f ? small : big;
  return x != x ? x : r;
}

inline float SigmoidOne(float x) {
  // 1 / (1 + e^-x): e^-x overflows to inf below about -88.7, giving 0 as the C library's formula does.
  return 1.0f / (1.0f + ExpOne(-x));
}

}  // namespace

// One copy per instruction set; the loader picks the widest the processor supports.
__attribute__((target_clones("avx512f", "avx2", "default"))) void VecExp(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = ExpOne(x[i]);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void VecTanh(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = TanhOne(x[i]);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void VecSigmoid(const float* x, float* y,
                                                                               std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = SigmoidOne(x[i]);
}

}  // namespace troupe::internal
