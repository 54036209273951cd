// The reductions over axes on the CPU (sum, mean, max, min, prod, nansum, nanprod), with MXNet 1.x's
// axis / keepdims / exclude rules. The
// output is laid out as the input with the reduced dimensions set to 1 (whether or not they are kept), so
// one index map (tensor_ops::BroadcastIndexer) serves forward (reduce) and backward (broadcast back).
#include <algorithm>
#include <cmath>
#include <sstream>
#include <type_traits>

#include "op/nn/reduce/reduce.h"

namespace troupe {

namespace {

// Which dimensions of an input of rank ndim are reduced.
std::vector<bool> ReducedDims(const ReduceAxesParam& p, int ndim, const std::string& op) {
  if (!p.axis.has_value() || p.axis->empty()) return std::vector<bool>(static_cast<std::size_t>(ndim), true);
  std::vector<bool> reduced(static_cast<std::size_t>(ndim), false);
  for (std::int64_t a : *p.axis) {
    if (a < -ndim || a >= ndim) {
      std::ostringstream m;
      m << op << ": parameter 'axis' " << param_detail::PrintTuple(*p.axis) << " contains " << a
        << ", out of range for data with " << ndim << " dimensions (accepted: " << -ndim << " .. " << ndim - 1
        << ")";
      throw Error(m.str());
    }
    const auto d = static_cast<std::size_t>(a < 0 ? a + ndim : a);
    if (reduced[d]) {
      throw Error(op + ": parameter 'axis' " + param_detail::PrintTuple(*p.axis) + " names dimension " +
                  std::to_string(d) + " twice");
    }
    reduced[d] = true;
  }
  if (p.exclude) reduced.flip();
  return reduced;
}

}  // namespace

TShape ReduceKeepdimsShape(const ReduceAxesParam& p, const TShape& in, const std::string& op) {
  const auto reduced = ReducedDims(p, in.ndim(), op);
  TShape out = in;
  for (int d = 0; d < in.ndim(); ++d) {
    if (reduced[static_cast<std::size_t>(d)]) out[d] = 1;
  }
  return out;
}

TShape ReduceOutputShape(const ReduceAxesParam& p, const TShape& in, const std::string& op) {
  const auto reduced = ReducedDims(p, in.ndim(), op);
  std::vector<std::int64_t> out;
  for (int d = 0; d < in.ndim(); ++d) {
    if (!reduced[static_cast<std::size_t>(d)]) {
      out.push_back(in[d]);
    } else if (p.keepdims) {
      out.push_back(1);
    }
  }
  if (out.empty()) out.push_back(1);  // MXNet 1.x: a full reduction gives shape (1,), not a scalar
  return TShape(out);
}

bool ReduceAxesProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                                std::vector<TShape>*) const {
  const std::string op = TypeString();
  if (in_shape->size() != 1) throw Error(op + ": expected 1 input (data), got " + std::to_string(in_shape->size()));
  out_shape->resize(1);
  const TShape& d = (*in_shape)[0];
  if (d.ndim() == 0) throw Error(op + ": argument 'data' is a scalar (); it needs at least 1 dimension");
  if (!d.known()) return false;
  AssignShape(out_shape, 0, ReduceOutputShape(param_, d, op), op, "output");
  return true;
}

const char* ReduceName(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum: return "sum";
    case ReduceKind::kMean: return "mean";
    case ReduceKind::kMax: return "max";
    case ReduceKind::kMin: return "min";
    case ReduceKind::kProd: return "prod";
    case ReduceKind::kNanSum: return "nansum";
    case ReduceKind::kNanProd: return "nanprod";
  }
  return "?";
}

namespace {

class ReduceAxesCpuOp : public Operator {
 public:
  ReduceAxesCpuOp(const ReduceAxesParam& p, ReduceKind kind) : param_(p), kind_(kind), name_(ReduceName(kind)) {}

