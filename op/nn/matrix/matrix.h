// MXNet 1.9.1's shape and index ("matrix") operators: transpose, SwapAxis (swapaxes), expand_dims, squeeze,
// reshape_like, reverse (flip), tile, repeat (matrix.cc) and slice (crop), slice_axis, slice_like, SliceChannel
// (split), stack (slice.cc). Their names, parameters, defaults and shape rules are MXNet's.
//
// Every one of them only moves elements: each output element is one input element. So each property describes
// what it does as a list of Movements, one strided copy (a CopyPlan) per pair of input and output, and one CPU
// operator (MatrixCpuOp) runs them for all: forward copies input -> output along the plans, backward runs the
// same plans the other way (output gradient -> input gradient), adding where several output elements come
// from one input element (tile, repeat) and zeroing what no output element comes from (slice).
//
// Properties are immutable after Init (thread-safe to share); the helpers are pure functions. On a GPU the same
// operator runs the plans with matrix.cu's strided-copy kernel (CreateOperator asks CreateGpuOperator).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "op/internal/op_util.h"
#include "op/operator.h"
#include "op/param.h"
#include "tensor/tensor.h"

namespace troupe {

namespace matrix {

// The most dimensions a plan may have: tile views each output dimension as (repetition, element).
constexpr int kMaxCopyDims = 2 * TShape::kMaxDims;

// A strided copy: for every index (i_0, ..., i_{ndim-1}) below shape,
//   dst[dst_offset + sum_d i_d * dst_stride[d]]  (req)=  src[src_offset + sum_d i_d * src_stride[d]],
// offsets and strides in elements. A negative stride walks backwards (reverse, slice with a negative step);
// a zero source stride repeats an element (tile, repeat), a zero destination stride (their gradients) sends
// several elements to one place, which only kAddTo (after zeroing) makes a sum.
struct CopyPlan {
  int ndim = 0;
  std::int64_t shape[kMaxCopyDims] = {};
  std::int64_t src_stride[kMaxCopyDims] = {};
  std::int64_t dst_stride[kMaxCopyDims] = {};
  std::int64_t src_offset = 0, dst_offset = 0;

