// The window geometry parameters shared by Convolution, Deconvolution and Pooling (op/nn/common/geometry.h).
#include "op/nn/common/geometry.h"

#include <string>

#include "base/error.h"

namespace troupe {

void CheckGeometryTuple(const TShape& t, int spatial, const char* op, const char* name, std::int64_t min_value,
                        bool may_be_empty) {
  if (t.ndim() <= 0 && may_be_empty) return;
  if (t.ndim() != spatial) {
    throw Error(std::string(op) + ": parameter '" + name + "' is " + t.ToString() + "; it must have " +
                (spatial == 3 ? "3 values (depth, height, width) for 3-D " : "2 values (height, width) for 2-D ") +
                op);
  }
  for (int i = 0; i < spatial; ++i) {
    if (t[i] < min_value) {
      throw Error(std::string(op) + ": parameter '" + name + "' is " + t.ToString() + "; each value must be >= " +
                  std::to_string(min_value));
    }
  }
}

void SpatialValues(const TShape& t, int spatial, std::int64_t* d, std::int64_t* h, std::int64_t* w) {
  if (t.ndim() != spatial) return;
  if (spatial == 3) *d = t[0];
  *h = t[spatial - 2];
  *w = t[spatial - 1];
}

std::string SpatialDataDims(int spatial) {
  return spatial == 3 ? "5 dimensions (batch, channel, depth, height, width)"
                      : "4 dimensions (batch, channel, height, width)";
}

}  // namespace troupe
