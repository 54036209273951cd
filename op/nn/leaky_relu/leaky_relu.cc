// LeakyReLU: property and CPU operator (the GPU one is leaky_relu.cu); registers "LeakyReLU".
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/error.h"
#include "op/nn/leaky_relu/leaky_relu.h"
#include "tensor/detail/vector_math.h"
#include "tensor/resource.h"

namespace troupe {

namespace {

using internal::AssignEach;
using internal::FloatSwitch;

class LeakyReLUCpuOp : public Operator {
 public:
  explicit LeakyReLUCpuOp(const LeakyReLUParam& p) : p_(p), type_(p.type()) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    FloatSwitch(in_data[0].dtype, "LeakyReLU", [&](auto tag) {
      using T = decltype(tag);
      const T* x = in_data[0].dptr_as<T>();
      T* y = req[0] == kNullOp ? nullptr : out_data[0].dptr_as<T>();
      const std::int64_t n = in_data[0].Size();
      if (type_ == act_norm::LeakyType::kPReLU) {
        const TBlob& gb = in_data[1];
        const T* gamma = gb.dptr_as<T>();
        const act_norm::AxisView v = act_norm::ViewAround(in_data[0].shape, 1);
        const bool scalar = gb.Size() == 1;
        for (std::int64_t i = 0; i < n && y != nullptr; ++i) {
          const T s = gamma[scalar ? 0 : (i / v.inner) % v.n];
          Assign(y + i, req[0], x[i] > T(0) ? x[i] : s * x[i]);
        }
      } else if (type_ == act_norm::LeakyType::kRReLU) {
        // Training: a slope per element, uniform in [lower, upper); inference: their mean (MXNet). The
        // slopes go to the hidden 'mask' output, which Backward reads.
        T* mask = (out_data.size() > 1 && req.size() > 1 && req[1] != kNullOp) ? out_data[1].dptr_as<T>() : nullptr;
        const T lo = T(p_.lower_bound), span = T(p_.upper_bound) - T(p_.lower_bound);
        std::uint64_t key = 0, base = 0;
        if (ctx.is_train) {
          RandomGenerator* gen = ctx.requested.at(0).get_random();
          key = gen->key();
          base = gen->Reserve(act_norm::RandomBlocks(n));
        }
        for (std::int64_t i = 0; i < n; ++i) {
          const T s = ctx.is_train ? lo + span * T(act_norm::UniformAt(key, base, static_cast<std::uint64_t>(i)))
                                   : (T(p_.lower_bound) + T(p_.upper_bound)) / T(2);
          if (mask != nullptr) mask[i] = s;
          if (y != nullptr) Assign(y + i, req[0], x[i] > T(0) ? x[i] : s * x[i]);
        }
      } else {
        if constexpr (std::is_same_v<T, float>) {
          // GELU through the vectorised erf (the scalar erff loop is several times slower).
          if (type_ == act_norm::LeakyType::kGELU && (req[0] == kWriteTo || req[0] == kWriteInplace)) {
            return internal::VecGelu(x, y, n);
          }
        }
        const T slope = T(p_.slope);
        for (std::int64_t i = 0; i < n && y != nullptr; ++i) {
          Assign(y + i, req[0], act_norm::LeakyForward(type_, x[i], slope));
        }
      }
    });
  }

  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>&) override {
    FloatSwitch(out_grad[0].dtype, "LeakyReLU", [&](auto tag) {
      using T = decltype(tag);
      const T* og = out_grad[0].dptr_as<T>();
      const std::int64_t n = out_grad[0].Size();
      if (type_ == act_norm::LeakyType::kPReLU) {
        const T* x = in_data[0].dptr_as<T>();
        const T* gamma = in_data[1].dptr_as<T>();
        const act_norm::AxisView v = act_norm::ViewAround(in_data[0].shape, 1);
        const bool scalar = in_data[1].Size() == 1;
        // gamma's gradient first: in_grad[data] may share out_grad's memory.
        if (req[1] != kNullOp) {
          std::vector<double> acc(static_cast<std::size_t>(in_data[1].Size()), 0.0);
          for (std::int64_t i = 0; i < n; ++i) {
            if (!(x[i] > T(0))) acc[scalar ? 0 : (i / v.inner) % v.n] += static_cast<double>(x[i]) * og[i];
          }
          T* gg = in_grad[1].dptr_as<T>();
          for (std::size_t c = 0; c < acc.size(); ++c) Assign(gg + c, req[1], static_cast<T>(acc[c]));
        }
        if (req[0] != kNullOp) {
          T* g = in_grad[0].dptr_as<T>();
          for (std::int64_t i = 0; i < n; ++i) {
            const T s = gamma[scalar ? 0 : (i / v.inner) % v.n];
            Assign(g + i, req[0], og[i] * (x[i] > T(0) ? T(1) : s));
          }
        }
        return;
      }
      if (req[0] == kNullOp) return;
      T* g = in_grad[0].dptr_as<T>();
      if (type_ == act_norm::LeakyType::kRReLU) {
        const T* y = out_data[0].dptr_as<T>();
        const T* mask = out_data[1].dptr_as<T>();
        for (std::int64_t i = 0; i < n; ++i) Assign(g + i, req[0], og[i] * (y[i] > T(0) ? T(1) : mask[i]));
      } else {
        const T* v = (type_ == act_norm::LeakyType::kGELU ? in_data[0] : out_data[0]).dptr_as<T>();
        const T slope = T(p_.slope);
        for (std::int64_t i = 0; i < n; ++i) Assign(g + i, req[0], og[i] * act_norm::LeakyGrad(type_, v[i], slope));
      }
    });
  }

