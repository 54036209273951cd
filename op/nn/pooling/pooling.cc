// Pooling (2-D, NCHW, and 3-D, NCDHW; 1-D runs as 2-D: op/nn/common/lift_1d.h): max, avg and sum over
// windows, with MXNet's output sizes ('valid' floors, 'full' ceils) and MXNet's averaging rule
// (count_include_pad: divide by the window clipped to the padded input; otherwise by the part inside the image).
// Max backward sends each output gradient to the first maximum of its window (row-major scan over depth,
// height, width), as MXNet's CPU kernel does. 2-D pooling is 3-D pooling of one depth slice: one set of loops.
//
// The float32 forward pass of max and avg pooling runs oneDNN's primitive on the NCHW / NCDHW arrays where
// oneDNN computes exactly MXNet's windows (ResNet-18's 3x3 stride-2 max pooling on 64 x 112 x 112: 0.18 against
// 1.9 ms); backward stays troupe's (it finds the maxima from the input and the output, so no oneDNN
// workspace has to live from Forward to Backward), its planes in ranges on the kernel threads (CpuParallelFor).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>
#if TROUPE_HAVE_DNNL
#include "op/internal/dnnl_common.h"
#endif

#include "op/internal/float_staging.h"
#include "op/nn/common/lift_1d.h"
#include "op/nn/pooling/pooling.h"
#include "tensor/detail/kernels.h"  // CpuParallelFor

