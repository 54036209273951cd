// Convolution (2-D, NCHW, and 3-D, NCDHW) on the CPU, two ways:
// - oneDNN (float32, when enabled): Winograd F(4x4, 3x3) where oneDNN has it for the shape, else its direct
//   convolution, in the blocked layouts it prefers, reordered from and to the NCHW / NCDHW arrays at the operator's
//   edges (bench/ops/results/README.md says what that costs); primitives cached for the last input shape and
//   mode, buffers in the temp-space resource, reordered weights kept while the weight array is unchanged;
// - troupe's own kernel (float64, the data gradient of one input channel per group, TROUPE_DNNL=0): im2col
//   into the temp-space resource, then one product per image and group (CpuGemm); backward recomputes the
//   columns for the weight gradient and turns the column gradient back into an image gradient with col2im. A
//   1x1 kernel with stride 1 and no padding needs no columns at all (the image already is the column matrix).
//   A 2-D convolution is the 3-D one with a single depth slice: the same loops serve both.
//
// im2col/col2im dominate the time beside the products (the benchmark holds the whole layer to 0.7x of the
// bare products), so their inner loops are contiguous copies/adds over the valid range of one output row,
// with the range computed once per kernel column instead of testing every element.
#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "op/internal/float_staging.h"
#include "op/nn/convolution/convolution.h"
#include "tensor/detail/kernels.h"
#if TROUPE_HAVE_DNNL
#include "op/internal/dnnl_common.h"
#endif

namespace troupe {

namespace {

constexpr const char* kOp = "Convolution";

int GemmDim(std::int64_t v) {
  if (v > INT_MAX) throw Error("Convolution: a matrix dimension of " + std::to_string(v) + " exceeds the BLAS limit of 2^31-1");
  return static_cast<int>(v);
}

// A matrix operand for CpuGemm (which reads only the pointer and the element type; inputs are not written).
template <typename T>
TBlob Mat(const T* p) {
  return TBlob(const_cast<T*>(p), TShape(), DTypeOf<T>(), Context::CPU());
}

// The shapes of one convolution call (depth and od 1 in 2-D); plane: the elements of one input channel.
struct ConvDims {
  std::int64_t n, c, depth, h, w, f, od, oh, ow, groups, cg, fg, k, p, plane;
};

// Visits the rows of one image and group's column matrix: row (c, kz, ki, kj), column (oz, oh, ow) holds the
// input element that kernel tap (kz, ki, kj) of input channel c sees at output (oz, oh, ow), 0 in the padding.
// For each tap and output row (oz, oh), fn(col, in, inside, lo, hi): `col` is the offset of the row's first
// column; when `inside` (the input row lies in the image), output column x in [lo, hi) reads the input element
// at offset in + x * sw, and the columns outside [lo, hi) read the padding; otherwise the whole row does.
template <typename Fn>
void ForEachColumnRow(const ConvDims& d, const ConvGeometry& g, Fn&& fn) {
  for (std::int64_t c = 0; c < d.cg; ++c) {
    for (std::int64_t kz = 0; kz < g.kd; ++kz) {
      for (std::int64_t ki = 0; ki < g.kh; ++ki) {
        for (std::int64_t kj = 0; kj < g.kw; ++kj) {
          const std::int64_t tap = ((c * g.kd + kz) * g.kh + ki) * g.kw + kj;
          // iw = ow * sw + off: the outputs whose input column lies inside the image are [lo, hi).
          const std::int64_t off = kj * g.dw - g.pw;
          std::int64_t lo = off >= 0 ? 0 : (-off + g.sw - 1) / g.sw;
          std::int64_t hi = d.w - off <= 0 ? 0 : (d.w - off + g.sw - 1) / g.sw;
          lo = std::min(lo, d.ow);
          hi = std::max(lo, std::min(hi, d.ow));
          for (std::int64_t oz = 0; oz < d.od; ++oz) {
            const std::int64_t iz = oz * g.sd - g.pd + kz * g.dd;
            for (std::int64_t oh = 0; oh < d.oh; ++oh) {
              const std::int64_t ih = oh * g.sh - g.ph + ki * g.dh;
              const bool inside = iz >= 0 && iz < d.depth && ih >= 0 && ih < d.h;
              fn(tap * d.p + (oz * d.oh + oh) * d.ow, inside ? (c * d.depth + iz) * d.h * d.w + ih * d.w + off : 0,
                 inside, lo, hi);
            }
          }
        }
      }
    }
  }
}

// Columns of one image and group (ForEachColumnRow's matrix).
template <typename T>
void Im2Col(const T* im, const ConvDims& d, const ConvGeometry& g, T* col) {
  ForEachColumnRow(d, g, [&](std::int64_t row, std::int64_t in, bool inside, std::int64_t lo, std::int64_t hi) {
    T* dst = col + row;
    if (!inside) {
      std::fill(dst, dst + d.ow, T(0));
      return;
    }
    std::fill(dst, dst + lo, T(0));
    if (g.sw == 1) {
      std::memcpy(dst + lo, im + (in + lo), static_cast<std::size_t>(hi - lo) * sizeof(T));
    } else {
      for (std::int64_t x = lo; x < hi; ++x) dst[x] = im[in + x * g.sw];
    }
    std::fill(dst + hi, dst + d.ow, T(0));
  });
}

// The adjoint of Im2Col: adds every column entry onto the input element it was copied from.
template <typename T>
void Col2ImAdd(const T* col, const ConvDims& d, const ConvGeometry& g, T* im) {
  ForEachColumnRow(d, g, [&](std::int64_t row, std::int64_t in, bool inside, std::int64_t lo, std::int64_t hi) {
    if (!inside) return;
    const T* src = col + row;
    if (g.sw == 1) {
      for (std::int64_t x = lo; x < hi; ++x) im[in + x] += src[x];
    } else {
      for (std::int64_t x = lo; x < hi; ++x) im[in + x * g.sw] += src[x];
    }
  });
}

#if TROUPE_HAVE_DNNL
// oneDNN's convolution for one input shape at a time (forward, backward data, backward weights and bias).
class DnnlConv {
 public:
  DnnlConv(const ConvolutionParam& p, const ConvGeometry& g, ConvPostOps post) : param_(p), geo_(g), post_(post) {}

