// Dynamic loss scaling (see train/loss_scaler.h).
#include "train/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/error.h"

namespace troupe {

LossScaler::LossScaler() : LossScaler(Options{}) {}

LossScaler::LossScaler(const Options& options) : options_(options), scale_(options.init_scale) {
  const auto positive = [](double v) { return v > 0 && std::isfinite(v); };
  if (!positive(options.init_scale) || !positive(options.max_scale) || !positive(options.min_scale) ||
      options.min_scale > options.init_scale || options.init_scale > options.max_scale) {
    throw Error("LossScaler: the scales must be positive and finite with min_scale <= init_scale <= max_scale (got " +
                std::to_string(options.min_scale) + ", " + std::to_string(options.init_scale) + ", " +
                std::to_string(options.max_scale) + ")");
  }
  if (options.window < 1) {
    throw Error("LossScaler: window must be at least 1 step, got " + std::to_string(options.window));
  }
}

bool LossScaler::Step(bool overflow) {
  ++steps_;
  if (overflow) {
    ++skipped_;
    clean_ = 0;
    if (scale_ / 2 < options_.min_scale) {
      throw Error("LossScaler: the gradients are not finite even at loss scale " + std::to_string(scale_) +
                  " (min_scale " + std::to_string(options_.min_scale) +
                  "): the model produces infinities or NaN itself; check the learning rate and the data");
    }
    scale_ /= 2;
    return true;
  }
  if (++clean_ >= options_.window) {
    clean_ = 0;
    scale_ = std::min(options_.max_scale, scale_ * 2);
  }
  return false;
}

}  // namespace troupe
