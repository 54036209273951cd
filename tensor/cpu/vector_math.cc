#include "tensor/detail/vector_math.h"

#include <bit>
#include <cstdint>
#include <cstring>
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

// log(x) = e ln2 + log(m), x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) by Cephes' logf polynomial in
// m - 1, ln2 split in two as in ExpCore. Denormals are scaled by 2^23 first. Branch-free.
inline float LogOne(float x) {
  constexpr float kMinNormal = 1.17549435e-38f;
  const bool denormal = x < kMinNormal;  // also 0 and negatives: their results are replaced below
  const float xs = denormal ? x * 8388608.0f : x;
  const std::int32_t bits = std::bit_cast<std::int32_t>(xs);
  std::int32_t e = ((bits >> 23) & 0xff) - 126;
  float m = std::bit_cast<float>((bits & 0x007fffff) | 0x3f000000);  // in [0.5, 1)
  const bool low = m < 0.707106781186547524f;
  e -= low ? 1 : 0;
  m = low ? m + m - 1.0f : m - 1.0f;
  const float ef = static_cast<float>(e) - (denormal ? 23.0f : 0.0f);
  const float z = m * m;
  float y = 7.0376836292e-2f;
  y = y * m - 1.1514610310e-1f;
  y = y * m + 1.1676998740e-1f;
  y = y * m - 1.2420140846e-1f;
  y = y * m + 1.4249322787e-1f;
  y = y * m - 1.6668057665e-1f;
  y = y * m + 2.0000714765e-1f;
  y = y * m - 2.4999993993e-1f;
  y = y * m + 3.3333331174e-1f;
  y = y * m * z;
  y += -2.12194440e-4f * ef;
  y += -0.5f * z;
  float r = m + y + 0.693359375f * ef;
  r = x == std::numeric_limits<float>::infinity() ? x : r;
  r = x < 0.0f ? std::numeric_limits<float>::quiet_NaN() : r;
  r = x == 0.0f ? -std::numeric_limits<float>::infinity() : r;
  return x != x ? x : r;
}

// erf(x) = x P(x^2) / Q(x^2) on [-4, 4] (the rational approximation Eigen and XLA use; outside, erf rounds to
// +-1 in float). Branch-free.
inline float ErfOne(float x) {
  const float c = Clamp(x, -4.0f, 4.0f);
  const float z = c * c;
  float p = -2.72614225801306e-10f;
  p = p * z + 2.77068142495902e-08f;
  p = p * z - 2.10102402082508e-06f;
  p = p * z - 5.69250639462346e-05f;
  p = p * z - 7.34990630326855e-04f;
  p = p * z - 2.95459980854025e-03f;
  p = p * z - 1.60960333262415e-02f;
  float q = -1.45660718464996e-05f;
  q = q * z - 2.13374055278905e-04f;
  q = q * z - 1.68282697438203e-03f;
  q = q * z - 7.37332916720468e-03f;
  q = q * z - 1.42647390514189e-02f;
  const float r = c * (p / q);  // p / q is about -1.13 near 0: c * p alone would go denormal for tiny c
  return x != x ? x : r;
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

__attribute__((target_clones("avx512f", "avx2", "default"))) void VecLog(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = LogOne(x[i]);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void VecErf(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = ErfOne(x[i]);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void VecGelu(const float* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + ErfOne(v * 0.70710678118654752440f));
  }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void VecFloatToBf16(const float* x, std::uint16_t* y,
                                                                                   std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t b;
    std::memcpy(&b, x + i, 4);
    const std::uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16, quiet_nan = (b >> 16) | 0x40u;
    y[i] = static_cast<std::uint16_t>((b & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  }
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void VecBf16ToFloat(const std::uint16_t* x, float* y,
                                                                                   std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t b = static_cast<std::uint32_t>(x[i]) << 16;
    std::memcpy(y + i, &b, 4);
  }
}

}  // namespace troupe::internal
