// Checks of the 2-D window geometry parameters (kernel, stride, dilate, pad) that Convolution and Pooling
// share. Pure functions: thread-safe.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace troupe {

// Checks a 2-D geometry parameter of Convolution or Pooling (kernel, stride, dilate, pad): 2 values, each
// >= min_value, or () when may_be_empty. Throws troupe::Error naming `op` and the parameter.
void CheckGeometryTuple(const TShape& t, const char* op, const char* name, std::int64_t min_value, bool may_be_empty);

}  // namespace troupe
