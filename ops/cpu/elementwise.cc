// CPU kernels of the NDArray layer: elementwise arithmetic, fills, casts and random sampling.
#include <cmath>
#include <cstring>
#include <type_traits>

#include "ops/internal/elementwise.h"
#include "ops/internal/kernels.h"
#include "ops/internal/philox.h"
#include "ops/resource.h"

namespace troupe::internal {

const char* BinaryOpName(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return "+";
    case BinaryOp::kSub: return "-";
    case BinaryOp::kMul: return "*";
    case BinaryOp::kDiv: return "/";
  }
  return "?";
}

namespace {

[[noreturn]] void ThrowBoolArithmetic(BinaryOp op) {
  throw Error(std::string("arithmetic '") + BinaryOpName(op) + "' is not defined for dtype bool; convert with AsType");
}

// The loops are written per operator so that the compiler vectorises them (a switch inside would not be).
template <typename T, typename C, typename Op>
void Loop(const T* a, const T* b, T* o, std::int64_t n, Op op) {
  for (std::int64_t i = 0; i < n; ++i) o[i] = T(op(static_cast<C>(a[i]), static_cast<C>(b[i])));
}
template <typename T, typename C, typename Op>
void LoopScalar(const T* a, C s, T* o, std::int64_t n, Op op) {
  for (std::int64_t i = 0; i < n; ++i) o[i] = T(op(static_cast<C>(a[i]), s));
}

template <typename T, typename Looper>
void Dispatch(BinaryOp op, Looper&& loop) {
  using C = Compute<T>;
  if constexpr (std::is_floating_point_v<C>) {
    switch (op) {
      case BinaryOp::kAdd: return loop([](C x, C y) { return x + y; });
      case BinaryOp::kSub: return loop([](C x, C y) { return x - y; });
      case BinaryOp::kMul: return loop([](C x, C y) { return x * y; });
      case BinaryOp::kDiv: return loop([](C x, C y) { return x / y; });
    }
  } else {
    switch (op) {
      case BinaryOp::kAdd: return loop([](C x, C y) { return ApplyBinary(BinaryOp::kAdd, x, y); });
      case BinaryOp::kSub: return loop([](C x, C y) { return ApplyBinary(BinaryOp::kSub, x, y); });
      case BinaryOp::kMul: return loop([](C x, C y) { return ApplyBinary(BinaryOp::kMul, x, y); });
      case BinaryOp::kDiv: return loop([](C x, C y) { return ApplyBinary(BinaryOp::kDiv, x, y); });
    }
  }
}

}  // namespace

void CpuBinary(BinaryOp op, const TBlob& lhs, const TBlob& rhs, const TBlob& out) {
  const std::int64_t n = out.Size();
  DTypeSwitch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      ThrowBoolArithmetic(op);
    } else {
      using C = Compute<T>;
      const T* a = static_cast<const T*>(lhs.dptr);
      const T* b = static_cast<const T*>(rhs.dptr);
      T* o = static_cast<T*>(out.dptr);
      Dispatch<T>(op, [&](auto f) { Loop<T, C>(a, b, o, n, f); });
    }
  });
}

void CpuBinaryScalar(BinaryOp op, const TBlob& lhs, double scalar, const TBlob& out) {
  const std::int64_t n = out.Size();
  DTypeSwitch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      ThrowBoolArithmetic(op);
    } else {
      using C = Compute<T>;
      const C s = static_cast<C>(ConvertTo<T>(scalar));
      const T* a = static_cast<const T*>(lhs.dptr);
      T* o = static_cast<T*>(out.dptr);
      Dispatch<T>(op, [&](auto f) { LoopScalar<T, C>(a, s, o, n, f); });
    }
  });
}

void CpuFill(const TBlob& out, double value) {
  const std::int64_t n = out.Size();
  DTypeSwitch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T v = ConvertTo<T>(value);
    T* o = static_cast<T*>(out.dptr);
    for (std::int64_t i = 0; i < n; ++i) o[i] = v;
  });
}

