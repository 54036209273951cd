// The element-wise unary operators of MXNet 1.9 (its elemwise_unary_op_basic/_logexp/_pow/_trig): one
// table of element formulas, forward and gradient, that every such operator uses, so a new function is a
// line here and a line in the registration (unary.cc); clip and Cast, which take parameters, have
// properties of their own.
//
// Gradients are MXNet's, written from the input x (MXNet computes some from the output; the values are
// the same): the rounding functions, sign and the comparisons pass no gradient. Pure functions: thread-safe.
// Compiles under nvcc: what runs in kernels is TROUPE_HOST_DEVICE.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "op/nn/common/device_math.h"
#include "op/operator.h"
#include "op/param.h"
#include "tensor/tensor.h"

namespace troupe {

namespace unary {

enum class UnaryOp : int {
  // Defined for every element type (integers too).
  kRelu, kAbs, kNegative, kSquare, kSign, kFloor, kCeil, kRound, kRint, kFix, kTrunc, kIdentity, kBlockGrad,
  kZerosLike, kOnesLike,
  // Floating point only.
  kSigmoid, kExp, kExpm1, kLog, kLog2, kLog10, kLog1p, kSqrt, kRsqrt, kCbrt, kRcbrt, kReciprocal, kTanh, kSin,
  kCos, kTan, kArcsin, kArccos, kArctan, kSinh, kCosh, kArcsinh, kArccosh, kArctanh, kSoftsign, kErf, kDegrees,
  kRadians
};

inline bool AnyType(UnaryOp op) { return static_cast<int>(op) < static_cast<int>(UnaryOp::kSigmoid); }

// f(x) in T (integers) or in T's own floating-point precision.
template <typename T>
TROUPE_HOST_DEVICE inline T Forward(UnaryOp op, T x) {
  using act_norm::Exp;
  if constexpr (!std::is_floating_point_v<T>) {
    switch (op) {
      case UnaryOp::kRelu: return x > T(0) ? x : T(0);
      case UnaryOp::kAbs:
        if constexpr (std::is_signed_v<T>) return x < T(0) ? T(-x) : x; else return x;
      case UnaryOp::kNegative: return T(-x);
      case UnaryOp::kSquare: return T(x * x);
      case UnaryOp::kSign:
        if constexpr (std::is_signed_v<T>) return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0)); else return T(x > T(0));
      case UnaryOp::kZerosLike: return T(0);
      case UnaryOp::kOnesLike: return T(1);
      default: return x;  // the rounding functions, identity, BlockGrad
    }
  } else {
    constexpr bool f = sizeof(T) == 4;
    switch (op) {
      case UnaryOp::kRelu: return x > T(0) ? x : T(0);
      case UnaryOp::kAbs: return f ? fabsf(x) : fabs(x);
      case UnaryOp::kNegative: return -x;
      case UnaryOp::kSquare: return x * x;
      case UnaryOp::kSign: return x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0));
      case UnaryOp::kFloor: return f ? floorf(x) : floor(x);
      case UnaryOp::kCeil: return f ? ceilf(x) : ceil(x);
      case UnaryOp::kRound: return f ? roundf(x) : round(x);
      case UnaryOp::kRint: return f ? rintf(x) : rint(x);
      case UnaryOp::kFix:
      case UnaryOp::kTrunc: return f ? truncf(x) : trunc(x);
      case UnaryOp::kIdentity:
      case UnaryOp::kBlockGrad: return x;
      case UnaryOp::kZerosLike: return T(0);
      case UnaryOp::kOnesLike: return T(1);
      case UnaryOp::kSigmoid: return T(1) / (T(1) + Exp(-x));
      case UnaryOp::kExp: return Exp(x);
      case UnaryOp::kExpm1: return act_norm::Expm1(x);
      case UnaryOp::kLog: return act_norm::Log(x);
      case UnaryOp::kLog2: return f ? log2f(x) : log2(x);
      case UnaryOp::kLog10: return f ? log10f(x) : log10(x);
      case UnaryOp::kLog1p: return act_norm::Log1p(x);
      case UnaryOp::kSqrt: return act_norm::Sqrt(x);
      case UnaryOp::kRsqrt: return T(1) / act_norm::Sqrt(x);
      case UnaryOp::kCbrt: return f ? cbrtf(x) : cbrt(x);
      case UnaryOp::kRcbrt: return T(1) / (f ? cbrtf(x) : cbrt(x));
      case UnaryOp::kReciprocal: return T(1) / x;
      case UnaryOp::kTanh: return act_norm::Tanh(x);
      case UnaryOp::kSin: return f ? sinf(x) : sin(x);
      case UnaryOp::kCos: return f ? cosf(x) : cos(x);
      case UnaryOp::kTan: return f ? tanf(x) : tan(x);
      case UnaryOp::kArcsin: return f ? asinf(x) : asin(x);
      case UnaryOp::kArccos: return f ? acosf(x) : acos(x);
      case UnaryOp::kArctan: return f ? atanf(x) : atan(x);
      case UnaryOp::kSinh: return f ? sinhf(x) : sinh(x);
      case UnaryOp::kCosh: return f ? coshf(x) : cosh(x);
      case UnaryOp::kArcsinh: return f ? asinhf(x) : asinh(x);
      case UnaryOp::kArccosh: return f ? acoshf(x) : acosh(x);
      case UnaryOp::kArctanh: return f ? atanhf(x) : atanh(x);
      case UnaryOp::kSoftsign: return x / (T(1) + act_norm::Abs(x));
      case UnaryOp::kErf: return act_norm::Erf(x);
      case UnaryOp::kDegrees: return x * T(180.0 / 3.14159265358979323846);
      case UnaryOp::kRadians: return x * T(3.14159265358979323846 / 180.0);
    }
    return T(0);
  }
}

