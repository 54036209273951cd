// The operators of binary.cc on the GPU: the element-wise binary functions of binary.h's table in their
// equal-shape and broadcasting forms (maximum, minimum, power, mod, hypot, the comparisons, the logical
// operators; SimpleOps attached to the entries binary.cc registered), broadcast_to / broadcast_axis /
// broadcast_like, where and add_n. Element formulas are binary.h's host/device functions; broadcasting walks
// tensor_ops::BroadcastIndexer as the CPU does, and a broadcast operand's gradient is the sum, in double and
// in increasing output index, of the output-shaped terms that read it (nn_cuda::SumToSmallKernel, one thread
// per operand element), as tensor_ops::SumToSmall on the CPU. Forward accepts float32/float64/uint8/int8/
// int32/int64, gradients float32/float64, as the CPU side.
//
// Kernels loop grid-stride and are enqueued on the stream the engine hands over; launch errors throw
// troupe::Error naming the operator. Registers its GPU code from a static initialiser; compiled only with
// CUDA.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "op/nn/binary/binary.h"
#include "op/nn/common/broadcast.h"
#include "op/nn/common/cuda_kernels.cuh"
#include "op/simple_op.h"
#include "tensor/detail/cuda_common.h"

namespace troupe {

namespace {

using binary::BinaryMath;
using internal::Blocks;
using internal::Check;
using internal::CheckLaunch;
using internal::FloatSwitch;
using internal::kThreads;
using internal::NumberSwitch;
using nn_cuda::Prepare;
using tensor_ops::BroadcastIndexer;

// ---- the element-wise binary functions ----

template <typename T>
__global__ void MathKernel(BinaryMath op, const T* a, const T* b, T* o, BroadcastIndexer li, BroadcastIndexer ri,
                           OpReqType req) {
  TROUPE_GRID_LOOP(i, li.big_size) {
    Assign(o + i, req, binary::Apply(op, a[li.SmallOffset(i)], b[ri.SmallOffset(i)]));
  }
}

// The output-shaped gradient term of one operand (lhs when `lhs_side`) at output element `big`.
template <typename T>
struct MathGradTerm {
  BinaryMath op;
  bool lhs_side;
  const T *og, *a, *b;
  BroadcastIndexer li, ri;
  __device__ T operator()(std::int64_t big) const {
    T ga, gb;
    binary::Gradients(op, og[big], a[li.SmallOffset(big)], b[ri.SmallOffset(big)], &ga, &gb);
    return lhs_side ? ga : gb;
  }
};

// The output gradient itself (broadcast_to / axis / like).
template <typename T>
struct OutputGradTerm {
  const T* og;
  __device__ T operator()(std::int64_t big) const { return og[big]; }
};

BinaryFunction MathForwardGpu(BinaryMath op, std::string name) {
  return
      [op, name](const TBlob& lhs, const TBlob& rhs, const EnvArguments&, TBlob* ret, OpReqType req, RunContext rctx) {
        if (req == kNullOp) return;
        const auto li = tensor_ops::MakeBroadcastIndexer(ret->shape, lhs.shape);
        const auto ri = tensor_ops::MakeBroadcastIndexer(ret->shape, rhs.shape);
        NumberSwitch(ret->dtype, name, [&](auto tag) {
          using T = decltype(tag);
          if (li.big_size == 0) return;
          cudaStream_t s = Prepare(rctx, name);
          MathKernel<T><<<Blocks(li.big_size), kThreads, 0, s>>>(op, static_cast<const T*>(lhs.dptr),
                                                                 static_cast<const T*>(rhs.dptr),
                                                                 static_cast<T*>(ret->dptr), li, ri, req);
          CheckLaunch("forward kernel", name);
        });
      };
}

BinaryGradT1 MathBackwardGpu(BinaryMath op, std::string name) {
  return [op, name](const OutputGrad& out_grad, const Input0& lhs, const Input1& rhs, const EnvArguments&,
                    TBlob* lhs_grad, TBlob* rhs_grad, OpReqType req_l, OpReqType req_r, RunContext rctx) {
    const TBlob& og = out_grad.data;
    const auto li = tensor_ops::MakeBroadcastIndexer(og.shape, lhs.data.shape);
    const auto ri = tensor_ops::MakeBroadcastIndexer(og.shape, rhs.data.shape);
    FloatSwitch(og.dtype, name, [&](auto tag) {
      using T = decltype(tag);
      const T* g = static_cast<const T*>(og.dptr);
      const T* a = static_cast<const T*>(lhs.data.dptr);
      const T* b = static_cast<const T*>(rhs.data.dptr);
      cudaStream_t s = Prepare(rctx, name);
      if (req_l != kNullOp && li.small_size > 0) {
        nn_cuda::SumToSmallKernel<<<Blocks(li.small_size), kThreads, 0, s>>>(
            static_cast<T*>(lhs_grad->dptr), li, req_l, MathGradTerm<T>{op, true, g, a, b, li, ri});
      }
      if (req_r != kNullOp && ri.small_size > 0) {
        nn_cuda::SumToSmallKernel<<<Blocks(ri.small_size), kThreads, 0, s>>>(
            static_cast<T*>(rhs_grad->dptr), ri, req_r, MathGradTerm<T>{op, false, g, a, b, li, ri});
      }
      CheckLaunch("backward kernel", name);
    });
  };
}

// ---- broadcast_to / broadcast_axis / broadcast_like ----

template <typename T>
__global__ void BroadcastOneKernel(const T* x, T* o, BroadcastIndexer ix, OpReqType req) {
  TROUPE_GRID_LOOP(i, ix.big_size) { Assign(o + i, req, x[ix.SmallOffset(i)]); }
}

class BroadcastOneGpuOp final : public Operator {
 public:
  explicit BroadcastOneGpuOp(std::string name) : name_(std::move(name)) {}
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const auto ix = tensor_ops::MakeBroadcastIndexer(out[0].shape, in[0].shape);
    NumberSwitch(out[0].dtype, name_, [&](auto tag) {
      using T = decltype(tag);
      if (ix.big_size == 0) return;
      cudaStream_t s = Prepare(ctx.run_ctx, name_);
      BroadcastOneKernel<T><<<Blocks(ix.big_size), kThreads, 0, s>>>(static_cast<const T*>(in[0].dptr),
                                                                     static_cast<T*>(out[0].dptr), ix, req[0]);
      CheckLaunch("forward kernel", name_);
    });
  }
  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    const auto ix = tensor_ops::MakeBroadcastIndexer(out_grad[0].shape, in_grad[0].shape);
    FloatSwitch(in_grad[0].dtype, name_, [&](auto tag) {
      using T = decltype(tag);
      cudaStream_t s = Prepare(ctx.run_ctx, name_);
      if (req[0] != kNullOp && ix.small_size > 0) {
        nn_cuda::SumToSmallKernel<<<Blocks(ix.small_size), kThreads, 0, s>>>(
            static_cast<T*>(in_grad[0].dptr), ix, req[0], OutputGradTerm<T>{static_cast<const T*>(out_grad[0].dptr)});
        CheckLaunch("backward kernel", name_);
      }
      // broadcast_like's second input only lends its shape: its gradient is zero.
      for (std::size_t k = 1; k < in_grad.size(); ++k) nn_cuda::ZeroIfWritten(in_grad[k], req[k], s, name_);
    });
  }

