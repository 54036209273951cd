// The slicing matrix operators: slice (crop), slice_axis, slice_like, SliceChannel (split) and stack, with
// MXNet 1.9.1's index rules. Each is a strided view of a "big" array (the input; stack's output) copied to
// or from a contiguous "small" one; matrix.cc runs the copies.
#include <algorithm>
#include <string>
#include <vector>

#include "base/error.h"
#include "op/nn/matrix/matrix.h"

namespace troupe {

namespace {

using matrix::CheckInputCount;
using matrix::Movement;
using matrix::Strides;

std::string Tuple(const std::vector<std::int64_t>& v) { return param_detail::PrintTuple(v); }
std::string Tuple(const std::vector<std::optional<std::int64_t>>& v) { return param_detail::PrintOptionalTuple(v); }

// The shape of the slice `r` of every dimension.
TShape SlicedShape(const std::vector<SliceDim>& r) {
  std::vector<std::int64_t> s;
  for (const SliceDim& d : r) s.push_back(d.size);
  return TShape(s);
}

// The view of `big` that `r` selects, read into a contiguous array of its shape: src is big, dst the slice.
matrix::CopyPlan SlicePlan(const TShape& big, const std::vector<SliceDim>& r) {
  const auto bs = Strides(big), ss = Strides(SlicedShape(r));
  matrix::CopyPlan p;
  for (int d = 0; d < big.ndim(); ++d) {
    if (r[d].size > 0) p.src_offset += r[d].begin * bs[d];
    p.Push(r[d].size, r[d].step * bs[d], ss[d]);
  }
  return p;
}

// Every dimension of `s` whole.
std::vector<SliceDim> Whole(const TShape& s) {
  std::vector<SliceDim> r(static_cast<std::size_t>(s.ndim()));
  for (int d = 0; d < s.ndim(); ++d) r[d].size = s[d];
  return r;
}

const TShape* DataShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape, const char* op) {
  CheckInputCount(*in_shape, 1, op, "data");
  out_shape->resize(1);
  const TShape& d = (*in_shape)[0];
  return d.known() ? &d : nullptr;
}

}  // namespace

// ---- slice ----

void SliceProp::Init(const Kwargs& kwargs) {
  param_.Init(kwargs, "slice");
  if (param_.begin.size() != param_.end.size()) {
    throw Error("slice: parameters 'begin' " + Tuple(param_.begin) + " and 'end' " + Tuple(param_.end) +
                " must have the same length");
  }
  if (!param_.step.empty() && param_.step.size() != param_.begin.size()) {
    throw Error("slice: parameter 'step' " + Tuple(param_.step) + " must be () or as long as 'begin' " +
                Tuple(param_.begin));
  }
  for (const auto& s : param_.step) {
    if (s && *s == 0) throw Error("slice: parameter 'step' " + Tuple(param_.step) + " contains 0; steps cannot be 0");
  }
}

std::vector<SliceDim> SliceRanges(const SliceParam& p, const TShape& data) {
  if (data.ndim() == 0) throw Error("slice: the input is a scalar (); slice needs at least 1 dimension");
  if (p.begin.size() > static_cast<std::size_t>(data.ndim())) {
    throw Error("slice: parameter 'begin' " + Tuple(p.begin) + " has more indices than the input " +
                data.ToString() + " has dimensions");
  }
  std::vector<SliceDim> r = Whole(data);
  for (std::size_t i = 0; i < p.begin.size(); ++i) {
    const std::int64_t s = !p.step.empty() && p.step[i] ? *p.step[i] : 1;
    const std::int64_t len = data[static_cast<int>(i)];
    std::int64_t b = 0, e = 0;
    if (len > 0) {
      // None: from the first element in the step's direction to past the last one.
      b = p.begin[i] ? *p.begin[i] : (s < 0 ? len - 1 : 0);
      e = p.end[i] ? *p.end[i] : (s < 0 ? -1 : len);
      if (b < 0) b += len;
      if (e < 0 && p.end[i]) e += len;
      // Clipped to the dimension; a begin outside it in the step's direction selects nothing (-1).
      if (b < 0 && s > 0) b = 0;
      if (b > len - 1 && s < 0) b = len - 1;
      if (b < 0 || b > len - 1) b = -1;
      e = std::min(std::max<std::int64_t>(e, -1), len);
    }
    std::int64_t size = 0;
    if (e != b && b >= 0) size = s > 0 ? (e > b ? (e - b - 1) / s + 1 : 0) : (e < b ? (b - e - 1) / (-s) + 1 : 0);
    r[i] = {std::max<std::int64_t>(b, 0), s, size};
  }
  return r;
}

