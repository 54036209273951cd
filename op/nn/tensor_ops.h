// Tensor-manipulation operators of the op library: Flatten, Reshape, Concat, sum/mean over axes and
// Embedding (OperatorProperty classes), plus the element arithmetic shared by the CPU (.cc) and CUDA (.cu)
// implementations of the SimpleOps (elemwise_*, *_scalar, broadcast_*, smooth_l1).
//
// This header is included by op/nn/tensor_ops.cu, so it stays free of CAF and Cap'n Proto and the
// helpers that run in kernels are TROUPE_HOST_DEVICE. Properties are immutable after Init (thread-safe to
// share); the helpers are pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tensor/detail/elementwise.h"
#include "op/internal/op_util.h"
#include "op/operator.h"

namespace troupe {

namespace tensor_ops {

// Maps between a "big" shape and a "small" one of the same rank whose dimensions each equal the big one's or
// are 1 (the broadcast / reduced dimensions). Used by broadcast_* (small = an operand, big = the output) and
// by sum/mean (big = the input, small = the output with kept dimensions), on both devices.
struct BroadcastIndexer {
  int ndim = 0;
  std::int64_t big[TShape::kMaxDims] = {};
  std::int64_t small[TShape::kMaxDims] = {};
  std::int64_t big_stride[TShape::kMaxDims] = {};
  std::int64_t small_stride[TShape::kMaxDims] = {};  // 0 where small is broadcast (small 1, big > 1)
  std::int64_t big_size = 0, small_size = 0;
  std::int64_t reduce_size = 0;  // big elements per small element

  // Offset in small of the element that big element `i` reads (big_size > 0).
  TROUPE_HOST_DEVICE std::int64_t SmallOffset(std::int64_t i) const {
    std::int64_t off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      off += (i % big[d]) * small_stride[d];
      i /= big[d];
    }
    return off;
  }
  // Offset in big of the r-th (0 <= r < reduce_size) of the elements that reduce onto small element `o`.
  TROUPE_HOST_DEVICE std::int64_t BigOffset(std::int64_t o, std::int64_t r) const {
    std::int64_t off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      std::int64_t c;
      if (small[d] == big[d]) {
        c = o % small[d];
        o /= small[d];
      } else {
        c = r % big[d];
        r /= big[d];
      }
      off += c * big_stride[d];
    }
    return off;
  }
};

// small is padded with leading 1s to big's rank; each of its dimensions must be 1 or big's (checked by the
// callers' shape inference; violated here it throws troupe::Error).
BroadcastIndexer MakeBroadcastIndexer(const TShape& big, const TShape& small);

// The output shape of broadcasting lhs with rhs NumPy-style (MXNet 1.x's BinaryBroadcastShape: ranks are
// aligned at the right, each pair of dimensions must be equal or contain a 1). Throws troupe::Error naming
// `op` and both shapes.
TShape BroadcastShape(const TShape& lhs, const TShape& rhs, const std::string& op);

// Scalar forms: _plus_scalar (x + s), _minus_scalar (x - s), _rminus_scalar (s - x), _mul_scalar (x * s),
// _div_scalar (x / s), _rdiv_scalar (s / x).
enum class ScalarOp : int { kPlus, kMinus, kRMinus, kMul, kDiv, kRDiv };

template <typename T>
TROUPE_HOST_DEVICE inline T ScalarForward(ScalarOp op, T x, T s) {
  switch (op) {
    case ScalarOp::kPlus: return x + s;
    case ScalarOp::kMinus: return x - s;
    case ScalarOp::kRMinus: return s - x;
    case ScalarOp::kMul: return x * s;
    case ScalarOp::kDiv: return x / s;
    case ScalarOp::kRDiv: return s / x;
  }
  return T(0);
}
// d/dx times og; x (the input) is read only by kRDiv.
template <typename T>
TROUPE_HOST_DEVICE inline T ScalarBackward(ScalarOp op, T og, T x, T s) {
  switch (op) {
    case ScalarOp::kPlus:
    case ScalarOp::kMinus: return og;
    case ScalarOp::kRMinus: return -og;
    case ScalarOp::kMul: return og * s;
    case ScalarOp::kDiv: return og / s;
    case ScalarOp::kRDiv: return -og * s / (x * x);
  }
  return T(0);
}

// Gradients of lhs op rhs with respect to each operand, times og.
template <typename T>
TROUPE_HOST_DEVICE inline T BinaryGradLhs(internal::BinaryOp op, T og, T /*lhs*/, T rhs) {
  switch (op) {
    case internal::BinaryOp::kAdd:
    case internal::BinaryOp::kSub: return og;
    case internal::BinaryOp::kMul: return og * rhs;
    case internal::BinaryOp::kDiv: return og / rhs;
  }
  return T(0);
}
template <typename T>
TROUPE_HOST_DEVICE inline T BinaryGradRhs(internal::BinaryOp op, T og, T lhs, T rhs) {
  switch (op) {
    case internal::BinaryOp::kAdd: return og;
    case internal::BinaryOp::kSub: return -og;
    case internal::BinaryOp::kMul: return og * lhs;
    case internal::BinaryOp::kDiv: return -og * lhs / (rhs * rhs);
  }
  return T(0);
}
// Whether the gradients read the operands (mul, div) or only out_grad (add, sub).
inline bool BinaryGradNeedsInputs(internal::BinaryOp op) {
  return op == internal::BinaryOp::kMul || op == internal::BinaryOp::kDiv;
}

