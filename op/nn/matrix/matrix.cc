// The matrix operators' strided copy on the CPU and the operator that runs every one of them on either device
// (MakeMatrixOperator; matrix.cu gives it the GPU's copy), then transpose, SwapAxis, expand_dims, squeeze,
// reshape_like, reverse, tile and repeat (shape rules as in MXNet 1.9.1 and their movements). The slicing
// operators and stack are in slice.cc.
#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "base/error.h"
#include "op/nn/matrix/matrix.h"

namespace troupe {

namespace matrix {

void CopyPlan::Push(std::int64_t size, std::int64_t src_step, std::int64_t dst_step) {
  if (ndim >= kMaxCopyDims) throw Error("CopyPlan: more than " + std::to_string(kMaxCopyDims) + " dimensions");
  shape[ndim] = size;
  src_stride[ndim] = src_step;
  dst_stride[ndim] = dst_step;
  ++ndim;
}

std::int64_t CopyPlan::Count() const {
  std::int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

CopyPlan CopyPlan::Reversed() const {
  CopyPlan r = *this;
  std::swap(r.src_offset, r.dst_offset);
  for (int d = 0; d < ndim; ++d) std::swap(r.src_stride[d], r.dst_stride[d]);
  return r;
}

CopyPlan CopyPlan::Simplified() const {
  CopyPlan s;
  s.src_offset = src_offset;
  s.dst_offset = dst_offset;
  for (int d = 0; d < ndim; ++d) {
    if (shape[d] == 1) continue;
    const int last = s.ndim - 1;
    // The previous dimension steps over exactly this one on both sides: the two are one longer dimension.
    if (last >= 0 && s.src_stride[last] == src_stride[d] * shape[d] && s.dst_stride[last] == dst_stride[d] * shape[d]) {
      s.shape[last] *= shape[d];
      s.src_stride[last] = src_stride[d];
      s.dst_stride[last] = dst_stride[d];
      continue;
    }
    s.Push(shape[d], src_stride[d], dst_stride[d]);
  }
  if (s.ndim == 0) s.Push(1, 1, 1);  // a single element
  return s;
}

std::vector<std::int64_t> Strides(const TShape& s) {
  std::vector<std::int64_t> st(static_cast<std::size_t>(std::max(s.ndim(), 0)), 1);
  for (int d = s.ndim() - 2; d >= 0; --d) st[d] = st[d + 1] * s[d + 1];
  return st;
}

CopyPlan ContiguousPlan(std::int64_t n) {
  CopyPlan p;
  p.Push(n, 1, 1);
  return p;
}

namespace {

// The copy of a simplified plan: an odometer over every dimension but the innermost, a plain loop over that
// one (unit strides on both sides are the common case and vectorise).
template <typename T, bool kAdd>
void RunTyped(const CopyPlan& p, const T* src, T* dst) {
  const int inner = p.ndim - 1;
  const std::int64_t n = p.shape[inner], ss = p.src_stride[inner], ds = p.dst_stride[inner];
  const std::int64_t rows = p.Count() / n;
  std::int64_t idx[kMaxCopyDims] = {};
  const T* s = src + p.src_offset;
  T* d = dst + p.dst_offset;
  for (std::int64_t r = 0; r < rows; ++r) {
    if (ss == 1 && ds == 1) {
      if constexpr (kAdd) {
        for (std::int64_t j = 0; j < n; ++j) d[j] = Add(d[j], s[j]);
      } else {
        std::memcpy(static_cast<void*>(d), static_cast<const void*>(s), static_cast<std::size_t>(n) * sizeof(T));
      }
    } else {
      for (std::int64_t j = 0; j < n; ++j) {
        if constexpr (kAdd) {
          d[j * ds] = Add(d[j * ds], s[j * ss]);
        } else {
          d[j * ds] = s[j * ss];
        }
      }
    }
    for (int k = inner - 1; k >= 0; --k) {
      s += p.src_stride[k];
      d += p.dst_stride[k];
      if (++idx[k] < p.shape[k]) break;
      s -= p.src_stride[k] * p.shape[k];
      d -= p.dst_stride[k] * p.shape[k];
      idx[k] = 0;
    }
  }
}

}  // namespace

std::optional<CopyPlan> PlanToRun(const CopyPlan& plan, const TBlob& src, const TBlob& dst, OpReqType req) {
  if (req == kNullOp || plan.Count() == 0) return std::nullopt;
  if (src.dtype != dst.dtype) {
    throw Error(std::string("matrix operator: source type ") + DTypeName(src.dtype) + " and destination type " +
                DTypeName(dst.dtype) + " differ");
  }
  const CopyPlan p = plan.Simplified();
  const bool identity = p.ndim == 1 && p.src_stride[0] == 1 && p.dst_stride[0] == 1 && p.src_offset == p.dst_offset;
  if (req != kAddTo && identity && src.dptr == dst.dptr) return std::nullopt;  // in place: the data is there
  return p;
}

void RunCopy(const CopyPlan& plan, const TBlob& src, const TBlob& dst, OpReqType req) {
  const std::optional<CopyPlan> to_run = PlanToRun(plan, src, dst, req);
  if (!to_run) return;
  const CopyPlan& p = *to_run;
  DTypeSwitch(dst.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* s = static_cast<const T*>(src.dptr);
    T* d = static_cast<T*>(dst.dptr);
    if (req == kAddTo) {
      RunTyped<T, true>(p, s, d);
    } else {
      RunTyped<T, false>(p, s, d);
    }
  });
}

void ZeroFill(const TBlob& b) {
  if (b.dptr != nullptr && b.shape.known()) std::memset(b.dptr, 0, b.Bytes());
}

void CheckInputCount(const std::vector<TShape>& in_shape, std::size_t n, const char* op, const char* names) {
  if (in_shape.size() != n) {
    throw Error(std::string(op) + ": expected " + std::to_string(n) + (n == 1 ? " input (" : " inputs (") + names +
                "), got " + std::to_string(in_shape.size()));
  }
}

bool InferTypeOfFirst(const OperatorProperty& prop, std::vector<int>* in_type, std::vector<int>* out_type) {
  const auto args = prop.ListArguments();
  in_type->resize(args.size(), kTypeUnknown);
  out_type->resize(1, kTypeUnknown);
  const std::string op = prop.TypeString();
  if ((*in_type)[0] != kTypeUnknown) {
    AssignType(out_type, 0, (*in_type)[0], op, "output");
  } else if ((*out_type)[0] != kTypeUnknown) {
    AssignType(in_type, 0, (*out_type)[0], op, args[0]);
  }
  return (*in_type)[0] != kTypeUnknown && (*in_type)[1] != kTypeUnknown;
}

namespace {

// Runs a property's movements with one device's copy and fill: forward input -> output, backward output
// gradient -> input gradient.
class MatrixOperator : public Operator {
 public:
  MatrixOperator(std::unique_ptr<OperatorProperty> prop, CopyFn copy, ZeroFn zero)
      : prop_(static_cast<const MatrixProp*>(prop.release())), copy_(copy), zero_(zero) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in_data, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out_data, const std::vector<TBlob>&) override {
    if (std::all_of(req.begin(), req.end(), [](OpReqType r) { return r == kNullOp; })) return;
    for (const Movement& m : prop_->Movements(Shapes(in_data), Shapes(out_data))) {
      copy_(m.plan, in_data[m.in], out_data[m.out], req[m.out], ctx.run_ctx);
    }
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    if (std::all_of(req.begin(), req.end(), [](OpReqType r) { return r == kNullOp; })) return;
    const std::vector<Movement> moves = prop_->Movements(Shapes(in_grad), Shapes(out_grad));
    // Each input element read once: its gradient is one output gradient element, written under req.
    // Otherwise it is the sum of every output gradient element taken from it (none: zero).
    const bool once = prop_->EachInputElementOnce();
    std::vector<bool> moved(in_grad.size(), false);
    for (const Movement& m : moves) moved[m.in] = true;
    for (std::size_t i = 0; i < in_grad.size(); ++i) {
      if ((req[i] == kWriteTo || req[i] == kWriteInplace) && (!once || !moved[i])) zero_(in_grad[i], ctx.run_ctx);
    }
    for (const Movement& m : moves) {
      const OpReqType r = req[m.in];
      if (r == kNullOp) continue;
      copy_(m.plan.Reversed(), out_grad[m.out], in_grad[m.in], once ? r : kAddTo, ctx.run_ctx);
    }
  }

