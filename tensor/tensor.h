// Tensor basics shared by every module that moves data: element types (DType, numbered as MXNet's type
// flags so .params files map directly), shapes (TShape, up to kMaxDims dimensions) and TBlob, a non-owning
// view of a tensor's memory on a device.
//
// All three are plain values: copying is cheap and thread-safe. A TBlob does not keep its memory alive; it
// is handed to functions the engine runs while the memory's variable is held (see tensor/ndarray.h).
//
// This header also compiles under nvcc, so CUDA kernels use the same half/bfloat16 types and DType switch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "base/context.h"
#include "base/error.h"

#if defined(__CUDACC__)
#define TROUPE_HOST_DEVICE __host__ __device__
#else
#define TROUPE_HOST_DEVICE
#endif

namespace troupe {

// Bit casts between float and its 32 bits, on the host and in CUDA device code.
TROUPE_HOST_DEVICE inline std::uint32_t FloatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
#endif
}
TROUPE_HOST_DEVICE inline float BitsFloat(std::uint32_t x) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(x);
#else
  float f;
  std::memcpy(&f, &x, 4);
  return f;
#endif
}

// Element types. The values are MXNet's type flags (mshadow TypeFlag): they are what .params files store.
enum class DType : int {
  kFloat32 = 0,
  kFloat64 = 1,
  kFloat16 = 2,
  kUint8 = 3,
  kInt32 = 4,
  kInt8 = 5,
  kInt64 = 6,
  kBool = 7,
  kBfloat16 = 12,
};

// Size of one element in bytes. Throws troupe::Error for a value that is not a DType.
std::size_t DTypeSize(DType dtype);
// "float32", "float64", "float16", "uint8", "int32", "int8", "int64", "bool", "bfloat16".
const char* DTypeName(DType dtype);
// The DType named `name` (the names above). Throws troupe::Error listing the accepted names.
DType DTypeFromName(const std::string& name);
// True when `flag` is the number of a DType troupe supports (0-7 and 12).
bool IsValidDTypeFlag(int flag);

// IEEE 754 binary16, stored as its bits. Converts to and from float (round to nearest even).
struct half_t {
  std::uint16_t bits = 0;
  half_t() = default;
  TROUPE_HOST_DEVICE half_t(float f) : bits(FromFloat(f)) {}  // NOLINT: implicit like a built-in float
  TROUPE_HOST_DEVICE operator float() const { return ToFloat(bits); }

  static TROUPE_HOST_DEVICE std::uint16_t FromFloat(float f) {
    std::uint32_t x = FloatBits(f);
    const std::uint32_t sign = (x >> 16) & 0x8000u;
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) return static_cast<std::uint16_t>(sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (x >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflows to infinity
    if (x < 0x38800000u) {  // subnormal half (or zero)
      if (x < 0x33000000u) return static_cast<std::uint16_t>(sign);
      const std::uint32_t shift = 126u - (x >> 23);  // 14..24
      const std::uint32_t mant = (x & 0x7fffffu) | 0x800000u;
      std::uint32_t h = mant >> shift;
      const std::uint32_t rem = mant & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
      if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
      return static_cast<std::uint16_t>(sign | h);
    }
    std::uint32_t h = ((x - 0x38000000u) >> 13);
    const std::uint32_t rem = x & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }
  static TROUPE_HOST_DEVICE float ToFloat(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, x;
    if (exp == 0x1fu) {
      x = sign | 0x7f800000u | (mant << 13);
    } else if (exp != 0) {
      x = sign | ((exp + 112u) << 23) | (mant << 13);
    } else if (mant == 0) {
      x = sign;
    } else {  // subnormal: normalise
      exp = 113u;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      x = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
    return BitsFloat(x);
  }
};

// bfloat16: the upper 16 bits of a float32 (round to nearest even on conversion).
struct bf16_t {
  std::uint16_t bits = 0;
  bf16_t() = default;
  TROUPE_HOST_DEVICE bf16_t(float f) {  // NOLINT: implicit like a built-in float
    const std::uint32_t x = FloatBits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
      bits = static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet NaN
    } else {
      bits = static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
    }
  }
  TROUPE_HOST_DEVICE operator float() const {
    return BitsFloat(static_cast<std::uint32_t>(bits) << 16);
  }
};

// The C++ type of each DType.
template <DType T>
struct DTypeTraits;
template <> struct DTypeTraits<DType::kFloat32> { using type = float; };
template <> struct DTypeTraits<DType::kFloat64> { using type = double; };
template <> struct DTypeTraits<DType::kFloat16> { using type = half_t; };
template <> struct DTypeTraits<DType::kUint8> { using type = std::uint8_t; };
template <> struct DTypeTraits<DType::kInt32> { using type = std::int32_t; };
template <> struct DTypeTraits<DType::kInt8> { using type = std::int8_t; };
template <> struct DTypeTraits<DType::kInt64> { using type = std::int64_t; };
template <> struct DTypeTraits<DType::kBool> { using type = bool; };
template <> struct DTypeTraits<DType::kBfloat16> { using type = bf16_t; };

// The DType of a C++ element type.
template <typename T>
constexpr DType DTypeOf();
template <> constexpr DType DTypeOf<float>() { return DType::kFloat32; }
template <> constexpr DType DTypeOf<double>() { return DType::kFloat64; }
template <> constexpr DType DTypeOf<half_t>() { return DType::kFloat16; }
template <> constexpr DType DTypeOf<std::uint8_t>() { return DType::kUint8; }
template <> constexpr DType DTypeOf<std::int32_t>() { return DType::kInt32; }
template <> constexpr DType DTypeOf<std::int8_t>() { return DType::kInt8; }
template <> constexpr DType DTypeOf<std::int64_t>() { return DType::kInt64; }
template <> constexpr DType DTypeOf<bool>() { return DType::kBool; }
template <> constexpr DType DTypeOf<bf16_t>() { return DType::kBfloat16; }

[[noreturn]] void ThrowBadDType(DType dtype, const char* what);

// Runs `fn` with a value of the C++ type of `dtype` (as a type tag): TROUPE_DTYPE_SWITCH(d, [&](auto tag) {
// using T = decltype(tag); ... }). Throws troupe::Error for an invalid dtype.
template <typename Fn>
decltype(auto) DTypeSwitch(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: return fn(float{});
    case DType::kFloat64: return fn(double{});
    case DType::kFloat16: return fn(half_t{});
    case DType::kUint8: return fn(std::uint8_t{});
    case DType::kInt32: return fn(std::int32_t{});
    case DType::kInt8: return fn(std::int8_t{});
    case DType::kInt64: return fn(std::int64_t{});
    case DType::kBool: return fn(bool{});
    case DType::kBfloat16: return fn(bf16_t{});
  }
  ThrowBadDType(dtype, "DTypeSwitch");
}