// smooth_l1 with sigma = scalar (MXNet's mshadow_op::smooth_l1_loss / smooth_l1_gradient):
// f(x) = 0.5 (sigma x)^2 for |x| < 1/sigma^2, |x| - 0.5/sigma^2 otherwise.
template <typename T>
TROUPE_HOST_DEVICE inline T SmoothL1(T x, T sigma) {
  const T s2 = sigma * sigma;
  if (x > T(1) / s2) return x - T(0.5) / s2;
  if (x < T(-1) / s2) return -x - T(0.5) / s2;
  return T(0.5) * x * x * s2;
}
template <typename T>
TROUPE_HOST_DEVICE inline T SmoothL1Grad(T x, T sigma) {
  const T s2 = sigma * sigma;
  if (x > T(1) / s2) return T(1);
  if (x < T(-1) / s2) return T(-1);
  return s2 * x;
}

// Embedding's index rule (MXNet's take with clip mode): the value truncated to an integer, clamped into
// [0, input_dim - 1]; NaN gives 0.
template <typename I>
TROUPE_HOST_DEVICE inline std::int64_t ClipIndex(I v, std::int64_t input_dim) {
  const double x = static_cast<double>(v);
  if (!(x > 0)) return 0;  // negatives, zero and NaN
  if (x >= static_cast<double>(input_dim - 1)) return input_dim - 1;
  return static_cast<std::int64_t>(x);
}

}  // namespace tensor_ops

// ---- Flatten ----

struct FlattenParam : Params<FlattenParam> {
  static void Declare(ParamSchema<FlattenParam>&) {}
};

// (d0, d1, ..., dk) -> (d0, d1 * ... * dk); the data is not moved, forward and backward are copies (nothing
// at all when run in place).
// What Flatten and Reshape share: the output is the input's data under another shape, so both directions
// may run in place (a copy, or nothing when the memory is shared) and backward reads only out_grad.
class ReshapeLikeProp : public OperatorProperty {
 public:
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& /*in_data*/,
                                             const std::vector<int>& /*out_data*/) const override {
    return {out_grad[0]};
  }
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

class FlattenProp : public ReshapeLikeProp {
 public:
  void Init(const Kwargs& kwargs) override { param_.Init(kwargs, "Flatten"); }
  Kwargs GetParams() const override { return param_.GetParams(); }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<FlattenProp>(*this); }
  std::string TypeString() const override { return "Flatten"; }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override;

 private:
  FlattenParam param_;
};

// ---- Reshape ----

struct ReshapeParam : Params<ReshapeParam> {
  std::vector<std::int64_t> shape;
  bool reverse = false;
  std::vector<std::int64_t> target_shape;  // deprecated in MXNet; kept so old symbol files load
  bool keep_highest = false;               // deprecated, with target_shape
  static void Declare(ParamSchema<ReshapeParam>& s) {
    s.Field("shape", &ReshapeParam::shape)
        .Default({})
        .Describe("The target shape. Special values: 0 copies this dimension of the input, -1 infers it from the "
                  "rest, -2 copies all remaining dimensions, -3 merges two input dimensions, -4 splits one input "
                  "dimension into the next two values (one of which may be -1).");
    s.Field("reverse", &ReshapeParam::reverse)
        .Default(false)
        .Describe("If true then the special values are inferred from right to left.");
    s.Field("target_shape", &ReshapeParam::target_shape)
        .Default({})
        .Describe("(Deprecated! Use shape instead.) Target new shape; one and only one dimension can be 0, which "
                  "is then inferred.");
    s.Field("keep_highest", &ReshapeParam::keep_highest)
        .Default(false)
        .Describe("(Deprecated! Use shape instead.) With target_shape: keep the first dimension of the input "
                  "and ignore the first of target_shape.");
  }
};

// The output shape of Reshape for a known input shape (MXNet's InferReshapeShape, with the size check).
// Throws troupe::Error naming "Reshape", the 'shape' parameter and the input shape.
TShape ReshapeOutputShape(const ReshapeParam& param, const TShape& in);

class ReshapeProp : public ReshapeLikeProp {
 public:
  void Init(const Kwargs& kwargs) override;
  Kwargs GetParams() const override { return param_.GetParams(); }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<ReshapeProp>(*this); }
  std::string TypeString() const override { return "Reshape"; }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override;
  const ReshapeParam& param() const { return param_; }

 private:
  ReshapeParam param_;
};

// ---- Concat ----

struct ConcatParam : Params<ConcatParam> {
  int num_args = 0;
  int dim = 1;
  static void Declare(ParamSchema<ConcatParam>& s) {
    s.Field("num_args", &ConcatParam::num_args).LowerBound(1).Describe("Number of inputs to be concatenated.");
    s.Field("dim", &ConcatParam::dim)
        .Default(1)
        .Describe("the dimension to be concated (negative counts from the end).");
  }
};

