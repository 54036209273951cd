// CPU kernels of the NDArray layer: elementwise arithmetic, fills, casts and random sampling.
#include <cmath>
#include <cstring>
#include <type_traits>

#include "tensor/detail/elementwise.h"
#include "tensor/detail/kernels.h"
#include "tensor/detail/philox.h"
#include "tensor/resource.h"

namespace troupe::internal {

const char* BinaryOpName(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return "add";
    case BinaryOp::kSub: return "sub";
    case BinaryOp::kMul: return "mul";
    case BinaryOp::kDiv: return "div";
  }
  return "binary";
}

namespace {

[[noreturn]] void ThrowBoolArithmetic(BinaryOp op) {
  throw Error(std::string("arithmetic '") + BinaryOpName(op) + "' is not defined for dtype bool; convert it to a number type first (NDArray::AsType; astype() in troupe shell)");
}

template <typename T, typename C, typename Op>
void Loop(const T* a, const T* b, T* o, std::int64_t n, Op op) {
  for (std::int64_t i = 0; i < n; ++i) o[i] = T(op(static_cast<C>(a[i]), static_cast<C>(b[i])));
}
template <typename T, typename C, typename Op>
void LoopScalar(const T* a, C s, T* o, std::int64_t n, Op op) {
  for (std::int64_t i = 0; i < n; ++i) o[i] = T(op(static_cast<C>(a[i]), s));
}

// Calls loop(f) with f the operator as a lambda, so that each loop is compiled for one operator (and
// vectorised); ApplyBinary with a constant operator folds to the bare arithmetic.
template <typename T, typename Looper>
void Dispatch(BinaryOp op, Looper&& loop) {
  using C = Compute<T>;
  switch (op) {
    case BinaryOp::kAdd: return loop([](C x, C y) { return ApplyBinary(BinaryOp::kAdd, x, y); });
    case BinaryOp::kSub: return loop([](C x, C y) { return ApplyBinary(BinaryOp::kSub, x, y); });
    case BinaryOp::kMul: return loop([](C x, C y) { return ApplyBinary(BinaryOp::kMul, x, y); });
    case BinaryOp::kDiv: return loop([](C x, C y) { return ApplyBinary(BinaryOp::kDiv, x, y); });
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

std::uint64_t SampleBlocks(std::int64_t n, DType dtype, Distribution dist) {
  const std::uint64_t un = static_cast<std::uint64_t>(n);
  // Words per element: float-like uniform 1, float-like normal 2, double uniform 2, double normal 4.
  std::uint64_t words = dtype == DType::kFloat64 ? 2 : 1;
  if (dist == Distribution::kNormal) words *= 2;
  return (un * words + 3) / 4;
}

void CpuSample(Distribution dist, const TBlob& out, std::uint64_t key, std::uint64_t base, double p1, double p2) {
  const std::int64_t n = out.Size();
  const bool normal = dist == Distribution::kNormal;
  DTypeSwitch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_floating_point_v<Compute<T>>) {
      throw Error(std::string(normal ? "SampleNormal" : "SampleUniform") +
                  ": random sampling needs a floating dtype (float32, float64, float16, bfloat16), not " +
                  DTypeName(DTypeOf<T>()));
    } else {
      // Each element takes `words` consecutive words; one Philox block serves 4 / words elements.
      constexpr bool kDouble = std::is_same_v<T, double>;
      const int words = (kDouble ? 2 : 1) * (normal ? 2 : 1), per_block = 4 / words;
      using C = Compute<T>;
      const C a = static_cast<C>(p1), b = static_cast<C>(normal ? p2 : p2 - p1);
      auto unit = [](const std::uint32_t* w) -> C {  // in [0, 1)
        if constexpr (kDouble) {
          return UniformDouble(w[0], w[1]);
        } else {
          return UniformFloat(w[0]);
        }
      };
      T* o = static_cast<T*>(out.dptr);
      std::uint32_t r[4];
      for (std::int64_t first = 0, blk = 0; first < n; first += per_block, ++blk) {
        PhiloxBlock(key, base + static_cast<std::uint64_t>(blk), r);
        for (int j = 0; j < per_block && first + j < n; ++j) {
          const std::uint32_t* w = r + j * words;
          if (normal) {  // Box-Muller (cosine branch)
            const C u1 = C(1) - unit(w), u2 = unit(w + words / 2);
            o[first + j] = T(a + b * std::sqrt(C(-2) * std::log(u1)) * std::cos(C(6.283185307179586) * u2));
          } else {
            o[first + j] = T(a + b * unit(w));
          }
        }
      }
    }
  });
}

}  // namespace troupe::internal
