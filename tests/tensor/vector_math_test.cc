// tensor/detail/vector_math.h against the C library evaluated in double and rounded to float: every 97th
// float bit pattern of the whole range (about 44 million values, both signs), the specials, and in place.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tensor/detail/vector_math.h"
#include "tensor/tensor.h"

namespace troupe::internal {
namespace {

// Distance in units in the last place between two finite floats of the same sign region (0 when equal).
std::int64_t UlpDistance(float a, float b) {
  auto key = [](float f) {
    const std::int32_t i = std::bit_cast<std::int32_t>(f);
    return i < 0 ? static_cast<std::int64_t>(std::numeric_limits<std::int32_t>::min()) - i : static_cast<std::int64_t>(i);
  };
  const std::int64_t d = key(a) - key(b);
  return d < 0 ? -d : d;
}

std::vector<float> Sweep() {
  std::vector<float> xs;
  for (std::uint64_t bits = 0; bits < (std::uint64_t{1} << 32); bits += 97) {
    const float f = std::bit_cast<float>(static_cast<std::uint32_t>(bits));
    if (std::isfinite(f)) xs.push_back(f);
  }
  for (float f : {0.0f, -0.0f, 0.625f, -0.625f, 88.3f, 88.72f, 88.73f, -87.3f, -87.4f, 1e-30f, -1e-30f}) xs.push_back(f);
  return xs;
}

struct Worst {
  std::int64_t ulp = 0;
  float at = 0;
};

template <class Vec, class Ref>
Worst Check(const std::vector<float>& xs, Vec vec, Ref ref, const char* name) {
  std::vector<float> ys(xs.size());
  vec(xs.data(), ys.data(), static_cast<std::int64_t>(xs.size()));
  Worst w;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const float want = static_cast<float>(ref(static_cast<double>(xs[i])));
    // Where the exact result is a denormal (or underflows), a flush to zero is documented.
    if (std::fpclassify(want) == FP_SUBNORMAL || (want == 0.0f && ys[i] == 0.0f)) continue;
    if (std::isinf(want)) {
      EXPECT_EQ(ys[i], want) << name << "(" << xs[i] << ")";
      continue;
    }
    const std::int64_t d = UlpDistance(ys[i], want);
    if (d > w.ulp) w = Worst{d, xs[i]};
  }
  std::printf("%s: worst %lld ulp at %.9g\n", name, static_cast<long long>(w.ulp), static_cast<double>(w.at));
  return w;
}

TEST(VectorMathTest, ExpWithinTwoUlpOverTheFloatRange) {
  const Worst w = Check(Sweep(), VecExp, [](double x) { return std::exp(x); }, "exp");
  EXPECT_LE(w.ulp, 2) << "at " << w.at;
}

TEST(VectorMathTest, TanhWithinThreeUlpOverTheFloatRange) {
  const Worst w = Check(Sweep(), VecTanh, [](double x) { return std::tanh(x); }, "tanh");
  EXPECT_LE(w.ulp, 3) << "at " << w.at;
}

TEST(VectorMathTest, SigmoidWithinTwoUlpOverTheFloatRange) {
  const Worst w = Check(Sweep(), VecSigmoid, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, "sigmoid");
  EXPECT_LE(w.ulp, 2) << "at " << w.at;
}

TEST(VectorMathTest, LogWithinOneUlpOverThePositiveFloats) {
  std::vector<float> xs;
  for (float x : Sweep()) {
    if (x > 0.0f) xs.push_back(x);
  }
  for (float x : {1.0f, 0.70710677f, 0.70710683f, 1.41421354f, 1e-45f, 1.1754942e-38f, 3.4028235e38f}) xs.push_back(x);
  const Worst w = Check(xs, VecLog, [](double x) { return std::log(x); }, "log");
  EXPECT_LE(w.ulp, 1) << "at " << w.at;
}

TEST(VectorMathTest, ErfWithinSixUlpOverTheFloatRange) {
  const Worst w = Check(Sweep(), VecErf, [](double x) { return std::erf(x); }, "erf");
  EXPECT_LE(w.ulp, 6) << "at " << w.at;
}

// GELU against the formula in double: the error is erf's, times 0.5 |x|, plus the final rounding.
TEST(VectorMathTest, GeluIsTheErfFormula) {
  std::vector<float> xs;
  for (int i = -20000; i <= 20000; ++i) xs.push_back(static_cast<float>(i) * 1e-3f);
  for (float x : Sweep()) {
    if (std::abs(x) < 1e30f) xs.push_back(x);
  }
  std::vector<float> ys(xs.size());
  VecGelu(xs.data(), ys.data(), static_cast<std::int64_t>(xs.size()));
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i];
    const double want = 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    const double tol = 5.0 * std::numeric_limits<float>::epsilon() * (std::abs(want) + 0.5 * std::abs(x)) +
                       2.0 * std::numeric_limits<float>::denorm_min();  // denormal results keep fewer bits
    ASSERT_LE(std::abs(ys[i] - want), tol) << "gelu(" << xs[i] << ") = " << ys[i] << ", want " << want;
  }
}

