// The GPU functions of the element-wise SimpleOps (elemwise_*, *_scalar, broadcast_*, smooth_l1), attached to
// the entries the CPU side registered (elemwise.cc); element arithmetic is the host/device code of
// elemwise.h, so both devices compute the same formulas.
//
// Kernels loop grid-stride and are enqueued on the stream the engine hands over; launch errors throw
// troupe::Error naming the operator. Registers its GPU code from a static initialiser; compiled only with
// CUDA.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "op/nn/common/cuda_kernels.cuh"
#include "op/nn/common/broadcast.h"
#include "op/nn/elemwise/elemwise.h"
#include "op/simple_op.h"
#include "tensor/detail/cuda_common.h"

namespace troupe {

namespace {

using internal::BinaryOp;
using internal::FloatSwitch;
using tensor_ops::BroadcastIndexer;
using tensor_ops::ScalarOp;

using internal::Blocks;
using internal::CheckLaunch;
using internal::kThreads;
using nn_cuda::Prepare;

template <typename T>
__global__ void ElemwiseKernel(BinaryOp op, const T* a, const T* b, T* o, std::int64_t n, OpReqType req) {
  TROUPE_GRID_LOOP(i, n) { Assign(o + i, req, internal::ApplyBinary(op, a[i], b[i])); }
}

// Element i of og is read before element i of either gradient is written (lhs_grad may alias og).
template <typename T>
__global__ void ElemwiseGradKernel(BinaryOp op, const T* og, const T* a, const T* b, T* lg, T* rg, std::int64_t n,
                                   OpReqType req_l, OpReqType req_r) {
  TROUPE_GRID_LOOP(i, n) {
    const T g = og[i];
    const T x = a != nullptr ? a[i] : T(0), y = b != nullptr ? b[i] : T(0);
    if (req_r != kNullOp) Assign(rg + i, req_r, tensor_ops::BinaryGradRhs(op, g, x, y));
    if (req_l != kNullOp) Assign(lg + i, req_l, tensor_ops::BinaryGradLhs(op, g, x, y));
  }
}

template <typename T>
__global__ void ScalarKernel(ScalarOp op, const T* x, T s, T* o, std::int64_t n, OpReqType req) {
  TROUPE_GRID_LOOP(i, n) { Assign(o + i, req, tensor_ops::ScalarForward(op, x[i], s)); }
}

template <typename T>
__global__ void ScalarGradKernel(ScalarOp op, const T* og, const T* x, T s, T* o, std::int64_t n, OpReqType req) {
  TROUPE_GRID_LOOP(i, n) { Assign(o + i, req, tensor_ops::ScalarBackward(op, og[i], x != nullptr ? x[i] : T(0), s)); }
}

template <typename T>
__global__ void BroadcastKernel(BinaryOp op, const T* a, const T* b, T* o, BroadcastIndexer li, BroadcastIndexer ri,
                                OpReqType req) {
  TROUPE_GRID_LOOP(i, li.big_size) {
    Assign(o + i, req, internal::ApplyBinary(op, a[li.SmallOffset(i)], b[ri.SmallOffset(i)]));
  }
}

// The output-shaped gradient term of one operand (lhs when `lhs_side`) at output element `big`.
template <typename T>
struct BroadcastGradTerm {
  BinaryOp op;
  bool lhs_side;
  const T *og, *a, *b;
  BroadcastIndexer li, ri;
  __device__ T operator()(std::int64_t big) const {
    const T x = a != nullptr ? a[li.SmallOffset(big)] : T(0), y = b != nullptr ? b[ri.SmallOffset(big)] : T(0);
    return lhs_side ? tensor_ops::BinaryGradLhs(op, og[big], x, y) : tensor_ops::BinaryGradRhs(op, og[big], x, y);
  }
};

template <typename T>
__global__ void SmoothL1Kernel(const T* x, T sigma, T* o, std::int64_t n, OpReqType req) {
  TROUPE_GRID_LOOP(i, n) { Assign(o + i, req, tensor_ops::SmoothL1(x[i], sigma)); }
}

template <typename T>
__global__ void SmoothL1GradKernel(const T* og, const T* x, T sigma, T* o, std::int64_t n, OpReqType req) {
  TROUPE_GRID_LOOP(i, n) { Assign(o + i, req, og[i] * tensor_ops::SmoothL1Grad(x[i], sigma)); }
}

BinaryFunction ElemwiseForwardGpu(BinaryOp op, std::string name) {
  return [op, name](const TBlob& lhs, const TBlob& rhs, const EnvArguments&, TBlob* ret, OpReqType req,
                    RunContext rctx) {
    const std::int64_t n = ret->Size();
    if (req == kNullOp || n == 0) return;
    if (lhs.Size() != n || rhs.Size() != n) {
      throw Error(name + ": argument 'lhs' has shape " + lhs.shape.ToString() + " but 'rhs' has " +
                  rhs.shape.ToString());
    }
    cudaStream_t s = Prepare(rctx, name);
    FloatSwitch(ret->dtype, name, [&](auto tag) {
      using T = decltype(tag);
      ElemwiseKernel<T><<<Blocks(n), kThreads, 0, s>>>(op, static_cast<const T*>(lhs.dptr),
                                                       static_cast<const T*>(rhs.dptr), static_cast<T*>(ret->dptr), n,
                                                       req);
    });
    CheckLaunch("forward kernel", name);
  };
}

void ElemwiseGradGpu(BinaryOp op, const std::string& name, const TBlob& og, const TBlob* lhs, const TBlob* rhs,
                     TBlob* lhs_grad, TBlob* rhs_grad, OpReqType req_l, OpReqType req_r, const RunContext& rctx) {
  const std::int64_t n = og.Size();
  if ((req_l == kNullOp && req_r == kNullOp) || n == 0) return;
  cudaStream_t s = Prepare(rctx, name);
  FloatSwitch(og.dtype, name, [&](auto tag) {
    using T = decltype(tag);
    ElemwiseGradKernel<T><<<Blocks(n), kThreads, 0, s>>>(
        op, static_cast<const T*>(og.dptr), lhs != nullptr ? static_cast<const T*>(lhs->dptr) : nullptr,
        rhs != nullptr ? static_cast<const T*>(rhs->dptr) : nullptr,
        req_l != kNullOp ? static_cast<T*>(lhs_grad->dptr) : nullptr,
        req_r != kNullOp ? static_cast<T*>(rhs_grad->dptr) : nullptr, n, req_l, req_r);
  });
  CheckLaunch("backward kernel", name);
}

UnaryFunction ScalarForwardGpu(ScalarOp op, std::string name) {
  return [op, name](const TBlob& src, const EnvArguments& env, TBlob* ret, OpReqType req, RunContext rctx) {
    const std::int64_t n = ret->Size();
    if (req == kNullOp || n == 0) return;
    cudaStream_t s = Prepare(rctx, name);
    FloatSwitch(ret->dtype, name, [&](auto tag) {
      using T = decltype(tag);
      ScalarKernel<T><<<Blocks(n), kThreads, 0, s>>>(op, static_cast<const T*>(src.dptr), static_cast<T>(env.scalar),
                                                     static_cast<T*>(ret->dptr), n, req);
    });
    CheckLaunch("forward kernel", name);
  };
}

void ScalarGradGpu(ScalarOp op, const std::string& name, const TBlob& og, const TBlob* in, double scalar,
                   TBlob* in_grad, OpReqType req, const RunContext& rctx) {
  const std::int64_t n = og.Size();
  if (req == kNullOp || n == 0) return;
  cudaStream_t s = Prepare(rctx, name);
  FloatSwitch(og.dtype, name, [&](auto tag) {
    using T = decltype(tag);
    ScalarGradKernel<T><<<Blocks(n), kThreads, 0, s>>>(op, static_cast<const T*>(og.dptr),
                                                       in != nullptr ? static_cast<const T*>(in->dptr) : nullptr,
                                                       static_cast<T>(scalar), static_cast<T*>(in_grad->dptr), n, req);
  });
  CheckLaunch("backward kernel", name);
}

BinaryFunction BroadcastForwardGpu(BinaryOp op, std::string name) {
  return [op, name](const TBlob& lhs, const TBlob& rhs, const EnvArguments&, TBlob* ret, OpReqType req,
                    RunContext rctx) {
    if (req == kNullOp || ret->Size() == 0) return;
    const auto li = tensor_ops::MakeBroadcastIndexer(ret->shape, lhs.shape);
    const auto ri = tensor_ops::MakeBroadcastIndexer(ret->shape, rhs.shape);
    cudaStream_t s = Prepare(rctx, name);
    FloatSwitch(ret->dtype, name, [&](auto tag) {
      using T = decltype(tag);
      BroadcastKernel<T><<<Blocks(li.big_size), kThreads, 0, s>>>(op, static_cast<const T*>(lhs.dptr),
                                                                  static_cast<const T*>(rhs.dptr),
                                                                  static_cast<T*>(ret->dptr), li, ri, req);
    });
    CheckLaunch("forward kernel", name);
  };
}

void BroadcastGradGpu(BinaryOp op, const std::string& name, const TBlob& og, const TBlob* lhs, const TBlob* rhs,
                      TBlob* lhs_grad, TBlob* rhs_grad, OpReqType req_l, OpReqType req_r, const RunContext& rctx) {
  if (req_l == kNullOp && req_r == kNullOp) return;
  const auto li = tensor_ops::MakeBroadcastIndexer(og.shape, lhs_grad->shape);
  const auto ri = tensor_ops::MakeBroadcastIndexer(og.shape, rhs_grad->shape);
  cudaStream_t s = Prepare(rctx, name);
  FloatSwitch(og.dtype, name, [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(og.dptr);
    const T* a = lhs != nullptr ? static_cast<const T*>(lhs->dptr) : nullptr;
    const T* b = rhs != nullptr ? static_cast<const T*>(rhs->dptr) : nullptr;
    if (req_l != kNullOp && li.small_size > 0) {
      nn_cuda::SumToSmallKernel<<<Blocks(li.small_size), kThreads, 0, s>>>(
          static_cast<T*>(lhs_grad->dptr), li, req_l, BroadcastGradTerm<T>{op, true, g, a, b, li, ri});
    }
    if (req_r != kNullOp && ri.small_size > 0) {
      nn_cuda::SumToSmallKernel<<<Blocks(ri.small_size), kThreads, 0, s>>>(
          static_cast<T*>(rhs_grad->dptr), ri, req_r, BroadcastGradTerm<T>{op, false, g, a, b, li, ri});
    }
  });
  CheckLaunch("backward kernel", name);
}

void SmoothL1ForwardGpu(const TBlob& src, const EnvArguments& env, TBlob* ret, OpReqType req, RunContext rctx) {
  const std::int64_t n = ret->Size();
  if (req == kNullOp || n == 0) return;
  cudaStream_t s = Prepare(rctx, "smooth_l1");
  FloatSwitch(ret->dtype, "smooth_l1", [&](auto tag) {
    using T = decltype(tag);
    SmoothL1Kernel<T><<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(src.dptr), static_cast<T>(env.scalar),
                                                     static_cast<T*>(ret->dptr), n, req);
  });
  CheckLaunch("forward kernel", "smooth_l1");
}

void SmoothL1BackwardUseInGpu(const OutputGrad& out_grad, const Input0& in_data0, const EnvArguments& env,
                              TBlob* in_grad, OpReqType req, RunContext rctx) {
  const std::int64_t n = in_grad->Size();
  if (req == kNullOp || n == 0) return;
  cudaStream_t s = Prepare(rctx, "smooth_l1");
  FloatSwitch(in_grad->dtype, "smooth_l1", [&](auto tag) {
    using T = decltype(tag);
    SmoothL1GradKernel<T><<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(out_grad.data.dptr),
                                                         static_cast<const T*>(in_data0.data.dptr),
                                                         static_cast<T>(env.scalar), static_cast<T*>(in_grad->dptr), n,
                                                         req);
  });
  CheckLaunch("backward kernel", "smooth_l1");
}

