// Flatten and Reshape on the CPU: shape inference (MXNet 1.9's rules, special values included) and
// the copies. Flatten and Reshape never move data: forward and backward are plain copies, skipped when the
// executor runs them in place.
#include <algorithm>
#include <cstring>

#include "op/nn/reshape/reshape.h"

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

}  // namespace troupe
