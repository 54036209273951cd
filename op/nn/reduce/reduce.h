// The reductions over axes with MXNet 1.x's axis / keepdims / exclude rules: sum (alias sum_axis), mean,
// max, min, prod, nansum and nanprod. The parameter struct, the shape rules and the property, shared by the
// CPU operator (reduce.cc) and the CUDA one (reduce.cu), with the element code both run (namespace reduce),
// over the index map of op/nn/common/broadcast.h.
//
// Properties are immutable after Init (thread-safe to share); helpers are pure functions. Compiles under
// nvcc (the .cu file includes it): no CAF or Cap'n Proto, and what runs in kernels is TROUPE_HOST_DEVICE.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "op/internal/op_util.h"
#include "op/nn/common/broadcast.h"
#include "op/operator.h"
#include "op/param.h"
#include "tensor/tensor.h"

namespace troupe {

// ---- sum / mean ----

struct ReduceAxesParam : Params<ReduceAxesParam> {
  std::optional<std::vector<std::int64_t>> axis;
  bool keepdims = false;
  bool exclude = false;
  static void Declare(ParamSchema<ReduceAxesParam>& s) {
    s.Field("axis", &ReduceAxesParam::axis)
        .Default(std::nullopt)
        .Describe(
            "The axis or axes along which to perform the reduction. None or () reduces all axes; negative "
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

enum class ReduceKind { kSum, kMean, kMax, kMin, kProd, kNanSum, kNanProd };
const char* ReduceName(ReduceKind kind);

namespace reduce {

// A NaN counts as 0 in nansum and as 1 in nanprod; other values as themselves (integers are never NaN).
template <typename T>
TROUPE_HOST_DEVICE inline bool IsNan(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return v != v;
  else
    return false;
}

// Output element i: the reduction of the input elements ix maps onto it, in increasing order. Sums and
// products accumulate in double (float32 sums of many terms drift otherwise); max and min keep T.
template <typename T>
TROUPE_HOST_DEVICE inline T ReduceElement(ReduceKind kind, const T* x, const tensor_ops::BroadcastIndexer& ix,
                                          std::int64_t i) {
  double acc = kind == ReduceKind::kProd || kind == ReduceKind::kNanProd ? 1.0 : 0.0;
  T best = ix.reduce_size > 0 ? x[ix.BigOffset(i, 0)] : T(0);
  for (std::int64_t r = 0; r < ix.reduce_size; ++r) {
    const T v = x[ix.BigOffset(i, r)];
    switch (kind) {
      case ReduceKind::kSum:
      case ReduceKind::kMean:
        acc += static_cast<double>(v);
        break;
      case ReduceKind::kNanSum:
        acc += IsNan(v) ? 0.0 : static_cast<double>(v);
        break;
      case ReduceKind::kProd:
        acc *= static_cast<double>(v);
        break;
      case ReduceKind::kNanProd:
        acc *= IsNan(v) ? 1.0 : static_cast<double>(v);
        break;
      case ReduceKind::kMax:
        best = v > best ? v : best;
        break;
      case ReduceKind::kMin:
        best = v < best ? v : best;
        break;
    }
  }
  if (kind == ReduceKind::kMean) acc /= static_cast<double>(ix.reduce_size);
  return kind == ReduceKind::kMax || kind == ReduceKind::kMin ? best : static_cast<T>(acc);
}

// The gradient of input element i from the output gradient g (x: the input, y: the output, where the kind's
// DeclareBackwardDependency names them; scale: 1 / the reduced count for mean, else 1).
template <typename T>
TROUPE_HOST_DEVICE inline T GradientElement(ReduceKind kind, const T* g, const T* x, const T* y, T scale,
                                            const tensor_ops::BroadcastIndexer& ix, std::int64_t i) {
  const std::int64_t j = ix.SmallOffset(i);
  switch (kind) {
    case ReduceKind::kSum:
    case ReduceKind::kMean:
      return g[j] * scale;
    // MXNet's rule: every element equal to the extreme gets the whole gradient.
    case ReduceKind::kMax:
    case ReduceKind::kMin:
      return x[i] == y[j] ? g[j] : T(0);
    case ReduceKind::kNanSum:
      return IsNan(x[i]) ? T(0) : g[j];
    case ReduceKind::kProd:
      return g[j] * y[j] / x[i];
    case ReduceKind::kNanProd:
      return IsNan(x[i]) ? T(0) : g[j] * y[j] / x[i];
  }
  return T(0);
}

}  // namespace reduce

// The reductions share everything but the name, the combining rule and what the gradient reads.
class ReduceAxesProp : public OperatorProperty {
 public:
  explicit ReduceAxesProp(ReduceKind kind) : kind_(kind) {}
  void Init(const Kwargs& kwargs) override { param_.Init(kwargs, TypeString()); }
  Kwargs GetParams() const override { return param_.GetParams(); }
  bool InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                  std::vector<TShape>* aux_shape) const override;
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<ReduceAxesProp>(*this); }
  std::string TypeString() const override { return ReduceName(kind_); }
  // sum and mean need only the output gradient; max and min compare the input with the output, the products
  // divide the output by the input.
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override {
    if (kind_ == ReduceKind::kSum || kind_ == ReduceKind::kMean) return {out_grad[0]};
    if (kind_ == ReduceKind::kNanSum) return {out_grad[0], in_data[0]};
    return {out_grad[0], in_data[0], out_data[0]};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override;
  const ReduceAxesParam& param() const { return param_; }
  ReduceKind kind() const { return kind_; }
  bool mean() const { return kind_ == ReduceKind::kMean; }

 private:
  ReduceKind kind_;
  ReduceAxesParam param_;
};

}  // namespace troupe
