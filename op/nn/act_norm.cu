// GPU versions of the operators in op/nn/act_norm.h:
//   Activation        cuDNN forward for relu/sigmoid/tanh and cuDNN backward for relu; CUDA kernels for
//                     softrelu/softsign, and for the sigmoid/tanh backward (cuDNN's backward takes the input
//                     x, which troupe does not keep for these: it differentiates from the output as MXNet's
//                     CPU code does, so an in-place forward stays legal).
//   LeakyReLU         CUDA kernels (prelu's gamma gradient by a per-channel block reduction).
//   BatchNorm         cuDNN (spatial mode, the data seen as (outer, C, inner, 1) around the channel axis)
//                     for the forward passes and the training backward; the moving statistics are updated
//                     by a kernel from the saved mean and inverse std with the *biased* variance, as on the
//                     CPU (cuDNN's own running average would use the unbiased one). The backward after an
//                     inference forward (the affine map's gradient) uses kernels.
//   Dropout           Philox numbers drawn in the kernel from the kRandom generator's key and Reserve()d
//                     counter: the same numbers as the CPU version for the same key and counter.
//   softmax family    cuDNN (channel mode, the data seen as (outer, n, inner, 1) around the axis) for
//                     softmax/log_softmax without temperature and out of place; otherwise, and for
//   SoftmaxOutput     SoftmaxOutput, a block per softmax row (max, sum of exponentials, write; then the
//                     gradient), which handles any axis, temperature and in-place use without temporary space.
//   Regression heads  CUDA kernels.
// Every function enqueues on the engine's stream (run_ctx.stream) and throws troupe::Error on a CUDA or
// cuDNN failure (naming the call), which poisons the outputs. cuDNN handles are one per worker thread and
// device (tensor/detail/cuda_common.h); descriptors live in the operator object and are only re-set when the
// shape changes.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "op/internal/cudnn_common.h"
#include "op/nn/act_norm.h"
#include "tensor/resource.h"

namespace troupe {

namespace {

using act_norm::AxisView;

// ------------------------------------------------------------------------------------------- plumbing
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

class ActivationDesc {
 public:
  explicit ActivationDesc(cudnnActivationMode_t mode) {
    CheckDnn(cudnnCreateActivationDescriptor(&d_), "cudnnCreateActivationDescriptor");
    CheckDnn(cudnnSetActivationDescriptor(d_, mode, CUDNN_PROPAGATE_NAN, 0.0), "cudnnSetActivationDescriptor");
  }
  ~ActivationDesc() { cudnnDestroyActivationDescriptor(d_); }
  ActivationDesc(const ActivationDesc&) = delete;
  ActivationDesc& operator=(const ActivationDesc&) = delete;
  cudnnActivationDescriptor_t get() const { return d_; }

 private:
  cudnnActivationDescriptor_t d_ = nullptr;
};

// Temporary device memory carved from the kTempSpace resource: 256-byte aligned pieces.
class TempCarver {
 public:
  void Add(std::size_t bytes) {
    offsets_.push_back(total_);
    total_ += (bytes + 255) / 256 * 256;
  }
  void Acquire(const Resource& r) { base_ = static_cast<char*>(r.get_space(total_ > 0 ? total_ : 256)); }
  template <typename T>
  T* Get(std::size_t i) const {
    return reinterpret_cast<T*>(base_ + offsets_.at(i));
  }

