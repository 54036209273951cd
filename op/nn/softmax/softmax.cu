// The softmax family on the GPU: cuDNN (channel mode, the data seen as (outer, n, inner, 1) around the axis)
// for softmax/log_softmax without temperature and out of place; otherwise, and for SoftmaxOutput, a block
// per softmax row (max, sum of exponentials, write; then the gradient), which handles any axis, temperature
// and in-place use without temporary space.
//
// Every function enqueues on the engine's stream (run_ctx.stream) and throws troupe::Error on a CUDA or
// cuDNN failure (naming the call), which poisons the outputs. cuDNN handles are one per worker thread and
// device (op/internal/cudnn_common.h); descriptors live in the operator object and are only re-set when the
// shape changes. Registers with RegisterGpuOperator from a static initialiser; compiled only with CUDA.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "op/internal/cudnn_common.h"
#include "op/nn/common/cuda_kernels.cuh"
#include "op/nn/softmax/softmax.h"
#include "tensor/resource.h"

namespace troupe {

namespace {

using act_norm::AxisView;
using internal::Blocks;
using internal::CheckDnn;
using internal::CheckLaunch;
using internal::DnnHandle;
using internal::DnnType;
using internal::kThreads;
using internal::SetDevice;
using internal::StreamOf;
using internal::TensorDesc;
using nn_cuda::BlockSum;
using nn_cuda::FillKernel;

unsigned RowBlocks(std::int64_t rows) {
  return static_cast<unsigned>(rows < 0x7fffffff ? (rows > 0 ? rows : 1) : 0x7fffffff);
}

__device__ double BlockMax(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] = fmax(shared[threadIdx.x], shared[threadIdx.x + s]);
    __syncthreads();
  }
  const double total = shared[0];
  __syncthreads();
  return total;
}

// One block per softmax row of (outer, n, inner): the row's elements are base + k * inner. Every element
// of a row is read (max, then sum) before any is written, so y may be x.
template <typename T>
__global__ void SoftmaxForwardKernel(const T* x, T* y, std::int64_t outer, std::int64_t n, std::int64_t inner,
                                     OpReqType req, double temperature, bool log) {
  __shared__ double shared[kThreads];
  for (std::int64_t row = blockIdx.x; row < outer * inner; row += gridDim.x) {
    const std::int64_t base = (row / inner) * n * inner + row % inner;
    double mx = -INFINITY;
    for (std::int64_t k = threadIdx.x; k < n; k += blockDim.x) mx = fmax(mx, static_cast<double>(x[base + k * inner]));
    mx = BlockMax(mx, shared);
    double sum = 0;
    for (std::int64_t k = threadIdx.x; k < n; k += blockDim.x) sum += exp((x[base + k * inner] - mx) / temperature);
    sum = BlockSum(sum, shared);
    const double log_sum = ::log(sum);
    for (std::int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      const std::int64_t j = base + k * inner;
      const double z = (x[j] - mx) / temperature - log_sum;
      Assign(y + j, req, static_cast<T>(log ? z : exp(z)));
    }
    __syncthreads();  // the next row reuses `shared`
  }
}

template <typename T>
__global__ void SoftmaxBackwardKernel(const T* dy, const T* y, T* g, std::int64_t outer, std::int64_t n,
                                      std::int64_t inner, OpReqType req, double temperature, bool log) {
  __shared__ double shared[kThreads];
  for (std::int64_t row = blockIdx.x; row < outer * inner; row += gridDim.x) {
    const std::int64_t base = (row / inner) * n * inner + row % inner;
    double sum = 0;
    for (std::int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      const std::int64_t j = base + k * inner;
      sum += log ? static_cast<double>(dy[j]) : static_cast<double>(dy[j]) * y[j];
    }
    sum = BlockSum(sum, shared);
    for (std::int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      const std::int64_t j = base + k * inner;
      const double d = log ? dy[j] - exp(static_cast<double>(y[j])) * sum : y[j] * (dy[j] - sum);
      Assign(g + j, req, static_cast<T>(d / temperature));
    }
    __syncthreads();
  }
}

template <typename T>
void LaunchSoftmaxForward(cudaStream_t s, const T* x, T* y, const AxisView& v, OpReqType req, double temperature,
                          bool log) {
  SoftmaxForwardKernel<T><<<RowBlocks(v.outer * v.inner), kThreads, 0, s>>>(x, y, v.outer, v.n, v.inner, req,
                                                                            temperature, log);
  CheckLaunch(log ? "log_softmax forward" : "softmax forward");
}

