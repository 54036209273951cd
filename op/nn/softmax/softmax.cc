// softmax / log_softmax and SoftmaxOutput (alias Softmax): properties and CPU operators (the GPU ones are
// softmax.cu); the regression heads are in op/nn/regression_output/.
//
// The loss heads follow MXNet 1.9: Forward is the prediction (softmax, identity, sigmoid), Backward ignores
// out_grad (unless SoftmaxOutput's out_grad=True) and writes the loss gradient
//   SoftmaxOutput:  (softmax - onehot(label)) * grad_scale / norm, norm = 1 ('null'), the batch size
//                   ('batch') or the number of labels other than ignore_label ('valid', at least 1);
//                   rows whose label is ignore_label get 0 with use_ignore; labels compare as ints.
//   *Regression:    grad_scale / num_output * (out - label) (sign of it for MAE), num_output =
//                   label.Size() / label.shape[0].
// The label gets no gradient: kWriteTo writes zeros, kAddTo leaves it unchanged.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "op/nn/softmax/softmax.h"
#include "op/internal/float_staging.h"
namespace troupe {

namespace {

using act_norm::AxisView;
using internal::FloatSwitch;

// Softmax (or log-softmax) of x / temperature along the middle axis of (outer, n, inner); y may be x (same type).
// With `len` (use_length), row r = o * inner + i covers its first len[r] entries (clamped to [0, n]) and the
// entries after them are 0, in softmax and log_softmax alike, as MXNet writes them.
template <typename T, typename O>
void SoftmaxForwardCpu(const T* x, O* y, OpReqType req, const AxisView& v, double temperature, bool log,
                       const std::int64_t* len = nullptr) {
  if (req == kNullOp) return;
  std::vector<double> buf(static_cast<std::size_t>(v.n));
  for (std::int64_t o = 0; o < v.outer; ++o) {
    for (std::int64_t i = 0; i < v.inner; ++i) {
      const std::int64_t base = o * v.n * v.inner + i;
      const std::int64_t m = len == nullptr ? v.n : std::clamp<std::int64_t>(len[o * v.inner + i], 0, v.n);
      double mx = -INFINITY;
      for (std::int64_t k = 0; k < m; ++k) mx = std::max(mx, static_cast<double>(x[base + k * v.inner]));
      // Read everything before y (maybe x) is written. One exp per element: buf holds the exponentials for
      // softmax (divided by their sum) and the shifted inputs for log_softmax.
      double sum = 0;
      for (std::int64_t k = 0; k < m; ++k) {
        const double shifted = (x[base + k * v.inner] - mx) / temperature;
        const double e = std::exp(shifted);
        buf[k] = log ? shifted : e;
        sum += e;
      }
      const double log_sum = log ? std::log(sum) : 0.0;
      for (std::int64_t k = 0; k < v.n; ++k) {
        const double val = k >= m ? 0.0 : (log ? buf[k] - log_sum : buf[k] / sum);
        Assign(y + base + k * v.inner, req, static_cast<O>(val));
      }
    }
  }
}

// d x from d y and y (of type O): softmax y * (dy - sum(dy * y)) / T; log_softmax (dy - exp(y) * sum(dy)) / T.
// g may be dy (same type). With `len`, the sums cover each row's first len entries and the rest get 0.
template <typename O, typename T>
void SoftmaxBackwardCpu(const O* dy, const O* y, T* g, OpReqType req, const AxisView& v, double temperature,
                        bool log, const std::int64_t* len = nullptr) {
  if (req == kNullOp) return;
  for (std::int64_t o = 0; o < v.outer; ++o) {
    for (std::int64_t i = 0; i < v.inner; ++i) {
      const std::int64_t base = o * v.n * v.inner + i;
      const std::int64_t m = len == nullptr ? v.n : std::clamp<std::int64_t>(len[o * v.inner + i], 0, v.n);
      double sum = 0;
      for (std::int64_t k = 0; k < m; ++k) {
        const std::int64_t j = base + k * v.inner;
        sum += log ? static_cast<double>(dy[j]) : static_cast<double>(dy[j]) * y[j];
      }
      for (std::int64_t k = 0; k < v.n; ++k) {
        const std::int64_t j = base + k * v.inner;
        double d = 0.0;
        if (k < m) d = log ? dy[j] - std::exp(static_cast<double>(y[j])) * sum : y[j] * (dy[j] - sum);
        Assign(g + j, req, static_cast<T>(d / temperature));
      }
    }
  }
}

// The lengths of use_length as integers (MXNet takes int32 or int64 only).
std::vector<std::int64_t> ReadLengths(const TBlob& length, const std::string& op) {
  std::vector<std::int64_t> len(static_cast<std::size_t>(length.Size()));
  if (length.dtype == DType::kInt32) {
    const auto* p = length.dptr_as<std::int32_t>();
    std::copy(p, p + len.size(), len.begin());
  } else if (length.dtype == DType::kInt64) {
    const auto* p = length.dptr_as<std::int64_t>();
    std::copy(p, p + len.size(), len.begin());
  } else {
    throw Error(op + ": 'length' must be int32 or int64, got " + DTypeName(length.dtype));
  }
  return len;
}

class SoftmaxCpuOp : public Operator {
 public:
  SoftmaxCpuOp(const SoftmaxParam& p, bool log, double temperature) : p_(p), log_(log), temperature_(temperature) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>& aux) override {
    // Half-precision arrays: the float32 code on converted copies.
    if (internal::AnyHalf({&in_data, &out_data})) return staging_.Forward(*this, ctx, in_data, req, out_data, aux);
    const TBlob& x = in_data[0];
    const AxisView v = act_norm::ViewAround(x.shape, internal::NormalizeAxis(p_.axis, x.shape.ndim(), Name(), "axis"));
    std::vector<std::int64_t> len;
    if (UseLength()) len = ReadLengths(in_data[1], Name());
    FloatSwitch(x.dtype, Name(), [&](auto tag) {
      using T = decltype(tag);
      FloatSwitch(out_data[0].dtype, Name(), [&](auto otag) {
        using O = decltype(otag);
        SoftmaxForwardCpu<T, O>(x.dptr_as<T>(), out_data[0].dptr_as<O>(), req[0], v, temperature_, log_,
                                UseLength() ? len.data() : nullptr);
      });
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>& aux) override {
    if (internal::AnyHalf({&out_grad, &in_data, &in_grad})) {
      return staging_.Backward(*this, ctx, out_grad, in_data, out_data, req, in_grad, aux);
    }
    // The length gets no gradient: zeros (of its integer type) unless accumulating.
    if (UseLength() && req[1] != kNullOp && req[1] != kAddTo) {
      std::fill_n(static_cast<char*>(in_grad[1].dptr), in_grad[1].Bytes(), 0);
    }
    const TBlob& y = out_data[0];
    const AxisView v = act_norm::ViewAround(y.shape, internal::NormalizeAxis(p_.axis, y.shape.ndim(), Name(), "axis"));
    std::vector<std::int64_t> len;
    if (UseLength()) len = ReadLengths(in_data[1], Name());
    FloatSwitch(y.dtype, Name(), [&](auto otag) {
      using O = decltype(otag);
      FloatSwitch(in_grad[0].dtype, Name(), [&](auto tag) {
        using T = decltype(tag);
        SoftmaxBackwardCpu<O, T>(out_grad[0].dptr_as<O>(), y.dptr_as<O>(), in_grad[0].dptr_as<T>(), req[0], v,
                                 temperature_, log_, UseLength() ? len.data() : nullptr);
      });
    });
  }

 private:
  std::string Name() const { return log_ ? "log_softmax" : "softmax"; }
  bool UseLength() const { return p_.use_length.value_or(false); }
  SoftmaxParam p_;
  bool log_;
  double temperature_;
  internal::FloatStaging staging_;  // half-precision arrays: float32 on converted copies
};

class SoftmaxOutputCpuOp : public Operator {
 public:
  explicit SoftmaxOutputCpuOp(const SoftmaxOutputProp& prop) : prop_(prop), p_(prop.param()) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>& aux) override {
    // Half-precision arrays: the float32 code on converted copies.
    if (internal::AnyHalf({&in_data, &out_data})) return staging_.Forward(*this, ctx, in_data, req, out_data, aux);
    const TBlob& x = in_data[0];
    FloatSwitch(x.dtype, "SoftmaxOutput", [&](auto tag) {
      using T = decltype(tag);
      SoftmaxForwardCpu<T, T>(x.dptr_as<T>(), out_data[0].dptr_as<T>(), req[0], prop_.View(x.shape), 1.0, false);
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>& aux) override {
    if (internal::AnyHalf({&out_grad, &in_data, &in_grad})) {
      return staging_.Backward(*this, ctx, out_grad, in_data, out_data, req, in_grad, aux);
    }
    const TBlob& y = out_data[0];
    const TBlob& label = in_data[1];
    const AxisView v = prop_.View(y.shape);
    const bool soft = label.shape == y.shape && label.Size() != v.outer * v.inner;
    FloatSwitch(y.dtype, "SoftmaxOutput", [&](auto tag) {
      using T = decltype(tag);
      const T* py = y.dptr_as<T>();
      const T* pl = label.dptr_as<T>();
      const T* og = p_.out_grad ? out_grad[0].dptr_as<T>() : nullptr;
      if (req[1] != kNullOp && req[1] != kAddTo) {
        T* gl = in_grad[1].dptr_as<T>();
        std::fill(gl, gl + label.Size(), T(0));
      }
      if (req[0] == kNullOp) return;
      T* g = in_grad[0].dptr_as<T>();
      const int ignore = static_cast<int>(p_.ignore_label);
      double norm = 1;
      if (p_.normalization == "batch") {
        norm = static_cast<double>(v.outer);
      } else if (p_.normalization == "valid" && !soft) {
        // MXNet counts the labels other than ignore_label whether or not use_ignore is set.
        std::int64_t valid = 0;
        for (std::int64_t j = 0; j < label.Size(); ++j) valid += static_cast<int>(pl[j]) != ignore;
        norm = static_cast<double>(std::max<std::int64_t>(valid, 1));
      }
      // ctx.loss_scale: the dynamic loss scale of mixed-precision training (1 otherwise).
      const double scale = p_.grad_scale * ctx.loss_scale / norm;
      const double alpha = p_.smooth_alpha;
      const double off_target = v.n > 1 ? alpha / static_cast<double>(v.n - 1) : 0.0;
      for (std::int64_t o = 0; o < v.outer; ++o) {
        for (std::int64_t i = 0; i < v.inner; ++i) {
          const std::int64_t base = o * v.n * v.inner + i;
          const int lab = soft ? 0 : static_cast<int>(pl[o * v.inner + i]);
          const bool ignored = !soft && p_.use_ignore && lab == ignore;
          for (std::int64_t k = 0; k < v.n; ++k) {
            const std::int64_t j = base + k * v.inner;
            double target;
            if (soft) {
              target = pl[j];
            } else if (alpha > 0) {
              target = k == lab ? 1.0 - alpha : off_target;
            } else {
              target = k == lab ? 1.0 : 0.0;
            }
            double d = ignored ? 0.0 : (py[j] - target) * scale;
            if (og != nullptr) d *= og[j];
            Assign(g + j, req[0], static_cast<T>(d));
          }
        }
      }
    });
  }

 private:
  SoftmaxOutputProp prop_;
  SoftmaxOutputParam p_;
  internal::FloatStaging staging_;  // half-precision arrays: float32 on converted copies
};

}  // namespace

// ------------------------------------------------------------------------------------------ softmax
void SoftmaxProp::Init(const Kwargs& kwargs) {
  param_.Init(kwargs, TypeString());
  if (log_ && use_length()) {
    // MXNet 1.9's log_softmax parses use_length but takes only 'data'; the length mask is softmax's.
    throw Error("log_softmax: parameter 'use_length' = True is not supported (MXNet's log_softmax has no 'length' "
                "input); use softmax with use_length, or mask the input");
  }
  if (param_.temperature && !(*param_.temperature > 0)) {
    throw Error(TypeString() + ": parameter 'temperature' must be > 0 (or None), got " +
                param_detail::PrintReal(*param_.temperature));
  }
}

std::vector<std::string> SoftmaxProp::ListArguments() const {
  if (use_length()) return {"data", "length"};
  return {"data"};
}

bool SoftmaxProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                             std::vector<TShape>*) const {
  in_shape->resize(use_length() ? 2 : 1);
  if (!(*in_shape)[0].known()) return false;
  const TShape d = (*in_shape)[0];
  if (d.ndim() < 1) throw Error(TypeString() + ": 'data' must have at least 1 dimension, got a scalar");
  const int axis = internal::NormalizeAxis(param_.axis, d.ndim(), TypeString(), "axis");
  if (use_length()) {
    // One length per softmax row: the data's shape without the axis ((1,) for 1-D data).
    std::vector<std::int64_t> l;
    for (int i = 0; i < d.ndim(); ++i) {
      if (i != axis) l.push_back(d[i]);
    }
    if (l.empty()) l.push_back(1);
    AssignShape(in_shape, 1, TShape(l), TypeString(), "length");
  }
  *out_shape = {d};
  return true;
}

bool SoftmaxProp::InferType(std::vector<int>* in_type, std::vector<int>* out_type, std::vector<int>* aux_type) const {
  in_type->resize(use_length() ? 2 : 1, kTypeUnknown);
  aux_type->clear();
  if (use_length() && (*in_type)[1] != kTypeUnknown) {
    const auto t = static_cast<DType>((*in_type)[1]);
    if (t != DType::kInt32 && t != DType::kInt64) {
      throw Error(TypeString() + ": 'length' must be int32 or int64, got " + DTypeName(t));
    }
  }
  // dtype sets the output's type (the input keeps its own; it takes dtype when unknown), as in MXNet.
  int out = (*in_type)[0];
  if (param_.dtype) {
    out = static_cast<int>(DTypeFromName(*param_.dtype));
    if ((*in_type)[0] == kTypeUnknown) (*in_type)[0] = out;
  }
  if (out == kTypeUnknown) return false;
  *out_type = {out};
  return !use_length() || (*in_type)[1] != kTypeUnknown;
}

std::vector<int> SoftmaxProp::DeclareBackwardDependency(const std::vector<int>& out_grad,
                                                        const std::vector<int>& in_data,
                                                        const std::vector<int>& out_data) const {
  if (use_length()) return {out_grad[0], in_data[1], out_data[0]};
  return {out_grad[0], out_data[0]};
}

// In place only when the output has the input's type (no dtype given).
std::vector<std::pair<int, void*>> SoftmaxProp::ForwardInplaceOption(const std::vector<int>& in_data,
                                                                     const std::vector<void*>& out_data) const {
  if (param_.dtype) return {};
  return {{in_data[0], out_data[0]}};
}

std::vector<std::pair<int, void*>> SoftmaxProp::BackwardInplaceOption(const std::vector<int>& out_grad,
                                                                      const std::vector<int>&,
                                                                      const std::vector<int>&,
                                                                      const std::vector<void*>& in_grad) const {
  if (param_.dtype) return {};
  return {{out_grad[0], in_grad[0]}};
}

std::unique_ptr<Operator> SoftmaxProp::CreateOperator(Context ctx) const {
  if (ctx.is_gpu()) {
    if (use_length()) {
      throw Error(TypeString() + ": use_length=True has no GPU implementation in troupe; run it on the CPU");
    }
    return CreateGpuOperator(*this, ctx);
  }
  return std::make_unique<SoftmaxCpuOp>(param_, log_, temperature());
}

TROUPE_REGISTER_OP_PROPERTY(softmax, SoftmaxProp)
    .describe("Softmax of the input along an axis: exp(x / T) / sum(exp(x / T)); with use_length, over the first "
              "length entries of each row (the others 0).")
    .add_argument("data", "NDArray-or-Symbol", "The input array.")
    .add_argument("length", "NDArray-or-Symbol", "The length array (use_length=True).")
    .add_arguments(SoftmaxParam::Docs())
    .add_alias("_npx_softmax");

[[maybe_unused]] static OperatorInfo& kLogSoftmaxRegistration =
    OperatorRegistry::Get()
        .Register("log_softmax", []() -> std::unique_ptr<OperatorProperty> { return std::make_unique<SoftmaxProp>(true); })
        .describe("Log of the softmax along an axis: x / T - log(sum(exp(x / T))).")
        .add_argument("data", "NDArray-or-Symbol", "The input array.")
        .add_arguments(SoftmaxParam::Docs())
        .add_alias("_npx_log_softmax");

// ------------------------------------------------------------------------------------ SoftmaxOutput
act_norm::AxisView SoftmaxOutputProp::View(const TShape& d) const {
  if (param_.multi_output) return act_norm::ViewAround(d, 1);
  if (param_.preserve_shape) return act_norm::ViewAround(d, d.ndim() - 1);
  act_norm::AxisView v;
  v.outer = d[0];
  v.n = d[0] > 0 ? d.Size() / d[0] : 0;
  v.inner = 1;
  return v;
}

bool SoftmaxOutputProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                                   std::vector<TShape>*) const {
  in_shape->resize(2);
  const TShape d = (*in_shape)[0];
  if (!d.known()) return false;
  if (d.ndim() < 1) throw Error("SoftmaxOutput: 'data' must have at least 1 dimension, got a scalar");
  if (param_.multi_output && d.ndim() < 2) {
    throw Error("SoftmaxOutput: multi_output needs 'data' of shape (n, classes, ...), got " + d.ToString());
  }
  // Hard labels: one class index per softmax row.
  std::vector<std::int64_t> hard;
  if (param_.multi_output) {
    hard.push_back(d[0]);
    for (int i = 2; i < d.ndim(); ++i) hard.push_back(d[i]);
  } else if (param_.preserve_shape) {
    for (int i = 0; i + 1 < d.ndim(); ++i) hard.push_back(d[i]);
  } else {
    hard.push_back(d[0]);
  }
  const TShape& l = (*in_shape)[1];
  // A label with the data's rank (and not the hard label's) is a probability per class, as in MXNet.
  const bool soft = l.ndim() == d.ndim() && static_cast<int>(hard.size()) != d.ndim();
  AssignShape(in_shape, 1, soft ? d : TShape(hard), "SoftmaxOutput", "label");
  *out_shape = {d};
  return true;
}

std::vector<ResourceRequest> SoftmaxOutputProp::BackwardResource(const std::vector<TShape>&) const {
  return {ResourceRequest::kTempSpace};  // the GPU version counts valid labels on the device
}

std::vector<int> SoftmaxOutputProp::DeclareBackwardDependency(const std::vector<int>& out_grad,
                                                              const std::vector<int>& in_data,
                                                              const std::vector<int>& out_data) const {
  if (param_.out_grad) return {in_data[1], out_data[0], out_grad[0]};
  return {in_data[1], out_data[0]};
}

std::vector<std::pair<int, void*>> SoftmaxOutputProp::ForwardInplaceOption(const std::vector<int>& in_data,
                                                                           const std::vector<void*>& out_data) const {
  return {{in_data[0], out_data[0]}};
}

std::vector<std::pair<int, void*>> SoftmaxOutputProp::BackwardInplaceOption(const std::vector<int>&,
                                                                            const std::vector<int>&,
                                                                            const std::vector<int>& out_data,
                                                                            const std::vector<void*>& in_grad) const {
  return {{out_data[0], in_grad[0]}};
}

std::unique_ptr<Operator> SoftmaxOutputProp::CreateOperator(Context ctx) const {
  if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);
  return std::make_unique<SoftmaxOutputCpuOp>(*this);
}

TROUPE_REGISTER_OP_PROPERTY(SoftmaxOutput, SoftmaxOutputProp)
    .describe("Softmax with a cross-entropy gradient: forward is softmax, backward is softmax - onehot(label).")
    .add_argument("data", "NDArray-or-Symbol", "Input array.")
    .add_argument("label", "NDArray-or-Symbol", "Ground truth label (class indices, or probabilities).")
    .add_arguments(SoftmaxOutputParam::Docs())
    .add_alias("Softmax");

}  // namespace troupe
