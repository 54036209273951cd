// Concat on the CPU: shape inference (every input equal but along `dim`) and the slab copies.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "op/nn/concat/concat.h"

namespace troupe {

std::vector<std::string> ConcatProp::ListArguments() const {
  std::vector<std::string> args;
  for (int i = 0; i < param_.num_args; ++i) args.push_back("arg" + std::to_string(i));
  return args;
}

bool ConcatProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                            std::vector<TShape>*) const {
  const auto n = static_cast<std::size_t>(param_.num_args);
  if (in_shape->size() != n) {
    throw Error("Concat: num_args is " + std::to_string(n) + " but " + std::to_string(in_shape->size()) +
                " inputs were given");
  }
  out_shape->resize(1);
  const TShape given_out = (*out_shape)[0];
  const auto args = ListArguments();

  // The rank: from any input (or the output) whose rank is known; all must agree.
  int ndim = -1;
  std::string ndim_from;
  auto check_rank = [&](const TShape& s, const std::string& name) {
    if (s.ndim() < 0) return;
    if (s.ndim() == 0) throw Error("Concat: argument '" + name + "' is a scalar (); inputs need at least 1 dimension");
    if (ndim < 0) {
      ndim = s.ndim(), ndim_from = name;
    } else if (s.ndim() != ndim) {
      throw Error("Concat: shape of argument '" + name + "' is " + s.ToString() + " with " +
                  std::to_string(s.ndim()) + " dimensions but '" + ndim_from + "' has " + std::to_string(ndim));
    }
  };
  for (std::size_t i = 0; i < n; ++i) check_rank((*in_shape)[i], args[i]);
  check_rank(given_out, "output");
  if (ndim < 0) return false;
  const int axis = internal::NormalizeAxis(param_.dim, ndim, "Concat", "dim");

  // Every dimension but axis is shared by all inputs and the output.
  TShape common = TShape::Filled(ndim, -1);
  std::vector<std::string> from(static_cast<std::size_t>(ndim));
  auto merge = [&](const TShape& s, const std::string& name) {
    if (s.ndim() < 0) return;
    for (int d = 0; d < ndim; ++d) {
      if (d == axis || s[d] < 0) continue;
      if (common[d] < 0) {
        common[d] = s[d], from[static_cast<std::size_t>(d)] = name;
      } else if (common[d] != s[d]) {
        throw Error("Concat: shape of argument '" + name + "' is " + s.ToString() + " but its dimension " +
                    std::to_string(d) + " must be " + std::to_string(common[d]) + " as in '" +
                    from[static_cast<std::size_t>(d)] + "' (inputs may differ only on dim " + std::to_string(axis) +
                    ")");
      }
    }
  };
  for (std::size_t i = 0; i < n; ++i) merge((*in_shape)[i], args[i]);
  merge(given_out, "output");

  // Sizes along axis: the output's is the sum; one unknown input size follows from a known output.
  std::int64_t sum = 0;
  int unknown = 0;
  std::size_t unknown_at = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const TShape& s = (*in_shape)[i];
    if (s.ndim() < 0 || s[axis] < 0) {
      ++unknown, unknown_at = i;
    } else {
      sum += s[axis];
    }
  }
  const std::int64_t out_axis = given_out.ndim() == ndim ? given_out[axis] : -1;
  std::vector<std::int64_t> axis_size(n, -1);
  for (std::size_t i = 0; i < n; ++i) {
    const TShape& s = (*in_shape)[i];
    if (s.ndim() >= 0) axis_size[i] = s[axis];
  }
  if (unknown == 1 && out_axis >= 0) {
    if (out_axis < sum) {
      throw Error("Concat: shape of argument 'output' is " + given_out.ToString() +
                  " but the inputs already add up to " + std::to_string(sum) + " along dim " + std::to_string(axis));
    }
    axis_size[unknown_at] = out_axis - sum;
    sum = out_axis, unknown = 0;
  }
  for (std::size_t i = 0; i < n; ++i) {
    TShape s = common;
    s[axis] = axis_size[i];
    (*in_shape)[i] = s;
  }
  TShape out = common;
  out[axis] = unknown == 0 ? sum : -1;
  if (out_axis >= 0 && unknown == 0 && out_axis != sum) {
    throw Error("Concat: shape of argument 'output' is " + given_out.ToString() + " but the inputs add up to " +
                std::to_string(sum) + " along dim " + std::to_string(axis));
  }
  if (out_axis >= 0) out[axis] = out_axis;
  (*out_shape)[0] = out;
  if (!out.known()) return false;
  for (const auto& s : *in_shape) {
    if (!s.known()) return false;
  }
  return true;
}

