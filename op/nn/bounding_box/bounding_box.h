// _contrib_box_decode's parameters and the element code of box_decode and box_encode, shared by the CPU
// operators (bounding_box.cc) and the GPU ones (bounding_box.cu) so that both compute one box in the same
// steps (MXNet's: a DType plus a double product stored in DType). Pure data and functions: thread-safe.
// Compiles under nvcc: the element code is TROUPE_HOST_DEVICE.
#pragma once

#include <cstdint>
#include <string>

#include "op/nn/common/device_math.h"
#include "op/param.h"
#include "tensor/tensor.h"

namespace troupe {

struct BoxDecodeParam : Params<BoxDecodeParam> {
  float std0 = 1.0f, std1 = 1.0f, std2 = 1.0f, std3 = 1.0f;
  float clip = -1.0f;
  std::string format = "center";
  static void Declare(ParamSchema<BoxDecodeParam>& s) {
    s.Field("std0", &BoxDecodeParam::std0).Default(1.0f).Describe("value to be divided from the 1st encoded values");
    s.Field("std1", &BoxDecodeParam::std1).Default(1.0f).Describe("value to be divided from the 2nd encoded values");
    s.Field("std2", &BoxDecodeParam::std2).Default(1.0f).Describe("value to be divided from the 3rd encoded values");
    s.Field("std3", &BoxDecodeParam::std3).Default(1.0f).Describe("value to be divided from the 4th encoded values");
    s.Field("clip", &BoxDecodeParam::clip)
        .Default(-1.0f)
        .Describe("If larger than 0, bounding box target will be clipped to this value.");
    s.Field("format", &BoxDecodeParam::format)
        .Default("center")
        .Choices({"center", "corner"})
        .Describe("The anchors' encoding: 'corner' [xmin, ymin, xmax, ymax] or 'center' [x, y, width, height].");
  }
};

namespace bounding_box {

// box_decode's constants, in T.
template <typename T>
struct DecodeConfig {
  T std0, std1, std2, std3, clip;
  bool has_clip, corner;
};
template <typename T>
DecodeConfig<T> DecodeConfigOf(const BoxDecodeParam& p) {
  return {static_cast<T>(p.std0), static_cast<T>(p.std1), static_cast<T>(p.std2), static_cast<T>(p.std3),
          static_cast<T>(p.clip), p.clip > 0.0f,          p.format == "corner"};
}

// One box: the offsets d (4) against the anchor a (4) into corner coordinates o (4). o may be d.
template <typename T>
TROUPE_HOST_DEVICE void DecodeBox(const T* d, const T* a, const DecodeConfig<T>& c, T* o) {
  T ax = a[0], ay = a[1], aw = a[2], ah = a[3];
  if (c.corner) {
    aw = aw - ax;
    ah = ah - ay;
    // MXNet adds the double product (DType * 0.5) and stores the sum in DType.
    ax = static_cast<T>(ax + aw * 0.5);
    ay = static_cast<T>(ay + ah * 0.5);
  }
  const T ox = d[0] * c.std0 * aw + ax;
  const T oy = d[1] * c.std1 * ah + ay;
  T dw = d[2] * c.std2, dh = d[3] * c.std3;
  if (c.has_clip) {
    dw = dw < c.clip ? dw : c.clip;
    dh = dh < c.clip ? dh : c.clip;
  }
  dw = act_norm::Exp(dw);
  dh = act_norm::Exp(dh);
  const T ow = static_cast<T>(dw * aw * 0.5);
  const T oh = static_cast<T>(dh * ah * 0.5);
  o[0] = ox - ow;
  o[1] = oy - oh;
  o[2] = ox + ow;
  o[3] = oy + oh;
}

// One anchor a (4, corner) matched to the reference box r (4, corner): the normalised center offsets t (4)
// and the mask mk (4), both 0 unless sample > 0.5.
template <typename T>
TROUPE_HOST_DEVICE void EncodeBox(T sample, const T* r, const T* a, const T* means, const T* stds, T* t, T* mk) {
  // As MXNet: a DType plus a double product, stored in DType.
  const T rw = r[2] - r[0], rh = r[3] - r[1];
  const T rx = static_cast<T>(r[0] + rw * 0.5), ry = static_cast<T>(r[1] + rh * 0.5);
  const T aw = a[2] - a[0], ah = a[3] - a[1];
  const T ax = static_cast<T>(a[0] + aw * 0.5), ay = static_cast<T>(a[1] + ah * 0.5);
  const T valid = sample > 0.5 ? T(1) : T(0);
  for (int c = 0; c < 4; ++c) mk[c] = valid;
  const bool on = valid > static_cast<T>(0.5);
  t[0] = on ? ((rx - ax) / aw - means[0]) / stds[0] : T(0);
  t[1] = on ? ((ry - ay) / ah - means[1]) / stds[1] : T(0);
  t[2] = on ? (act_norm::Log(rw / aw) - means[2]) / stds[2] : T(0);
  t[3] = on ? (act_norm::Log(rh / ah) - means[3]) / stds[3] : T(0);
}

}  // namespace bounding_box

}  // namespace troupe