class SoftmaxGpuOp : public Operator {
 public:
  SoftmaxGpuOp(const SoftmaxParam& p, bool log, double temperature) : p_(p), log_(log), temperature_(temperature) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp || in_data[0].Size() == 0) return;
    const TBlob& x = in_data[0];
    CheckSameType(x.dtype, out_data[0].dtype);
    const AxisView v = act_norm::ViewAround(x.shape, internal::NormalizeAxis(p_.axis, x.shape.ndim(), Name(), "axis"));
    SetDevice(x.ctx.dev_id);
    internal::FloatSwitch(x.dtype, Name(), [&](auto tag) {
      using T = decltype(tag);
      // cuDNN when it computes exactly this: no temperature (it cannot scale its input) and not in place.
      if (temperature_ == 1.0 && x.dptr != out_data[0].dptr && UseDnn<T>(x.shape, v)) {
        const T alpha = 1, beta = req[0] == kAddTo ? 1 : 0;
        CheckDnn(cudnnSoftmaxForward(DnnHandle(ctx), Algo(), CUDNN_SOFTMAX_MODE_CHANNEL, &alpha, desc_.get(), x.dptr,
                                     &beta, desc_.get(), out_data[0].dptr),
                 Name() + ": cudnnSoftmaxForward");
        return;
      }
      LaunchSoftmaxForward<T>(StreamOf(ctx), x.dptr_as<T>(), out_data[0].dptr_as<T>(), v, req[0], temperature_, log_);
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp || out_data[0].Size() == 0) return;
    const TBlob& y = out_data[0];
    CheckSameType(in_grad[0].dtype, y.dtype);
    const AxisView v = act_norm::ViewAround(y.shape, internal::NormalizeAxis(p_.axis, y.shape.ndim(), Name(), "axis"));
    SetDevice(y.ctx.dev_id);
    internal::FloatSwitch(y.dtype, Name(), [&](auto tag) {
      using T = decltype(tag);
      // cuDNN's backward takes the temperature as its scale (d/dx of f(x/T) is f'(x/T) / T).
      if (in_grad[0].dptr != out_grad[0].dptr && UseDnn<T>(y.shape, v)) {
        const T alpha = static_cast<T>(1.0 / temperature_), beta = req[0] == kAddTo ? 1 : 0;
        CheckDnn(cudnnSoftmaxBackward(DnnHandle(ctx), Algo(), CUDNN_SOFTMAX_MODE_CHANNEL, &alpha, desc_.get(),
                                      y.dptr, desc_.get(), out_grad[0].dptr, &beta, desc_.get(), in_grad[0].dptr),
                 Name() + ": cudnnSoftmaxBackward");
        return;
      }
      SoftmaxBackwardKernel<T><<<RowBlocks(v.outer * v.inner), kThreads, 0, StreamOf(ctx)>>>(
          out_grad[0].dptr_as<T>(), y.dptr_as<T>(), in_grad[0].dptr_as<T>(), v.outer, v.n, v.inner, req[0],
          temperature_, log_);
      CheckLaunch(Name() + " backward");
    });
  }

 private:
  std::string Name() const { return log_ ? "log_softmax" : "softmax"; }
  // A dtype other than the input's is computed on the CPU only.
  void CheckSameType(DType in, DType out) const {
    if (in != out) {
      throw Error(Name() + ": dtype " + DTypeName(out) + " for " + DTypeName(in) +
                  " data has no GPU implementation in troupe; run it on the CPU or cast the data");
    }
  }
  cudnnSoftmaxAlgorithm_t Algo() const { return log_ ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE; }

  // Whether cuDNN can take the tensor, seen as (outer, n, inner, 1) with the softmax over the channels;
  // sets the descriptor when the shape or type changed since the last call.
  template <typename T>
  bool UseDnn(const TShape& shape, const AxisView& v) {
    for (std::int64_t d : {v.outer, v.n, v.inner}) {
      if (d > 0x7fffffff) return false;  // the kernel handles what cuDNN's int dimensions cannot
    }
    if (shape != desc_shape_ || DnnType<T>() != desc_type_) {
      desc_.Set(DnnType<T>(), v.outer, v.n, v.inner, 1);
      desc_shape_ = shape;
      desc_type_ = DnnType<T>();
    }
    return true;
  }

  SoftmaxParam p_;
  bool log_;
  double temperature_;
  TensorDesc desc_;
  TShape desc_shape_;
  cudnnDataType_t desc_type_ = CUDNN_DATA_FLOAT;
};

// Number of labels other than ignore_label (as ints), at least 1, into *count.
template <typename T>
__global__ void CountValidKernel(const T* label, std::int64_t n, int ignore, double* count) {
  __shared__ double shared[kThreads];
  double c = 0;
  for (std::int64_t j = threadIdx.x; j < n; j += blockDim.x) c += static_cast<int>(label[j]) != ignore ? 1.0 : 0.0;
  c = BlockSum(c, shared);
  if (threadIdx.x == 0) *count = c > 1 ? c : 1;
}

struct SoftmaxOutputGradArgs {
  std::int64_t outer, n, inner;
  bool soft, use_ignore;
  int ignore;
  double scale, alpha, off_target;
  const double* norm;  // divides the scale when not null ('valid')
};

