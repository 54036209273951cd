// The window geometry parameters (kernel, stride, dilate, pad) that Convolution, Deconvolution and Pooling
// share: their checks, and the spatial values as the operators' (d, h, w) fields and the oneDNN / cuDNN
// descriptors take them. A 2-D window is a 3-D one with a single depth slice. Pure functions: thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace troupe {

// Checks a geometry parameter of `op` with `spatial` dimensions (2: (height, width); 3: (depth, height,
// width)): that many values, each >= min_value, or () when may_be_empty. Throws troupe::Error naming `op` and
// the parameter.
void CheckGeometryTuple(const TShape& t, int spatial, const char* op, const char* name, std::int64_t min_value,
                        bool may_be_empty);

// Copies a parameter of `spatial` values into (*d, *h, *w) (2 values: into *h, *w); leaves them as they are
// when t has another number of values (() keeps the defaults).
void SpatialValues(const TShape& t, int spatial, std::int64_t* d, std::int64_t* h, std::int64_t* w);

// (h, w) for 2 spatial dimensions, (d, h, w) for 3: the order oneDNN's and cuDNN's descriptors take.
inline std::vector<std::int64_t> SpatialDims(int spatial, std::int64_t d, std::int64_t h, std::int64_t w) {
  if (spatial == 3) return {d, h, w};
  return {h, w};
}

// What `op`'s data needs for `spatial` dimensions: "4 dimensions (batch, channel, height, width)" or
// "5 dimensions (batch, channel, depth, height, width)", for error messages.
std::string SpatialDataDims(int spatial);

}  // namespace troupe
