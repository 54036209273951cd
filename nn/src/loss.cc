// Losses (nn/loss.h), composed of registered operators as Gluon's are.
#include "nn/loss.h"

#include "base/error.h"
#include "nn/src/layer_util.h"

namespace troupe::nn {

namespace {

Symbol Op(const std::string& op, const std::vector<Symbol>& in, const Kwargs& kw = {}) {
  return Symbol::Create(op, kw, in);
}
Symbol Scalar(const std::string& op, const Symbol& x, double s) { return Op(op, {x}, {{"scalar", Num(s)}}); }

}  // namespace

void Loss::Two(const std::vector<Symbol>& x, const char* loss) {
  if (x.size() != 2) {
    throw Error(std::string(loss) + ": takes two inputs (prediction, label), got " + std::to_string(x.size()));
  }
}

Symbol Loss::Finish(const Symbol& elementwise) const {
  Symbol l = weight_ == 1.0f ? elementwise : Scalar("_mul_scalar", elementwise, weight_);
  return Symbol::Create("mean", {{"axis", std::to_string(batch_axis_)}, {"exclude", "true"}}, {l}, prefix() + "fwd");
}

SoftmaxCrossEntropyLoss::SoftmaxCrossEntropyLoss(int axis, bool sparse_label, bool from_logits, float weight,
                                                 int batch_axis, const std::string& prefix)
    : Loss(weight, batch_axis, prefix, "softmaxcrossentropyloss"),
      axis_(axis),
      sparse_label_(sparse_label),
      from_logits_(from_logits) {}

std::vector<Symbol> SoftmaxCrossEntropyLoss::HybridForward(const std::vector<Symbol>& x) {
  Two(x, "SoftmaxCrossEntropyLoss");
  Symbol logp = from_logits_ ? x[0] : Op("log_softmax", {x[0]}, {{"axis", std::to_string(axis_)}});
  Symbol l;
  if (sparse_label_) {
    l = Op("negative", {Op("pick", {logp, x[1]}, {{"axis", std::to_string(axis_)}, {"keepdims", "true"}})});
  } else {
    Symbol label = Op("reshape_like", {x[1], logp});
    l = Op("negative", {Op("sum", {Op("elemwise_mul", {logp, label})},
                           {{"axis", std::to_string(axis_)}, {"keepdims", "true"}})});
  }
  return {Finish(l)};
}

L2Loss::L2Loss(float weight, int batch_axis, const std::string& prefix) : Loss(weight, batch_axis, prefix, "l2loss") {}

std::vector<Symbol> L2Loss::HybridForward(const std::vector<Symbol>& x) {
  Two(x, "L2Loss");
  Symbol label = Op("reshape_like", {x[1], x[0]});
  return {Finish(Scalar("_mul_scalar", Op("square", {Op("elemwise_sub", {label, x[0]})}), 0.5))};
}

L1Loss::L1Loss(float weight, int batch_axis, const std::string& prefix) : Loss(weight, batch_axis, prefix, "l1loss") {}

std::vector<Symbol> L1Loss::HybridForward(const std::vector<Symbol>& x) {
  Two(x, "L1Loss");
  Symbol label = Op("reshape_like", {x[1], x[0]});
  return {Finish(Op("abs", {Op("elemwise_sub", {label, x[0]})}))};
}

SigmoidBinaryCrossEntropyLoss::SigmoidBinaryCrossEntropyLoss(bool from_sigmoid, float weight, int batch_axis,
                                                             const std::string& prefix)
    : Loss(weight, batch_axis, prefix, "sigmoidbinarycrossentropyloss"), from_sigmoid_(from_sigmoid) {}

std::vector<Symbol> SigmoidBinaryCrossEntropyLoss::HybridForward(const std::vector<Symbol>& x) {
  Two(x, "SigmoidBinaryCrossEntropyLoss");
  const Symbol& pred = x[0];
  Symbol label = Op("reshape_like", {x[1], pred});
  Symbol l;
  if (!from_sigmoid_) {
    Symbol soft = Op("Activation", {Op("negative", {Op("abs", {pred})})}, {{"act_type", "softrelu"}});
    l = Op("elemwise_add", {Op("elemwise_sub", {Op("relu", {pred}), Op("elemwise_mul", {pred, label})}), soft});
  } else {
    const double eps = 1e-12;
    Symbol a = Op("elemwise_mul", {Op("log", {Scalar("_plus_scalar", pred, eps)}), label});
    Symbol b = Op("elemwise_mul", {Op("log", {Scalar("_plus_scalar", Scalar("_rminus_scalar", pred, 1.0), eps)}),
                                   Scalar("_rminus_scalar", label, 1.0)});
    l = Op("negative", {Op("elemwise_add", {a, b})});
  }
  return {Finish(l)};
}

HuberLoss::HuberLoss(float rho, float weight, int batch_axis, const std::string& prefix)
    : Loss(weight, batch_axis, prefix, "huberloss"), rho_(rho) {
  if (!(rho > 0)) throw Error("HuberLoss: rho must be positive, got " + Num(rho));
}

std::vector<Symbol> HuberLoss::HybridForward(const std::vector<Symbol>& x) {
  Two(x, "HuberLoss");
  Symbol label = Op("reshape_like", {x[1], x[0]});
  Symbol d = Op("abs", {Op("elemwise_sub", {label, x[0]})});
  Symbol big = Scalar("_greater_scalar", d, rho_);
  Symbol l = Op("where", {big, Scalar("_minus_scalar", d, 0.5 * rho_), Scalar("_mul_scalar", Op("square", {d}), 0.5 / rho_)});
  return {Finish(l)};
}

}  // namespace troupe::nn
