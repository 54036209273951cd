// Checks of the 2-D window geometry parameters shared by Convolution and Pooling (op/nn/common/geometry.h).
#include "op/nn/common/geometry.h"

#include <string>

#include "base/error.h"

namespace troupe {

void CheckGeometryTuple(const TShape& t, const char* op, const char* name, std::int64_t min_value, bool may_be_empty) {
  if (t.ndim() <= 0 && may_be_empty) return;
  if (t.ndim() != 2) {
    throw Error(std::string(op) + ": parameter '" + name + "' is " + t.ToString() +
                "; it must have 2 values (height, width) for 2-D " + op);
  }
  for (int i = 0; i < 2; ++i) {
    if (t[i] < min_value) {
      throw Error(std::string(op) + ": parameter '" + name + "' is " + t.ToString() + "; each value must be >= " +
                  std::to_string(min_value));
    }
  }
}

}  // namespace troupe
