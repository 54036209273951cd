// Indexing operators of MXNet 1.9 (src/operator/tensor/indexing_op.*) on the CPU: take (alias _npi_take),
// gather_nd (aliases _npi_gather_nd, _npx_gather_nd) and one_hot (alias _npx_one_hot); all three also run on
// the GPU (indexing.cu, with indexing.h's element code).
//
// Index arrays may have any number type; their values are truncated to integers as MXNet's casts do, and
// they get no gradient (zeros where one is asked for, as MXNet's zero-gradient nodes give).
//   take(a, indices, axis, mode):   a's slices along `axis` at the indices, the index array's shape in place of
//                                   that axis. mode 'clip' clamps into [0, n), 'wrap' wraps (Python's modulo),
//                                   'raise' rejects an index outside [0, n) with an error. Backward adds each
//                                   output slice's gradient into the slice it came from, in index order.
//   gather_nd(data, indices):       indices (M, ...) pick data[indices[0, i], ..., indices[M-1, i], ...];
//                                   negative indices count from the end, anything outside [-size, size) is an
//                                   error naming the index and the axis. Backward adds the gradients into the
//                                   picked places (MXNet's backward does not wrap a negative index and writes
//                                   outside the gradient; here it lands where the forward read).
//   one_hot(indices, depth, ...):   (..., depth) of off_value with on_value at each index in [0, depth) (none for
//                                   an index outside), in `dtype`.
// The data may have any number type in the forward passes; gradients are float32/float64.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "op/nn/indexing/indexing.h"

#include "base/error.h"
#include "op/internal/op_util.h"

namespace troupe {

namespace {

// Every index value as int64 (truncated), whatever the index array's type.
std::vector<std::int64_t> ReadIndices(const TBlob& idx, const std::string& op) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(idx.Size()));
  internal::NumberSwitch(idx.dtype, op, [&](auto tag) {
    using I = decltype(tag);
    const I* p = static_cast<const I*>(idx.dptr);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::int64_t>(p[i]);
  });
  return v;
}

void ZeroGrad(const TBlob& g, OpReqType req) {
  if (req == kWriteTo || req == kWriteInplace) std::memset(g.dptr, 0, g.Bytes());
}

// ---- take

using indexing::kTake;
using indexing::TakeParam;

// a viewed as (outer, n, inner) around the axis.
struct TakeView {
  std::int64_t outer, n, inner;
};
TakeView ViewTake(const TShape& a, int axis) { return {a.ProdDims(0, axis), a[axis], a.ProdDims(axis + 1, a.ndim())}; }

class TakeOp final : public Operator {
 public:
  explicit TakeOp(const TakeParam& p) : p_(p) {}

  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const int axis = internal::NormalizeAxis(p_.axis, in[0].shape.ndim(), kTake, "axis");
    const TakeView v = ViewTake(in[0].shape, axis);
    const std::vector<std::int64_t> idx = Positions(in[1], v.n);
    const auto k = static_cast<std::int64_t>(idx.size());
    internal::NumberSwitch(in[0].dtype, kTake, [&](auto tag) {
      using T = decltype(tag);
      const T* a = static_cast<const T*>(in[0].dptr);
      T* o = static_cast<T*>(out[0].dptr);
      for (std::int64_t p = 0; p < v.outer; ++p) {
        for (std::int64_t j = 0; j < k; ++j) {
          const T* src = a + (p * v.n + idx[j]) * v.inner;
          internal::AssignEach(o + (p * k + j) * v.inner, v.inner, req[0], [&](std::int64_t r) { return src[r]; });
        }
      }
    });
  }

  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    ZeroGrad(in_grad[1], req[1]);
    if (req[0] == kNullOp) return;
    const int axis = internal::NormalizeAxis(p_.axis, in_grad[0].shape.ndim(), kTake, "axis");
    const TakeView v = ViewTake(in_grad[0].shape, axis);
    const std::vector<std::int64_t> idx = Positions(in[1], v.n);
    const auto k = static_cast<std::int64_t>(idx.size());
    internal::FloatSwitch(in_grad[0].dtype, kTake, [&](auto tag) {
      using T = decltype(tag);
      const T* og = out_grad[0].dptr_as<T>();
      T* g = in_grad[0].dptr_as<T>();
      if (req[0] != kAddTo) std::fill(g, g + in_grad[0].Size(), T(0));
      for (std::int64_t p = 0; p < v.outer; ++p) {
        for (std::int64_t j = 0; j < k; ++j) {
          T* dst = g + (p * v.n + idx[j]) * v.inner;
          const T* src = og + (p * k + j) * v.inner;
          for (std::int64_t r = 0; r < v.inner; ++r) dst[r] += src[r];
        }
      }
    });
  }

 private:
  // The positions along the axis (of size n) that the indices address under the mode.
  std::vector<std::int64_t> Positions(const TBlob& indices, std::int64_t n) const {
    if (p_.mode == "raise") {
      internal::NumberSwitch(indices.dtype, kTake, [&](auto tag) {
        using I = decltype(tag);
        const I* p = static_cast<const I*>(indices.dptr);
        for (std::int64_t i = 0; i < indices.Size(); ++i) indexing::CheckTakeIndex(static_cast<double>(p[i]), n);
      });
    }
    std::vector<std::int64_t> idx = ReadIndices(indices, kTake);
    for (std::int64_t& j : idx) j = indexing::TakePosition(j, n, p_.mode == "clip");
    return idx;
  }

  TakeParam p_;
};

