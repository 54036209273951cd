// BatchNorm: property and CPU implementation (cuDNN version in batch_norm.cu).
//
// Semantics, as MXNet 1.9's CPU operator (src/operator/nn/batch_norm.cc):
//   - training (is_train and not use_global_stats): per-channel batch mean and *biased* variance
//     (sum (x - mean)^2 / m); out = (x - mean) / sqrt(var + eps) * gamma + beta.
//   - otherwise the moving statistics replace the batch's.
//   - the hidden outputs 'mean' and 'var' hold the mean used and the *inverse standard deviation*
//     1 / sqrt(var + eps) (MXNet stores the same there on CPU and cuDNN; with output_mean_var they are
//     visible and 'var' is that inverse standard deviation).
//   - moving_mean = moving_mean * momentum + mean * (1 - momentum), and the same for moving_var with the
//     biased batch variance (MXNet's CPU operator uses the biased variance too). MXNet does this update in
//     Backward on CPU and in Forward with cuDNN; troupe does it in Forward on both devices, because here
//     Backward gets the auxiliary states read-only. After a forward + backward step the result is the same.
//   - fix_gamma: gamma is taken as 1 and its gradient is 0 (MXNet also overwrites the gamma input with 1;
//     troupe leaves inputs untouched).
// Backward always runs in training mode in OperatorRunner (as in MXNet), so the operator remembers whether
// its last Forward used batch statistics and differentiates accordingly: the full batch-norm gradient
// after a training forward, the affine map's gradient after an inference (or use_global_stats) forward.
#include "op/nn/batch_norm/batch_norm.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "tensor/detail/kernels.h"  // CpuParallelFor

