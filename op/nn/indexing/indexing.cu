// take and one_hot on the GPU, with indexing.h's element code: index values are read on the device and
// truncated to integers as on the CPU (any number type). take's forward is a gather (one thread per output
// element), its gradient a scatter with atomicAdd (several outputs may come from one input slice; float32
// and float64, as on the CPU), and mode 'raise' copies the indices to the host to check them first (the
// stream is synchronised: an out-of-range index is a troupe::Error, as on the CPU). one_hot writes any
// output type. gather_nd checks its indices on the host (a copy, the stream synchronised) as the CPU does,
// then gathers (one thread per output element) and scatters its gradient with atomicAdd. The indices get no
// gradient.
//
// Kernels loop grid-stride and are enqueued on the stream the engine hands over; launch errors throw
// troupe::Error naming the operator. Registers its GPU code from a static initialiser; compiled only with
// CUDA.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "op/internal/op_util.h"
#include "op/nn/common/cuda_kernels.cuh"
#include "op/nn/indexing/indexing.h"
#include "tensor/detail/cuda_common.h"

namespace troupe {

namespace {

using indexing::kGather;
using indexing::kOneHot;
using indexing::kTake;
using internal::Blocks;
using internal::Check;
using internal::CheckLaunch;
using internal::kThreads;
using internal::NumberSwitch;
using nn_cuda::Prepare;

// a viewed as (outer, n, inner) around the axis, and the number of indices k.
struct TakeView {
  std::int64_t outer, n, inner, k;
  bool clip;
};

template <typename T, typename I>
__global__ void TakeKernel(const T* a, const I* idx, T* o, TakeView v, OpReqType req) {
  TROUPE_GRID_LOOP(e, v.outer * v.k * v.inner) {
    const std::int64_t p = e / (v.k * v.inner), j = (e / v.inner) % v.k, r = e % v.inner;
    const std::int64_t pos = indexing::TakePosition(static_cast<std::int64_t>(idx[j]), v.n, v.clip);
    Assign(o + e, req, a[(p * v.n + pos) * v.inner + r]);
  }
}

template <typename T, typename I>
__global__ void TakeGradKernel(const T* og, const I* idx, T* g, TakeView v) {
  TROUPE_GRID_LOOP(e, v.outer * v.k * v.inner) {
    const std::int64_t p = e / (v.k * v.inner), j = (e / v.inner) % v.k, r = e % v.inner;
    const std::int64_t pos = indexing::TakePosition(static_cast<std::int64_t>(idx[j]), v.n, v.clip);
    atomicAdd(g + (p * v.n + pos) * v.inner + r, og[e]);
  }
}

template <typename T, typename I>
__global__ void GatherKernel(const T* x, const I* idx, T* o, indexing::GatherView v, OpReqType req) {
  TROUPE_GRID_LOOP(e, v.count * v.block) {
    Assign(o + e, req, x[indexing::GatherOffset(v, idx, e / v.block) * v.block + e % v.block]);
  }
}

template <typename T, typename I>
__global__ void GatherGradKernel(const T* og, const I* idx, T* g, indexing::GatherView v) {
  TROUPE_GRID_LOOP(e, v.count * v.block) {
    atomicAdd(g + indexing::GatherOffset(v, idx, e / v.block) * v.block + e % v.block, og[e]);
  }
}

// The index values of a blob on the device, copied to the host (the stream is synchronised), as doubles.
std::vector<double> HostIndices(const TBlob& indices, cudaStream_t s, const char* op) {
  std::vector<double> out(static_cast<std::size_t>(indices.Size()));
  if (out.empty()) return out;
  NumberSwitch(indices.dtype, op, [&](auto tag) {
    using I = decltype(tag);
    std::vector<I> host(out.size());
    Check(cudaMemcpyAsync(host.data(), indices.dptr, indices.Bytes(), cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync",
          op);
    Check(cudaStreamSynchronize(s), "cudaStreamSynchronize", op);
    for (std::size_t i = 0; i < host.size(); ++i) out[i] = static_cast<double>(host[i]);
  });
  return out;
}

template <typename T, typename I>
__global__ void OneHotKernel(const I* idx, T on, T off, T* o, std::int64_t count, std::int64_t depth, OpReqType req) {
  TROUPE_GRID_LOOP(e, count * depth) {
    const std::int64_t j = static_cast<std::int64_t>(idx[e / depth]);
    indexing::OneHotElement(o + e, e % depth == j ? on : off, req);
  }
}

class TakeGpuOp final : public Operator {
 public:
  explicit TakeGpuOp(const indexing::TakeParam& p) : p_(p) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    cudaStream_t s = Prepare(ctx.run_ctx, kTake);
    const TakeView v = View(in[0].shape, in[1], s);
    NumberSwitch(in[0].dtype, kTake, [&](auto tag) {
      using T = decltype(tag);
      NumberSwitch(in[1].dtype, kTake, [&](auto index_tag) {
        using I = decltype(index_tag);
        const std::int64_t n = v.outer * v.k * v.inner;
        if (n == 0) return;
        TakeKernel<T, I><<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(in[0].dptr),
                                                        static_cast<const I*>(in[1].dptr), static_cast<T*>(out[0].dptr),
                                                        v, req[0]);
        CheckLaunch("forward kernel", kTake);
      });
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    cudaStream_t s = Prepare(ctx.run_ctx, kTake);
    nn_cuda::ZeroIfWritten(in_grad[1], req[1], s, kTake);
    if (req[0] == kNullOp) return;
    const TakeView v = View(in_grad[0].shape, in[1], s);
    internal::FloatSwitch(in_grad[0].dtype, kTake, [&](auto tag) {
      using T = decltype(tag);
      if (req[0] != kAddTo && in_grad[0].Bytes() > 0) {
        Check(cudaMemsetAsync(in_grad[0].dptr, 0, in_grad[0].Bytes(), s), "cudaMemsetAsync", kTake);
      }
      NumberSwitch(in[1].dtype, kTake, [&](auto index_tag) {
        using I = decltype(index_tag);
        const std::int64_t n = v.outer * v.k * v.inner;
        if (n == 0) return;
        TakeGradKernel<T, I><<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(out_grad[0].dptr),
                                                            static_cast<const I*>(in[1].dptr),
                                                            static_cast<T*>(in_grad[0].dptr), v);
        CheckLaunch("backward kernel", kTake);
      });
    });
  }

 private:
  // The view of `a` around the axis; in mode 'raise', the indices checked on the host first.
  TakeView View(const TShape& a, const TBlob& indices, cudaStream_t s) const {
    const int axis = internal::NormalizeAxis(p_.axis, a.ndim(), kTake, "axis");
    const TakeView v{a.ProdDims(0, axis), a[axis], a.ProdDims(axis + 1, a.ndim()), indices.Size(), p_.mode == "clip"};
    if (p_.mode == "raise") {
      for (const double i : HostIndices(indices, s, kTake)) indexing::CheckTakeIndex(i, v.n);
    }
    return v;
  }

  indexing::TakeParam p_;
};

class OneHotGpuOp final : public Operator {
 public:
  explicit OneHotGpuOp(const indexing::OneHotParam& p) : p_(p) {}
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const std::int64_t count = in[0].Size();
    DTypeSwitch(out[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      NumberSwitch(in[0].dtype, kOneHot, [&](auto index_tag) {
        using I = decltype(index_tag);
        if (count * p_.depth == 0) return;
        // The values converted once from the double parameters, as on the CPU.
        OneHotKernel<T, I><<<Blocks(count * p_.depth), kThreads, 0, Prepare(ctx.run_ctx, kOneHot)>>>(
            static_cast<const I*>(in[0].dptr), internal::ConvertTo<T>(p_.on_value),
            internal::ConvertTo<T>(p_.off_value), static_cast<T*>(out[0].dptr), count, p_.depth, req[0]);
        CheckLaunch("forward kernel", kOneHot);
      });
    });
  }
  void Backward(const OpContext& ctx, const std::vector<TBlob>&, const std::vector<TBlob>&, const std::vector<TBlob>&,
                const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    nn_cuda::ZeroIfWritten(in_grad[0], req[0], Prepare(ctx.run_ctx, kOneHot), kOneHot);
  }

