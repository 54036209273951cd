// LayerNorm's parameters and element code, shared by the CPU operator (layer_norm.cc) and the GPU one
// (layer_norm.cu) so both devices compute the same formulas in the same order: one slice (the elements along
// the axis at one outer/inner position) per call for the statistics, the output and the data gradient, one
// axis position per call for gamma's and beta's gradients (summed over the slices in increasing order). Sums
// run in double. Pure functions: thread-safe. Compiles under nvcc: the element code is TROUPE_HOST_DEVICE.
#pragma once

#include <cmath>
#include <cstdint>

#include "op/nn/common/device_math.h"
#include "op/operator.h"
#include "op/param.h"
#include "tensor/tensor.h"

namespace troupe {

struct LayerNormParam : Params<LayerNormParam> {
  int axis = -1;
  float eps = 1e-5f;
  bool output_mean_var = false;
  static void Declare(ParamSchema<LayerNormParam>& s) {
    s.Field("axis", &LayerNormParam::axis)
        .Default(-1)
        .Describe("The axis to normalise along (negative counts from the end); gamma and beta have its size.");
    s.Field("eps", &LayerNormParam::eps).Default(1e-5f).Describe("An epsilon to prevent division by 0.");
    s.Field("output_mean_var", &LayerNormParam::output_mean_var)
        .Default(false)
        .Describe("Output the mean and std computed along the axis as well (they get no gradient).");
  }
};

namespace layer_norm {

constexpr const char* kName = "LayerNorm";

// Slice s (0 <= s < outer * inner) of a tensor viewed as (outer, n, inner): its first element and step.
TROUPE_HOST_DEVICE inline std::int64_t SliceBase(const act_norm::AxisView& v, std::int64_t s) {
  return (s / v.inner) * v.n * v.inner + s % v.inner;
}

// mean and std of slice s, then y = (x - mean) / std * gamma + beta under req_y (statistics first: y may be
// x's memory).
template <typename T>
TROUPE_HOST_DEVICE inline void ForwardSlice(const act_norm::AxisView& v, std::int64_t s, double eps, const T* x,
                                            const T* gamma, const T* beta, T* y, T* mean_out, T* std_out,
                                            OpReqType req_y, OpReqType req_mean, OpReqType req_std) {
  const std::int64_t base = SliceBase(v, s);
  double sum = 0;
  for (std::int64_t k = 0; k < v.n; ++k) sum += x[base + k * v.inner];
  const double mean = sum / static_cast<double>(v.n);
  double sq = 0;
  for (std::int64_t k = 0; k < v.n; ++k) {
    const double d = x[base + k * v.inner] - mean;
    sq += d * d;
  }
  const double sd = act_norm::Sqrt(sq / static_cast<double>(v.n) + eps);
  Assign(mean_out + s, req_mean, static_cast<T>(mean));
  Assign(std_out + s, req_std, static_cast<T>(sd));
  if (req_y == kNullOp) return;
  for (std::int64_t k = 0; k < v.n; ++k) {
    const std::int64_t j = base + k * v.inner;
    Assign(y + j, req_y, static_cast<T>((x[j] - mean) / sd * gamma[k] + beta[k]));
  }
}

// d x of slice s: w - mean(w) - xhat * mean(w * xhat), w = og * gamma / std, xhat = (x - mean) / std.
template <typename T>
TROUPE_HOST_DEVICE inline void DataGradientSlice(const act_norm::AxisView& v, std::int64_t s, const T* og, const T* x,
                                                 const T* gamma, const T* mean, const T* sd, T* gx, OpReqType req) {
  const std::int64_t base = SliceBase(v, s);
  const double m = mean[s], sdev = sd[s];
  double sum_w = 0, sum_wx = 0;
  for (std::int64_t k = 0; k < v.n; ++k) {
    const std::int64_t j = base + k * v.inner;
    const double xhat = (x[j] - m) / sdev;
    const double w = og[j] * static_cast<double>(gamma[k]) / sdev;
    sum_w += w;
    sum_wx += w * xhat;
  }
  const double mean_w = sum_w / static_cast<double>(v.n), mean_wx = sum_wx / static_cast<double>(v.n);
  for (std::int64_t k = 0; k < v.n; ++k) {
    const std::int64_t j = base + k * v.inner;
    const double xhat = (x[j] - m) / sdev;
    const double w = og[j] * static_cast<double>(gamma[k]) / sdev;
    Assign(gx + j, req, static_cast<T>(w - mean_w - xhat * mean_wx));
  }
}

// d gamma = sum(og * xhat) and d beta = sum(og) at axis position k, over the slices in increasing order
// (ggamma / gbeta null: not wanted).
template <typename T>
TROUPE_HOST_DEVICE inline void ScaleShiftGradient(const act_norm::AxisView& v, std::int64_t k, const T* og, const T* x,
                                                  const T* mean, const T* sd, T* ggamma, T* gbeta, OpReqType req_gamma,
                                                  OpReqType req_beta) {
  double dgamma = 0, dbeta = 0;
  for (std::int64_t s = 0; s < v.outer * v.inner; ++s) {
    const std::int64_t j = SliceBase(v, s) + k * v.inner;
    const double xhat = (x[j] - static_cast<double>(mean[s])) / static_cast<double>(sd[s]);
    dgamma += og[j] * xhat;
    dbeta += og[j];
  }
  if (ggamma != nullptr) Assign(ggamma + k, req_gamma, static_cast<T>(dgamma));
  if (gbeta != nullptr) Assign(gbeta + k, req_beta, static_cast<T>(dbeta));
}

}  // namespace layer_norm

}  // namespace troupe
