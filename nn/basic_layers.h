// The basic layers (Gluon's gluon.nn basic_layers): Dense, Activation, LeakyReLU, Dropout, Flatten, Embedding,
// BatchNorm, LayerNorm. Each is a HybridBlock (nn/block.h) whose forward pass is the registered operator of
// the same name (FullyConnected for Dense), with Gluon's parameter names (weight, bias, gamma, beta,
// running_mean, running_var) and defaults. An input size left 0 (in_units, in_channels) is completed by the
// first forward pass.
//
//   auto fc = std::make_shared<nn::Dense>(128, "relu");   // weight (128, in_units), bias (128)
//
// Thread-safety: as any block.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nn/block.h"

namespace troupe::nn {

// y = activation(x W^T + b); flatten: inputs of more than two dimensions are flattened to (batch, rest)
// first (else the product applies to the last axis). activation: an Activation act_type, or empty.
class Dense : public HybridBlock {
 public:
  Dense(int units, const std::string& activation = {}, bool use_bias = true, bool flatten = true, int in_units = 0,
        const std::string& weight_init = {}, const std::string& bias_init = "zeros", const std::string& prefix = {});
  std::vector<Symbol> HybridForward(const std::vector<Symbol>& inputs) override;
  const std::shared_ptr<Parameter>& weight() const { return weight_; }
  const std::shared_ptr<Parameter>& bias() const { return bias_; }  // null without a bias

 private:
  int units_;
  std::string activation_;
  bool flatten_;
  std::shared_ptr<Parameter> weight_, bias_;
};

// The Activation operator: act_type relu, sigmoid, tanh, softrelu or softsign.
class Activation : public HybridBlock {
 public:
  explicit Activation(std::string act_type, const std::string& prefix = {});
  std::vector<Symbol> HybridForward(const std::vector<Symbol>& inputs) override;

 private:
  std::string act_type_;
};

// max(x, alpha * x).
class LeakyReLU : public HybridBlock {
 public:
  explicit LeakyReLU(float alpha, const std::string& prefix = {});
  std::vector<Symbol> HybridForward(const std::vector<Symbol>& inputs) override;

 private:
  float alpha_;
};

// Drops elements with probability rate in training mode (scaling the rest by 1 / (1 - rate)); axes: the
// axes along which one mask is shared (empty: none).
class Dropout : public HybridBlock {
 public:
  explicit Dropout(float rate, std::vector<int> axes = {}, const std::string& prefix = {});
  std::vector<Symbol> HybridForward(const std::vector<Symbol>& inputs) override;

 private:
  float rate_;
  std::vector<int> axes_;
};

// (batch, d1, d2, ...) -> (batch, d1 * d2 * ...).
class Flatten : public HybridBlock {
 public:
  explicit Flatten(const std::string& prefix = {});
  std::vector<Symbol> HybridForward(const std::vector<Symbol>& inputs) override;
};

// Rows of weight (input_dim, output_dim) picked by integer indices.
class Embedding : public HybridBlock {
 public:
  Embedding(int input_dim, int output_dim, const std::string& weight_init = {}, const std::string& prefix = {});
  std::vector<Symbol> HybridForward(const std::vector<Symbol>& inputs) override;

 private:
  int input_dim_, output_dim_;
  std::shared_ptr<Parameter> weight_;
};

// Batch normalisation over axis (the channels): batch statistics in training mode (updating the running ones
// with momentum), the running ones otherwise or with use_global_stats. center / scale: learn beta / gamma
// (else they stay 0 / 1 and get no gradient).
class BatchNorm : public HybridBlock {
 public:
  explicit BatchNorm(int axis = 1, float momentum = 0.9f, float epsilon = 1e-5f, bool center = true, bool scale = true,
                     bool use_global_stats = false, int in_channels = 0, const std::string& prefix = {});
  std::vector<Symbol> HybridForward(const std::vector<Symbol>& inputs) override;

 private:
  int axis_;
  float momentum_, epsilon_;
  bool scale_, use_global_stats_;
  std::shared_ptr<Parameter> gamma_, beta_, running_mean_, running_var_;
};

// Layer normalisation over axis (default the last).
class LayerNorm : public HybridBlock {
 public:
  explicit LayerNorm(int axis = -1, float epsilon = 1e-5f, bool center = true, bool scale = true, int in_channels = 0,
                     const std::string& prefix = {});
  std::vector<Symbol> HybridForward(const std::vector<Symbol>& inputs) override;

 private:
  int axis_;
  float epsilon_;
  std::shared_ptr<Parameter> gamma_, beta_;
};

}  // namespace troupe::nn
