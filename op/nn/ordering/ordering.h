// argmax, argmin and pick (ordering.cc): their parameters, the lines they work on, and the element code the
// CPU operator (ordering.cc) and the GPU one (ordering.cu) share, so both devices pick the same elements.
// Pure functions: thread-safe. Compiles under nvcc: the element code is TROUPE_HOST_DEVICE.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "op/internal/op_util.h"
#include "op/nn/common/device_math.h"
#include "op/operator.h"
#include "op/param.h"
#include "tensor/detail/elementwise.h"
#include "tensor/tensor.h"

namespace troupe::ordering {

struct ArgReduceParam : Params<ArgReduceParam> {
  std::optional<int> axis;
  bool keepdims = false;
  static void Declare(ParamSchema<ArgReduceParam>& s) {
    s.Field("axis", &ArgReduceParam::axis).Default(std::nullopt).Describe("The axis; None: the flattened array.");
    s.Field("keepdims", &ArgReduceParam::keepdims)
        .Default(false)
        .Describe("Keep the reduced axis as a dimension of size 1.");
  }
};

struct PickParam : Params<PickParam> {
  std::optional<int> axis = -1;
  bool keepdims = false;
  std::string mode = "clip";
  static void Declare(ParamSchema<PickParam>& s) {
    s.Field("axis", &PickParam::axis).Default(-1).Describe("The axis to pick along; None: the flattened array.");
    s.Field("keepdims", &PickParam::keepdims).Default(false).Describe("Keep the picked axis as a dimension of size 1.");
    s.Field("mode", &PickParam::mode)
        .Default("clip")
        .Choices({"clip", "wrap"})
        .Describe("Out-of-range indices: clip or wrap.");
  }
};

// The lines along `axis` (None: one line over the flattened array).
inline act_norm::AxisView Lines(const TShape& s, std::optional<int> axis, const std::string& op) {
  if (!axis.has_value()) return act_norm::AxisView{1, s.Size(), 1};
  return act_norm::ViewAround(s, internal::NormalizeAxis(*axis, s.ndim(), op, "axis"));
}

// The position of the largest (max) or smallest element of the line starting at `base`: the first of equal
// ones.
template <typename T>
TROUPE_HOST_DEVICE inline std::int64_t ArgExtreme(const T* x, std::int64_t base, const act_norm::AxisView& v,
                                                  bool max) {
  std::int64_t best = 0;
  for (std::int64_t j = 1; j < v.n; ++j) {
    const T a = x[base + j * v.inner], b = x[base + best * v.inner];
    if (max ? a > b : a < b) best = j;
  }
  return best;
}

// pick's position for an index value on a line of n: truncated towards zero, then wrapped (Python's modulo)
// or clipped to [0, n).
TROUPE_HOST_DEVICE inline std::int64_t PickPosition(double index, std::int64_t n, bool wrap) {
  auto j = static_cast<std::int64_t>(index);
  if (wrap) {
    j %= n;
    if (j < 0) j += n;
  } else {
    j = j < 0 ? 0 : (j > n - 1 ? n - 1 : j);
  }
  return j;
}

// *o (req)= v converted to O (kAddTo adds in double, then converts; kNullOp: nothing).
template <typename O>
TROUPE_HOST_DEVICE inline void WriteConverted(O* o, OpReqType req, double v) {
  if (req == kNullOp) return;
  *o = internal::ConvertTo<O>(req == kAddTo ? internal::ConvertTo<double>(*o) + v : v);
}

}  // namespace troupe::ordering
