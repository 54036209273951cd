// GPU implementations of the dense-layer operators (op/nn/dense.h):
//   FullyConnected  cuBLAS products (internal::GpuGemm) and two small kernels (bias add, bias-gradient
//                   column sums);
//   Convolution     cuDNN forward / backward-data / backward-filter / backward-bias, algorithms chosen by
//                   cuDNN's heuristics (the _v7 queries) within the workspace cap, workspace from the
//                   kTempSpace resource, groups through the convolution descriptor;
//   Pooling         cuDNN for 'valid' max/avg pooling, plain CUDA kernels for 'full', sum, cudnn_off and
//                   windows cuDNN rejects; both compute exactly the CPU operator's windows and divisors.
//
// Float32 products use FMA (no TF32 tensor-core math): the GPU must agree with the CPU operator to ~1e-5.
// Operator objects cache their cuDNN descriptors and algorithm choices for the last shape they saw; the
// engine never enters one object from two threads at once. cuDNN handles are per worker thread and device
// (tensor/detail/cuda_common.h).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <memory>
#include <string>
#include <vector>

#include "op/internal/cudnn_common.h"
#include "tensor/detail/kernels.h"
#include "op/nn/dense.h"
#include "tensor/resource.h"

namespace troupe {
namespace {

using internal::Blocks;
using internal::Check;
using internal::CheckDnn;
using internal::CheckLaunch;
using internal::DnnHandle;
using internal::DnnType;
using internal::kThreads;
using internal::SetDevice;
using internal::StreamOf;
using internal::TensorDesc;

// cuDNN scaling factors: float for float data, double for double data.
struct Scale {
  float f;
  double d;
  explicit Scale(double v) : f(static_cast<float>(v)), d(v) {}
  const void* For(DType t) const { return t == DType::kFloat64 ? static_cast<const void*>(&d) : &f; }
};

// RAII owners of cuDNN descriptors.
struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  explicit FilterDesc(const char* op) { CheckDnn(cudnnCreateFilterDescriptor(&d), "cudnnCreateFilterDescriptor", op); }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  explicit ConvDesc(const char* op) {
    CheckDnn(cudnnCreateConvolutionDescriptor(&d), "cudnnCreateConvolutionDescriptor", op);
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

struct PoolDesc {
  cudnnPoolingDescriptor_t d = nullptr;
  explicit PoolDesc(const char* op) { CheckDnn(cudnnCreatePoolingDescriptor(&d), "cudnnCreatePoolingDescriptor", op); }
  ~PoolDesc() { cudnnDestroyPoolingDescriptor(d); }
  PoolDesc(const PoolDesc&) = delete;
  PoolDesc& operator=(const PoolDesc&) = delete;
};

// ---- FullyConnected --------------------------------------------------------------------------------------

template <typename T>
__global__ void AddBiasRowsKernel(T* out, const T* bias, std::int64_t rows, std::int64_t cols) {
  const std::int64_t n = rows * cols;
  TROUPE_GRID_LOOP(i, n) { out[i] += bias[i % cols]; }
}

// db[j] (=|+=) sum_r g[r, j]. A block covers 32 columns; its 8 thread rows stride over the matrix rows
// (coalesced reads along a row) and are summed in shared memory.
template <typename T>
__global__ void ColumnSumKernel(const T* g, T* db, std::int64_t rows, std::int64_t cols, bool add) {
  __shared__ T part[8][33];
  const std::int64_t j = blockIdx.x * 32 + threadIdx.x;
  T s = T(0);
  if (j < cols) {
    for (std::int64_t r = threadIdx.y; r < rows; r += 8) s += g[r * cols + j];
  }
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < cols) {
    T t = T(0);
    for (int y = 0; y < 8; ++y) t += part[y][threadIdx.x];
    db[j] = add ? db[j] + t : t;
  }
}

class FullyConnectedGpuOp : public Operator {
 public:
  explicit FullyConnectedGpuOp(const FullyConnectedParam& p) : param_(p) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    SetDevice(ctx.run_ctx.ctx.dev_id, kName);
    const FcDims d = FullyConnectedDims(in_data[0].shape, param_.flatten);
    const int m = static_cast<int>(d.rows), k = static_cast<int>(d.cols), n = param_.num_hidden;
    internal::FloatSwitch(in_data[0].dtype, kName, [&](auto tag) {
      using T = decltype(tag);
      internal::GpuGemm(in_data[0], in_data[1], out_data[0], false, true, m, n, k, 1.0, req[0] == kAddTo ? 1.0 : 0.0,
                        ctx.run_ctx.stream);
      if (!param_.no_bias && m > 0) {
        AddBiasRowsKernel<T><<<Blocks(static_cast<std::int64_t>(m) * n), kThreads, 0, StreamOf(ctx)>>>(
            static_cast<T*>(out_data[0].dptr), static_cast<const T*>(in_data[2].dptr), m, n);
        CheckLaunch("bias kernel launch", kName);
      }
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    SetDevice(ctx.run_ctx.ctx.dev_id, kName);
    const FcDims d = FullyConnectedDims(in_data[0].shape, param_.flatten);
    const int m = static_cast<int>(d.rows), k = static_cast<int>(d.cols), n = param_.num_hidden;
    internal::FloatSwitch(out_grad[0].dtype, kName, [&](auto tag) {
      using T = decltype(tag);
      void* stream = ctx.run_ctx.stream;
      if (req[0] != kNullOp) {
        internal::GpuGemm(out_grad[0], in_data[1], in_grad[0], false, false, m, k, n, 1.0, req[0] == kAddTo ? 1.0 : 0.0,
                          stream);
      }
      if (req[1] != kNullOp) {
        if (m == 0) {
          if (req[1] != kAddTo) internal::GpuFill(in_grad[1], 0.0, stream);
        } else {
          internal::GpuGemm(out_grad[0], in_data[0], in_grad[1], true, false, n, k, m, 1.0,
                            req[1] == kAddTo ? 1.0 : 0.0, stream);
        }
      }
      if (!param_.no_bias && req[2] != kNullOp) {
        const dim3 block(32, 8);
        const unsigned grid = static_cast<unsigned>((n + 31) / 32);
        ColumnSumKernel<T><<<grid, block, 0, StreamOf(ctx)>>>(static_cast<const T*>(out_grad[0].dptr),
                                                              static_cast<T*>(in_grad[2].dptr), m, n, req[2] == kAddTo);
        CheckLaunch("bias-gradient kernel launch", kName);
      }
    });
  }

 private:
  static constexpr const char* kName = "FullyConnected";
  FullyConnectedParam param_;
};

// ---- Convolution -----------------------------------------------------------------------------------------

// Picks the first algorithm (cuDNN's heuristic order) that succeeded, fits in the workspace cap and does
// not use tensor-op math (which would round float32 inputs to TF32).
template <typename Perf>
Perf PickAlgo(const Perf* perf, int count, std::size_t cap, const char* op, const char* what) {
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < count; ++i) {
      if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > cap) continue;
      const bool tensor_op = perf[i].mathType == CUDNN_TENSOR_OP_MATH ||
                             perf[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
      if (pass == 0 && tensor_op) continue;
      return perf[i];
    }
  }
  throw Error(std::string(op) + ": cuDNN found no " + what + " algorithm within the workspace limit of " +
              std::to_string(cap >> 20) + " MB; raise 'workspace'");
}

class ConvolutionGpuOp : public Operator {
 public:
  explicit ConvolutionGpuOp(const ConvolutionParam& p)
      : param_(p), geo_(MakeConvGeometry(p)), w_(kName), conv_(kName) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    SetDevice(ctx.run_ctx.ctx.dev_id, kName);
    Prepare(ctx, in_data[0].shape, out_data[0].shape, in_data[0].dtype);
    if (in_data[0].shape[0] == 0) return;
    cudnnHandle_t h = DnnHandle(ctx, kName);
    const DType t = in_data[0].dtype;
    const Scale one(1.0), beta(req[0] == kAddTo ? 1.0 : 0.0);
    void* ws = Workspace(ctx, fwd_.memory);
    CheckDnn(cudnnConvolutionForward(h, one.For(t), x_.get(), in_data[0].dptr, w_.d, in_data[1].dptr, conv_.d,
                                     fwd_.algo, ws, fwd_.memory, beta.For(t), y_.get(), out_data[0].dptr),
             "cudnnConvolutionForward", kName);
    if (!param_.no_bias) {
      CheckDnn(cudnnAddTensor(h, one.For(t), b_.get(), in_data[2].dptr, one.For(t), y_.get(), out_data[0].dptr),
               "cudnnAddTensor (bias)", kName);
    }
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    SetDevice(ctx.run_ctx.ctx.dev_id, kName);
    Prepare(ctx, in_data[0].shape, out_grad[0].shape, out_grad[0].dtype);
    const DType t = out_grad[0].dtype;
    const bool bias = !param_.no_bias && req[2] != kNullOp;
    if (in_data[0].shape[0] == 0) {
      // An empty batch contributes nothing: written parameter gradients are zero.
      if (req[1] == kWriteTo || req[1] == kWriteInplace) internal::GpuFill(in_grad[1], 0.0, ctx.run_ctx.stream);
      if (bias && req[2] != kAddTo) internal::GpuFill(in_grad[2], 0.0, ctx.run_ctx.stream);
      return;
    }
    cudnnHandle_t h = DnnHandle(ctx, kName);
    const Scale one(1.0);
    auto beta = [](OpReqType r) { return Scale(r == kAddTo ? 1.0 : 0.0); };
    if (bias) {
      const Scale b = beta(req[2]);
      CheckDnn(
          cudnnConvolutionBackwardBias(h, one.For(t), y_.get(), out_grad[0].dptr, b.For(t), b_.get(), in_grad[2].dptr),
          "cudnnConvolutionBackwardBias", kName);
    }
    if (req[1] != kNullOp) {
      const Scale b = beta(req[1]);
      void* ws = Workspace(ctx, bwd_filter_.memory);
      CheckDnn(
          cudnnConvolutionBackwardFilter(h, one.For(t), x_.get(), in_data[0].dptr, y_.get(), out_grad[0].dptr, conv_.d,
                                         bwd_filter_.algo, ws, bwd_filter_.memory, b.For(t), w_.d, in_grad[1].dptr),
          "cudnnConvolutionBackwardFilter", kName);
    }
    if (req[0] != kNullOp) {
      const Scale b = beta(req[0]);
      void* ws = Workspace(ctx, bwd_data_.memory);
      CheckDnn(cudnnConvolutionBackwardData(h, one.For(t), w_.d, in_data[1].dptr, y_.get(), out_grad[0].dptr, conv_.d,
                                            bwd_data_.algo, ws, bwd_data_.memory, b.For(t), x_.get(), in_grad[0].dptr),
               "cudnnConvolutionBackwardData", kName);
    }
  }

