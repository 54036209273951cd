// Deconvolution (2-D, NCHW; MXNet 1.9's name, parameters and defaults: no_bias is true unless given), the
// transpose of a convolution: the property, the shared geometry (deconvolution.h) and the CPU operator. The
// GPU operator is deconvolution.cu (the same scheme on the cuDNN convolution).
//
// Deconvolution from C to F channels with weight (C, F / num_group, kh, kw) is the data gradient of the
// Convolution from F to C channels with the same weight and geometry, so it runs on that convolution's CPU
// operator (oneDNN or im2col, op/nn/convolution): Forward is the convolution's data gradient, the data
// gradient is the convolution's Forward, the weight gradient is the convolution's weight gradient with the
// roles of input and output exchanged. Only the bias is handled here.
//
// Output size per spatial dimension: stride * (in - 1) + dilate * (kernel - 1) + 1 - 2 * pad + adj; with
// target_shape, pad and adj are chosen to reach it (MXNet's InferPad).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "op/internal/op_util.h"
#include "op/nn/common/geometry.h"
#include "op/nn/convolution/convolution.h"
#include "op/nn/deconvolution/deconvolution.h"
#include "op/operator.h"
#include "op/param.h"

namespace troupe {

namespace {

constexpr const char* kOp = "Deconvolution";

std::int64_t At(const TShape& t, int i, std::int64_t fallback) { return t.ndim() == 2 ? t[i] : fallback; }

}  // namespace

void DeconvolutionPadAdj(const DeconvolutionParam& p, const std::int64_t in[2], std::int64_t pad[2],
                         std::int64_t adj[2]) {
  for (int i = 0; i < 2; ++i) {
    pad[i] = At(p.pad, i, 0);
    adj[i] = At(p.adj, i, 0);
    const std::int64_t target = At(p.target_shape, i, 0);
    if (target > 0) {
      const std::int64_t total = At(p.stride, i, 1) * (in[i] - 1) + At(p.dilate, i, 1) * (p.kernel[i] - 1) + 1 - target;
      if (total < 0) {
        throw Error(std::string(kOp) + ": target_shape " + p.target_shape.ToString() + " is larger than the " +
                    "deconvolution of the input can reach without adj");
      }
      pad[i] = (total + 1) / 2;
      adj[i] = total % 2;
    }
  }
}

ConvolutionParam DeconvolutionConvParam(const DeconvolutionParam& p, std::int64_t channels_in,
                                        const std::int64_t pad[2]) {
  ConvolutionParam c;
  c.kernel = p.kernel;
  c.stride = p.stride.ndim() == 2 ? p.stride : TShape{1, 1};
  c.dilate = p.dilate.ndim() == 2 ? p.dilate : TShape{1, 1};
  c.pad = TShape{pad[0], pad[1]};
  c.num_filter = static_cast<int>(channels_in);
  c.num_group = p.num_group;
  c.workspace = p.workspace;
  c.no_bias = true;
  return c;
}

namespace {

class DeconvolutionOp final : public DeconvolutionOpBase {
 public:
  using DeconvolutionOpBase::DeconvolutionOpBase;

