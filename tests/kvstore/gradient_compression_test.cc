// 2-bit gradient compression: the compressed words and residuals against MXNet 1.9.1's own kernels
// (reference values below), encode/decode against a reference written here from the format's description,
// error feedback over several rounds, and the errors.
#include "kvstore/gradient_compression.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/common/op_test_util.h"

namespace troupe {
namespace {

using test::ExpectError;

static_assert(std::endian::native == std::endian::little, "the reference words assume a little-endian host");

// The compressed array's float32 elements as the 32-bit words they hold.
std::vector<std::uint32_t> Words(const NDArray& compressed) {
  const std::vector<float> f = compressed.ToVector<float>();
  std::vector<std::uint32_t> w(f.size());
  if (!f.empty()) std::memcpy(w.data(), f.data(), f.size() * sizeof(float));
  return w;
}

NDArray FromWords(const std::vector<std::uint32_t>& w) {
  std::vector<float> f(w.size());
  if (!w.empty()) std::memcpy(f.data(), w.data(), w.size() * sizeof(float));
  return NDArray::FromVector(f, TShape{static_cast<std::int64_t>(f.size())});
}

// Reference encoder, written from the format's description rather than MXNet's loop: value i goes to word
// i / 16; inside the word (little-endian) byte k / 4 with k = i % 16, at bit 6 - 2 (k % 4) of that byte.
// Code 3 (binary 11) is +threshold, 2 (10) -threshold, 0 zero.
int BitOffset(std::int64_t i) {
  const int k = static_cast<int>(i % 16);
  return 8 * (k / 4) + 6 - 2 * (k % 4);
}

struct RefResult {
  std::vector<std::uint32_t> words;
  std::vector<float> residual;
};

RefResult RefQuantize(const std::vector<float>& grad, std::vector<float> residual, float t) {
  RefResult out;
  out.words.assign((grad.size() + 15) / 16, 0u);
  for (std::size_t i = 0; i < grad.size(); ++i) {
    const float r = residual[i] + grad[i];
    std::uint32_t code = 0;
    float sent = 0.f;
    if (r >= t) {
      code = 3;
      sent = t;
    } else if (r <= -t) {
      code = 2;
      sent = -t;
    }
    out.words[i / 16] |= code << BitOffset(static_cast<std::int64_t>(i));
    residual[i] = r - sent;
  }
  out.residual = std::move(residual);
  return out;
}

std::vector<float> RefDequantize(const std::vector<std::uint32_t>& words, std::int64_t n, float t) {
  std::vector<float> out(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t code = (words[static_cast<std::size_t>(i / 16)] >> BitOffset(i)) & 3u;
    out[static_cast<std::size_t>(i)] = code == 3 ? t : code == 2 ? -t : 0.f;
  }
  return out;
}

NDArray Array(const std::vector<float>& v, const TShape& shape) { return NDArray::FromVector(v, shape); }
NDArray Array(const std::vector<float>& v) { return Array(v, TShape{static_cast<std::int64_t>(v.size())}); }

GradientCompression TwoBit(const std::string& threshold) {
  return GradientCompression(Kwargs{{"type", "2bit"}, {"threshold", threshold}});
}

TEST(GradientCompressionTest, ParamsAndCompressedSize) {
  EXPECT_EQ(GradientCompression(Kwargs{{"type", "2bit"}}).threshold(), 0.5f);
  EXPECT_EQ(TwoBit("0.25").threshold(), 0.25f);
  EXPECT_EQ(TwoBit("3").threshold(), 3.f);
  const std::vector<std::pair<std::int64_t, std::int64_t>> sizes = {{0, 0},  {1, 1},  {15, 1},     {16, 1},    {17, 2},
                                                                    {32, 2}, {33, 3}, {1600, 100}, {1601, 101}};
  for (const auto& [n, words] : sizes) EXPECT_EQ(GradientCompression::CompressedSize(n), words) << n;
}

// Reference values made by MXNet 1.9.1's own GradientCompression::Quantize / Dequantize (CPU), called
// through ctypes on libmxnet.so (the C++ symbols are exported; an NDArrayHandle is an mxnet::NDArray*):
//
//   import ctypes, numpy as np, mxnet as mx
//   lib = mx.base._LIB
//   gc = ctypes.create_string_buffer(64)
//   getattr(lib, '_ZN5mxnet7kvstore19GradientCompressionC1Ev')(gc)
//   getattr(lib, '_ZN5mxnet7kvstore19GradientCompression20SetTwoBitCompressionEf')(gc, ctypes.c_float(0.5))
//   quant = getattr(lib, '_ZN5mxnet7kvstore19GradientCompression8QuantizeERKNS_7NDArrayEPS2_S5_i')
//   dequant = getattr(lib, '_ZN5mxnet7kvstore19GradientCompression10DequantizeERKNS_7NDArrayEPS2_i')
//   g = mx.nd.array(kGrad); r = mx.nd.array(kResidual); c = mx.nd.zeros((2,))
//   quant(gc, g.handle, c.handle, r.handle, 0)
//   print(['0x%08x' % w for w in np.frombuffer(c.asnumpy().tobytes(), dtype='<u4')], r.asnumpy().tolist())
//   o = mx.nd.zeros((21,)); dequant(gc, c.handle, o.handle, 0); print(o.asnumpy().tolist())
TEST(GradientCompressionTest, MatchesMxnetWords) {
  const std::vector<float> grad = {0.5f, -0.5f, 0.49f, -0.49f, 0.75f, -0.75f, 0.f,   1.f, -1.f, 0.25f, -0.25f,
                                   2.f,  -2.f,  0.5f,  0.f,    -0.5f, 0.6f,   -0.6f, 0.f, 0.5f, -3.f};
  const std::vector<float> residual0 = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f,  0.f,   0.f, 0.f,
                                        0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.5f, 0.25f, 0.f};
  const std::vector<std::uint32_t> mx_words = {0xb283e3e0u, 0x000080efu};
  // float32 results printed as doubles by MXNet: 0.49f, 0.6f - 0.5f, ...
  const std::vector<float> mx_residual = {0.f,
                                          0.f,
                                          0.49000000953674316f,
                                          -0.49000000953674316f,
                                          0.25f,
                                          -0.25f,
                                          0.f,
                                          0.5f,
                                          -0.5f,
                                          0.25f,
                                          -0.25f,
                                          1.5f,
                                          -1.5f,
                                          0.f,
                                          0.f,
                                          0.f,
                                          0.10000002384185791f,
                                          -0.10000002384185791f,
                                          0.f,
                                          0.25f,
                                          -2.5f};
  const std::vector<float> mx_decoded = {0.5f, -0.5f, 0.f,  0.f, 0.5f,  -0.5f, 0.f,   0.5f, -0.5f, 0.f,  0.f,
                                         0.5f, -0.5f, 0.5f, 0.f, -0.5f, 0.5f,  -0.5f, 0.5f, 0.5f,  -0.5f};
  const GradientCompression gc = TwoBit("0.5");
  // A 3 x 7 gradient: the layout follows the flat order, whatever the shape.
  NDArray g = Array(grad, TShape{3, 7}), r = Array(residual0, TShape{3, 7});
  NDArray c(TShape{2}, Context::CPU());
  c = 12345.0;  // every byte must be written, as MXNet zeroes each one
  gc.Quantize(g, r, c);
  EXPECT_EQ(Words(c), mx_words);
  EXPECT_EQ(r.ToVector<float>(), mx_residual);
  NDArray out(TShape{21}, Context::CPU());
  gc.Dequantize(c, out);
  EXPECT_EQ(out.ToVector<float>(), mx_decoded);
  // The reference encoder agrees (it checks the reference as much as the code).
  const RefResult ref = RefQuantize(grad, residual0, 0.5f);
  EXPECT_EQ(ref.words, mx_words);
  EXPECT_EQ(ref.residual, mx_residual);
}

// MXNet 1.9.1's Dequantize of the word 0x1b1b1b1b (codes 00 01 10 11 in every byte; 01 is never written by
// Quantize), same snippet: w = np.array([0x1b1b1b1b], dtype='<u4').view(np.float32); dequant(gc,
// mx.nd.array(w).handle, o.handle, 0) with o of 16 values -> [0, 0, -0.5, 0.5] four times.
TEST(GradientCompressionTest, DequantizeEveryCodeAsMxnet) {
  const GradientCompression gc = TwoBit("0.5");
  NDArray out(TShape{16}, Context::CPU());
  gc.Dequantize(FromWords({0x1b1b1b1bu}), out);
  std::vector<float> expected;
  for (int k = 0; k < 4; ++k) expected.insert(expected.end(), {0.f, 0.f, -0.5f, 0.5f});
  EXPECT_EQ(out.ToVector<float>(), expected);
  // Bits past the last value are ignored: 5 values from a word whose other codes are all 11.
  NDArray five(TShape{5}, Context::CPU());
  gc.Dequantize(FromWords({0xffff8bffu}), five);  // bytes ff 8b: 11 11 11 11 | 10 00 10 11
  EXPECT_EQ(five.ToVector<float>(), (std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f, -0.5f}));
}

