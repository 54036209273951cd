// CUDA versions of the tensor operators (op/nn/tensor_ops.h): Flatten/Reshape (device copies), Concat,
// sum/mean, Embedding, and the GPU functions of the elementwise SimpleOps (elemwise_*, *_scalar,
// broadcast_*, smooth_l1), attached to the entries the CPU side registered (op/nn/elemwise.cc).
//
// Straightforward kernels with grid-stride loops: element arithmetic is the same host/device code the CPU
// uses, reductions give one thread per output element and accumulate in double (as the CPU does), and
// Embedding's weight gradient is a scatter with atomicAdd. Everything is enqueued on the stream the engine
// hands over; launch errors throw troupe::Error naming the operator.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/detail/cuda_common.h"
#include "op/nn/tensor_ops.h"
#include "op/simple_op.h"

namespace troupe {

namespace {

using internal::BinaryOp;
using internal::FloatSwitch;
using tensor_ops::BroadcastIndexer;
using tensor_ops::ScalarOp;

using internal::Blocks;
using internal::Check;
using internal::CheckLaunch;
using internal::kThreads;
using internal::StreamOf;

// Makes the stream's device current (the worker normally did already) and returns the stream.
cudaStream_t Prepare(const RunContext& rctx, std::string_view op) {
  internal::SetDevice(rctx.ctx.dev_id, op);
  return StreamOf(rctx);
}

// ---- kernels ----

template <typename T>
__global__ void AddToKernel(const T* src, T* dst, std::int64_t n) {
  TROUPE_GRID_LOOP(i, n) { dst[i] += src[i]; }
}

// dst (op)= src for equal-sized blobs; nothing when in place.
void CopyWithReqGpu(const TBlob& src, const TBlob& dst, OpReqType req, const RunContext& rctx, const char* op) {
  if (req == kNullOp) return;
  if (src.Size() != dst.Size()) {
    throw Error(std::string(op) + ": source " + src.shape.ToString() + " and destination " + dst.shape.ToString() +
                " differ in size");
  }
  cudaStream_t s = Prepare(rctx, op);
  if (req == kAddTo) {
    FloatSwitch(dst.dtype, op, [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t n = dst.Size();
      AddToKernel<T><<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(src.dptr), static_cast<T*>(dst.dptr), n);
    });
    CheckLaunch("AddToKernel", op);
    return;
  }
  if (src.dptr == dst.dptr || dst.Bytes() == 0) return;
  Check(cudaMemcpyAsync(dst.dptr, src.dptr, dst.Bytes(), cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync", op);
}

template <typename T>
__global__ void ConcatForwardKernel(const T* src, T* dst, ConcatSlab sl, OpReqType req) {
  const std::int64_t n = sl.outer * sl.width;
  TROUPE_GRID_LOOP(i, n) {
    const std::int64_t r = i / sl.width, j = i % sl.width;
    Assign(dst + r * sl.out_row + sl.offset + j, req, src[i]);
  }
}

template <typename T>
__global__ void ConcatBackwardKernel(const T* og, T* dst, ConcatSlab sl, OpReqType req) {
  const std::int64_t n = sl.outer * sl.width;
  TROUPE_GRID_LOOP(i, n) {
    const std::int64_t r = i / sl.width, j = i % sl.width;
    Assign(dst + i, req, og[r * sl.out_row + sl.offset + j]);
  }
}

template <typename T>
__global__ void ReduceKernel(const T* x, T* o, BroadcastIndexer ix, bool mean, OpReqType req) {
  TROUPE_GRID_LOOP(i, ix.small_size) {
    double acc = 0;
    for (std::int64_t r = 0; r < ix.reduce_size; ++r) acc += static_cast<double>(x[ix.BigOffset(i, r)]);
    if (mean) acc /= static_cast<double>(ix.reduce_size);
    Assign(o + i, req, static_cast<T>(acc));
  }
}

template <typename T>
__global__ void BroadcastBackKernel(const T* g, T* o, BroadcastIndexer ix, T scale, OpReqType req) {
  TROUPE_GRID_LOOP(i, ix.big_size) { Assign(o + i, req, g[ix.SmallOffset(i)] * scale); }
}

template <typename W, typename I>
__global__ void EmbeddingForwardKernel(const I* idx, const W* w, W* o, std::int64_t n, std::int64_t dim,
                                       std::int64_t rows, OpReqType req) {
  TROUPE_GRID_LOOP(i, n * dim) {
    const std::int64_t k = i / dim, j = i % dim;
    Assign(o + i, req, w[tensor_ops::ClipIndex(idx[k], rows) * dim + j]);
  }
}

template <typename W, typename I>
__global__ void EmbeddingBackwardKernel(const I* idx, const W* g, W* wg, std::int64_t n, std::int64_t dim,
                                        std::int64_t rows) {
  TROUPE_GRID_LOOP(i, n * dim) {
    const std::int64_t k = i / dim, j = i % dim;
    atomicAdd(wg + tensor_ops::ClipIndex(idx[k], rows) * dim + j, g[i]);
  }
}

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

// One thread per element of the operand (lhs when `lhs_side`): the output-shaped gradient term summed over
// the broadcast dimensions. `self` maps output elements onto this operand, `other` onto the other one.
template <typename T>
__global__ void BroadcastGradKernel(BinaryOp op, bool lhs_side, const T* og, const T* a, const T* b, T* grad,
                                    BroadcastIndexer self, BroadcastIndexer other, OpReqType req) {
  TROUPE_GRID_LOOP(o, self.small_size) {
    double acc = 0;
    for (std::int64_t r = 0; r < self.reduce_size; ++r) {
      const std::int64_t big = self.BigOffset(o, r);
      if (lhs_side) {
        const T x = a != nullptr ? a[o] : T(0), y = b != nullptr ? b[other.SmallOffset(big)] : T(0);
        acc += static_cast<double>(tensor_ops::BinaryGradLhs(op, og[big], x, y));
      } else {
        const T x = a != nullptr ? a[other.SmallOffset(big)] : T(0), y = b != nullptr ? b[o] : T(0);
        acc += static_cast<double>(tensor_ops::BinaryGradRhs(op, og[big], x, y));
      }
    }
    Assign(grad + o, req, static_cast<T>(acc));
  }
}

template <typename T>
__global__ void SmoothL1Kernel(const T* x, T sigma, T* o, std::int64_t n, OpReqType req) {
  TROUPE_GRID_LOOP(i, n) { Assign(o + i, req, tensor_ops::SmoothL1(x[i], sigma)); }
}

template <typename T>
__global__ void SmoothL1GradKernel(const T* og, const T* x, T sigma, T* o, std::int64_t n, OpReqType req) {
  TROUPE_GRID_LOOP(i, n) { Assign(o + i, req, og[i] * tensor_ops::SmoothL1Grad(x[i], sigma)); }
}

// ---- operators ----

class CopyGpuOp : public Operator {
 public:
  explicit CopyGpuOp(const char* name) : name_(name) {}
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    CopyWithReqGpu(in_data[0], out_data[0], req[0], ctx.run_ctx, name_);
  }
  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    CopyWithReqGpu(out_grad[0], in_grad[0], req[0], ctx.run_ctx, name_);
  }

