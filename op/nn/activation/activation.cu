// Activation on the GPU: cuDNN forward for relu/sigmoid/tanh and cuDNN backward for relu; CUDA kernels for
// softrelu/softsign, and for the sigmoid/tanh backward (cuDNN's backward takes the input x, which troupe
// does not keep for these: it differentiates from the output as MXNet's CPU code does, so an in-place
// forward stays legal).
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
#include "op/nn/activation/activation.h"
#include "tensor/resource.h"

namespace troupe {

namespace {

using internal::Blocks;
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

const bool kActivationGpu = RegisterGpuOperator("Activation", [](const OperatorProperty& p, Context) {
  return std::unique_ptr<Operator>(std::make_unique<ActivationGpuOp>(static_cast<const ActivationProp&>(p).param()));
});

}  // namespace

}  // namespace troupe
