// _contrib_ROIAlign as MXNet 1.9's (src/operator/contrib/roi_align.cc): the property and the CPU operator,
// float32 and float64. The GPU operator is roi_align.cu; the arithmetic both share is roi_align.h.
//
// data (B, C, H, W) and rois (R, 5) rows [batch_index, x1, y1, x2, y2] in image coordinates give
// (R, C, ph, pw) (position_sensitive: (R, C / (ph * pw), ph, pw), each output bin reading its own channel).
// Each bin averages a grid of bilinear samples (sample_ratio per side, or ceil(roi size / pooled size) when
// it is <= 0). Without `aligned` a ROI is at least 1x1; with it coordinates shift by half a pixel
// (Detectron2) and an empty ROI is an error. The arithmetic follows MXNet's kernel step for step in the
// element type, so that float32 results agree to the rounding. A ROI with a negative batch index gives
// zeros (MXNet zeroes only one element of it and leaves the rest unwritten). The rois get a zero gradient.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "op/internal/op_util.h"
#include "op/nn/roi_align/roi_align.h"
#include "op/operator.h"
#include "op/param.h"

namespace troupe {

namespace {

using internal::FloatSwitch;
using roi_align::Bilinear;
using roi_align::CheckRoi;
using roi_align::Dims;
using roi_align::InputChannel;
using roi_align::kOp;
using roi_align::RoiGeometry;
using roi_align::Sample;

class ROIAlignOp final : public Operator {
 public:
  explicit ROIAlignOp(const ROIAlignParam& p) : p_(p) {}

  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    FloatSwitch(in[0].dtype, kOp, [&](auto tag) {
      using T = decltype(tag);
      const Dims d = roi_align::DimsOf(p_, in[0].shape, in[1].shape);
      const T* data = in[0].dptr_as<T>();
      const T* rois = in[1].dptr_as<T>();
      const std::int64_t bins = static_cast<std::int64_t>(d.ph) * d.pw;
      std::vector<T> y(static_cast<std::size_t>(d.rois * d.channels_out * bins), T(0));
      std::vector<Sample<T>> samples;
      for (std::int64_t n = 0; n < d.rois; ++n) {
        CheckRoi(rois + n * 5, d, p_.spatial_scale, p_.aligned);
        const std::int64_t batch_ind = roi_align::BatchIndex(rois[n * 5]);
        if (batch_ind < 0) continue;  // zeros
        const RoiGeometry<T> g = Geometry<T>(rois + n * 5, d);
        // The samples of every bin, shared by all channels.
        samples.clear();
        for (int ph = 0; ph < d.ph; ++ph) {
          for (int pw = 0; pw < d.pw; ++pw) {
            for (int iy = 0; iy < g.grid_h; ++iy) {
              const T yy = g.Y(ph, iy);
              for (int ix = 0; ix < g.grid_w; ++ix) samples.push_back(Bilinear<T>(d.height, d.width, yy, g.X(pw, ix)));
            }
          }
        }
        for (std::int64_t c = 0; c < d.channels_out; ++c) {
          std::size_t k = 0;
          for (int ph = 0; ph < d.ph; ++ph) {
            for (int pw = 0; pw < d.pw; ++pw) {
              const T* plane = data + (batch_ind * d.channels_in + InputChannel(d, c, ph, pw)) * d.height * d.width;
              T v = 0;
              for (int s = 0; s < g.grid_h * g.grid_w; ++s, ++k) {
                const Sample<T>& sm = samples[k];
                v += sm.w[0] * plane[sm.pos[0]] + sm.w[1] * plane[sm.pos[1]] + sm.w[2] * plane[sm.pos[2]] +
                     sm.w[3] * plane[sm.pos[3]];
              }
              v /= g.count;
              y[static_cast<std::size_t>((n * d.channels_out + c) * bins + ph * d.pw + pw)] = v;
            }
          }
        }
      }
      internal::AssignEach(out[0].dptr_as<T>(), static_cast<std::int64_t>(y.size()), req[0],
                           [&](std::int64_t i) { return y[i]; });
    });
  }

  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    if (req[1] == kWriteTo || req[1] == kWriteInplace) std::memset(in_grad[1].dptr, 0, in_grad[1].Bytes());
    if (req[0] == kNullOp) return;
    FloatSwitch(in_grad[0].dtype, kOp, [&](auto tag) {
      using T = decltype(tag);
      const Dims d = roi_align::DimsOf(p_, in_grad[0].shape, in[1].shape);
      const T* og = out_grad[0].dptr_as<T>();
      const T* rois = in[1].dptr_as<T>();
      T* gx = in_grad[0].dptr_as<T>();
      if (req[0] != kAddTo) std::fill(gx, gx + in_grad[0].Size(), T(0));
      // MXNet's order: output elements (n, c, ph, pw) in turn, each adding its samples' shares.
      for (std::int64_t n = 0; n < d.rois; ++n) {
        CheckRoi(rois + n * 5, d, p_.spatial_scale, false);
        const std::int64_t batch_ind = roi_align::BatchIndex(rois[n * 5]);
        if (batch_ind < 0) continue;
        const RoiGeometry<T> g = Geometry<T>(rois + n * 5, d);
        for (std::int64_t c = 0; c < d.channels_out; ++c) {
          for (int ph = 0; ph < d.ph; ++ph) {
            for (int pw = 0; pw < d.pw; ++pw) {
              T* plane = gx + (batch_ind * d.channels_in + InputChannel(d, c, ph, pw)) * d.height * d.width;
              const T top = og[((n * d.channels_out + c) * d.ph + ph) * d.pw + pw];
              for (int iy = 0; iy < g.grid_h; ++iy) {
                const T yy = g.Y(ph, iy);
                for (int ix = 0; ix < g.grid_w; ++ix) {
                  const Sample<T> sm = Bilinear<T>(d.height, d.width, yy, g.X(pw, ix));
                  if (!sm.inside) continue;
                  for (int q = 0; q < 4; ++q) plane[sm.pos[q]] += top * sm.w[q] / g.count;
                }
              }
            }
          }
        }
      }
    });
  }

