// BatchNorm on the GPU: cuDNN (spatial mode, the data seen as (outer, C, inner, 1) around the channel axis)
// for the forward passes and the training backward; the moving statistics are updated by a kernel from the
// saved mean and inverse std with the *biased* variance, as on the CPU (cuDNN's own running average would
// use the unbiased one). The backward after an inference forward (the affine map's gradient) uses kernels.
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
#include "op/nn/batch_norm/batch_norm.h"
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
using internal::StreamOf;
using internal::TensorDesc;
using nn_cuda::BlockSum;
using nn_cuda::FillKernel;

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

// dst = src (kWriteTo/kWriteInplace), dst += src (kAddTo); scale applied to src.
template <typename T>
__global__ void ApplyReqKernel(T* dst, const T* src, std::int64_t n, OpReqType req, T scale) {
  TROUPE_GRID_LOOP(i, n) { Assign(dst + i, req, src != nullptr ? src[i] * scale : T(0)); }
}

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

const bool kBatchNormGpu = RegisterGpuOperator("BatchNorm", [](const OperatorProperty& p, Context) {
  return std::unique_ptr<Operator>(std::make_unique<BatchNormGpuOp>(static_cast<const BatchNormProp&>(p).param()));
});

}  // namespace

}  // namespace troupe