class ConcatProp : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override { param_.Init(kwargs, "Concat"); }
  Kwargs GetParams() const override { return param_.GetParams(); }
  std::vector<std::string> ListArguments() const override;
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<ConcatProp>(*this); }
  std::string TypeString() const override { return "Concat"; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& /*in_data*/,
                                             const std::vector<int>& /*out_data*/) const override {
    return {out_grad[0]};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override;
  const ConcatParam& param() const { return param_; }

 private:
  ConcatParam param_;
};

// The copy pattern of Concat on one input, shared by both devices: `outer` rows; input row r (width
// `width`, contiguous) sits at out offset r * out_row + offset.
struct ConcatSlab {
  std::int64_t outer = 0, width = 0, out_row = 0, offset = 0;
};
// One slab per input of blobs `in` concatenated into `out` along `dim` (already normalised).
std::vector<ConcatSlab> ConcatSlabs(const std::vector<TShape>& in, const TShape& out, int dim);

// ---- sum / mean ----

struct ReduceAxesParam : Params<ReduceAxesParam> {
  std::optional<std::vector<std::int64_t>> axis;
  bool keepdims = false;
  bool exclude = false;
  static void Declare(ParamSchema<ReduceAxesParam>& s) {
    s.Field("axis", &ReduceAxesParam::axis)
        .Default(std::nullopt)
        .Describe("The axis or axes along which to perform the reduction. None or () reduces all axes; negative "
                  "values count from the end.");
    s.Field("keepdims", &ReduceAxesParam::keepdims)
        .Default(false)
        .Describe("If this is set to True, the reduced axes are left in the result as dimension with size one.");
    s.Field("exclude", &ReduceAxesParam::exclude)
        .Default(false)
        .Describe("Whether to perform reduction on axis that are NOT in axis instead.");
  }
};

// The output shape with every reduced dimension kept as 1 (same element order as the real output). Throws
// troupe::Error naming `op` and 'axis' for an axis out of range or repeated.
TShape ReduceKeepdimsShape(const ReduceAxesParam& param, const TShape& in, const std::string& op);
// The real output shape (MXNet 1.x's ReduceAxesShapeImpl: reducing everything without keepdims gives (1,)).
TShape ReduceOutputShape(const ReduceAxesParam& param, const TShape& in, const std::string& op);

// sum (alias sum_axis) and mean share everything but the name and the 1/count factor.
class ReduceAxesProp : public OperatorProperty {
 public:
  explicit ReduceAxesProp(bool mean) : mean_(mean) {}
  void Init(const Kwargs& kwargs) override { param_.Init(kwargs, TypeString()); }
  Kwargs GetParams() const override { return param_.GetParams(); }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<ReduceAxesProp>(*this); }
  std::string TypeString() const override { return mean_ ? "mean" : "sum"; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& /*in_data*/,
                                             const std::vector<int>& /*out_data*/) const override {
    return {out_grad[0]};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override;
  const ReduceAxesParam& param() const { return param_; }
  bool mean() const { return mean_; }

 private:
  bool mean_;
  ReduceAxesParam param_;
};

// ---- Embedding ----

struct EmbeddingParam : Params<EmbeddingParam> {
  int input_dim = 0;
  int output_dim = 0;
  std::string dtype = "float32";
  bool sparse_grad = false;
  static void Declare(ParamSchema<EmbeddingParam>& s) {
    s.Field("input_dim", &EmbeddingParam::input_dim)
        .LowerBound(1)
        .Describe("Vocabulary size of the input indices.");
    s.Field("output_dim", &EmbeddingParam::output_dim)
        .LowerBound(1)
        .Describe("Dimension of the embedding vectors.");
    s.Field("dtype", &EmbeddingParam::dtype)
        .Default("float32")
        .Choices({"float16", "float32", "float64", "int32", "int64", "int8", "uint8"})
        .Describe("Data type of weight (used when neither weight nor output has a known type).");
    s.Field("sparse_grad", &EmbeddingParam::sparse_grad)
        .Default(false)
        .Describe("Compute row_sparse gradient in the backward calculation (only False is supported here).");
  }
};

// Embedding(data, weight): out[..., :] = weight[clip(int(data[...])), :]. data holds indices of any type
// (floats by MXNet's convention); weight (input_dim, output_dim) float32/float64.
class EmbeddingProp : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override;
  Kwargs GetParams() const override { return param_.GetParams(); }
  std::vector<std::string> ListArguments() const override { return {"data", "weight"}; }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  bool InferType(std::vector<int>* in_type, std::vector<int>* out_type, std::vector<int>* aux_type) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<EmbeddingProp>(*this); }
  std::string TypeString() const override { return "Embedding"; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>& /*out_data*/) const override {
    return {out_grad[0], in_data[0]};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override;
  const EmbeddingParam& param() const { return param_; }

 private:
  EmbeddingParam param_;
};

}  // namespace troupe
