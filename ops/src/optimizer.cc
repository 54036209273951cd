#include "ops/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>

#include "actors/error.h"

namespace troupe {

namespace {

// The name under which SaveStates records the optimizer type ("optimizer:sgd"): a one-element array, so
// the file stays a plain MXNet .params list.
constexpr char kTypePrefix[] = "optimizer:";
constexpr char kStepState[] = "step";

// MXNet's clip: clip_gradient < 0 means no clipping.
template <typename T>
inline T Clip(T g, T c) {
  if (c < T(0)) return g;
  return std::max(-c, std::min(c, g));
}

// The scalars of one update, fixed when it is pushed (so that later SetLearningRate calls do not affect
// updates already queued).
struct SgdArgs {
  double lr, momentum, wd, rescale, clip;
};
struct AdamArgs {
  double lr_t, beta1, beta2, epsilon, wd, rescale, clip;
};

template <typename T>
void CpuSgd(const SgdArgs& a, const TBlob& weight, const TBlob& grad, const TBlob* mom) {
  T* w = weight.dptr_as<T>();
  const T* g = grad.dptr_as<T>();
  const std::int64_t n = weight.Size();
  const T lr = T(a.lr), wd = T(a.wd), rescale = T(a.rescale), clip = T(a.clip);
  if (mom == nullptr) {
    // MXNet's SGDKernel: weight = (1 - lr wd) weight - lr clip(rescale grad).
    for (std::int64_t i = 0; i < n; ++i) {
      w[i] = (T(1) - lr * wd) * w[i] - lr * Clip(rescale * g[i], clip);
    }
  } else {
    // MXNet's SGDMomKernel: mom = momentum mom - lr wd weight - lr clip(rescale grad); weight += mom.
    T* m = mom->dptr_as<T>();
    const T momentum = T(a.momentum);
    for (std::int64_t i = 0; i < n; ++i) {
      m[i] = momentum * m[i] - lr * wd * w[i] - lr * Clip(rescale * g[i], clip);
      w[i] += m[i];
    }
  }
}

template <typename T>
void CpuAdam(const AdamArgs& a, const TBlob& weight, const TBlob& grad, const TBlob& mean, const TBlob& var) {
  T* w = weight.dptr_as<T>();
  const T* g = grad.dptr_as<T>();
  T* m = mean.dptr_as<T>();
  T* v = var.dptr_as<T>();
  const std::int64_t n = weight.Size();
  const T lr = T(a.lr_t), beta1 = T(a.beta1), beta2 = T(a.beta2), eps = T(a.epsilon), wd = T(a.wd),
          rescale = T(a.rescale), clip = T(a.clip);
  for (std::int64_t i = 0; i < n; ++i) {
    // MXNet's AdamUpdateKernel clips after adding weight decay (checked against mx.nd.adam_update 1.9.1).
    const T gi = Clip(rescale * g[i] + wd * w[i], clip);
    m[i] = beta1 * m[i] + (T(1) - beta1) * gi;
    v[i] = beta2 * v[i] + (T(1) - beta2) * gi * gi;
    w[i] -= lr * m[i] / (std::sqrt(v[i]) + eps);
  }
}

// Everything that can be checked at the call, before anything is pushed.
void CheckUpdateArgs(const std::string& type, int index, const NDArray& weight, const NDArray& grad) {
  const std::string what = "optimizer '" + type + "' update of index " + std::to_string(index);
  if (weight.is_none() || grad.is_none()) throw Error(what + ": weight or gradient is a none array");
  if (weight.shape() != grad.shape()) {
    throw Error(what + ": gradient shape " + grad.shape().ToString() + " differs from weight shape " +
                weight.shape().ToString());
  }
  if (weight.dtype() != grad.dtype()) {
    throw Error(what + ": gradient dtype " + DTypeName(grad.dtype()) + " differs from weight dtype " +
                DTypeName(weight.dtype()));
  }
  if (weight.ctx() != grad.ctx()) {
    throw Error(what + ": gradient is on " + grad.ctx().ToString() + " but weight on " + weight.ctx().ToString() +
                "; copy the gradient to the weight's device first");
  }
  if (weight.engine() != grad.engine()) throw Error(what + ": weight and gradient belong to different engines");
  if (weight.dtype() != DType::kFloat32 && weight.dtype() != DType::kFloat64) {
    throw Error(what + ": dtype " + std::string(DTypeName(weight.dtype())) +
                " is not supported (float32 and float64 are)");
  }
  if (weight.ctx().is_gpu()) {
    throw Error(what + ": weight is on " + weight.ctx().ToString() +
                ", but optimizer updates run on the CPU only so far; keep the parameters on cpu(0) and copy "
                "them to the device, or update them there with NDArray arithmetic");
  }
}

// A gradient that is the weight itself (or overlaps it) must not be read while it is written.
NDArray Readable(const NDArray& grad, const NDArray& weight) {
  return grad.SharesChunkWith(weight) ? grad.CopyTo(grad.ctx()) : grad;
}

struct SgdParam : Params<SgdParam> {
  float learning_rate = 0.01f;
  float momentum = 0.f;
  float wd = 0.f;
  float rescale_grad = 1.f;
  float clip_gradient = -1.f;
  static void Declare(ParamSchema<SgdParam>& s) {
    s.Field("learning_rate", &SgdParam::learning_rate).Default(0.01f).LowerBound(0).Describe("Learning rate.");
    s.Field("momentum", &SgdParam::momentum).Default(0.f).Range(0, 1).Describe("The decay rate of momentum.");
    s.Field("wd", &SgdParam::wd).Default(0.f).Describe("Weight decay (L2 regularisation coefficient).");
    s.Field("rescale_grad", &SgdParam::rescale_grad).Default(1.f).Describe("Gradients are multiplied by this.");
    s.Field("clip_gradient", &SgdParam::clip_gradient)
        .Default(-1.f)
        .Describe("Clip the rescaled gradient to [-clip_gradient, clip_gradient]; < 0 turns clipping off.");
  }
};

struct AdamParam : Params<AdamParam> {
  float learning_rate = 0.001f;
  // Doubles: MXNet's Python Adam computes the bias correction from the Python (double) values.
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  float wd = 0.f;
  float rescale_grad = 1.f;
  float clip_gradient = -1.f;
  static void Declare(ParamSchema<AdamParam>& s) {
    s.Field("learning_rate", &AdamParam::learning_rate).Default(0.001f).LowerBound(0).Describe("Learning rate.");
    s.Field("beta1", &AdamParam::beta1).Default(0.9).Range(0, 1).Describe("Decay rate of the first moment.");
    s.Field("beta2", &AdamParam::beta2).Default(0.999).Range(0, 1).Describe("Decay rate of the second moment.");
    s.Field("epsilon", &AdamParam::epsilon).Default(1e-8).LowerBound(0).Describe("Small constant for stability.");
    s.Field("wd", &AdamParam::wd).Default(0.f).Describe("Weight decay (L2 regularisation coefficient).");
    s.Field("rescale_grad", &AdamParam::rescale_grad).Default(1.f).Describe("Gradients are multiplied by this.");
    s.Field("clip_gradient", &AdamParam::clip_gradient)
        .Default(-1.f)
        .Describe("Clip the gradient (after weight decay, as MXNet) to [-clip_gradient, clip_gradient]; < 0: off.");
  }
};

class SgdOptimizer : public Optimizer {
 public:
  explicit SgdOptimizer(OptimizerConfig config) : Optimizer(std::move(config)) {
    param_.Init(config_.params, "optimizer 'sgd'");
    learning_rate_ = param_.learning_rate;
  }

