// LayerNorm (alias _npx_layer_norm): normalisation of every slice along one axis by its own mean and standard
// deviation, then a scale gamma and a shift beta per position of that axis. CPU only; a GPU context is an
// error naming the operator.
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

#include "base/error.h"
#include "op/internal/op_util.h"
#include "op/nn/common/device_math.h"
#include "op/operator.h"
#include "op/param.h"

namespace troupe {

namespace {

using act_norm::AxisView;
using internal::FloatSwitch;

constexpr const char* kName = "LayerNorm";

struct LayerNormParam : Params<LayerNormParam> {
  int axis = -1;
  float eps = 1e-5f;
  bool output_mean_var = false;
  static void Declare(ParamSchema<LayerNormParam>& s) {
    s.Field("axis", &LayerNormParam::axis)
        .Default(-1)
        .Describe("The axis to normalise along (negative counts from the end); gamma and beta have its size.");
    s.Field("eps", &LayerNormParam::eps).Default(1e-5f).Describe("An epsilon to prevent division by 0.");
    s.Field("output_mean_var", &LayerNormParam::output_mean_var)
        .Default(false)
        .Describe("Output the mean and std computed along the axis as well (they get no gradient).");
  }
};

class LayerNormOp final : public Operator {
 public:
  explicit LayerNormOp(const LayerNormParam& p) : p_(p) {}

  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
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
      for (std::int64_t o = 0; o < v.outer; ++o) {
        for (std::int64_t i = 0; i < v.inner; ++i) {
          const std::int64_t base = o * v.n * v.inner + i;
          double sum = 0;
          for (std::int64_t k = 0; k < v.n; ++k) sum += px[base + k * v.inner];
          const double mean = sum / static_cast<double>(v.n);
          double sq = 0;
          for (std::int64_t k = 0; k < v.n; ++k) {
            const double d = px[base + k * v.inner] - mean;
            sq += d * d;
          }
          const double sd = std::sqrt(sq / static_cast<double>(v.n) + eps);
          // Statistics first: y may be x's memory (kWriteInplace).
          Assign(mean_out + o * v.inner + i, req[1], static_cast<T>(mean));
          Assign(std_out + o * v.inner + i, req[2], static_cast<T>(sd));
          if (req[0] == kNullOp) continue;
          for (std::int64_t k = 0; k < v.n; ++k) {
            const std::int64_t j = base + k * v.inner;
            Assign(y + j, req[0], static_cast<T>((px[j] - mean) / sd * gamma[k] + beta[k]));
          }
        }
      }
    });
  }

  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in,
                const std::vector<TBlob>& out, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    const TBlob& x = in[0];
    const AxisView v = act_norm::ViewAround(x.shape, internal::NormalizeAxis(p_.axis, x.shape.ndim(), kName, "axis"));
    FloatSwitch(x.dtype, kName, [&](auto tag) {
      using T = decltype(tag);
      const T* og = out_grad[0].dptr_as<T>();
      const T* px = x.dptr_as<T>();
      const T* gamma = in[1].dptr_as<T>();
      const T* mean = out[1].dptr_as<T>();
      const T* sd = out[2].dptr_as<T>();
      // d gamma and d beta: sums over every slice, per axis position.
      std::vector<double> dgamma(static_cast<std::size_t>(v.n), 0.0), dbeta(static_cast<std::size_t>(v.n), 0.0);
      T* gx = req[0] == kNullOp ? nullptr : in_grad[0].dptr_as<T>();
      for (std::int64_t o = 0; o < v.outer; ++o) {
        for (std::int64_t i = 0; i < v.inner; ++i) {
          const std::int64_t base = o * v.n * v.inner + i;
          const double m = mean[o * v.inner + i], s = sd[o * v.inner + i];
          double sum_w = 0, sum_wx = 0;
          for (std::int64_t k = 0; k < v.n; ++k) {
            const std::int64_t j = base + k * v.inner;
            const double xhat = (px[j] - m) / s;
            const double w = og[j] * static_cast<double>(gamma[k]) / s;
            dgamma[k] += og[j] * xhat;
            dbeta[k] += og[j];
            sum_w += w;
            sum_wx += w * xhat;
          }
          if (gx == nullptr) continue;
          const double mean_w = sum_w / static_cast<double>(v.n), mean_wx = sum_wx / static_cast<double>(v.n);
          for (std::int64_t k = 0; k < v.n; ++k) {
            const std::int64_t j = base + k * v.inner;
            const double xhat = (px[j] - m) / s;
            const double w = og[j] * static_cast<double>(gamma[k]) / s;
            Assign(gx + j, req[0], static_cast<T>(w - mean_w - xhat * mean_wx));
          }
        }
      }
      if (req[1] != kNullOp) {
        internal::AssignEach(in_grad[1].dptr_as<T>(), v.n, req[1],
                             [&](std::int64_t k) { return static_cast<T>(dgamma[k]); });
      }
      if (req[2] != kNullOp) {
        internal::AssignEach(in_grad[2].dptr_as<T>(), v.n, req[2],
                             [&](std::int64_t k) { return static_cast<T>(dbeta[k]); });
      }
    });
  }

 private:
  LayerNormParam p_;
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
    if (ctx.is_gpu()) internal::ThrowNoImplementation(kName, ctx);
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
