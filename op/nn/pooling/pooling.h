// Pooling (1-D, 2-D and 3-D: NCW, NCHW and NCDHW; MXNet 1.9's name, parameters and defaults): max, avg and
// sum. The parameter struct, the geometry for one input shape and the property, shared by the CPU operator
// (pooling.cc) and the CUDA one (pooling.cu: cuDNN, or kernels where cuDNN does not apply).
//
// Properties are immutable after Init (thread-safe to share); the Operator objects they create are entered
// by one engine worker at a time. Kept free of CAF and Cap'n Proto: nvcc compiles it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "op/internal/op_util.h"
#include "op/operator.h"
#include "op/param.h"
#include "tensor/tensor.h"

#include "op/nn/common/geometry.h"

namespace troupe {

struct PoolingParam : Params<PoolingParam> {
  TShape kernel;  // may be () with global_pool
  std::string pool_type = "max";
  bool global_pool = false;
  bool cudnn_off = false;
  std::string pooling_convention = "valid";
  TShape stride;  // () means 1
  TShape pad;     // () means 0
  std::optional<int> p_value;
  std::optional<bool> count_include_pad;  // None means True (MXNet's default)
  std::string layout = "None";
  static void Declare(ParamSchema<PoolingParam>& s);
};

// Pooling's geometry for one input shape (global_pool resolved: the kernel is the whole image), in (depth,
// height, width): 2-D pooling has one depth slice (kd, sd 1, pd 0, depth and out_d 1), so one set of loops
// serves both. `spatial`: the input's spatial dimensions, 2 (NCHW) or 3 (NCDHW).
struct PoolGeometry {
  int spatial = 2;
  std::int64_t kd = 1, kh = 0, kw = 0, sd = 1, sh = 1, sw = 1, pd = 0, ph = 0, pw = 0;
  std::int64_t depth = 1, height = 0, width = 0, out_d = 1, out_h = 0, out_w = 0;
  bool max = true, avg = false, full = false, count_include_pad = true;
  // Elements of one channel of the input and of the output.
  TROUPE_HOST_DEVICE std::int64_t in_plane() const { return depth * height * width; }
  TROUPE_HOST_DEVICE std::int64_t out_plane() const { return out_d * out_h * out_w; }
};
// The window of output (od, oh, ow): slices [z0, z1), rows [h0, h1) and columns [w0, w1) inside the image, and
// the divisor of an average (MXNet's rule: the window clipped to the padded input with count_include_pad, else
// the part inside the image). One definition for the CPU operator and the CUDA kernels.
struct PoolWindow {
  std::int64_t z0, z1, h0, h1, w0, w1, area;
};

TROUPE_HOST_DEVICE inline PoolWindow PoolWindowAt(const PoolGeometry& g, std::int64_t od, std::int64_t oh,
                                                  std::int64_t ow) {
  const auto lesser = [](std::int64_t a, std::int64_t b) { return a < b ? a : b; };
  const auto greater = [](std::int64_t a, std::int64_t b) { return a > b ? a : b; };
  PoolWindow w;
  w.z0 = od * g.sd - g.pd;
  w.h0 = oh * g.sh - g.ph;
  w.w0 = ow * g.sw - g.pw;
  w.z1 = lesser(w.z0 + g.kd, g.depth + g.pd);
  w.h1 = lesser(w.h0 + g.kh, g.height + g.ph);
  w.w1 = lesser(w.w0 + g.kw, g.width + g.pw);
  const std::int64_t padded_area = (w.z1 - w.z0) * (w.h1 - w.h0) * (w.w1 - w.w0);
  w.z0 = greater(w.z0, 0);
  w.h0 = greater(w.h0, 0);
  w.w0 = greater(w.w0, 0);
  w.z1 = lesser(w.z1, g.depth);
  w.h1 = lesser(w.h1, g.height);
  w.w1 = lesser(w.w1, g.width);
  w.area = g.count_include_pad ? padded_area : (w.z1 - w.z0) * (w.h1 - w.h0) * (w.w1 - w.w0);
  return w;
}

// Calls fn(offset) for each input element of window w of a plane, in row-major (depth, height, width) order
// (the order in which max pooling's first maximum is found).
template <typename Fn>
TROUPE_HOST_DEVICE inline void ForEachInWindow(const PoolGeometry& g, const PoolWindow& w, Fn&& fn) {
  for (std::int64_t z = w.z0; z < w.z1; ++z) {
    for (std::int64_t h = w.h0; h < w.h1; ++h) {
      const std::int64_t row = (z * g.height + h) * g.width;
      for (std::int64_t c = w.w0; c < w.w1; ++c) fn(row + c);
    }
  }
}

// The geometry for 4-D (NCHW) or 5-D (NCDHW) data. Throws troupe::Error naming Pooling and "data" when the
// input is too small for the kernel.
PoolGeometry MakePoolGeometry(const PoolingParam& p, const TShape& data);

class PoolingProp : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override;
  Kwargs GetParams() const override { return one_d_ ? param_1d_.GetParams() : param_.GetParams(); }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<PoolingProp>(*this); }
  std::string TypeString() const override { return "Pooling"; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override;
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override;
  // The 2-D or 3-D parameters the operators run with (1-D pooling's lifted ones).
  const PoolingParam& param() const { return param_; }

 private:
  // 2-D or 3-D: by the number of kernel values, or with global_pool by the data's dimensions.
  void InitNd(const Kwargs& kwargs);
  bool InferShapeNd(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape) const;

  PoolingParam param_;
  // 1-D pooling (a 1-D kernel, or global pooling of 3-D data) runs lifted to 2-D (op/nn/common/lift_1d.h).
  bool one_d_ = false;
  PoolingParam param_1d_;  // as given, for GetParams
};

}  // namespace troupe
