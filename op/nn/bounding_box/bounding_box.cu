// _contrib_box_decode and _contrib_box_encode on the GPU: bounding_box.h's element code, one thread per box.
// box_encode checks the matches as the CPU does (an index outside the references is an error) on a host copy
// of them, which synchronises the stream once per call. Both give every input a zero gradient, as on the CPU
// and in MXNet. float32 and float64. _contrib_box_nms has no GPU code (a GPU context is an error naming it).
//
// Kernels loop grid-stride and are enqueued on the stream the engine hands over; launch errors throw
// troupe::Error naming the operator. Registers its GPU code from a static initialiser; compiled only with
// CUDA.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "op/internal/op_util.h"
#include "op/nn/bounding_box/bounding_box.h"
#include "op/nn/common/cuda_kernels.cuh"
#include "tensor/detail/cuda_common.h"

namespace troupe {

namespace {

using bounding_box::DecodeConfig;
using internal::Blocks;
using internal::Check;
using internal::CheckLaunch;
using internal::kThreads;
using nn_cuda::Prepare;

constexpr const char* kDecode = "_contrib_box_decode";
constexpr const char* kEncode = "_contrib_box_encode";

template <typename T>
__global__ void DecodeKernel(const T* x, const T* anchors, T* y, std::int64_t boxes, std::int64_t n,
                             DecodeConfig<T> cfg, OpReqType req) {
  TROUPE_GRID_LOOP(i, boxes) {
    T o[4];
    bounding_box::DecodeBox(x + i * 4, anchors + (i % n) * 4, cfg, o);
    for (int c = 0; c < 4; ++c) Assign(y + i * 4 + c, req, o[c]);
  }
}

template <typename T>
__global__ void EncodeKernel(const T* samples, const T* matches, const T* anchors, const T* refs, const T* means,
                             const T* stds, T* targets, T* masks, std::int64_t boxes, std::int64_t n, std::int64_t m,
                             OpReqType req_t, OpReqType req_m) {
  TROUPE_GRID_LOOP(i, boxes) {
    const std::int64_t j = i / n;
    const auto match = static_cast<std::int64_t>(matches[i]);  // checked on the host
    T t[4], mk[4];
    bounding_box::EncodeBox(samples[i], refs + (j * m + match) * 4, anchors + i * 4, means, stds, t, mk);
    for (int c = 0; c < 4; ++c) {
      Assign(targets + i * 4 + c, req_t, t[c]);
      Assign(masks + i * 4 + c, req_m, mk[c]);
    }
  }
}

// Zero gradients to every input under kWriteTo / kWriteInplace.
void ZeroGrads(const OpContext& ctx, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
               const char* op) {
  cudaStream_t s = Prepare(ctx.run_ctx, op);
  for (std::size_t i = 0; i < in_grad.size(); ++i) nn_cuda::ZeroIfWritten(in_grad[i], req[i], s, op);
}

class BoxDecodeGpuOp final : public Operator {
 public:
  explicit BoxDecodeGpuOp(const BoxDecodeParam& p) : p_(p) {}
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    internal::FloatSwitch(in[0].dtype, kDecode, [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t boxes = in[0].shape[0] * in[0].shape[1], n = in[0].shape[1];
      if (boxes == 0) return;
      cudaStream_t s = Prepare(ctx.run_ctx, kDecode);
      DecodeKernel<T><<<Blocks(boxes), kThreads, 0, s>>>(
          static_cast<const T*>(in[0].dptr), static_cast<const T*>(in[1].dptr), static_cast<T*>(out[0].dptr), boxes, n,
          bounding_box::DecodeConfigOf<T>(p_), req[0]);
      CheckLaunch("box decode kernel", kDecode);
    });
  }
  void Backward(const OpContext& ctx, const std::vector<TBlob>&, const std::vector<TBlob>&, const std::vector<TBlob>&,
                const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    ZeroGrads(ctx, req, in_grad, kDecode);
  }

 private:
  BoxDecodeParam p_;
};

class BoxEncodeGpuOp final : public Operator {
 public:
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    internal::FloatSwitch(in[2].dtype, kEncode, [&](auto tag) {
      using T = decltype(tag);
      const std::int64_t n = in[2].shape[1], m = in[3].shape[1], boxes = in[2].shape[0] * n;
      if (boxes == 0) return;
      cudaStream_t s = Prepare(ctx.run_ctx, kEncode);
      // The CPU's check of the matches, on a host copy (synchronises the stream).
      std::vector<T> matches(static_cast<std::size_t>(boxes));
      Check(cudaMemcpyAsync(matches.data(), in[1].dptr, in[1].Bytes(), cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync",
            kEncode);
      Check(cudaStreamSynchronize(s), "cudaStreamSynchronize", kEncode);
      for (std::int64_t i = 0; i < boxes; ++i) {
        const auto match = static_cast<std::int64_t>(matches[static_cast<std::size_t>(i)]);
        if (match < 0 || match >= m) {
          throw Error(std::string(kEncode) + ": matches[" + std::to_string(i) + "] is " + std::to_string(match) +
                      " but refs has " + std::to_string(m) + " boxes per batch");
        }
      }
      if (req[0] == kNullOp && req[1] == kNullOp) return;
      auto p = [&](int i) { return static_cast<const T*>(in[i].dptr); };
      EncodeKernel<T><<<Blocks(boxes), kThreads, 0, s>>>(p(0), p(1), p(2), p(3), p(4), p(5),
                                                         static_cast<T*>(out[0].dptr), static_cast<T*>(out[1].dptr),
                                                         boxes, n, m, req[0], req[1]);
      CheckLaunch("box encode kernel", kEncode);
    });
  }
  void Backward(const OpContext& ctx, const std::vector<TBlob>&, const std::vector<TBlob>&, const std::vector<TBlob>&,
                const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    ZeroGrads(ctx, req, in_grad, kEncode);
  }
};

[[maybe_unused]] const bool kGpuRegistered = [] {
  RegisterGpuOperator(kDecode, [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
    BoxDecodeParam param;
    param.Init(p.GetParams(), kDecode);
    return std::make_unique<BoxDecodeGpuOp>(param);
  });
  RegisterGpuOperator(kEncode, [](const OperatorProperty&, Context) -> std::unique_ptr<Operator> {
    return std::make_unique<BoxEncodeGpuOp>();
  });
  return true;
}();

}  // namespace

}  // namespace troupe