class TakeProp final : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override { p_.Init(kwargs, kTake); }
  Kwargs GetParams() const override { return p_.GetParams(); }
  std::vector<std::string> ListArguments() const override { return {"a", "indices"}; }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    aux->clear();
    out->resize(1);
    const TShape a = (*in)[0], idx = (*in)[1];
    if (!a.known() || !idx.known()) return false;
    if (a.ndim() < 1) throw Error(std::string(kTake) + ": 'a' must have at least one dimension, got a scalar");
    const int axis = internal::NormalizeAxis(p_.axis, a.ndim(), kTake, "axis");
    if (a[axis] == 0) throw Error(std::string(kTake) + ": the axis to take from is empty in " + a.ToString());
    std::vector<std::int64_t> o;
    for (int i = 0; i < axis; ++i) o.push_back(a[i]);
    for (int i = 0; i < idx.ndim(); ++i) o.push_back(idx[i]);
    for (int i = axis + 1; i < a.ndim(); ++i) o.push_back(a[i]);
    if (static_cast<int>(o.size()) > TShape::kMaxDims) {
      throw Error(std::string(kTake) + ": the output of " + a.ToString() + " and indices " + idx.ToString() +
                  " would have more than " + std::to_string(TShape::kMaxDims) + " dimensions");
    }
    AssignShape(out, 0, TShape(o), kTake, "output");
    return true;
  }
  // The output has a's type; the indices keep their own, which must be known.
  bool InferType(std::vector<int>* in, std::vector<int>* out, std::vector<int>* aux) const override {
    aux->clear();
    out->resize(1, kTypeUnknown);
    if ((*in)[0] == kTypeUnknown && (*out)[0] != kTypeUnknown) (*in)[0] = (*out)[0];
    if ((*in)[0] != kTypeUnknown) AssignType(out, 0, (*in)[0], kTake, "output");
    return (*in)[0] != kTypeUnknown && (*in)[1] != kTypeUnknown;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<TakeProp>(*this); }
  std::string TypeString() const override { return kTake; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>&) const override {
    return {out_grad[0], in_data[1]};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // indexing.cu
    return std::make_unique<TakeOp>(p_);
  }

 private:
  TakeParam p_;
};

// ---- gather_nd

struct NoParam : Params<NoParam> {
  static void Declare(ParamSchema<NoParam>&) {}
};

using indexing::kGather;