namespace troupe {

void PoolingParam::Declare(ParamSchema<PoolingParam>& s) {
  s.Field("kernel", &PoolingParam::kernel)
      .Default(TShape::Scalar())
      .Describe("Pooling kernel size: (x), (y, x) or (d, y, x). Not needed with global_pool.");
  s.Field("pool_type", &PoolingParam::pool_type)
      .Default("max")
      .Choices({"avg", "lp", "max", "sum"})
      .Describe("Pooling type to be applied ('lp' is not supported).");
  s.Field("global_pool", &PoolingParam::global_pool)
      .Default(false)
      .Describe("Ignore kernel size, do global pooling based on current input feature map.");
  s.Field("cudnn_off", &PoolingParam::cudnn_off).Default(false).Describe("Turn off cudnn pooling and use own kernels.");
  s.Field("pooling_convention", &PoolingParam::pooling_convention)
      .Default("valid")
      .Choices({"full", "same", "valid"})
      .Describe("Pooling convention to be applied: 'valid' floors the output size, 'full' ceils it "
                "('same' is not supported).");
  s.Field("stride", &PoolingParam::stride)
      .Default(TShape::Scalar())
      .Describe("Stride: for pooling (x), (y, x) or (d, y, x). Defaults to 1 for each dimension.");
  s.Field("pad", &PoolingParam::pad)
      .Default(TShape::Scalar())
      .Describe("Pad for pooling: (x), (y, x) or (d, y, x). Defaults to no padding.");
  s.Field("p_value", &PoolingParam::p_value)
      .Default(std::nullopt)
      .Describe("Value of p for Lp pooling (accepted for compatibility; Lp pooling is not supported).");
  s.Field("count_include_pad", &PoolingParam::count_include_pad)
      .Default(std::nullopt)
      .Describe("Only used for AvgPool: whether to count the padded elements when averaging (None means True).");
  s.Field("layout", &PoolingParam::layout)
      .Default("None")
      .Choices({"None", "NCDHW", "NCHW", "NCW", "NDHWC", "NHWC", "NWC"})
      .Describe("Set layout for input and output. Only NCW, NCHW and NCDHW (the default for the data's dimensions) "
                "are supported.");
}

PoolGeometry MakePoolGeometry(const PoolingParam& p, const TShape& data) {
  PoolGeometry g;
  g.spatial = data.ndim() - 2;
  SpatialValues(TShape(std::vector<std::int64_t>(data.begin() + 2, data.end())), g.spatial, &g.depth, &g.height,
                &g.width);
  g.max = p.pool_type == "max";
  g.avg = p.pool_type == "avg";
  g.full = p.pooling_convention == "full";
  g.count_include_pad = p.count_include_pad.value_or(true);
  if (p.global_pool) {
    g.kd = g.depth, g.kh = g.height, g.kw = g.width;
    g.out_d = g.out_h = g.out_w = 1;
    return g;
  }
  SpatialValues(p.kernel, g.spatial, &g.kd, &g.kh, &g.kw);
  SpatialValues(p.stride, g.spatial, &g.sd, &g.sh, &g.sw);
  SpatialValues(p.pad, g.spatial, &g.pd, &g.ph, &g.pw);
  const int n = g.spatial;
  const std::vector<std::int64_t> size = SpatialDims(n, g.depth, g.height, g.width),
                                  k = SpatialDims(n, g.kd, g.kh, g.kw), s = SpatialDims(n, g.sd, g.sh, g.sw),
                                  pad = SpatialDims(n, g.pd, g.ph, g.pw);
  std::vector<std::int64_t> out(static_cast<std::size_t>(n), -1);
  for (int i = 0; i < n; ++i) {
    if (size[i] < 0) continue;
    const std::int64_t span = size[i] + 2 * pad[i] - k[i];
    if (span < 0) {
      throw Error("Pooling: argument 'data' has shape " + data.ToString() + "; kernel " + p.kernel.ToString() +
                  " is larger than the padded input (" + std::to_string(size[i] + 2 * pad[i]) + ") in dimension " +
                  std::to_string(i + 2));
    }
    out[i] = 1 + (g.full ? (span + s[i] - 1) / s[i] : span / s[i]);
  }
  if (n == 3) g.out_d = out[0];
  g.out_h = out[n - 2];
  g.out_w = out[n - 1];
  return g;
}

namespace {

constexpr const char* kOp = "Pooling";

// Calls fn(o, window) for each output o = (od, oh, ow) of a plane, o its offset in the output plane.
template <typename Fn>
inline void ForEachOutput(const PoolGeometry& g, Fn&& fn) {
  for (std::int64_t od = 0; od < g.out_d; ++od) {
    for (std::int64_t oh = 0; oh < g.out_h; ++oh) {
      for (std::int64_t ow = 0; ow < g.out_w; ++ow) {
        fn((od * g.out_h + oh) * g.out_w + ow, PoolWindowAt(g, od, oh, ow));
      }
    }
  }
}

#if TROUPE_HAVE_DNNL
// oneDNN's pooling forward for the last input shape (forward_inference: no workspace).
class DnnlPool {
 public:
  explicit DnnlPool(const PoolingParam& p) : param_(p) {}

  // Runs the forward pass and returns true, or returns false when troupe's kernel must (another type or
  // request, or windows that oneDNN would count differently).
  bool Forward(const TBlob& x, const TBlob& y, OpReqType req) {
    if (!internal::DnnlEnabled() || x.dtype != DType::kFloat32 || req == kAddTo || x.shape[0] == 0) return false;
    try {
      if (x.shape != shape_) Prepare(x.shape);
      if (!usable_) return false;
      const auto& eng = internal::DnnlEngine();
      dnnl::stream& st = internal::DnnlStream();
      fwd_.execute(st, {{DNNL_ARG_SRC, dnnl::memory(src_, eng, x.dptr)}, {DNNL_ARG_DST, dnnl::memory(dst_, eng, y.dptr)}});
      st.wait();
      return true;
    } catch (const dnnl::error& e) {
      internal::ThrowDnnl(kOp, e);
    }
  }

