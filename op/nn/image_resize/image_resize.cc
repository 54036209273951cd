// Resizing of 4-D (N, C, H, W) images: _contrib_AdaptiveAvgPooling2D and _contrib_BilinearResize2D, as MXNet
// 1.9's (src/operator/contrib/adaptive_avg_pooling*, bilinear_resize*): the properties and the CPU
// operators. The GPU operators are image_resize.cu.
//
// AdaptiveAvgPooling2D(output_size): output_size () gives 1x1, (s,) gives s x s, (h, w) gives h x w (a longer
// tuple gives 1x1, as in MXNet). Output (oh, ow) averages the input window
//   rows [floor(oh * H / OH), ceil((oh + 1) * H / OH)), columns likewise,
// with the bounds computed in float as MXNet does; windows may overlap, and backward adds each output's
// gradient / (window size) to every position of its window.
//
// BilinearResize2D(height, width, scale_height, scale_width, mode, align_corners=True):
//   mode 'size': height x width, or int(scale_height * H) x int(scale_width * W) when scale_height is given
//     (MXNet looks at scale_height for both: scale_width alone is ignored, and scale_height needs
//     scale_width); 'odd_scale': an odd size s becomes int((s - 1) * scale) + 1, an even one int(s * scale);
//     'like': the second input's H and W (that input gets a zero gradient); 'to_even_down', 'to_even_up',
//     'to_odd_down', 'to_odd_up': the nearest even or odd size below or above (the size itself when it fits).
//   Output pixel (h, w) reads the input at source coordinates computed in float:
//     align_corners: src = h * (H - 1) / (OH - 1);  otherwise src = max((h + 0.5) * H / OH - 0.5, 0)
//   (a scale of 0 for an output size of 1), interpolating between floor(src) and the next pixel (the last
//   pixel clamps) with weights taken in float, as MXNet does also for float64. Equal sizes copy. Backward
//   distributes each output gradient over the four input pixels with the same weights.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/error.h"
#include "op/internal/op_util.h"
#include "op/nn/image_resize/image_resize.h"
#include "op/operator.h"
#include "op/param.h"

namespace troupe {

namespace {

using image_resize::PixelScale;
using image_resize::Tap;
using image_resize::TapAt;
using image_resize::WindowEnd;
using image_resize::WindowStart;
using internal::FloatSwitch;

// 'data' must be 4-D; returns its shape or throws naming the operator.
void Check4D(const TShape& d, const std::string& op, const std::string& arg) {
  if (d.ndim() != 4)
    throw Error(op + ": '" + arg + "' must be 4-D (batch, channel, height, width), got " + d.ToString());
}

// ------------------------------------------------------------------------------- AdaptiveAvgPooling2D

constexpr const char* kAdaptive = "_contrib_AdaptiveAvgPooling2D";

class AdaptiveAvgPoolOp final : public Operator {
 public:
  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const TShape& is = in[0].shape;
    const TShape& os = out[0].shape;
    FloatSwitch(in[0].dtype, kAdaptive, [&](auto tag) {
      using T = decltype(tag);
      const T* x = in[0].dptr_as<T>();
      T* y = out[0].dptr_as<T>();
      for (std::int64_t p = 0; p < is[0] * is[1]; ++p) {
        const T* xs = x + p * is[2] * is[3];
        T* ys = y + p * os[2] * os[3];
        for (std::int64_t oh = 0; oh < os[2]; ++oh) {
          const std::int64_t h0 = WindowStart(oh, os[2], is[2]), h1 = WindowEnd(oh, os[2], is[2]);
          for (std::int64_t ow = 0; ow < os[3]; ++ow) {
            const std::int64_t w0 = WindowStart(ow, os[3], is[3]), w1 = WindowEnd(ow, os[3], is[3]);
            double sum = 0;
            for (std::int64_t h = h0; h < h1; ++h) {
              for (std::int64_t w = w0; w < w1; ++w) sum += xs[h * is[3] + w];
            }
            Assign(ys + oh * os[3] + ow, req[0],
                   static_cast<T>(sum / static_cast<double>(w1 - w0) / static_cast<double>(h1 - h0)));
          }
        }
      }
    });
  }

  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const TShape& is = in_grad[0].shape;
    const TShape& os = out_grad[0].shape;
    FloatSwitch(in_grad[0].dtype, kAdaptive, [&](auto tag) {
      using T = decltype(tag);
      const T* og = out_grad[0].dptr_as<T>();
      T* gx = in_grad[0].dptr_as<T>();
      if (req[0] != kAddTo) std::fill(gx, gx + in_grad[0].Size(), T(0));
      for (std::int64_t p = 0; p < is[0] * is[1]; ++p) {
        T* gs = gx + p * is[2] * is[3];
        const T* ogs = og + p * os[2] * os[3];
        for (std::int64_t oh = 0; oh < os[2]; ++oh) {
          const std::int64_t h0 = WindowStart(oh, os[2], is[2]), h1 = WindowEnd(oh, os[2], is[2]);
          for (std::int64_t ow = 0; ow < os[3]; ++ow) {
            const std::int64_t w0 = WindowStart(ow, os[3], is[3]), w1 = WindowEnd(ow, os[3], is[3]);
            const T delta = ogs[oh * os[3] + ow] / static_cast<T>(h1 - h0) / static_cast<T>(w1 - w0);
            for (std::int64_t h = h0; h < h1; ++h) {
              for (std::int64_t w = w0; w < w1; ++w) gs[h * is[3] + w] += delta;
            }
          }
        }
      }
    });
  }
};