 private:
  std::unique_ptr<Operator> MakeConv(const TShape& data, const std::int64_t pad[2], const std::int64_t[2]) override {
    return CreateConvolutionCpuOp(DeconvolutionConvParam(p_, data[1], pad));
  }
  // Half-precision arrays: the bias is added and summed in float, each result rounded once (the
  // convolution underneath runs the type itself: oneDNN's bfloat16 kernels, or float32 on copies).
  void AddBias(const OpContext&, const TBlob& bias, const TBlob& out) override {
    internal::FloatHalfSwitch(out.dtype, kOp, [&](auto tag) {
      using T = decltype(tag);
      using A = internal::AccType<T>;
      const T* b = static_cast<const T*>(bias.dptr);
      T* o = static_cast<T*>(out.dptr);
      const std::int64_t n = out.shape[0], f = out.shape[1], hw = out.shape[2] * out.shape[3];
      for (std::int64_t i = 0; i < n; ++i) {
        for (std::int64_t c = 0; c < f; ++c) {
          T* row = o + (i * f + c) * hw;
          const A bc = static_cast<A>(b[c]);
          for (std::int64_t j = 0; j < hw; ++j) row[j] = static_cast<T>(static_cast<A>(row[j]) + bc);
        }
      }
    });
  }
  void BiasGrad(const OpContext&, const TBlob& og, const TBlob& gb, OpReqType req) override {
    internal::FloatHalfSwitch(og.dtype, kOp, [&](auto tag) {
      using T = decltype(tag);
      const T* g = static_cast<const T*>(og.dptr);
      const std::int64_t n = og.shape[0], f = og.shape[1], hw = og.shape[2] * og.shape[3];
      internal::AssignEach(static_cast<T*>(gb.dptr), f, req, [&](std::int64_t c) {
        double s = 0;
        for (std::int64_t i = 0; i < n; ++i) {
          const T* row = g + (i * f + c) * hw;
          if constexpr (internal::kIsHalf<T>) {
            for (std::int64_t j = 0; j < hw; ++j) s += static_cast<double>(static_cast<float>(row[j]));
          } else {
            s += internal::SumContiguous(row, hw);
          }
        }
        return static_cast<internal::AccType<T>>(s);
      });
    });
  }
};

class DeconvolutionProp final : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override {
    p_.Init(kwargs, kOp);
    if (p_.kernel.ndim() != 2) {
      throw Error(std::string(kOp) + ": parameter 'kernel' is " + p_.kernel.ToString() +
                  "; only 2-D deconvolution is supported, give 2 values (h, w)");
    }
    CheckGeometryTuple(p_.kernel, 2, kOp, "kernel", 1, false);
    CheckGeometryTuple(p_.stride, 2, kOp, "stride", 1, true);
    CheckGeometryTuple(p_.dilate, 2, kOp, "dilate", 1, true);
    CheckGeometryTuple(p_.pad, 2, kOp, "pad", 0, true);
    CheckGeometryTuple(p_.adj, 2, kOp, "adj", 0, true);
    CheckGeometryTuple(p_.target_shape, 2, kOp, "target_shape", 0, true);
    if (p_.layout != "None" && p_.layout != "NCHW") {
      throw Error(std::string(kOp) + ": parameter 'layout' is '" + p_.layout + "'; only NCHW is supported");
    }
    if (p_.num_filter % p_.num_group != 0) {
      throw Error(std::string(kOp) + ": num_filter (" + std::to_string(p_.num_filter) +
                  ") must be divisible by num_group (" + std::to_string(p_.num_group) + ")");
    }
    for (int i = 0; i < 2; ++i) {
      if (At(p_.adj, i, 0) >= At(p_.stride, i, 1) && At(p_.target_shape, i, 0) == 0) {
        throw Error(std::string(kOp) + ": adj " + p_.adj.ToString() + " must be smaller than stride");
      }
    }
  }
  Kwargs GetParams() const override { return p_.GetParams(); }
  std::vector<std::string> ListArguments() const override {
    if (p_.no_bias) return {"data", "weight"};
    return {"data", "weight", "bias"};
  }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    aux->clear();
    out->assign(1, TShape());
    if (!p_.no_bias) AssignShape(in, 2, TShape{p_.num_filter}, kOp, "bias");
    const TShape data = (*in)[0];
    if (data.ndim() < 0) return false;
    if (data.ndim() != 4) {
      throw Error(std::string(kOp) + ": argument 'data' has shape " + data.ToString() +
                  "; 2-D deconvolution needs 4 dimensions (batch, channel, height, width)");
    }
    if (data[1] >= 0) {
      if (data[1] % p_.num_group != 0) {
        throw Error(std::string(kOp) + ": argument 'data' has " + std::to_string(data[1]) +
                    " channels, which is not divisible by num_group " + std::to_string(p_.num_group));
      }
      AssignShape(in, 1, TShape{data[1], p_.num_filter / p_.num_group, p_.kernel[0], p_.kernel[1]}, kOp, "weight");
    }
    if (data[2] < 0 || data[3] < 0) return false;
    const std::int64_t size[2] = {data[2], data[3]};
    std::int64_t pad[2], adj[2];
    DeconvolutionPadAdj(p_, size, pad, adj);
    TShape o{data[0], p_.num_filter, -1, -1};
    for (int i = 0; i < 2; ++i) {
      o[2 + i] = At(p_.stride, i, 1) * (size[i] - 1) + At(p_.dilate, i, 1) * (p_.kernel[i] - 1) + 1 - 2 * pad[i] + adj[i];
      if (o[2 + i] <= 0) {
        throw Error(std::string(kOp) + ": the output of " + data.ToString() + " would have no rows or columns (pad " +
                    p_.pad.ToString() + " too large)");
      }
    }
    (*out)[0] = o;
    for (const auto& s : *in) {
      if (!s.known()) return false;
    }
    return o.known();
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<DeconvolutionProp>(*this); }
  std::string TypeString() const override { return kOp; }
  std::vector<ResourceRequest> ForwardResource(const std::vector<TShape>&) const override {
    return {ResourceRequest::kTempSpace};
  }
  std::vector<ResourceRequest> BackwardResource(const std::vector<TShape>&) const override {
    return {ResourceRequest::kTempSpace};
  }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>&) const override {
    return {out_grad[0], in_data[0], in_data[1]};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // deconvolution.cu
    return std::make_unique<DeconvolutionOp>(p_);
  }

 private:
  DeconvolutionParam p_;
};

}  // namespace

TROUPE_REGISTER_OP_PROPERTY(Deconvolution, DeconvolutionProp)
    .describe("Computes 2-D transposed convolution (deconvolution) on 4-D input (NCHW).")
    .add_argument("data", "NDArray-or-Symbol", "Input tensor to the deconvolution operation.")
    .add_argument("weight", "NDArray-or-Symbol", "Weights (in_channels, num_filter / num_group, kh, kw).")
    .add_argument("bias", "NDArray-or-Symbol", "Bias added to the output after the deconvolution (num_filter,).")
    .add_arguments(DeconvolutionParam::Docs());

}  // namespace troupe
