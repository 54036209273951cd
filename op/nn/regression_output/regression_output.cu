// The regression heads (LinearRegressionOutput, LogisticRegressionOutput, MAERegressionOutput) on the GPU:
// CUDA kernels.
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
#include "op/nn/regression_output/regression_output.h"
#include "tensor/resource.h"

namespace troupe {

namespace {

using internal::Blocks;
using internal::CheckLaunch;
using internal::kThreads;
using internal::SetDevice;
using internal::StreamOf;
using nn_cuda::FillKernel;

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
                                                                 static_cast<T>(p_.grad_scale * ctx.loss_scale / num_output));
      CheckLaunch(name_ + " backward");
    });
  }

 private:
  RegressionOutputParam p_;
  RegressionKind kind_;
  std::string name_;
};

std::unique_ptr<Operator> MakeRegression(const OperatorProperty& p, Context) {
  const auto& r = static_cast<const RegressionOutputProp&>(p);
  return std::make_unique<RegressionOutputGpuOp>(r.param(), r.kind(), r.TypeString());
}

const bool kLinearRegressionGpu = RegisterGpuOperator("LinearRegressionOutput", MakeRegression);
const bool kLogisticRegressionGpu = RegisterGpuOperator("LogisticRegressionOutput", MakeRegression);
const bool kMaeRegressionGpu = RegisterGpuOperator("MAERegressionOutput", MakeRegression);

}  // namespace

}  // namespace troupe
