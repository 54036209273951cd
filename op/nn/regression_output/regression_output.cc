// The regression heads (LinearRegressionOutput, LogisticRegressionOutput, MAERegressionOutput): property
// and CPU operator (the GPU one is regression_output.cu), following MXNet 1.9: Forward is the prediction
// (identity or sigmoid), Backward ignores out_grad and writes
//   grad_scale / num_output * (out - label) (sign of it for MAE), num_output = label.Size() / label.shape[0].
// The label gets no gradient: kWriteTo writes zeros, kAddTo leaves it unchanged.
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "op/nn/regression_output/regression_output.h"

namespace troupe {

namespace {

using internal::FloatSwitch;

class RegressionOutputCpuOp : public Operator {
 public:
  RegressionOutputCpuOp(const RegressionOutputParam& p, RegressionKind kind, std::string name)
      : p_(p), kind_(kind), name_(std::move(name)) {}

  void Forward(const OpContext&, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    FloatSwitch(in_data[0].dtype, name_, [&](auto tag) {
      using T = decltype(tag);
      const T* x = in_data[0].dptr_as<T>();
      T* y = out_data[0].dptr_as<T>();
      const std::int64_t n = in_data[0].Size();
      for (std::int64_t i = 0; i < n; ++i) Assign(y + i, req[0], act_norm::RegressionForward(kind_, x[i]));
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>&, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>&) override {
    const TBlob& label = in_data[1];
    FloatSwitch(out_data[0].dtype, name_, [&](auto tag) {
      using T = decltype(tag);
      if (req[1] != kNullOp && req[1] != kAddTo) {
        T* gl = in_grad[1].dptr_as<T>();
        std::fill(gl, gl + label.Size(), T(0));
      }
      if (req[0] == kNullOp) return;
      const T* y = out_data[0].dptr_as<T>();
      const T* pl = label.dptr_as<T>();
      T* g = in_grad[0].dptr_as<T>();
      const double num_output = static_cast<double>(label.Size()) / static_cast<double>(label.shape[0]);
      const T scale = static_cast<T>(p_.grad_scale * ctx.loss_scale / num_output);  // loss_scale: see OpContext
      const std::int64_t n = out_data[0].Size();
      for (std::int64_t i = 0; i < n; ++i) Assign(g + i, req[0], scale * act_norm::RegressionGrad(kind_, y[i], pl[i]));
    });
  }

 private:
  RegressionOutputParam p_;
  RegressionKind kind_;
  std::string name_;
};

}  // namespace

std::string RegressionOutputProp::TypeString() const {
  switch (kind_) {
    case RegressionKind::kLogistic: return "LogisticRegressionOutput";
    case RegressionKind::kMAE: return "MAERegressionOutput";
    default: return "LinearRegressionOutput";
  }
}

bool RegressionOutputProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                                      std::vector<TShape>*) const {
  in_shape->resize(2);
  const TShape d = (*in_shape)[0];
  if (!d.known()) return false;
  if (d.ndim() < 1) throw Error(TypeString() + ": 'data' must have at least 1 dimension, got a scalar");
  const TShape& l = (*in_shape)[1];
  if (l.known()) {
    // MXNet accepts any label with the data's first dimension and size.
    if (l.ndim() < 1 || l[0] != d[0] || l.Size() != d.Size()) {
      throw Error(TypeString() + ": shape of argument 'label' is " + l.ToString() +
                  " but it must have the first dimension and the size of 'data' " + d.ToString());
    }
  } else {
    // (n, 1) data takes (n,) labels by default, as in MXNet.
    AssignShape(in_shape, 1, (d.ndim() == 2 && d[1] == 1) ? TShape{d[0]} : d, TypeString(), "label");
  }
  *out_shape = {d};
  return true;
}

std::vector<int> RegressionOutputProp::DeclareBackwardDependency(const std::vector<int>&,
                                                                 const std::vector<int>& in_data,
                                                                 const std::vector<int>& out_data) const {
  return {in_data[1], out_data[0]};
}

std::vector<std::pair<int, void*>> RegressionOutputProp::ForwardInplaceOption(
    const std::vector<int>& in_data, const std::vector<void*>& out_data) const {
  return {{in_data[0], out_data[0]}};
}

std::vector<std::pair<int, void*>> RegressionOutputProp::BackwardInplaceOption(
    const std::vector<int>&, const std::vector<int>&, const std::vector<int>& out_data,
    const std::vector<void*>& in_grad) const {
  return {{out_data[0], in_grad[0]}};
}

std::unique_ptr<Operator> RegressionOutputProp::CreateOperator(Context ctx) const {
  if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);
  return std::make_unique<RegressionOutputCpuOp>(param_, kind_, TypeString());
}

namespace {
OperatorInfo& RegisterRegression(const char* name, RegressionKind kind, const char* text) {
  return OperatorRegistry::Get()
      .Register(name, [kind]() -> std::unique_ptr<OperatorProperty> { return std::make_unique<RegressionOutputProp>(kind); })
      .describe(text)
      .add_argument("data", "NDArray-or-Symbol", "Input data to the function.")
      .add_argument("label", "NDArray-or-Symbol", "Input label to the function.")
      .add_arguments(RegressionOutputParam::Docs());
}
[[maybe_unused]] OperatorInfo& kLinearRegistration = RegisterRegression(
    "LinearRegressionOutput", RegressionKind::kLinear,
    "Least-squares regression head: forward is the identity, backward (out - label) * grad_scale / num_output.");
[[maybe_unused]] OperatorInfo& kLogisticRegistration = RegisterRegression(
    "LogisticRegressionOutput", RegressionKind::kLogistic,
    "Logistic regression head: forward is sigmoid, backward (out - label) * grad_scale / num_output.");
[[maybe_unused]] OperatorInfo& kMaeRegistration = RegisterRegression(
    "MAERegressionOutput", RegressionKind::kMAE,
    "Mean-absolute-error head: forward is the identity, backward sign(out - label) * grad_scale / num_output.");
}  // namespace

}  // namespace troupe