 private:
  static constexpr const char* kName = "Convolution";

  void* Workspace(const OpContext& ctx, std::size_t bytes) {
    if (bytes == 0) return nullptr;
    return ctx.requested.at(0).get_space(bytes);
  }

  // (Re)builds the descriptors and picks algorithms when the shape or type changed since the last call.
  void Prepare(const OpContext& ctx, const TShape& x, const TShape& y, DType dtype) {
    if (ready_ && x == x_shape_ && dtype == dtype_) return;
    const cudnnDataType_t t = internal::FloatSwitch(dtype, kName, [](auto tag) { return DnnType<decltype(tag)>(); });
    const std::int64_t n = x[0], c = x[1], f = y[1], g = param_.num_group;
    if (n == 0) return;  // nothing to describe; the callers return early
    x_.Set(t, n, c, x[2], x[3], kName);
    y_.Set(t, n, f, y[2], y[3], kName);
    b_.Set(t, 1, f, 1, 1, kName);
    CheckDnn(cudnnSetFilter4dDescriptor(w_.d, t, CUDNN_TENSOR_NCHW, static_cast<int>(f), static_cast<int>(c / g),
                                        static_cast<int>(geo_.kh), static_cast<int>(geo_.kw)),
             "cudnnSetFilter4dDescriptor", kName);
    CheckDnn(
        cudnnSetConvolution2dDescriptor(conv_.d, static_cast<int>(geo_.ph), static_cast<int>(geo_.pw),
                                        static_cast<int>(geo_.sh), static_cast<int>(geo_.sw), static_cast<int>(geo_.dh),
                                        static_cast<int>(geo_.dw), CUDNN_CROSS_CORRELATION, t),
        "cudnnSetConvolution2dDescriptor", kName);
    CheckDnn(cudnnSetConvolutionGroupCount(conv_.d, static_cast<int>(g)), "cudnnSetConvolutionGroupCount", kName);
    if (cudnnSetConvolutionMathType(conv_.d, CUDNN_FMA_MATH) != CUDNN_STATUS_SUCCESS) {
      CheckDnn(cudnnSetConvolutionMathType(conv_.d, CUDNN_DEFAULT_MATH), "cudnnSetConvolutionMathType", kName);
    }
    cudnnHandle_t h = DnnHandle(ctx, kName);
    const std::size_t cap = static_cast<std::size_t>(param_.workspace) << 20;
    constexpr int kMaxAlgos = 16;
    int count = 0;
    cudnnConvolutionFwdAlgoPerf_t fwd[kMaxAlgos];
    CheckDnn(cudnnGetConvolutionForwardAlgorithm_v7(h, x_.get(), w_.d, conv_.d, y_.get(), kMaxAlgos, &count, fwd),
             "cudnnGetConvolutionForwardAlgorithm_v7", kName);
    fwd_ = PickAlgo(fwd, count, cap, kName, "forward");
    cudnnConvolutionBwdDataAlgoPerf_t bd[kMaxAlgos];
    CheckDnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, w_.d, y_.get(), conv_.d, x_.get(), kMaxAlgos, &count, bd),
             "cudnnGetConvolutionBackwardDataAlgorithm_v7", kName);
    bwd_data_ = PickAlgo(bd, count, cap, kName, "backward-data");
    cudnnConvolutionBwdFilterAlgoPerf_t bf[kMaxAlgos];
    CheckDnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, x_.get(), y_.get(), conv_.d, w_.d, kMaxAlgos, &count, bf),
             "cudnnGetConvolutionBackwardFilterAlgorithm_v7", kName);
    bwd_filter_ = PickAlgo(bf, count, cap, kName, "backward-filter");
    x_shape_ = x;
    dtype_ = dtype;
    ready_ = true;
  }

  ConvolutionParam param_;
  ConvGeometry geo_;
  TensorDesc x_, y_, b_;
  FilterDesc w_;
  ConvDesc conv_;
  bool ready_ = false;
  TShape x_shape_;
  DType dtype_ = DType::kFloat32;
  cudnnConvolutionFwdAlgoPerf_t fwd_{};
  cudnnConvolutionBwdDataAlgoPerf_t bwd_data_{};
  cudnnConvolutionBwdFilterAlgoPerf_t bwd_filter_{};
};

