// Flatten, Reshape and Concat on the CPU: shape inference (MXNet 1.9's rules, special values included) and
// the copies. Flatten and Reshape never move data: forward and backward are plain copies, skipped when the
// executor runs them in place.
#include <algorithm>
#include <cstring>

#include "op/nn/tensor_ops.h"

namespace troupe {

namespace {

std::string TupleText(const std::vector<std::int64_t>& v) { return param_detail::PrintTuple(v); }

// dst (op)= src, element counts equal; src == dst in place is nothing to do.
void CopyWithReq(const TBlob& src, const TBlob& dst, OpReqType req, const char* op) {
  if (req == kNullOp) return;
  if (src.Size() != dst.Size()) {
    throw Error(std::string(op) + ": source " + src.shape.ToString() + " and destination " + dst.shape.ToString() +
                " differ in size");
  }
  if (req == kAddTo) {
    internal::FloatSwitch(dst.dtype, op, [&](auto tag) {
      using T = decltype(tag);
      const T* s = static_cast<const T*>(src.dptr);
      T* d = static_cast<T*>(dst.dptr);
      const std::int64_t n = dst.Size();
      for (std::int64_t i = 0; i < n; ++i) d[i] += s[i];
    });
    return;
  }
  if (src.dptr == dst.dptr) return;  // in place: the data is already where it belongs
  std::memcpy(dst.dptr, src.dptr, dst.Bytes());
}

// Flatten and Reshape: the output is the input's memory seen with another shape.
class CopyCpuOp : public Operator {
 public:
  explicit CopyCpuOp(const char* name) : name_(name) {}
  void Forward(const OpContext&, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    CopyWithReq(in_data[0], out_data[0], req[0], name_);
  }
  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    CopyWithReq(out_grad[0], in_grad[0], req[0], name_);
  }

 private:
  const char* name_;
};

[[noreturn]] void ThrowReshape(const ReshapeParam& p, const TShape& in, const std::string& why) {
  throw Error("Reshape: parameter 'shape' " + TupleText(p.shape.empty() ? p.target_shape : p.shape) +
              " cannot reshape data of shape " + in.ToString() + ": " + why);
}

}  // namespace

// ---- Flatten ----

bool FlattenProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                             std::vector<TShape>*) const {
  if (in_shape->size() != 1) throw Error("Flatten: expected 1 input (data), got " + std::to_string(in_shape->size()));
  out_shape->resize(1);
  const TShape& d = (*in_shape)[0];
  if (d.ndim() == 0) throw Error("Flatten: argument 'data' must have at least 1 dimension, got a scalar ()");
  if (!d.known()) return false;
  TShape out{d[0], d.ProdDims(1, d.ndim())};
  AssignShape(out_shape, 0, out, "Flatten", "output");
  return true;
}

std::unique_ptr<Operator> FlattenProp::CreateOperator(Context ctx) const {
  if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);
  return std::make_unique<CopyCpuOp>("Flatten");
}

TROUPE_REGISTER_OP_PROPERTY(Flatten, FlattenProp)
    .describe("Flattens the input array into a 2-D array by collapsing the higher dimensions: (d1, d2, ..., dk) "
              "-> (d1, d2*...*dk).")
    .add_argument("data", "NDArray-or-Symbol", "Input array.")
    .add_arguments(FlattenParam::Docs())
    .add_alias("flatten");

// ---- Reshape ----

void ReshapeProp::Init(const Kwargs& kwargs) {
  param_.Init(kwargs, "Reshape");
  for (std::int64_t v : param_.shape) {
    if (v < -4) {
      throw Error("Reshape: parameter 'shape' " + TupleText(param_.shape) + " contains " + std::to_string(v) +
                  " (accepted: sizes >= 1 and the special values 0, -1, -2, -3, -4)");
    }
  }
  for (std::int64_t v : param_.target_shape) {
    if (v < 0) {
      throw Error("Reshape: parameter 'target_shape' " + TupleText(param_.target_shape) + " contains " +
                  std::to_string(v) + " (accepted: sizes >= 1 and one 0 for the inferred dimension)");
    }
  }
}