  // Appends an inner dimension (dimensions are pushed outermost first).
  void Push(std::int64_t size, std::int64_t src_step, std::int64_t dst_step);
  // Number of elements copied.
  std::int64_t Count() const;
  // The same copy the other way round: what was read is written (a backward pass).
  CopyPlan Reversed() const;
  // The same copy with size-1 dimensions dropped and neighbours that walk memory as one dimension merged.
  CopyPlan Simplified() const;
};

// Row-major strides of a known shape, in elements.
std::vector<std::int64_t> Strides(const TShape& s);
// A plan that copies n contiguous elements onto n contiguous elements.
CopyPlan ContiguousPlan(std::int64_t n);

// Runs plan from src to dst under req (kNullOp: nothing; kWriteTo/kWriteInplace: assign; kAddTo: add).
// Both blobs must have the same element type; any type is accepted. An identity copy onto the same memory
// (an in-place Reshape-like operator) is nothing to do.
void RunCopy(const CopyPlan& plan, const TBlob& src, const TBlob& dst, OpReqType req);

// What RunCopy (and the GPU's copy) runs: plan simplified, or nothing when there is nothing to do (kNullOp, no
// element, an identity copy onto the same memory). Throws troupe::Error when the element types differ.
std::optional<CopyPlan> PlanToRun(const CopyPlan& plan, const TBlob& src, const TBlob& dst, OpReqType req);

// Sets every element of b to zero (any element type).
void ZeroFill(const TBlob& b);

// Output `out` takes elements of input `in` along `plan` (src: the input, dst: the output).
struct Movement {
  int in = 0, out = 0;
  CopyPlan plan;
};

// a + b in T; half and bfloat16 add in float, as their arithmetic does everywhere in troupe. Host and device.
template <typename T>
TROUPE_HOST_DEVICE inline T Add(T a, T b) {
  if constexpr (std::is_arithmetic_v<T>) {
    return static_cast<T>(a + b);
  } else {
    return T(static_cast<float>(a) + static_cast<float>(b));
  }
}

// One device's strided copy (RunCopy's contract, enqueued on the run context's stream on a GPU) and fill with
// zeros.
using CopyFn = void (*)(const CopyPlan& plan, const TBlob& src, const TBlob& dst, OpReqType req,
                        const RunContext& rctx);
using ZeroFn = void (*)(const TBlob& b, const RunContext& rctx);
// The operator that runs a MatrixProp's movements (prop: a copy of it) with these functions: forward copies
// input -> output along the plans, backward runs them output gradient -> input gradient (see MatrixProp).
std::unique_ptr<Operator> MakeMatrixOperator(std::unique_ptr<OperatorProperty> prop, CopyFn copy, ZeroFn zero);

}  // namespace matrix

// What the matrix operators share: backward reads only the output gradients, and one CPU operator runs the
// movements the property describes.
class MatrixProp : public OperatorProperty {
 public:
  // The movements for inputs of shapes `in` and outputs of shapes `out` (as inferred). Called by backward with
  // an unknown shape for an input whose gradient is not wanted; it then returns no movement for that input.
  virtual std::vector<matrix::Movement> Movements(const std::vector<TShape>& in,
                                                  const std::vector<TShape>& out) const = 0;
  // True when the movements read every input element exactly once (transpose, reverse, stack, SliceChannel,
  // the reshapes): backward then writes the input gradients directly. Otherwise (slice, tile, repeat) it
  // zeroes them (unless kAddTo) and adds every output gradient element in. An input no movement reads (the
  // second argument of slice_like and reshape_like, which only lends its shape) gets a zero gradient.
  virtual bool EachInputElementOnce() const { return true; }

  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& /*in_data*/,
                                             const std::vector<int>& /*out_data*/) const override {
    return out_grad;
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override;
};

namespace matrix {
// Throws troupe::Error "<op>: expected <n> input(s) (<names>), got <m>" when in_shape has another size.
void CheckInputCount(const std::vector<TShape>& in_shape, std::size_t n, const char* op, const char* names);
// The type rule of slice_like and reshape_like: the output has the first argument's type; the second only
// lends its shape and may have any type (it must be known, as in MXNet).
bool InferTypeOfFirst(const OperatorProperty& prop, std::vector<int>* in_type, std::vector<int>* out_type);
}  // namespace matrix

// ---- transpose ----

struct TransposeParam : Params<TransposeParam> {
  std::vector<std::int64_t> axes;
  static void Declare(ParamSchema<TransposeParam>& s) {
    s.Field("axes", &TransposeParam::axes)
        .Default({})
        .Describe("Target axis order. By default the axes will be inverted.");
  }
};

class TransposeProp : public MatrixProp {
 public:
  void Init(const Kwargs& kwargs) override;
  Kwargs GetParams() const override { return param_.GetParams(); }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<TransposeProp>(*this); }
  std::string TypeString() const override { return "transpose"; }
  std::vector<matrix::Movement> Movements(const std::vector<TShape>& in,
                                          const std::vector<TShape>& out) const override;

 private:
  std::vector<int> Axes(int ndim) const;  // the permutation for an input of ndim dimensions (checked)
  TransposeParam param_;
};

// ---- SwapAxis ----

struct SwapAxisParam : Params<SwapAxisParam> {
  int dim1 = 0, dim2 = 0;
  static void Declare(ParamSchema<SwapAxisParam>& s) {
    s.Field("dim1", &SwapAxisParam::dim1).Default(0).Describe("the first axis to be swapped.");
    s.Field("dim2", &SwapAxisParam::dim2).Default(0).Describe("the second axis to be swapped.");
  }
};

class SwapAxisProp : public MatrixProp {
 public:
  void Init(const Kwargs& kwargs) override { param_.Init(kwargs, "SwapAxis"); }
  Kwargs GetParams() const override { return param_.GetParams(); }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<SwapAxisProp>(*this); }
  std::string TypeString() const override { return "SwapAxis"; }
  std::vector<matrix::Movement> Movements(const std::vector<TShape>& in,
                                          const std::vector<TShape>& out) const override;

 private:
  SwapAxisParam param_;
};

// ---- expand_dims, squeeze, reshape_like: the data under another shape ----

// The output is the input's elements in the same order: forward and backward are copies, nothing at all
// when the executor runs them in place (MXNet's FInplaceIdentity).
class SameDataProp : public MatrixProp {
 public:
  std::vector<matrix::Movement> Movements(const std::vector<TShape>& in,
                                          const std::vector<TShape>& out) const override;
  std::vector<std::pair<int, void*>> ForwardInplaceOption(const std::vector<int>& in_data,
                                                          const std::vector<void*>& out_data) const override {
    return {{in_data[0], out_data[0]}};
  }
  bool ForwardInplaceIdentity() const override { return true; }
  std::vector<std::pair<int, void*>> BackwardInplaceOption(const std::vector<int>& out_grad,
                                                           const std::vector<int>& /*in_data*/,
                                                           const std::vector<int>& /*out_data*/,
                                                           const std::vector<void*>& in_grad) const override {
    return {{out_grad[0], in_grad[0]}};
  }
};