 private:
  static std::vector<TShape> Shapes(const std::vector<TBlob>& blobs) {
    std::vector<TShape> s;
    for (const auto& b : blobs) s.push_back(b.dptr != nullptr ? b.shape : TShape());
    return s;
  }
  std::unique_ptr<const MatrixProp> prop_;
  CopyFn copy_;
  ZeroFn zero_;
};

void RunCopyCpu(const CopyPlan& plan, const TBlob& src, const TBlob& dst, OpReqType req, const RunContext&) {
  RunCopy(plan, src, dst, req);
}
void ZeroFillCpu(const TBlob& b, const RunContext&) { ZeroFill(b); }

}  // namespace

std::unique_ptr<Operator> MakeMatrixOperator(std::unique_ptr<OperatorProperty> prop, CopyFn copy, ZeroFn zero) {
  return std::make_unique<MatrixOperator>(std::move(prop), copy, zero);
}

}  // namespace matrix

std::unique_ptr<Operator> MatrixProp::CreateOperator(Context ctx) const {
  if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // matrix.cu
  return matrix::MakeMatrixOperator(Copy(), matrix::RunCopyCpu, matrix::ZeroFillCpu);
}

namespace {

using matrix::CheckInputCount;
using matrix::CopyPlan;
using matrix::Movement;
using matrix::Strides;

std::string Tuple(const std::vector<std::int64_t>& v) { return param_detail::PrintTuple(v); }

// The data shape of a one-input operator, or null when not known yet (its number of dimensions at least).
const TShape* DataShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape, const char* op) {
  CheckInputCount(*in_shape, 1, op, "data");
  out_shape->resize(1);
  const TShape& d = (*in_shape)[0];
  return d.ndim() < 0 ? nullptr : &d;
}