class AdaptiveAvgPoolProp final : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override { p_.Init(kwargs, kAdaptive); }
  Kwargs GetParams() const override { return p_.GetParams(); }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    in->resize(1);
    aux->clear();
    TShape d = (*in)[0];
    if (!d.known()) return false;
    Check4D(d, kAdaptive, "data");
    const auto& s = p_.output_size;
    for (std::int64_t v : s) {
      if (v < 1) {
        throw Error(std::string(kAdaptive) + ": parameter 'output_size' must hold sizes >= 1, got " +
                    param_detail::PrintTuple(s));
      }
    }
    d[2] = s.size() == 1 || s.size() == 2 ? s[0] : 1;
    d[3] = s.size() == 1 ? s[0] : (s.size() == 2 ? s[1] : 1);
    *out = {d};
    return true;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<AdaptiveAvgPoolProp>(*this); }
  std::string TypeString() const override { return kAdaptive; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>&,
                                             const std::vector<int>&) const override {
    return {out_grad[0]};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // image_resize.cu
    return std::make_unique<AdaptiveAvgPoolOp>();
  }

 private:
  AdaptiveAvgPoolParam p_;
};

// ---------------------------------------------------------------------------------- BilinearResize2D

constexpr const char* kBilinear = "_contrib_BilinearResize2D";

class BilinearResizeOp final : public Operator {
 public:
  explicit BilinearResizeOp(const BilinearResizeParam& p) : p_(p) {}

  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const TShape& is = in[0].shape;
    const TShape& os = out[0].shape;
    FloatSwitch(in[0].dtype, kBilinear, [&](auto tag) {
      using T = decltype(tag);
      const T* x = in[0].dptr_as<T>();
      T* y = out[0].dptr_as<T>();
      const bool copy = is[2] == os[2] && is[3] == os[3];
      const float rh = PixelScale(is[2], os[2], p_.align_corners), rw = PixelScale(is[3], os[3], p_.align_corners);
      for (std::int64_t h = 0; h < os[2]; ++h) {
        const Tap<T> th = TapAt<T>(rh, h, is[2], p_.align_corners);
        for (std::int64_t w = 0; w < os[3]; ++w) {
          const Tap<T> tw = TapAt<T>(rw, w, is[3], p_.align_corners);
          for (std::int64_t p = 0; p < is[0] * is[1]; ++p) {
            const T* xs = x + p * is[2] * is[3];
            T v;
            if (copy) {
              v = xs[h * is[3] + w];
            } else {
              const T* p00 = xs + th.i0 * is[3] + tw.i0;
              const T* p10 = p00 + th.step * is[3];
              v = th.l0 * (tw.l0 * p00[0] + tw.l1 * p00[tw.step]) + th.l1 * (tw.l0 * p10[0] + tw.l1 * p10[tw.step]);
            }
            Assign(y + p * os[2] * os[3] + h * os[3] + w, req[0], v);
          }
        }
      }
    });
  }

  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    const TShape& os = out_grad[0].shape;
    FloatSwitch(out_grad[0].dtype, kBilinear, [&](auto tag) {
      using T = decltype(tag);
      if (in_grad.size() > 1 && req[1] != kNullOp && req[1] != kAddTo) {  // 'like' gets no gradient
        T* gl = in_grad[1].dptr_as<T>();
        std::fill(gl, gl + in_grad[1].Size(), T(0));
      }
      if (req[0] == kNullOp) return;
      const TShape& is = in_grad[0].shape;
      const T* og = out_grad[0].dptr_as<T>();
      T* gx = in_grad[0].dptr_as<T>();
      if (req[0] != kAddTo) std::fill(gx, gx + in_grad[0].Size(), T(0));
      const bool copy = is[2] == os[2] && is[3] == os[3];
      const float rh = PixelScale(is[2], os[2], p_.align_corners), rw = PixelScale(is[3], os[3], p_.align_corners);
      // Output positions in MXNet's order, channels innermost, each adding in T.
      for (std::int64_t h = 0; h < os[2]; ++h) {
        const Tap<T> th = TapAt<T>(rh, h, is[2], p_.align_corners);
        for (std::int64_t w = 0; w < os[3]; ++w) {
          const Tap<T> tw = TapAt<T>(rw, w, is[3], p_.align_corners);
          for (std::int64_t p = 0; p < is[0] * is[1]; ++p) {
            T* gs = gx + p * is[2] * is[3];
            const T g = og[p * os[2] * os[3] + h * os[3] + w];
            if (copy) {
              gs[h * is[3] + w] += g;
              continue;
            }
            T* p00 = gs + th.i0 * is[3] + tw.i0;
            T* p10 = p00 + th.step * is[3];
            p00[0] += th.l0 * tw.l0 * g;
            p00[tw.step] += th.l0 * tw.l1 * g;
            p10[0] += th.l1 * tw.l0 * g;
            p10[tw.step] += th.l1 * tw.l1 * g;
          }
        }
      }
    });
  }

 private:
  BilinearResizeParam p_;
};