// Four rounds with error feedback, from MXNet 1.9.1 (same snippet, threshold 0.25):
//   r = mx.nd.zeros((37,)); c = mx.nd.zeros((3,))
//   for rnd in range(4):
//       g = mx.nd.array([((7 * i + 3 * rnd) % 13 - 6) / 16.0 for i in range(37)])
//       quant(gc, g.handle, c.handle, r.handle, 0); print(words of c)
//   print([float(x) * 16 for x in r.asnumpy()])
TEST(GradientCompressionTest, RoundsMatchMxnet) {
  const std::vector<std::vector<std::uint32_t>> mx_words = {{0x22338388u, 0x88c8cc20u, 0x00000033u},
                                                            {0x2c2032b3u, 0x330b88ccu, 0x00000022u},
                                                            {0xc80c0220u, 0x00328300u, 0x0000c020u},
                                                            {0x0800cc22u, 0x2c0200b3u, 0x000000c0u}};
  const std::vector<float> mx_residual16 = {2, 0,  2,  0,  2,  0,  2, -1, -3, -1, -3, -1, 1, 2, 0,  2,  0,  2, 0,
                                            2, -1, -3, -1, -3, -1, 1, 2,  0,  2,  0,  2,  0, 2, -1, -3, -1, -3};
  const GradientCompression gc = TwoBit("0.25");
  NDArray r = NDArray::Zeros(TShape{37}, Context::CPU());
  NDArray c(TShape{3}, Context::CPU());
  for (int rnd = 0; rnd < 4; ++rnd) {
    std::vector<float> g(37);
    for (int i = 0; i < 37; ++i) g[i] = static_cast<float>((7 * i + 3 * rnd) % 13 - 6) / 16.f;
    gc.Quantize(Array(g), r, c);
    EXPECT_EQ(Words(c), mx_words[rnd]) << "round " << rnd;
  }
  std::vector<float> residual = r.ToVector<float>();
  for (float& v : residual) v *= 16.f;
  EXPECT_EQ(residual, mx_residual16);
}