struct ExpandDimsParam : Params<ExpandDimsParam> {
  int axis = 0;
  static void Declare(ParamSchema<ExpandDimsParam>& s) {
    s.Field("axis", &ExpandDimsParam::axis)
        .Describe("Position where new axis is to be inserted. Suppose that the input `NDArray`'s dimension is "
                  "`ndim`, the range of the inserted axis is `[-ndim, ndim]`");
  }
};

class ExpandDimsProp : public SameDataProp {
 public:
  void Init(const Kwargs& kwargs) override { param_.Init(kwargs, "expand_dims"); }
  Kwargs GetParams() const override { return param_.GetParams(); }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<ExpandDimsProp>(*this); }
  std::string TypeString() const override { return "expand_dims"; }

 private:
  ExpandDimsParam param_;
};

struct SqueezeParam : Params<SqueezeParam> {
  std::optional<std::vector<std::int64_t>> axis;
  static void Declare(ParamSchema<SqueezeParam>& s) {
    s.Field("axis", &SqueezeParam::axis)
        .Default(std::nullopt)
        .Describe("Selects a subset of the single-dimensional entries in the shape. If an axis is selected with "
                  "shape entry greater than one, an error is raised.");
  }
};

class SqueezeProp : public SameDataProp {
 public:
  void Init(const Kwargs& kwargs) override { param_.Init(kwargs, "squeeze"); }
  Kwargs GetParams() const override { return param_.GetParams(); }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<SqueezeProp>(*this); }
  std::string TypeString() const override { return "squeeze"; }

 private:
  SqueezeParam param_;
};

struct ReshapeLikeParam : Params<ReshapeLikeParam> {
  std::optional<int> lhs_begin, lhs_end, rhs_begin, rhs_end;
  static void Declare(ParamSchema<ReshapeLikeParam>& s) {
    s.Field("lhs_begin", &ReshapeLikeParam::lhs_begin)
        .Default(std::nullopt)
        .Describe("Defaults to 0. The beginning index along which the lhs dimensions are to be reshaped. "
                  "Supports negative indices.");
    s.Field("lhs_end", &ReshapeLikeParam::lhs_end)
        .Default(std::nullopt)
        .Describe("Defaults to None. The ending index along which the lhs dimensions are to be used for "
                  "reshaping. Supports negative indices.");
    s.Field("rhs_begin", &ReshapeLikeParam::rhs_begin)
        .Default(std::nullopt)
        .Describe("Defaults to 0. The beginning index along which the rhs dimensions are to be used for "
                  "reshaping. Supports negative indices.");
    s.Field("rhs_end", &ReshapeLikeParam::rhs_end)
        .Default(std::nullopt)
        .Describe("Defaults to None. The ending index along which the rhs dimensions are to be used for "
                  "reshaping. Supports negative indices.");
  }
};

// The output shape of reshape_like for known lhs and rhs shapes (MXNet's ReshapeLikeShapeCompute). Throws
// troupe::Error naming the parameter or both shapes.
TShape ReshapeLikeShape(const ReshapeLikeParam& p, const TShape& lhs, const TShape& rhs);

class ReshapeLikeOpProp : public SameDataProp {
 public:
  void Init(const Kwargs& kwargs) override { param_.Init(kwargs, "reshape_like"); }
  Kwargs GetParams() const override { return param_.GetParams(); }
  std::vector<std::string> ListArguments() const override { return {"lhs", "rhs"}; }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  bool InferType(std::vector<int>* in_type, std::vector<int>* out_type,
                 std::vector<int>* /*aux_type*/) const override {
    return matrix::InferTypeOfFirst(*this, in_type, out_type);
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<ReshapeLikeOpProp>(*this); }
  std::string TypeString() const override { return "reshape_like"; }

 private:
  ReshapeLikeParam param_;
};

// ---- reverse ----

struct ReverseParam : Params<ReverseParam> {
  std::vector<std::int64_t> axis;
  static void Declare(ParamSchema<ReverseParam>& s) {
    s.Field("axis", &ReverseParam::axis).Describe("The axis which to reverse elements.");
  }
};

