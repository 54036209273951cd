// Optimizers: declarative configurations (a type name and keyword parameters, never code, so that a
// configuration can travel to a KVStore server) and the updates they describe, applied to NDArrays through
// the engine. MXNet's update rules (src/operator/optimizer_op-inl.h), with its parameter names:
//
//   "sgd":  learning_rate, momentum (0), wd (0), rescale_grad (1), clip_gradient (-1: none)
//           g = clip(rescale_grad * grad) + wd * weight
//           momentum == 0: weight -= lr * g
//           else:          mom = momentum * mom - lr * g; weight += mom
//   "adam": learning_rate (0.001), beta1 (0.9), beta2 (0.999), epsilon (1e-8), wd, rescale_grad,
//           clip_gradient; with t the update count of that index:
//           g = clip(rescale_grad * grad + wd * weight) (MXNet 1.9's adam_update clips after adding the
//           weight decay, unlike sgd); m = beta1 m + (1 - beta1) g;
//           v = beta2 v + (1 - beta2) g^2; lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t);
//           weight -= lr_t * m / (sqrt(v) + epsilon)
//
// Thread-safety: one thread calls Update on an Optimizer (the update itself runs on the engine, ordered by
// the arrays' variables: it reads grad and writes weight and the index's state).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ops/ndarray.h"
#include "ops/param.h"

namespace troupe {

struct OptimizerConfig {
  std::string type = "sgd";
  Kwargs params;  // e.g. {{"learning_rate", "0.1"}, {"momentum", "0.9"}}
};

class Optimizer {
 public:
  // Throws troupe::Error for an unknown type (listing the known ones) or a bad parameter (naming it).
  static std::unique_ptr<Optimizer> Create(const OptimizerConfig& config);
  static std::vector<std::string> ListTypes();
  virtual ~Optimizer() = default;

  // Pushes one update of weight from grad. index identifies the parameter (its state: momentum, Adam's m
  // and v and step count, created on first use with weight's shape, device and type). Returns at once.
  // Throws troupe::Error when grad and weight differ in shape, type or device.
  virtual void Update(int index, const NDArray& weight, const NDArray& grad) = 0;

  // Per-index multipliers of the learning rate and weight decay (MXNet's lr_mult / wd_mult), default 1.
  void SetMultipliers(int index, float lr_mult, float wd_mult);
  float learning_rate() const { return learning_rate_; }
  void SetLearningRate(float lr) { learning_rate_ = lr; }
  const OptimizerConfig& config() const { return config_; }

  // The states of every index (for checkpoints, MXNet's `.states` role): saved and loaded with
  // NDArray::Save/Load's format, names "<index>:<state>" plus the step counts. Load throws troupe::Error
  // naming the file for a file of another optimizer type.
  void SaveStates(const std::string& path) const;
  void LoadStates(const std::string& path);

 protected:
  explicit Optimizer(OptimizerConfig config) : config_(std::move(config)) {}
  float lr_of(int index) const;
  float wd_of(int index, float wd) const;
  // The state arrays of an index, created (zeros like weight) on first use; names as in SaveStates.
  std::vector<NDArray>& StateOf(int index, const NDArray& weight, const std::vector<std::string>& names);
  std::int64_t& StepOf(int index) { return steps_[index]; }

  OptimizerConfig config_;
  float learning_rate_ = 0.01f;

 private:
  std::map<int, std::pair<float, float>> multipliers_;
  std::map<int, std::vector<NDArray>> states_;
  std::map<int, std::vector<std::string>> state_names_;
  std::map<int, std::int64_t> steps_;
};

}  // namespace troupe
