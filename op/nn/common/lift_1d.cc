#include "op/nn/common/lift_1d.h"

#include <exception>
#include <utility>

#include "op/param.h"

namespace troupe {

namespace {

std::vector<TBlob> Lift(const std::vector<TBlob>& blobs) {
  std::vector<TBlob> out = blobs;
  for (TBlob& b : out) b.shape = LiftShapeTo2d(b.shape);
  return out;
}

class Lifted final : public Operator {
 public:
  explicit Lifted(std::unique_ptr<Operator> inner) : inner_(std::move(inner)) {}
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>& aux) override {
    inner_->Forward(ctx, Lift(in), req, Lift(out), Lift(aux));
  }
  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in,
                const std::vector<TBlob>& out, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>& aux) override {
    inner_->Backward(ctx, Lift(out_grad), Lift(in), Lift(out), req, Lift(in_grad), Lift(aux));
  }

 private:
  std::unique_ptr<Operator> inner_;
};

}  // namespace

bool IsOneDimensionalKernel(const Kwargs& kwargs) {
  for (const auto& [k, v] : kwargs) {
    if (k != "kernel") continue;
    try {
      return param_detail::Codec<TShape>::Parse(v).ndim() == 1;
    } catch (const std::exception&) {
      return false;  // the operator's own parameter parsing reports it, naming the operator
    }
  }
  return false;
}

Kwargs LiftKwargsTo2d(const Kwargs& kwargs) {
  Kwargs out;
  for (const auto& [k, v] : kwargs) {
    if (k == "kernel" || k == "stride" || k == "dilate" || k == "pad") {
      const TShape t = param_detail::Codec<TShape>::Parse(v);
      if (t.ndim() == 1) {
        out.emplace_back(k, param_detail::Codec<TShape>::Print(TShape{k == "pad" ? 0 : 1, t[0]}));
        continue;
      }
    }
    if (k == "layout" && v == "NCW") {
      out.emplace_back(k, "NCHW");
      continue;
    }
    out.emplace_back(k, v);
  }
  return out;
}

TShape LiftShapeTo2d(const TShape& s) {
  if (s.ndim() != 3) return s;
  return TShape{s[0], s[1], 1, s[2]};
}

TShape DropLiftedAxis(const TShape& s) {
  if (s.ndim() != 4 || s[2] != 1) return s;
  return TShape{s[0], s[1], s[3]};
}

std::unique_ptr<Operator> LiftOperatorTo2d(std::unique_ptr<Operator> inner) {
  return std::make_unique<Lifted>(std::move(inner));
}

}  // namespace troupe