// Random values around the thresholds (exactly at, one ulp inside and outside), sizes that are and are not
// multiples of 16, the empty array: words, residuals and decoded values equal the reference's exactly.
TEST(GradientCompressionTest, MatchesReference) {
  std::mt19937 rng(7);
  const float t = 0.375f;
  const std::vector<float> special = {t,
                                      -t,
                                      std::nextafter(t, 0.f),
                                      std::nextafter(-t, 0.f),
                                      std::nextafter(t, 1.f),
                                      std::nextafter(-t, -1.f),
                                      0.f,
                                      2 * t,
                                      -2 * t};
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  std::uniform_int_distribution<int> pick(0, 2 * static_cast<int>(special.size()) - 1);
  const GradientCompression gc = TwoBit("0.375");
  for (const std::int64_t n : {0, 1, 3, 15, 16, 17, 31, 32, 33, 100, 1000}) {
    SCOPED_TRACE(n);
    std::vector<float> grad(n), residual(n);
    for (std::int64_t i = 0; i < n; ++i) {
      const int p = pick(rng);
      grad[i] = p < static_cast<int>(special.size()) ? special[p] : uni(rng);
      residual[i] = (i % 3 == 0) ? 0.f : uni(rng) * 0.5f;
    }
    const RefResult ref = RefQuantize(grad, residual, t);
    NDArray g = Array(grad), r = Array(residual);
    NDArray c(TShape{GradientCompression::CompressedSize(n)}, Context::CPU());
    gc.Quantize(g, r, c);
    EXPECT_EQ(Words(c), ref.words);
    EXPECT_EQ(r.ToVector<float>(), ref.residual);
    EXPECT_EQ(g.ToVector<float>(), grad);  // the gradient is only read
    NDArray out(TShape{n}, Context::CPU());
    gc.Dequantize(c, out);
    EXPECT_EQ(out.ToVector<float>(), RefDequantize(ref.words, n, t));
  }
}

