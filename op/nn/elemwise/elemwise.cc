// Elementwise SimpleOps on the CPU: elemwise_add/sub/mul/div (equal shapes), their scalar forms
// (_plus_scalar ... _rdiv_scalar, the comparisons, _maximum/_minimum/_power/_rpower_scalar), the broadcast forms (broadcast_add/sub/mul/div) and smooth_l1, the seed's
// own SimpleOp example. Each is registered once here with the chained SimpleOp API; the CUDA functions are
// attached to the same entries by elemwise.cu.
#include <algorithm>
#include <sstream>
#include <type_traits>

#include "op/nn/common/broadcast.h"
#include "op/internal/float_staging.h"  // IsHalfType
#include "op/nn/elemwise/elemwise.h"
#include "op/simple_op.h"

namespace troupe {

namespace {

using internal::BinaryOp;
using internal::FloatSwitch;
using tensor_ops::ScalarOp;

template <BinaryOp kOp>
using OpTag = std::integral_constant<BinaryOp, kOp>;

// Calls fn(OpTag<op>{}) so each loop is compiled for one operator (the switch leaves the inner loop).
template <typename Fn>
void DispatchBinary(BinaryOp op, Fn&& fn) {
  switch (op) {
    case BinaryOp::kAdd: return fn(OpTag<BinaryOp::kAdd>{});
    case BinaryOp::kSub: return fn(OpTag<BinaryOp::kSub>{});
    case BinaryOp::kMul: return fn(OpTag<BinaryOp::kMul>{});
    case BinaryOp::kDiv: return fn(OpTag<BinaryOp::kDiv>{});
  }
}

void CheckSameSize(const std::string& op, const TBlob& a, const TBlob& b, const char* an, const char* bn) {
  if (a.Size() != b.Size()) {
    throw Error(op + ": argument '" + an + "' has shape " + a.shape.ToString() + " but '" + bn + "' has " +
                b.shape.ToString());
  }
}

// ---- elemwise_* ----

// o = a op b over [0, n) in C (float for the half types, rounded once), element ranges on the kernel team.
template <typename T>
void ElemwiseForwardLoop(BinaryOp op, const T* a, const T* b, T* o, std::int64_t n, OpReqType req) {
  using C = internal::AccType<T>;
  constexpr std::int64_t kGrain = 32768;
  DispatchBinary(op, [&](auto k) {
    internal::CpuParallelFor(n, kGrain, [&](std::int64_t lo, std::int64_t hi) {
      internal::AssignEach(o + lo, hi - lo, req, [&](std::int64_t i) {
        return internal::ApplyBinary(k.value, static_cast<C>(a[lo + i]), static_cast<C>(b[lo + i]));
      });
    });
  });
}

BinaryFunction ElemwiseForward(BinaryOp op, std::string name) {
  return [op, name](const TBlob& lhs, const TBlob& rhs, const EnvArguments&, TBlob* ret, OpReqType req,
                    RunContext) {
    if (req == kNullOp) return;
    CheckSameSize(name, lhs, rhs, "lhs", "rhs");
    CheckSameSize(name, lhs, *ret, "lhs", "output");
    const auto run = [&](auto tag) {
      using T = decltype(tag);
      ElemwiseForwardLoop<T>(op, static_cast<const T*>(lhs.dptr), static_cast<const T*>(rhs.dptr),
                             static_cast<T*>(ret->dptr), ret->Size(), req);
    };
    if (internal::IsHalfType(ret->dtype)) return internal::FloatHalfSwitch(ret->dtype, name, run);
    internal::NumberSwitch(ret->dtype, name, run);
  };
}

// One loop for both gradients: element i of og is read before either gradient's element i is written, so
// lhs_grad may share og's memory (kInplaceOutLhs).
// Half types compute in float and round each gradient once.
template <typename T>
void ElemwiseBackwardLoop(BinaryOp op, const T* og, const T* a, const T* b, T* lg, T* rg, OpReqType req_l,
                          OpReqType req_r, std::int64_t n) {
  using C = internal::AccType<T>;
  if constexpr (internal::kIsHalf<T>) {
    // One pass per gradient (AssignEach rounds a chunk at a time): the right one first, since the left one
    // may be written over og (kInplaceOutLhs).
    DispatchBinary(op, [&](auto k) {
      const auto x = [&](std::int64_t i) { return a != nullptr ? static_cast<C>(a[i]) : C(0); };
      const auto y = [&](std::int64_t i) { return b != nullptr ? static_cast<C>(b[i]) : C(0); };
      if (req_r != kNullOp) {
        internal::AssignEach(rg, n, req_r, [&](std::int64_t i) {
          return tensor_ops::BinaryGradRhs(k.value, static_cast<C>(og[i]), x(i), y(i));
        });
      }
      if (req_l != kNullOp) {
        internal::AssignEach(lg, n, req_l, [&](std::int64_t i) {
          return tensor_ops::BinaryGradLhs(k.value, static_cast<C>(og[i]), x(i), y(i));
        });
      }
    });
    return;
  }
  DispatchBinary(op, [&](auto k) {
    for (std::int64_t i = 0; i < n; ++i) {
      const C g = static_cast<C>(og[i]);
      const C x = a != nullptr ? static_cast<C>(a[i]) : C(0), y = b != nullptr ? static_cast<C>(b[i]) : C(0);
      if (req_r != kNullOp) internal::AssignAcc(rg + i, req_r, tensor_ops::BinaryGradRhs(k.value, g, x, y));
      if (req_l != kNullOp) internal::AssignAcc(lg + i, req_l, tensor_ops::BinaryGradLhs(k.value, g, x, y));
    }
  });
}

BinaryGradT0 ElemwiseBackwardOutOnly(BinaryOp op, std::string name) {
  return [op, name](const OutputGrad& out_grad, const EnvArguments&, TBlob* lhs_grad, TBlob* rhs_grad,
                    OpReqType req_l, OpReqType req_r, RunContext) {
    const TBlob& og = out_grad.data;
    internal::FloatHalfSwitch(og.dtype, name, [&](auto tag) {
      using T = decltype(tag);
      ElemwiseBackwardLoop<T>(op, static_cast<const T*>(og.dptr), nullptr, nullptr,
                              req_l != kNullOp ? static_cast<T*>(lhs_grad->dptr) : nullptr,
                              req_r != kNullOp ? static_cast<T*>(rhs_grad->dptr) : nullptr, req_l, req_r, og.Size());
    });
  };
}

BinaryGradT1 ElemwiseBackwardWithInputs(BinaryOp op, std::string name) {
  return [op, name](const OutputGrad& out_grad, const Input0& lhs, const Input1& rhs, const EnvArguments&,
                    TBlob* lhs_grad, TBlob* rhs_grad, OpReqType req_l, OpReqType req_r, RunContext) {
    const TBlob& og = out_grad.data;
    internal::FloatHalfSwitch(og.dtype, name, [&](auto tag) {
      using T = decltype(tag);
      ElemwiseBackwardLoop<T>(op, static_cast<const T*>(og.dptr), static_cast<const T*>(lhs.data.dptr),
                              static_cast<const T*>(rhs.data.dptr),
                              req_l != kNullOp ? static_cast<T*>(lhs_grad->dptr) : nullptr,
                              req_r != kNullOp ? static_cast<T*>(rhs_grad->dptr) : nullptr, req_l, req_r, og.Size());
    });
  };
}

// ---- *_scalar ----

UnaryFunction ScalarForwardCpu(ScalarOp op, std::string name) {
  return [op, name](const TBlob& src, const EnvArguments& env, TBlob* ret, OpReqType req, RunContext) {
    if (req == kNullOp) return;
    CheckSameSize(name, src, *ret, "data", "output");
    FloatSwitch(ret->dtype, name, [&](auto tag) {
      using T = decltype(tag);
      const T* x = static_cast<const T*>(src.dptr);
      T* o = static_cast<T*>(ret->dptr);
      const T s = static_cast<T>(env.scalar);
      const std::int64_t n = ret->Size();
      for (std::int64_t i = 0; i < n; ++i) Assign(o + i, req, tensor_ops::ScalarForward(op, x[i], s));
    });
  };
}

void ScalarBackwardCpu(ScalarOp op, const std::string& name, const TBlob& og, const TBlob* in, double scalar,
                       TBlob* in_grad, OpReqType req) {
  if (req == kNullOp) return;
  FloatSwitch(og.dtype, name, [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(og.dptr);
    const T* x = in != nullptr ? static_cast<const T*>(in->dptr) : nullptr;
    T* o = static_cast<T*>(in_grad->dptr);
    const T s = static_cast<T>(scalar);
    const std::int64_t n = og.Size();
    for (std::int64_t i = 0; i < n; ++i) {
      Assign(o + i, req, tensor_ops::ScalarBackward(op, g[i], x != nullptr ? x[i] : T(0), s));
    }
  });
}

UnaryGradT0 ScalarGradOutOnly(ScalarOp op, std::string name) {
  return [op, name](const OutputGrad& out_grad, const EnvArguments& env, TBlob* in_grad, OpReqType req,
                    RunContext) { ScalarBackwardCpu(op, name, out_grad.data, nullptr, env.scalar, in_grad, req); };
}

UnaryGradT2 ScalarGradWithInput(ScalarOp op, std::string name) {
  return [op, name](const OutputGrad& out_grad, const Input0& in, const EnvArguments& env, TBlob* in_grad,
                    OpReqType req, RunContext) {
    ScalarBackwardCpu(op, name, out_grad.data, &in.data, env.scalar, in_grad, req);
  };
}

// ---- broadcast_* ----

BinaryShapeFunction BroadcastShapeFn(std::string name) {
  return [name](const TShape& lhs, const TShape& rhs, const EnvArguments&) {
    return tensor_ops::BroadcastShape(lhs, rhs, name);
  };
}

BinaryFunction BroadcastForward(BinaryOp op, std::string name) {
  return [op, name](const TBlob& lhs, const TBlob& rhs, const EnvArguments&, TBlob* ret, OpReqType req,
                    RunContext) {
    if (req == kNullOp) return;
    const auto li = tensor_ops::MakeBroadcastIndexer(ret->shape, lhs.shape);
    const auto ri = tensor_ops::MakeBroadcastIndexer(ret->shape, rhs.shape);
    internal::NumberSwitch(ret->dtype, name, [&](auto tag) {
      using T = decltype(tag);
      const T* a = static_cast<const T*>(lhs.dptr);
      const T* b = static_cast<const T*>(rhs.dptr);
      T* o = static_cast<T*>(ret->dptr);
      const std::int64_t n = ret->Size();
      DispatchBinary(op, [&](auto k) {
        for (std::int64_t i = 0; i < n; ++i) {
          Assign(o + i, req, internal::ApplyBinary(k.value, a[li.SmallOffset(i)], b[ri.SmallOffset(i)]));
        }
      });
    });
  };
}

// Each operand's gradient is the output-shaped term summed over the dimensions it was broadcast along.
template <typename T>
void BroadcastBackwardCpu(BinaryOp op, const TBlob& og, const T* a, const T* b, const TShape& lshape,
                          const TShape& rshape, T* lg, T* rg, OpReqType req_l, OpReqType req_r) {
  const T* g = static_cast<const T*>(og.dptr);
  const auto li = tensor_ops::MakeBroadcastIndexer(og.shape, lshape);
  const auto ri = tensor_ops::MakeBroadcastIndexer(og.shape, rshape);
  auto lhs = [&](std::int64_t i) { return a != nullptr ? a[li.SmallOffset(i)] : T(0); };
  auto rhs = [&](std::int64_t i) { return b != nullptr ? b[ri.SmallOffset(i)] : T(0); };
  tensor_ops::SumToSmall(lg, li, req_l, [&](std::int64_t i) { return tensor_ops::BinaryGradLhs(op, g[i], lhs(i), rhs(i)); });
  tensor_ops::SumToSmall(rg, ri, req_r, [&](std::int64_t i) { return tensor_ops::BinaryGradRhs(op, g[i], lhs(i), rhs(i)); });
}

BinaryGradT0 BroadcastBackwardOutOnly(BinaryOp op, std::string name) {
  return [op, name](const OutputGrad& out_grad, const EnvArguments&, TBlob* lhs_grad, TBlob* rhs_grad,
                    OpReqType req_l, OpReqType req_r, RunContext) {
    FloatSwitch(out_grad.data.dtype, name, [&](auto tag) {
      using T = decltype(tag);
      BroadcastBackwardCpu<T>(op, out_grad.data, nullptr, nullptr, lhs_grad->shape, rhs_grad->shape,
                              static_cast<T*>(lhs_grad->dptr), static_cast<T*>(rhs_grad->dptr), req_l, req_r);
    });
  };
}

BinaryGradT1 BroadcastBackwardWithInputs(BinaryOp op, std::string name) {
  return [op, name](const OutputGrad& out_grad, const Input0& lhs, const Input1& rhs, const EnvArguments&,
                    TBlob* lhs_grad, TBlob* rhs_grad, OpReqType req_l, OpReqType req_r, RunContext) {
    FloatSwitch(out_grad.data.dtype, name, [&](auto tag) {
      using T = decltype(tag);
      BroadcastBackwardCpu<T>(op, out_grad.data, static_cast<const T*>(lhs.data.dptr),
                              static_cast<const T*>(rhs.data.dptr), lhs.data.shape, rhs.data.shape,
                              static_cast<T*>(lhs_grad->dptr), static_cast<T*>(rhs_grad->dptr), req_l, req_r);
    });
  };
}

// ---- smooth_l1 ----

void SmoothL1Forward(const TBlob& src, const EnvArguments& env, TBlob* ret, OpReqType req, RunContext) {
  if (req == kNullOp) return;
  CheckSameSize("smooth_l1", src, *ret, "data", "output");
  FloatSwitch(ret->dtype, "smooth_l1", [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(src.dptr);
    T* o = static_cast<T*>(ret->dptr);
    const T sigma = static_cast<T>(env.scalar);
    const std::int64_t n = ret->Size();
    for (std::int64_t i = 0; i < n; ++i) Assign(o + i, req, tensor_ops::SmoothL1(x[i], sigma));
  });
}

void SmoothL1BackwardUseIn(const OutputGrad& out_grad, const Input0& in_data0, const EnvArguments& env,
                           TBlob* in_grad, OpReqType req, RunContext) {
  if (req == kNullOp) return;
  FloatSwitch(in_grad->dtype, "smooth_l1", [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(out_grad.data.dptr);
    const T* x = static_cast<const T*>(in_data0.data.dptr);
    T* o = static_cast<T*>(in_grad->dptr);
    const T sigma = static_cast<T>(env.scalar);
    const std::int64_t n = in_grad->Size();
    for (std::int64_t i = 0; i < n; ++i) Assign(o + i, req, g[i] * tensor_ops::SmoothL1Grad(x[i], sigma));
  });
}

// ---- registration ----

struct BinaryDef {
  const char* name;
  BinaryOp op;
  const char* aliases[3];
  const char* text;
};

// MXNet 1.9's names; the scalar and broadcast forms are below.
[[maybe_unused]] const bool kElemwiseRegistered = [] {
  const BinaryDef elemwise[] = {
      {"elemwise_add", BinaryOp::kAdd, {"_add", "_plus", "_Plus"}, "Adds arguments element-wise (equal shapes)."},
      {"elemwise_sub", BinaryOp::kSub, {"_sub", "_minus", "_Minus"}, "Subtracts arguments element-wise (equal shapes)."},
      {"elemwise_mul", BinaryOp::kMul, {"_mul", "_Mul", nullptr}, "Multiplies arguments element-wise (equal shapes)."},
      {"elemwise_div", BinaryOp::kDiv, {"_div", "_Div", nullptr}, "Divides arguments element-wise (equal shapes)."},
  };
  for (const auto& d : elemwise) {
    SimpleOpEntry& e = SimpleOpRegister(d.name);
    e.set_function(DeviceType::kCPU, ElemwiseForward(d.op, d.name), kInplaceLhsOut);
    if (tensor_ops::BinaryGradNeedsInputs(d.op)) {
      e.set_gradient(DeviceType::kCPU, ElemwiseBackwardWithInputs(d.op, d.name), kInplaceOutLhs);
    } else {
      e.set_gradient(DeviceType::kCPU, ElemwiseBackwardOutOnly(d.op, d.name), kInplaceOutLhs);
    }
    e.describe(d.text);
    for (const char* a : d.aliases) {
      if (a != nullptr) e.add_alias(a);
    }
  }

  const BinaryDef broadcast[] = {
      {"broadcast_add", BinaryOp::kAdd, {"broadcast_plus", nullptr, nullptr},
       "Returns element-wise sum of the input arrays with broadcasting."},
      {"broadcast_sub", BinaryOp::kSub, {"broadcast_minus", nullptr, nullptr},
       "Returns element-wise difference of the input arrays with broadcasting."},
      {"broadcast_mul", BinaryOp::kMul, {nullptr, nullptr, nullptr},
       "Returns element-wise product of the input arrays with broadcasting."},
      {"broadcast_div", BinaryOp::kDiv, {nullptr, nullptr, nullptr},
       "Returns element-wise division of the input arrays with broadcasting."},
  };
  for (const auto& d : broadcast) {
    SimpleOpEntry& e = SimpleOpRegister(d.name);
    // No in-place options: the output is generally larger than either operand.
    e.set_function(DeviceType::kCPU, BroadcastForward(d.op, d.name));
    if (tensor_ops::BinaryGradNeedsInputs(d.op)) {
      e.set_gradient(DeviceType::kCPU, BroadcastBackwardWithInputs(d.op, d.name));
    } else {
      e.set_gradient(DeviceType::kCPU, BroadcastBackwardOutOnly(d.op, d.name));
    }
    e.set_shape_function(BroadcastShapeFn(d.name));
    e.describe(d.text);
    for (const char* a : d.aliases) {
      if (a != nullptr) e.add_alias(a);
    }
  }

  struct ScalarDef {
    const char* name;
    ScalarOp op;
    const char* alias;
    const char* text;
  };
  const ScalarDef scalar[] = {
      {"_plus_scalar", ScalarOp::kPlus, "_PlusScalar", "Adds a scalar to every element: x + scalar."},
      {"_minus_scalar", ScalarOp::kMinus, "_MinusScalar", "Subtracts a scalar from every element: x - scalar."},
      {"_rminus_scalar", ScalarOp::kRMinus, "_RMinusScalar", "Subtracts every element from a scalar: scalar - x."},
      {"_mul_scalar", ScalarOp::kMul, "_MulScalar", "Multiplies every element by a scalar: x * scalar."},
      {"_div_scalar", ScalarOp::kDiv, "_DivScalar", "Divides every element by a scalar: x / scalar."},
      {"_rdiv_scalar", ScalarOp::kRDiv, "_RDivScalar", "Divides a scalar by every element: scalar / x."},
      {"_greater_scalar", ScalarOp::kGreater, "_GreaterScalar", "1 where x > scalar, else 0 (no gradient)."},
      {"_greater_equal_scalar", ScalarOp::kGreaterEqual, "_GreaterEqualScalar",
       "1 where x >= scalar, else 0 (no gradient)."},
      {"_lesser_scalar", ScalarOp::kLesser, "_LesserScalar", "1 where x < scalar, else 0 (no gradient)."},
      {"_lesser_equal_scalar", ScalarOp::kLesserEqual, "_LesserEqualScalar",
       "1 where x <= scalar, else 0 (no gradient)."},
      {"_equal_scalar", ScalarOp::kEqual, "_EqualScalar", "1 where x == scalar, else 0 (no gradient)."},
      {"_not_equal_scalar", ScalarOp::kNotEqual, "_NotEqualScalar", "1 where x != scalar, else 0 (no gradient)."},
      {"_maximum_scalar", ScalarOp::kMaximum, "_MaximumScalar", "The larger of x and scalar, element-wise."},
      {"_minimum_scalar", ScalarOp::kMinimum, "_MinimumScalar", "The smaller of x and scalar, element-wise."},
      {"_power_scalar", ScalarOp::kPower, "_PowerScalar", "x raised to the power scalar."},
      {"_rpower_scalar", ScalarOp::kRPower, "_RPowerScalar", "scalar raised to the power x."},
  };
  for (const auto& d : scalar) {
    SimpleOpEntry& e = SimpleOpRegister(d.name);
    e.set_function(DeviceType::kCPU, ScalarForwardCpu(d.op, d.name), kInplaceInOut);
    if (tensor_ops::ScalarGradNeedsInput(d.op)) {
      e.set_gradient(DeviceType::kCPU, ScalarGradWithInput(d.op, d.name), kInplaceOutIn);
    } else {
      e.set_gradient(DeviceType::kCPU, ScalarGradOutOnly(d.op, d.name), kInplaceOutIn);
    }
    e.set_enable_scalar(true, "The scalar operand.");
    e.describe(d.text);
    e.add_alias(d.alias);
  }
  return true;
}();

}  // namespace

// The seed's example, in its chained form.
TROUPE_REGISTER_SIMPLE_OP(smooth_l1)
    .set_function(DeviceType::kCPU, SmoothL1Forward, kInplaceInOut)
    .set_gradient(DeviceType::kCPU, UnaryGradT2(SmoothL1BackwardUseIn), kInplaceOutIn)
    .set_enable_scalar(true, "sigma: the loss is quadratic for |x| < 1/sigma^2 and linear beyond.")
    .describe("Calculate Smooth L1 Loss(lhs, scalar): 0.5 (sigma x)^2 if |x| < 1/sigma^2, |x| - 0.5/sigma^2 "
              "otherwise, with sigma = scalar.");

}  // namespace troupe