// The output's movement over dimensions `order` of the input: output dimension k is input dimension
// order[k] (transpose, SwapAxis).
Movement PermutationMovement(const TShape& in, const std::vector<int>& order) {
  const auto is = Strides(in);
  std::vector<std::int64_t> out_dims;
  for (int a : order) out_dims.push_back(in[a]);
  const auto os = Strides(TShape(out_dims));
  Movement m;
  for (std::size_t k = 0; k < order.size(); ++k) m.plan.Push(out_dims[k], is[order[k]], os[k]);
  return m;
}

}  // namespace

// ---- transpose ----

void TransposeProp::Init(const Kwargs& kwargs) {
  param_.Init(kwargs, "transpose");
  if (param_.axes.size() > static_cast<std::size_t>(TShape::kMaxDims)) {
    throw Error("transpose: parameter 'axes' " + Tuple(param_.axes) + " has more than " +
                std::to_string(TShape::kMaxDims) + " axes");
  }
}

std::vector<int> TransposeProp::Axes(int ndim) const {
  std::vector<int> axes;
  if (param_.axes.empty()) {
    for (int d = ndim - 1; d >= 0; --d) axes.push_back(d);
    return axes;
  }
  if (static_cast<int>(param_.axes.size()) != ndim) {
    throw Error("transpose: parameter 'axes' " + Tuple(param_.axes) + " has " + std::to_string(param_.axes.size()) +
                " axes but the input has " + std::to_string(ndim) + " dimensions");
  }
  std::vector<bool> seen(static_cast<std::size_t>(ndim), false);
  for (std::int64_t a : param_.axes) {
    // MXNet 1.9.1 takes no negative axes here either (its shape rule fails on them).
    if (a < 0 || a >= ndim || seen[a]) {
      throw Error("transpose: parameter 'axes' " + Tuple(param_.axes) + " is not a permutation of 0.." +
                  std::to_string(ndim - 1) + " (each axis in [0, " + std::to_string(ndim) + ") exactly once)");
    }
    seen[a] = true;
    axes.push_back(static_cast<int>(a));
  }
  return axes;
}

