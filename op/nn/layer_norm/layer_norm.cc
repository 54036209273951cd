// LayerNorm (alias _npx_layer_norm) on the CPU: normalisation of every slice along one axis by its own mean
// and standard deviation, then a scale gamma and a shift beta per position of that axis. The element code is
// layer_norm.h's, which layer_norm.cu runs on the GPU.
//
// Semantics, as MXNet 1.9's (src/operator/nn/layer_norm*.h):
//   mean = mean(x, axis), std = sqrt(mean((x - mean)^2, axis) + eps)   (the biased variance)
//   out  = (x - mean) / std * gamma + beta
// Outputs 'output', 'mean', 'std'; mean and std have the data's shape with the axis dimension 1 and are
// visible only with output_mean_var=True. No gradient flows through mean and std (MXNet's backward takes
// only the head gradient of 'output'):
//   xhat = (x - mean) / std, w = og * gamma / std
//   d gamma = sum(og * xhat) and d beta = sum(og) over every position but the axis
//   d x = w - mean(w, axis) - xhat * mean(w * xhat, axis)
// eps is a float parameter (MXNet's type), so float64 data uses the float value widened. Sums run in double.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "op/nn/layer_norm/layer_norm.h"

#include "base/error.h"
#include "op/internal/float_staging.h"
#include "op/internal/op_util.h"

namespace troupe {

namespace {

using act_norm::AxisView;
using internal::FloatSwitch;
using layer_norm::kName;

class LayerNormOp final : public Operator {
 public:
  explicit LayerNormOp(const LayerNormParam& p) : p_(p) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>& aux) override {
    // Half-precision arrays: the float32 code on converted copies.
    if (internal::AnyHalf({&in, &out})) return staging_.Forward(*this, ctx, in, req, out, aux);
    const TBlob& x = in[0];
    const AxisView v = act_norm::ViewAround(x.shape, internal::NormalizeAxis(p_.axis, x.shape.ndim(), kName, "axis"));
    FloatSwitch(x.dtype, kName, [&](auto tag) {
      using T = decltype(tag);
      const T* px = x.dptr_as<T>();
      const T* gamma = in[1].dptr_as<T>();
      const T* beta = in[2].dptr_as<T>();
      T* y = out[0].dptr_as<T>();
      T* mean_out = out[1].dptr_as<T>();
      T* std_out = out[2].dptr_as<T>();
      const double eps = static_cast<double>(static_cast<T>(p_.eps));
      for (std::int64_t s = 0; s < v.outer * v.inner; ++s) {
        layer_norm::ForwardSlice(v, s, eps, px, gamma, beta, y, mean_out, std_out, req[0], req[1], req[2]);
      }
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in,
                const std::vector<TBlob>& out, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>& aux) override {
    if (internal::AnyHalf({&out_grad, &in, &in_grad})) {
      return staging_.Backward(*this, ctx, out_grad, in, out, req, in_grad, aux);
    }
    const TBlob& x = in[0];
    const AxisView v = act_norm::ViewAround(x.shape, internal::NormalizeAxis(p_.axis, x.shape.ndim(), kName, "axis"));
    FloatSwitch(x.dtype, kName, [&](auto tag) {
      using T = decltype(tag);
      const T* og = out_grad[0].dptr_as<T>();
      const T* px = x.dptr_as<T>();
      const T* gamma = in[1].dptr_as<T>();
      const T* mean = out[1].dptr_as<T>();
      const T* sd = out[2].dptr_as<T>();
      if (req[0] != kNullOp) {
        T* gx = in_grad[0].dptr_as<T>();
        for (std::int64_t s = 0; s < v.outer * v.inner; ++s) {
          layer_norm::DataGradientSlice(v, s, og, px, gamma, mean, sd, gx, req[0]);
        }
      }
      if (req[1] == kNullOp && req[2] == kNullOp) return;
      T* ggamma = req[1] == kNullOp ? nullptr : in_grad[1].dptr_as<T>();
      T* gbeta = req[2] == kNullOp ? nullptr : in_grad[2].dptr_as<T>();
      for (std::int64_t k = 0; k < v.n; ++k) {
        layer_norm::ScaleShiftGradient(v, k, og, px, mean, sd, ggamma, gbeta, req[1], req[2]);
      }
    });
  }

 private:
  LayerNormParam p_;
  internal::FloatStaging staging_;  // half-precision arrays: float32 on converted copies
};

class LayerNormProp final : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override { p_.Init(kwargs, kName); }
  Kwargs GetParams() const override { return p_.GetParams(); }
  std::vector<std::string> ListArguments() const override { return {"data", "gamma", "beta"}; }
  std::vector<std::string> ListOutputs() const override { return {"output", "mean", "std"}; }
  int NumOutputs() const override { return 3; }
  int NumVisibleOutputs() const override { return p_.output_mean_var ? 3 : 1; }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    in->resize(3);
    aux->clear();
    const TShape d = (*in)[0];
    if (!d.known()) return false;
    if (d.ndim() < 1) throw Error(std::string(kName) + ": 'data' must have at least 1 dimension, got a scalar");
    const int axis = internal::NormalizeAxis(p_.axis, d.ndim(), kName, "axis");
    AssignShape(in, 1, TShape{d[axis]}, kName, "gamma");
    AssignShape(in, 2, TShape{d[axis]}, kName, "beta");
    TShape moments = d;
    moments[axis] = 1;
    *out = {d, moments, moments};
    return true;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<LayerNormProp>(*this); }
  std::string TypeString() const override { return kName; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>& out_data) const override {
    return {out_grad[0], in_data[0], in_data[1], out_data[1], out_data[2]};
  }
  std::vector<std::pair<int, void*>> ForwardInplaceOption(const std::vector<int>& in_data,
                                                          const std::vector<void*>& out_data) const override {
    return {{in_data[0], out_data[0]}};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // layer_norm.cu
    return std::make_unique<LayerNormOp>(p_);
  }

 private:
  LayerNormParam p_;
};

}  // namespace

TROUPE_REGISTER_OP_PROPERTY(LayerNorm, LayerNormProp)
    .describe("Layer normalization: (x - mean) / sqrt(var + eps) * gamma + beta along one axis.")
    .add_argument("data", "NDArray-or-Symbol", "Input data to layer normalization.")
    .add_argument("gamma", "NDArray-or-Symbol", "gamma array (scale per position of the axis).")
    .add_argument("beta", "NDArray-or-Symbol", "beta array (shift per position of the axis).")
    .add_arguments(LayerNormParam::Docs())
    .add_alias("_npx_layer_norm");

}  // namespace troupe