  void Forward(const OpContext&, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const TBlob& in = in_data[0];
    const TBlob& out = out_data[0];
    const auto ix = tensor_ops::MakeBroadcastIndexer(in.shape, ReduceKeepdimsShape(param_, in.shape, name_));
    auto run = [&](auto tag) {
      using T = decltype(tag);
      const T* x = static_cast<const T*>(in.dptr);
      T* o = static_cast<T*>(out.dptr);
      for (std::int64_t i = 0; i < ix.small_size; ++i) Assign(o + i, req[0], reduce::ReduceElement(kind_, x, ix, i));
    };
    if (kind_ == ReduceKind::kMean) {
      internal::FloatSwitch(in.dtype, name_, run);
    } else {
      internal::NumberSwitch(in.dtype, name_, run);
    }
  }

  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in_data,
                const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const TBlob& og = out_grad[0];
    const TBlob& ig = in_grad[0];
    const auto ix = tensor_ops::MakeBroadcastIndexer(ig.shape, ReduceKeepdimsShape(param_, ig.shape, name_));
    internal::FloatSwitch(ig.dtype, name_, [&](auto tag) {
      using T = decltype(tag);
      const T* g = static_cast<const T*>(og.dptr);
      const T* x = in_data.size() > 0 ? static_cast<const T*>(in_data[0].dptr) : nullptr;
      const T* y = out_data.size() > 0 ? static_cast<const T*>(out_data[0].dptr) : nullptr;
      T* o = static_cast<T*>(ig.dptr);
      const T scale = kind_ == ReduceKind::kMean ? static_cast<T>(1.0 / static_cast<double>(ix.reduce_size)) : T(1);
      internal::AssignEach(o, ix.big_size, req[0],
                           [&](std::int64_t i) { return reduce::GradientElement(kind_, g, x, y, scale, ix, i); });
    });
  }

 private:
  ReduceAxesParam param_;
  ReduceKind kind_;
  std::string name_;
};

template <ReduceKind kKind>
class ReduceProp : public ReduceAxesProp {
 public:
  ReduceProp() : ReduceAxesProp(kKind) {}
};

}  // namespace

std::unique_ptr<Operator> ReduceAxesProp::CreateOperator(Context ctx) const {
  if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);
  return std::make_unique<ReduceAxesCpuOp>(param_, kind_);
}

TROUPE_REGISTER_OP_PROPERTY(sum, ReduceProp<ReduceKind::kSum>)
    .describe("Computes the sum of array elements over given axes.")
    .add_argument("data", "NDArray-or-Symbol", "The input")
    .add_arguments(ReduceAxesParam::Docs())
    .add_alias("sum_axis");

TROUPE_REGISTER_OP_PROPERTY(mean, ReduceProp<ReduceKind::kMean>)
    .describe("Computes the mean of array elements over given axes.")
    .add_argument("data", "NDArray-or-Symbol", "The input")
    .add_arguments(ReduceAxesParam::Docs());

TROUPE_REGISTER_OP_PROPERTY(max, ReduceProp<ReduceKind::kMax>)
    .describe("Computes the max of array elements over given axes.")
    .add_argument("data", "NDArray-or-Symbol", "The input")
    .add_arguments(ReduceAxesParam::Docs())
    .add_alias("max_axis");

TROUPE_REGISTER_OP_PROPERTY(min, ReduceProp<ReduceKind::kMin>)
    .describe("Computes the min of array elements over given axes.")
    .add_argument("data", "NDArray-or-Symbol", "The input")
    .add_arguments(ReduceAxesParam::Docs())
    .add_alias("min_axis");

TROUPE_REGISTER_OP_PROPERTY(prod, ReduceProp<ReduceKind::kProd>)
    .describe("Computes the product of array elements over given axes.")
    .add_argument("data", "NDArray-or-Symbol", "The input")
    .add_arguments(ReduceAxesParam::Docs());

TROUPE_REGISTER_OP_PROPERTY(nansum, ReduceProp<ReduceKind::kNanSum>)
    .describe("Computes the sum of array elements over given axes, treating NaN as zero.")
    .add_argument("data", "NDArray-or-Symbol", "The input")
    .add_arguments(ReduceAxesParam::Docs());

TROUPE_REGISTER_OP_PROPERTY(nanprod, ReduceProp<ReduceKind::kNanProd>)
    .describe("Computes the product of array elements over given axes, treating NaN as one.")
    .add_argument("data", "NDArray-or-Symbol", "The input")
    .add_arguments(ReduceAxesParam::Docs());

}  // namespace troupe