bool TransposeProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                               std::vector<TShape>*) const {
  DataShape(in_shape, out_shape, "transpose");
  const TShape& o = (*out_shape)[0];
  // Both ways, as MXNet's TransposeShape: dimensions known on either side fill the other.
  const int n = (*in_shape)[0].ndim() >= 0 ? (*in_shape)[0].ndim() : o.ndim();
  if (n < 0) return false;
  const std::vector<int> axes = Axes(n);
  if (o.ndim() == n) {
    TShape back = TShape::Filled(n, -1);
    for (int k = 0; k < n; ++k) back[axes[k]] = o[k];
    AssignShape(in_shape, 0, back, "transpose", "data");
  }
  const TShape& d = (*in_shape)[0];
  TShape out = TShape::Filled(n, -1);
  for (int k = 0; k < n; ++k) out[k] = d[axes[k]];
  AssignShape(out_shape, 0, out, "transpose", "output");
  return d.known();
}

std::vector<Movement> TransposeProp::Movements(const std::vector<TShape>& in, const std::vector<TShape>&) const {
  if (!in[0].known()) return {};
  return {PermutationMovement(in[0], Axes(in[0].ndim()))};
}

// ---- SwapAxis ----

bool SwapAxisProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                              std::vector<TShape>*) const {
  const TShape* d = DataShape(in_shape, out_shape, "SwapAxis");
  if (d == nullptr) return false;
  const int a = internal::NormalizeAxis(param_.dim1, d->ndim(), "SwapAxis", "dim1");
  const int b = internal::NormalizeAxis(param_.dim2, d->ndim(), "SwapAxis", "dim2");
  TShape out = *d;
  std::swap(out[a], out[b]);
  AssignShape(out_shape, 0, out, "SwapAxis", "output");
  return d->known();
}

std::vector<Movement> SwapAxisProp::Movements(const std::vector<TShape>& in, const std::vector<TShape>&) const {
  if (!in[0].known()) return {};
  const int n = in[0].ndim();
  std::vector<int> order(static_cast<std::size_t>(n));
  for (int k = 0; k < n; ++k) order[k] = k;
  std::swap(order[internal::NormalizeAxis(param_.dim1, n, "SwapAxis", "dim1")],
            order[internal::NormalizeAxis(param_.dim2, n, "SwapAxis", "dim2")]);
  return {PermutationMovement(in[0], order)};
}

// ---- expand_dims, squeeze, reshape_like ----

std::vector<Movement> SameDataProp::Movements(const std::vector<TShape>&, const std::vector<TShape>& out) const {
  if (!out[0].known()) return {};
  Movement m;
  m.plan = matrix::ContiguousPlan(out[0].Size());
  return {m};
}

bool ExpandDimsProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                                std::vector<TShape>*) const {
  DataShape(in_shape, out_shape, "expand_dims");
  const TShape& o = (*out_shape)[0];
  if ((*in_shape)[0].ndim() < 0 && o.ndim() >= 1) {
    // From the output back, as MXNet's ExpandDimShape: the input is the output without the new axis.
    const int axis = internal::NormalizeAxis(param_.axis, o.ndim(), "expand_dims", "axis");
    std::vector<std::int64_t> back = o.ToVector();
    back.erase(back.begin() + axis);
    AssignShape(in_shape, 0, TShape(back), "expand_dims", "data");
  }
  const TShape& d = (*in_shape)[0];
  if (d.ndim() < 0) return false;
  const int n = d.ndim();
  if (n + 1 > TShape::kMaxDims) {
    throw Error("expand_dims: the input " + d.ToString() + " already has " + std::to_string(TShape::kMaxDims) +
                " dimensions, the most a shape may have");
  }
  // The new axis goes anywhere in [-ndim-1, ndim]: one more position than the input has dimensions.
  const int axis = internal::NormalizeAxis(param_.axis, n + 1, "expand_dims", "axis");
  std::vector<std::int64_t> out = d.ToVector();
  out.insert(out.begin() + axis, 1);
  AssignShape(out_shape, 0, TShape(out), "expand_dims", "output");
  if (o.ndim() == n + 1) {  // unknown input dimensions from the output's
    std::vector<std::int64_t> back = (*out_shape)[0].ToVector();
    back.erase(back.begin() + axis);
    AssignShape(in_shape, 0, TShape(back), "expand_dims", "data");
  }
  return (*in_shape)[0].known();
}

