// argmax, argmin and pick on the GPU: ordering.h's element code, one thread per line for the forward and one
// per input element for pick's gradient (the picked element of its line gets the line's output gradient).
// Types as on the CPU: data float32/float64/uint8/int8/int32/int64 (pick's index too), gradients
// float32/float64; argmax and argmin pass no gradient, nor does pick to its index. topk, sort and argsort stay
// CPU-only.
//
// Kernels loop grid-stride and are enqueued on the stream the engine hands over; launch errors throw
// troupe::Error naming the operator. Registers its GPU code from a static initialiser; compiled only with
// CUDA.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "op/nn/common/cuda_kernels.cuh"
#include "op/nn/ordering/ordering.h"
#include "tensor/detail/cuda_common.h"

namespace troupe {

namespace {

using act_norm::AxisView;
using internal::Blocks;
using internal::Check;
using internal::CheckLaunch;
using internal::FloatSwitch;
using internal::kThreads;
using internal::NumberSwitch;
using nn_cuda::Prepare;

// Line i (outer position a, inner position b) starts at a * n * inner + b.
__device__ inline std::int64_t LineBase(const AxisView& v, std::int64_t i) {
  return (i / v.inner) * v.n * v.inner + i % v.inner;
}

template <typename T>
__global__ void ArgExtremeKernel(const T* x, T* o, AxisView v, bool max, OpReqType req) {
  TROUPE_GRID_LOOP(i, v.outer * v.inner) {
    ordering::WriteConverted(o + i, req, static_cast<double>(ordering::ArgExtreme(x, LineBase(v, i), v, max)));
  }
}

template <typename T, typename I>
__global__ void PickKernel(const T* x, const I* index, T* o, AxisView v, bool wrap, OpReqType req) {
  TROUPE_GRID_LOOP(i, v.outer * v.inner) {
    const std::int64_t j = ordering::PickPosition(static_cast<double>(index[i]), v.n, wrap);
    ordering::WriteConverted(o + i, req, static_cast<double>(x[LineBase(v, i) + j * v.inner]));
  }
}

template <typename T, typename I>
__global__ void PickGradKernel(const T* og, const I* index, T* g, AxisView v, bool wrap, OpReqType req) {
  TROUPE_GRID_LOOP(e, v.outer * v.n * v.inner) {
    const std::int64_t a = e / (v.n * v.inner), k = (e / v.inner) % v.n, line = a * v.inner + e % v.inner;
    const bool picked = ordering::PickPosition(static_cast<double>(index[line]), v.n, wrap) == k;
    Assign(g + e, req, picked ? og[line] : T(0));
  }
}

class ArgExtremeGpuOp final : public Operator {
 public:
  ArgExtremeGpuOp(const ordering::ArgReduceParam& p, bool max) : p_(p), max_(max), name_(max ? "argmax" : "argmin") {}
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    NumberSwitch(in[0].dtype, name_, [&](auto tag) {
      using T = decltype(tag);
      const AxisView v = ordering::Lines(in[0].shape, p_.axis, name_);
      if (req[0] == kNullOp || v.outer * v.inner == 0) return;
      ArgExtremeKernel<T><<<Blocks(v.outer * v.inner), kThreads, 0, Prepare(ctx.run_ctx, name_)>>>(
          static_cast<const T*>(in[0].dptr), static_cast<T*>(out[0].dptr), v, max_, req[0]);
      CheckLaunch("forward kernel", name_);
    });
  }
  // No gradient: zeros (kAddTo leaves the gradient as it is).
  void Backward(const OpContext& ctx, const std::vector<TBlob>&, const std::vector<TBlob>&, const std::vector<TBlob>&,
                const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    FloatSwitch(in_grad[0].dtype, name_,
                [&](auto) { nn_cuda::ZeroIfWritten(in_grad[0], req[0], Prepare(ctx.run_ctx, name_), name_); });
  }

 private:
  ordering::ArgReduceParam p_;
  bool max_;
  std::string name_;
};

class PickGpuOp final : public Operator {
 public:
  explicit PickGpuOp(const ordering::PickParam& p) : p_(p) {}
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    NumberSwitch(in[0].dtype, kName, [&](auto tag) {
      using T = decltype(tag);
      NumberSwitch(in[1].dtype, kName, [&](auto index_tag) {
        using I = decltype(index_tag);
        const AxisView v = ordering::Lines(in[0].shape, p_.axis, kName);
        if (req[0] == kNullOp || v.outer * v.inner == 0) return;
        PickKernel<T, I><<<Blocks(v.outer * v.inner), kThreads, 0, Prepare(ctx.run_ctx, kName)>>>(
            static_cast<const T*>(in[0].dptr), static_cast<const I*>(in[1].dptr), static_cast<T*>(out[0].dptr), v,
            p_.mode == "wrap", req[0]);
        CheckLaunch("forward kernel", kName);
      });
    });
  }
  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    cudaStream_t s = Prepare(ctx.run_ctx, kName);
    nn_cuda::ZeroIfWritten(in_grad[1], req[1], s, kName);  // the index gets no gradient
    if (req[0] == kNullOp) return;
    FloatSwitch(in_grad[0].dtype, kName, [&](auto tag) {
      using T = decltype(tag);
      NumberSwitch(in[1].dtype, kName, [&](auto index_tag) {
        using I = decltype(index_tag);
        const AxisView v = ordering::Lines(in[0].shape, p_.axis, kName);
        const std::int64_t n = v.outer * v.n * v.inner;
        if (n == 0) return;
        PickGradKernel<T, I>
            <<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(out_grad[0].dptr), static_cast<const I*>(in[1].dptr),
                                            static_cast<T*>(in_grad[0].dptr), v, p_.mode == "wrap", req[0]);
        CheckLaunch("backward kernel", kName);
      });
    });
  }

 private:
  static constexpr const char* kName = "pick";
  ordering::PickParam p_;
};

[[maybe_unused]] const bool kGpuRegistered = [] {
  for (const char* name : {"argmax", "argmin"}) {
    RegisterGpuOperator(name, [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
      ordering::ArgReduceParam param;
      param.Init(p.GetParams(), p.TypeString());
      return std::make_unique<ArgExtremeGpuOp>(param, p.TypeString() == "argmax");
    });
  }
  RegisterGpuOperator("pick", [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
    ordering::PickParam param;
    param.Init(p.GetParams(), "pick");
    return std::make_unique<PickGpuOp>(param);
  });
  return true;
}();

}  // namespace

}  // namespace troupe
