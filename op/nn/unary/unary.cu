// The element-wise unary operators on the GPU: every function of unary.h's table (forward and gradient, as
// SimpleOps attached to the entries unary.cc registered), clip, Cast and AMP's amp_cast / amp_multicast. The element formulas are unary.h's
// host/device functions, so both devices compute the same values; the types accepted are the CPU side's
// (the table's integer-capable functions and clip on float32/float64/uint8/int8/int32/int64 forward,
// gradients on float32/float64; Cast between any two types).
//
// Kernels loop grid-stride and are enqueued on the stream the engine hands over; launch errors throw
// troupe::Error naming the operator. Registers its GPU code from a static initialiser; compiled only with
// CUDA.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "op/internal/op_util.h"
#include "op/nn/common/cuda_kernels.cuh"
#include "op/nn/unary/unary.h"
#include "op/simple_op.h"
#include "tensor/detail/cuda_common.h"
#include "tensor/detail/elementwise.h"
#include "tensor/detail/kernels.h"

namespace troupe {

namespace {

using internal::Blocks;
using internal::CheckLaunch;
using internal::FloatSwitch;
using internal::kThreads;
using internal::NumberSwitch;
using nn_cuda::Prepare;
using unary::UnaryOp;

template <typename T>
__global__ void UnaryKernel(UnaryOp op, const T* x, T* o, std::int64_t n, OpReqType req) {
  TROUPE_GRID_LOOP(i, n) { Assign(o + i, req, unary::Forward(op, x[i])); }
}

template <typename T>
__global__ void UnaryGradKernel(UnaryOp op, const T* og, const T* x, T* g, std::int64_t n, OpReqType req) {
  TROUPE_GRID_LOOP(i, n) { Assign(g + i, req, unary::Gradient(op, og[i], x[i])); }
}

void CheckSizes(const std::string& op, const TBlob& a, const TBlob& b) {
  if (a.Size() != b.Size()) {
    throw Error(op + ": the output has shape " + b.shape.ToString() + " but the input " + a.shape.ToString());
  }
}

UnaryFunction ForwardGpu(UnaryOp op, std::string name) {
  return [op, name](const TBlob& src, const EnvArguments&, TBlob* ret, OpReqType req, RunContext rctx) {
    if (req == kNullOp) return;
    CheckSizes(name, src, *ret);
    const std::int64_t n = ret->Size();
    auto run = [&](auto tag) {
      using T = decltype(tag);
      if (n == 0) return;
      cudaStream_t s = Prepare(rctx, name);
      UnaryKernel<T>
          <<<Blocks(n), kThreads, 0, s>>>(op, static_cast<const T*>(src.dptr), static_cast<T*>(ret->dptr), n, req);
      CheckLaunch("forward kernel", name);
    };
    if (unary::AnyType(op)) {
      NumberSwitch(ret->dtype, name, run);
    } else {
      FloatSwitch(ret->dtype, name, run);
    }
  };
}

UnaryGradT2 GradientGpu(UnaryOp op, std::string name) {
  return [op, name](const OutputGrad& out_grad, const Input0& in, const EnvArguments&, TBlob* in_grad, OpReqType req,
                    RunContext rctx) {
    if (req == kNullOp) return;
    FloatSwitch(in_grad->dtype, name, [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t n = in_grad->Size();
      if (n == 0) return;
      cudaStream_t s = Prepare(rctx, name);
      UnaryGradKernel<T><<<Blocks(n), kThreads, 0, s>>>(op, static_cast<const T*>(out_grad.data.dptr),
                                                        static_cast<const T*>(in.data.dptr),
                                                        static_cast<T*>(in_grad->dptr), n, req);
      CheckLaunch("backward kernel", name);
    });
  };
}

// ---- clip ----

template <typename T>
__global__ void ClipKernel(const T* x, T lo, T hi, T* o, std::int64_t n, OpReqType req) {
  TROUPE_GRID_LOOP(i, n) { Assign(o + i, req, unary::Clip(x[i], lo, hi)); }
}

template <typename T>
__global__ void ClipGradKernel(const T* og, const T* x, T lo, T hi, T* g, std::int64_t n, OpReqType req) {
  TROUPE_GRID_LOOP(i, n) { Assign(g + i, req, unary::ClipGradient(og[i], x[i], lo, hi)); }
}

class ClipGpuOp final : public Operator {
 public:
  explicit ClipGpuOp(ClipParam p) : p_(p) {}
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    NumberSwitch(out[0].dtype, "clip", [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t n = out[0].Size();
      if (req[0] == kNullOp || n == 0) return;
      cudaStream_t s = Prepare(ctx.run_ctx, "clip");
      ClipKernel<T><<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(in[0].dptr), static_cast<T>(p_.a_min),
                                                   static_cast<T>(p_.a_max), static_cast<T*>(out[0].dptr), n, req[0]);
      CheckLaunch("forward kernel", "clip");
    });
  }
  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    FloatSwitch(in_grad[0].dtype, "clip", [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t n = in_grad[0].Size();
      if (req[0] == kNullOp || n == 0) return;
      cudaStream_t s = Prepare(ctx.run_ctx, "clip");
      ClipGradKernel<T><<<Blocks(n), kThreads, 0, s>>>(
          static_cast<const T*>(out_grad[0].dptr), static_cast<const T*>(in[0].dptr), static_cast<T>(p_.a_min),
          static_cast<T>(p_.a_max), static_cast<T*>(in_grad[0].dptr), n, req[0]);
      CheckLaunch("backward kernel", "clip");
    });
  }

 private:
  ClipParam p_;
};

