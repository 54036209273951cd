// TShape, DType and the half/bfloat16 conversions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "tensor/detail/elementwise.h"
#include "tensor/tensor.h"

namespace troupe {
namespace {

TEST(DTypeTest, SizesNamesAndFlagsMatchMXNet) {
  EXPECT_EQ(static_cast<int>(DType::kFloat32), 0);
  EXPECT_EQ(static_cast<int>(DType::kFloat64), 1);
  EXPECT_EQ(static_cast<int>(DType::kFloat16), 2);
  EXPECT_EQ(static_cast<int>(DType::kUint8), 3);
  EXPECT_EQ(static_cast<int>(DType::kInt32), 4);
  EXPECT_EQ(static_cast<int>(DType::kInt8), 5);
  EXPECT_EQ(static_cast<int>(DType::kInt64), 6);
  EXPECT_EQ(static_cast<int>(DType::kBool), 7);
  EXPECT_EQ(static_cast<int>(DType::kBfloat16), 12);
  const std::pair<DType, std::size_t> sizes[] = {{DType::kFloat32, 4}, {DType::kFloat64, 8}, {DType::kFloat16, 2},
                                                 {DType::kUint8, 1},   {DType::kInt32, 4},   {DType::kInt8, 1},
                                                 {DType::kInt64, 8},   {DType::kBool, 1},    {DType::kBfloat16, 2}};
  for (auto [d, size] : sizes) {
    EXPECT_EQ(DTypeSize(d), size) << DTypeName(d);
    EXPECT_EQ(DTypeFromName(DTypeName(d)), d);
    EXPECT_TRUE(IsValidDTypeFlag(static_cast<int>(d)));
    DTypeSwitch(d, [&](auto tag) { EXPECT_EQ(sizeof(tag), size) << DTypeName(d); });
  }
  for (int bad : {-1, 8, 9, 11, 13, 100}) EXPECT_FALSE(IsValidDTypeFlag(bad)) << bad;
  EXPECT_THROW(DTypeSize(static_cast<DType>(9)), Error);
  try {
    DTypeFromName("float33");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("float32"), std::string::npos) << e.what();  // lists what is accepted
  }
}

TEST(TShapeTest, SizesStringsAndLimits) {
  EXPECT_FALSE(TShape().known());
  EXPECT_EQ(TShape().ndim(), -1);
  EXPECT_THROW(TShape().Size(), Error);
  EXPECT_EQ(TShape::Scalar().ndim(), 0);
  EXPECT_EQ(TShape::Scalar().Size(), 1);
  EXPECT_EQ(TShape::Scalar().ToString(), "()");
  EXPECT_EQ(TShape({2, 3, 4}).Size(), 24);
  EXPECT_EQ(TShape({2, 0, 4}).Size(), 0);
  EXPECT_EQ(TShape({2, 3}).ToString(), "(2,3)");
  EXPECT_EQ(TShape({5}).ToString(), "(5,)");
  EXPECT_EQ(TShape({2, -1}).ToString(), "(2,?)");
  EXPECT_FALSE(TShape({2, -1}).known());
  EXPECT_EQ(TShape({2, 3, 4}).ProdDims(1, 3), 12);
  EXPECT_EQ(TShape({2, 3}), TShape({2, 3}));
  EXPECT_NE(TShape({2, 3}), TShape({3, 2}));
  EXPECT_NE(TShape({6}), TShape({6, 1}));
  EXPECT_EQ(TShape::Filled(3, 7), TShape({7, 7, 7}));
  EXPECT_NO_THROW(TShape({1, 1, 1, 1, 1, 1, 1, 1}));
  EXPECT_THROW(TShape({1, 1, 1, 1, 1, 1, 1, 1, 1}), Error);  // 9 dims
  EXPECT_THROW(TShape({2, -2}), Error);
  EXPECT_THROW(TShape({1ll << 40, 1ll << 40}).Size(), Error);  // overflows int64
}

TEST(HalfTest, EveryHalfRoundTripsThroughFloat) {
  for (std::uint32_t bits = 0; bits < 65536; ++bits) {
    const float f = half_t::ToFloat(static_cast<std::uint16_t>(bits));
    const std::uint16_t back = half_t::FromFloat(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(half_t::ToFloat(back))) << bits;
    } else {
      ASSERT_EQ(back, bits) << "half 0x" << std::hex << bits << " -> " << f;
    }
  }
}

