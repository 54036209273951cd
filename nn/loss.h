// Losses (Gluon's gluon.loss): HybridBlocks of two inputs, the prediction and the label, returning the loss of
// each sample (shape (batch,)): the element losses averaged over every axis but batch_axis, times weight.
// Backward from the result (a head of ones) gives the gradient of their sum, which Trainer::Step(batch_size)
// turns into the mean's.
//
//   nn::SoftmaxCrossEntropyLoss loss;
//   NDArray l = loss({logits, labels})[0];                     // (batch,)
//
// Thread-safety: as any block.
#pragma once

#include <string>
#include <vector>

#include "nn/block.h"

namespace troupe::nn {

class Loss : public HybridBlock {
 public:
  // The loss of (prediction, label): Forward({pred, label}).
  NDArray operator()(const NDArray& pred, const NDArray& label) { return Forward({pred, label}).at(0); }
  using HybridBlock::operator();

 protected:
  Loss(float weight, int batch_axis, const std::string& prefix, const std::string& hint)
      : HybridBlock(prefix, hint), weight_(weight), batch_axis_(batch_axis) {}
  // The element losses -> per-sample losses: times weight, mean over the axes but batch_axis.
  Symbol Finish(const Symbol& elementwise) const;
  // (pred, label) or troupe::Error naming the loss.
  static void Two(const std::vector<Symbol>& x, const char* loss);

  float weight_;
  int batch_axis_;
};

// -log softmax(pred)[label] along axis (sparse_label: label holds class indices; else a distribution of
// pred's shape, and the loss is -sum(label * log softmax(pred))). from_logits: pred is already log
// probabilities.
class SoftmaxCrossEntropyLoss : public Loss {
 public:
  explicit SoftmaxCrossEntropyLoss(int axis = -1, bool sparse_label = true, bool from_logits = false,
                                   float weight = 1.0f, int batch_axis = 0, const std::string& prefix = {});
  std::vector<Symbol> HybridForward(const std::vector<Symbol>& inputs) override;

 private:
  int axis_;
  bool sparse_label_, from_logits_;
};

// 0.5 * (pred - label)^2 (label reshaped to pred's shape).
class L2Loss : public Loss {
 public:
  explicit L2Loss(float weight = 1.0f, int batch_axis = 0, const std::string& prefix = {});
  std::vector<Symbol> HybridForward(const std::vector<Symbol>& inputs) override;
};

// |pred - label|.
class L1Loss : public Loss {
 public:
  explicit L1Loss(float weight = 1.0f, int batch_axis = 0, const std::string& prefix = {});
  std::vector<Symbol> HybridForward(const std::vector<Symbol>& inputs) override;
};

// Binary cross-entropy with labels in [0, 1]: from_sigmoid false takes logits, computed stably as
// max(pred, 0) - pred * label + log(1 + exp(-|pred|)); true takes probabilities:
// -(label * log(pred + eps) + (1 - label) * log(1 - pred + eps)), eps 1e-12.
class SigmoidBinaryCrossEntropyLoss : public Loss {
 public:
  explicit SigmoidBinaryCrossEntropyLoss(bool from_sigmoid = false, float weight = 1.0f, int batch_axis = 0,
                                         const std::string& prefix = {});
  std::vector<Symbol> HybridForward(const std::vector<Symbol>& inputs) override;

 private:
  bool from_sigmoid_;
};

// |pred - label| - rho / 2 where it exceeds rho, else (pred - label)^2 / (2 rho).
class HuberLoss : public Loss {
 public:
  explicit HuberLoss(float rho = 1.0f, float weight = 1.0f, int batch_axis = 0, const std::string& prefix = {});
  std::vector<Symbol> HybridForward(const std::vector<Symbol>& inputs) override;

 private:
  float rho_;
};

}  // namespace troupe::nn