bool SliceProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                           std::vector<TShape>*) const {
  const TShape* d = DataShape(in_shape, out_shape, "slice");
  if (d == nullptr) return false;
  AssignShape(out_shape, 0, SlicedShape(SliceRanges(param_, *d)), "slice", "output");
  return true;
}

std::vector<Movement> SliceProp::Movements(const std::vector<TShape>& in, const std::vector<TShape>&) const {
  if (!in[0].known()) return {};
  return {{0, 0, SlicePlan(in[0], SliceRanges(param_, in[0]))}};
}

// ---- slice_axis ----

std::vector<SliceDim> SliceAxisProp::Ranges(const TShape& data) const {
  const int axis = internal::NormalizeAxis(param_.axis, data.ndim(), "slice_axis", "axis");
  const std::int64_t len = data[axis];
  std::int64_t b = param_.begin, e = 0;
  if (b < 0) b += len;
  const std::string given = "begin " + std::to_string(param_.begin) + " and end " +
                            (param_.end ? std::to_string(*param_.end) : std::string("None"));
  if (len > 0) {
    e = param_.end.value_or(len);
    if (e < 0) e += len;
    if (e > len || b < 0 || b >= e) {
      throw Error("slice_axis: " + given + " do not select a non-empty range of axis " + std::to_string(axis) +
                  " of size " + std::to_string(len) + " (input " + data.ToString() + ")");
    }
  } else {
    b = 0;
  }
  std::vector<SliceDim> r = Whole(data);
  r[axis] = {b, 1, e - b};
  return r;
}

bool SliceAxisProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                               std::vector<TShape>*) const {
  const TShape* d = DataShape(in_shape, out_shape, "slice_axis");
  if (d == nullptr) return false;
  AssignShape(out_shape, 0, SlicedShape(Ranges(*d)), "slice_axis", "output");
  return true;
}

std::vector<Movement> SliceAxisProp::Movements(const std::vector<TShape>& in, const std::vector<TShape>&) const {
  if (!in[0].known()) return {};
  return {{0, 0, SlicePlan(in[0], Ranges(in[0]))}};
}

// ---- slice_like ----

namespace {

// The first entries of data along the axes (all of them when axes is empty) up to shape_like's sizes.
std::vector<SliceDim> SliceLikeRanges(const SliceLikeParam& p, const TShape& data, const TShape& like) {
  std::vector<SliceDim> r = Whole(data);
  auto take = [&](int axis) {
    if (like[axis] > data[axis]) {
      throw Error("slice_like: axis " + std::to_string(axis) + " of 'shape_like' " + like.ToString() +
                  " is longer than that of 'data' " + data.ToString());
    }
    r[axis].size = like[axis];
  };
  if (p.axes.empty()) {
    if (data.ndim() != like.ndim()) {
      throw Error("slice_like: without 'axes' every axis is sliced, but 'data' " + data.ToString() + " and " +
                  "'shape_like' " + like.ToString() + " have different numbers of dimensions");
    }
    for (int d = 0; d < data.ndim(); ++d) take(d);
    return r;
  }
  for (std::int64_t a : p.axes) {
    const int axis = internal::NormalizeAxis(static_cast<int>(a), data.ndim(), "slice_like", "axes");
    if (axis >= like.ndim()) {
      throw Error("slice_like: parameter 'axes' " + Tuple(p.axes) + " names axis " + std::to_string(axis) +
                  " but 'shape_like' " + like.ToString() + " has " + std::to_string(like.ndim()) + " dimensions");
    }
    take(axis);
  }
  return r;
}

}  // namespace

