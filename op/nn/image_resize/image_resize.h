// _contrib_AdaptiveAvgPooling2D's and _contrib_BilinearResize2D's parameters and the index and weight rules
// both devices use (image_resize.cc: properties and CPU operators; image_resize.cu: GPU operators), computed
// in float as MXNet does. Pure data and functions: thread-safe. Compiles under nvcc: the rules are
// TROUPE_HOST_DEVICE.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "op/param.h"
#include "tensor/tensor.h"

namespace troupe {

struct AdaptiveAvgPoolParam : Params<AdaptiveAvgPoolParam> {
  std::vector<std::int64_t> output_size;
  static void Declare(ParamSchema<AdaptiveAvgPoolParam>& s) {
    s.Field("output_size", &AdaptiveAvgPoolParam::output_size)
        .Default({})
        .Describe("int (output size) or a tuple of int for output (height, width); () means 1.");
  }
};

struct BilinearResizeParam : Params<BilinearResizeParam> {
  int height = 1;
  int width = 1;
  std::optional<float> scale_height;
  std::optional<float> scale_width;
  std::string mode = "size";
  bool align_corners = true;
  static void Declare(ParamSchema<BilinearResizeParam>& s) {
    s.Field("height", &BilinearResizeParam::height)
        .Default(1)
        .LowerBound(1)
        .Describe("Output height (ignored when scale_height is given or mode is not 'size').");
    s.Field("width", &BilinearResizeParam::width)
        .Default(1)
        .LowerBound(1)
        .Describe("Output width (ignored when scale_height is given or mode is not 'size').");
    s.Field("scale_height", &BilinearResizeParam::scale_height)
        .Default(std::nullopt)
        .Describe("Sampling scale of the height (modes 'size' and 'odd_scale').");
    s.Field("scale_width", &BilinearResizeParam::scale_width)
        .Default(std::nullopt)
        .Describe("Sampling scale of the width (modes 'size' and 'odd_scale').");
    s.Field("mode", &BilinearResizeParam::mode)
        .Default("size")
        .Choices({"like", "odd_scale", "size", "to_even_down", "to_even_up", "to_odd_down", "to_odd_up"})
        .Describe(
            "How the output size is chosen: 'size' (height and width, or the scales), 'odd_scale', 'like' "
            "(the second input's size), or the nearest even or odd size below or above.");
    s.Field("align_corners", &BilinearResizeParam::align_corners)
        .Default(true)
        .Describe("Map the corner pixels' centres onto each other (else the whole range scales).");
  }
};

namespace image_resize {

// MXNet's window bounds: START_IND and END_IND of adaptive_avg_pooling.cc, in float.
TROUPE_HOST_DEVICE inline std::int64_t WindowStart(std::int64_t o, std::int64_t osize, std::int64_t isize) {
  return static_cast<std::int64_t>(floorf(static_cast<float>(o * isize) / static_cast<float>(osize)));
}
TROUPE_HOST_DEVICE inline std::int64_t WindowEnd(std::int64_t o, std::int64_t osize, std::int64_t isize) {
  return static_cast<std::int64_t>(ceilf(static_cast<float>((o + 1) * isize) / static_cast<float>(osize)));
}

// MXNet's area_pixel_compute_scale and area_pixel_compute_source_index (not cubic), in float.
TROUPE_HOST_DEVICE inline float PixelScale(std::int64_t in, std::int64_t out, bool align_corners) {
  if (out <= 1) return 0.0f;
  return align_corners ? static_cast<float>(in - 1) / static_cast<float>(out - 1)
                       : static_cast<float>(in) / static_cast<float>(out);
}
TROUPE_HOST_DEVICE inline float SourceIndex(float scale, std::int64_t dst, bool align_corners) {
  if (align_corners) return scale * static_cast<float>(dst);
    // The product rounded before the subtraction on the device too (nvcc would fuse them into an FMA, which can
    // move a source coordinate across a pixel boundary).
#ifdef __CUDA_ARCH__
  const float src = __fmul_rn(scale, static_cast<float>(dst) + 0.5f) - 0.5f;
#else
  const float src = scale * (static_cast<float>(dst) + 0.5f) - 0.5f;
#endif
  return src < 0 ? 0.0f : src;
}

// One output coordinate's two source pixels (i0 and i0 + step) and their weights, in T from float as MXNet.
template <typename T>
struct Tap {
  std::int64_t i0, step;
  T l0, l1;
};
template <typename T>
TROUPE_HOST_DEVICE Tap<T> TapAt(float scale, std::int64_t dst, std::int64_t in_size, bool align_corners) {
  const float r = SourceIndex(scale, dst, align_corners);
  const auto i0 = static_cast<std::int64_t>(r);
  Tap<T> t;
  t.i0 = i0;
  t.step = i0 < in_size - 1 ? 1 : 0;
  t.l1 = static_cast<T>(r - static_cast<float>(i0));
  t.l0 = T(1) - t.l1;
  return t;
}

}  // namespace image_resize

}  // namespace troupe