// og * f'(x). Only floating-point types have gradients.
template <typename T>
TROUPE_HOST_DEVICE inline T Gradient(UnaryOp op, T og, T x) {
  constexpr bool f = sizeof(T) == 4;
  switch (op) {
    case UnaryOp::kRelu: return x > T(0) ? og : T(0);
    case UnaryOp::kAbs: return x > T(0) ? og : (x < T(0) ? -og : T(0));
    case UnaryOp::kNegative: return -og;
    case UnaryOp::kSquare: return og * T(2) * x;
    case UnaryOp::kIdentity: return og;
    case UnaryOp::kSigmoid: {
      const T y = Forward(op, x);
      return og * y * (T(1) - y);
    }
    case UnaryOp::kExp: return og * act_norm::Exp(x);
    case UnaryOp::kExpm1: return og * act_norm::Exp(x);
    case UnaryOp::kLog: return og / x;
    case UnaryOp::kLog2: return og / (x * T(0.693147180559945309417));
    case UnaryOp::kLog10: return og / (x * T(2.30258509299404568402));
    case UnaryOp::kLog1p: return og / (T(1) + x);
    case UnaryOp::kSqrt: return og * T(0.5) / act_norm::Sqrt(x);
    case UnaryOp::kRsqrt: {
      const T r = T(1) / act_norm::Sqrt(x);
      return og * T(-0.5) * r * r * r;
    }
    case UnaryOp::kCbrt: {
      const T y = Forward(op, x);
      return og / (T(3) * y * y);
    }
    case UnaryOp::kRcbrt: {
      const T c = f ? cbrtf(x) : cbrt(x);
      return og * T(-1) / (T(3) * c * x);
    }
    case UnaryOp::kReciprocal: return -og / (x * x);
    case UnaryOp::kTanh: {
      const T y = act_norm::Tanh(x);
      return og * (T(1) - y * y);
    }
    case UnaryOp::kSin: return og * (f ? cosf(x) : cos(x));
    case UnaryOp::kCos: return -og * (f ? sinf(x) : sin(x));
    case UnaryOp::kTan: {
      const T y = f ? tanf(x) : tan(x);
      return og * (y * y + T(1));
    }
    case UnaryOp::kArcsin: return og / act_norm::Sqrt(T(1) - x * x);
    case UnaryOp::kArccos: return -og / act_norm::Sqrt(T(1) - x * x);
    case UnaryOp::kArctan: return og / (x * x + T(1));
    case UnaryOp::kSinh: return og * (f ? coshf(x) : cosh(x));
    case UnaryOp::kCosh: return og * (f ? sinhf(x) : sinh(x));
    case UnaryOp::kArcsinh: return og / act_norm::Sqrt(x * x + T(1));
    case UnaryOp::kArccosh: return og / act_norm::Sqrt(x * x - T(1));
    case UnaryOp::kArctanh: return og / (T(1) - x * x);
    case UnaryOp::kSoftsign: {
      const T d = T(1) + act_norm::Abs(x);
      return og / (d * d);
    }
    case UnaryOp::kErf: return og * T(1.12837916709551257390) * act_norm::Exp(-x * x);
    case UnaryOp::kDegrees: return og * T(180.0 / 3.14159265358979323846);
    case UnaryOp::kRadians: return og * T(3.14159265358979323846 / 180.0);
    default: return T(0);  // sign, the rounding functions, BlockGrad, zeros_like, ones_like
  }
}

