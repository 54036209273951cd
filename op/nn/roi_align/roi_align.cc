// _contrib_ROIAlign as MXNet 1.9's (src/operator/contrib/roi_align.cc) on the CPU, float32 and float64; a GPU
// context is an error naming the operator.
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
#include "op/operator.h"
#include "op/param.h"

namespace troupe {

namespace {

using internal::FloatSwitch;

constexpr const char* kOp = "_contrib_ROIAlign";

struct ROIAlignParam : Params<ROIAlignParam> {
  TShape pooled_size;
  float spatial_scale = 0;
  int sample_ratio = -1;
  bool position_sensitive = false;
  bool aligned = false;
  static void Declare(ParamSchema<ROIAlignParam>& s) {
    s.Field("pooled_size", &ROIAlignParam::pooled_size)
        .Describe("ROI Align output roi feature map height and width: (h, w)");
    s.Field("spatial_scale", &ROIAlignParam::spatial_scale)
        .Range(0.0, 1.0)
        .Describe(
            "Ratio of input feature map height (or w) to raw image height (or w). Equals the reciprocal of "
            "total stride in convolutional layers");
    s.Field("sample_ratio", &ROIAlignParam::sample_ratio)
        .Default(-1)
        .Describe("Optional sampling ratio of ROI align, using adaptive size by default.");
    s.Field("position_sensitive", &ROIAlignParam::position_sensitive)
        .Default(false)
        .Describe(
            "Whether to perform position-sensitive RoI pooling (R-FCN's PSRoIPooling): the input channels are "
            "reduced by ph*pw times");
    s.Field("aligned", &ROIAlignParam::aligned)
        .Default(false)
        .Describe("Center-aligned ROIAlign introduced in Detectron2. To enable, set aligned to True.");
  }
};

// One bilinear sample: four positions in a (H, W) plane and their weights (all 0 outside the map).
template <typename T>
struct Sample {
  std::int64_t pos[4] = {0, 0, 0, 0};
  T w[4] = {0, 0, 0, 0};
  bool inside = false;
};

template <typename T>
Sample<T> Bilinear(std::int64_t height, std::int64_t width, T y, T x) {
  Sample<T> s;
  if (y < -1.0 || y > height || x < -1.0 || x > width) return s;
  if (y <= 0) y = 0;
  if (x <= 0) x = 0;
  auto y_low = static_cast<std::int64_t>(y), x_low = static_cast<std::int64_t>(x);
  std::int64_t y_high, x_high;
  if (y_low >= height - 1) {
    y_high = y_low = height - 1;
    y = static_cast<T>(y_low);
  } else {
    y_high = y_low + 1;
  }
  if (x_low >= width - 1) {
    x_high = x_low = width - 1;
    x = static_cast<T>(x_low);
  } else {
    x_high = x_low + 1;
  }
  const T ly = y - static_cast<T>(y_low), lx = x - static_cast<T>(x_low);
  const T hy = static_cast<T>(1. - ly), hx = static_cast<T>(1. - lx);
  s.w[0] = hy * hx;
  s.w[1] = hy * lx;
  s.w[2] = ly * hx;
  s.w[3] = ly * lx;
  s.pos[0] = y_low * width + x_low;
  s.pos[1] = y_low * width + x_high;
  s.pos[2] = y_high * width + x_low;
  s.pos[3] = y_high * width + x_high;
  s.inside = true;
  return s;
}

// The sampling geometry of one ROI.
template <typename T>
struct RoiGeometry {
  std::int64_t batch = 0;
  T start_h = 0, start_w = 0, bin_h = 0, bin_w = 0;
  int grid_h = 1, grid_w = 1;
  T count = 1;
  // The sample (iy, ix) of bin (ph, pw), as MXNet computes it.
  T Y(int ph, int iy) const {
    return start_h + static_cast<T>(ph) * bin_h + static_cast<T>(iy + .5f) * bin_h / static_cast<T>(grid_h);
  }
  T X(int pw, int ix) const {
    return start_w + static_cast<T>(pw) * bin_w + static_cast<T>(ix + .5f) * bin_w / static_cast<T>(grid_w);
  }
};

struct Dims {
  std::int64_t batch, channels_in, height, width, rois, channels_out;
  int ph, pw;
};

class ROIAlignOp final : public Operator {
 public:
  explicit ROIAlignOp(const ROIAlignParam& p) : p_(p) {}

  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    FloatSwitch(in[0].dtype, kOp, [&](auto tag) {
      using T = decltype(tag);
      const Dims d = DimsOf(in[0].shape, in[1].shape);
      const T* data = in[0].dptr_as<T>();
      const T* rois = in[1].dptr_as<T>();
      const std::int64_t bins = static_cast<std::int64_t>(d.ph) * d.pw;
      std::vector<T> y(static_cast<std::size_t>(d.rois * d.channels_out * bins), T(0));
      std::vector<Sample<T>> samples;
      for (std::int64_t n = 0; n < d.rois; ++n) {
        const std::int64_t batch_ind = BatchIndex(rois[n * 5], d);
        if (batch_ind < 0) continue;  // zeros
        const RoiGeometry<T> g = Geometry(rois + n * 5, d, true);
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
              const T* plane = data + (batch_ind * d.channels_in + InputChannel(c, ph, pw)) * d.height * d.width;
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
      const Dims d = DimsOf(in_grad[0].shape, in[1].shape);
      const T* og = out_grad[0].dptr_as<T>();
      const T* rois = in[1].dptr_as<T>();
      T* gx = in_grad[0].dptr_as<T>();
      if (req[0] != kAddTo) std::fill(gx, gx + in_grad[0].Size(), T(0));
      // MXNet's order: output elements (n, c, ph, pw) in turn, each adding its samples' shares.
      for (std::int64_t n = 0; n < d.rois; ++n) {
        const std::int64_t batch_ind = BatchIndex(rois[n * 5], d);
        if (batch_ind < 0) continue;
        const RoiGeometry<T> g = Geometry(rois + n * 5, d, false);
        for (std::int64_t c = 0; c < d.channels_out; ++c) {
          for (int ph = 0; ph < d.ph; ++ph) {
            for (int pw = 0; pw < d.pw; ++pw) {
              T* plane = gx + (batch_ind * d.channels_in + InputChannel(c, ph, pw)) * d.height * d.width;
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
  Dims DimsOf(const TShape& data, const TShape& rois) const {
    Dims d;
    d.batch = data[0];
    d.channels_in = data[1];
    d.height = data[2];
    d.width = data[3];
    d.rois = rois[0];
    d.ph = static_cast<int>(p_.pooled_size[0]);
    d.pw = static_cast<int>(p_.pooled_size[1]);
    d.channels_out = p_.position_sensitive ? d.channels_in / (static_cast<std::int64_t>(d.ph) * d.pw) : d.channels_in;
    return d;
  }
  template <typename T>
  static std::int64_t BatchIndex(T v, const Dims& d) {
    const auto b = static_cast<std::int64_t>(static_cast<int>(v));
    if (b >= d.batch) {
      throw Error(std::string(kOp) + ": a ROI has batch index " + std::to_string(b) + " but the data has " +
                  std::to_string(d.batch) + " images");
    }
    return b;
  }
  std::int64_t InputChannel(std::int64_t c, int ph, int pw) const {
    if (!p_.position_sensitive) return c;
    return (c * p_.pooled_size[0] + ph) * p_.pooled_size[1] + pw;
  }
  template <typename T>
  RoiGeometry<T> Geometry(const T* roi, const Dims& d, bool check) const {
    RoiGeometry<T> g;
    const T scale = static_cast<T>(p_.spatial_scale);
    const T offset = p_.aligned ? static_cast<T>(0.5) : static_cast<T>(0);
    g.start_w = roi[1] * scale - offset;
    g.start_h = roi[2] * scale - offset;
    const T end_w = roi[3] * scale - offset;
    const T end_h = roi[4] * scale - offset;
    T roi_w = end_w - g.start_w, roi_h = end_h - g.start_h;
    if (p_.aligned) {
      if (check && !(roi_w > 0 && roi_h > 0)) {
        throw Error(std::string(kOp) +
                    ": with aligned=True every ROI needs a positive width and height (x2 > x1, "
                    "y2 > y1)");
      }
    } else {
      // Malformed ROIs become 1x1.
      roi_w = std::max(roi_w, static_cast<T>(1.));
      roi_h = std::max(roi_h, static_cast<T>(1.));
    }
    g.bin_h = roi_h / static_cast<T>(d.ph);
    g.bin_w = roi_w / static_cast<T>(d.pw);
    g.grid_h = p_.sample_ratio > 0 ? p_.sample_ratio : static_cast<int>(std::ceil(roi_h / static_cast<T>(d.ph)));
    g.grid_w = p_.sample_ratio > 0 ? p_.sample_ratio : static_cast<int>(std::ceil(roi_w / static_cast<T>(d.pw)));
    g.count = static_cast<T>(g.grid_h * g.grid_w);
    return g;
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
    if (ctx.is_gpu()) internal::ThrowNoImplementation(kOp, ctx);
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