 private:
  void Prepare(const TShape& x) {
    shape_ = x;
    usable_ = false;
    const PoolGeometry g = MakePoolGeometry(param_, x);
    if (!g.max && !g.avg) return;
    const int n = g.spatial;
    const std::vector<std::int64_t> out = SpatialDims(n, g.out_d, g.out_h, g.out_w);
    const std::vector<std::int64_t> size = SpatialDims(n, g.depth, g.height, g.width);
    const std::vector<std::int64_t> s = SpatialDims(n, g.sd, g.sh, g.sw), k = SpatialDims(n, g.kd, g.kh, g.kw),
                                    pl = SpatialDims(n, g.pd, g.ph, g.pw);
    dnnl::memory::dims pr;
    for (int i = 0; i < n; ++i) {
      // The right padding that gives MXNet's output size; negative (rows no window reaches) is not oneDNN's.
      pr.push_back(internal::DnnlRightPad(out[i], s[i], k[i], size[i], pl[i]));
      if (pr[i] < 0) return;
      // An average divides by the kernel's volume (with the padding) or by the part inside the image; MXNet's
      // rule agrees when no window reaches past the padded input (troupe's 'full' windows may: they are
      // clipped there).
      if (g.avg && pr[i] > pl[i]) return;
    }
    const dnnl::algorithm alg = g.max                 ? dnnl::algorithm::pooling_max
                                : g.count_include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                                      : dnnl::algorithm::pooling_avg_exclude_padding;
    src_ = internal::PlainDesc(x);
    TShape y = x;
    for (int i = 0; i < n; ++i) y[2 + i] = out[i];
    dst_ = internal::PlainDesc(y);
    try {
      const dnnl::pooling_v2_forward::primitive_desc pd(
          {dnnl::prop_kind::forward_inference, alg, src_, dst_, s, k, dnnl::memory::dims(n, 0), pl, pr},
          internal::DnnlEngine());
      fwd_ = dnnl::pooling_v2_forward(pd);
      usable_ = true;
    } catch (const dnnl::error&) {
      // oneDNN has no kernel for this shape: troupe's runs it.
    }
  }