// clip's element formulas: min(max(x, lo), hi); the gradient passes where lo <= x <= hi.
template <typename T>
TROUPE_HOST_DEVICE inline T Clip(T x, T lo, T hi) {
  const T v = x < lo ? lo : x;
  return v > hi ? hi : v;
}
template <typename T>
TROUPE_HOST_DEVICE inline T ClipGradient(T og, T x, T lo, T hi) {
  return x > hi || x < lo ? T(0) : og;
}

// The operators of the table, MXNet 1.9's names and aliases (unary.cc registers them for the CPU, unary.cu
// for the GPU).
struct UnaryDef {
  const char* name;
  UnaryOp op;
  const char* aliases[2];
  const char* text;
};
inline constexpr UnaryDef kUnaryDefs[] = {
    {"relu", UnaryOp::kRelu, {}, "Rectified linear unit: max(x, 0)."},
    {"abs", UnaryOp::kAbs, {}, "Absolute value."},
    {"negative", UnaryOp::kNegative, {}, "Numerical negative: -x."},
    {"square", UnaryOp::kSquare, {}, "x * x."},
    {"sign", UnaryOp::kSign, {}, "The sign of x: -1, 0 or 1 (no gradient)."},
    {"floor", UnaryOp::kFloor, {}, "The largest integer not above x (no gradient)."},
    {"ceil", UnaryOp::kCeil, {}, "The smallest integer not below x (no gradient)."},
    {"round", UnaryOp::kRound, {}, "The nearest integer, halves away from zero (no gradient)."},
    {"rint", UnaryOp::kRint, {}, "The nearest integer, halves to even (no gradient)."},
    {"fix", UnaryOp::kFix, {}, "The nearest integer towards zero (no gradient)."},
    {"trunc", UnaryOp::kTrunc, {}, "The integer part, towards zero (no gradient)."},
    {"_copy", UnaryOp::kIdentity, {"identity"}, "A copy of the input."},
    {"BlockGrad", UnaryOp::kBlockGrad, {"stop_gradient"}, "The input unchanged; no gradient flows back."},
    {"zeros_like", UnaryOp::kZerosLike, {}, "Zeros of the input's shape and type."},
    {"ones_like", UnaryOp::kOnesLike, {}, "Ones of the input's shape and type."},
    {"sigmoid", UnaryOp::kSigmoid, {}, "1 / (1 + exp(-x))."},
    {"exp", UnaryOp::kExp, {}, "e^x."},
    {"expm1", UnaryOp::kExpm1, {}, "e^x - 1, accurate near 0."},
    {"log", UnaryOp::kLog, {}, "Natural logarithm."},
    {"log2", UnaryOp::kLog2, {}, "Base-2 logarithm."},
    {"log10", UnaryOp::kLog10, {}, "Base-10 logarithm."},
    {"log1p", UnaryOp::kLog1p, {}, "log(1 + x), accurate near 0."},
    {"sqrt", UnaryOp::kSqrt, {}, "Square root."},
    {"rsqrt", UnaryOp::kRsqrt, {}, "1 / sqrt(x)."},
    {"cbrt", UnaryOp::kCbrt, {}, "Cube root."},
    {"rcbrt", UnaryOp::kRcbrt, {}, "1 / cbrt(x)."},
    {"reciprocal", UnaryOp::kReciprocal, {}, "1 / x."},
    {"tanh", UnaryOp::kTanh, {}, "Hyperbolic tangent."},
    {"sin", UnaryOp::kSin, {}, "Sine."},
    {"cos", UnaryOp::kCos, {}, "Cosine."},
    {"tan", UnaryOp::kTan, {}, "Tangent."},
    {"arcsin", UnaryOp::kArcsin, {}, "Inverse sine."},
    {"arccos", UnaryOp::kArccos, {}, "Inverse cosine."},
    {"arctan", UnaryOp::kArctan, {}, "Inverse tangent."},
    {"sinh", UnaryOp::kSinh, {}, "Hyperbolic sine."},
    {"cosh", UnaryOp::kCosh, {}, "Hyperbolic cosine."},
    {"arcsinh", UnaryOp::kArcsinh, {}, "Inverse hyperbolic sine."},
    {"arccosh", UnaryOp::kArccosh, {}, "Inverse hyperbolic cosine."},
    {"arctanh", UnaryOp::kArctanh, {}, "Inverse hyperbolic tangent."},
    {"softsign", UnaryOp::kSoftsign, {}, "x / (1 + |x|)."},
    {"erf", UnaryOp::kErf, {}, "The Gauss error function."},
    {"degrees", UnaryOp::kDegrees, {}, "Radians to degrees."},
    {"radians", UnaryOp::kRadians, {}, "Degrees to radians."},
};

}  // namespace unary

