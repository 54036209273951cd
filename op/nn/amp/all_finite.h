// all_finite and multi_all_finite: MXNet's AMP checks that gradients hold no infinity or NaN before a step
// (dynamic loss scaling skips the step and lowers the scale otherwise). The output is one float32: 1 when
// every element of every input is finite, else 0. With init_output false a finite result leaves the output as
// it was, so several calls can AND their results into one flag (kAddTo is not used for that, as in MXNet).
#pragma once

#include "op/param.h"

namespace troupe {

struct AllFiniteParam : Params<AllFiniteParam> {
  bool init_output = true;
  static void Declare(ParamSchema<AllFiniteParam>& s) {
    s.Field("init_output", &AllFiniteParam::init_output).Default(true).Describe("Initialize output to 1.");
  }
};

struct MultiAllFiniteParam : Params<MultiAllFiniteParam> {
  int num_arrays = 1;
  bool init_output = true;
  static void Declare(ParamSchema<MultiAllFiniteParam>& s) {
    s.Field("num_arrays", &MultiAllFiniteParam::num_arrays).Default(1).LowerBound(1).Describe("Number of arrays.");
    s.Field("init_output", &MultiAllFiniteParam::init_output).Default(true).Describe("Initialize output to 1.");
  }
};

}  // namespace troupe
