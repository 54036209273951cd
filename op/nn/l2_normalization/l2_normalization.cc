// L2Normalization: the input divided by its L2 norm over a group of elements: the property and the CPU
// operator. The GPU operator is l2_normalization.cu.
//
// Semantics, as MXNet 1.9's (src/operator/l2_normalization*):
//   norm = sqrt(sum(x^2) + eps), out = x / norm, over
//     mode 'instance': everything but the first axis (one norm per sample; a 1-D input divides each element
//                      by its own norm, as MXNet does);
//     mode 'channel':  axis 1 (one norm per sample and spatial position; 3 or more dimensions);
//     mode 'spatial':  the axes after 1 (one norm per sample and channel; 3 or more dimensions).
// The hidden output 'norm' holds the norms: shape (N,) for instance, the data's shape with axis 1 set to 1 for
// channel, (N, C) for spatial. Backward, from the outputs as MXNet:
//   d x = (og - out * sum(og * out)) / norm, the sum over the same group.
// Each mode is a reduction over the middle axis of an (outer, n, inner) view; sums run in double.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "op/internal/op_util.h"
#include "op/nn/l2_normalization/l2_normalization.h"
#include "op/nn/common/device_math.h"
#include "op/operator.h"
#include "op/param.h"

namespace troupe {

namespace {

using act_norm::AxisView;
using internal::FloatSwitch;
using l2_norm::GroupView;

constexpr const char* kName = "L2Normalization";

class L2NormalizationOp final : public Operator {
 public:
  explicit L2NormalizationOp(const L2NormalizationParam& p) : p_(p) {}

  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    const TBlob& x = in[0];
    const AxisView v = GroupView(p_.mode, x.shape);
    FloatSwitch(x.dtype, kName, [&](auto tag) {
      using T = decltype(tag);
      const T* px = x.dptr_as<T>();
      T* y = out[0].dptr_as<T>();
      T* norm = out[1].dptr_as<T>();
      const double eps = static_cast<T>(p_.eps);
      for (std::int64_t o = 0; o < v.outer; ++o) {
        for (std::int64_t i = 0; i < v.inner; ++i) {
          const std::int64_t base = o * v.n * v.inner + i;
          double sq = eps;
          for (std::int64_t k = 0; k < v.n; ++k) {
            const double e = px[base + k * v.inner];
            sq += e * e;
          }
          // The norm as stored (in T) divides, as in MXNet.
          const T nrm = static_cast<T>(std::sqrt(sq));
          Assign(norm + o * v.inner + i, req[1], nrm);
          if (req[0] == kNullOp) continue;
          for (std::int64_t k = 0; k < v.n; ++k) {
            const std::int64_t j = base + k * v.inner;
            Assign(y + j, req[0], static_cast<T>(px[j] / nrm));
          }
        }
      }
    });
  }

  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>& out, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const TBlob& y = out[0];
    const AxisView v = GroupView(p_.mode, y.shape);
    FloatSwitch(y.dtype, kName, [&](auto tag) {
      using T = decltype(tag);
      const T* og = out_grad[0].dptr_as<T>();
      const T* py = y.dptr_as<T>();
      const T* norm = out[1].dptr_as<T>();
      T* gx = in_grad[0].dptr_as<T>();
      for (std::int64_t o = 0; o < v.outer; ++o) {
        for (std::int64_t i = 0; i < v.inner; ++i) {
          const std::int64_t base = o * v.n * v.inner + i;
          double dot = 0;
          for (std::int64_t k = 0; k < v.n; ++k) {
            const std::int64_t j = base + k * v.inner;
            dot += static_cast<double>(og[j]) * py[j];
          }
          const double nrm = norm[o * v.inner + i];
          // gx may be og's memory: each element is read before it is written.
          for (std::int64_t k = 0; k < v.n; ++k) {
            const std::int64_t j = base + k * v.inner;
            Assign(gx + j, req[0], static_cast<T>((og[j] - py[j] * dot) / nrm));
          }
        }
      }
    });
  }

 private:
  L2NormalizationParam p_;
};

class L2NormalizationProp final : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override { p_.Init(kwargs, kName); }
  Kwargs GetParams() const override { return p_.GetParams(); }
  std::vector<std::string> ListOutputs() const override { return {"output", "norm"}; }
  int NumOutputs() const override { return 2; }
  int NumVisibleOutputs() const override { return 1; }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    in->resize(1);
    aux->clear();
    const TShape d = (*in)[0];
    if (!d.known()) return false;
    if (d.ndim() < 1) throw Error(std::string(kName) + ": 'data' must have at least 1 dimension, got a scalar");
    TShape norm;
    if (p_.mode == "instance") {
      norm = TShape{d[0]};
    } else {
      if (d.ndim() < 3) {
        throw Error(std::string(kName) + ": mode '" + p_.mode + "' needs 'data' with at least 3 dimensions, got " +
                    d.ToString());
      }
      if (p_.mode == "channel") {
        norm = d;
        norm[1] = 1;
      } else {
        norm = TShape{d[0], d[1]};
      }
    }
    *out = {d, norm};
    return true;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<L2NormalizationProp>(*this); }
  std::string TypeString() const override { return kName; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>&,
                                             const std::vector<int>& out_data) const override {
    return {out_grad[0], out_data[0], out_data[1]};
  }
  std::vector<std::pair<int, void*>> BackwardInplaceOption(const std::vector<int>& out_grad, const std::vector<int>&,
                                                           const std::vector<int>&,
                                                           const std::vector<void*>& in_grad) const override {
    return {{out_grad[0], in_grad[0]}};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // l2_normalization.cu
    return std::make_unique<L2NormalizationOp>(p_);
  }

 private:
  L2NormalizationParam p_;
};

}  // namespace

TROUPE_REGISTER_OP_PROPERTY(L2Normalization, L2NormalizationProp)
    .describe("Normalizes the input by its L2 norm: x / sqrt(sum(x^2) + eps) per instance, channel or spatial group.")
    .add_argument("data", "NDArray-or-Symbol", "Input array to normalize.")
    .add_arguments(L2NormalizationParam::Docs());

}  // namespace troupe