// ---- Pooling ---------------------------------------------------------------------------------------------

struct DevWindow {
  std::int64_t h0, h1, w0, w1, area;
};

// The same window and divisor as the CPU operator (op/nn/pooling.cc).
__device__ inline DevWindow PoolWindow(const PoolGeometry& g, std::int64_t oh, std::int64_t ow) {
  DevWindow w;
  w.h0 = oh * g.sh - g.ph;
  w.w0 = ow * g.sw - g.pw;
  w.h1 = min(w.h0 + g.kh, g.height + g.ph);
  w.w1 = min(w.w0 + g.kw, g.width + g.pw);
  const std::int64_t padded_area = (w.h1 - w.h0) * (w.w1 - w.w0);
  w.h0 = max(w.h0, std::int64_t{0});
  w.w0 = max(w.w0, std::int64_t{0});
  w.h1 = min(w.h1, g.height);
  w.w1 = min(w.w1, g.width);
  w.area = g.count_include_pad ? padded_area : (w.h1 - w.h0) * (w.w1 - w.w0);
  return w;
}

template <typename T>
__device__ inline T Lowest();
template <>
__device__ inline float Lowest<float>() {
  return -3.402823466e+38f;
}
template <>
__device__ inline double Lowest<double>() {
  return -1.7976931348623157e+308;
}

