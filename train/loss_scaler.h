// Dynamic loss scaling for float16 mixed-precision training, as MXNet 1.9's amp.LossScaler: the loss
// outputs start the backward pass with their gradient multiplied by scale() (OpContext::loss_scale), so that
// small gradients do not flush to zero in float16; the step then checks every gradient for an infinity or NaN
// (multi_all_finite). A step that overflowed is skipped and the scale halved; after `window` clean steps in a
// row the scale doubles (at most max_scale). The gradients of a step that is taken are divided by the scale
// before the optimizer sees them.
//
// Module::SetLossScaler attaches one to a Module, which then does all of the above in Backward and Update.
//
// Thread-safety: not thread-safe; the Module that owns it calls it from the training thread.
#pragma once

#include <cstdint>

namespace troupe {

class LossScaler {
 public:
  struct Options {
    double init_scale = 65536.0;     // 2^16, MXNet's
    double max_scale = 16777216.0;   // 2^24
    int window = 2000;               // clean steps before the scale doubles
    // Below this the gradients are not finite at any scale (the model itself produces inf or NaN): Step
    // throws troupe::Error instead of halving on.
    double min_scale = 1.0 / 65536.0;
  };

  LossScaler();
  explicit LossScaler(const Options& options);  // throws troupe::Error for a non-positive scale or window

  // The scale the next backward pass starts with.
  double scale() const { return scale_; }
  // Records a step's outcome: true when it overflowed and must be skipped (the scale is halved), false when it
  // is taken (the scale doubles after `window` clean steps in a row). Throws troupe::Error naming the scale
  // when halving would go below min_scale.
  bool Step(bool overflow);
  std::int64_t skipped() const { return skipped_; }  // steps skipped so far
  std::int64_t steps() const { return steps_; }      // steps recorded so far

 private:
  Options options_;
  double scale_;
  int clean_ = 0;  // clean steps since the last change
  std::int64_t skipped_ = 0, steps_ = 0;
};

}  // namespace troupe