[[maybe_unused]] const bool kGpuRegistered = [] {
  // The SimpleOps: same entries (and in-place options) as the CPU registration in elemwise.cc.
  const std::pair<const char*, BinaryOp> elemwise[] = {{"elemwise_add", BinaryOp::kAdd},
                                                       {"elemwise_sub", BinaryOp::kSub},
                                                       {"elemwise_mul", BinaryOp::kMul},
                                                       {"elemwise_div", BinaryOp::kDiv}};
  for (const auto& [name_c, op] : elemwise) {
    const std::string name = name_c;
    SimpleOpEntry& e = SimpleOpRegister(name);
    e.set_function(DeviceType::kGPU, ElemwiseForwardGpu(op, name), kInplaceLhsOut);
    if (tensor_ops::BinaryGradNeedsInputs(op)) {
      e.set_gradient(DeviceType::kGPU,
                     BinaryGradT1([op = op, name](const OutputGrad& og, const Input0& l, const Input1& r,
                                                  const EnvArguments&, TBlob* lg, TBlob* rg, OpReqType req_l,
                                                  OpReqType req_r, RunContext rctx) {
                       ElemwiseGradGpu(op, name, og.data, &l.data, &r.data, lg, rg, req_l, req_r, rctx);
                     }),
                     kInplaceOutLhs);
    } else {
      e.set_gradient(DeviceType::kGPU,
                     BinaryGradT0([op = op, name](const OutputGrad& og, const EnvArguments&, TBlob* lg, TBlob* rg,
                                                  OpReqType req_l, OpReqType req_r, RunContext rctx) {
                       ElemwiseGradGpu(op, name, og.data, nullptr, nullptr, lg, rg, req_l, req_r, rctx);
                     }),
                     kInplaceOutLhs);
    }
  }

  const std::pair<const char*, BinaryOp> broadcast[] = {{"broadcast_add", BinaryOp::kAdd},
                                                        {"broadcast_sub", BinaryOp::kSub},
                                                        {"broadcast_mul", BinaryOp::kMul},
                                                        {"broadcast_div", BinaryOp::kDiv}};
  for (const auto& [name_c, op] : broadcast) {
    const std::string name = name_c;
    SimpleOpEntry& e = SimpleOpRegister(name);
    e.set_function(DeviceType::kGPU, BroadcastForwardGpu(op, name));
    if (tensor_ops::BinaryGradNeedsInputs(op)) {
      e.set_gradient(DeviceType::kGPU,
                     BinaryGradT1([op = op, name](const OutputGrad& og, const Input0& l, const Input1& r,
                                                  const EnvArguments&, TBlob* lg, TBlob* rg, OpReqType req_l,
                                                  OpReqType req_r, RunContext rctx) {
                       BroadcastGradGpu(op, name, og.data, &l.data, &r.data, lg, rg, req_l, req_r, rctx);
                     }));
    } else {
      e.set_gradient(DeviceType::kGPU,
                     BinaryGradT0([op = op, name](const OutputGrad& og, const EnvArguments&, TBlob* lg, TBlob* rg,
                                                  OpReqType req_l, OpReqType req_r, RunContext rctx) {
                       BroadcastGradGpu(op, name, og.data, nullptr, nullptr, lg, rg, req_l, req_r, rctx);
                     }));
    }
  }

  const std::pair<const char*, ScalarOp> scalar[] = {
      {"_plus_scalar", ScalarOp::kPlus}, {"_minus_scalar", ScalarOp::kMinus}, {"_rminus_scalar", ScalarOp::kRMinus},
      {"_mul_scalar", ScalarOp::kMul},   {"_div_scalar", ScalarOp::kDiv},     {"_rdiv_scalar", ScalarOp::kRDiv},
      {"_greater_scalar", ScalarOp::kGreater}, {"_greater_equal_scalar", ScalarOp::kGreaterEqual},
      {"_lesser_scalar", ScalarOp::kLesser}, {"_lesser_equal_scalar", ScalarOp::kLesserEqual},
      {"_equal_scalar", ScalarOp::kEqual}, {"_not_equal_scalar", ScalarOp::kNotEqual},
      {"_maximum_scalar", ScalarOp::kMaximum}, {"_minimum_scalar", ScalarOp::kMinimum},
      {"_power_scalar", ScalarOp::kPower}, {"_rpower_scalar", ScalarOp::kRPower}};
  for (const auto& [name_c, op] : scalar) {
    const std::string name = name_c;
    SimpleOpEntry& e = SimpleOpRegister(name);
    e.set_function(DeviceType::kGPU, ScalarForwardGpu(op, name), kInplaceInOut);
    if (tensor_ops::ScalarGradNeedsInput(op)) {
      e.set_gradient(DeviceType::kGPU,
                     UnaryGradT2([op = op, name](const OutputGrad& og, const Input0& in, const EnvArguments& env,
                                                 TBlob* ig, OpReqType req, RunContext rctx) {
                       ScalarGradGpu(op, name, og.data, &in.data, env.scalar, ig, req, rctx);
                     }),
                     kInplaceOutIn);
    } else {
      e.set_gradient(DeviceType::kGPU,
                     UnaryGradT0([op = op, name](const OutputGrad& og, const EnvArguments& env, TBlob* ig,
                                                 OpReqType req, RunContext rctx) {
                       ScalarGradGpu(op, name, og.data, nullptr, env.scalar, ig, req, rctx);
                     }),
                     kInplaceOutIn);
    }
  }
  return true;
}();

}  // namespace

// The seed's example: the GPU half of smooth_l1, attached to the entry registered in elemwise.cc.
TROUPE_REGISTER_SIMPLE_OP(smooth_l1)
    .set_function(DeviceType::kGPU, SmoothL1ForwardGpu, kInplaceInOut)
    .set_gradient(DeviceType::kGPU, UnaryGradT2(SmoothL1BackwardUseInGpu), kInplaceOutIn);

}  // namespace troupe