template <typename T>
__global__ void PoolForwardKernel(const T* x, T* y, PoolGeometry g, std::int64_t total, OpReqType req) {
  TROUPE_GRID_LOOP(i, total) {
    const std::int64_t ow = i % g.out_w, oh = (i / g.out_w) % g.out_h, plane = i / (g.out_w * g.out_h);
    const T* in = x + plane * g.height * g.width;
    const DevWindow w = PoolWindow(g, oh, ow);
    T v;
    if (g.max) {
      v = Lowest<T>();
      for (std::int64_t h = w.h0; h < w.h1; ++h) {
        for (std::int64_t c = w.w0; c < w.w1; ++c) v = max(v, in[h * g.width + c]);
      }
    } else {
      v = T(0);
      for (std::int64_t h = w.h0; h < w.h1; ++h) {
        for (std::int64_t c = w.w0; c < w.w1; ++c) v += in[h * g.width + c];
      }
      if (g.avg) v = w.area > 0 ? v / static_cast<T>(w.area) : T(0);
    }
    y[i] = req == kAddTo ? y[i] + v : v;
  }
}

// One thread per output scatters its gradient (atomically: windows overlap) to its argmax or its window.
template <typename T>
__global__ void PoolBackwardKernel(const T* x, const T* dy, T* dx, PoolGeometry g, std::int64_t total) {
  TROUPE_GRID_LOOP(i, total) {
    const std::int64_t ow = i % g.out_w, oh = (i / g.out_w) % g.out_h, plane = i / (g.out_w * g.out_h);
    T* dplane = dx + plane * g.height * g.width;
    const DevWindow w = PoolWindow(g, oh, ow);
    const T gv = dy[i];
    if (g.max) {
      const T* in = x + plane * g.height * g.width;
      std::int64_t best = -1;
      T bv = Lowest<T>();
      for (std::int64_t h = w.h0; h < w.h1; ++h) {
        for (std::int64_t c = w.w0; c < w.w1; ++c) {
          const T v = in[h * g.width + c];
          if (best < 0 || v > bv) bv = v, best = h * g.width + c;
        }
      }
      if (best >= 0) atomicAdd(dplane + best, gv);
    } else {
      const T share = g.avg ? (w.area > 0 ? gv / static_cast<T>(w.area) : T(0)) : gv;
      for (std::int64_t h = w.h0; h < w.h1; ++h) {
        for (std::int64_t c = w.w0; c < w.w1; ++c) atomicAdd(dplane + h * g.width + c, share);
      }
    }
  }
}