bool SqueezeProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                             std::vector<TShape>*) const {
  const TShape* d = DataShape(in_shape, out_shape, "squeeze");
  if (d == nullptr || !d->known()) return false;
  const int n = d->ndim();
  std::vector<bool> drop(static_cast<std::size_t>(n), false);
  if (param_.axis) {
    for (std::int64_t a : *param_.axis) {
      const int axis = internal::NormalizeAxis(static_cast<int>(a), n, "squeeze", "axis");
      if ((*d)[axis] != 1) {
        throw Error("squeeze: parameter 'axis' " + Tuple(*param_.axis) + " selects axis " + std::to_string(axis) +
                    " of the input " + d->ToString() + ", whose size is " + std::to_string((*d)[axis]) +
                    ", not 1");
      }
      if (drop[axis]) throw Error("squeeze: parameter 'axis' " + Tuple(*param_.axis) + " names axis " +
                                  std::to_string(axis) + " twice");
      drop[axis] = true;
    }
  } else {
    for (int k = 0; k < n; ++k) drop[k] = (*d)[k] == 1;
  }
  std::vector<std::int64_t> out;
  for (int k = 0; k < n; ++k) {
    if (!drop[k]) out.push_back((*d)[k]);
  }
  // MXNet keeps one dimension: squeezing (1, 1) gives (1,), not a scalar.
  if (out.empty()) out.push_back(1);
  AssignShape(out_shape, 0, TShape(out), "squeeze", "output");
  return true;
}

namespace {

// [begin, end) of a reshape_like side over ndim dimensions (MXNet's ReshapeLikeRangeCanonicalize).
std::pair<int, int> ReshapeLikeRange(int ndim, const char* side, const std::optional<int>& begin,
                                     const std::optional<int>& end) {
  int b = begin.value_or(0), e = end.value_or(ndim);
  if (b < 0) b += ndim;
  if (e < 0) e += ndim;
  const auto text = [](const std::optional<int>& v) { return v ? std::to_string(*v) : std::string("None"); };
  if (b < 0 || e < 0 || e > ndim || b >= e) {
    throw Error(std::string("reshape_like: parameters '") + side + "_begin' " + text(begin) + " and '" + side +
                "_end' " + text(end) + " do not select a non-empty range of the " + std::to_string(ndim) +
                " dimensions of " + side);
  }
  return {b, e};
}

}  // namespace

TShape ReshapeLikeShape(const ReshapeLikeParam& p, const TShape& lhs, const TShape& rhs) {
  const auto [lb, le] = ReshapeLikeRange(lhs.ndim(), "lhs", p.lhs_begin, p.lhs_end);
  const auto [rb, re] = ReshapeLikeRange(rhs.ndim(), "rhs", p.rhs_begin, p.rhs_end);
  std::vector<std::int64_t> out;
  for (int i = 0; i < lb; ++i) out.push_back(lhs[i]);
  for (int i = rb; i < re; ++i) out.push_back(rhs[i]);
  for (int i = le; i < lhs.ndim(); ++i) out.push_back(lhs[i]);
  if (out.size() > static_cast<std::size_t>(TShape::kMaxDims)) {
    throw Error("reshape_like: the result " + Tuple(out) + " has more than " + std::to_string(TShape::kMaxDims) +
                " dimensions");
  }
  TShape o(out);
  if (o.Size() != lhs.Size()) {
    throw Error("reshape_like: cannot reshape lhs of shape " + lhs.ToString() + " to " + o.ToString() +
                " (from rhs " + rhs.ToString() + "): they have " + std::to_string(lhs.Size()) + " and " +
                std::to_string(o.Size()) + " elements");
  }
  return o;
}

bool ReshapeLikeOpProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                                   std::vector<TShape>*) const {
  CheckInputCount(*in_shape, 2, "reshape_like", "lhs, rhs");
  out_shape->resize(1);
  const TShape &l = (*in_shape)[0], &r = (*in_shape)[1];
  if (!l.known() || !r.known()) return false;
  AssignShape(out_shape, 0, ReshapeLikeShape(param_, l, r), "reshape_like", "output");
  return true;
}