namespace troupe {

namespace {

using internal::AccType;
using internal::FloatHalfSwitch;

class BatchNormCpuOp : public Operator {
 public:
  explicit BatchNormCpuOp(const BatchNormParam& p) : p_(p) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>& aux_states) override {
    const TBlob& x = in_data[0];
    const int axis = internal::NormalizeAxis(p_.axis, x.shape.ndim(), "BatchNorm", "axis");
    const act_norm::AxisView v = act_norm::ViewAround(x.shape, axis);
    const bool batch = ctx.is_train && !p_.use_global_stats;
    batch_stats_ = batch;
    FloatHalfSwitch(x.dtype, "BatchNorm", [&](auto tag) {
      using T = decltype(tag);
      using P = AccType<T>;  // the parameters', statistics' and arithmetic's type (float for half data)
      CheckParamType<P>(in_data[1], aux_states[0]);
      const T* px = x.dptr_as<T>();
      const P* gamma = in_data[1].dptr_as<P>();
      const P* beta = in_data[2].dptr_as<P>();
      P* moving_mean = aux_states[0].dptr_as<P>();
      P* moving_var = aux_states[1].dptr_as<P>();
      T* y = req[0] == kNullOp ? nullptr : out_data[0].dptr_as<T>();
      P* out_mean = req[1] == kNullOp ? nullptr : out_data[1].dptr_as<P>();
      P* out_invstd = req[2] == kNullOp ? nullptr : out_data[2].dptr_as<P>();
      const double m = static_cast<double>(v.outer * v.inner);
      const double mom = p_.momentum;
      // Per channel: each row of `inner` values is summed in P (in vector lanes), the rows in double.
      const auto rows_sum = [&](std::int64_t c, auto&& f) {
        double s = 0;
        for (std::int64_t o = 0; o < v.outer; ++o) {
          const T* row = px + (o * v.n + c) * v.inner;
          s += internal::SumEach<P>(v.inner, [&](std::int64_t i) { return f(static_cast<P>(row[i])); });
        }
        return s;
      };
      // Channels are independent: a range of them per kernel thread (the same results on any number).
      internal::CpuParallelFor(v.n, ChannelGrain(v), [&](std::int64_t c0, std::int64_t c1) {
        for (std::int64_t c = c0; c < c1; ++c) {
          double mean, invstd;
          if (batch) {
            mean = m > 0 ? rows_sum(c, [](P x) { return x; }) / m : 0.0;
            const P mean_t = static_cast<P>(mean);
            const double var = m > 0 ? rows_sum(c, [mean_t](P x) { return (x - mean_t) * (x - mean_t); }) / m : 0.0;
            // MXNet: a constant channel with eps 0 gets invstd 0 rather than infinity.
            invstd = (var == 0 && p_.eps == 0) ? 0.0 : 1.0 / std::sqrt(var + p_.eps);
            moving_mean[c] = static_cast<P>(moving_mean[c] * mom + mean * (1 - mom));
            moving_var[c] = static_cast<P>(moving_var[c] * mom + var * (1 - mom));
          } else {
            mean = moving_mean[c];
            invstd = 1.0 / std::sqrt(static_cast<double>(moving_var[c]) + p_.eps);
          }
          if (out_mean != nullptr) Assign(out_mean + c, req[1], static_cast<P>(mean));
          if (out_invstd != nullptr) Assign(out_invstd + c, req[2], static_cast<P>(invstd));
          if (y == nullptr) continue;
          const double w = p_.fix_gamma ? 1.0 : static_cast<double>(gamma[c]);
          const P scale = static_cast<P>(invstd * w), shift = static_cast<P>(beta[c] - mean * invstd * w);
          for (std::int64_t o = 0; o < v.outer; ++o) {
            const std::int64_t off = (o * v.n + c) * v.inner;
            internal::AssignEach(y + off, v.inner, req[0],
                                 [&](std::int64_t i) { return static_cast<P>(px[off + i]) * scale + shift; });
          }
        }
      });
    });
  }

  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>&) override {
    const TBlob& x = in_data[0];
    const int axis = internal::NormalizeAxis(p_.axis, x.shape.ndim(), "BatchNorm", "axis");
    const act_norm::AxisView v = act_norm::ViewAround(x.shape, axis);
    FloatHalfSwitch(x.dtype, "BatchNorm", [&](auto tag) {
      using T = decltype(tag);
      using P = AccType<T>;
      CheckParamType<P>(in_data[1], out_data[1]);
      const T* px = x.dptr_as<T>();
      const T* og = out_grad[0].dptr_as<T>();
      const P* gamma = in_data[1].dptr_as<P>();
      const P* saved_mean = out_data[1].dptr_as<P>();
      const P* saved_invstd = out_data[2].dptr_as<P>();
      T* gx = req[0] == kNullOp ? nullptr : in_grad[0].dptr_as<T>();
      P* ggamma = req[1] == kNullOp ? nullptr : in_grad[1].dptr_as<P>();
      P* gbeta = req[2] == kNullOp ? nullptr : in_grad[2].dptr_as<P>();
      const double m = static_cast<double>(v.outer * v.inner);
      internal::CpuParallelFor(v.n, ChannelGrain(v), [&](std::int64_t c0, std::int64_t c1) {
        for (std::int64_t c = c0; c < c1; ++c) {
          const double mean = saved_mean[c], invstd = saved_invstd[c];
          const double w = p_.fix_gamma ? 1.0 : static_cast<double>(gamma[c]);
          const P mean_t = static_cast<P>(mean);
          // Rows summed in P (vector lanes), rows together in double, as in Forward.
          double sum_og = 0, dotp = 0;
          for (std::int64_t o = 0; o < v.outer; ++o) {
            const std::int64_t off = (o * v.n + c) * v.inner;
            sum_og += internal::SumEach<P>(v.inner, [&](std::int64_t i) { return static_cast<P>(og[off + i]); });
            dotp += internal::SumEach<P>(v.inner, [&](std::int64_t i) {
              return (static_cast<P>(px[off + i]) - mean_t) * static_cast<P>(og[off + i]);
            });
          }
          if (gx != nullptr) {
            // Training: dx = (dy - mean(dy) - xhat * mean(dy * xhat)) * invstd * w, xhat = (x - mean) * invstd.
            const P k = static_cast<P>(batch_stats_ && m > 0 ? dotp * invstd * invstd / m : 0.0);
            const P grad_mean = static_cast<P>(batch_stats_ && m > 0 ? sum_og / m : 0.0);
            const P iw = static_cast<P>(invstd * w);
            for (std::int64_t o = 0; o < v.outer; ++o) {
              const std::int64_t off = (o * v.n + c) * v.inner;
              internal::AssignEach(gx + off, v.inner, req[0], [&](std::int64_t i) {
                return (static_cast<P>(og[off + i]) - grad_mean - (static_cast<P>(px[off + i]) - mean_t) * k) * iw;
              });
            }
          }
          if (ggamma != nullptr) Assign(ggamma + c, req[1], static_cast<P>(p_.fix_gamma ? 0.0 : dotp * invstd));
          if (gbeta != nullptr) Assign(gbeta + c, req[2], static_cast<P>(sum_og));
        }
      });
    });
  }

