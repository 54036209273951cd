// L2Normalization's parameters and its grouping of the data, shared by the property and CPU operator
// (l2_normalization.cc) and the GPU operator (l2_normalization.cu). Pure data and functions: thread-safe.
// Compiles under nvcc (host code).
#pragma once

#include <string>

#include "op/nn/common/device_math.h"
#include "op/param.h"
#include "tensor/tensor.h"

namespace troupe {

struct L2NormalizationParam : Params<L2NormalizationParam> {
  float eps = 1e-10f;
  std::string mode = "instance";
  static void Declare(ParamSchema<L2NormalizationParam>& s) {
    s.Field("eps", &L2NormalizationParam::eps).Default(1e-10f).Describe("A small constant for numerical stability.");
    s.Field("mode", &L2NormalizationParam::mode)
        .Default("instance")
        .Choices({"channel", "instance", "spatial"})
        .Describe("The dimensions the L2 norm is computed over.");
  }
};

namespace l2_norm {

// The data as (outer, n, inner) with the norm taken over n; the norm of (o, i) is at o * inner + i.
inline act_norm::AxisView GroupView(const std::string& mode, const TShape& s) {
  act_norm::AxisView v;
  if (mode == "instance") {
    v.outer = s[0];
    v.n = s.ProdDims(1, s.ndim());
    v.inner = 1;
  } else if (mode == "channel") {
    v.outer = s[0];
    v.n = s[1];
    v.inner = s.ProdDims(2, s.ndim());
  } else {
    v.outer = s[0] * s[1];
    v.n = s.ProdDims(2, s.ndim());
    v.inner = 1;
  }
  return v;
}

}  // namespace l2_norm

}  // namespace troupe
