// take's and one_hot's parameters, gather_nd's view, and the element code the CPU operators (indexing.cc) and the GPU
// ones (indexing.cu) share. Pure functions: thread-safe. Compiles under nvcc: what runs in kernels is
// TROUPE_HOST_DEVICE.
#pragma once

#include <cstdint>
#include <string>

#include "base/error.h"
#include "op/operator.h"
#include "op/param.h"
#include "tensor/detail/elementwise.h"
#include "tensor/tensor.h"

namespace troupe::indexing {

constexpr const char* kTake = "take";
constexpr const char* kOneHot = "one_hot";
constexpr const char* kGather = "gather_nd";

struct TakeParam : Params<TakeParam> {
  int axis = 0;
  std::string mode = "clip";
  static void Declare(ParamSchema<TakeParam>& s) {
    s.Field("axis", &TakeParam::axis)
        .Default(0)
        .Describe(
            "The axis of input array to be taken. For input tensor of rank r, it could be in the range of "
            "[-r, r-1]");
    s.Field("mode", &TakeParam::mode)
        .Default("clip")
        .Choices({"clip", "raise", "wrap"})
        .Describe("How out-of-bound indices behave: 'clip' to the range, 'wrap' around, 'raise' an error.");
  }
};

struct OneHotParam : Params<OneHotParam> {
  std::int64_t depth = 0;
  double on_value = 1.0;
  double off_value = 0.0;
  std::string dtype = "float32";
  static void Declare(ParamSchema<OneHotParam>& s) {
    s.Field("depth", &OneHotParam::depth).LowerBound(0).Describe("Depth of the one hot dimension.");
    s.Field("on_value", &OneHotParam::on_value)
        .Default(1.0)
        .Describe("The value assigned to the locations represented by indices.");
    s.Field("off_value", &OneHotParam::off_value)
        .Default(0.0)
        .Describe("The value assigned to the locations not represented by indices.");
    s.Field("dtype", &OneHotParam::dtype)
        .Default("float32")
        .Choices({"bfloat16", "float16", "float32", "float64", "int32", "int64", "int8", "uint8"})
        .Describe("DType of the output");
  }
};

// take's position along an axis of n for an index (truncated to an integer): clamped into [0, n) (clip) or
// wrapped as Python's modulo (wrap; also raise, whose indices were checked to be in range).
TROUPE_HOST_DEVICE inline std::int64_t TakePosition(std::int64_t j, std::int64_t n, bool clip) {
  if (clip) return j < 0 ? 0 : (j > n - 1 ? n - 1 : j);
  j %= n;
  return j < 0 ? j + n : j;
}

// take's mode 'raise': MXNet compares in the index type, so a fraction above n - 1 is out of range too.
inline void CheckTakeIndex(double v, std::int64_t n) {
  if (v < 0 || v > static_cast<double>(n - 1)) {
    throw Error(std::string(kTake) + ": index " + std::to_string(v) + " is out of bounds for an axis of size " +
                std::to_string(n) + " (mode 'raise')");
  }
}

// *o (req)= v, one_hot's element (kAddTo adds in double, then converts).
template <typename T>
TROUPE_HOST_DEVICE inline void OneHotElement(T* o, T v, OpReqType req) {
  if (req == kAddTo) {
    *o = internal::ConvertTo<T>(internal::ConvertTo<double>(*o) + internal::ConvertTo<double>(v));
  } else {
    *o = v;
  }
}

// gather_nd's view: indices (m, count...) address the first m dimensions of the data (sizes dims[0..m)); each
// picks a block of `block` elements.
struct GatherView {
  std::int64_t dims[TShape::kMaxDims] = {};
  std::int64_t m = 0, count = 0, block = 0;
};
inline GatherView ViewGather(const TShape& data, const TShape& indices) {
  GatherView v;
  v.m = indices[0];
  v.count = indices.Size() / (v.m > 1 ? v.m : 1);
  v.block = data.ProdDims(static_cast<int>(v.m), data.ndim());
  for (int j = 0; j < static_cast<int>(v.m); ++j) v.dims[j] = data[j];
  return v;
}

// Every index must be in [-size, size) for its axis: else a troupe::Error naming the index and the axis
// (MXNet reports the last out-of-range index of the first axis that has one). idx: the m x count indices.
inline void CheckGatherIndices(const TShape& data, const std::int64_t* idx, const GatherView& v) {
  for (std::int64_t j = 0; j < v.m; ++j) {
    for (std::int64_t i = v.count - 1; i >= 0; --i) {
      const std::int64_t x = idx[j * v.count + i];
      if (x < -v.dims[j] || x > v.dims[j] - 1) {
        throw Error(std::string(kGather) + ": index " + std::to_string(x) + " is out of bounds for axis " +
                    std::to_string(j) + " with size " + std::to_string(data[static_cast<int>(j)]));
      }
    }
  }
}

// The block offset of gathered element i (negative indices count from the end; the indices were checked).
template <typename I>
TROUPE_HOST_DEVICE inline std::int64_t GatherOffset(const GatherView& v, const I* idx, std::int64_t i) {
  std::int64_t off = 0;
  for (std::int64_t j = 0; j < v.m; ++j) {
    const std::int64_t size = v.dims[j];
    off = off * size + (static_cast<std::int64_t>(idx[j * v.count + i]) + size) % size;
  }
  return off;
}

}  // namespace troupe::indexing
