// The array-making operators (init.cc: _zeros, _ones, _full, _arange, _contrib_arange_like, shape_array,
// size_array): what each writes at element i of its output, shared by the CPU loop (init.cc) and the GPU
// kernel (init.cu), and the operator both devices run around one device's fill. Pure functions: thread-safe.
// Compiles under nvcc: the element code is TROUPE_HOST_DEVICE.
#pragma once

#include <cstdint>
#include <memory>

#include "op/operator.h"
#include "tensor/detail/elementwise.h"
#include "tensor/tensor.h"

namespace troupe::init {

// What each operator writes at element i of its output.
enum class Fill { kZeros, kOnes, kFull, kRange, kRangeLike, kShape, kSize };

// One call's fill: the operator's settings and, for shape_array / size_array, the input's shape.
struct FillSpec {
  Fill fill = Fill::kZeros;
  double value = 0, start = 0, step = 1;
  int repeat = 1;
  std::int64_t dims[TShape::kMaxDims] = {};
  std::int64_t size = 0;
};

TROUPE_HOST_DEVICE inline double FillValue(const FillSpec& f, std::int64_t i) {
  switch (f.fill) {
    case Fill::kZeros:
      return 0;
    case Fill::kOnes:
      return 1;
    case Fill::kFull:
      return f.value;
    case Fill::kRange:
    case Fill::kRangeLike:
      return f.start + static_cast<double>(i / f.repeat) * f.step;
    case Fill::kShape:
      return static_cast<double>(f.dims[i]);
    case Fill::kSize:
      return static_cast<double>(f.size);
  }
  return 0;
}

// o[i] (req)= the value converted to T (kAddTo adds in double, then converts).
template <typename T>
TROUPE_HOST_DEVICE inline void FillElement(const FillSpec& f, T* o, std::int64_t i, OpReqType req) {
  const double v = FillValue(f, i);
  o[i] = internal::ConvertTo<T>(req == kAddTo ? internal::ConvertTo<double>(o[i]) + v : v);
}

// One device's fill of `out` (any element type; req not kNullOp) and its zeroing of a gradient (any type).
using FillFn = void (*)(const FillSpec& spec, const TBlob& out, OpReqType req, const RunContext& rctx);
using ZeroFn = void (*)(const TBlob& b, const RunContext& rctx);

// The operator of one of init.cc's properties that fills with `fill` (its inputs, which lend only a shape,
// get zero gradients through `zero`).
std::unique_ptr<Operator> MakeFillOperator(const OperatorProperty& prop, FillFn fill, ZeroFn zero);

}  // namespace troupe::init