  // Whether oneDNN runs a call on this input (else troupe's kernel does). On one input channel per group
  // oneDNN's data gradient is slow (LeNet's first layer at batch 64: 4.4 ms, against 0.43 for its forward pass
  // and 0.33 for its weight gradient): troupe's kernel computes it there (the layer, forward + backward, 17.6
  // GFLOP/s all oneDNN, 43-49 mixed), while oneDNN's forward pass and weight gradient win (LeNet training
  // 3810 -> 4180 images/s, where the first layer's data gradient is not wanted).
  // bfloat16 runs here wherever oneDNN has bfloat16 kernels (troupe's kernel would convert to float32).
  static bool Wanted(const ConvolutionParam& p, DType dtype, const TShape& in, bool data_gradient) {
    if (!internal::DnnlEnabled() || in[0] <= 0) return false;
    if (dtype == DType::kBfloat16) return internal::DnnlBf16();
    return dtype == DType::kFloat32 && (in[1] / p.num_group > 1 || !data_gradient);
  }

  // With post-ops (the fused operator): `sum` is the addend of the sum post-op (null without it); req is
  // kWriteTo, or kWriteInplace when out is the addend's buffer.
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const TBlob& out, OpReqType req,
               const void* sum = nullptr) {
    try {
      Prepare(in_data[0].shape, in_data[1].shape, out.shape, ctx.is_train, in_data[0].dtype,
              param_.no_bias ? DType::kFloat32 : in_data[2].dtype);
      dnnl::stream& st = internal::DnnlStream();
      fwd_space_.Bind(ctx.requested.at(0).get_space(std::max<std::size_t>(fwd_space_.bytes(), 1)));
      std::unordered_map<int, dnnl::memory> args{
          {DNNL_ARG_SRC, src_.In(in_data[0].dptr, fwd_space_, st)},
          {DNNL_ARG_WEIGHTS, Weights(ctx, in_data[1].dptr, st)},
          {DNNL_ARG_SCRATCHPAD, Scratch(fwd_pd_.scratchpad_desc(), fwd_space_, fwd_scratch_)}};
      if (!param_.no_bias) args[DNNL_ARG_BIAS] = bias_.In(in_data[2].dptr, fwd_space_, st);
      dnnl::memory dst;
      if (post_.sum) {
        // The sum post-op adds onto what the destination holds: the addend, in the primitive's layout.
        dnnl::memory addend(sum_user_, internal::DnnlEngine(), const_cast<void*>(sum));
        if (dst_.reordered) {
          dst = dnnl::memory(dst_.want, internal::DnnlEngine(), fwd_space_.At(dst_.offset));
          sum_in_.execute(st, addend, dst);
        } else if (sum_user_ != dst_.user) {
          // The addend in another layout than the output (never the same buffer then: no in-place option).
          dst = dnnl::memory(dst_.user, internal::DnnlEngine(), out.dptr);
          sum_in_.execute(st, addend, dst);
        } else {
          if (sum != out.dptr) std::memcpy(out.dptr, sum, dst_.user.get_size());
          dst = dnnl::memory(dst_.user, internal::DnnlEngine(), out.dptr);
        }
        req = kWriteTo;
      } else {
        dst = dst_.Out(out.dptr, fwd_space_, req);
      }
      args[DNNL_ARG_DST] = dst;
      fwd_.execute(st, args);
      dst_.Leave(dst, out.dptr, st, req);
      st.wait();
    } catch (const dnnl::error& e) {
      internal::ThrowDnnl(kOp, e);
    }
  }