 private:
  std::string name_;
};

// ---- where ----

template <typename C, typename T>
__global__ void WhereKernel(const C* c, const T* x, const T* y, T* o, std::int64_t n, std::int64_t row, OpReqType req) {
  TROUPE_GRID_LOOP(i, n) { Assign(o + i, req, c[i / row] != C(0) ? x[i] : y[i]); }
}

template <typename C, typename T>
__global__ void WhereGradKernel(const C* c, const T* g, T* gx, T* gy, std::int64_t n, std::int64_t row, OpReqType req_x,
                                OpReqType req_y) {
  TROUPE_GRID_LOOP(i, n) {
    const bool take_x = c[i / row] != C(0);
    if (req_x != kNullOp) Assign(gx + i, req_x, take_x ? g[i] : T(0));
    if (req_y != kNullOp) Assign(gy + i, req_y, take_x ? T(0) : g[i]);
  }
}

class WhereGpuOp final : public Operator {
 public:
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    const std::int64_t n = out[0].Size();
    if (req[0] == kNullOp || n == 0) return;
    const std::int64_t row = binary::WhereRowSize(in[0].Size(), in[1].Size());
    NumberSwitch(in[0].dtype, "where", [&](auto ctag) {
      using C = decltype(ctag);
      NumberSwitch(out[0].dtype, "where", [&](auto tag) {
        using T = decltype(tag);
        cudaStream_t s = Prepare(ctx.run_ctx, "where");
        WhereKernel<C, T><<<Blocks(n), kThreads, 0, s>>>(
            static_cast<const C*>(in[0].dptr), static_cast<const T*>(in[1].dptr), static_cast<const T*>(in[2].dptr),
            static_cast<T*>(out[0].dptr), n, row, req[0]);
        CheckLaunch("forward kernel", "where");
      });
    });
  }
  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    const std::int64_t n = out_grad[0].Size();
    const std::int64_t row = binary::WhereRowSize(in[0].Size(), n);
    NumberSwitch(in[0].dtype, "where", [&](auto ctag) {
      using C = decltype(ctag);
      FloatSwitch(out_grad[0].dtype, "where", [&](auto tag) {
        using T = decltype(tag);
        cudaStream_t s = Prepare(ctx.run_ctx, "where");
        if (n > 0 && (req[1] != kNullOp || req[2] != kNullOp)) {
          WhereGradKernel<C, T><<<Blocks(n), kThreads, 0, s>>>(
              static_cast<const C*>(in[0].dptr), static_cast<const T*>(out_grad[0].dptr),
              req[1] != kNullOp ? static_cast<T*>(in_grad[1].dptr) : nullptr,
              req[2] != kNullOp ? static_cast<T*>(in_grad[2].dptr) : nullptr, n, row, req[1], req[2]);
          CheckLaunch("backward kernel", "where");
        }
        nn_cuda::ZeroIfWritten(in_grad[0], req[0], s, "where");
      });
    });
  }
};