// Every float32 whose bit pattern is a multiple of 97 (44 million values: every exponent, both signs, NaNs and
// infinities, the round-to-even halfway cases among them), converted to bfloat16 as bf16_t converts (round to
// nearest even, a NaN stays a quiet NaN), and every bfloat16 back to float32 exactly.
TEST(VectorMathTest, Bfloat16ConversionsAreBf16tsBothWays) {
  constexpr std::uint64_t kStep = 97;
  std::vector<float> x;
  x.reserve(std::size_t{1} << 20);
  std::vector<std::uint16_t> y;
  std::uint64_t checked = 0;
  for (std::uint64_t b = 0; b <= 0xffffffffull; b += kStep) {
    x.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(b)));
    if (x.size() == x.capacity() || b + kStep > 0xffffffffull) {
      y.assign(x.size(), 0);
      troupe::internal::VecFloatToBf16(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
      for (std::size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(y[i], troupe::bf16_t(x[i]).bits) << "bits 0x" << std::hex << std::bit_cast<std::uint32_t>(x[i]);
      }
      checked += x.size();
      x.clear();
    }
  }
  EXPECT_GT(checked, 44000000u);
  std::vector<std::uint16_t> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::uint16_t>(i);
  std::vector<float> back(all.size());
  troupe::internal::VecBf16ToFloat(all.data(), back.data(), static_cast<std::int64_t>(all.size()));
  for (std::size_t i = 0; i < all.size(); ++i) {
    troupe::bf16_t h;
    h.bits = all[i];
    ASSERT_EQ(std::bit_cast<std::uint32_t>(back[i]), std::bit_cast<std::uint32_t>(static_cast<float>(h))) << i;
  }
}

TEST(VectorMathTest, SpecialsAndInPlace) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {nan, inf, -inf, 0.0f, -0.0f, 1000.0f, -1000.0f};
  std::vector<float> y(x.size());
  VecExp(x.data(), y.data(), 7);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], inf);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], 1.0f);
  EXPECT_EQ(y[5], inf);
  EXPECT_EQ(y[6], 0.0f);
  VecTanh(x.data(), y.data(), 7);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(y[2], -1.0f);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_EQ(y[5], 1.0f);
  EXPECT_EQ(y[6], -1.0f);
  VecSigmoid(x.data(), y.data(), 7);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], 0.5f);
  EXPECT_EQ(y[5], 1.0f);
  EXPECT_EQ(y[6], 0.0f);
  VecLog(x.data(), y.data(), 7);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], inf);
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_EQ(y[3], -inf);
  EXPECT_EQ(y[4], -inf);
  EXPECT_TRUE(std::isnan(y[6]));
  VecErf(x.data(), y.data(), 7);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(y[2], -1.0f);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_EQ(y[5], 1.0f);
  EXPECT_EQ(y[6], -1.0f);
  VecGelu(x.data(), y.data(), 7);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], inf);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_EQ(y[5], 1000.0f);
  EXPECT_EQ(y[6], 0.0f);
  // In place, and lengths that leave a remainder after the vector loop.
  for (int n : {1, 7, 15, 17, 33}) {
    std::vector<float> a(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) a[static_cast<std::size_t>(i)] = 0.37f * static_cast<float>(i - n / 2);
    std::vector<float> want(a.size());
    VecTanh(a.data(), want.data(), n);
    VecTanh(a.data(), a.data(), n);
    EXPECT_EQ(a, want) << "n=" << n;
  }
}

}  // namespace
}  // namespace troupe::internal
