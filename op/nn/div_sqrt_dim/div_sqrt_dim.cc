// _contrib_div_sqrt_dim: data / sqrt(data.shape[-1]), the scaling of attention scores, as MXNet 1.9's
// (src/operator/contrib/transformer*): the square root is taken in double and converted to the element type
// before dividing. Its gradient is the same operator applied to the head gradient. div_sqrt_dim.cu is the GPU
// side.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "op/internal/op_util.h"
#include "op/operator.h"
#include "op/param.h"

namespace troupe {

namespace {

constexpr const char* kName = "_contrib_div_sqrt_dim";

struct NoParam : Params<NoParam> {
  static void Declare(ParamSchema<NoParam>&) {}
};

void DivSqrtDim(const TBlob& from, const TBlob& to, OpReqType req) {
  if (req == kNullOp) return;
  const double sqrt_dim = std::sqrt(static_cast<double>(from.shape[from.shape.ndim() - 1]));
  internal::FloatSwitch(from.dtype, kName, [&](auto tag) {
    using T = decltype(tag);
    const T* x = from.dptr_as<T>();
    const T d = static_cast<T>(sqrt_dim);
    internal::AssignEach(to.dptr_as<T>(), to.Size(), req, [&](std::int64_t i) { return x[i] / d; });
  });
}

class DivSqrtDimOp final : public Operator {
 public:
  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    DivSqrtDim(in[0], out[0], req[0]);
  }
  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    DivSqrtDim(out_grad[0], in_grad[0], req[0]);
  }
};

class DivSqrtDimProp final : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override { p_.Init(kwargs, kName); }
  Kwargs GetParams() const override { return p_.GetParams(); }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    in->resize(1);
    aux->clear();
    out->resize(1);
    AssignShape(out, 0, (*in)[0], kName, "output");
    AssignShape(in, 0, (*out)[0], kName, "data");
    const TShape& d = (*in)[0];
    if (!d.known()) return false;
    if (d.ndim() < 1) throw Error(std::string(kName) + ": 'data' must have at least 1 dimension, got a scalar");
    return true;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<DivSqrtDimProp>(*this); }
  std::string TypeString() const override { return kName; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>&,
                                             const std::vector<int>&) const override {
    return {out_grad[0]};
  }
  std::vector<std::pair<int, void*>> ForwardInplaceOption(const std::vector<int>& in_data,
                                                          const std::vector<void*>& out_data) const override {
    return {{in_data[0], out_data[0]}};
  }
  std::vector<std::pair<int, void*>> BackwardInplaceOption(const std::vector<int>& out_grad, const std::vector<int>&,
                                                           const std::vector<int>&,
                                                           const std::vector<void*>& in_grad) const override {
    return {{out_grad[0], in_grad[0]}};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // div_sqrt_dim.cu
    return std::make_unique<DivSqrtDimOp>();
  }

 private:
  NoParam p_;
};

}  // namespace

TROUPE_REGISTER_OP_PROPERTY(_contrib_div_sqrt_dim, DivSqrtDimProp)
    .describe("Rescales the input by the square root of its last dimension: data / sqrt(data.shape[-1]).")
    .add_argument("data", "NDArray-or-Symbol", "The input array.");

}  // namespace troupe