 private:
  std::vector<std::size_t> offsets_;
  std::size_t total_ = 0;
  char* base_ = nullptr;
};

unsigned RowBlocks(std::int64_t rows) {
  return static_cast<unsigned>(rows < 0x7fffffff ? (rows > 0 ? rows : 1) : 0x7fffffff);
}

// Block-wide sum of one double per thread (blockDim.x == kThreads); every thread gets the total.
__device__ double BlockSum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  const double total = shared[0];
  __syncthreads();
  return total;
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

// dst = src (kWriteTo/kWriteInplace), dst += src (kAddTo); scale applied to src.
template <typename T>
__global__ void ApplyReqKernel(T* dst, const T* src, std::int64_t n, OpReqType req, T scale) {
  TROUPE_GRID_LOOP(i, n) { Assign(dst + i, req, src != nullptr ? src[i] * scale : T(0)); }
}

template <typename T>
__global__ void FillKernel(T* dst, std::int64_t n, T v) {
  TROUPE_GRID_LOOP(i, n) { dst[i] = v; }
}

// ------------------------------------------------------------------------------------------ Activation
template <typename T>
__global__ void ActForwardKernel(act_norm::ActType t, const T* x, T* y, std::int64_t n, OpReqType req) {
  TROUPE_GRID_LOOP(i, n) { Assign(y + i, req, act_norm::ActForward(t, x[i])); }
}

template <typename T>
__global__ void ActBackwardKernel(act_norm::ActType t, const T* og, const T* v, T* g, std::int64_t n, OpReqType req) {
  TROUPE_GRID_LOOP(i, n) { Assign(g + i, req, og[i] * act_norm::ActGrad(t, v[i])); }
}

class ActivationGpuOp : public Operator {
 public:
  explicit ActivationGpuOp(const ActivationParam& p) : type_(p.type()) {
    if (UsesDnn()) {
      desc_ = std::make_unique<ActivationDesc>(type_ == act_norm::ActType::kReLU      ? CUDNN_ACTIVATION_RELU
                                               : type_ == act_norm::ActType::kSigmoid ? CUDNN_ACTIVATION_SIGMOID
                                                                                      : CUDNN_ACTIVATION_TANH);
    }
  }

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const TBlob& x = in_data[0];
    const std::int64_t n = x.Size();
    if (n == 0) return;
    internal::FloatSwitch(x.dtype, "Activation", [&](auto tag) {
      using T = decltype(tag);
      if (UsesDnn()) {
        cudnnHandle_t h = DnnHandle(ctx);
        SetDesc<T>(n);
        const T alpha = 1, beta = req[0] == kAddTo ? 1 : 0;
        CheckDnn(cudnnActivationForward(h, desc_->get(), &alpha, td_.get(), x.dptr, &beta, td_.get(), out_data[0].dptr),
                 "Activation: cudnnActivationForward");
      } else {
        SetDevice(x.ctx.dev_id);
        ActForwardKernel<T><<<Blocks(n), kThreads, 0, StreamOf(ctx)>>>(type_, x.dptr_as<T>(), out_data[0].dptr_as<T>(),
                                                                       n, req[0]);
        CheckLaunch("Activation forward");
      }
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const TBlob& og = out_grad[0];
    const std::int64_t n = og.Size();
    if (n == 0) return;
    const TBlob& v = act_norm::ActGradFromInput(type_) ? in_data[0] : out_data[0];
    internal::FloatSwitch(og.dtype, "Activation", [&](auto tag) {
      using T = decltype(tag);
      if (type_ == act_norm::ActType::kReLU) {
        // relu'(x) depends only on the sign, which y = relu(x) shares: y stands in for x (as MXNet does).
        cudnnHandle_t h = DnnHandle(ctx);
        SetDesc<T>(n);
        const T alpha = 1, beta = req[0] == kAddTo ? 1 : 0;
        CheckDnn(cudnnActivationBackward(h, desc_->get(), &alpha, td_.get(), v.dptr, td_.get(), og.dptr, td_.get(),
                                         v.dptr, &beta, td_.get(), in_grad[0].dptr),
                 "Activation: cudnnActivationBackward");
      } else {
        SetDevice(og.ctx.dev_id);
        ActBackwardKernel<T><<<Blocks(n), kThreads, 0, StreamOf(ctx)>>>(type_, og.dptr_as<T>(), v.dptr_as<T>(),
                                                                        in_grad[0].dptr_as<T>(), n, req[0]);
        CheckLaunch("Activation backward");
      }
    });
  }

 private:
  bool UsesDnn() const {
    return type_ == act_norm::ActType::kReLU || type_ == act_norm::ActType::kSigmoid ||
           type_ == act_norm::ActType::kTanh;
  }
  // Elementwise: the layout does not matter, only the count (split so each dimension fits an int).
  template <typename T>
  void SetDesc(std::int64_t n) {
    if (n == desc_n_ && DnnType<T>() == desc_type_) return;
    std::int64_t w = n, c = 1;
    while (w > (1 << 30) && w % 2 == 0) w /= 2, c *= 2;
    td_.Set(DnnType<T>(), 1, c, 1, w);
    desc_n_ = n;
    desc_type_ = DnnType<T>();
  }

  act_norm::ActType type_;
  std::unique_ptr<ActivationDesc> desc_;
  TensorDesc td_;
  std::int64_t desc_n_ = -1;
  cudnnDataType_t desc_type_ = CUDNN_DATA_FLOAT;
};

// ------------------------------------------------------------------------------------------- LeakyReLU
template <typename T>
__global__ void LeakyForwardKernel(act_norm::LeakyType t, const T* x, T* y, std::int64_t n, OpReqType req, T slope) {
  TROUPE_GRID_LOOP(i, n) { Assign(y + i, req, act_norm::LeakyForward(t, x[i], slope)); }
}

template <typename T>
__global__ void PReLUForwardKernel(const T* x, const T* gamma, bool scalar, std::int64_t inner, std::int64_t c,
                                   T* y, std::int64_t n, OpReqType req) {
  TROUPE_GRID_LOOP(i, n) {
    const T s = gamma[scalar ? 0 : (i / inner) % c];
    Assign(y + i, req, x[i] > T(0) ? x[i] : s * x[i]);
  }
}

template <typename T>
__global__ void RReLUForwardKernel(const T* x, T* y, T* mask, std::int64_t n, OpReqType req, bool train,
                                   std::uint64_t key, std::uint64_t base, T lo, T span, T mean_slope) {
  TROUPE_GRID_LOOP(i, n) {
    const T s = train ? lo + span * T(act_norm::UniformAt(key, base, static_cast<std::uint64_t>(i))) : mean_slope;
    if (mask != nullptr) mask[i] = s;
    if (y != nullptr) Assign(y + i, req, x[i] > T(0) ? x[i] : s * x[i]);
  }
}

template <typename T>
__global__ void LeakyBackwardKernel(act_norm::LeakyType t, const T* og, const T* v, T* g, std::int64_t n,
                                    OpReqType req, T slope) {
  TROUPE_GRID_LOOP(i, n) { Assign(g + i, req, og[i] * act_norm::LeakyGrad(t, v[i], slope)); }
}

template <typename T>
__global__ void PReLUBackwardKernel(const T* og, const T* x, const T* gamma, bool scalar, std::int64_t inner,
                                    std::int64_t c, T* g, std::int64_t n, OpReqType req) {
  TROUPE_GRID_LOOP(i, n) {
    const T s = gamma[scalar ? 0 : (i / inner) % c];
    Assign(g + i, req, og[i] * (x[i] > T(0) ? T(1) : s));
  }
}

// gamma's gradient: one block per gamma entry sums x * og over the elements with x <= 0. The data is seen
// as (outer, c, inner); a shared gamma is c = 1.
template <typename T>
__global__ void PReLUGammaKernel(const T* og, const T* x, std::int64_t outer, std::int64_t c, std::int64_t inner,
                                 T* gg, OpReqType req) {
  __shared__ double shared[kThreads];
  const std::int64_t ch = blockIdx.x, m = outer * inner;
  double acc = 0;
  for (std::int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    const std::int64_t j = ((k / inner) * c + ch) * inner + k % inner;
    if (!(x[j] > T(0))) acc += static_cast<double>(x[j]) * og[j];
  }
  const double total = BlockSum(acc, shared);
  if (threadIdx.x == 0) Assign(gg + ch, req, static_cast<T>(total));
}

template <typename T>
__global__ void RReLUBackwardKernel(const T* og, const T* y, const T* mask, T* g, std::int64_t n, OpReqType req) {
  TROUPE_GRID_LOOP(i, n) { Assign(g + i, req, og[i] * (y[i] > T(0) ? T(1) : mask[i])); }
}

class LeakyReLUGpuOp : public Operator {
 public:
  explicit LeakyReLUGpuOp(const LeakyReLUParam& p) : p_(p), type_(p.type()) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    const TBlob& x = in_data[0];
    const std::int64_t n = x.Size();
    if (n == 0) return;
    SetDevice(x.ctx.dev_id);
    cudaStream_t s = StreamOf(ctx);
    internal::FloatSwitch(x.dtype, "LeakyReLU", [&](auto tag) {
      using T = decltype(tag);
      T* y = req[0] == kNullOp ? nullptr : out_data[0].dptr_as<T>();
      if (type_ == act_norm::LeakyType::kRReLU) {
        T* mask = (out_data.size() > 1 && req.size() > 1 && req[1] != kNullOp) ? out_data[1].dptr_as<T>() : nullptr;
        std::uint64_t key = 0, base = 0;
        if (ctx.is_train) {
          RandomGenerator* gen = ctx.requested.at(0).get_random();
          key = gen->key();
          base = gen->Reserve(act_norm::RandomBlocks(n));
        }
        RReLUForwardKernel<T><<<Blocks(n), kThreads, 0, s>>>(
            x.dptr_as<T>(), y, mask, n, req[0], ctx.is_train, key, base, T(p_.lower_bound),
            T(p_.upper_bound) - T(p_.lower_bound), (T(p_.lower_bound) + T(p_.upper_bound)) / T(2));
      } else if (y == nullptr) {
        return;
      } else if (type_ == act_norm::LeakyType::kPReLU) {
        const AxisView v = act_norm::ViewAround(x.shape, 1);
        PReLUForwardKernel<T><<<Blocks(n), kThreads, 0, s>>>(x.dptr_as<T>(), in_data[1].dptr_as<T>(),
                                                             in_data[1].Size() == 1, v.inner, v.n, y, n, req[0]);
      } else {
        LeakyForwardKernel<T><<<Blocks(n), kThreads, 0, s>>>(type_, x.dptr_as<T>(), y, n, req[0], T(p_.slope));
      }
      CheckLaunch("LeakyReLU forward");
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>&) override {
    const TBlob& og = out_grad[0];
    const std::int64_t n = og.Size();
    if (n == 0) return;
    SetDevice(og.ctx.dev_id);
    cudaStream_t s = StreamOf(ctx);
    internal::FloatSwitch(og.dtype, "LeakyReLU", [&](auto tag) {
      using T = decltype(tag);
      if (type_ == act_norm::LeakyType::kPReLU) {
        const TBlob& x = in_data[0];
        const bool scalar = in_data[1].Size() == 1;
        const AxisView v = act_norm::ViewAround(x.shape, 1);
        // gamma first: in_grad[data] may share out_grad's memory.
        if (req[1] != kNullOp) {
          const std::int64_t c = scalar ? 1 : v.n, outer = scalar ? 1 : v.outer, inner = scalar ? n : v.inner;
          PReLUGammaKernel<T><<<static_cast<unsigned>(c), kThreads, 0, s>>>(og.dptr_as<T>(), x.dptr_as<T>(), outer, c,
                                                                            inner, in_grad[1].dptr_as<T>(), req[1]);
        }
        if (req[0] != kNullOp) {
          PReLUBackwardKernel<T><<<Blocks(n), kThreads, 0, s>>>(og.dptr_as<T>(), x.dptr_as<T>(),
                                                                in_data[1].dptr_as<T>(), scalar, v.inner, v.n,
                                                                in_grad[0].dptr_as<T>(), n, req[0]);
        }
      } else if (req[0] == kNullOp) {
        return;
      } else if (type_ == act_norm::LeakyType::kRReLU) {
        // slope per element from the mask, where the output is not positive (leaky's rule with a varying slope).
        RReLUBackwardKernel<T><<<Blocks(n), kThreads, 0, s>>>(og.dptr_as<T>(), out_data[0].dptr_as<T>(),
                                                              out_data[1].dptr_as<T>(), in_grad[0].dptr_as<T>(), n,
                                                              req[0]);
      } else {
        const T* v = (type_ == act_norm::LeakyType::kGELU ? in_data[0] : out_data[0]).dptr_as<T>();
        LeakyBackwardKernel<T><<<Blocks(n), kThreads, 0, s>>>(type_, og.dptr_as<T>(), v, in_grad[0].dptr_as<T>(), n,
                                                              req[0], T(p_.slope));
      }
      CheckLaunch("LeakyReLU backward");
    });
  }

 private:
  LeakyReLUParam p_;
  act_norm::LeakyType type_;
};

// ------------------------------------------------------------------------------------------- BatchNorm
// moving = moving * momentum + batch * (1 - momentum), the batch variance recovered from the saved inverse
// std (biased, as on the CPU); then the saved statistics are written to the hidden outputs.
template <typename T>
__global__ void BatchNormMovingKernel(const T* mean, const T* invstd, T* moving_mean, T* moving_var, std::int64_t c,
                                      double momentum, double eps) {
  TROUPE_GRID_LOOP(i, c) {
    const double var = invstd[i] > T(0) ? 1.0 / (static_cast<double>(invstd[i]) * invstd[i]) - eps : 0.0;
    moving_mean[i] = static_cast<T>(moving_mean[i] * momentum + static_cast<double>(mean[i]) * (1 - momentum));
    moving_var[i] = static_cast<T>(moving_var[i] * momentum + var * (1 - momentum));
  }
}

// Inference statistics: mean = moving_mean, invstd = 1 / sqrt(moving_var + eps).
template <typename T>
__global__ void BatchNormGlobalStatsKernel(const T* moving_mean, const T* moving_var, T* mean, T* invstd,
                                           std::int64_t c, double eps) {
  TROUPE_GRID_LOOP(i, c) {
    mean[i] = moving_mean[i];
    invstd[i] = static_cast<T>(1.0 / sqrt(static_cast<double>(moving_var[i]) + eps));
  }
}

// Per channel: sum(og) and sum((x - mean) * og), one block per channel of (outer, c, inner).
template <typename T>
__global__ void BatchNormChannelSumsKernel(const T* og, const T* x, const T* mean, std::int64_t outer, std::int64_t c,
                                          std::int64_t inner, double* sum_og, double* dotp) {
  __shared__ double shared[kThreads];
  const std::int64_t ch = blockIdx.x, m = outer * inner;
  const double mu = mean[ch];
  double a = 0, b = 0;
  for (std::int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    const std::int64_t j = ((k / inner) * c + ch) * inner + k % inner;
    a += og[j];
    b += (x[j] - mu) * og[j];
  }
  a = BlockSum(a, shared);
  b = BlockSum(b, shared);
  if (threadIdx.x == 0) {
    sum_og[ch] = a;
    dotp[ch] = b;
  }
}

// The affine map's data gradient: dx = og * invstd * w.
template <typename T>
__global__ void BatchNormAffineGradKernel(const T* og, const T* gamma, bool fix_gamma, const T* invstd,
                                          std::int64_t c, std::int64_t inner, T* g, std::int64_t n, OpReqType req) {
  TROUPE_GRID_LOOP(i, n) {
    const std::int64_t ch = (i / inner) % c;
    const T w = fix_gamma ? T(1) : gamma[ch];
    Assign(g + i, req, og[i] * invstd[ch] * w);
  }
}

template <typename T>
__global__ void BatchNormParamGradKernel(const double* dotp, const double* sum_og, const T* invstd, bool fix_gamma,
                                         T* ggamma, OpReqType req_gamma, T* gbeta, OpReqType req_beta,
                                         std::int64_t c) {
  TROUPE_GRID_LOOP(i, c) {
    if (ggamma != nullptr) Assign(ggamma + i, req_gamma, fix_gamma ? T(0) : static_cast<T>(dotp[i] * invstd[i]));
    if (gbeta != nullptr) Assign(gbeta + i, req_beta, static_cast<T>(sum_og[i]));
  }
}

// cuDNN's parameter gradients (dscale, dbias) applied to gamma's and beta's requests.
template <typename T>
__global__ void BatchNormDnnParamGradKernel(const T* dscale, const T* dbias, bool fix_gamma, T* ggamma,
                                            OpReqType req_gamma, T* gbeta, OpReqType req_beta, std::int64_t c) {
  TROUPE_GRID_LOOP(i, c) {
    if (ggamma != nullptr) Assign(ggamma + i, req_gamma, fix_gamma ? T(0) : dscale[i]);
    if (gbeta != nullptr) Assign(gbeta + i, req_beta, dbias[i]);
  }
}

class BatchNormGpuOp : public Operator {
 public:
  explicit BatchNormGpuOp(const BatchNormParam& p) : p_(p) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>& aux_states) override {
    const TBlob& x = in_data[0];
    const AxisView v = View(x.shape);
    const bool batch = ctx.is_train && !p_.use_global_stats;
    batch_stats_ = batch;
    if (v.n == 0) return;
    internal::FloatSwitch(x.dtype, "BatchNorm", [&](auto tag) {
      using T = decltype(tag);
      cudnnHandle_t h = DnnHandle(ctx);
      cudaStream_t s = StreamOf(ctx);
      SetDesc<T>(v);
      const std::size_t cb = static_cast<std::size_t>(v.n) * sizeof(T);
      TempCarver tmp;
      tmp.Add(cb);                                          // 0: unit gamma (fix_gamma)
      tmp.Add(cb);                                          // 1: saved mean
      tmp.Add(cb);                                          // 2: saved inverse std
      tmp.Add(req[0] == kNullOp ? x.Bytes() : 0);           // 3: output when not wanted
      tmp.Acquire(ctx.requested.at(0));
      const T* scale = in_data[1].dptr_as<T>();
      if (p_.fix_gamma) {
        FillKernel<T><<<Blocks(v.n), kThreads, 0, s>>>(tmp.Get<T>(0), v.n, T(1));
        CheckLaunch("BatchNorm unit gamma");
        scale = tmp.Get<T>(0);
      }
      void* y = req[0] == kNullOp ? tmp.Get<void>(3) : out_data[0].dptr;
      const T alpha = 1, beta = req[0] == kAddTo ? 1 : 0;
      T* mean = tmp.Get<T>(1);
      T* invstd = tmp.Get<T>(2);
      T* moving_mean = aux_states[0].dptr_as<T>();
      T* moving_var = aux_states[1].dptr_as<T>();
      if (batch) {
        // No running averages from cuDNN (its variance is unbiased); the kernel below updates them.
        CheckDnn(cudnnBatchNormalizationForwardTraining(h, CUDNN_BATCHNORM_SPATIAL, &alpha, &beta, x_desc_.get(), x.dptr,
                                                        x_desc_.get(), y, param_desc_.get(), scale,
                                                        in_data[2].dptr, 0.0, nullptr, nullptr, p_.eps, mean, invstd),
                 "BatchNorm: cudnnBatchNormalizationForwardTraining");
        BatchNormMovingKernel<T><<<Blocks(v.n), kThreads, 0, s>>>(mean, invstd, moving_mean, moving_var, v.n,
                                                                  static_cast<double>(p_.momentum), p_.eps);
        CheckLaunch("BatchNorm moving statistics");
      } else {
        CheckDnn(cudnnBatchNormalizationForwardInference(h, CUDNN_BATCHNORM_SPATIAL, &alpha, &beta, x_desc_.get(),
                                                         x.dptr, x_desc_.get(), y, param_desc_.get(), scale,
                                                         in_data[2].dptr, moving_mean, moving_var, p_.eps),
                 "BatchNorm: cudnnBatchNormalizationForwardInference");
        BatchNormGlobalStatsKernel<T><<<Blocks(v.n), kThreads, 0, s>>>(moving_mean, moving_var, mean, invstd, v.n,
                                                                       p_.eps);
        CheckLaunch("BatchNorm global statistics");
      }
      for (int k = 1; k <= 2; ++k) {
        if (req[k] == kNullOp || out_data[k].dptr == nullptr) continue;
        ApplyReqKernel<T><<<Blocks(v.n), kThreads, 0, s>>>(out_data[k].dptr_as<T>(), k == 1 ? mean : invstd, v.n,
                                                           req[k], T(1));
        CheckLaunch("BatchNorm saved statistics");
      }
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>&) override {
    const TBlob& x = in_data[0];
    const AxisView v = View(x.shape);
    if (v.n == 0) return;
    internal::FloatSwitch(x.dtype, "BatchNorm", [&](auto tag) {
      using T = decltype(tag);
      cudnnHandle_t h = DnnHandle(ctx);
      cudaStream_t s = StreamOf(ctx);
      SetDesc<T>(v);
      const std::size_t cb = static_cast<std::size_t>(v.n) * sizeof(T);
      TempCarver tmp;
      tmp.Add(cb);                                 // 0: unit gamma
      tmp.Add(cb);                                 // 1: dscale
      tmp.Add(cb);                                 // 2: dbias
      tmp.Add(req[0] == kNullOp ? x.Bytes() : 0);  // 3: dx when not wanted
      tmp.Add(static_cast<std::size_t>(v.n) * sizeof(double));  // 4: sum of og
      tmp.Add(static_cast<std::size_t>(v.n) * sizeof(double));  // 5: dot product
      tmp.Acquire(ctx.requested.at(0));
      const T* gamma = in_data[1].dptr_as<T>();
      const T* mean = out_data[1].dptr_as<T>();
      const T* invstd = out_data[2].dptr_as<T>();
      T* ggamma = req[1] == kNullOp ? nullptr : in_grad[1].dptr_as<T>();
      T* gbeta = req[2] == kNullOp ? nullptr : in_grad[2].dptr_as<T>();
      if (batch_stats_) {
        const T* scale = gamma;
        if (p_.fix_gamma) {
          FillKernel<T><<<Blocks(v.n), kThreads, 0, s>>>(tmp.Get<T>(0), v.n, T(1));
          CheckLaunch("BatchNorm unit gamma");
          scale = tmp.Get<T>(0);
        }
        void* dx = req[0] == kNullOp ? tmp.Get<void>(3) : in_grad[0].dptr;
        const T one = 1, zero = 0, beta_dx = req[0] == kAddTo ? 1 : 0;
        CheckDnn(cudnnBatchNormalizationBackward(h, CUDNN_BATCHNORM_SPATIAL, &one, &beta_dx, &one, &zero, x_desc_.get(),
                                                 x.dptr, x_desc_.get(), out_grad[0].dptr, x_desc_.get(), dx,
                                                 param_desc_.get(), scale, tmp.Get<T>(1), tmp.Get<T>(2), p_.eps, mean,
                                                 invstd),
                 "BatchNorm: cudnnBatchNormalizationBackward");
        BatchNormDnnParamGradKernel<T><<<Blocks(v.n), kThreads, 0, s>>>(tmp.Get<T>(1), tmp.Get<T>(2), p_.fix_gamma,
                                                                        ggamma, req[1], gbeta, req[2], v.n);
        CheckLaunch("BatchNorm parameter gradients");
        return;
      }
      // After an inference forward: the gradient of the affine map with the moving statistics.
      double* sum_og = tmp.Get<double>(4);
      double* dotp = tmp.Get<double>(5);
      BatchNormChannelSumsKernel<T><<<static_cast<unsigned>(v.n), kThreads, 0, s>>>(
          out_grad[0].dptr_as<T>(), x.dptr_as<T>(), mean, v.outer, v.n, v.inner, sum_og, dotp);
      CheckLaunch("BatchNorm channel sums");
      if (req[0] != kNullOp) {
        BatchNormAffineGradKernel<T><<<Blocks(x.Size()), kThreads, 0, s>>>(
            out_grad[0].dptr_as<T>(), gamma, p_.fix_gamma, invstd, v.n, v.inner, in_grad[0].dptr_as<T>(), x.Size(),
            req[0]);
        CheckLaunch("BatchNorm data gradient");
      }
      BatchNormParamGradKernel<T><<<Blocks(v.n), kThreads, 0, s>>>(dotp, sum_og, invstd, p_.fix_gamma, ggamma, req[1],
                                                                   gbeta, req[2], v.n);
      CheckLaunch("BatchNorm parameter gradients");
    });
  }

 private:
  AxisView View(const TShape& s) const {
    return act_norm::ViewAround(s, internal::NormalizeAxis(p_.axis, s.ndim(), "BatchNorm", "axis"));
  }
  template <typename T>
  void SetDesc(const AxisView& v) {
    if (v.outer == desc_view_.outer && v.n == desc_view_.n && v.inner == desc_view_.inner && DnnType<T>() == desc_type_) {
      return;
    }
    x_desc_.Set(DnnType<T>(), v.outer, v.n, v.inner, 1);
    param_desc_.Set(DnnType<T>(), 1, v.n, 1, 1);
    desc_view_ = v;
    desc_type_ = DnnType<T>();
  }

  BatchNormParam p_;
  bool batch_stats_ = true;
  TensorDesc x_desc_, param_desc_;
  AxisView desc_view_{-1, -1, -1};
  cudnnDataType_t desc_type_ = CUDNN_DATA_FLOAT;
};

// --------------------------------------------------------------------------------------------- Dropout
template <typename T>
__device__ inline T DropoutMaskValue(bool drop, std::uint64_t key, std::uint64_t base, std::int64_t j, float keep,
                                     T scale) {
  if (!drop) return T(1);
  return act_norm::UniformAt(key, base, static_cast<std::uint64_t>(j)) < keep ? scale : T(0);
}

template <typename T>
__global__ void DropoutMaskKernel(T* mask, std::int64_t mn, bool drop, std::uint64_t key, std::uint64_t base,
                                  float keep, T scale) {
  TROUPE_GRID_LOOP(j, mn) { mask[j] = DropoutMaskValue<T>(drop, key, base, j, keep, scale); }
}

template <typename T>
__global__ void DropoutForwardKernel(const T* x, T* y, std::int64_t n, OpReqType req, BroadcastIndex b, bool drop,
                                     std::uint64_t key, std::uint64_t base, float keep, T scale) {
  TROUPE_GRID_LOOP(i, n) { Assign(y + i, req, x[i] * DropoutMaskValue<T>(drop, key, base, b(i), keep, scale)); }
}

template <typename T>
__global__ void DropoutBackwardKernel(const T* og, const T* mask, T* g, std::int64_t n, OpReqType req,
                                      BroadcastIndex b) {
  TROUPE_GRID_LOOP(i, n) { Assign(g + i, req, og[i] * mask[b(i)]); }
}

class DropoutGpuOp : public Operator {
 public:
  explicit DropoutGpuOp(const DropoutParam& p) : p_(p) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    const TBlob& x = in_data[0];
    TShape mshape = x.shape;
    for (auto a : p_.axes) mshape[static_cast<int>(a)] = 1;
    const std::int64_t n = x.Size(), mn = mshape.Size();
    if (n == 0) return;
    const bool drop = p_.p > 0 && (ctx.is_train || p_.mode == "always");
    std::uint64_t key = 0, base = 0;
    if (drop) {
      RandomGenerator* gen = ctx.requested.at(0).get_random();
      key = gen->key();
      base = gen->Reserve(act_norm::RandomBlocks(mn));
    }
    const float keep = 1.0f - p_.p;
    SetDevice(x.ctx.dev_id);
    cudaStream_t s = StreamOf(ctx);
    internal::FloatSwitch(x.dtype, "Dropout", [&](auto tag) {
      using T = decltype(tag);
      const T scale = keep > 0 ? T(1) / T(keep) : T(0);
      if (req.size() > 1 && req[1] != kNullOp && out_data[1].dptr != nullptr) {
        DropoutMaskKernel<T><<<Blocks(mn), kThreads, 0, s>>>(out_data[1].dptr_as<T>(), mn, drop, key, base, keep, scale);
        CheckLaunch("Dropout mask");
      }
      if (req[0] != kNullOp) {
        DropoutForwardKernel<T><<<Blocks(n), kThreads, 0, s>>>(x.dptr_as<T>(), out_data[0].dptr_as<T>(), n, req[0],
                                                               MakeBroadcastIndex(x.shape, mshape), drop, key, base,
                                                               keep, scale);
        CheckLaunch("Dropout forward");
      }
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const TBlob& og = out_grad[0];
    const std::int64_t n = og.Size();
    if (n == 0) return;
    SetDevice(og.ctx.dev_id);
    internal::FloatSwitch(og.dtype, "Dropout", [&](auto tag) {
      using T = decltype(tag);
      DropoutBackwardKernel<T><<<Blocks(n), kThreads, 0, StreamOf(ctx)>>>(
          og.dptr_as<T>(), out_data[1].dptr_as<T>(), in_grad[0].dptr_as<T>(), n, req[0],
          MakeBroadcastIndex(og.shape, out_data[1].shape));
      CheckLaunch("Dropout backward");
    });
  }

 private:
  DropoutParam p_;
};

// ---------------------------------------------------------------------------------------- softmax rows
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

// ------------------------------------------------------------------------------------- SoftmaxOutput
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
      a.scale = p_.grad_scale;
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

// ------------------------------------------------------------------------------------ regression heads
template <typename T>
__global__ void RegressionForwardKernel(RegressionKind k, const T* x, T* y, std::int64_t n, OpReqType req) {
  TROUPE_GRID_LOOP(i, n) { Assign(y + i, req, act_norm::RegressionForward(k, x[i])); }
}

template <typename T>
__global__ void RegressionBackwardKernel(RegressionKind k, const T* y, const T* label, T* g, std::int64_t n,
                                         OpReqType req, T scale) {
  TROUPE_GRID_LOOP(i, n) { Assign(g + i, req, scale * act_norm::RegressionGrad(k, y[i], label[i])); }
}

class RegressionOutputGpuOp : public Operator {
 public:
  RegressionOutputGpuOp(const RegressionOutputParam& p, RegressionKind kind, std::string name)
      : p_(p), kind_(kind), name_(std::move(name)) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    const std::int64_t n = in_data[0].Size();
    if (req[0] == kNullOp || n == 0) return;
    SetDevice(in_data[0].ctx.dev_id);
    internal::FloatSwitch(in_data[0].dtype, name_, [&](auto tag) {
      using T = decltype(tag);
      RegressionForwardKernel<T><<<Blocks(n), kThreads, 0, StreamOf(ctx)>>>(kind_, in_data[0].dptr_as<T>(),
                                                                            out_data[0].dptr_as<T>(), n, req[0]);
      CheckLaunch(name_ + " forward");
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>&, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>&) override {
    const TBlob& label = in_data[1];
    const std::int64_t n = out_data[0].Size();
    if (n == 0) return;
    SetDevice(out_data[0].ctx.dev_id);
    cudaStream_t s = StreamOf(ctx);
    internal::FloatSwitch(out_data[0].dtype, name_, [&](auto tag) {
      using T = decltype(tag);
      if (req[1] != kNullOp && req[1] != kAddTo) {
        FillKernel<T><<<Blocks(label.Size()), kThreads, 0, s>>>(in_grad[1].dptr_as<T>(), label.Size(), T(0));
        CheckLaunch(name_ + " label gradient");
      }
      if (req[0] == kNullOp) return;
      const double num_output = static_cast<double>(label.Size()) / static_cast<double>(label.shape[0]);
      RegressionBackwardKernel<T><<<Blocks(n), kThreads, 0, s>>>(kind_, out_data[0].dptr_as<T>(), label.dptr_as<T>(),
                                                                 in_grad[0].dptr_as<T>(), n, req[0],
                                                                 static_cast<T>(p_.grad_scale / num_output));
      CheckLaunch(name_ + " backward");
    });
  }

 private:
  RegressionOutputParam p_;
  RegressionKind kind_;
  std::string name_;
};

// ------------------------------------------------------------------------------------------ factories
std::unique_ptr<Operator> MakeRegression(const OperatorProperty& p, Context) {
  const auto& r = static_cast<const RegressionOutputProp&>(p);
  return std::make_unique<RegressionOutputGpuOp>(r.param(), r.kind(), r.TypeString());
}
std::unique_ptr<Operator> MakeSoftmax(const OperatorProperty& p, Context) {
  const auto& s = static_cast<const SoftmaxProp&>(p);
  return std::make_unique<SoftmaxGpuOp>(s.param(), s.log(), s.temperature());
}

const bool kActivationGpu = RegisterGpuOperator("Activation", [](const OperatorProperty& p, Context) {
  return std::unique_ptr<Operator>(std::make_unique<ActivationGpuOp>(static_cast<const ActivationProp&>(p).param()));
});
const bool kLeakyReLUGpu = RegisterGpuOperator("LeakyReLU", [](const OperatorProperty& p, Context) {
  return std::unique_ptr<Operator>(std::make_unique<LeakyReLUGpuOp>(static_cast<const LeakyReLUProp&>(p).param()));
});
const bool kBatchNormGpu = RegisterGpuOperator("BatchNorm", [](const OperatorProperty& p, Context) {
  return std::unique_ptr<Operator>(std::make_unique<BatchNormGpuOp>(static_cast<const BatchNormProp&>(p).param()));
});
const bool kDropoutGpu = RegisterGpuOperator("Dropout", [](const OperatorProperty& p, Context) {
  return std::unique_ptr<Operator>(std::make_unique<DropoutGpuOp>(static_cast<const DropoutProp&>(p).param()));
});
const bool kSoftmaxGpu = RegisterGpuOperator("softmax", MakeSoftmax);
const bool kLogSoftmaxGpu = RegisterGpuOperator("log_softmax", MakeSoftmax);
const bool kSoftmaxOutputGpu = RegisterGpuOperator("SoftmaxOutput", [](const OperatorProperty& p, Context) {
  return std::unique_ptr<Operator>(std::make_unique<SoftmaxOutputGpuOp>(static_cast<const SoftmaxOutputProp&>(p)));
});
const bool kLinearRegressionGpu = RegisterGpuOperator("LinearRegressionOutput", MakeRegression);
const bool kLogisticRegressionGpu = RegisterGpuOperator("LogisticRegressionOutput", MakeRegression);
const bool kMaeRegressionGpu = RegisterGpuOperator("MAERegressionOutput", MakeRegression);

}  // namespace

}  // namespace troupe