class PoolingGpuOp : public Operator {
 public:
  explicit PoolingGpuOp(const PoolingParam& p) : param_(p), pool_(kName) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    SetDevice(ctx.run_ctx.ctx.dev_id, kName);
    const PoolGeometry g = MakePoolGeometry(param_, in_data[0].shape);
    const std::int64_t total = out_data[0].Size();
    if (total == 0) return;
    const DType t = in_data[0].dtype;
    if (UseDnn(g)) {
      Prepare(in_data[0].shape, g, t);
      const Scale one(1.0), beta(req[0] == kAddTo ? 1.0 : 0.0);
      CheckDnn(cudnnPoolingForward(DnnHandle(ctx, kName), pool_.d, one.For(t), x_.get(), in_data[0].dptr, beta.For(t),
                                   y_.get(), out_data[0].dptr),
               "cudnnPoolingForward", kName);
      return;
    }
    internal::FloatSwitch(t, kName, [&](auto tag) {
      using T = decltype(tag);
      PoolForwardKernel<T><<<Blocks(total), kThreads, 0, StreamOf(ctx)>>>(
          static_cast<const T*>(in_data[0].dptr), static_cast<T*>(out_data[0].dptr), g, total, req[0]);
      CheckLaunch("forward kernel launch", kName);
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    SetDevice(ctx.run_ctx.ctx.dev_id, kName);
    const PoolGeometry g = MakePoolGeometry(param_, in_grad[0].shape);
    const DType t = out_grad[0].dtype;
    const std::int64_t total = out_grad[0].Size();
    if (UseDnn(g) && total > 0) {
      Prepare(in_grad[0].shape, g, t);
      const Scale one(1.0), beta(req[0] == kAddTo ? 1.0 : 0.0);
      CheckDnn(
          cudnnPoolingBackward(DnnHandle(ctx, kName), pool_.d, one.For(t), y_.get(), out_data[0].dptr, y_.get(),
                               out_grad[0].dptr, x_.get(), in_data[0].dptr, beta.For(t), x_.get(), in_grad[0].dptr),
          "cudnnPoolingBackward", kName);
      return;
    }
    if (req[0] != kAddTo) {
      Check(cudaMemsetAsync(in_grad[0].dptr, 0, in_grad[0].Bytes(), StreamOf(ctx)), "cudaMemsetAsync", kName);
    }
    if (total == 0) return;
    internal::FloatSwitch(t, kName, [&](auto tag) {
      using T = decltype(tag);
      PoolBackwardKernel<T><<<Blocks(total), kThreads, 0, StreamOf(ctx)>>>(
          g.max ? static_cast<const T*>(in_data[0].dptr) : nullptr, static_cast<const T*>(out_grad[0].dptr),
          static_cast<T*>(in_grad[0].dptr), g, total);
      CheckLaunch("backward kernel launch", kName);
    });
  }

 private:
  static constexpr const char* kName = "Pooling";

  // cuDNN computes MXNet's 'valid' windows for max and avg (every window lies inside the padded input, so
  // its divisor is the full kernel area with count_include_pad, the inside part without); it rejects a
  // padding as large as the kernel. 'full' windows may run past the padding and sum pooling has no cuDNN
  // mode: those use the kernels above.
  bool UseDnn(const PoolGeometry& g) const {
    return !param_.cudnn_off && !g.full && (g.max || g.avg) && g.ph < g.kh && g.pw < g.kw;
  }

  void Prepare(const TShape& x, const PoolGeometry& g, DType dtype) {
    if (ready_ && x == x_shape_ && dtype == dtype_) return;
    const cudnnDataType_t t = internal::FloatSwitch(dtype, kName, [](auto tag) { return DnnType<decltype(tag)>(); });
    x_.Set(t, x[0], x[1], x[2], x[3], kName);
    y_.Set(t, x[0], x[1], g.out_h, g.out_w, kName);
    const cudnnPoolingMode_t mode = g.max ? CUDNN_POOLING_MAX
                                    : g.count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                          : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    CheckDnn(cudnnSetPooling2dDescriptor(pool_.d, mode, CUDNN_NOT_PROPAGATE_NAN, static_cast<int>(g.kh),
                                         static_cast<int>(g.kw), static_cast<int>(g.ph), static_cast<int>(g.pw),
                                         static_cast<int>(g.sh), static_cast<int>(g.sw)),
             "cudnnSetPooling2dDescriptor", kName);
    x_shape_ = x;
    dtype_ = dtype;
    ready_ = true;
  }

  PoolingParam param_;
  TensorDesc x_, y_;
  PoolDesc pool_;
  bool ready_ = false;
  TShape x_shape_;
  DType dtype_ = DType::kFloat32;
};

}  // namespace

static const bool kFullyConnectedGpu = RegisterGpuOperator("FullyConnected", [](const OperatorProperty& p, Context) {
  return std::unique_ptr<Operator>(
      std::make_unique<FullyConnectedGpuOp>(static_cast<const FullyConnectedProp&>(p).param()));
});
static const bool kConvolutionGpu = RegisterGpuOperator("Convolution", [](const OperatorProperty& p, Context) {
  return std::unique_ptr<Operator>(std::make_unique<ConvolutionGpuOp>(static_cast<const ConvolutionProp&>(p).param()));
});
static const bool kPoolingGpu = RegisterGpuOperator("Pooling", [](const OperatorProperty& p, Context) {
  return std::unique_ptr<Operator>(std::make_unique<PoolingGpuOp>(static_cast<const PoolingProp&>(p).param()));
});

}  // namespace troupe
