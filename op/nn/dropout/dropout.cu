// Dropout on the GPU: Philox numbers drawn in the kernel from the kRandom generator's key and Reserve()d
// counter: the same numbers as the CPU version for the same key and counter.
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
#include "op/nn/dropout/dropout.h"
#include "tensor/resource.h"

namespace troupe {

namespace {

using internal::Blocks;
using internal::CheckLaunch;
using internal::kThreads;
using internal::SetDevice;
using internal::StreamOf;

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

const bool kDropoutGpu = RegisterGpuOperator("Dropout", [](const OperatorProperty& p, Context) {
  return std::unique_ptr<Operator>(std::make_unique<DropoutGpuOp>(static_cast<const DropoutProp&>(p).param()));
});

}  // namespace

}  // namespace troupe
