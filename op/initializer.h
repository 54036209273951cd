// Parameter initializers (MXNet's mx.init): a rule per parameter name, then the initializer's own rule for
// weights. As MXNet's Initializer.__call__:
//   names ending in "_bias", "_beta", "_moving_mean", "_running_mean" -> 0
//   names ending in "_gamma", "_moving_var", "_running_var"           -> 1
//   names ending in "_weight" (and anything else that is not a data or label input) -> the rule below
// Rules: "xavier" (rnd_type "uniform"|"gaussian", factor_type "avg"|"in"|"out", magnitude 3): with
//   fan_in = shape[1] * prod(shape[2:]), fan_out = shape[0] * prod(shape[2:]), factor by factor_type,
//   scale = sqrt(magnitude / factor): uniform(-scale, scale) or normal(0, scale);
//   "uniform" (scale 0.07): uniform(-scale, scale); "normal" (sigma 0.01): normal(0, sigma);
//   "constant" (value): value; "zero", "one" (also spelt "zeros", "ones", as Gluon does).
// Random draws come from the device's random generator (ResourceManager::SeedRandom makes them
// reproducible). Arrays are filled through the engine; the call returns at once.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tensor/ndarray.h"
#include "op/param.h"

namespace troupe {

class Initializer {
 public:
  // Throws troupe::Error for an unknown name (listing the known ones) or a bad parameter.
  static std::unique_ptr<Initializer> Create(const std::string& name, const Kwargs& params = {});
  static std::vector<std::string> ListNames();
  virtual ~Initializer() = default;

  // Initialises arr as the parameter `name` (see the name rules above). A weight with fewer than 2
  // dimensions under "xavier" is an error naming it.
  void operator()(const std::string& name, NDArray* arr) const;
  // The initializer's own rule, whatever the name.
  virtual void InitWeight(const std::string& name, NDArray* arr) const = 0;
};

}  // namespace troupe