 private:
  LeakyReLUParam p_;
  act_norm::LeakyType type_;
};

}  // namespace

act_norm::LeakyType LeakyReLUParam::type() const {
  if (act_type == "leaky") return act_norm::LeakyType::kLeaky;
  if (act_type == "elu") return act_norm::LeakyType::kELU;
  if (act_type == "prelu") return act_norm::LeakyType::kPReLU;
  if (act_type == "rrelu") return act_norm::LeakyType::kRReLU;
  if (act_type == "selu") return act_norm::LeakyType::kSELU;
  if (act_type == "gelu") return act_norm::LeakyType::kGELU;
  throw Error("LeakyReLU: unknown act_type '" + act_type + "'");
}

void LeakyReLUProp::Init(const Kwargs& kwargs) {
  param_.Init(kwargs, "LeakyReLU");
  if (param_.type() == act_norm::LeakyType::kRReLU && !(param_.lower_bound <= param_.upper_bound)) {
    throw Error("LeakyReLU: parameter 'lower_bound' (" + param_detail::PrintReal(param_.lower_bound) +
                ") must not exceed 'upper_bound' (" + param_detail::PrintReal(param_.upper_bound) + ")");
  }
}

std::vector<std::string> LeakyReLUProp::ListArguments() const {
  if (param_.type() == act_norm::LeakyType::kPReLU) return {"data", "gamma"};
  return {"data"};
}

std::vector<std::string> LeakyReLUProp::ListOutputs() const {
  if (param_.type() == act_norm::LeakyType::kRReLU) return {"output", "mask"};
  return {"output"};
}

bool LeakyReLUProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                               std::vector<TShape>*) const {
  const auto type = param_.type();
  in_shape->resize(ListArguments().size());
  const TShape dshape = (*in_shape)[0];
  if (!dshape.known()) return false;
  if (type == act_norm::LeakyType::kPReLU) {
    if (dshape.ndim() < 2) {
      throw Error("LeakyReLU: prelu needs 'data' with at least 2 dimensions (batch, channel, ...), got " +
                  dshape.ToString());
    }
    // gamma: one slope per channel (axis 1), or one for everything.
    const TShape& g = (*in_shape)[1];
    if (g.known() && g.ndim() == 1 && g[0] == 1) {
      // a shared slope
    } else {
      AssignShape(in_shape, 1, TShape{dshape[1]}, "LeakyReLU", "gamma");
    }
  }
  out_shape->assign(static_cast<std::size_t>(NumOutputs()), dshape);
  return true;
}

std::vector<ResourceRequest> LeakyReLUProp::ForwardResource(const std::vector<TShape>&) const {
  if (param_.type() == act_norm::LeakyType::kRReLU) return {ResourceRequest::kRandom};
  return {};
}

std::vector<int> LeakyReLUProp::DeclareBackwardDependency(const std::vector<int>& out_grad,
                                                          const std::vector<int>& in_data,
                                                          const std::vector<int>& out_data) const {
  switch (param_.type()) {
    case act_norm::LeakyType::kPReLU: return {out_grad[0], in_data[0], in_data[1]};
    case act_norm::LeakyType::kRReLU: return {out_grad[0], out_data[0], out_data[1]};
    case act_norm::LeakyType::kGELU: return {out_grad[0], in_data[0]};
    default: return {out_grad[0], out_data[0]};  // leaky, elu, selu: from the output, as MXNet
  }
}

std::vector<std::pair<int, void*>> LeakyReLUProp::ForwardInplaceOption(const std::vector<int>& in_data,
                                                                       const std::vector<void*>& out_data) const {
  const auto t = param_.type();
  // prelu and gelu read the input in backward.
  if (t == act_norm::LeakyType::kPReLU || t == act_norm::LeakyType::kGELU) return {};
  return {{in_data[0], out_data[0]}};
}

std::vector<std::pair<int, void*>> LeakyReLUProp::BackwardInplaceOption(const std::vector<int>& out_grad,
                                                                        const std::vector<int>&,
                                                                        const std::vector<int>&,
                                                                        const std::vector<void*>& in_grad) const {
  return {{out_grad[0], in_grad[0]}};
}

std::unique_ptr<Operator> LeakyReLUProp::CreateOperator(Context ctx) const {
  if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);
  return std::make_unique<LeakyReLUCpuOp>(param_);
}

TROUPE_REGISTER_OP_PROPERTY(LeakyReLU, LeakyReLUProp)
    .describe("Leaky rectified linear units and relatives: leaky, elu, prelu, rrelu, selu, gelu.")
    .add_argument("data", "NDArray-or-Symbol", "Input data to the activation function.")
    .add_argument("gamma", "NDArray-or-Symbol", "Slope per channel (prelu only).")
    .add_arguments(LeakyReLUParam::Docs());

}  // namespace troupe