 private:
  // Channels per kernel thread at least: enough that a range holds some 32 K elements.
  static std::int64_t ChannelGrain(const act_norm::AxisView& v) {
    const std::int64_t per_channel = std::max<std::int64_t>(v.outer * v.inner, 1);
    return std::max<std::int64_t>(1, (32768 + per_channel - 1) / per_channel);
  }

  // The parameters and statistics must be P (InferType gives them that type; an array bound by hand might not).
  template <typename P>
  static void CheckParamType(const TBlob& gamma, const TBlob& stat) {
    for (const TBlob* b : {&gamma, &stat}) {
      if (b->dtype != DTypeOf<P>()) {
        throw Error(std::string("BatchNorm: gamma, beta and the statistics are ") + DTypeName(b->dtype) + " but " +
                    DTypeName(DTypeOf<P>()) + " is required for this data type (float32 for float16/bfloat16 data)");
      }
    }
  }

  BatchNormParam p_;
  bool batch_stats_ = true;  // whether the last Forward normalised with batch statistics
};

}  // namespace

bool BatchNormProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                               std::vector<TShape>* aux_shape) const {
  in_shape->resize(3);
  const TShape dshape = (*in_shape)[0];
  if (!dshape.known()) return false;
  if (dshape.ndim() < 1) throw Error("BatchNorm: 'data' must have at least 1 dimension, got a scalar");
  const int axis = internal::NormalizeAxis(param_.axis, dshape.ndim(), "BatchNorm", "axis");
  const TShape cs{dshape[axis]};
  AssignShape(in_shape, 1, cs, "BatchNorm", "gamma");
  AssignShape(in_shape, 2, cs, "BatchNorm", "beta");
  aux_shape->resize(2);
  AssignShape(aux_shape, 0, cs, "BatchNorm", "moving_mean");
  AssignShape(aux_shape, 1, cs, "BatchNorm", "moving_var");
  *out_shape = {dshape, cs, cs};
  return true;
}

bool BatchNormProp::InferType(std::vector<int>* in_type, std::vector<int>* out_type, std::vector<int>* aux_type) const {
  in_type->resize(3, kTypeUnknown);
  int t = (*in_type)[0];
  if (t == kTypeUnknown) t = (*in_type)[1] != kTypeUnknown ? (*in_type)[1] : (*in_type)[2];
  if (t == kTypeUnknown) return false;
  const bool half = t == static_cast<int>(DType::kFloat16) || t == static_cast<int>(DType::kBfloat16);
  const int p = half ? static_cast<int>(DType::kFloat32) : t;
  AssignType(in_type, 0, t, "BatchNorm", "data");
  AssignType(in_type, 1, p, "BatchNorm", "gamma");
  AssignType(in_type, 2, p, "BatchNorm", "beta");
  *out_type = {t, p, p};
  *aux_type = {p, p};
  return true;
}

// Temporary space for the cuDNN version (a unit gamma with fix_gamma, gradient staging); unused on CPU.
std::vector<ResourceRequest> BatchNormProp::ForwardResource(const std::vector<TShape>&) const {
  return {ResourceRequest::kTempSpace};
}
std::vector<ResourceRequest> BatchNormProp::BackwardResource(const std::vector<TShape>&) const {
  return {ResourceRequest::kTempSpace};
}

std::vector<int> BatchNormProp::DeclareBackwardDependency(const std::vector<int>& out_grad,
                                                          const std::vector<int>& in_data,
                                                          const std::vector<int>& out_data) const {
  return {out_grad[0], in_data[0], in_data[1], out_data[1], out_data[2]};
}

std::unique_ptr<Operator> BatchNormProp::CreateOperator(Context ctx) const {
  if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);
  return std::make_unique<BatchNormCpuOp>(param_);
}

TROUPE_REGISTER_OP_PROPERTY(BatchNorm, BatchNormProp)
    .describe("Batch normalization: normalises each channel by the batch's (training) or the moving statistics.")
    .add_argument("data", "NDArray-or-Symbol", "Input data to batch normalization.")
    .add_argument("gamma", "NDArray-or-Symbol", "Gamma array (scale per channel).")
    .add_argument("beta", "NDArray-or-Symbol", "Beta array (shift per channel).")
    .add_argument("moving_mean", "NDArray-or-Symbol", "Running mean of the input (auxiliary state).")
    .add_argument("moving_var", "NDArray-or-Symbol", "Running variance of the input (auxiliary state).")
    .add_arguments(BatchNormParam::Docs());

}  // namespace troupe
