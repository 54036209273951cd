// SequenceMask's parameters and the sequence operators' view of their data (sequence.cc), with the masking
// rule the CPU operator and the GPU one (sequence.cu) share. Pure functions: thread-safe. Compiles under nvcc:
// what runs in kernels is TROUPE_HOST_DEVICE.
#pragma once

#include <cstdint>

#include "op/param.h"
#include "tensor/tensor.h"

namespace troupe::sequence {

struct SequenceParam : Params<SequenceParam> {
  bool use_sequence_length = false;
  float value = 0.0f;  // SequenceMask only
  int axis = 0;
  static void Declare(ParamSchema<SequenceParam>& s) {
    s.Field("use_sequence_length", &SequenceParam::use_sequence_length)
        .Default(false)
        .Describe("Take an extra input 'sequence_length' with the length of each sequence.");
    s.Field("value", &SequenceParam::value).Default(0.0f).Describe("The value to be used as a mask.");
    s.Field("axis", &SequenceParam::axis).Default(0).Describe("The sequence axis: 0 or 1.");
  }
};
// The data as (d0, d1, rest) with the sequence on `axis` (0 or 1) and the batch on the other.
struct SeqView {
  std::int64_t d0, d1, rest, steps, batch;
  int axis;
  // Offset of (step, batch entry) in the data; `rest` elements follow.
  TROUPE_HOST_DEVICE std::int64_t At(std::int64_t t, std::int64_t b) const {
    return (axis == 0 ? t * d1 + b : b * d1 + t) * rest;
  }
};
inline SeqView ViewOf(const TShape& s, int axis) {
  SeqView v;
  v.d0 = s[0];
  v.d1 = s[1];
  v.rest = s.ProdDims(2, s.ndim());
  v.axis = axis;
  v.steps = axis == 0 ? v.d0 : v.d1;
  v.batch = axis == 0 ? v.d1 : v.d0;
  return v;
}

// SequenceMask's element at step t of a sequence of length len: `fill` at or after the length, else x.
template <typename T>
TROUPE_HOST_DEVICE inline T Masked(T x, T fill, std::int64_t t, std::int64_t len) {
  return t >= len ? fill : x;
}

}  // namespace troupe::sequence