  void Update(int index, const NDArray& weight, const NDArray& grad) override {
    CheckUpdateArgs("sgd", index, weight, grad);
    const bool use_mom = param_.momentum != 0.f;
    static const std::vector<std::string> kMom = {"momentum"};
    static const std::vector<std::string> kNone;
    std::vector<NDArray>& states = StateOf(index, weight, use_mom ? kMom : kNone);
    ++StepOf(index);
    const SgdArgs args{lr_of(index), param_.momentum, wd_of(index, param_.wd), param_.rescale_grad,
                       param_.clip_gradient};
    const NDArray g = Readable(grad, weight);
    const TBlob tw = weight.data(), tg = g.data();
    std::vector<VarHandle> writes = {weight.var()};
    TBlob tm;
    if (use_mom) {
      tm = states[0].data();
      writes.push_back(states[0].var());
    }
    const bool f64 = weight.dtype() == DType::kFloat64;
    weight.engine()->PushSync(
        [args, tw, tg, tm, use_mom, f64](RunContext) {
          const TBlob* m = use_mom ? &tm : nullptr;
          if (f64) {
            CpuSgd<double>(args, tw, tg, m);
          } else {
            CpuSgd<float>(args, tw, tg, m);
          }
        },
        weight.ctx(), {g.var()}, writes, FnProperty::kNormal, 0, "sgd_update");
  }