// ---- reverse ----

bool ReverseProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                             std::vector<TShape>*) const {
  const TShape* d = DataShape(in_shape, out_shape, "reverse");
  if (d == nullptr) return false;
  for (std::int64_t a : param_.axis) {
    // As in MXNet 1.9.1, whose reverse takes no negative axes.
    if (a < 0 || a >= d->ndim()) {
      throw Error("reverse: parameter 'axis' " + Tuple(param_.axis) + " names axis " + std::to_string(a) +
                  " but the input " + d->ToString() + " has " + std::to_string(d->ndim()) +
                  " dimensions; use axes in [0, " + std::to_string(d->ndim()) + ")");
    }
  }
  AssignShape(out_shape, 0, *d, "reverse", "output");
  return d->known();
}

std::vector<Movement> ReverseProp::Movements(const std::vector<TShape>& in, const std::vector<TShape>&) const {
  const TShape& s = in[0];
  if (!s.known()) return {};
  // An axis named twice is reversed twice, i.e. not at all (as MXNet's index map does).
  std::vector<bool> flip(static_cast<std::size_t>(s.ndim()), false);
  for (std::int64_t a : param_.axis) flip[a] = !flip[a];
  const auto st = Strides(s);
  Movement m;
  for (int d = 0; d < s.ndim(); ++d) {
    if (flip[d] && s[d] > 0) {
      m.plan.src_offset += (s[d] - 1) * st[d];
      m.plan.Push(s[d], -st[d], st[d]);
    } else {
      m.plan.Push(s[d], st[d], st[d]);
    }
  }
  return {m};
}

// ---- tile ----

void TileProp::Init(const Kwargs& kwargs) {
  param_.Init(kwargs, "tile");
  for (std::int64_t r : param_.reps) {
    // MXNet's shape rule has no result for 0 (an unknown size) or negative repetitions.
    if (r < 1) {
      throw Error("tile: parameter 'reps' " + Tuple(param_.reps) + " contains " + std::to_string(r) +
                  "; every repetition count must be >= 1");
    }
  }
  if (param_.reps.size() > static_cast<std::size_t>(TShape::kMaxDims)) {
    throw Error("tile: parameter 'reps' " + Tuple(param_.reps) + " has more than " +
                std::to_string(TShape::kMaxDims) + " entries");
  }
}

bool TileProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                          std::vector<TShape>*) const {
  const TShape* d = DataShape(in_shape, out_shape, "tile");
  if (d == nullptr || !d->known()) return false;
  const int n = std::max(d->ndim(), static_cast<int>(param_.reps.size()));
  TShape out = TShape::Filled(n, 1);
  // Aligned at the right: the shorter of data and reps is padded with leading 1s.
  for (int i = 0; i < n; ++i) {
    const int di = d->ndim() - n + i, ri = static_cast<int>(param_.reps.size()) - n + i;
    out[i] = (di >= 0 ? (*d)[di] : 1) * (ri >= 0 ? param_.reps[ri] : 1);
  }
  AssignShape(out_shape, 0, out, "tile", "output");
  return true;
}

std::vector<Movement> TileProp::Movements(const std::vector<TShape>& in, const std::vector<TShape>& out) const {
  const TShape& s = in[0];
  if (!s.known() || !out[0].known()) return {};
  const int n = out[0].ndim();
  const auto is = Strides(s), os = Strides(out[0]);
  Movement m;
  // Output dimension i is (repetition, element): element k of repetition r sits at r * size + k.
  for (int i = 0; i < n; ++i) {
    const int di = s.ndim() - n + i, ri = static_cast<int>(param_.reps.size()) - n + i;
    const std::int64_t size = di >= 0 ? s[di] : 1, step = di >= 0 ? is[di] : 0;
    m.plan.Push(ri >= 0 ? param_.reps[ri] : 1, 0, size * os[i]);
    m.plan.Push(size, step, os[i]);
  }
  return {m};
}

// ---- repeat ----

