// _contrib_ROIAlign on the GPU: roi_align.h's arithmetic (MXNet's, in the element type), one thread per output
// element forward (its bin's samples summed in the CPU's order) and one per head-gradient element backward,
// adding its samples' shares to the data gradient with atomicAdd (as MXNet's GPU kernel does: the sums may
// round in another order than the CPU's). The ROIs are checked as on the CPU (a batch index past the data's
// images; with aligned, an empty ROI) on a host copy of them, which synchronises the stream once per call.
// A ROI with a negative batch index gives zeros; the ROIs get a zero gradient. float32 and float64.
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
#include "op/nn/roi_align/roi_align.h"
#include "tensor/detail/cuda_common.h"

namespace troupe {

namespace {

using internal::Blocks;
using internal::Check;
using internal::CheckLaunch;
using internal::kThreads;
using nn_cuda::Prepare;
using roi_align::Bilinear;
using roi_align::Dims;
using roi_align::InputChannel;
using roi_align::kOp;
using roi_align::RoiGeometry;
using roi_align::Sample;

// What every kernel needs besides the pointers.
struct Config {
  Dims d;
  float spatial_scale;
  int sample_ratio;
  bool aligned;
};

template <typename T>
__global__ void ForwardKernel(const T* data, const T* rois, T* y, Config cfg, OpReqType req) {
  const Dims& d = cfg.d;
  TROUPE_GRID_LOOP(i, d.rois * d.channels_out * d.ph * d.pw) {
    const int pw = static_cast<int>(i % d.pw), ph = static_cast<int>((i / d.pw) % d.ph);
    const std::int64_t c = (i / (static_cast<std::int64_t>(d.pw) * d.ph)) % d.channels_out;
    const std::int64_t n = i / (static_cast<std::int64_t>(d.pw) * d.ph * d.channels_out);
    const T* roi = rois + n * 5;
    const std::int64_t batch_ind = roi_align::BatchIndex(roi[0]);
    T v = 0;
    if (batch_ind >= 0) {
      const RoiGeometry<T> g = roi_align::GeometryOf(roi, d, cfg.spatial_scale, cfg.sample_ratio, cfg.aligned);
      const T* plane = data + (batch_ind * d.channels_in + InputChannel(d, c, ph, pw)) * d.height * d.width;
      for (int iy = 0; iy < g.grid_h; ++iy) {
        const T yy = g.Y(ph, iy);
        for (int ix = 0; ix < g.grid_w; ++ix) {
          const Sample<T> sm = Bilinear<T>(d.height, d.width, yy, g.X(pw, ix));
          v += sm.w[0] * plane[sm.pos[0]] + sm.w[1] * plane[sm.pos[1]] + sm.w[2] * plane[sm.pos[2]] +
               sm.w[3] * plane[sm.pos[3]];
        }
      }
      v /= g.count;
    }
    Assign(y + i, req, v);
  }
}

template <typename T>
__global__ void BackwardKernel(const T* og, const T* rois, T* gx, Config cfg) {
  const Dims& d = cfg.d;
  TROUPE_GRID_LOOP(i, d.rois * d.channels_out * d.ph * d.pw) {
    const int pw = static_cast<int>(i % d.pw), ph = static_cast<int>((i / d.pw) % d.ph);
    const std::int64_t c = (i / (static_cast<std::int64_t>(d.pw) * d.ph)) % d.channels_out;
    const std::int64_t n = i / (static_cast<std::int64_t>(d.pw) * d.ph * d.channels_out);
    const T* roi = rois + n * 5;
    const std::int64_t batch_ind = roi_align::BatchIndex(roi[0]);
    if (batch_ind < 0) continue;
    const RoiGeometry<T> g = roi_align::GeometryOf(roi, d, cfg.spatial_scale, cfg.sample_ratio, cfg.aligned);
    T* plane = gx + (batch_ind * d.channels_in + InputChannel(d, c, ph, pw)) * d.height * d.width;
    const T top = og[i];
    for (int iy = 0; iy < g.grid_h; ++iy) {
      const T yy = g.Y(ph, iy);
      for (int ix = 0; ix < g.grid_w; ++ix) {
        const Sample<T> sm = Bilinear<T>(d.height, d.width, yy, g.X(pw, ix));
        if (!sm.inside) continue;
        for (int q = 0; q < 4; ++q) atomicAdd(plane + sm.pos[q], top * sm.w[q] / g.count);
      }
    }
  }
}

class ROIAlignGpuOp final : public Operator {
 public:
  explicit ROIAlignGpuOp(const ROIAlignParam& p) : p_(p) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    internal::FloatSwitch(in[0].dtype, kOp, [&](auto tag) {
      using T = decltype(tag);
      cudaStream_t s = Prepare(ctx.run_ctx, kOp);
      const Config cfg = ConfigOf(in[0].shape, in[1].shape);
      CheckRois<T>(in[1], cfg.d, p_.aligned, s);
      const std::int64_t n = out[0].Size();
      if (n == 0) return;
      ForwardKernel<T><<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(in[0].dptr),
                                                      static_cast<const T*>(in[1].dptr), static_cast<T*>(out[0].dptr),
                                                      cfg, req[0]);
      CheckLaunch("ROIAlign kernel", kOp);
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    cudaStream_t s = Prepare(ctx.run_ctx, kOp);
    nn_cuda::ZeroIfWritten(in_grad[1], req[1], s, kOp);
    if (req[0] == kNullOp) return;
    internal::FloatSwitch(in_grad[0].dtype, kOp, [&](auto tag) {
      using T = decltype(tag);
      const Config cfg = ConfigOf(in_grad[0].shape, in[1].shape);
      CheckRois<T>(in[1], cfg.d, false, s);  // as the CPU's backward: the batch index only
      nn_cuda::ZeroIfWritten(in_grad[0], req[0], s, kOp);
      const std::int64_t n = out_grad[0].Size();
      if (n == 0) return;
      BackwardKernel<T><<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(out_grad[0].dptr),
                                                       static_cast<const T*>(in[1].dptr),
                                                       static_cast<T*>(in_grad[0].dptr), cfg);
      CheckLaunch("ROIAlign gradient kernel", kOp);
    });
  }

 private:
  Config ConfigOf(const TShape& data, const TShape& rois) const {
    return {roi_align::DimsOf(p_, data, rois), p_.spatial_scale, p_.sample_ratio, p_.aligned};
  }

  // The CPU operator's checks on a host copy of the ROIs (synchronises the stream).
  template <typename T>
  void CheckRois(const TBlob& rois, const Dims& d, bool aligned, cudaStream_t s) const {
    if (rois.Size() == 0) return;
    std::vector<T> host(static_cast<std::size_t>(rois.Size()));
    Check(cudaMemcpyAsync(host.data(), rois.dptr, rois.Bytes(), cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync", kOp);
    Check(cudaStreamSynchronize(s), "cudaStreamSynchronize", kOp);
    for (std::int64_t n = 0; n < d.rois; ++n) roi_align::CheckRoi(host.data() + n * 5, d, p_.spatial_scale, aligned);
  }

  ROIAlignParam p_;
};

[[maybe_unused]] const bool kGpuRegistered = [] {
  RegisterGpuOperator(kOp, [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
    ROIAlignParam param;
    param.Init(p.GetParams(), kOp);
    return std::make_unique<ROIAlignGpuOp>(param);
  });
  return true;
}();

}  // namespace

}  // namespace troupe
