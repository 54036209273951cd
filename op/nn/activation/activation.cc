// Activation: property and CPU operator (the GPU one is activation.cu); registers "Activation".
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/error.h"
#include "op/nn/activation/activation.h"
#include "tensor/detail/kernels.h"  // CpuParallelFor
#include "tensor/detail/vector_math.h"

namespace troupe {

namespace {

using internal::AssignEach;
using internal::AccType;
using internal::FloatHalfSwitch;

// Checks the data argument's shape is known; the output has the same shape.
bool SameShape(const std::vector<TShape>& in_shape, std::vector<TShape>* out_shape, int num_out) {
  if (in_shape.empty() || !in_shape[0].known()) return false;
  out_shape->assign(static_cast<std::size_t>(num_out), in_shape[0]);
  return true;
}

class ActivationCpuOp : public Operator {
 public:
  explicit ActivationCpuOp(const ActivationParam& p) : type_(p.type()) {}

  void Forward(const OpContext&, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    FloatHalfSwitch(in_data[0].dtype, "Activation", [&](auto tag) {
      using T = decltype(tag);
      using C = AccType<T>;  // half types compute in float
      // Element ranges on the kernel threads (kGrain keeps small arrays on the calling thread).
      internal::CpuParallelFor(in_data[0].Size(), kGrain, [&](std::int64_t b, std::int64_t e) {
        const T* x = in_data[0].dptr_as<T>() + b;
        T* y = out_data[0].dptr_as<T>() + b;
        if constexpr (std::is_same_v<T, float>) {
          // tanh and sigmoid through the vectorised polynomials (a scalar tanhf is 10-20x slower).
          const bool write = req[0] == kWriteTo || req[0] == kWriteInplace;
          if (write && type_ == act_norm::ActType::kTanh) return internal::VecTanh(x, y, e - b);
          if (write && type_ == act_norm::ActType::kSigmoid) return internal::VecSigmoid(x, y, e - b);
        }
        act_norm::ActSwitch(type_, [&](auto t) {
          AssignEach(y, e - b, req[0], [&](std::int64_t i) { return act_norm::ActForward(t(), C(x[i])); });
        });
      });
    });
  }

  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const TBlob& v = act_norm::ActGradFromInput(type_) ? in_data[0] : out_data[0];
    FloatHalfSwitch(out_grad[0].dtype, "Activation", [&](auto tag) {
      using T = decltype(tag);
      using C = AccType<T>;
      internal::CpuParallelFor(out_grad[0].Size(), kGrain, [&](std::int64_t b, std::int64_t e) {
        const T* og = out_grad[0].dptr_as<T>() + b;
        const T* pv = v.dptr_as<T>() + b;
        T* g = in_grad[0].dptr_as<T>() + b;
        act_norm::ActSwitch(type_, [&](auto t) {
          AssignEach(g, e - b, req[0], [&](std::int64_t i) { return C(og[i]) * act_norm::ActGrad(t(), C(pv[i])); });
        });
      });
    });
  }

 private:
  static constexpr std::int64_t kGrain = 32768;
  act_norm::ActType type_;
};

}  // namespace

act_norm::ActType ActivationParam::type() const {
  if (act_type == "relu") return act_norm::ActType::kReLU;
  if (act_type == "sigmoid") return act_norm::ActType::kSigmoid;
  if (act_type == "tanh") return act_norm::ActType::kTanh;
  if (act_type == "softrelu") return act_norm::ActType::kSoftReLU;
  if (act_type == "softsign") return act_norm::ActType::kSoftSign;
  throw Error("Activation: unknown act_type '" + act_type + "'");
}

bool ActivationProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                                std::vector<TShape>*) const {
  return SameShape(*in_shape, out_shape, 1);
}

std::vector<int> ActivationProp::DeclareBackwardDependency(const std::vector<int>& out_grad,
                                                           const std::vector<int>& in_data,
                                                           const std::vector<int>& out_data) const {
  // As MXNet: relu, sigmoid, tanh and softrelu differentiate from the output, softsign from the input.
  if (act_norm::ActGradFromInput(param_.type())) return {out_grad[0], in_data[0]};
  return {out_grad[0], out_data[0]};
}

std::vector<std::pair<int, void*>> ActivationProp::ForwardInplaceOption(const std::vector<int>& in_data,
                                                                        const std::vector<void*>& out_data) const {
  // softsign's backward reads the input, which an in-place forward would overwrite.
  if (act_norm::ActGradFromInput(param_.type())) return {};
  return {{in_data[0], out_data[0]}};
}

std::vector<std::pair<int, void*>> ActivationProp::BackwardInplaceOption(const std::vector<int>& out_grad,
                                                                         const std::vector<int>&,
                                                                         const std::vector<int>&,
                                                                         const std::vector<void*>& in_grad) const {
  return {{out_grad[0], in_grad[0]}};
}

std::unique_ptr<Operator> ActivationProp::CreateOperator(Context ctx) const {
  if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);
  return std::make_unique<ActivationCpuOp>(param_);
}

TROUPE_REGISTER_OP_PROPERTY(Activation, ActivationProp)
    .describe("Applies an activation function element-wise: relu, sigmoid, tanh, softrelu or softsign.")
    .add_argument("data", "NDArray-or-Symbol", "The input array.")
    .add_arguments(ActivationParam::Docs());

}  // namespace troupe