void CpuCast(const TBlob& in, const TBlob& out) {
  const std::int64_t n = out.Size();
  if (in.dtype == out.dtype) {
    if (in.dptr != out.dptr) std::memmove(out.dptr, in.dptr, out.Bytes());
    return;
  }
  DTypeSwitch(in.dtype, [&](auto in_tag) {
    using I = decltype(in_tag);
    DTypeSwitch(out.dtype, [&](auto out_tag) {
      using O = decltype(out_tag);
      const I* a = static_cast<const I*>(in.dptr);
      O* o = static_cast<O*>(out.dptr);
      for (std::int64_t i = 0; i < n; ++i) o[i] = ConvertTo<O>(a[i]);
    });
  });
}

std::uint64_t SampleBlocks(std::int64_t n, DType dtype, bool normal) {
  const std::uint64_t un = static_cast<std::uint64_t>(n);
  // Words per element: float-like uniform 1, float-like normal 2, double uniform 2, double normal 4.
  std::uint64_t words = dtype == DType::kFloat64 ? 2 : 1;
  if (normal) words *= 2;
  return (un * words + 3) / 4;
}

namespace {

template <typename T>
void CheckFloat(const char* what) {
  if constexpr (!std::is_floating_point_v<Compute<T>>) {
    throw Error(std::string(what) + ": random sampling needs a floating dtype (float32, float64, float16, bfloat16), not " +
                DTypeName(DTypeOf<T>()));
  }
}

}  // namespace

void CpuSampleUniform(const TBlob& out, std::uint64_t key, std::uint64_t base, double low, double high) {
  const std::int64_t n = out.Size();
  DTypeSwitch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    CheckFloat<T>("SampleUniform");
    if constexpr (std::is_floating_point_v<Compute<T>>) {
      T* o = static_cast<T*>(out.dptr);
      if constexpr (std::is_same_v<T, double>) {
        for (std::int64_t i = 0; i < n; ++i) {
          std::uint32_t r[4];
          PhiloxBlock(key, base + static_cast<std::uint64_t>(i) / 2, r);
          const int w = static_cast<int>(i % 2) * 2;
          o[i] = low + (high - low) * UniformDouble(r[w], r[w + 1]);
        }
      } else {
        const float lo = static_cast<float>(low), span = static_cast<float>(high - low);
        for (std::int64_t blk = 0; blk * 4 < n; ++blk) {
          std::uint32_t r[4];
          PhiloxBlock(key, base + static_cast<std::uint64_t>(blk), r);
          for (int w = 0; w < 4 && blk * 4 + w < n; ++w) o[blk * 4 + w] = T(lo + span * UniformFloat(r[w]));
        }
      }
    }
  });
}

void CpuSampleNormal(const TBlob& out, std::uint64_t key, std::uint64_t base, double mean, double stddev) {
  const std::int64_t n = out.Size();
  DTypeSwitch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    CheckFloat<T>("SampleNormal");
    if constexpr (std::is_floating_point_v<Compute<T>>) {
      T* o = static_cast<T*>(out.dptr);
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint32_t r[4];
        if constexpr (std::is_same_v<T, double>) {
          PhiloxBlock(key, base + static_cast<std::uint64_t>(i), r);
          const double u1 = 1.0 - UniformDouble(r[0], r[1]), u2 = UniformDouble(r[2], r[3]);
          o[i] = mean + stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
        } else {
          PhiloxBlock(key, base + static_cast<std::uint64_t>(i) / 2, r);
          const int w = static_cast<int>(i % 2) * 2;
          const float u1 = 1.0f - UniformFloat(r[w]), u2 = UniformFloat(r[w + 1]);
          o[i] = T(static_cast<float>(mean) +
                   static_cast<float>(stddev) * std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2));
        }
      }
    }
  });
}

}  // namespace troupe::internal
