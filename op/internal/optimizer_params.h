// The parameters every optimizer rule takes besides its learning rate (wd, rescale_grad, clip_gradient), as
// the optimizers (op/src/optimizer.cc) and the update operators (op/nn/optimizer/update_ops.cc) declare them,
// and the step scalars made from them. Internal to op/.
#pragma once

#include "op/internal/optimizer_kernels.h"
#include "op/param.h"

namespace troupe::internal {

// Declares P's wd, rescale_grad and clip_gradient fields.
template <typename P>
void DeclareCommon(ParamSchema<P>& s) {
  s.Field("wd", &P::wd).Default(0.f).Describe("Weight decay (L2 regularisation coefficient).");
  s.Field("rescale_grad", &P::rescale_grad).Default(1.f).Describe("Gradients are multiplied by this.");
  s.Field("clip_gradient", &P::clip_gradient)
      .Default(-1.f)
      .Describe("Clip the gradient to [-clip_gradient, clip_gradient]; < 0 turns clipping off.");
}

// The scalars every rule reads for an update with learning rate lr, weight decay wd and P's rescale_grad and
// clip_gradient; callers add their rule's own.
template <typename P>
OptimizerScalars CommonScalars(double lr, double wd, const P& p) {
  OptimizerScalars sc;
  sc.lr = lr;
  sc.wd = wd;
  sc.rescale = p.rescale_grad;
  sc.clip = p.clip_gradient;
  return sc;
}

}  // namespace troupe::internal