 private:
  const char* name_;
};

class ConcatGpuOp : public Operator {
 public:
  explicit ConcatGpuOp(const ConcatParam& p) : param_(p) {}
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const TBlob& out = out_data[0];
    std::vector<TShape> shapes;
    for (const auto& b : in_data) shapes.push_back(b.shape);
    const auto slabs = ConcatSlabs(shapes, out.shape, Axis(out.shape.ndim()));
    cudaStream_t s = Prepare(ctx.run_ctx, "Concat");
    FloatSwitch(out.dtype, "Concat", [&](auto tag) {
      using T = decltype(tag);
      for (std::size_t i = 0; i < slabs.size(); ++i) {
        const std::int64_t n = slabs[i].outer * slabs[i].width;
        if (n == 0) continue;
        ConcatForwardKernel<T><<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(in_data[i].dptr),
                                                              static_cast<T*>(out.dptr), slabs[i], req[0]);
      }
    });
    CheckLaunch("forward kernel", "Concat");
  }
  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    const TBlob& og = out_grad[0];
    std::vector<TShape> shapes;
    for (const auto& b : in_grad) shapes.push_back(b.shape);
    const auto slabs = ConcatSlabs(shapes, og.shape, Axis(og.shape.ndim()));
    cudaStream_t s = Prepare(ctx.run_ctx, "Concat");
    FloatSwitch(og.dtype, "Concat", [&](auto tag) {
      using T = decltype(tag);
      for (std::size_t i = 0; i < slabs.size(); ++i) {
        const std::int64_t n = slabs[i].outer * slabs[i].width;
        if (req[i] == kNullOp || n == 0) continue;
        ConcatBackwardKernel<T><<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(og.dptr),
                                                               static_cast<T*>(in_grad[i].dptr), slabs[i], req[i]);
      }
    });
    CheckLaunch("backward kernel", "Concat");
  }

 private:
  int Axis(int ndim) const { return param_.dim < 0 ? param_.dim + ndim : param_.dim; }
  ConcatParam param_;
};