// clip(data, a_min, a_max): min(max(x, a_min), a_max); the gradient passes where a_min <= x <= a_max.
struct ClipParam : Params<ClipParam> {
  float a_min = 0;
  float a_max = 0;
  static void Declare(ParamSchema<ClipParam>& s) {
    s.Field("a_min", &ClipParam::a_min).Describe("Minimum value");
    s.Field("a_max", &ClipParam::a_max).Describe("Maximum value");
  }
};

// Cast(data, dtype): the values converted to dtype (integers saturate, NaN gives 0: tensor/detail/
// elementwise.h's ConvertTo); the gradient is converted back to the input's type.
struct CastParam : Params<CastParam> {
  std::string dtype;
  static void Declare(ParamSchema<CastParam>& s) {
    s.Field("dtype", &CastParam::dtype)
        .Choices({"bfloat16", "bool", "float16", "float32", "float64", "int32", "int64", "int8", "uint8"})
        .Describe("Output data type.");
  }
};

// amp_cast(data, dtype): MXNet's AMP cast. Converts only between float32, float16 and bfloat16; an array of
// any other type passes unchanged. The gradient is converted back.
struct AmpCastParam : Params<AmpCastParam> {
  std::string dtype;
  static void Declare(ParamSchema<AmpCastParam>& s) {
    s.Field("dtype", &AmpCastParam::dtype)
        .Choices({"bfloat16", "bool", "float16", "float32", "float64", "int32", "int64", "int8", "uint8"})
        .Describe("Output data type.");
  }
};

// amp_multicast(data_0, ..., data_{n-1}, num_outputs = n, cast_narrow): MXNet's AMP cast of several arrays to
// their widest float type (float32 if any is float32), or with cast_narrow to the narrowest (float16 before
// bfloat16 before float32); arrays of other types pass unchanged. Gradients are converted back.
struct AmpMultiCastParam : Params<AmpMultiCastParam> {
  int num_outputs = 0;
  bool cast_narrow = false;
  static void Declare(ParamSchema<AmpMultiCastParam>& s) {
    s.Field("num_outputs", &AmpMultiCastParam::num_outputs)
        .LowerBound(1)
        .Describe("Number of input/output pairs to be casted to the widest type.");
    s.Field("cast_narrow", &AmpMultiCastParam::cast_narrow)
        .Default(false)
        .Describe("Whether to cast to the narrowest type");
  }
};

}  // namespace troupe
