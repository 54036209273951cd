// Pad (alias pad): pads the spatial axes of a 4-D (N, C, H, W) or 5-D (N, C, D, H, W) array: the property
// and the CPU operator. The GPU operator is pad.cu.
//
// Semantics, as MXNet 1.9's (src/operator/pad*): pad_width is (before_1, after_1, ..., before_N, after_N) for
// every axis, and the first two axes must not be padded; the output has size before + size + after per axis.
//   'constant': the padding is constant_value;
//   'edge':     the padding repeats the edge value;
//   'reflect':  the padding mirrors the input about the edge without repeating it (numpy's 'reflect'), so a
//               padding must be smaller than its axis (MXNet checks only some axes of a 5-D input; troupe
//               checks every spatial axis, where MXNet would read out of bounds).
// Backward: each input position gets the sum of the head gradients of the output positions that copy it.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "op/internal/op_util.h"
#include "op/nn/pad/pad.h"
#include "op/operator.h"
#include "op/param.h"

namespace troupe {

namespace {

using internal::FloatSwitch;

constexpr const char* kName = "Pad";

// Calls f(output offset, input offset or -1) for every output element; the leading two axes are not padded.
template <typename F>
void ForEachOutput(const TShape& in, const TShape& out, const std::vector<std::int64_t>& pad, char mode, F&& f) {
  const int nd = in.ndim();
  const int spatial = nd - 2;
  std::vector<std::vector<std::int64_t>> src(static_cast<std::size_t>(spatial));
  for (int a = 0; a < spatial; ++a) {
    for (std::int64_t o = 0; o < out[a + 2]; ++o) {
      src[a].push_back(padding::SourceIndex(o, in[a + 2], pad[2 * (a + 2)], mode));
    }
  }
  const std::int64_t slices = in[0] * in[1];
  const std::int64_t in_slice = in.ProdDims(2, nd), out_slice = out.ProdDims(2, nd);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(spatial), 0);
  for (std::int64_t s = 0; s < slices; ++s) {
    std::fill(idx.begin(), idx.end(), 0);
    for (std::int64_t q = 0; q < out_slice; ++q) {
      std::int64_t from = 0;
      for (int a = 0; a < spatial && from >= 0; ++a) {
        const std::int64_t i = src[a][idx[a]];
        from = i < 0 ? -1 : from * in[a + 2] + i;
      }
      f(s * out_slice + q, from < 0 ? -1 : s * in_slice + from);
      for (int a = spatial - 1; a >= 0; --a) {  // next output position, last axis fastest
        if (++idx[a] < out[a + 2]) break;
        idx[a] = 0;
      }
    }
  }
}

class PadOp final : public Operator {
 public:
  explicit PadOp(const PadParam& p) : p_(p), mode_(p.mode[0]) {}

  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    FloatSwitch(in[0].dtype, kName, [&](auto tag) {
      using T = decltype(tag);
      const T* x = in[0].dptr_as<T>();
      T* y = out[0].dptr_as<T>();
      const T c = static_cast<T>(p_.constant_value);
      ForEachOutput(in[0].shape, out[0].shape, p_.pad_width, mode_,
                    [&](std::int64_t o, std::int64_t i) { Assign(y + o, req[0], i < 0 ? c : x[i]); });
    });
  }

  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    FloatSwitch(in_grad[0].dtype, kName, [&](auto tag) {
      using T = decltype(tag);
      const T* og = out_grad[0].dptr_as<T>();
      T* gx = in_grad[0].dptr_as<T>();
      if (req[0] != kAddTo) std::fill(gx, gx + in_grad[0].Size(), T(0));
      ForEachOutput(in_grad[0].shape, out_grad[0].shape, p_.pad_width, mode_, [&](std::int64_t o, std::int64_t i) {
        if (i >= 0) gx[i] += og[o];
      });
    });
  }

 private:
  PadParam p_;
  char mode_;
};

class PadProp final : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override { p_.Init(kwargs, kName); }
  Kwargs GetParams() const override { return p_.GetParams(); }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    in->resize(1);
    aux->clear();
    const TShape d = (*in)[0];
    if (!d.known()) return false;
    const std::string op = kName;
    if (d.ndim() != 4 && d.ndim() != 5) {
      throw Error(op + ": 'data' must be 4-D or 5-D (as in MXNet), got " + d.ToString());
    }
    const std::vector<std::int64_t>& pad = p_.pad_width;
    const std::string pad_text = param_detail::PrintTuple(pad);
    if (pad.size() != static_cast<std::size_t>(2 * d.ndim())) {
      throw Error(op + ": parameter 'pad_width' has " + std::to_string(pad.size()) + " values but a " +
                  std::to_string(d.ndim()) + "-D input needs " + std::to_string(2 * d.ndim()) +
                  " (before and after each axis)");
    }
    if (pad[0] != 0 || pad[1] != 0 || pad[2] != 0 || pad[3] != 0) {
      throw Error(op + ": parameter 'pad_width' " + pad_text +
                  " pads the first two axes; only the spatial axes (from the third) may be padded");
    }
    for (std::int64_t w : pad) {
      if (w < 0) throw Error(op + ": parameter 'pad_width' " + pad_text + " has a negative width");
    }
    TShape o = d;
    for (int a = 0; a < d.ndim(); ++a) {
      if (p_.mode == "reflect" && a >= 2 && (pad[2 * a] >= d[a] || pad[2 * a + 1] >= d[a])) {
        throw Error(op + ": mode 'reflect' needs paddings smaller than the axis, but axis " + std::to_string(a) +
                    " has size " + std::to_string(d[a]) + " and pad_width " + pad_text);
      }
      o[a] = d[a] + pad[2 * a] + pad[2 * a + 1];
    }
    *out = {o};
    return true;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<PadProp>(*this); }
  std::string TypeString() const override { return kName; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>&,
                                             const std::vector<int>&) const override {
    return {out_grad[0]};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // pad.cu
    return std::make_unique<PadOp>(p_);
  }

 private:
  PadParam p_;
};

}  // namespace

TROUPE_REGISTER_OP_PROPERTY(Pad, PadProp)
    .describe("Pads the spatial axes of a 4-D or 5-D array with a constant, the edge values or a reflection.")
    .add_argument("data", "NDArray-or-Symbol", "An n-dimensional input array.")
    .add_arguments(PadParam::Docs())
    .add_alias("pad");

}  // namespace troupe