#if defined(__FLT16_MAX__)
// The compiler's own _Float16 conversion (round to nearest even) is the reference.
TEST(HalfTest, FloatToHalfMatchesTheCompilersConversion) {
  std::uint32_t x = 0x12345678u;
  for (int i = 0; i < 2000000; ++i) {
    x = x * 1664525u + 1013904223u;  // every bit pattern class: normals, subnormals, ties, overflow, NaN
    float f;
    std::memcpy(&f, &x, 4);
    if (std::isnan(f)) continue;
    const _Float16 h = static_cast<_Float16>(f);
    std::uint16_t ref;
    std::memcpy(&ref, &h, 2);
    ASSERT_EQ(half_t::FromFloat(f), ref) << "float bits 0x" << std::hex << x;
  }
  EXPECT_EQ(half_t::FromFloat(65520.0f), 0x7c00);  // rounds to infinity
  EXPECT_EQ(half_t::FromFloat(65519.0f), 0x7bff);
  EXPECT_EQ(half_t::FromFloat(std::ldexp(1.0f, -25)), 0x0000);  // tie between 0 and the smallest subnormal
  EXPECT_EQ(half_t::FromFloat(std::ldexp(1.5f, -25)), 0x0001);
}
#endif

TEST(Bfloat16Test, RoundsToNearestEvenAndKeepsNaN) {
  auto bits_of = [](float f) { return bf16_t(f).bits; };
  auto from_bits = [](std::uint32_t x) {
    float f;
    std::memcpy(&f, &x, 4);
    return f;
  };
  EXPECT_EQ(bits_of(1.0f), 0x3F80);
  EXPECT_EQ(bits_of(-2.0f), 0xC000);
  EXPECT_EQ(bits_of(from_bits(0x3F808000u)), 0x3F80);  // tie, even stays
  EXPECT_EQ(bits_of(from_bits(0x3F818000u)), 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(bits_of(from_bits(0x3F808001u)), 0x3F81);  // above the tie
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16_t(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(static_cast<float>(bf16_t(3.0f)), 3.0f);
}

TEST(ConvertTest, IntegersSaturateAndNaNGivesZero) {
  using internal::ConvertTo;
  EXPECT_EQ(ConvertTo<std::int8_t>(300.0), 127);
  EXPECT_EQ(ConvertTo<std::int8_t>(-300.0), -128);
  EXPECT_EQ(ConvertTo<std::uint8_t>(-5.0), 0);
  EXPECT_EQ(ConvertTo<std::int32_t>(std::numeric_limits<double>::quiet_NaN()), 0);
  EXPECT_EQ(ConvertTo<std::int64_t>(1e30), std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(ConvertTo<std::int32_t>(-2.7), -2);
  EXPECT_EQ(ConvertTo<std::uint8_t>(std::int64_t{1000}), 255);
  EXPECT_EQ(ConvertTo<std::int8_t>(std::int32_t{-1000}), -128);
  EXPECT_EQ(ConvertTo<bool>(0.5), true);
  EXPECT_EQ(ConvertTo<float>(half_t(1.5f)), 1.5f);
  EXPECT_EQ(static_cast<float>(ConvertTo<half_t>(std::int32_t{3})), 3.0f);
  EXPECT_EQ(internal::ApplyBinary(internal::BinaryOp::kDiv, std::numeric_limits<std::int32_t>::min(), -1),
            std::numeric_limits<std::int32_t>::min());
  EXPECT_EQ(internal::ApplyBinary(internal::BinaryOp::kDiv, 7, 0), 0);
  EXPECT_EQ(internal::ApplyBinary(internal::BinaryOp::kDiv, -7, 2), -3);
  EXPECT_EQ(internal::ApplyBinary(internal::BinaryOp::kAdd, std::numeric_limits<std::int32_t>::max(), 1),
            std::numeric_limits<std::int32_t>::min());
}

}  // namespace
}  // namespace troupe