class ReduceAxesGpuOp : public Operator {
 public:
  ReduceAxesGpuOp(const ReduceAxesParam& p, bool mean) : param_(p), mean_(mean), name_(mean ? "mean" : "sum") {}
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const TBlob& in = in_data[0];
    const TBlob& out = out_data[0];
    const auto ix = tensor_ops::MakeBroadcastIndexer(in.shape, ReduceKeepdimsShape(param_, in.shape, name_));
    if (ix.small_size == 0) return;
    cudaStream_t s = Prepare(ctx.run_ctx, name_);
    FloatSwitch(in.dtype, name_, [&](auto tag) {
      using T = decltype(tag);
      ReduceKernel<T><<<Blocks(ix.small_size), kThreads, 0, s>>>(static_cast<const T*>(in.dptr),
                                                                 static_cast<T*>(out.dptr), ix, mean_, req[0]);
    });
    CheckLaunch("reduce kernel", name_);
  }
  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const TBlob& og = out_grad[0];
    const TBlob& ig = in_grad[0];
    const auto ix = tensor_ops::MakeBroadcastIndexer(ig.shape, ReduceKeepdimsShape(param_, ig.shape, name_));
    if (ix.big_size == 0) return;
    cudaStream_t s = Prepare(ctx.run_ctx, name_);
    FloatSwitch(ig.dtype, name_, [&](auto tag) {
      using T = decltype(tag);
      const T scale = mean_ ? static_cast<T>(1.0 / static_cast<double>(ix.reduce_size)) : T(1);
      BroadcastBackKernel<T><<<Blocks(ix.big_size), kThreads, 0, s>>>(static_cast<const T*>(og.dptr),
                                                                      static_cast<T*>(ig.dptr), ix, scale, req[0]);
    });
    CheckLaunch("backward kernel", name_);
  }

 private:
  ReduceAxesParam param_;
  bool mean_;
  std::string name_;
};

// Index types a data blob may have on the device (bool and the 16-bit floats are left out: MXNet's GPU
// Embedding takes float32/float64/integer indices).
template <typename Fn>
void IndexSwitch(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32: return fn(float{});
    case DType::kFloat64: return fn(double{});
    case DType::kInt32: return fn(std::int32_t{});
    case DType::kInt64: return fn(std::int64_t{});
    case DType::kUint8: return fn(std::uint8_t{});
    case DType::kInt8: return fn(std::int8_t{});
    default:
      throw Error(std::string("Embedding: argument 'data' has type ") + DTypeName(dtype) +
                  " on the GPU (use float32, float64 or an integer type)");
  }
}

