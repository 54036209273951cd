// Pad's parameters and its rule for which input element an output element copies, shared by the property and
// CPU operator (pad.cc) and the GPU operator (pad.cu). Pure data and functions: thread-safe. Compiles under
// nvcc: SourceIndex is TROUPE_HOST_DEVICE.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "op/param.h"
#include "tensor/tensor.h"

namespace troupe {

struct PadParam : Params<PadParam> {
  std::string mode;
  // A tuple of any length (a TShape holds at most 8 dimensions; a 5-D input needs 10 widths).
  std::vector<std::int64_t> pad_width;
  double constant_value = 0.0;
  static void Declare(ParamSchema<PadParam>& s) {
    s.Field("mode", &PadParam::mode)
        .Choices({"constant", "edge", "reflect"})
        .Describe(
            "Padding type: 'constant' pads with constant_value, 'edge' repeats the edge values, 'reflect' "
            "mirrors the values about the edges.");
    s.Field("pad_width", &PadParam::pad_width)
        .Describe(
            "Widths of the padding before and after each axis: (before_1, after_1, ..., before_N, after_N); "
            "the first two axes take no padding.");
    s.Field("constant_value", &PadParam::constant_value)
        .Default(0.0)
        .Describe("The value used for padding when mode is 'constant'.");
  }
};

namespace padding {

// The input index that output index `o` of one axis copies, or -1 for constant padding.
TROUPE_HOST_DEVICE inline std::int64_t SourceIndex(std::int64_t o, std::int64_t size, std::int64_t before, char mode) {
  std::int64_t i = o - before;
  if (i >= 0 && i < size) return i;
  switch (mode) {
    case 'c':
      return -1;
    case 'e':
      return i < 0 ? 0 : size - 1;
    default:
      return i < 0 ? -i : 2 * (size - 1) - i;  // reflect
  }
}

}  // namespace padding

}  // namespace troupe