// Error feedback: over several rounds nothing is lost. With gradients that are multiples of 1/64 in
// [-1, 1] and threshold 0.25 every sum is exact in float, so after every round sum(decoded) + residual ==
// sum(gradients) holds exactly, element by element.
TEST(GradientCompressionTest, ErrorFeedbackLosesNothing) {
  const std::int64_t n = 45;
  const GradientCompression gc = TwoBit("0.25");
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> k(-64, 64);
  NDArray r = NDArray::Zeros(TShape{n}, Context::CPU());
  NDArray c(TShape{GradientCompression::CompressedSize(n)}, Context::CPU());
  NDArray decoded(TShape{n}, Context::CPU());
  std::vector<double> sum_grad(n, 0.0), sum_sent(n, 0.0);
  bool any_sent = false;
  for (int round = 0; round < 8; ++round) {
    std::vector<float> g(n);
    for (std::int64_t i = 0; i < n; ++i) {
      g[i] = static_cast<float>(k(rng)) / 64.f;
      sum_grad[i] += g[i];
    }
    gc.Quantize(Array(g), r, c);
    gc.Dequantize(c, decoded);
    const std::vector<float> d = decoded.ToVector<float>();
    const std::vector<float> res = r.ToVector<float>();
    for (std::int64_t i = 0; i < n; ++i) {
      sum_sent[i] += d[i];
      // Nothing lost so far, and what stays behind has the sign of what was sent (one threshold at most
      // goes per round), or is below the threshold when nothing went.
      EXPECT_EQ(sum_sent[i] + res[i], sum_grad[i]) << "round " << round << " value " << i;
      if (d[i] == 0.25f) {
        EXPECT_GE(res[i], 0.f) << i;
        any_sent = true;
      } else if (d[i] == -0.25f) {
        EXPECT_LE(res[i], 0.f) << i;
        any_sent = true;
      } else {
        EXPECT_EQ(d[i], 0.f) << i;
        EXPECT_LT(std::fabs(res[i]), 0.25f) << i;
      }
    }
  }
  EXPECT_TRUE(any_sent);
}

TEST(GradientCompressionTest, BadParams) {
  ExpectError([] { GradientCompression(Kwargs{{"type", "1bit"}}); }, {"type '1bit'", "2bit"});
  ExpectError([] { GradientCompression(Kwargs{{"type", "none"}}); }, {"type 'none'", "2bit"});
  ExpectError([] { GradientCompression(Kwargs{{"threshold", "0.5"}}); }, {"gradient compression", "type"});
  ExpectError([] { TwoBit("0"); }, {"threshold", "greater than 0"});
  ExpectError([] { TwoBit("-0.5"); }, {"threshold", "greater than 0"});
  ExpectError([] { TwoBit("inf"); }, {"threshold"});
  ExpectError([] { TwoBit("abc"); }, {"threshold"});
  ExpectError([] { GradientCompression(Kwargs{{"type", "2bit"}, {"treshold", "0.5"}}); }, {"treshold"});
  ExpectError([] { GradientCompression::CompressedSize(-1); }, {"CompressedSize", "-1"});
}

TEST(GradientCompressionTest, BadArrays) {
  const GradientCompression gc = TwoBit("0.5");
  const Context cpu = Context::CPU();
  NDArray g = NDArray::Zeros(TShape{17}, cpu), r = NDArray::Zeros(TShape{17}, cpu);
  NDArray c(TShape{2}, cpu), out(TShape{17}, cpu);
  // Wrong compressed size, both ways.
  NDArray c1(TShape{1}, cpu), c3(TShape{3}, cpu);
  ExpectError([&] { gc.Quantize(g, r, c1); }, {"Quantize", "compressed", "1 elements", "= 2"});
  ExpectError([&] { gc.Quantize(g, r, c3); }, {"Quantize", "compressed", "3 elements", "= 2"});
  ExpectError([&] { gc.Dequantize(c1, out); }, {"Dequantize", "1 elements", "= 2"});
  // Residual of another shape.
  NDArray r16 = NDArray::Zeros(TShape{16}, cpu);
  ExpectError([&] { gc.Quantize(g, r16, c); }, {"Quantize", "residual", "(16,)", "(17,)"});
  // Other dtypes.
  NDArray g64 = NDArray::Zeros(TShape{17}, cpu, DType::kFloat64);
  ExpectError([&] { gc.Quantize(g64, r, c); }, {"Quantize", "gradient", "float64", "float32"});
  NDArray c16(TShape{2}, cpu, DType::kFloat16);
  ExpectError([&] { gc.Quantize(g, r, c16); }, {"Quantize", "compressed", "float16"});
  NDArray out64(TShape{17}, cpu, DType::kFloat64);
  ExpectError([&] { gc.Dequantize(c, out64); }, {"Dequantize", "output", "float64"});
  // None arrays, and the compressed values on the gradient's memory.
  ExpectError([&] { gc.Quantize(NDArray(), r, c); }, {"Quantize", "gradient", "none"});
  NDArray big = NDArray::Zeros(TShape{19}, cpu);
  ExpectError([&] { gc.Quantize(big.Slice(0, 17), r, big.Slice(17, 19)); }, {"share memory"});
  // Arrays on two devices.
  NDArray r_cpu1 = NDArray::Zeros(TShape{17}, Context::CPU(1));
  ExpectError([&] { gc.Quantize(g, r_cpu1, c); }, {"Quantize", "cpu(0)", "cpu(1)"});
  // Nothing was pushed by the failed calls: the arrays are untouched.
  EXPECT_EQ(r.ToVector<float>(), std::vector<float>(17, 0.f));
}

}  // namespace
}  // namespace troupe