std::vector<ConcatSlab> ConcatSlabs(const std::vector<TShape>& in, const TShape& out, int dim) {
  std::vector<ConcatSlab> slabs;
  const std::int64_t outer = out.ProdDims(0, dim), inner = out.ProdDims(dim + 1, out.ndim());
  std::int64_t offset = 0;
  for (const auto& s : in) {
    ConcatSlab slab;
    slab.outer = outer;
    slab.width = s[dim] * inner;
    slab.out_row = out[dim] * inner;
    slab.offset = offset;
    offset += slab.width;
    slabs.push_back(slab);
  }
  return slabs;
}

namespace {

class ConcatCpuOp : public Operator {
 public:
  explicit ConcatCpuOp(const ConcatParam& p) : param_(p) {}
  void Forward(const OpContext&, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const TBlob& out = out_data[0];
    const auto slabs = Slabs(in_data, out.shape);
    internal::NumberSwitch(out.dtype, "Concat", [&](auto tag) {
      using T = decltype(tag);
      T* o = static_cast<T*>(out.dptr);
      for (std::size_t i = 0; i < slabs.size(); ++i) {
        const ConcatSlab& sl = slabs[i];
        const T* x = static_cast<const T*>(in_data[i].dptr);
        for (std::int64_t r = 0; r < sl.outer; ++r) {
          T* dst = o + r * sl.out_row + sl.offset;
          const T* src = x + r * sl.width;
          for (std::int64_t j = 0; j < sl.width; ++j) Assign(dst + j, req[0], src[j]);
        }
      }
    });
  }
  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    const TBlob& og = out_grad[0];
    std::vector<TShape> shapes;
    for (const auto& g : in_grad) shapes.push_back(g.shape);
    const auto slabs = ConcatSlabs(shapes, og.shape, Axis(og.shape.ndim()));
    internal::FloatSwitch(og.dtype, "Concat", [&](auto tag) {
      using T = decltype(tag);
      const T* g = static_cast<const T*>(og.dptr);
      for (std::size_t i = 0; i < slabs.size(); ++i) {
        if (req[i] == kNullOp) continue;
        const ConcatSlab& sl = slabs[i];
        T* dst = static_cast<T*>(in_grad[i].dptr);
        for (std::int64_t r = 0; r < sl.outer; ++r) {
          const T* src = g + r * sl.out_row + sl.offset;
          for (std::int64_t j = 0; j < sl.width; ++j) Assign(dst + r * sl.width + j, req[i], src[j]);
        }
      }
    });
  }

 private:
  int Axis(int ndim) const { return param_.dim < 0 ? param_.dim + ndim : param_.dim; }
  std::vector<ConcatSlab> Slabs(const std::vector<TBlob>& in, const TShape& out) const {
    std::vector<TShape> shapes;
    for (const auto& b : in) shapes.push_back(b.shape);
    return ConcatSlabs(shapes, out, Axis(out.ndim()));
  }
  ConcatParam param_;
};

}  // namespace

std::unique_ptr<Operator> ConcatProp::CreateOperator(Context ctx) const {
  if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);
  return std::make_unique<ConcatCpuOp>(param_);
}

TROUPE_REGISTER_OP_PROPERTY(Concat, ConcatProp)
    .describe("Joins input arrays along a given axis (all inputs must have the same shape except on that axis).")
    .add_argument("data", "NDArray-or-Symbol[]", "List of arrays to concatenate (arg0, arg1, ...).")
    .add_arguments(ConcatParam::Docs())
    .add_alias("concat");

}  // namespace troupe