template <typename T>
__global__ void SoftmaxOutputGradKernel(const T* y, const T* label, const T* og, T* g, OpReqType req,
                                        SoftmaxOutputGradArgs a) {
  const std::int64_t total = a.outer * a.n * a.inner;
  const double scale = a.norm != nullptr ? a.scale / *a.norm : a.scale;
  TROUPE_GRID_LOOP(j, total) {
    const std::int64_t o = j / (a.n * a.inner), k = (j / a.inner) % a.n, i = j % a.inner;
    double target;
    bool ignored = false;
    if (a.soft) {
      target = label[j];
    } else {
      const int lab = static_cast<int>(label[o * a.inner + i]);
      ignored = a.use_ignore && lab == a.ignore;
      target = a.alpha > 0 ? (k == lab ? 1.0 - a.alpha : a.off_target) : (k == lab ? 1.0 : 0.0);
    }
    double d = ignored ? 0.0 : (y[j] - target) * scale;
    if (og != nullptr) d *= og[j];
    Assign(g + j, req, static_cast<T>(d));
  }
}

class SoftmaxOutputGpuOp : public Operator {
 public:
  explicit SoftmaxOutputGpuOp(const SoftmaxOutputProp& prop) : prop_(prop), p_(prop.param()) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    const TBlob& x = in_data[0];
    if (req[0] == kNullOp || x.Size() == 0) return;
    SetDevice(x.ctx.dev_id);
    internal::FloatSwitch(x.dtype, "SoftmaxOutput", [&](auto tag) {
      using T = decltype(tag);
      LaunchSoftmaxForward<T>(StreamOf(ctx), x.dptr_as<T>(), out_data[0].dptr_as<T>(), prop_.View(x.shape), req[0], 1.0,
                              false);
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>&) override {
    const TBlob& y = out_data[0];
    const TBlob& label = in_data[1];
    if (y.Size() == 0) return;
    const AxisView v = prop_.View(y.shape);
    SetDevice(y.ctx.dev_id);
    cudaStream_t s = StreamOf(ctx);
    internal::FloatSwitch(y.dtype, "SoftmaxOutput", [&](auto tag) {
      using T = decltype(tag);
      if (req[1] != kNullOp && req[1] != kAddTo) {
        FillKernel<T><<<Blocks(label.Size()), kThreads, 0, s>>>(in_grad[1].dptr_as<T>(), label.Size(), T(0));
        CheckLaunch("SoftmaxOutput label gradient");
      }
      if (req[0] == kNullOp) return;
      SoftmaxOutputGradArgs a{};
      a.outer = v.outer;
      a.n = v.n;
      a.inner = v.inner;
      a.soft = label.shape == y.shape && label.Size() != v.outer * v.inner;
      a.use_ignore = p_.use_ignore;
      a.ignore = static_cast<int>(p_.ignore_label);
      a.alpha = p_.smooth_alpha;
      a.off_target = v.n > 1 ? a.alpha / static_cast<double>(v.n - 1) : 0.0;
      a.scale = p_.grad_scale * ctx.loss_scale;
      a.norm = nullptr;
      if (p_.normalization == "batch") {
        a.scale /= static_cast<double>(v.outer);
      } else if (p_.normalization == "valid" && !a.soft) {
        double* count = static_cast<double*>(ctx.requested.at(0).get_space(sizeof(double)));
        CountValidKernel<T><<<1, kThreads, 0, s>>>(label.dptr_as<T>(), label.Size(), a.ignore, count);
        CheckLaunch("SoftmaxOutput valid count");
        a.norm = count;
      }
      SoftmaxOutputGradKernel<T><<<Blocks(y.Size()), kThreads, 0, s>>>(
          y.dptr_as<T>(), label.dptr_as<T>(), p_.out_grad ? out_grad[0].dptr_as<T>() : nullptr,
          in_grad[0].dptr_as<T>(), req[0], a);
      CheckLaunch("SoftmaxOutput backward");
    });
  }

 private:
  SoftmaxOutputProp prop_;
  SoftmaxOutputParam p_;
};

std::unique_ptr<Operator> MakeSoftmax(const OperatorProperty& p, Context) {
  const auto& s = static_cast<const SoftmaxProp&>(p);
  return std::make_unique<SoftmaxGpuOp>(s.param(), s.log(), s.temperature());
}

const bool kSoftmaxGpu = RegisterGpuOperator("softmax", MakeSoftmax);
const bool kLogSoftmaxGpu = RegisterGpuOperator("log_softmax", MakeSoftmax);
const bool kSoftmaxOutputGpu = RegisterGpuOperator("SoftmaxOutput", [](const OperatorProperty& p, Context) {
  return std::unique_ptr<Operator>(std::make_unique<SoftmaxOutputGpuOp>(static_cast<const SoftmaxOutputProp&>(p)));
});

}  // namespace

}  // namespace troupe
