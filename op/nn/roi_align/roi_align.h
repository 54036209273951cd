// _contrib_ROIAlign's parameters and the sampling arithmetic both devices share (roi_align.cc: property and CPU
// operator; roi_align.cu: GPU operator), step for step as MXNet's kernel in the element type. Pure data and
// functions: thread-safe. Compiles under nvcc: what kernels run is TROUPE_HOST_DEVICE.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "base/error.h"
#include "op/param.h"
#include "tensor/tensor.h"

namespace troupe {

struct ROIAlignParam : Params<ROIAlignParam> {
  TShape pooled_size;
  float spatial_scale = 0;
  int sample_ratio = -1;
  bool position_sensitive = false;
  bool aligned = false;
  static void Declare(ParamSchema<ROIAlignParam>& s) {
    s.Field("pooled_size", &ROIAlignParam::pooled_size)
        .Describe("ROI Align output roi feature map height and width: (h, w)");
    s.Field("spatial_scale", &ROIAlignParam::spatial_scale)
        .Range(0.0, 1.0)
        .Describe(
            "Ratio of input feature map height (or w) to raw image height (or w). Equals the reciprocal of "
            "total stride in convolutional layers");
    s.Field("sample_ratio", &ROIAlignParam::sample_ratio)
        .Default(-1)
        .Describe("Optional sampling ratio of ROI align, using adaptive size by default.");
    s.Field("position_sensitive", &ROIAlignParam::position_sensitive)
        .Default(false)
        .Describe(
            "Whether to perform position-sensitive RoI pooling (R-FCN's PSRoIPooling): the input channels are "
            "reduced by ph*pw times");
    s.Field("aligned", &ROIAlignParam::aligned)
        .Default(false)
        .Describe("Center-aligned ROIAlign introduced in Detectron2. To enable, set aligned to True.");
  }
};

namespace roi_align {

inline constexpr const char* kOp = "_contrib_ROIAlign";

// One bilinear sample: four positions in a (H, W) plane and their weights (all 0 outside the map).
template <typename T>
struct Sample {
  std::int64_t pos[4] = {0, 0, 0, 0};
  T w[4] = {0, 0, 0, 0};
  bool inside = false;
};

template <typename T>
TROUPE_HOST_DEVICE Sample<T> Bilinear(std::int64_t height, std::int64_t width, T y, T x) {
  Sample<T> s;
  if (y < -1.0 || y > height || x < -1.0 || x > width) return s;
  if (y <= 0) y = 0;
  if (x <= 0) x = 0;
  auto y_low = static_cast<std::int64_t>(y), x_low = static_cast<std::int64_t>(x);
  std::int64_t y_high, x_high;
  if (y_low >= height - 1) {
    y_high = y_low = height - 1;
    y = static_cast<T>(y_low);
  } else {
    y_high = y_low + 1;
  }
  if (x_low >= width - 1) {
    x_high = x_low = width - 1;
    x = static_cast<T>(x_low);
  } else {
    x_high = x_low + 1;
  }
  const T ly = y - static_cast<T>(y_low), lx = x - static_cast<T>(x_low);
  const T hy = static_cast<T>(1. - ly), hx = static_cast<T>(1. - lx);
  s.w[0] = hy * hx;
  s.w[1] = hy * lx;
  s.w[2] = ly * hx;
  s.w[3] = ly * lx;
  s.pos[0] = y_low * width + x_low;
  s.pos[1] = y_low * width + x_high;
  s.pos[2] = y_high * width + x_low;
  s.pos[3] = y_high * width + x_high;
  s.inside = true;
  return s;
}

// The sampling geometry of one ROI.
template <typename T>
struct RoiGeometry {
  std::int64_t batch = 0;
  T start_h = 0, start_w = 0, bin_h = 0, bin_w = 0;
  int grid_h = 1, grid_w = 1;
  T count = 1;
  // The sample (iy, ix) of bin (ph, pw), as MXNet computes it.
  TROUPE_HOST_DEVICE T Y(int ph, int iy) const {
    return start_h + static_cast<T>(ph) * bin_h + static_cast<T>(iy + .5f) * bin_h / static_cast<T>(grid_h);
  }
  TROUPE_HOST_DEVICE T X(int pw, int ix) const {
    return start_w + static_cast<T>(pw) * bin_w + static_cast<T>(ix + .5f) * bin_w / static_cast<T>(grid_w);
  }
};

// The sizes of one call.
struct Dims {
  std::int64_t batch, channels_in, height, width, rois, channels_out;
  int ph, pw;
  bool position_sensitive;
};

inline Dims DimsOf(const ROIAlignParam& p, const TShape& data, const TShape& rois) {
  Dims d;
  d.batch = data[0];
  d.channels_in = data[1];
  d.height = data[2];
  d.width = data[3];
  d.rois = rois[0];
  d.ph = static_cast<int>(p.pooled_size[0]);
  d.pw = static_cast<int>(p.pooled_size[1]);
  d.position_sensitive = p.position_sensitive;
  d.channels_out = p.position_sensitive ? d.channels_in / (static_cast<std::int64_t>(d.ph) * d.pw) : d.channels_in;
  return d;
}

// The input channel output channel c reads in bin (ph, pw).
TROUPE_HOST_DEVICE inline std::int64_t InputChannel(const Dims& d, std::int64_t c, int ph, int pw) {
  if (!d.position_sensitive) return c;
  return (c * d.ph + ph) * d.pw + pw;
}

// A ROI's batch index as MXNet reads it (truncated to int); negative: the ROI is skipped (zeros).
template <typename T>
TROUPE_HOST_DEVICE std::int64_t BatchIndex(T v) {
  return static_cast<std::int64_t>(static_cast<int>(v));
}

// a * b rounded before any addition on the device too (nvcc would fuse a following add into an FMA; the CPU
// rounds the product).
template <typename T>
TROUPE_HOST_DEVICE T Mul(T a, T b) {
#ifdef __CUDA_ARCH__
  if constexpr (sizeof(T) == 4) {
    return __fmul_rn(a, b);
  } else {
    return __dmul_rn(a, b);
  }
#else
  return a * b;
#endif
}

// The sampling geometry of one ROI (MXNet's arithmetic); with aligned, an empty ROI gives a geometry of no
// size, which CheckRoi reports.
template <typename T>
TROUPE_HOST_DEVICE RoiGeometry<T> GeometryOf(const T* roi, const Dims& d, float spatial_scale, int sample_ratio,
                                             bool aligned) {
  RoiGeometry<T> g;
  const T scale = static_cast<T>(spatial_scale);
  const T offset = aligned ? static_cast<T>(0.5) : static_cast<T>(0);
  g.start_w = Mul(roi[1], scale) - offset;
  g.start_h = Mul(roi[2], scale) - offset;
  const T end_w = Mul(roi[3], scale) - offset;
  const T end_h = Mul(roi[4], scale) - offset;
  T roi_w = end_w - g.start_w, roi_h = end_h - g.start_h;
  if (!aligned) {
    // Malformed ROIs become 1x1.
    roi_w = roi_w < static_cast<T>(1.) ? static_cast<T>(1.) : roi_w;  // std::max, also on the device
    roi_h = roi_h < static_cast<T>(1.) ? static_cast<T>(1.) : roi_h;
  }
  g.bin_h = roi_h / static_cast<T>(d.ph);
  g.bin_w = roi_w / static_cast<T>(d.pw);
  g.grid_h = sample_ratio > 0 ? sample_ratio : static_cast<int>(ceil(roi_h / static_cast<T>(d.ph)));
  g.grid_w = sample_ratio > 0 ? sample_ratio : static_cast<int>(ceil(roi_w / static_cast<T>(d.pw)));
  g.count = static_cast<T>(g.grid_h * g.grid_w);
  return g;
}

// Host checks of one ROI row (the CPU operator's, and the GPU operator's on a host copy of the ROIs): a batch
// index past the data's images, and with aligned a ROI without a positive width and height, are errors.
template <typename T>
void CheckRoi(const T* roi, const Dims& d, float spatial_scale, bool aligned) {
  const std::int64_t b = BatchIndex(roi[0]);
  if (b >= d.batch) {
    throw Error(std::string(kOp) + ": a ROI has batch index " + std::to_string(b) + " but the data has " +
                std::to_string(d.batch) + " images");
  }
  if (b < 0 || !aligned) return;
  const T scale = static_cast<T>(spatial_scale);
  const T offset = static_cast<T>(0.5);
  const T roi_w = (roi[3] * scale - offset) - (roi[1] * scale - offset);
  const T roi_h = (roi[4] * scale - offset) - (roi[2] * scale - offset);
  if (!(roi_w > 0 && roi_h > 0)) {
    throw Error(std::string(kOp) +
                ": with aligned=True every ROI needs a positive width and height (x2 > x1, y2 > y1)");
  }
}

}  // namespace roi_align

}  // namespace troupe