// ---- add_n ----

// The inputs' addresses, passed by value to the kernel (2 KiB of the 4 KiB a launch may carry).
constexpr int kMaxAddN = 256;
template <typename T>
struct AddNInputs {
  const T* p[kMaxAddN];
  int count;
};

// o (req)= in_0 + in_1 + ... summed in T from the left, as the CPU does.
template <typename T>
__global__ void AddNKernel(AddNInputs<T> in, T* o, std::int64_t n, OpReqType req) {
  TROUPE_GRID_LOOP(i, n) {
    T s = in.p[0][i];
    for (int k = 1; k < in.count; ++k) s = static_cast<T>(s + in.p[k][i]);
    Assign(o + i, req, s);
  }
}

template <typename T>
__global__ void CopyGradKernel(const T* g, T* o, std::int64_t n, OpReqType req) {
  TROUPE_GRID_LOOP(i, n) { Assign(o + i, req, g[i]); }
}

class AddNGpuOp final : public Operator {
 public:
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    const std::int64_t n = out[0].Size();
    if (req[0] == kNullOp || n == 0) return;
    if (in.size() > static_cast<std::size_t>(kMaxAddN)) {
      throw Error("add_n: " + std::to_string(in.size()) + " inputs; on a GPU it sums at most " +
                  std::to_string(kMaxAddN) + " at once: add them in groups");
    }
    NumberSwitch(out[0].dtype, "add_n", [&](auto tag) {
      using T = decltype(tag);
      AddNInputs<T> args{};
      args.count = static_cast<int>(in.size());
      for (std::size_t k = 0; k < in.size(); ++k) args.p[k] = static_cast<const T*>(in[k].dptr);
      cudaStream_t s = Prepare(ctx.run_ctx, "add_n");
      AddNKernel<T><<<Blocks(n), kThreads, 0, s>>>(args, static_cast<T*>(out[0].dptr), n, req[0]);
      CheckLaunch("forward kernel", "add_n");
    });
  }
  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    FloatSwitch(out_grad[0].dtype, "add_n", [&](auto tag) {
      using T = decltype(tag);
      cudaStream_t s = Prepare(ctx.run_ctx, "add_n");
      for (std::size_t k = 0; k < in_grad.size(); ++k) {
        const std::int64_t n = in_grad[k].Size();
        if (req[k] == kNullOp || n == 0) continue;
        CopyGradKernel<T><<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(out_grad[0].dptr),
                                                         static_cast<T*>(in_grad[k].dptr), n, req[k]);
      }
      CheckLaunch("backward kernel", "add_n");
    });
  }
};

[[maybe_unused]] const bool kGpuRegistered = [] {
  for (const binary::MathDef& d : binary::kMathDefs) {
    for (const char* name : {d.elemwise, d.broadcast}) {
      SimpleOpEntry& e = SimpleOpRegister(name);
      e.set_function(DeviceType::kGPU, MathForwardGpu(d.op, name));
      e.set_gradient(DeviceType::kGPU, MathBackwardGpu(d.op, name));
    }
  }
  for (const char* name : {"broadcast_to", "broadcast_axis", "broadcast_like"}) {
    RegisterGpuOperator(name, [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
      return std::make_unique<BroadcastOneGpuOp>(p.TypeString());
    });
  }
  RegisterGpuOperator("where", [](const OperatorProperty&, Context) -> std::unique_ptr<Operator> {
    return std::make_unique<WhereGpuOp>();
  });
  RegisterGpuOperator("add_n", [](const OperatorProperty&, Context) -> std::unique_ptr<Operator> {
    return std::make_unique<AddNGpuOp>();
  });
  return true;
}();

}  // namespace

}  // namespace troupe