 private:
  SgdParam param_;
};

class AdamOptimizer : public Optimizer {
 public:
  explicit AdamOptimizer(OptimizerConfig config) : Optimizer(std::move(config)) {
    param_.Init(config_.params, "optimizer 'adam'");
    learning_rate_ = param_.learning_rate;
  }

  void Update(int index, const NDArray& weight, const NDArray& grad) override {
    CheckUpdateArgs("adam", index, weight, grad);
    static const std::vector<std::string> kNames = {"mean", "var"};
    std::vector<NDArray>& states = StateOf(index, weight, kNames);
    const std::int64_t t = ++StepOf(index);
    // As MXNet's Python Adam: the bias corrections fold into the step size, computed in double.
    const double coef1 = 1.0 - std::pow(param_.beta1, static_cast<double>(t));
    const double coef2 = 1.0 - std::pow(param_.beta2, static_cast<double>(t));
    const double lr_t = static_cast<double>(lr_of(index)) * std::sqrt(coef2) / coef1;
    const AdamArgs args{lr_t, param_.beta1, param_.beta2, param_.epsilon,
                        wd_of(index, param_.wd), param_.rescale_grad, param_.clip_gradient};
    const NDArray g = Readable(grad, weight);
    const TBlob tw = weight.data(), tg = g.data(), tm = states[0].data(), tv = states[1].data();
    const bool f64 = weight.dtype() == DType::kFloat64;
    weight.engine()->PushSync(
        [args, tw, tg, tm, tv, f64](RunContext) {
          if (f64) {
            CpuAdam<double>(args, tw, tg, tm, tv);
          } else {
            CpuAdam<float>(args, tw, tg, tm, tv);
          }
        },
        weight.ctx(), {g.var()}, {weight.var(), states[0].var(), states[1].var()}, FnProperty::kNormal, 0,
        "adam_update");
  }

