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
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "op/nn/batch_norm/batch_norm.h"

namespace troupe {

namespace {

using internal::FloatSwitch;

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
    FloatSwitch(x.dtype, "BatchNorm", [&](auto tag) {
      using T = decltype(tag);
      const T* px = x.dptr_as<T>();
      const T* gamma = in_data[1].dptr_as<T>();
      const T* beta = in_data[2].dptr_as<T>();
      T* moving_mean = aux_states[0].dptr_as<T>();
      T* moving_var = aux_states[1].dptr_as<T>();
      T* y = req[0] == kNullOp ? nullptr : out_data[0].dptr_as<T>();
      T* out_mean = req[1] == kNullOp ? nullptr : out_data[1].dptr_as<T>();
      T* out_invstd = req[2] == kNullOp ? nullptr : out_data[2].dptr_as<T>();
      const double m = static_cast<double>(v.outer * v.inner);
      const double mom = p_.momentum;
      // Per channel: each row of `inner` values is summed in T (in vector lanes), the rows in double.
      const auto rows_sum = [&](std::int64_t c, auto&& f) {
        double s = 0;
        for (std::int64_t o = 0; o < v.outer; ++o) {
          const T* row = px + (o * v.n + c) * v.inner;
          s += internal::SumEach<T>(v.inner, [&](std::int64_t i) { return f(row[i]); });
        }
        return s;
      };
      for (std::int64_t c = 0; c < v.n; ++c) {
        double mean, invstd;
        if (batch) {
          mean = m > 0 ? rows_sum(c, [](T x) { return x; }) / m : 0.0;
          const T mean_t = static_cast<T>(mean);
          const double var = m > 0 ? rows_sum(c, [mean_t](T x) { return (x - mean_t) * (x - mean_t); }) / m : 0.0;
          // MXNet: a constant channel with eps 0 gets invstd 0 rather than infinity.
          invstd = (var == 0 && p_.eps == 0) ? 0.0 : 1.0 / std::sqrt(var + p_.eps);
          moving_mean[c] = static_cast<T>(moving_mean[c] * mom + mean * (1 - mom));
          moving_var[c] = static_cast<T>(moving_var[c] * mom + var * (1 - mom));
        } else {
          mean = moving_mean[c];
          invstd = 1.0 / std::sqrt(static_cast<double>(moving_var[c]) + p_.eps);
        }
        if (out_mean != nullptr) Assign(out_mean + c, req[1], static_cast<T>(mean));
        if (out_invstd != nullptr) Assign(out_invstd + c, req[2], static_cast<T>(invstd));
        if (y == nullptr) continue;
        const double w = p_.fix_gamma ? 1.0 : static_cast<double>(gamma[c]);
        const T scale = static_cast<T>(invstd * w), shift = static_cast<T>(beta[c] - mean * invstd * w);
        for (std::int64_t o = 0; o < v.outer; ++o) {
          const std::int64_t off = (o * v.n + c) * v.inner;
          internal::AssignEach(y + off, v.inner, req[0], [&](std::int64_t i) { return px[off + i] * scale + shift; });
        }
      }
    });
  }

  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>&) override {
    const TBlob& x = in_data[0];
    const int axis = internal::NormalizeAxis(p_.axis, x.shape.ndim(), "BatchNorm", "axis");
    const act_norm::AxisView v = act_norm::ViewAround(x.shape, axis);
    FloatSwitch(x.dtype, "BatchNorm", [&](auto tag) {
      using T = decltype(tag);
      const T* px = x.dptr_as<T>();
      const T* og = out_grad[0].dptr_as<T>();
      const T* gamma = in_data[1].dptr_as<T>();
      const T* saved_mean = out_data[1].dptr_as<T>();
      const T* saved_invstd = out_data[2].dptr_as<T>();
      T* gx = req[0] == kNullOp ? nullptr : in_grad[0].dptr_as<T>();
      T* ggamma = req[1] == kNullOp ? nullptr : in_grad[1].dptr_as<T>();
      T* gbeta = req[2] == kNullOp ? nullptr : in_grad[2].dptr_as<T>();
      const double m = static_cast<double>(v.outer * v.inner);
      for (std::int64_t c = 0; c < v.n; ++c) {
        const double mean = saved_mean[c], invstd = saved_invstd[c];
        const double w = p_.fix_gamma ? 1.0 : static_cast<double>(gamma[c]);
        const T mean_t = static_cast<T>(mean);
        // Rows summed in T (vector lanes), rows together in double, as in Forward.
        double sum_og = 0, dotp = 0;
        for (std::int64_t o = 0; o < v.outer; ++o) {
          const std::int64_t off = (o * v.n + c) * v.inner;
          sum_og += internal::SumContiguous(og + off, v.inner);
          dotp += internal::SumEach<T>(v.inner, [&](std::int64_t i) { return (px[off + i] - mean_t) * og[off + i]; });
        }
        if (gx != nullptr) {
          // Training: dx = (dy - mean(dy) - xhat * mean(dy * xhat)) * invstd * w, xhat = (x - mean) * invstd.
          const T k = static_cast<T>(batch_stats_ && m > 0 ? dotp * invstd * invstd / m : 0.0);
          const T grad_mean = static_cast<T>(batch_stats_ && m > 0 ? sum_og / m : 0.0);
          const T iw = static_cast<T>(invstd * w);
          for (std::int64_t o = 0; o < v.outer; ++o) {
            const std::int64_t off = (o * v.n + c) * v.inner;
            internal::AssignEach(gx + off, v.inner, req[0], [&](std::int64_t i) {
              return (og[off + i] - grad_mean - (px[off + i] - mean_t) * k) * iw;
            });
          }
        }
        if (ggamma != nullptr) Assign(ggamma + c, req[1], static_cast<T>(p_.fix_gamma ? 0.0 : dotp * invstd));
        if (gbeta != nullptr) Assign(gbeta + c, req[2], static_cast<T>(sum_og));
      }
    });
  }

 private:
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