  // in_grad: data, weight (and bias) gradients, each written under its request (kNullOp: not wanted).
  void Backward(const TBlob& dy, const TBlob& x, const TBlob& w, const std::vector<TBlob>& in_grad,
                const std::vector<OpReqType>& req, const Resource& temp) {
    try {
      // The bias's type as the forward pass saw it (its gradient may be unrequested, an empty blob).
      Prepare(x.shape, w.shape, dy.shape, true, x.dtype, bias_dtype_);
      PrepareBackward();
      dnnl::stream& st = internal::DnnlStream();
      bwd_space_.Bind(temp.get_space(std::max<std::size_t>(bwd_space_.bytes(), 1)));
      // The output gradient in the backward primitives' layout: reordered once when both want the same one.
      dnnl::memory dy_data;
      if (req[0] != kNullOp) {
        const dnnl::memory dx = bd_dx_.Out(in_grad[0].dptr, bwd_space_, req[0]);
        dy_data = bd_dy_.In(dy.dptr, bwd_space_, st);
        bwd_data_.execute(st, {{DNNL_ARG_DIFF_DST, dy_data},
                               {DNNL_ARG_WEIGHTS, bd_w_.In(w.dptr, bwd_space_, st)},
                               {DNNL_ARG_DIFF_SRC, dx},
                               {DNNL_ARG_SCRATCHPAD, Scratch(bd_pd_.scratchpad_desc(), bwd_space_, bd_scratch_)}});
        bd_dx_.Leave(dx, in_grad[0].dptr, st, req[0]);
      }
      // One primitive computes both the weight and the bias gradient; one not wanted goes to its buffer.
      const OpReqType req_w = req[1], req_b = param_.no_bias ? kNullOp : req[2];
      if (req_w != kNullOp || req_b != kNullOp) {
        const dnnl::memory dw = bw_dw_.Out(in_grad[1].dptr, bwd_space_, req_w == kNullOp ? kAddTo : req_w);
        std::unordered_map<int, dnnl::memory> args{
            {DNNL_ARG_DIFF_DST, !dy_shared_ ? bw_dy_.In(dy.dptr, bwd_space_, st)
                                : dy_data ? dy_data : bd_dy_.In(dy.dptr, bwd_space_, st)},
            {DNNL_ARG_SRC, bw_x_.In(x.dptr, bwd_space_, st)},
            {DNNL_ARG_DIFF_WEIGHTS, dw},
            {DNNL_ARG_SCRATCHPAD, Scratch(bw_pd_.scratchpad_desc(), bwd_space_, bw_scratch_)}};
        dnnl::memory db;
        if (!param_.no_bias) {
          db = bw_db_.Out(in_grad[2].dptr, bwd_space_, req_b == kNullOp ? kAddTo : req_b);
          args[DNNL_ARG_DIFF_BIAS] = db;
        }
        bwd_weights_.execute(st, args);
        if (req_w != kNullOp) bw_dw_.Leave(dw, in_grad[1].dptr, st, req_w);
        if (req_b != kNullOp) bw_db_.Leave(db, in_grad[2].dptr, st, req_b);
      }
      st.wait();
    } catch (const dnnl::error& e) {
      internal::ThrowDnnl(kOp, e);
    }
  }

 private:
  static dnnl::memory Scratch(const dnnl::memory::desc& d, const internal::DnnlSpace& space, std::size_t offset) {
    return dnnl::memory(d, internal::DnnlEngine(), space.At(offset));
  }
  dnnl::memory::desc Any(const dnnl::memory::dims& d) const {
    return dnnl::memory::desc(d, type_, dnnl::memory::format_tag::any);
  }
  // The weight (and bias) gradient's type inside oneDNN: float32 for bfloat16 data too, so that the sum over
  // the batch is not rounded to 8 bits of mantissa as it accumulates; the reorder to the user's array rounds
  // once.
  static dnnl::memory::desc AnyF32(const dnnl::memory::dims& d) {
    return dnnl::memory::desc(d, dnnl::memory::data_type::f32, dnnl::memory::format_tag::any);
  }

  // The weights in the forward primitive's layout. Where the layouts differ, the reordered weights are kept
  // (outside temp space) with the weight array's state: while the state is the same (inference, or the
  // forward passes of a step), the reorder (for Winograd, the weight transform) is skipped.
  dnnl::memory Weights(const OpContext& ctx, const void* w, dnnl::stream& st) {
    const auto& eng = internal::DnnlEngine();
    if (!wei_.reordered) return dnnl::memory(wei_.user, eng, const_cast<void*>(w));
    const std::optional<OpContext::InputState> state =
        ctx.in_states.size() > 1 ? std::optional(ctx.in_states[1]) : std::nullopt;
    if (!state || state != w_state_ || w != w_ptr_) {
      if (!w_cache_) w_cache_ = dnnl::memory(wei_.want, eng);
      dnnl::memory u(wei_.user, eng, const_cast<void*>(w));
      wei_.to_want.execute(st, u, w_cache_);
      w_state_ = state;
      w_ptr_ = w;
    }
    return w_cache_;
  }

