// LeakyReLU on the GPU: CUDA kernels (prelu's gamma gradient by a per-channel block reduction).
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
#include "op/nn/leaky_relu/leaky_relu.h"
#include "tensor/resource.h"

namespace troupe {

namespace {

using act_norm::AxisView;
using internal::Blocks;
using internal::CheckLaunch;
using internal::kThreads;
using internal::SetDevice;
using internal::StreamOf;
using nn_cuda::BlockSum;

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

const bool kLeakyReLUGpu = RegisterGpuOperator("LeakyReLU", [](const OperatorProperty& p, Context) {
  return std::unique_ptr<Operator>(std::make_unique<LeakyReLUGpuOp>(static_cast<const LeakyReLUProp&>(p).param()));
});

}  // namespace

}  // namespace troupe
