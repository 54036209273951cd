// The basic layers (nn/basic_layers.h).
#include "nn/basic_layers.h"

#include "base/error.h"
#include "nn/src/layer_util.h"

namespace troupe::nn {

Dense::Dense(int units, const std::string& activation, bool use_bias, bool flatten, int in_units,
             const std::string& weight_init, const std::string& bias_init, const std::string& prefix)
    : HybridBlock(prefix, "dense"), units_(units), activation_(activation), flatten_(flatten) {
  RequirePositive(units, "Dense", "units");
  weight_ = AddParameter("weight", TShape{units, in_units}, weight_init);
  if (use_bias) bias_ = AddParameter("bias", TShape{units}, bias_init);
}

std::vector<Symbol> Dense::HybridForward(const std::vector<Symbol>& x) {
  std::vector<Symbol> in{One(x, "Dense"), weight_->Var()};
  if (bias_) in.push_back(bias_->Var());
  Symbol y = Symbol::Create("FullyConnected",
                            {{"num_hidden", std::to_string(units_)}, {"no_bias", bias_ ? "false" : "true"},
                             {"flatten", flatten_ ? "true" : "false"}},
                            in, prefix() + "fwd");
  if (!activation_.empty()) y = Symbol::Create("Activation", {{"act_type", activation_}}, {y}, prefix() + activation_);
  return {y};
}

Activation::Activation(std::string act_type, const std::string& prefix)
    : HybridBlock(prefix, act_type.empty() ? "activation" : act_type), act_type_(std::move(act_type)) {}

std::vector<Symbol> Activation::HybridForward(const std::vector<Symbol>& x) {
  return {Symbol::Create("Activation", {{"act_type", act_type_}}, {One(x, "Activation")}, prefix() + "fwd")};
}

LeakyReLU::LeakyReLU(float alpha, const std::string& prefix) : HybridBlock(prefix, "leakyrelu"), alpha_(alpha) {}

std::vector<Symbol> LeakyReLU::HybridForward(const std::vector<Symbol>& x) {
  return {Symbol::Create("LeakyReLU", {{"act_type", "leaky"}, {"slope", Num(alpha_)}}, {One(x, "LeakyReLU")},
                         prefix() + "fwd")};
}

Dropout::Dropout(float rate, std::vector<int> axes, const std::string& prefix)
    : HybridBlock(prefix, "dropout"), rate_(rate), axes_(std::move(axes)) {
  if (!(rate >= 0 && rate < 1)) throw Error("Dropout: rate must be in [0, 1), got " + Num(rate));
}

std::vector<Symbol> Dropout::HybridForward(const std::vector<Symbol>& x) {
  Kwargs kw{{"p", Num(rate_)}};
  if (!axes_.empty()) kw.emplace_back("axes", Tuple(axes_));
  return {Symbol::Create("Dropout", kw, {One(x, "Dropout")}, prefix() + "fwd")};
}

Flatten::Flatten(const std::string& prefix) : HybridBlock(prefix, "flatten") {}

std::vector<Symbol> Flatten::HybridForward(const std::vector<Symbol>& x) {
  return {Symbol::Create("Flatten", {}, {One(x, "Flatten")}, prefix() + "fwd")};
}

Embedding::Embedding(int input_dim, int output_dim, const std::string& weight_init, const std::string& prefix)
    : HybridBlock(prefix, "embedding"), input_dim_(input_dim), output_dim_(output_dim) {
  RequirePositive(input_dim, "Embedding", "input_dim");
  RequirePositive(output_dim, "Embedding", "output_dim");
  weight_ = AddParameter("weight", TShape{input_dim, output_dim}, weight_init);
}

std::vector<Symbol> Embedding::HybridForward(const std::vector<Symbol>& x) {
  return {Symbol::Create("Embedding",
                         {{"input_dim", std::to_string(input_dim_)}, {"output_dim", std::to_string(output_dim_)}},
                         {One(x, "Embedding"), weight_->Var()}, prefix() + "fwd")};
}

BatchNorm::BatchNorm(int axis, float momentum, float epsilon, bool center, bool scale, bool use_global_stats,
                     int in_channels, const std::string& prefix)
    : HybridBlock(prefix, "batchnorm"),
      axis_(axis),
      momentum_(momentum),
      epsilon_(epsilon),
      scale_(scale),
      use_global_stats_(use_global_stats) {
  gamma_ = AddParameter("gamma", TShape{in_channels}, "ones", scale ? kWriteTo : kNullOp);
  beta_ = AddParameter("beta", TShape{in_channels}, "zeros", center ? kWriteTo : kNullOp);
  running_mean_ = AddParameter("running_mean", TShape{in_channels}, "zeros", kNullOp);
  running_var_ = AddParameter("running_var", TShape{in_channels}, "ones", kNullOp);
}

std::vector<Symbol> BatchNorm::HybridForward(const std::vector<Symbol>& x) {
  return {Symbol::Create("BatchNorm",
                         {{"axis", std::to_string(axis_)},
                          {"momentum", Num(momentum_)},
                          {"eps", Num(epsilon_)},
                          {"fix_gamma", scale_ ? "false" : "true"},
                          {"use_global_stats", use_global_stats_ ? "true" : "false"}},
                         {One(x, "BatchNorm"), gamma_->Var(), beta_->Var(), running_mean_->Var(), running_var_->Var()},
                         prefix() + "fwd")};
}

LayerNorm::LayerNorm(int axis, float epsilon, bool center, bool scale, int in_channels, const std::string& prefix)
    : HybridBlock(prefix, "layernorm"), axis_(axis), epsilon_(epsilon) {
  gamma_ = AddParameter("gamma", TShape{in_channels}, "ones", scale ? kWriteTo : kNullOp);
  beta_ = AddParameter("beta", TShape{in_channels}, "zeros", center ? kWriteTo : kNullOp);
}

std::vector<Symbol> LayerNorm::HybridForward(const std::vector<Symbol>& x) {
  return {Symbol::Create("LayerNorm", {{"axis", std::to_string(axis_)}, {"eps", Num(epsilon_)}},
                         {One(x, "LayerNorm"), gamma_->Var(), beta_->Var()}, prefix() + "fwd")};
}

}  // namespace troupe::nn