  // make(algorithm) for `preferred`, else for the direct algorithm: oneDNN throws for an algorithm it has no
  // kernel for with this shape on this CPU.
  template <typename Make>
  static auto Preferring(dnnl::algorithm preferred, Make&& make) {
    if (preferred != dnnl::algorithm::convolution_direct) {
      try {
        return make(preferred);
      } catch (const dnnl::error&) {
      }
    }
    return make(dnnl::algorithm::convolution_direct);
  }

  // The forward primitive for (x, w, y) shapes, for training or inference (oneDNN's inference Winograd takes
  // its weights transformed, which the weight cache then keeps), rebuilt when either changes.
  void Prepare(const TShape& x, const TShape& w, const TShape& y, bool training, DType dtype, DType bias_dtype) {
    if (x == shape_ && training == training_ && dtype == dtype_ && bias_dtype == bias_dtype_) return;
    shape_ = TShape();
    type_ = internal::DnnlType(dtype);
    bias_type_ = internal::DnnlType(bias_dtype);
    bwd_ready_ = false;
    w_cache_ = {};
    w_state_.reset();
    const int g = param_.num_group;
    // An array the executor keeps blocked is asked for in that layout (no reorder at either end).
    x_md_ = post_.blocked_in ? internal::BlockedDesc(x) : Any(internal::Dims(x));
    y_md_ = post_.blocked_out ? internal::BlockedDesc(y) : Any(internal::Dims(y));
    // Grouped weights (F, C/g, k...) as oneDNN's (g, F/g, C/g, k...).
    dnnl::memory::dims wd = internal::Dims(w);
    if (g > 1) {
      wd[0] /= g;
      wd.insert(wd.begin(), g);
    }
    w_md_ = Any(wd);
    b_md_ = param_.no_bias ? dnnl::memory::desc() : internal::PlainDesc(TShape{w[0]}, 1, bias_type_);
    b_f32_md_ = param_.no_bias ? dnnl::memory::desc() : internal::PlainDesc(TShape{w[0]});
    const int n = geo_.spatial;
    const std::vector<std::int64_t> k = SpatialDims(n, geo_.kd, geo_.kh, geo_.kw);
    const std::vector<std::int64_t> dl = SpatialDims(n, geo_.dd, geo_.dh, geo_.dw);
    strides_ = SpatialDims(n, geo_.sd, geo_.sh, geo_.sw);
    pad_l_ = SpatialDims(n, geo_.pd, geo_.ph, geo_.pw);
    dilates_.clear();
    pad_r_.clear();
    for (int i = 0; i < n; ++i) {
      dilates_.push_back(dl[i] - 1);  // oneDNN counts the gaps between taps
      // MXNet's output size floors; oneDNN wants the right padding that gives exactly that size (negative when
      // no window reaches the last input rows).
      pad_r_.push_back(internal::DnnlRightPad(y[2 + i], strides_[i], dl[i] * (k[i] - 1) + 1, x[2 + i], pad_l_[i]));
    }
    // Winograd (F(4x4, 3x3)) where oneDNN has it for the shape (2-D 3x3, stride 1, no dilation or groups, enough
    // channels): 1.6-1.8x the direct convolution's speed on ResNet's layers, with errors still at float32's
    // rounding level (the tests hold it to 1e-4 of the float64 reference); otherwise the direct convolution.
    const bool winograd_shape = internal::DnnlWinograd() && n == 2 && geo_.kh == 3 && geo_.kw == 3 &&
                                geo_.sh == 1 && geo_.sw == 1 && geo_.dh == 1 && geo_.dw == 1 && g == 1;
    // Post-ops (the fused operator): the sum onto the destination's contents, then the relu, both on the
    // accumulator before it is stored (MXNet's _sg_mkldnn_conv, in the same order).
    dnnl::primitive_attr attr = UserScratchpad();
    if (post_.sum || post_.act != FusedActivation::kNone) {
      dnnl::post_ops ops;
      if (post_.sum) ops.append_sum(1.0f);
      switch (post_.act) {
        case FusedActivation::kNone: break;
        case FusedActivation::kRelu: ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f); break;
        case FusedActivation::kSigmoid: ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_logistic, 0.0f, 0.0f); break;
        case FusedActivation::kTanh: ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_tanh, 0.0f, 0.0f); break;
        case FusedActivation::kSoftrelu:
          ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_soft_relu, 0.0f, 0.0f);
          break;
      }
      attr.set_post_ops(ops);
    }
    fwd_pd_ = Preferring(winograd_shape ? dnnl::algorithm::convolution_winograd : dnnl::algorithm::convolution_direct,
                         [&](dnnl::algorithm a) {
                           dnnl::convolution_forward::primitive_desc pd(
                               {training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference,
                                a, x_md_, w_md_, b_md_, y_md_, strides_, dilates_, pad_l_, pad_r_},
                               attr, internal::DnnlEngine());
                           algo_ = a;
                           return pd;
                         });
    fwd_ = dnnl::convolution_forward(fwd_pd_);
    x_plain_ = post_.blocked_in ? internal::BlockedDesc(x) : internal::PlainDesc(x, 1, type_);
    y_plain_ = post_.blocked_out ? internal::BlockedDesc(y) : internal::PlainDesc(y, 1, type_);
    w_plain_ = internal::PlainDesc(w, g, type_);
    fwd_space_ = {};
    src_.Plan(x_plain_, fwd_pd_.src_desc(), false, &fwd_space_);
    wei_.Plan(w_plain_, fwd_pd_.weights_desc(), false, nullptr);  // kept in w_cache_ (Weights)
    if (!param_.no_bias) bias_.Plan(b_md_, fwd_pd_.bias_desc(), false, &fwd_space_);
    dst_.Plan(y_plain_, fwd_pd_.dst_desc(), true, &fwd_space_);
    sum_in_ = {};
    sum_user_ = post_.blocked_sum ? internal::BlockedDesc(y) : internal::PlainDesc(y);
    if (post_.sum && (dst_.reordered || sum_user_ != y_plain_)) {
      const auto& eng = internal::DnnlEngine();
      sum_in_ = dnnl::reorder(
          dnnl::reorder::primitive_desc(eng, sum_user_, eng, dst_.reordered ? fwd_pd_.dst_desc() : y_plain_));
    }
    fwd_scratch_ = fwd_space_.Reserve(fwd_pd_.scratchpad_desc().get_size());
    shape_ = x;
    training_ = training;
    dtype_ = dtype;
    bias_dtype_ = bias_dtype;
  }

  void PrepareBackward() {
    if (bwd_ready_) return;
    const auto& eng = internal::DnnlEngine();
    // The forward pass's algorithm where oneDNN has it for the backward pass too, else the direct one.
    bd_pd_ = Preferring(algo_, [&](dnnl::algorithm a) {
      return dnnl::convolution_backward_data::primitive_desc(
          {a, x_md_, w_md_, y_md_, strides_, dilates_, pad_l_, pad_r_}, UserScratchpad(), eng, fwd_pd_);
    });
    // bfloat16: the weight and bias gradients in float32 (AnyF32).
    const bool bf16 = type_ == dnnl::memory::data_type::bf16;
    const dnnl::memory::desc dw_md = bf16 ? AnyF32(w_md_.dims()) : w_md_;
    const dnnl::memory::desc db_md = bf16 ? b_f32_md_ : b_md_;
    bw_pd_ = Preferring(algo_, [&](dnnl::algorithm a) {
      return dnnl::convolution_backward_weights::primitive_desc(
          {a, x_md_, dw_md, db_md, y_md_, strides_, dilates_, pad_l_, pad_r_}, UserScratchpad(), eng, fwd_pd_);
    });
    bwd_data_ = dnnl::convolution_backward_data(bd_pd_);
    bwd_weights_ = dnnl::convolution_backward_weights(bw_pd_);
    bwd_space_ = {};
    bd_dy_.Plan(y_plain_, bd_pd_.diff_dst_desc(), false, &bwd_space_);
    bd_w_.Plan(w_plain_, bd_pd_.weights_desc(), false, &bwd_space_);
    bd_dx_.Plan(x_plain_, bd_pd_.diff_src_desc(), true, &bwd_space_);
    bd_scratch_ = bwd_space_.Reserve(bd_pd_.scratchpad_desc().get_size());
    dy_shared_ = bw_pd_.diff_dst_desc() == bd_pd_.diff_dst_desc();
    bw_dy_.Plan(y_plain_, bw_pd_.diff_dst_desc(), false, dy_shared_ ? nullptr : &bwd_space_);
    bw_x_.Plan(x_plain_, bw_pd_.src_desc(), false, &bwd_space_);
    bw_dw_.Plan(w_plain_, bw_pd_.diff_weights_desc(), true, &bwd_space_);
    if (!param_.no_bias) bw_db_.Plan(b_md_, bw_pd_.diff_bias_desc(), true, &bwd_space_);
    bw_scratch_ = bwd_space_.Reserve(bw_pd_.scratchpad_desc().get_size());
    bwd_ready_ = true;
  }

  // Scratchpads in temp space. Also a must: oneDNN 2.6's Winograd primitives with the library's scratchpad
  // crash when run on a thread other than the one that created them, and an operator object may be entered by
  // any worker of its device's lane.
  static dnnl::primitive_attr UserScratchpad() {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    return attr;
  }

  ConvolutionParam param_;
  ConvGeometry geo_;
  ConvPostOps post_;
  dnnl::reorder sum_in_;  // the sum post-op's addend into the destination's layout (when they differ)
  dnnl::memory::desc sum_user_;  // the addend's layout
  TShape shape_;  // the input shape the primitives are for; empty: none yet
  bool training_ = true;  // whether the forward primitive is forward_training
  DType dtype_ = DType::kFloat32, bias_dtype_ = DType::kFloat32;  // the types the primitives are for
  dnnl::memory::data_type type_ = dnnl::memory::data_type::f32, bias_type_ = dnnl::memory::data_type::f32;
  dnnl::memory::desc x_md_, w_md_, b_md_, b_f32_md_, y_md_, x_plain_, w_plain_, y_plain_;
  dnnl::memory::dims strides_, dilates_, pad_l_, pad_r_;
  dnnl::algorithm algo_ = dnnl::algorithm::convolution_direct;
  dnnl::convolution_forward::primitive_desc fwd_pd_;
  dnnl::convolution_forward fwd_;
  internal::DnnlSpace fwd_space_;
  internal::DnnlArg src_, wei_, bias_, dst_;
  std::size_t fwd_scratch_ = 0;
  dnnl::memory w_cache_;  // the weights in wei_.want, for state w_state_ (none: unknown) of the array at w_ptr_
  std::optional<OpContext::InputState> w_state_;
  const void* w_ptr_ = nullptr;
  bool bwd_ready_ = false;
  dnnl::convolution_backward_data::primitive_desc bd_pd_;
  dnnl::convolution_backward_weights::primitive_desc bw_pd_;
  dnnl::convolution_backward_data bwd_data_;
  dnnl::convolution_backward_weights bwd_weights_;
  internal::DnnlSpace bwd_space_;
  internal::DnnlArg bd_dy_, bd_w_, bd_dx_, bw_dy_, bw_x_, bw_dw_, bw_db_;
  bool dy_shared_ = false;  // both backward primitives take the output gradient in one layout
  std::size_t bd_scratch_ = 0, bw_scratch_ = 0;
};
#endif  // TROUPE_HAVE_DNNL