 private:
  template <typename T>
  RoiGeometry<T> Geometry(const T* roi, const Dims& d) const {
    return roi_align::GeometryOf(roi, d, p_.spatial_scale, p_.sample_ratio, p_.aligned);
  }

  ROIAlignParam p_;
};

class ROIAlignProp final : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override {
    p_.Init(kwargs, kOp);
    if (p_.pooled_size.ndim() != 2 || p_.pooled_size[0] == 0 || p_.pooled_size[1] == 0) {
      throw Error(std::string(kOp) + ": parameter 'pooled_size' is " + p_.pooled_size.ToString() +
                  " but must be two positive sizes (h, w)");
    }
  }
  Kwargs GetParams() const override { return p_.GetParams(); }
  std::vector<std::string> ListArguments() const override { return {"data", "rois"}; }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    aux->clear();
    out->resize(1);
    const TShape d = (*in)[0], r = (*in)[1];
    if (!d.known() || !r.known()) return false;
    const std::string op = kOp;
    if (d.ndim() != 4) throw Error(op + ": 'data' must be 4-D (batch, channels, height, width), got " + d.ToString());
    if (r.ndim() != 2 || r[1] != 5) {
      throw Error(op + ": 'rois' must have shape (num_rois, 5) [batch_index, x1, y1, x2, y2], got " + r.ToString());
    }
    std::int64_t c = d[1];
    if (p_.position_sensitive) {
      const std::int64_t bins = p_.pooled_size[0] * p_.pooled_size[1];
      if (c % bins != 0) {
        throw Error(op + ": with position_sensitive=True the channels (" + std::to_string(c) +
                    ") must be a multiple of pooled_size[0] * pooled_size[1] (" + std::to_string(bins) + ")");
      }
      c /= bins;
    }
    AssignShape(out, 0, TShape{r[0], c, p_.pooled_size[0], p_.pooled_size[1]}, op, "output");
    return true;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<ROIAlignProp>(*this); }
  std::string TypeString() const override { return kOp; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>&) const override {
    return {out_grad[0], in_data[1]};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // roi_align.cu
    return std::make_unique<ROIAlignOp>(p_);
  }

 private:
  ROIAlignParam p_;
};

}  // namespace

TROUPE_REGISTER_OP_PROPERTY(_contrib_ROIAlign, ROIAlignProp)
    .describe(
        "Pools each region of interest to a fixed-size map by averaging bilinear samples (Mask R-CNN's "
        "ROIAlign).")
    .add_argument("data", "NDArray-or-Symbol", "Input data to the pooling operator, a 4D Feature maps")
    .add_argument("rois", "NDArray-or-Symbol",
                  "Bounding box coordinates, a 2D array, if batchid is less than 0, it will be ignored.")
    .add_arguments(ROIAlignParam::Docs());

}  // namespace troupe