bool SliceLikeProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                               std::vector<TShape>*) const {
  CheckInputCount(*in_shape, 2, "slice_like", "data, shape_like");
  out_shape->resize(1);
  const TShape &d = (*in_shape)[0], &like = (*in_shape)[1];
  if (!d.known() || !like.known()) return false;
  AssignShape(out_shape, 0, SlicedShape(SliceLikeRanges(param_, d, like)), "slice_like", "output");
  return true;
}

std::vector<Movement> SliceLikeProp::Movements(const std::vector<TShape>& in, const std::vector<TShape>& out) const {
  // The ranges follow from the output's shape (shape_like's sizes on the sliced axes): shape_like's own shape
  // is not at hand in backward when it gets no gradient.
  if (!in[0].known() || !out[0].known()) return {};
  return {{0, 0, SlicePlan(in[0], SliceLikeRanges(param_, in[0], out[0]))}};
}

// ---- SliceChannel ----

std::vector<std::string> SliceChannelProp::ListOutputs() const {
  std::vector<std::string> outs;
  for (int i = 0; i < param_.num_outputs; ++i) outs.push_back("output" + std::to_string(i));
  return outs;
}

bool SliceChannelProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                                  std::vector<TShape>*) const {
  CheckInputCount(*in_shape, 1, "SliceChannel", "data");
  out_shape->resize(static_cast<std::size_t>(param_.num_outputs));
  // From the outputs back, as MXNet's SplitOpShape: each known output gives the input's dimensions (the split
  // axis num_outputs times the output's, or num_outputs itself where squeeze_axis dropped it).
  for (const TShape& o : *out_shape) {
    if (o.ndim() < 0) continue;
    const int in_ndim = o.ndim() + (param_.squeeze_axis ? 1 : 0);
    const int axis = internal::NormalizeAxis(param_.axis, in_ndim, "SliceChannel", "axis");
    std::vector<std::int64_t> back = o.ToVector();
    if (param_.squeeze_axis) {
      back.insert(back.begin() + axis, param_.num_outputs);
    } else if (back[axis] >= 0) {
      back[axis] *= param_.num_outputs;
    }
    AssignShape(in_shape, 0, TShape(back), "SliceChannel", "data");
  }
  const TShape& d = (*in_shape)[0];
  if (!d.known()) return false;
  const int axis = internal::NormalizeAxis(param_.axis, d.ndim(), "SliceChannel", "axis");
  const std::int64_t n = param_.num_outputs;
  if (d[axis] % n != 0) {
    throw Error("SliceChannel: axis " + std::to_string(axis) + " of the input " + d.ToString() + " has size " +
                std::to_string(d[axis]) + ", which num_outputs=" + std::to_string(n) +
                " does not divide into equal parts");
  }
  if (param_.squeeze_axis && d[axis] != n) {
    throw Error("SliceChannel: squeeze_axis needs axis " + std::to_string(axis) + " of the input " + d.ToString() +
                " to have size num_outputs=" + std::to_string(n));
  }
  std::vector<std::int64_t> out = d.ToVector();
  out[axis] /= n;
  if (param_.squeeze_axis) out.erase(out.begin() + axis);  // 1 by the check above
  for (int i = 0; i < param_.num_outputs; ++i) {
    AssignShape(out_shape, static_cast<std::size_t>(i), TShape(out), "SliceChannel", "output" + std::to_string(i));
  }
  return true;
}

std::vector<Movement> SliceChannelProp::Movements(const std::vector<TShape>& in,
                                                  const std::vector<TShape>&) const {
  const TShape& d = in[0];
  if (!d.known()) return {};
  const int axis = internal::NormalizeAxis(param_.axis, d.ndim(), "SliceChannel", "axis");
  const std::int64_t part = d[axis] / param_.num_outputs;
  std::vector<Movement> moves;
  std::vector<SliceDim> r = Whole(d);
  for (int i = 0; i < param_.num_outputs; ++i) {
    r[axis] = {i * part, 1, part};
    moves.push_back({0, i, SlicePlan(d, r)});
  }
  return moves;
}