class BilinearResizeProp final : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override {
    p_.Init(kwargs, kBilinear);
    const std::string op = kBilinear;
    if (p_.mode == "size" && p_.scale_height && !p_.scale_width) {
      throw Error(op + ": mode 'size' with scale_height needs scale_width as well (MXNet scales both or neither)");
    }
    if (p_.mode == "odd_scale" && (!p_.scale_height || !p_.scale_width)) {
      throw Error(op + ": mode 'odd_scale' needs both scale_height and scale_width");
    }
  }
  Kwargs GetParams() const override { return p_.GetParams(); }
  std::vector<std::string> ListArguments() const override {
    if (p_.mode == "like") return {"data", "like"};
    return {"data"};
  }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    const bool like = p_.mode == "like";
    in->resize(like ? 2 : 1);
    aux->clear();
    TShape d = (*in)[0];
    if (!d.known()) return false;
    Check4D(d, kBilinear, "data");
    const std::int64_t H = d[2], W = d[3];
    std::int64_t oh = 0, ow = 0;
    const std::string& m = p_.mode;
    if (m == "size") {
      if (p_.scale_height) {
        oh = static_cast<std::int64_t>(*p_.scale_height * static_cast<float>(H));
        ow = static_cast<std::int64_t>(*p_.scale_width * static_cast<float>(W));
      } else {
        oh = p_.height;
        ow = p_.width;
      }
    } else if (m == "odd_scale") {
      oh = H % 2 == 0 ? static_cast<std::int64_t>(static_cast<float>(H) * *p_.scale_height)
                      : static_cast<std::int64_t>(static_cast<float>(H - 1) * *p_.scale_height) + 1;
      ow = W % 2 == 0 ? static_cast<std::int64_t>(static_cast<float>(W) * *p_.scale_width)
                      : static_cast<std::int64_t>(static_cast<float>(W - 1) * *p_.scale_width) + 1;
    } else if (like) {
      const TShape& l = (*in)[1];
      if (!l.known()) return false;
      Check4D(l, kBilinear, "like");
      oh = l[2];
      ow = l[3];
    } else {
      const bool even = m == "to_even_down" || m == "to_even_up";
      const bool up = m == "to_even_up" || m == "to_odd_up";
      const auto fit = [&](std::int64_t s) {
        if ((s % 2 == 0) == even) return s;
        return up ? s + 1 : s - 1;
      };
      oh = fit(H);
      ow = fit(W);
    }
    if (oh < 1 || ow < 1) {
      throw Error(std::string(kBilinear) + ": the output size " + std::to_string(oh) + "x" + std::to_string(ow) +
                  " for input " + d.ToString() + " (mode '" + m + "') is empty");
    }
    d[2] = oh;
    d[3] = ow;
    *out = {d};
    return true;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<BilinearResizeProp>(*this); }
  std::string TypeString() const override { return kBilinear; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>&,
                                             const std::vector<int>&) const override {
    return {out_grad[0]};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // image_resize.cu
    return std::make_unique<BilinearResizeOp>(p_);
  }

 private:
  BilinearResizeParam p_;
};

}  // namespace

TROUPE_REGISTER_OP_PROPERTY(_contrib_AdaptiveAvgPooling2D, AdaptiveAvgPoolProp)
    .describe("2-D adaptive average pooling of NCHW input to a given output size.")
    .add_argument("data", "NDArray-or-Symbol", "Input data")
    .add_arguments(AdaptiveAvgPoolParam::Docs());

TROUPE_REGISTER_OP_PROPERTY(_contrib_BilinearResize2D, BilinearResizeProp)
    .describe("Bilinear resizing (up or down) of NCHW input.")
    .add_argument("data", "NDArray-or-Symbol", "Input data")
    .add_argument("like", "NDArray-or-Symbol", "Resize data to its shape (mode 'like')")
    .add_arguments(BilinearResizeParam::Docs());

}  // namespace troupe