bool RepeatProp::InferShape(std::vector<TShape>* in_shape, std::vector<TShape>* out_shape,
                            std::vector<TShape>*) const {
  const TShape* d = DataShape(in_shape, out_shape, "repeat");
  if (d == nullptr) return false;
  std::optional<int> axis;
  if (param_.axis) axis = internal::NormalizeAxis(*param_.axis, d->ndim(), "repeat", "axis");
  if (!d->known()) return false;
  TShape out;
  if (param_.repeats == 0) {
    out = TShape{0};  // MXNet: an empty 1-D array, whatever the axis
  } else if (axis) {
    out = *d;
    out[*axis] *= param_.repeats;
  } else {
    out = TShape{d->Size() * param_.repeats};
  }
  AssignShape(out_shape, 0, out, "repeat", "output");
  return true;
}

std::vector<Movement> RepeatProp::Movements(const std::vector<TShape>& in, const std::vector<TShape>&) const {
  const TShape& s = in[0];
  if (!s.known() || param_.repeats == 0) return {};
  const std::int64_t reps = param_.repeats;
  Movement m;
  if (!param_.axis) {
    // The flattened input, each element `reps` times in a row.
    m.plan.Push(s.Size(), 1, reps);
    m.plan.Push(reps, 0, 1);
    return {m};
  }
  const int axis = internal::NormalizeAxis(*param_.axis, s.ndim(), "repeat", "axis");
  TShape o = s;
  o[axis] *= reps;
  const auto is = Strides(s), os = Strides(o);
  for (int d = 0; d < s.ndim(); ++d) {
    if (d == axis) {
      m.plan.Push(s[d], is[d], reps * os[d]);
      m.plan.Push(reps, 0, os[d]);
    } else {
      m.plan.Push(s[d], is[d], os[d]);
    }
  }
  return {m};
}

// ---- registration ----

TROUPE_REGISTER_OP_PROPERTY(transpose, TransposeProp)
    .describe("Permutes the dimensions of an array (by default reverses them).")
    .add_argument("data", "NDArray-or-Symbol", "Source input")
    .add_arguments(TransposeParam::Docs());

TROUPE_REGISTER_OP_PROPERTY(SwapAxis, SwapAxisProp)
    .describe("Interchanges two axes of an array.")
    .add_argument("data", "NDArray-or-Symbol", "Input array.")
    .add_arguments(SwapAxisParam::Docs())
    .add_alias("swapaxes");

TROUPE_REGISTER_OP_PROPERTY(expand_dims, ExpandDimsProp)
    .describe("Inserts a new axis of size 1 into the array shape.")
    .add_argument("data", "NDArray-or-Symbol", "Source input")
    .add_arguments(ExpandDimsParam::Docs());

TROUPE_REGISTER_OP_PROPERTY(squeeze, SqueezeProp)
    .describe("Remove single-dimensional entries from the shape of an array (keeping at least one dimension).")
    .add_argument("data", "NDArray-or-Symbol", "data to squeeze")
    .add_arguments(SqueezeParam::Docs());

TROUPE_REGISTER_OP_PROPERTY(reshape_like, ReshapeLikeOpProp)
    .describe("Reshape some or all dimensions of `lhs` to have the same shape as some or all dimensions of `rhs`.")
    .add_argument("lhs", "NDArray-or-Symbol", "First input.")
    .add_argument("rhs", "NDArray-or-Symbol", "Second input.")
    .add_arguments(ReshapeLikeParam::Docs());

TROUPE_REGISTER_OP_PROPERTY(reverse, ReverseProp)
    .describe("Reverses the order of elements along given axis while preserving array shape.")
    .add_argument("data", "NDArray-or-Symbol", "Input data array")
    .add_arguments(ReverseParam::Docs())
    .add_alias("flip");

TROUPE_REGISTER_OP_PROPERTY(tile, TileProp)
    .describe("Repeats the whole array multiple times.")
    .add_argument("data", "NDArray-or-Symbol", "Input data array")
    .add_arguments(TileParam::Docs());

TROUPE_REGISTER_OP_PROPERTY(repeat, RepeatProp)
    .describe("Repeats elements of an array (by default of the flattened array, giving a flat result).")
    .add_argument("data", "NDArray-or-Symbol", "Input data array")
    .add_arguments(RepeatParam::Docs());

}  // namespace troupe