 private:
  indexing::OneHotParam p_;
};

class GatherNDGpuOp final : public Operator {
 public:
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    cudaStream_t s = Prepare(ctx.run_ctx, kGather);
    const indexing::GatherView v = Checked(in[0].shape, in[1], s);
    NumberSwitch(in[0].dtype, kGather, [&](auto tag) {
      using T = decltype(tag);
      NumberSwitch(in[1].dtype, kGather, [&](auto index_tag) {
        using I = decltype(index_tag);
        if (v.count * v.block == 0) return;
        GatherKernel<T, I><<<Blocks(v.count * v.block), kThreads, 0, s>>>(static_cast<const T*>(in[0].dptr),
                                                                          static_cast<const I*>(in[1].dptr),
                                                                          static_cast<T*>(out[0].dptr), v, req[0]);
        CheckLaunch("forward kernel", kGather);
      });
    });
  }
  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    cudaStream_t s = Prepare(ctx.run_ctx, kGather);
    nn_cuda::ZeroIfWritten(in_grad[1], req[1], s, kGather);
    if (req[0] == kNullOp) return;
    const indexing::GatherView v = Checked(in_grad[0].shape, in[1], s);
    internal::FloatSwitch(in_grad[0].dtype, kGather, [&](auto tag) {
      using T = decltype(tag);
      if (req[0] != kAddTo && in_grad[0].Bytes() > 0) {
        Check(cudaMemsetAsync(in_grad[0].dptr, 0, in_grad[0].Bytes(), s), "cudaMemsetAsync", kGather);
      }
      NumberSwitch(in[1].dtype, kGather, [&](auto index_tag) {
        using I = decltype(index_tag);
        if (v.count * v.block == 0) return;
        GatherGradKernel<T, I><<<Blocks(v.count * v.block), kThreads, 0, s>>>(static_cast<const T*>(out_grad[0].dptr),
                                                                              static_cast<const I*>(in[1].dptr),
                                                                              static_cast<T*>(in_grad[0].dptr), v);
        CheckLaunch("backward kernel", kGather);
      });
    });
  }

 private:
  // The view, with the indices checked on the host as the CPU checks them.
  static indexing::GatherView Checked(const TShape& data, const TBlob& indices, cudaStream_t s) {
    const indexing::GatherView v = indexing::ViewGather(data, indices.shape);
    const std::vector<double> values = HostIndices(indices, s, kGather);
    std::vector<std::int64_t> idx(values.size());
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<std::int64_t>(values[i]);  // truncated
    indexing::CheckGatherIndices(data, idx.data(), v);
    return v;
  }
};

[[maybe_unused]] const bool kGpuRegistered = [] {
  RegisterGpuOperator(kTake, [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
    indexing::TakeParam param;
    param.Init(p.GetParams(), kTake);
    return std::make_unique<TakeGpuOp>(param);
  });
  RegisterGpuOperator(kGather, [](const OperatorProperty&, Context) -> std::unique_ptr<Operator> {
    return std::make_unique<GatherNDGpuOp>();
  });
  RegisterGpuOperator(kOneHot, [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
    indexing::OneHotParam param;
    param.Init(p.GetParams(), kOneHot);
    return std::make_unique<OneHotGpuOp>(param);
  });
  return true;
}();

}  // namespace

}  // namespace troupe