// The flat offset (in units of the trailing block of k elements) of every gathered element.
struct GatherPlan {
  std::int64_t m = 0, count = 0, block = 0;
  std::vector<std::int64_t> offsets;
};
GatherPlan PlanGather(const TShape& data, const TBlob& indices) {
  GatherPlan g;
  const indexing::GatherView v = indexing::ViewGather(data, indices.shape);
  g.m = v.m;
  g.count = v.count;
  g.block = v.block;
  const std::vector<std::int64_t> idx = ReadIndices(indices, kGather);
  indexing::CheckGatherIndices(data, idx.data(), v);
  g.offsets.assign(static_cast<std::size_t>(g.count), 0);
  for (std::int64_t i = 0; i < g.count; ++i) g.offsets[i] = indexing::GatherOffset(v, idx.data(), i);
  return g;
}

class GatherNDOp final : public Operator {
 public:
  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const GatherPlan g = PlanGather(in[0].shape, in[1]);
    internal::NumberSwitch(in[0].dtype, kGather, [&](auto tag) {
      using T = decltype(tag);
      const T* x = static_cast<const T*>(in[0].dptr);
      T* o = static_cast<T*>(out[0].dptr);
      for (std::int64_t i = 0; i < g.count; ++i) {
        const T* src = x + g.offsets[i] * g.block;
        internal::AssignEach(o + i * g.block, g.block, req[0], [&](std::int64_t r) { return src[r]; });
      }
    });
  }
  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    ZeroGrad(in_grad[1], req[1]);
    if (req[0] == kNullOp) return;
    const GatherPlan g = PlanGather(in_grad[0].shape, in[1]);
    internal::FloatSwitch(in_grad[0].dtype, kGather, [&](auto tag) {
      using T = decltype(tag);
      const T* og = out_grad[0].dptr_as<T>();
      T* gx = in_grad[0].dptr_as<T>();
      if (req[0] != kAddTo) std::fill(gx, gx + in_grad[0].Size(), T(0));
      for (std::int64_t i = 0; i < g.count; ++i) {
        T* dst = gx + g.offsets[i] * g.block;
        for (std::int64_t r = 0; r < g.block; ++r) dst[r] += og[i * g.block + r];
      }
    });
  }
};

class GatherNDProp final : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override { p_.Init(kwargs, kGather); }
  Kwargs GetParams() const override { return p_.GetParams(); }
  std::vector<std::string> ListArguments() const override { return {"data", "indices"}; }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    aux->clear();
    out->resize(1);
    const TShape d = (*in)[0], idx = (*in)[1];
    if (!d.known() || !idx.known()) return false;
    const std::string op = kGather;
    if (idx.ndim() < 2) {
      throw Error(op + ": 'indices' must have at least 2 dimensions (M, ...), got " + idx.ToString());
    }
    if (idx[0] > d.ndim()) {
      throw Error(op + ": 'indices' address " + std::to_string(idx[0]) + " dimensions but 'data' " + d.ToString() +
                  " has " + std::to_string(d.ndim()));
    }
    std::vector<std::int64_t> o;
    for (int i = 1; i < idx.ndim(); ++i) o.push_back(idx[i]);
    for (int i = static_cast<int>(idx[0]); i < d.ndim(); ++i) o.push_back(d[i]);
    if (static_cast<int>(o.size()) > TShape::kMaxDims) {
      throw Error(op + ": the output would have more than " + std::to_string(TShape::kMaxDims) + " dimensions");
    }
    AssignShape(out, 0, TShape(o), op, "output");
    return true;
  }
  bool InferType(std::vector<int>* in, std::vector<int>* out, std::vector<int>* aux) const override {
    aux->clear();
    out->resize(1, kTypeUnknown);
    if ((*in)[0] == kTypeUnknown && (*out)[0] != kTypeUnknown) (*in)[0] = (*out)[0];
    if ((*in)[0] != kTypeUnknown) AssignType(out, 0, (*in)[0], kGather, "output");
    return (*in)[0] != kTypeUnknown && (*in)[1] != kTypeUnknown;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<GatherNDProp>(*this); }
  std::string TypeString() const override { return kGather; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>&) const override {
    return {out_grad[0], in_data[1]};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // indexing.cu
    return std::make_unique<GatherNDOp>();
  }

 private:
  NoParam p_;
};