class ConvolutionCpuOp : public Operator {
 public:
  ConvolutionCpuOp(const ConvolutionParam& p, ConvPostOps post) : param_(p), geo_(MakeConvGeometry(p)), post_(post) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>& aux) override {
    if (req[0] == kNullOp) return;
    if (post_.sum || post_.act != FusedActivation::kNone || post_.blocked_in || post_.blocked_out) {
      return FusedForward(ctx, in_data, req[0], out_data[0]);
    }
    if (internal::AnyHalf({&in_data, &out_data}) && !HalfNative(in_data[0], in_data[0].shape, false)) {
      return staging_.Forward(*this, ctx, in_data, req, out_data, aux);
    }
#if TROUPE_HAVE_DNNL
    if (DnnlConv::Wanted(param_, in_data[0].dtype, in_data[0].shape, false)) {
      dnnl_.Forward(ctx, in_data, out_data[0], req[0]);
      return;
    }
#endif
    ReferenceForward(ctx, in_data, req[0], out_data[0]);
  }

  // The fused operator (op/detail/fusion.h): out = act?(conv(in) + sum?) in one oneDNN primitive; elsewhere
  // (another type, oneDNN switched off since the graph was fused) troupe's kernel, then the post-ops.
  void FusedForward(const OpContext& ctx, const std::vector<TBlob>& in_data, OpReqType req, const TBlob& out) {
    if (req == kAddTo) throw Error("_sg_onednn_conv: kAddTo is not supported (the executor writes its output)");
    const std::size_t nconv = param_.no_bias ? 2 : 3;
    const void* sum = post_.sum ? in_data.at(nconv).dptr : nullptr;
#if TROUPE_HAVE_DNNL
    if (DnnlConv::Wanted(param_, in_data[0].dtype, in_data[0].shape, false)) {
      dnnl_.Forward(ctx, in_data, out, req, sum);
      return;
    }
#endif
    if (post_.blocked_in || post_.blocked_out) {
      // The executor keeps arrays blocked only where oneDNN runs the convolution (float32, at least one image).
      throw Error("_sg_onednn_conv: blocked arrays but oneDNN does not run this call (a bug; TROUPE_EXEC_FUSE=0 "
                  "turns the fusion off)");
    }
    const std::size_t bytes = static_cast<std::size_t>(out.shape.Size()) * DTypeSize(out.dtype);
    if (post_.sum && sum != out.dptr) std::memcpy(out.dptr, sum, bytes);
    ReferenceForward(ctx, in_data, post_.sum ? kAddTo : kWriteTo, out);
    if (post_.act == FusedActivation::kNone) return;
    internal::FloatSwitch(out.dtype, kOp, [&](auto tag) {
      using T = decltype(tag);
      T* y = static_cast<T*>(out.dptr);
      const std::int64_t n = out.shape.Size();
      for (std::int64_t i = 0; i < n; ++i) y[i] = ApplyFusedActivation(post_.act, y[i]);
    });
  }

  // troupe's kernel: im2col + a product per image and group (kAddTo adds onto out).
  void ReferenceForward(const OpContext& ctx, const std::vector<TBlob>& in_data, OpReqType req,
                        const TBlob& out) {
    const std::vector<TBlob> out_data{out};
    const ConvDims d = Dims(in_data[0].shape, out_data[0].shape);
    internal::FloatSwitch(in_data[0].dtype, kOp, [&](auto tag) {
      using T = decltype(tag);
      const T* x = static_cast<const T*>(in_data[0].dptr);
      const T* w = static_cast<const T*>(in_data[1].dptr);
      T* y = static_cast<T*>(out_data[0].dptr);
      T* col = Direct() ? nullptr : ColSpace<T>(ctx, d);
      const int m = GemmDim(d.fg), n = GemmDim(d.p), k = GemmDim(d.k);
      const double beta = req == kAddTo ? 1.0 : 0.0;
      for (std::int64_t i = 0; i < d.n; ++i) {
        for (std::int64_t gi = 0; gi < d.groups; ++gi) {
          const T* xg = x + (i * d.c + gi * d.cg) * d.plane;
          T* yg = y + (i * d.f + gi * d.fg) * d.p;
          const T* cols = xg;
          if (!Direct()) {
            Im2Col(xg, d, geo_, col);
            cols = col;
          }
          internal::CpuGemm(Mat(w + gi * d.fg * d.k), Mat(cols), Mat(yg), false, false, m, n, k, 1.0, beta);
        }
        if (!param_.no_bias) {
          // Added per image while its output is still in cache.
          const T* b = static_cast<const T*>(in_data[2].dptr);
          for (std::int64_t f = 0; f < d.f; ++f) {
            T* plane = y + (i * d.f + f) * d.p;
            const T bf = b[f];
            for (std::int64_t q = 0; q < d.p; ++q) plane[q] += bf;
          }
        }
      }
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>& aux) override {
    const ConvDims d = Dims(in_data[0].shape, out_grad[0].shape);
    const bool need_dx = req[0] != kNullOp, need_dw = req[1] != kNullOp;
    const bool need_db = !param_.no_bias && req[2] != kNullOp;
    if (internal::AnyHalf({&out_grad, &in_data, &in_grad}) && !HalfNative(out_grad[0], in_data[0].shape, need_dx)) {
      return staging_.Backward(*this, ctx, out_grad, in_data, out_data, req, in_grad, aux);
    }
#if TROUPE_HAVE_DNNL
    if ((need_dx || need_dw || need_db) && DnnlConv::Wanted(param_, out_grad[0].dtype, in_data[0].shape, need_dx)) {
      dnnl_.Backward(out_grad[0], in_data[0], in_data[1], in_grad, req, ctx.requested.at(0));
      return;
    }
#endif
    internal::FloatSwitch(out_grad[0].dtype, kOp, [&](auto tag) {
      using T = decltype(tag);
      const T* dy = static_cast<const T*>(out_grad[0].dptr);
      const T* x = static_cast<const T*>(in_data[0].dptr);
      const T* w = static_cast<const T*>(in_data[1].dptr);
      T* dx = need_dx ? static_cast<T*>(in_grad[0].dptr) : nullptr;
      T* dw = need_dw ? static_cast<T*>(in_grad[1].dptr) : nullptr;
      // One column buffer serves both gradients: the weight product consumes the columns of (image, group)
      // before the data product overwrites them with the column gradient.
      T* col = Direct() || (!need_dx && !need_dw) ? nullptr : ColSpace<T>(ctx, d);
      const int fg = GemmDim(d.fg), p = GemmDim(d.p), k = GemmDim(d.k);
      if (need_dw && d.n == 0 && req[1] != kAddTo) std::fill(dw, dw + d.f * d.k, T(0));
      T* db = need_db ? static_cast<T*>(in_grad[2].dptr) : nullptr;
      if (need_db && req[2] != kAddTo) std::fill(db, db + d.f, T(0));
      for (std::int64_t i = 0; i < d.n; ++i) {
        if (need_db) {
          // Summed per image, before the products below evict its output gradient from the cache.
          for (std::int64_t f = 0; f < d.f; ++f) db[f] += internal::SumContiguous(dy + (i * d.f + f) * d.p, d.p);
        }
        // The weight gradient sums over the batch: overwrite on the first image unless accumulating.
        const double beta_w = (i == 0 && req[1] != kAddTo) ? 0.0 : 1.0;
        if (need_dx && req[0] != kAddTo && !Direct()) {
          std::fill(dx + i * d.c * d.plane, dx + (i + 1) * d.c * d.plane, T(0));
        }
        for (std::int64_t gi = 0; gi < d.groups; ++gi) {
          const T* dyg = dy + (i * d.f + gi * d.fg) * d.p;
          const T* wg = w + gi * d.fg * d.k;
          const std::int64_t in_off = (i * d.c + gi * d.cg) * d.plane;
          if (need_dw) {
            const T* cols = x + in_off;
            if (!Direct()) {
              Im2Col(x + in_off, d, geo_, col);
              cols = col;
            }
            // dW_g (fg x k) += dY_g (fg x p) * cols^T (p x k)
            internal::CpuGemm(Mat(dyg), Mat(cols), Mat(dw + gi * d.fg * d.k), false, true, fg, k, p, 1.0, beta_w);
          }
          if (need_dx) {
            // dcols (k x p) = W_g^T (k x fg) * dY_g (fg x p)
            if (Direct()) {
              internal::CpuGemm(Mat(wg), Mat(dyg), Mat(dx + in_off), true, false, k, p, fg, 1.0,
                                req[0] == kAddTo ? 1.0 : 0.0);
            } else {
              internal::CpuGemm(Mat(wg), Mat(dyg), Mat(col), true, false, k, p, fg, 1.0, 0.0);
              Col2ImAdd(col, d, geo_, dx + in_off);
            }
          }
        }
      }
    });
  }

 private:
  // Whether a call on half-precision arrays runs as they are (oneDNN's bfloat16 convolution); otherwise it runs
  // on float32 copies (FloatStaging).
  bool HalfNative(const TBlob& x, const TShape& in, bool data_gradient) const {
#if TROUPE_HAVE_DNNL
    return x.dtype == DType::kBfloat16 && DnnlConv::Wanted(param_, x.dtype, in, data_gradient);
#else
    (void)x, (void)in, (void)data_gradient;
    return false;
#endif
  }

  // A 1x1 kernel with unit stride and no padding reads the image as its own column matrix.
  bool Direct() const {
    return geo_.kd == 1 && geo_.kh == 1 && geo_.kw == 1 && geo_.sd == 1 && geo_.sh == 1 && geo_.sw == 1 &&
           geo_.pd == 0 && geo_.ph == 0 && geo_.pw == 0;
  }

  // (N, C, [D,] H, W) input and output shapes.
  ConvDims Dims(const TShape& in, const TShape& out) const {
    const bool three_d = in.ndim() == 5;
    ConvDims d{};
    d.n = in[0], d.c = in[1], d.depth = three_d ? in[2] : 1, d.h = in[in.ndim() - 2], d.w = in[in.ndim() - 1];
    d.f = out[1], d.od = three_d ? out[2] : 1, d.oh = out[out.ndim() - 2], d.ow = out[out.ndim() - 1];
    d.groups = param_.num_group;
    d.cg = d.c / d.groups;
    d.fg = d.f / d.groups;
    d.k = d.cg * geo_.kd * geo_.kh * geo_.kw;
    d.p = d.od * d.oh * d.ow;
    d.plane = d.depth * d.h * d.w;
    return d;
  }

  // The column buffer of one image and group, from the temp-space resource. Like MXNet, a buffer larger
  // than the 'workspace' cap is an error rather than a silent over-allocation.
  template <typename T>
  T* ColSpace(const OpContext& ctx, const ConvDims& d) const {
    const std::size_t bytes = static_cast<std::size_t>(std::max<std::int64_t>(d.k * d.p, 1)) * sizeof(T);
    const std::size_t cap = static_cast<std::size_t>(param_.workspace) << 20;
    if (bytes > cap) {
      throw Error("Convolution: the im2col buffer of one image needs " + std::to_string((bytes + (1 << 20) - 1) >> 20) +
                  " MB but parameter 'workspace' is " + std::to_string(param_.workspace) + " MB; raise 'workspace'");
    }
    return static_cast<T*>(ctx.requested.at(0).get_space(bytes));
  }

  ConvolutionParam param_;
  ConvGeometry geo_;
  ConvPostOps post_;
  internal::FloatStaging staging_;
#if TROUPE_HAVE_DNNL
  DnnlConv dnnl_{param_, geo_, post_};
#endif
};

}  // namespace

std::unique_ptr<Operator> CreateConvolutionCpuOp(const ConvolutionParam& param, ConvPostOps post) {
  return std::make_unique<ConvolutionCpuOp>(param, post);
}

}  // namespace troupe