// A shape: up to kMaxDims dimensions, each >= 0, or -1 for "unknown" during shape inference. ndim() == 0
// is a scalar (one element); ndim() == -1 is an unknown shape (the default).
class TShape {
 public:
  static constexpr int kMaxDims = 8;

  TShape() = default;  // unknown
  TShape(std::initializer_list<std::int64_t> dims);
  explicit TShape(const std::vector<std::int64_t>& dims);
  // ndim dimensions, all equal to `value`. Throws troupe::Error when ndim > kMaxDims.
  static TShape Filled(int ndim, std::int64_t value);
  static TShape Scalar() { return TShape(std::vector<std::int64_t>{}); }

  int ndim() const { return ndim_; }
  bool known() const;  // ndim >= 0 and no dimension is -1
  std::int64_t operator[](int i) const { return dims_[i]; }
  std::int64_t& operator[](int i) { return dims_[i]; }
  const std::int64_t* begin() const { return dims_; }
  const std::int64_t* end() const { return dims_ + (ndim_ > 0 ? ndim_ : 0); }
  std::vector<std::int64_t> ToVector() const { return {begin(), end()}; }

  // Number of elements (1 for a scalar). Throws troupe::Error for an unknown shape or when the product
  // overflows int64.
  std::int64_t Size() const;
  // Product of dims [begin, end).
  std::int64_t ProdDims(int begin, int end) const;

  bool operator==(const TShape& o) const;
  bool operator!=(const TShape& o) const { return !(*this == o); }
  // "(2,3)", "()" for a scalar, "(?)" for unknown, with "?" for unknown dimensions.
  std::string ToString() const;

 private:
  int ndim_ = -1;
  std::int64_t dims_[kMaxDims] = {};
};

// A non-owning view of a tensor: where its first element is, its shape, element type and device.
struct TBlob {
  void* dptr = nullptr;
  TShape shape;
  DType dtype = DType::kFloat32;
  Context ctx;

  TBlob() = default;
  TBlob(void* p, const TShape& s, DType t, Context c) : dptr(p), shape(s), dtype(t), ctx(c) {}

  std::int64_t Size() const { return shape.Size(); }
  std::size_t Bytes() const { return static_cast<std::size_t>(shape.Size()) * DTypeSize(dtype); }
  // The data as T*; throws troupe::Error when T is not the blob's dtype.
  template <typename T>
  T* dptr_as() const {
    if (DTypeOf<T>() != dtype) ThrowBadDType(dtype, "TBlob::dptr_as (element type differs)");
    return static_cast<T*>(dptr);
  }
};

}  // namespace troupe