// ---- one_hot

using indexing::kOneHot;
using indexing::OneHotParam;

class OneHotOp final : public Operator {
 public:
  explicit OneHotOp(const OneHotParam& p) : p_(p) {}
  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const std::vector<std::int64_t> idx = ReadIndices(in[0], kOneHot);
    const std::int64_t depth = p_.depth;
    DTypeSwitch(out[0].dtype, [&](auto tag) {
      using T = decltype(tag);
      // The values converted once from the double parameters, as MXNet's static_cast<DType>(double).
      const T on = internal::ConvertTo<T>(p_.on_value), off = internal::ConvertTo<T>(p_.off_value);
      T* o = static_cast<T*>(out[0].dptr);
      for (std::size_t i = 0; i < idx.size(); ++i) {
        T* row = o + static_cast<std::int64_t>(i) * depth;
        const std::int64_t j = idx[i];
        for (std::int64_t c = 0; c < depth; ++c) {
          indexing::OneHotElement(row + c, c == j ? on : off, req[0]);
        }
      }
    });
  }
  void Backward(const OpContext&, const std::vector<TBlob>&, const std::vector<TBlob>&, const std::vector<TBlob>&,
                const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    ZeroGrad(in_grad[0], req[0]);
  }

 private:
  OneHotParam p_;
};

class OneHotProp final : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override { p_.Init(kwargs, kOneHot); }
  Kwargs GetParams() const override { return p_.GetParams(); }
  std::vector<std::string> ListArguments() const override { return {"indices"}; }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    aux->clear();
    out->resize(1);
    const TShape idx = (*in)[0];
    if (!idx.known()) return false;
    if (idx.ndim() + 1 > TShape::kMaxDims) {
      throw Error(std::string(kOneHot) + ": the output of indices " + idx.ToString() + " would have more than " +
                  std::to_string(TShape::kMaxDims) + " dimensions");
    }
    std::vector<std::int64_t> o = idx.ToVector();
    o.push_back(p_.depth);
    AssignShape(out, 0, TShape(o), kOneHot, "output");
    return true;
  }
  // The output is `dtype`; the indices keep their own type, which must be known.
  bool InferType(std::vector<int>* in, std::vector<int>* out, std::vector<int>* aux) const override {
    aux->clear();
    out->resize(1, kTypeUnknown);
    AssignType(out, 0, static_cast<int>(DTypeFromName(p_.dtype)), kOneHot, "output");
    return (*in)[0] != kTypeUnknown;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<OneHotProp>(*this); }
  std::string TypeString() const override { return kOneHot; }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>&, const std::vector<int>&,
                                             const std::vector<int>&) const override {
    return {};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // indexing.cu
    return std::make_unique<OneHotOp>(p_);
  }

 private:
  OneHotParam p_;
};

}  // namespace

TROUPE_REGISTER_OP_PROPERTY(take, TakeProp)
    .describe("Takes elements from an input array along the given axis, at the given indices.")
    .add_argument("a", "NDArray-or-Symbol", "The input array.")
    .add_argument("indices", "NDArray-or-Symbol", "The indices of the values to be extracted.")
    .add_arguments(TakeParam::Docs())
    .add_alias("_npi_take");

TROUPE_REGISTER_OP_PROPERTY(gather_nd, GatherNDProp)
    .describe(
        "Gathers elements or slices from data into an array of the indices' shape (the first axis of indices "
        "addresses the leading axes of data).")
    .add_argument("data", "NDArray-or-Symbol", "data")
    .add_argument("indices", "NDArray-or-Symbol", "indices")
    .add_alias("_npi_gather_nd")
    .add_alias("_npx_gather_nd");

TROUPE_REGISTER_OP_PROPERTY(one_hot, OneHotProp)
    .describe("A one-hot array: on_value at the indices along a new last axis of size depth, off_value elsewhere.")
    .add_argument("indices", "NDArray-or-Symbol", "array of locations where to set on_value")
    .add_arguments(OneHotParam::Docs())
    .add_alias("_npx_one_hot");

}  // namespace troupe