// ---- stack ----

std::vector<std::string> StackProp::ListArguments() const {
  std::vector<std::string> args;
  for (int i = 0; i < param_.num_args; ++i) args.push_back("arg" + std::to_string(i));
  return args;
}

bool StackProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                           std::vector<TShape>*) const {
  const auto n = static_cast<std::size_t>(param_.num_args);
  if (in_shape->size() != n) {
    throw Error("stack: num_args is " + std::to_string(n) + " but " + std::to_string(in_shape->size()) +
                " inputs were given");
  }
  out_shape->resize(1);
  // Every input has the same shape: what any of them knows holds for all.
  const auto args = ListArguments();
  std::vector<TShape> common(1);
  for (std::size_t i = 0; i < n; ++i) AssignShape(&common, 0, (*in_shape)[i], "stack", args[i]);
  for (std::size_t i = 0; i < n; ++i) AssignShape(in_shape, i, common[0], "stack", args[i]);
  const TShape& d = common[0];
  if (!d.known()) return false;
  if (d.ndim() + 1 > TShape::kMaxDims) {
    throw Error("stack: the inputs " + d.ToString() + " already have " + std::to_string(TShape::kMaxDims) +
                " dimensions, the most a shape may have");
  }
  const int axis = internal::NormalizeAxis(param_.axis, d.ndim() + 1, "stack", "axis");
  std::vector<std::int64_t> out = d.ToVector();
  out.insert(out.begin() + axis, param_.num_args);
  AssignShape(out_shape, 0, TShape(out), "stack", "output");
  return true;
}

std::vector<Movement> StackProp::Movements(const std::vector<TShape>&, const std::vector<TShape>& out) const {
  // From the output's shape alone: an input without a gradient has no shape at hand in backward.
  const TShape& o = out[0];
  if (!o.known()) return {};
  const int axis = internal::NormalizeAxis(param_.axis, o.ndim(), "stack", "axis");
  std::vector<Movement> moves;
  std::vector<SliceDim> r = Whole(o);
  for (int i = 0; i < param_.num_args; ++i) {
    r[axis] = {i, 1, 1};
    // Input i is the output's slice i along axis: the slice's plan run the other way.
    moves.push_back({i, 0, SlicePlan(o, r).Reversed()});
  }
  return moves;
}

// ---- registration ----

TROUPE_REGISTER_OP_PROPERTY(slice, SliceProp)
    .describe("Slices a region of the array (begin, end and step per axis; None and negative indices as in "
              "Python).")
    .add_argument("data", "NDArray-or-Symbol", "Source input")
    .add_arguments(SliceParam::Docs())
    .add_alias("crop");

TROUPE_REGISTER_OP_PROPERTY(slice_axis, SliceAxisProp)
    .describe("Slices along a given axis.")
    .add_argument("data", "NDArray-or-Symbol", "Source input")
    .add_arguments(SliceAxisParam::Docs());

TROUPE_REGISTER_OP_PROPERTY(slice_like, SliceLikeProp)
    .describe("Slices a region of the array like the shape of another array (from 0 on the given axes).")
    .add_argument("data", "NDArray-or-Symbol", "Source input")
    .add_argument("shape_like", "NDArray-or-Symbol", "Shape like input")
    .add_arguments(SliceLikeParam::Docs());

TROUPE_REGISTER_OP_PROPERTY(SliceChannel, SliceChannelProp)
    .describe("Splits an array along a particular axis into multiple sub-arrays.")
    .add_argument("data", "NDArray-or-Symbol", "The input")
    .add_arguments(SliceChannelParam::Docs())
    .add_alias("split");

TROUPE_REGISTER_OP_PROPERTY(stack, StackProp)
    .describe("Join a sequence of arrays along a new axis.")
    .add_argument("data", "NDArray-or-Symbol[]", "List of arrays to stack")
    .add_arguments(StackParam::Docs());

}  // namespace troupe
