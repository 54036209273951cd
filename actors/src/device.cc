#include "actors/device.h"

namespace troupe {

const char* LaneName(Lane lane) {
  switch (lane) {
    case Lane::kNormal:
      return "normal";
    case Lane::kPriority:
      return "priority";
    case Lane::kCopyIn:
      return "copy_in";
    case Lane::kCopyOut:
      return "copy_out";
  }
  return "unknown";
}

}  // namespace troupe