// ---- Cast ----

// o = ConvertTo<O>(o + x) in double, as the CPU's kAddTo.
template <typename I, typename O>
__global__ void CastAddKernel(const I* x, O* o, std::int64_t n) {
  TROUPE_GRID_LOOP(i, n) {
    o[i] = internal::ConvertTo<O>(internal::ConvertTo<double>(o[i]) + internal::ConvertTo<double>(x[i]));
  }
}

// to (req)= from converted to to's type.
void ConvertGpu(const TBlob& from, const TBlob& to, OpReqType req, const RunContext& rctx) {
  const std::int64_t n = to.Size();
  if (req == kNullOp || n == 0) return;
  CheckSizes("Cast", from, to);
  cudaStream_t s = Prepare(rctx, "Cast");
  if (req != kAddTo) {
    internal::GpuCast(from, to, rctx.stream);
    return;
  }
  DTypeSwitch(to.dtype, [&](auto out_tag) {
    using O = decltype(out_tag);
    DTypeSwitch(from.dtype, [&](auto in_tag) {
      using I = decltype(in_tag);
      CastAddKernel<I, O><<<Blocks(n), kThreads, 0, s>>>(static_cast<const I*>(from.dptr), static_cast<O*>(to.dptr), n);
    });
  });
  CheckLaunch("kAddTo kernel", "Cast");
}

class CastGpuOp final : public Operator {
 public:
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    for (std::size_t i = 0; i < in.size(); ++i) ConvertGpu(in[i], out[i], req[i], ctx.run_ctx);
  }
  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    for (std::size_t i = 0; i < in_grad.size(); ++i) ConvertGpu(out_grad[i], in_grad[i], req[i], ctx.run_ctx);
  }
};

[[maybe_unused]] const bool kGpuRegistered = [] {
  for (const unary::UnaryDef& d : unary::kUnaryDefs) {
    SimpleOpEntry& e = SimpleOpRegister(d.name);
    e.set_function(DeviceType::kGPU, ForwardGpu(d.op, d.name));
    e.set_gradient(DeviceType::kGPU, GradientGpu(d.op, d.name));
  }
  RegisterGpuOperator("clip", [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
    ClipParam param;
    param.Init(p.GetParams(), "clip");
    return std::make_unique<ClipGpuOp>(param);
  });
  // Cast, amp_cast and amp_multicast: output i is input i converted (the types come from InferType).
  for (const char* name : {"Cast", "amp_cast", "amp_multicast"}) {
    RegisterGpuOperator(name, [](const OperatorProperty&, Context) -> std::unique_ptr<Operator> {
      return std::make_unique<CastGpuOp>();
    });
  }
  return true;
}();

}  // namespace

}  // namespace troupe
