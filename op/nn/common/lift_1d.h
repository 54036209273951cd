// 1-D Convolution and Pooling (NCW) run as their 2-D forms on (N, C, 1, W) views of the same memory: the
// parameters gain a leading 1 (kernel, stride, dilate) or 0 (pad), every 3-D shape gains a 1 at axis 2, and
// the operator works on the lifted blobs. Pure functions and a stateless adapter: thread-safe as the
// operator they wrap. Host code only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "op/operator.h"

namespace troupe {

// True when kwargs give a 1-D kernel ("(3,)" or "3").
bool IsOneDimensionalKernel(const Kwargs& kwargs);
// The 2-D kwargs of 1-D ones: kernel, stride and dilate get a leading 1, pad a leading 0; layout NCW
// becomes NCHW.
Kwargs LiftKwargsTo2d(const Kwargs& kwargs);
// (a, b, c) -> (a, b, 1, c); other shapes unchanged (unknown ones too).
TShape LiftShapeTo2d(const TShape& s);
// (a, b, 1, c) -> (a, b, c); other shapes unchanged.
TShape DropLiftedAxis(const TShape& s);
// An operator that lifts every 3-D blob it is given and calls `inner` (a 2-D operator).
std::unique_ptr<Operator> LiftOperatorTo2d(std::unique_ptr<Operator> inner);

}  // namespace troupe