class EmbeddingGpuOp : public Operator {
 public:
  explicit EmbeddingGpuOp(const EmbeddingParam& p) : param_(p) {}
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const TBlob& data = in_data[0];
    const TBlob& weight = in_data[1];
    const TBlob& out = out_data[0];
    const std::int64_t n = data.Size(), dim = param_.output_dim, rows = param_.input_dim;
    if (n * dim == 0) return;
    cudaStream_t s = Prepare(ctx.run_ctx, "Embedding");
    FloatSwitch(weight.dtype, "Embedding", [&](auto wtag) {
      using W = decltype(wtag);
      IndexSwitch(data.dtype, [&](auto itag) {
        using I = decltype(itag);
        EmbeddingForwardKernel<W, I><<<Blocks(n * dim), kThreads, 0, s>>>(
            static_cast<const I*>(data.dptr), static_cast<const W*>(weight.dptr), static_cast<W*>(out.dptr), n, dim,
            rows, req[0]);
      });
    });
    CheckLaunch("forward kernel", "Embedding");
  }
  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    cudaStream_t s = Prepare(ctx.run_ctx, "Embedding");
    if ((req[0] == kWriteTo || req[0] == kWriteInplace) && in_grad[0].Bytes() > 0) {
      Check(cudaMemsetAsync(in_grad[0].dptr, 0, in_grad[0].Bytes(), s), "cudaMemsetAsync (data grad)", "Embedding");
    }
    if (req[1] == kNullOp) return;
    const TBlob& data = in_data[0];
    const TBlob& og = out_grad[0];
    const TBlob& wg = in_grad[1];
    const std::int64_t n = data.Size(), dim = param_.output_dim, rows = param_.input_dim;
    if (req[1] != kAddTo)
      Check(cudaMemsetAsync(wg.dptr, 0, wg.Bytes(), s), "cudaMemsetAsync (weight grad)", "Embedding");
    if (n * dim == 0) return;
    FloatSwitch(wg.dtype, "Embedding", [&](auto wtag) {
      using W = decltype(wtag);
      IndexSwitch(data.dtype, [&](auto itag) {
        using I = decltype(itag);
        EmbeddingBackwardKernel<W, I><<<Blocks(n * dim), kThreads, 0, s>>>(
            static_cast<const I*>(data.dptr), static_cast<const W*>(og.dptr), static_cast<W*>(wg.dptr), n, dim, rows);
      });
    });
    CheckLaunch("backward kernel", "Embedding");
  }

 private:
  EmbeddingParam param_;
};

// ---- SimpleOp functions ----

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
      BroadcastGradKernel<T><<<Blocks(li.small_size), kThreads, 0, s>>>(op, true, g, a, b,
                                                                        static_cast<T*>(lhs_grad->dptr), li, ri, req_l);
    }
    if (req_r != kNullOp && ri.small_size > 0) {
      BroadcastGradKernel<T><<<Blocks(ri.small_size), kThreads, 0, s>>>(op, false, g, a, b,
                                                                        static_cast<T*>(rhs_grad->dptr), ri, li, req_r);
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

// ---- registration ----

[[maybe_unused]] const bool kTensorOpsGpuRegistered = [] {
  RegisterGpuOperator("Flatten", [](const OperatorProperty&, Context) -> std::unique_ptr<Operator> {
    return std::make_unique<CopyGpuOp>("Flatten");
  });
  RegisterGpuOperator("Reshape", [](const OperatorProperty&, Context) -> std::unique_ptr<Operator> {
    return std::make_unique<CopyGpuOp>("Reshape");
  });
  RegisterGpuOperator("Concat", [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
    return std::make_unique<ConcatGpuOp>(static_cast<const ConcatProp&>(p).param());
  });
  for (const char* name : {"sum", "mean"}) {
    RegisterGpuOperator(name, [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
      const auto& r = static_cast<const ReduceAxesProp&>(p);
      return std::make_unique<ReduceAxesGpuOp>(r.param(), r.mean());
    });
  }
  RegisterGpuOperator("Embedding", [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
    return std::make_unique<EmbeddingGpuOp>(static_cast<const EmbeddingProp&>(p).param());
  });

  // The SimpleOps: same entries (and in-place options) as the CPU registration in op/nn/elemwise.cc.
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
      {"_mul_scalar", ScalarOp::kMul},   {"_div_scalar", ScalarOp::kDiv},     {"_rdiv_scalar", ScalarOp::kRDiv}};
  for (const auto& [name_c, op] : scalar) {
    const std::string name = name_c;
    SimpleOpEntry& e = SimpleOpRegister(name);
    e.set_function(DeviceType::kGPU, ScalarForwardGpu(op, name), kInplaceInOut);
    if (op == ScalarOp::kRDiv) {
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

// The seed's example: the GPU half of smooth_l1, attached to the entry registered in op/nn/elemwise.cc.
TROUPE_REGISTER_SIMPLE_OP(smooth_l1)
    .set_function(DeviceType::kGPU, SmoothL1ForwardGpu, kInplaceInOut)
    .set_gradient(DeviceType::kGPU, UnaryGradT2(SmoothL1BackwardUseInGpu), kInplaceOutIn);

}  // namespace troupe
