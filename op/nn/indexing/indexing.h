// take's and one_hot's parameters and the element code the CPU operators (indexing.cc) and the GPU ones
// (indexing.cu) share. Pure functions: thread-safe. Compiles under nvcc: what runs in kernels is
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

}  // namespace troupe::indexing
