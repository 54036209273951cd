// SequenceMask on the GPU: one thread per element, sequence.h's masking rule with each sequence's length read
// on the device (any number type, truncated as on the CPU); float32 and float64 data. The gradient is masked
// with zeros; the length gets none. SequenceLast and SequenceReverse stay CPU-only (they check the lengths on
// the host).
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
#include "op/nn/sequence/sequence.h"
#include "tensor/detail/cuda_common.h"

namespace troupe {

namespace {

using internal::Blocks;
using internal::CheckLaunch;
using internal::kThreads;
using nn_cuda::Prepare;
using sequence::SeqView;

constexpr const char* kName = "SequenceMask";

// y[i] (req)= x[i], or `fill` where its step is at or after its sequence's length (lengths null: full length).
template <typename T, typename I>
__global__ void MaskKernel(const T* x, const I* lengths, T fill, T* y, SeqView v, OpReqType req) {
  TROUPE_GRID_LOOP(i, v.d0 * v.d1 * v.rest) {
    const std::int64_t p = i / v.rest, a0 = p / v.d1, a1 = p % v.d1;
    const std::int64_t t = v.axis == 0 ? a0 : a1, b = v.axis == 0 ? a1 : a0;
    const std::int64_t len = lengths != nullptr ? static_cast<std::int64_t>(lengths[b]) : v.steps;
    Assign(y + i, req, sequence::Masked(x[i], fill, t, len));
  }
}

class SequenceMaskGpuOp final : public Operator {
 public:
  explicit SequenceMaskGpuOp(const sequence::SequenceParam& p) : p_(p) {}
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    Mask(in, in[0], out[0], static_cast<double>(p_.value), req[0], ctx.run_ctx);
  }
  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    if (p_.use_sequence_length) nn_cuda::ZeroIfWritten(in_grad[1], req[1], Prepare(ctx.run_ctx, kName), kName);
    if (req[0] == kNullOp) return;
    Mask(in, out_grad[0], in_grad[0], 0.0, req[0], ctx.run_ctx);
  }

 private:
  // to (req)= from masked with `fill`; the lengths are in[1] when used.
  void Mask(const std::vector<TBlob>& in, const TBlob& from, const TBlob& to, double fill, OpReqType req,
            const RunContext& rctx) const {
    const SeqView v = sequence::ViewOf(to.shape, p_.axis);
    const std::int64_t n = to.Size();
    internal::FloatSwitch(to.dtype, kName, [&](auto tag) {
      using T = decltype(tag);
      if (n == 0) return;
      cudaStream_t s = Prepare(rctx, kName);
      const T* x = static_cast<const T*>(from.dptr);
      T* y = static_cast<T*>(to.dptr);
      if (!p_.use_sequence_length) {
        MaskKernel<T, T><<<Blocks(n), kThreads, 0, s>>>(x, nullptr, static_cast<T>(fill), y, v, req);
      } else {
        internal::NumberSwitch(in[1].dtype, kName, [&](auto length_tag) {
          using I = decltype(length_tag);
          MaskKernel<T, I>
              <<<Blocks(n), kThreads, 0, s>>>(x, static_cast<const I*>(in[1].dptr), static_cast<T>(fill), y, v, req);
        });
      }
      CheckLaunch("mask kernel", kName);
    });
  }

  sequence::SequenceParam p_;
};

[[maybe_unused]] const bool kGpuRegistered = [] {
  RegisterGpuOperator(kName, [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
    sequence::SequenceParam param;
    param.Init(p.GetParams(), kName);
    return std::make_unique<SequenceMaskGpuOp>(param);
  });
  return true;
}();

}  // namespace

}  // namespace troupe