TShape ReshapeOutputShape(const ReshapeParam& p, const TShape& in) {
  std::vector<std::int64_t> out;
  if (!p.shape.empty()) {
    std::vector<std::int64_t> src = in.ToVector(), spec = p.shape;
    if (p.reverse) {
      std::reverse(src.begin(), src.end());
      std::reverse(spec.begin(), spec.end());
    }
    std::size_t s = 0;  // next input dimension
    int infer = -1;     // where -1 stands in out
    auto next_src = [&](const char* what) {
      if (s >= src.size()) ThrowReshape(p, in, std::string(what) + " refers past the last input dimension");
      return src[s++];
    };
    for (std::size_t i = 0; i < spec.size(); ++i) {
      const std::int64_t v = spec[i];
      if (v == 0) {
        out.push_back(next_src("0 (copy a dimension)"));
      } else if (v == -1) {
        if (infer >= 0) ThrowReshape(p, in, "only one dimension can be -1 (inferred)");
        infer = static_cast<int>(out.size());
        out.push_back(1);
        ++s;
      } else if (v == -2) {
        while (s < src.size()) out.push_back(src[s++]);
      } else if (v == -3) {
        const std::int64_t d1 = next_src("-3 (merge two dimensions)");
        const std::int64_t d2 = next_src("-3 (merge two dimensions)");
        out.push_back(d1 * d2);
      } else if (v == -4) {
        if (i + 2 >= spec.size()) ThrowReshape(p, in, "-4 (split a dimension) must be followed by two values");
        const std::int64_t d0 = next_src("-4 (split a dimension)");
        std::int64_t d1 = spec[++i], d2 = spec[++i];
        if (d1 == -1 && d2 == -1) ThrowReshape(p, in, "the two dimensions after -4 cannot both be -1");
        if (d1 < -1 || d1 == 0 || d2 < -1 || d2 == 0) {
          ThrowReshape(p, in, "the two dimensions after -4 must be sizes >= 1 or one -1");
        }
        if (d1 == -1) d1 = d0 / d2;
        if (d2 == -1) d2 = d0 / d1;
        if (d1 * d2 != d0) {
          ThrowReshape(p, in, "-4 splits dimension " + std::to_string(d0) + " into " + std::to_string(d1) + " x " +
                                  std::to_string(d2) + ", which does not multiply back to it");
        }
        out.push_back(d1);
        out.push_back(d2);
      } else {
        out.push_back(v);
        ++s;
      }
    }
    if (infer >= 0) {
      std::int64_t rest = 1;
      for (std::int64_t x : out) rest *= x;
      if (rest == 0 || in.Size() % rest != 0) {
        ThrowReshape(p, in, "the -1 dimension cannot be inferred (" + std::to_string(in.Size()) +
                                " elements are not a multiple of " + std::to_string(rest) + ")");
      }
      out[static_cast<std::size_t>(infer)] = in.Size() / rest;
    }
    if (p.reverse) std::reverse(out.begin(), out.end());
  } else {
    // The deprecated form: target_shape with at most one 0 (inferred), keep_highest keeping dimension 0.
    out = p.target_shape;
    const std::size_t start = p.keep_highest ? 1 : 0;
    if (p.keep_highest) {
      if (out.empty() || in.ndim() < 1) ThrowReshape(p, in, "keep_highest needs a non-empty target_shape and data");
      out[0] = in[0];
    }
    int zeros = 0, at = -1;
    for (std::size_t i = start; i < out.size(); ++i) {
      if (out[i] == 0) ++zeros, at = static_cast<int>(i);
    }
    if (zeros > 1) ThrowReshape(p, in, "target_shape may contain at most one 0 (inferred dimension)");
    if (zeros == 1) {
      out[static_cast<std::size_t>(at)] = 1;
      std::int64_t rest = 1;
      for (std::int64_t x : out) rest *= x;
      if (rest == 0 || in.Size() % rest != 0) ThrowReshape(p, in, "the 0 dimension cannot be inferred");
      out[static_cast<std::size_t>(at)] = in.Size() / rest;
    }
  }
  if (out.size() > static_cast<std::size_t>(TShape::kMaxDims)) {
    ThrowReshape(p, in, "the result " + TupleText(out) + " has more than " + std::to_string(TShape::kMaxDims) +
                            " dimensions");
  }
  for (std::int64_t x : out) {
    if (x < 0) ThrowReshape(p, in, "the result " + TupleText(out) + " has a negative dimension");
  }
  TShape o(out);
  if (o.Size() != in.Size()) {
    ThrowReshape(p, in, "the result " + o.ToString() + " has " + std::to_string(o.Size()) + " elements, the data " +
                            std::to_string(in.Size()));
  }
  return o;
}

bool ReshapeProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                             std::vector<TShape>*) const {
  if (in_shape->size() != 1) throw Error("Reshape: expected 1 input (data), got " + std::to_string(in_shape->size()));
  out_shape->resize(1);
  TShape& d = (*in_shape)[0];
  const TShape& o = (*out_shape)[0];
  if (!d.known() && d.ndim() >= 0 && o.known()) {
    // MXNet's reverse inference: one unknown input dimension follows from the output's size.
    int unknown = -1, count = 0;
    std::int64_t known_size = 1;
    for (int i = 0; i < d.ndim(); ++i) {
      if (d[i] < 0) {
        unknown = i, ++count;
      } else {
        known_size *= d[i];
      }
    }
    if (count == 1 && known_size > 0 && o.Size() % known_size == 0) d[unknown] = o.Size() / known_size;
  }
  if (!d.known()) return false;
  AssignShape(out_shape, 0, ReshapeOutputShape(param_, d), "Reshape", "output");
  return true;
}

std::unique_ptr<Operator> ReshapeProp::CreateOperator(Context ctx) const {
  if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);
  return std::make_unique<CopyCpuOp>("Reshape");
}

TROUPE_REGISTER_OP_PROPERTY(Reshape, ReshapeProp)
    .describe("Reshapes the input array to a new shape with the same number of elements (special values 0, -1, "
              "-2, -3, -4 as in MXNet).")
    .add_argument("data", "NDArray-or-Symbol", "Input data to reshape.")
    .add_arguments(ReshapeParam::Docs())
    .add_alias("reshape");

// ---- Concat ----

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
    internal::FloatSwitch(out.dtype, "Concat", [&](auto tag) {
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