class ReverseProp : public MatrixProp {
 public:
  void Init(const Kwargs& kwargs) override { param_.Init(kwargs, "reverse"); }
  Kwargs GetParams() const override { return param_.GetParams(); }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<ReverseProp>(*this); }
  std::string TypeString() const override { return "reverse"; }
  std::vector<matrix::Movement> Movements(const std::vector<TShape>& in,
                                          const std::vector<TShape>& out) const override;

 private:
  ReverseParam param_;
};

// ---- tile ----

struct TileParam : Params<TileParam> {
  std::vector<std::int64_t> reps;
  static void Declare(ParamSchema<TileParam>& s) {
    s.Field("reps", &TileParam::reps)
        .Describe("The number of times for repeating the tensor a. Each dim size of reps must be a positive "
                  "integer. If reps has length d, the result will have dimension of max(d, a.ndim); If a.ndim < "
                  "d, a is promoted to be d-dimensional by prepending new axes. If a.ndim > d, reps is promoted "
                  "to a.ndim by pre-pending 1's to it.");
  }
};

class TileProp : public MatrixProp {
 public:
  void Init(const Kwargs& kwargs) override;
  Kwargs GetParams() const override { return param_.GetParams(); }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<TileProp>(*this); }
  std::string TypeString() const override { return "tile"; }
  std::vector<matrix::Movement> Movements(const std::vector<TShape>& in,
                                          const std::vector<TShape>& out) const override;
  bool EachInputElementOnce() const override { return false; }

 private:
  TileParam param_;
};

// ---- repeat ----

struct RepeatParam : Params<RepeatParam> {
  int repeats = 1;
  std::optional<int> axis;
  static void Declare(ParamSchema<RepeatParam>& s) {
    s.Field("repeats", &RepeatParam::repeats)
        .LowerBound(0)
        .Describe("The number of repetitions for each element.");
    s.Field("axis", &RepeatParam::axis)
        .Default(std::nullopt)
        .Describe("The axis along which to repeat values. The negative numbers are interpreted counting from the "
                  "backward. By default, use the flattened input array, and return a flat output array.");
  }
};

class RepeatProp : public MatrixProp {
 public:
  void Init(const Kwargs& kwargs) override { param_.Init(kwargs, "repeat"); }
  Kwargs GetParams() const override { return param_.GetParams(); }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<RepeatProp>(*this); }
  std::string TypeString() const override { return "repeat"; }
  std::vector<matrix::Movement> Movements(const std::vector<TShape>& in,
                                          const std::vector<TShape>& out) const override;
  bool EachInputElementOnce() const override { return false; }

 private:
  RepeatParam param_;
};

// ---- slice ----

// Where a slice of one dimension starts, its step and how many elements it takes.
struct SliceDim {
  std::int64_t begin = 0, step = 1, size = 0;
};

struct SliceParam : Params<SliceParam> {
  std::vector<std::optional<std::int64_t>> begin, end, step;
  static void Declare(ParamSchema<SliceParam>& s) {
    s.Field("begin", &SliceParam::begin)
        .Describe("starting indices for the slice operation, supports negative indices.");
    s.Field("end", &SliceParam::end).Describe("ending indices for the slice operation, supports negative indices.");
    s.Field("step", &SliceParam::step).Default({}).Describe("step for the slice operation, supports negative values.");
  }
};

// The slice of every dimension of data (MXNet's GetIndexRange and output sizes: indices are clipped, None
// means the whole dimension in the step's direction, dimensions past begin's length are taken whole).
// Throws troupe::Error naming "slice" and the parameter for mismatched lengths, a zero step or more indices
// than dimensions.
std::vector<SliceDim> SliceRanges(const SliceParam& p, const TShape& data);

class SliceProp : public MatrixProp {
 public:
  void Init(const Kwargs& kwargs) override;
  Kwargs GetParams() const override { return param_.GetParams(); }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<SliceProp>(*this); }
  std::string TypeString() const override { return "slice"; }
  std::vector<matrix::Movement> Movements(const std::vector<TShape>& in,
                                          const std::vector<TShape>& out) const override;
  bool EachInputElementOnce() const override { return false; }

 private:
  SliceParam param_;
};

// ---- slice_axis ----

struct SliceAxisParam : Params<SliceAxisParam> {
  int axis = 0;
  std::int64_t begin = 0;
  std::optional<std::int64_t> end;
  static void Declare(ParamSchema<SliceAxisParam>& s) {
    s.Field("axis", &SliceAxisParam::axis).Describe("Axis along which to be sliced, supports negative indexes.");
    s.Field("begin", &SliceAxisParam::begin)
        .Describe("The beginning index along the axis to be sliced,  supports negative indexes.");
    s.Field("end", &SliceAxisParam::end)
        .Describe("The ending index along the axis to be sliced,  supports negative indexes.");
  }
};