 private:
  AdamParam param_;
};

// Parses "<index>:<state>"; false when the name is not of that form.
bool ParseStateName(const std::string& name, int* index, std::string* state) {
  const auto colon = name.find(':');
  if (colon == std::string::npos || colon == 0) return false;
  const std::string head = name.substr(0, colon);
  char* end = nullptr;
  const long v = std::strtol(head.c_str(), &end, 10);
  if (end == nullptr || *end != '\0') return false;
  *index = static_cast<int>(v);
  *state = name.substr(colon + 1);
  return true;
}

}  // namespace

std::unique_ptr<Optimizer> Optimizer::Create(const OptimizerConfig& config) {
  if (config.type == "sgd") return std::make_unique<SgdOptimizer>(config);
  if (config.type == "adam") return std::make_unique<AdamOptimizer>(config);
  std::string msg = "unknown optimizer type '" + config.type + "'; known types: ";
  const auto types = ListTypes();
  for (std::size_t i = 0; i < types.size(); ++i) msg += (i ? ", " : "") + types[i];
  const std::string similar = SimilarNames(config.type, types);
  if (!similar.empty()) msg += " (did you mean " + similar + "?)";
  throw Error(msg);
}

std::vector<std::string> Optimizer::ListTypes() { return {"adam", "sgd"}; }

void Optimizer::SetMultipliers(int index, float lr_mult, float wd_mult) {
  multipliers_[index] = {lr_mult, wd_mult};
}

float Optimizer::lr_of(int index) const {
  const auto it = multipliers_.find(index);
  return it == multipliers_.end() ? learning_rate_ : learning_rate_ * it->second.first;
}

float Optimizer::wd_of(int index, float wd) const {
  const auto it = multipliers_.find(index);
  return it == multipliers_.end() ? wd : wd * it->second.second;
}

std::vector<NDArray>& Optimizer::StateOf(int index, const NDArray& weight, const std::vector<std::string>& names) {
  auto it = states_.find(index);
  if (it == states_.end()) {
    std::vector<NDArray> fresh;
    for (std::size_t i = 0; i < names.size(); ++i) {
      fresh.push_back(NDArray::Zeros(weight.shape(), weight.ctx(), weight.dtype(), weight.engine()));
    }
    state_names_[index] = names;
    return states_[index] = std::move(fresh);
  }
  // States loaded from a file (or made for another weight) must fit this weight.
  if (state_names_[index] != names) {
    std::string have, want;
    for (const auto& n : state_names_[index]) have += (have.empty() ? "" : ", ") + n;
    for (const auto& n : names) want += (want.empty() ? "" : ", ") + n;
    throw Error("optimizer '" + config_.type + "': index " + std::to_string(index) + " has states {" + have +
                "} but this configuration needs {" + want + "}; were the states saved with other parameters?");
  }
  for (NDArray& s : it->second) {
    if (s.shape() != weight.shape() || s.dtype() != weight.dtype()) {
      throw Error("optimizer '" + config_.type + "': the state of index " + std::to_string(index) + " has shape " +
                  s.shape().ToString() + " and dtype " + DTypeName(s.dtype()) + ", but the weight has shape " +
                  weight.shape().ToString() + " and dtype " + DTypeName(weight.dtype()) +
                  "; were the states loaded for another model?");
    }
    if (s.ctx() != weight.ctx() || s.engine() != weight.engine()) {
      NDArray moved(weight.shape(), weight.ctx(), weight.dtype(), weight.engine());
      CopyFromTo(s, moved);
      s = moved;
    }
  }
  return it->second;
}

void Optimizer::SaveStates(const std::string& path) const {
  std::vector<NDArray> arrays;
  std::vector<std::string> names;
  arrays.push_back(NDArray::FromVector<std::int32_t>({1}, TShape{1}));
  names.push_back(kTypePrefix + config_.type);
  for (const auto& [index, states] : states_) {
    const auto& state_names = state_names_.at(index);
    for (std::size_t i = 0; i < states.size(); ++i) {
      arrays.push_back(states[i]);
      names.push_back(std::to_string(index) + ":" + state_names[i]);
    }
  }
  for (const auto& [index, step] : steps_) {
    arrays.push_back(NDArray::FromVector<std::int64_t>({step}, TShape{1}));
    names.push_back(std::to_string(index) + ":" + kStepState);
  }
  NDArray::Save(path, arrays, names);
}

void Optimizer::LoadStates(const std::string& path) {
  std::vector<NDArray> arrays;
  std::vector<std::string> names;
  NDArray::Load(path, &arrays, &names);
  const std::string where = "optimizer states file '" + path + "'";
  std::string type;
  for (const auto& n : names) {
    if (n.rfind(kTypePrefix, 0) == 0) type = n.substr(sizeof(kTypePrefix) - 1);
  }
  if (type.empty()) {
    throw Error(where + " has no '" + kTypePrefix + "<type>' entry; it was not written by Optimizer::SaveStates");
  }
  if (type != config_.type) {
    throw Error(where + " holds the states of optimizer '" + type + "', not of '" + config_.type +
                "'; use an optimizer of type '" + type + "' or start without the states");
  }
  std::map<int, std::vector<NDArray>> states;
  std::map<int, std::vector<std::string>> state_names;
  std::map<int, std::int64_t> steps;
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    if (names[i].rfind(kTypePrefix, 0) == 0) continue;
    int index = 0;
    std::string state;
    if (!ParseStateName(names[i], &index, &state) || state.empty()) {
      throw Error(where + ": entry '" + names[i] + "' is not of the form '<index>:<state>'");
    }
    if (state == kStepState) {
      if (arrays[i].Size() != 1 || arrays[i].dtype() != DType::kInt64) {
        throw Error(where + ": entry '" + names[i] + "' must be one int64 step count");
      }
      steps[index] = arrays[i].ToVector<std::int64_t>()[0];
    } else {
      states[index].push_back(arrays[i]);
      state_names[index].push_back(state);
    }
  }
  states_ = std::move(states);
  state_names_ = std::move(state_names);
  steps_ = std::move(steps);
}

}  // namespace troupe