  PoolingParam param_;
  TShape shape_;  // the input shape fwd_ is for; empty: none yet
  bool usable_ = false;
  dnnl::memory::desc src_, dst_;
  dnnl::pooling_v2_forward fwd_;
};
#endif  // TROUPE_HAVE_DNNL

class PoolingCpuOp : public Operator {
 public:
  explicit PoolingCpuOp(const PoolingParam& p) : param_(p) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>& aux) override {
    if (req[0] == kNullOp) return;
    // Half-precision arrays: the float32 loops on converted copies (window sums and gradient sums in float).
    if (internal::AnyHalf({&in_data, &out_data})) return staging_.Forward(*this, ctx, in_data, req, out_data, aux);
#if TROUPE_HAVE_DNNL
    if (dnnl_.Forward(in_data[0], out_data[0], req[0])) return;
#endif
    const PoolGeometry g = MakePoolGeometry(param_, in_data[0].shape);
    const std::int64_t planes = in_data[0].shape[0] * in_data[0].shape[1];
    internal::FloatSwitch(in_data[0].dtype, kOp, [&](auto tag) {
      using T = decltype(tag);
      const T* x = static_cast<const T*>(in_data[0].dptr);
      T* y = static_cast<T*>(out_data[0].dptr);
      if (MaxTwoByTwo(g)) return MaxTwoByTwoForward(g, planes * g.depth, x, y, req[0]);
      for (std::int64_t pl = 0; pl < planes; ++pl) {
        const T* in = x + pl * g.in_plane();
        T* out = y + pl * g.out_plane();
        ForEachOutput(g, [&](std::int64_t o, const PoolWindow& w) {
          T v;
          if (g.max) {
            v = std::numeric_limits<T>::lowest();
            ForEachInWindow(g, w, [&](std::int64_t i) { v = std::max(v, in[i]); });
          } else {
            v = T(0);
            ForEachInWindow(g, w, [&](std::int64_t i) { v += in[i]; });
            if (g.avg) v = w.area > 0 ? v / static_cast<T>(w.area) : T(0);
          }
          Assign(out + o, req[0], v);
        });
      }
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>& aux) override {
    if (req[0] == kNullOp) return;
    if (internal::AnyHalf({&out_grad, &in_grad})) {
      return staging_.Backward(*this, ctx, out_grad, in_data, out_data, req, in_grad, aux);
    }
    const TShape& shape = in_grad[0].shape;
    const PoolGeometry g = MakePoolGeometry(param_, shape);
    const std::int64_t planes = shape[0] * shape[1];
    internal::FloatSwitch(out_grad[0].dtype, kOp, [&](auto tag) {
      using T = decltype(tag);
      const T* dy = static_cast<const T*>(out_grad[0].dptr);
      const T* x = g.max ? static_cast<const T*>(in_data[0].dptr) : nullptr;
      T* dx = static_cast<T*>(in_grad[0].dptr);
      // Planes are independent: one range of them per kernel thread.
      internal::CpuParallelFor(planes, 4, [&](std::int64_t p0, std::int64_t p1) {
        if (req[0] != kAddTo) std::fill(dx + p0 * g.in_plane(), dx + p1 * g.in_plane(), T(0));
        if (MaxTwoByTwo(g)) return MaxTwoByTwoBackward(g, p0 * g.depth, p1 * g.depth, x, dy, dx);
        GeneralBackward(g, p0, p1, x, dy, dx);
      });
    });
  }

 private:
  // Max pooling with a 2x2 kernel, stride 2 and no padding whose windows all lie inside the image (LeNet's,
  // VGG's and most CNNs'): the same results as the general loops (the maximum taken in row-major order, the
  // gradient to the first maximum), without a window computed per output. A 3-D kernel of depth 1 (stride 1,
  // no padding in depth) is the same on every depth slice: the slices are its planes.
  static bool MaxTwoByTwo(const PoolGeometry& g) {
    return g.max && g.kd == 1 && g.sd == 1 && g.pd == 0 && g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 &&
           g.ph == 0 && g.pw == 0 && 2 * g.out_h <= g.height && 2 * g.out_w <= g.width;
  }

  template <typename T>
  static void MaxTwoByTwoForward(const PoolGeometry& g, std::int64_t planes, const T* x, T* y, OpReqType req) {
    const std::int64_t W = g.width;
    for (std::int64_t pl = 0; pl < planes; ++pl) {
      const T* in = x + pl * g.height * W;
      T* out = y + pl * g.out_h * g.out_w;
      for (std::int64_t oh = 0; oh < g.out_h; ++oh) {
        const T* r0 = in + 2 * oh * W;
        const T* r1 = r0 + W;
        T* o = out + oh * g.out_w;
        for (std::int64_t ow = 0; ow < g.out_w; ++ow) {
          T v = std::numeric_limits<T>::lowest();
          v = std::max(v, r0[2 * ow]);
          v = std::max(v, r0[2 * ow + 1]);
          v = std::max(v, r1[2 * ow]);
          v = std::max(v, r1[2 * ow + 1]);
          if (req == kAddTo) {
            o[ow] += v;
          } else {
            o[ow] = v;
          }
        }
      }
    }
  }

  // Planes [p0, p1): each output gradient to its window (max: the first maximum in row-major order).
  template <typename T>
  static void GeneralBackward(const PoolGeometry& g, std::int64_t p0, std::int64_t p1, const T* x, const T* dy,
                              T* dx) {
    for (std::int64_t pl = p0; pl < p1; ++pl) {
      const T* grad = dy + pl * g.out_plane();
      T* dplane = dx + pl * g.in_plane();
      ForEachOutput(g, [&](std::int64_t o, const PoolWindow& w) {
        const T gv = grad[o];
        if (g.max) {
          // The first maximum in row-major order takes the gradient (strict > keeps the first).
          const T* in = x + pl * g.in_plane();
          std::int64_t best = -1;
          T bv = std::numeric_limits<T>::lowest();
          ForEachInWindow(g, w, [&](std::int64_t i) {
            if (best < 0 || in[i] > bv) bv = in[i], best = i;
          });
          if (best >= 0) dplane[best] += gv;
        } else {
          const T share = g.avg ? (w.area > 0 ? gv / static_cast<T>(w.area) : T(0)) : gv;
          ForEachInWindow(g, w, [&](std::int64_t i) { dplane[i] += share; });
        }
      });
    }
  }

  template <typename T>
  static void MaxTwoByTwoBackward(const PoolGeometry& g, std::int64_t p0, std::int64_t p1, const T* x, const T* dy,
                                  T* dx) {
    const std::int64_t W = g.width;
    for (std::int64_t pl = p0; pl < p1; ++pl) {
      const T* in = x + pl * g.height * W;
      const T* grad = dy + pl * g.out_h * g.out_w;
      T* dplane = dx + pl * g.height * W;
      for (std::int64_t oh = 0; oh < g.out_h; ++oh) {
        for (std::int64_t ow = 0; ow < g.out_w; ++ow) {
          std::int64_t best = 2 * oh * W + 2 * ow;
          T bv = in[best];
          const std::int64_t rest[3] = {best + 1, best + W, best + W + 1};
          for (std::int64_t p : rest) {
            if (in[p] > bv) bv = in[p], best = p;
          }
          dplane[best] += grad[oh * g.out_w + ow];
        }
      }
    }
  }

  PoolingParam param_;
  internal::FloatStaging staging_;
#if TROUPE_HAVE_DNNL
  DnnlPool dnnl_{param_};
#endif
};

}  // namespace

void PoolingProp::Init(const Kwargs& kwargs) {
  one_d_ = IsOneDimensionalKernel(kwargs);
  if (!one_d_) return InitNd(kwargs);
  param_1d_.Init(kwargs, kOp);
  if (param_1d_.layout != "None" && param_1d_.layout != "NCW") {
    throw Error("Pooling: parameter 'layout' is '" + param_1d_.layout + "'; 1-D pooling supports NCW only");
  }
  InitNd(LiftKwargsTo2d(kwargs));
}

void PoolingProp::InitNd(const Kwargs& kwargs) {
  param_.Init(kwargs, kOp);
  if (param_.pool_type == "lp") {
    throw Error("Pooling: parameter 'pool_type' is 'lp', which is not supported; use 'max', 'avg' or 'sum'");
  }
  if (param_.pooling_convention == "same") {
    throw Error("Pooling: parameter 'pooling_convention' is 'same', which is not supported; use 'valid' or 'full'");
  }
  // The spatial dimensions: the kernel's; global pooling may leave the kernel out (the data then says, and
  // stride and pad, ignored there, are checked against their own count).
  const bool kernel_given = param_.kernel.ndim() > 0;
  const int n = kernel_given ? param_.kernel.ndim() : (param_.stride.ndim() == 3 || param_.pad.ndim() == 3 ? 3 : 2);
  if (kernel_given ? n != 2 && n != 3 : !param_.global_pool) {
    throw Error("Pooling: parameter 'kernel' is " + param_.kernel.ToString() +
                "; give 1 value (x) for 1-D, 2 values (y, x) for 2-D or 3 values (d, y, x) for 3-D pooling, unless "
                "global_pool is True");
  }
  CheckGeometryTuple(param_.kernel, n, kOp, "kernel", 1, param_.global_pool);
  CheckGeometryTuple(param_.stride, n, kOp, "stride", 1, true);
  CheckGeometryTuple(param_.pad, n, kOp, "pad", 0, true);
  const bool layout_ok = param_.layout == "None" || (param_.layout == "NCHW" && (n == 2 || !kernel_given)) ||
                         (param_.layout == "NCDHW" && (n == 3 || !kernel_given));
  if (!layout_ok) {
    throw Error("Pooling: parameter 'layout' is '" + param_.layout + "'; only NCW, NCHW and NCDHW (or None) are " +
                "supported, matching the kernel's dimensions");
  }
}

bool PoolingProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                             std::vector<TShape>* aux_shape) const {
  aux_shape->clear();
  const bool three_d_data = !in_shape->empty() && (*in_shape)[0].ndim() == 3;
  if (!one_d_ && !(param_.global_pool && three_d_data)) return InferShapeNd(in_shape, out_shape);
  if ((*in_shape)[0].ndim() >= 0 && !three_d_data) {
    throw Error("Pooling: argument 'data' has shape " + (*in_shape)[0].ToString() +
                "; 1-D pooling needs 3 dimensions (batch, channel, width)");
  }
  for (auto& s : *in_shape) s = LiftShapeTo2d(s);
  const bool known = InferShapeNd(in_shape, out_shape);
  for (auto& s : *in_shape) s = DropLiftedAxis(s);
  for (auto& s : *out_shape) s = DropLiftedAxis(s);
  return known;
}

bool PoolingProp::InferShapeNd(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape) const {
  if (in_shape->size() != 1) {
    throw Error("Pooling: expected 1 input (data), got " + std::to_string(in_shape->size()));
  }
  out_shape->assign(1, TShape());
  const TShape data = (*in_shape)[0];
  if (data.ndim() < 0) return false;
  const int n = param_.kernel.ndim();
  if (param_.global_pool && data.ndim() != 4 && data.ndim() != 5) {
    throw Error("Pooling: argument 'data' has shape " + data.ToString() +
                "; global pooling needs 3, 4 or 5 dimensions (batch, channel, then 1, 2 or 3 spatial ones)");
  }
  if (!param_.global_pool && data.ndim() != n + 2) {
    throw Error("Pooling: argument 'data' has shape " + data.ToString() + "; " + std::to_string(n) +
                "-D pooling needs " + SpatialDataDims(n));
  }
  if (param_.layout != "None" && static_cast<int>(param_.layout.size()) != data.ndim()) {
    throw Error("Pooling: argument 'data' has shape " + data.ToString() + ", which does not match parameter "
                "'layout' " + param_.layout);
  }
  const PoolGeometry g = MakePoolGeometry(param_, data);
  TShape out = data;
  const std::vector<std::int64_t> size = SpatialDims(g.spatial, g.out_d, g.out_h, g.out_w);
  for (int i = 0; i < g.spatial; ++i) out[2 + i] = size[i];
  (*out_shape)[0] = out;
  return data.known();
}

std::vector<int> PoolingProp::DeclareBackwardDependency(const std::vector<int>& out_grad,
                                                        const std::vector<int>& in_data,
                                                        const std::vector<int>& out_data) const {
  // Max pooling finds the argmax in the input (and cuDNN's backward takes the output too); averages and
  // sums only spread the output gradient, but cuDNN's average backward still takes both tensors.
  if (param_.pool_type == "sum") return {out_grad[0]};
  return {out_grad[0], in_data[0], out_data[0]};
}

std::unique_ptr<Operator> PoolingProp::CreateOperator(Context ctx) const {
  std::unique_ptr<Operator> op =
      ctx.is_gpu() ? CreateGpuOperator(*this, ctx) : std::unique_ptr<Operator>(std::make_unique<PoolingCpuOp>(param_));
  // Global pooling of 3-D data is lifted too: the operator sees (N, C, 1, W) whichever the kernel.
  return one_d_ || param_.global_pool ? LiftOperatorTo2d(std::move(op)) : std::move(op);
}

TROUPE_REGISTER_OP_PROPERTY(Pooling, PoolingProp)
    .describe("Performs 1-D (NCW), 2-D (NCHW) or 3-D (NCDHW) pooling (max, avg or sum) on the input.")
    .add_argument("data", "NDArray-or-Symbol", "Input data to the pooling operator.")
    .add_arguments(PoolingParam::Docs());

}  // namespace troupe
