// Convolution (2-D, NCHW) on the CPU: im2col into the temp-space resource, then one OpenBLAS product per
// image and group; backward recomputes the columns for the weight gradient and turns the column gradient back
// into an image gradient with col2im. A 1x1 kernel with stride 1 and no padding needs no columns at all (the
// image already is the column matrix).
//
// im2col/col2im dominate the time beside the products (the benchmark holds the whole layer to 0.7x of the
// bare products), so their inner loops are contiguous copies/adds over the valid range of one output row,
// with the range computed once per kernel column instead of testing every element.
#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <string>

#include "op/nn/convolution/convolution.h"
#include "tensor/detail/kernels.h"

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

// The shapes of one convolution call.
struct ConvDims {
  std::int64_t n, c, h, w, f, oh, ow, groups, cg, fg, k, p;
};

// Columns of one image and group: row (c, ki, kj), column (oh, ow) holds the input pixel that kernel tap
// (ki, kj) of input channel c sees at output (oh, ow), 0 in the padding.
template <typename T>
void Im2Col(const T* im, const ConvDims& d, const ConvGeometry& g, T* col) {
  const std::int64_t H = d.h, W = d.w, OH = d.oh, OW = d.ow, P = d.p;
  for (std::int64_t c = 0; c < d.cg; ++c) {
    const T* plane = im + c * H * W;
    for (std::int64_t ki = 0; ki < g.kh; ++ki) {
      for (std::int64_t kj = 0; kj < g.kw; ++kj) {
        T* row = col + ((c * g.kh + ki) * g.kw + kj) * P;
        // iw = ow * sw + off: the outputs whose input column lies inside the image are [lo, hi).
        const std::int64_t off = kj * g.dw - g.pw;
        std::int64_t lo = off >= 0 ? 0 : (-off + g.sw - 1) / g.sw;
        std::int64_t hi = W - off <= 0 ? 0 : (W - off + g.sw - 1) / g.sw;
        lo = std::min(lo, OW);
        hi = std::max(lo, std::min(hi, OW));
        for (std::int64_t oh = 0; oh < OH; ++oh) {
          T* dst = row + oh * OW;
          const std::int64_t ih = oh * g.sh - g.ph + ki * g.dh;
          if (ih < 0 || ih >= H) {
            std::fill(dst, dst + OW, T(0));
            continue;
          }
          const T* src = plane + ih * W + off;
          std::fill(dst, dst + lo, T(0));
          if (g.sw == 1) {
            std::memcpy(dst + lo, src + lo, static_cast<std::size_t>(hi - lo) * sizeof(T));
          } else {
            for (std::int64_t x = lo; x < hi; ++x) dst[x] = src[x * g.sw];
          }
          std::fill(dst + hi, dst + OW, T(0));
        }
      }
    }
  }
}

// The adjoint of Im2Col: adds every column entry onto the input pixel it was copied from.
template <typename T>
void Col2ImAdd(const T* col, const ConvDims& d, const ConvGeometry& g, T* im) {
  const std::int64_t H = d.h, W = d.w, OH = d.oh, OW = d.ow, P = d.p;
  for (std::int64_t c = 0; c < d.cg; ++c) {
    T* plane = im + c * H * W;
    for (std::int64_t ki = 0; ki < g.kh; ++ki) {
      for (std::int64_t kj = 0; kj < g.kw; ++kj) {
        const T* row = col + ((c * g.kh + ki) * g.kw + kj) * P;
        const std::int64_t off = kj * g.dw - g.pw;
        std::int64_t lo = off >= 0 ? 0 : (-off + g.sw - 1) / g.sw;
        std::int64_t hi = W - off <= 0 ? 0 : (W - off + g.sw - 1) / g.sw;
        lo = std::min(lo, OW);
        hi = std::max(lo, std::min(hi, OW));
        for (std::int64_t oh = 0; oh < OH; ++oh) {
          const std::int64_t ih = oh * g.sh - g.ph + ki * g.dh;
          if (ih < 0 || ih >= H) continue;
          const T* src = row + oh * OW;
          T* dst = plane + ih * W + off;
          if (g.sw == 1) {
            for (std::int64_t x = lo; x < hi; ++x) dst[x] += src[x];
          } else {
            for (std::int64_t x = lo; x < hi; ++x) dst[x * g.sw] += src[x];
          }
        }
      }
    }
  }
}

class ConvolutionCpuOp : public Operator {
 public:
  explicit ConvolutionCpuOp(const ConvolutionParam& p) : param_(p), geo_(MakeConvGeometry(p)) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const ConvDims d = Dims(in_data[0].shape, out_data[0].shape);
    internal::FloatSwitch(in_data[0].dtype, kOp, [&](auto tag) {
      using T = decltype(tag);
      const T* x = static_cast<const T*>(in_data[0].dptr);
      const T* w = static_cast<const T*>(in_data[1].dptr);
      T* y = static_cast<T*>(out_data[0].dptr);
      T* col = Direct() ? nullptr : ColSpace<T>(ctx, d);
      const int m = GemmDim(d.fg), n = GemmDim(d.p), k = GemmDim(d.k);
      const double beta = req[0] == kAddTo ? 1.0 : 0.0;
      for (std::int64_t i = 0; i < d.n; ++i) {
        for (std::int64_t gi = 0; gi < d.groups; ++gi) {
          const T* xg = x + (i * d.c + gi * d.cg) * d.h * d.w;
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
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    const ConvDims d = Dims(in_data[0].shape, out_grad[0].shape);
    const bool need_dx = req[0] != kNullOp, need_dw = req[1] != kNullOp;
    const bool need_db = !param_.no_bias && req[2] != kNullOp;
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
          std::fill(dx + i * d.c * d.h * d.w, dx + (i + 1) * d.c * d.h * d.w, T(0));
        }
        for (std::int64_t gi = 0; gi < d.groups; ++gi) {
          const T* dyg = dy + (i * d.f + gi * d.fg) * d.p;
          const T* wg = w + gi * d.fg * d.k;
          const std::int64_t in_off = (i * d.c + gi * d.cg) * d.h * d.w;
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
  // A 1x1 kernel with unit stride and no padding reads the image as its own column matrix.
  bool Direct() const { return geo_.kh == 1 && geo_.kw == 1 && geo_.sh == 1 && geo_.sw == 1 && geo_.ph == 0 && geo_.pw == 0; }

  ConvDims Dims(const TShape& in, const TShape& out) const {
    ConvDims d{};
    d.n = in[0], d.c = in[1], d.h = in[2], d.w = in[3];
    d.f = out[1], d.oh = out[2], d.ow = out[3];
    d.groups = param_.num_group;
    d.cg = d.c / d.groups;
    d.fg = d.f / d.groups;
    d.k = d.cg * geo_.kh * geo_.kw;
    d.p = d.oh * d.ow;
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
};

}  // namespace

std::unique_ptr<Operator> CreateConvolutionCpuOp(const ConvolutionParam& param) {
  return std::make_unique<ConvolutionCpuOp>(param);
}

}  // namespace troupe