class SliceAxisProp : public MatrixProp {
 public:
  void Init(const Kwargs& kwargs) override { param_.Init(kwargs, "slice_axis"); }
  Kwargs GetParams() const override { return param_.GetParams(); }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<SliceAxisProp>(*this); }
  std::string TypeString() const override { return "slice_axis"; }
  std::vector<matrix::Movement> Movements(const std::vector<TShape>& in,
                                          const std::vector<TShape>& out) const override;
  bool EachInputElementOnce() const override { return false; }

 private:
  std::vector<SliceDim> Ranges(const TShape& data) const;  // MXNet's GetSliceAxisParams, checked
  SliceAxisParam param_;
};

// ---- slice_like ----

struct SliceLikeParam : Params<SliceLikeParam> {
  std::vector<std::int64_t> axes;
  static void Declare(ParamSchema<SliceLikeParam>& s) {
    s.Field("axes", &SliceLikeParam::axes)
        .Default({})
        .Describe("List of axes on which input data will be sliced according to the corresponding size of the "
                  "second input. By default will slice on all axes. Negative axes are supported.");
  }
};

class SliceLikeProp : public MatrixProp {
 public:
  void Init(const Kwargs& kwargs) override { param_.Init(kwargs, "slice_like"); }
  Kwargs GetParams() const override { return param_.GetParams(); }
  std::vector<std::string> ListArguments() const override { return {"data", "shape_like"}; }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  bool InferType(std::vector<int>* in_type, std::vector<int>* out_type,
                 std::vector<int>* /*aux_type*/) const override {
    return matrix::InferTypeOfFirst(*this, in_type, out_type);
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<SliceLikeProp>(*this); }
  std::string TypeString() const override { return "slice_like"; }
  std::vector<matrix::Movement> Movements(const std::vector<TShape>& in,
                                          const std::vector<TShape>& out) const override;
  bool EachInputElementOnce() const override { return false; }

 private:
  SliceLikeParam param_;
};

// ---- SliceChannel ----

struct SliceChannelParam : Params<SliceChannelParam> {
  int num_outputs = 1;
  int axis = 1;
  bool squeeze_axis = false;
  static void Declare(ParamSchema<SliceChannelParam>& s) {
    s.Field("num_outputs", &SliceChannelParam::num_outputs)
        .LowerBound(1)
        .Describe("Number of splits. Note that this should evenly divide the length of the `axis`.");
    s.Field("axis", &SliceChannelParam::axis).Default(1).Describe("Axis along which to split.");
    s.Field("squeeze_axis", &SliceChannelParam::squeeze_axis)
        .Default(false)
        .Describe("If true, Removes the axis with length 1 from the shapes of the output arrays. Only along the "
                  "`axis` which it is split; can be set to true only if input.shape[axis] == num_outputs.");
  }
};

class SliceChannelProp : public MatrixProp {
 public:
  void Init(const Kwargs& kwargs) override { param_.Init(kwargs, "SliceChannel"); }
  Kwargs GetParams() const override { return param_.GetParams(); }
  std::vector<std::string> ListOutputs() const override;
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<SliceChannelProp>(*this); }
  std::string TypeString() const override { return "SliceChannel"; }
  std::vector<matrix::Movement> Movements(const std::vector<TShape>& in,
                                          const std::vector<TShape>& out) const override;

 private:
  SliceChannelParam param_;
};

// ---- stack ----

struct StackParam : Params<StackParam> {
  int axis = 0;
  int num_args = 1;
  static void Declare(ParamSchema<StackParam>& s) {
    s.Field("axis", &StackParam::axis)
        .Default(0)
        .Describe("The axis in the result array along which the input arrays are stacked.");
    s.Field("num_args", &StackParam::num_args).LowerBound(1).Describe("Number of inputs to be stacked.");
  }
};

class StackProp : public MatrixProp {
 public:
  void Init(const Kwargs& kwargs) override { param_.Init(kwargs, "stack"); }
  Kwargs GetParams() const override { return param_.GetParams(); }
  std::vector<std::string> ListArguments() const override;
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<StackProp>(*this); }
  std::string TypeString() const override { return "stack"; }
  std::vector<matrix::Movement> Movements(const std::vector<TShape>& in,
                                          const std::vector<TShape>& out) const override;

 private:
  StackParam param_;
};

}  // namespace troupe
