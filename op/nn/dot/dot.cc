// dot and batch_dot (MXNet 1.9's dot.cc): one operator for both devices around a matrix product (dot.h), the
// tensor module's CpuGemm on the CPU (oneDNN's sgemm for float32, OpenBLAS for float64), cuBLAS on the GPU
// (dot.cu).
//
// dot sees lhs as a matrix (all dimensions but the last, the last; transposed: the first, all the rest) and
// rhs as (the first, all the rest) (transposed: all but the last, the last); the output's shape is what is
// left of each: lhs (2, 3, 4) . rhs (4, 5) -> (2, 3, 5). batch_dot multiplies matching matrices of two
// arrays of rank >= 3 whose leading (batch) dimensions agree: (b, m, k) x (b, k, n) -> (b, m, n).
#include <cstdint>
#include <string>
#include <vector>

#include "op/nn/dot/dot.h"

#include "op/internal/float_staging.h"
#include "op/internal/op_util.h"
#include "op/param.h"
#include "tensor/detail/kernels.h"

namespace troupe {

namespace {

struct DotParam : Params<DotParam> {
  bool transpose_a = false;
  bool transpose_b = false;
  std::string forward_stype;
  static void Declare(ParamSchema<DotParam>& s) {
    s.Field("transpose_a", &DotParam::transpose_a).Default(false).Describe("If true then transpose the first input before dot.");
    s.Field("transpose_b", &DotParam::transpose_b).Default(false).Describe("If true then transpose the second input before dot.");
    s.Field("forward_stype", &DotParam::forward_stype)
        .Default("None")
        .Choices({"None", "csr", "default", "row_sparse"})
        .Describe("The desired storage type of the forward output (troupe: dense only).");
  }
};

// One product: C (m x n) = op(A) op(B), with A stored (ta ? k x m : m x k) and B (tb ? n x k : k x n).
struct Gemm {
  std::int64_t m = 0, n = 0, k = 0;
};

TBlob At(const TBlob& b, std::int64_t offset, std::int64_t rows, std::int64_t cols) {
  return TBlob(static_cast<char*>(b.dptr) + offset * static_cast<std::int64_t>(DTypeSize(b.dtype)), TShape{rows, cols},
               b.dtype, b.ctx);
}

// One device's product, C = op(A) op(B) (beta 0) or C += op(A) op(B) (kAddTo), and the gradients of A and B
// from dC through it.
struct Products {
  dot::GemmFn gemm;
  const RunContext& rctx;

  void Product(const TBlob& a, const TBlob& b, const TBlob& c, bool ta, bool tb, const Gemm& g, OpReqType req) const {
    if (req == kNullOp) return;
    gemm(a, b, c, ta, tb, static_cast<int>(g.m), static_cast<int>(g.n), static_cast<int>(g.k), 1.0,
         req == kAddTo ? 1.0 : 0.0, rctx);
  }
  void Grads(const TBlob& a, const TBlob& b, const TBlob& dc, const TBlob& da, const TBlob& db, bool ta, bool tb,
             const Gemm& g, OpReqType req_a, OpReqType req_b) const {
    // dop(A) = dC op(B)^T (m x k); dop(B) = op(A)^T dC (k x n); stored transposed where A or B is.
    if (!ta) {
      Product(dc, b, da, false, !tb, Gemm{g.m, g.k, g.n}, req_a);
    } else {
      Product(b, dc, da, tb, true, Gemm{g.k, g.m, g.n}, req_a);
    }
    if (!tb) {
      Product(a, dc, db, !ta, false, Gemm{g.k, g.n, g.m}, req_b);
    } else {
      Product(dc, a, db, true, ta, Gemm{g.n, g.k, g.m}, req_b);
    }
  }
};

void CpuGemmFn(const TBlob& a, const TBlob& b, const TBlob& c, bool ta, bool tb, int m, int n, int k, double alpha,
               double beta, const RunContext&) {
  internal::CpuGemm(a, b, c, ta, tb, m, n, k, alpha, beta);
}

template <bool kBatch>
class DotOp final : public Operator {
 public:
  DotOp(DotParam p, dot::GemmFn gemm) : p_(p), gemm_(gemm) {}
  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>& aux) override {
    // Half-precision arrays: the float32 code on converted copies.
    if (internal::AnyHalf({&in, &out})) return staging_.Forward(*this, ctx, in, req, out, aux);
    internal::FloatSwitch(out[0].dtype, Name(), [&](auto) {
      const auto [batch, g] = Shapes(in[0].shape, in[1].shape, p_);
      const Products run{gemm_, ctx.run_ctx};
      for (std::int64_t i = 0; i < batch; ++i) {
        run.Product(At(in[0], i * g.m * g.k, p_.transpose_a ? g.k : g.m, p_.transpose_a ? g.m : g.k),
                At(in[1], i * g.k * g.n, p_.transpose_b ? g.n : g.k, p_.transpose_b ? g.k : g.n),
                At(out[0], i * g.m * g.n, g.m, g.n), p_.transpose_a, p_.transpose_b, g, req[0]);
      }
    });
  }
  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in,
                const std::vector<TBlob>& out_data, const std::vector<OpReqType>& req,
                const std::vector<TBlob>& in_grad, const std::vector<TBlob>& aux) override {
    if (internal::AnyHalf({&out_grad, &in, &in_grad})) {
      return staging_.Backward(*this, ctx, out_grad, in, out_data, req, in_grad, aux);
    }
    internal::FloatSwitch(out_grad[0].dtype, Name(), [&](auto) {
      const auto [batch, g] = Shapes(in[0].shape, in[1].shape, p_);
      const bool ta = p_.transpose_a, tb = p_.transpose_b;
      const Products run{gemm_, ctx.run_ctx};
      for (std::int64_t i = 0; i < batch; ++i) {
        const std::int64_t ar = ta ? g.k : g.m, ac = ta ? g.m : g.k, br = tb ? g.n : g.k, bc = tb ? g.k : g.n;
        run.Grads(At(in[0], i * g.m * g.k, ar, ac), At(in[1], i * g.k * g.n, br, bc),
                     At(out_grad[0], i * g.m * g.n, g.m, g.n), At(in_grad[0], i * g.m * g.k, ar, ac),
                     At(in_grad[1], i * g.k * g.n, br, bc), ta, tb, g, req[0], req[1]);
      }
    });
  }

  static const char* Name() { return kBatch ? "batch_dot" : "dot"; }

  // The batch count and one product's sizes; throws troupe::Error naming both shapes when they do not fit.
  static std::pair<std::int64_t, Gemm> Shapes(const TShape& l, const TShape& r, const DotParam& p) {
    const std::string op = Name();
    auto mismatch = [&]() {
      return Error(op + ": shapes " + l.ToString() + " and " + r.ToString() + " do not fit (transpose_a=" +
                   (p.transpose_a ? "True" : "False") + ", transpose_b=" + (p.transpose_b ? "True" : "False") + ")");
    };
    Gemm g;
    std::int64_t batch = 1;
    if constexpr (kBatch) {
      if (l.ndim() < 3 || l.ndim() != r.ndim()) {
        throw Error(op + ": both inputs need the same rank, at least 3; got " + l.ToString() + " and " + r.ToString());
      }
      for (int d = 0; d < l.ndim() - 2; ++d) {
        if (l[d] != r[d]) throw mismatch();
        batch *= l[d];
      }
      const int n = l.ndim();
      g.m = p.transpose_a ? l[n - 1] : l[n - 2];
      g.k = p.transpose_a ? l[n - 2] : l[n - 1];
      const std::int64_t rk = p.transpose_b ? r[n - 1] : r[n - 2];
      g.n = p.transpose_b ? r[n - 2] : r[n - 1];
      if (rk != g.k) throw mismatch();
    } else {
      if (l.ndim() < 1 || r.ndim() < 1) throw mismatch();
      g.k = p.transpose_a ? l[0] : l[l.ndim() - 1];
      g.m = l.Size() / (g.k == 0 ? 1 : g.k);
      const std::int64_t rk = p.transpose_b ? r[r.ndim() - 1] : r[0];
      g.n = r.Size() / (rk == 0 ? 1 : rk);
      if (rk != g.k) throw mismatch();
    }
    return {batch, g};
  }

 private:
  DotParam p_;
  dot::GemmFn gemm_;
  internal::FloatStaging staging_;  // half-precision arrays: float32 on converted copies
};

template <bool kBatch>
class DotProp final : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override { p_.Init(kwargs, TypeString()); }
  Kwargs GetParams() const override { return p_.GetParams(); }
  std::vector<std::string> ListArguments() const override { return {"lhs", "rhs"}; }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    aux->clear();
    out->resize(1);
    const TShape& l = (*in)[0];
    const TShape& r = (*in)[1];
    if (!l.known() || !r.known()) return false;
    DotOp<kBatch>::Shapes(l, r, p_);  // checks
    std::vector<std::int64_t> o;
    if constexpr (kBatch) {
      const int n = l.ndim();
      for (int d = 0; d < n - 2; ++d) o.push_back(l[d]);
      o.push_back(p_.transpose_a ? l[n - 1] : l[n - 2]);
      o.push_back(p_.transpose_b ? r[n - 2] : r[n - 1]);
    } else {
      if (p_.transpose_a) {
        for (int d = 1; d < l.ndim(); ++d) o.push_back(l[d]);
      } else {
        for (int d = 0; d < l.ndim() - 1; ++d) o.push_back(l[d]);
      }
      if (p_.transpose_b) {
        for (int d = 0; d < r.ndim() - 1; ++d) o.push_back(r[d]);
      } else {
        for (int d = 1; d < r.ndim(); ++d) o.push_back(r[d]);
      }
      if (o.empty()) o.push_back(1);  // vector . vector: MXNet 1.x gives shape (1,)
    }
    AssignShape(out, 0, TShape(o), TypeString(), "output");
    return true;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<DotProp>(*this); }
  std::string TypeString() const override { return DotOp<kBatch>::Name(); }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>&) const override {
    return {out_grad[0], in_data[0], in_data[1]};
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // dot.cu: MakeDotOperator with cuBLAS
    return dot::MakeDotOperator(*this, CpuGemmFn);
  }

 private:
  DotParam p_;
};

}  // namespace

std::unique_ptr<Operator> dot::MakeDotOperator(const OperatorProperty& prop, GemmFn gemm) {
  DotParam p;
  p.Init(prop.GetParams(), prop.TypeString());
  if (p.forward_stype != "None" && p.forward_stype != "default") {
    throw Error(prop.TypeString() + ": forward_stype '" + p.forward_stype + "' is not supported (dense arrays only)");
  }
  if (prop.TypeString() == "batch_dot") return std::make_unique<DotOp<true>>(p, gemm);
  return std::make_unique<DotOp<false>>(p, gemm);
}

TROUPE_REGISTER_OP_PROPERTY(dot, DotProp<false>)
    .describe("Dot product of two arrays (matrix product over the last axis of lhs and the first of rhs).")
    .add_argument("lhs", "NDArray-or-Symbol", "The first input")
    .add_argument("rhs", "NDArray-or-Symbol", "The second input")
    .add_arguments(DotParam::Docs());
TROUPE_REGISTER_OP_PROPERTY(batch_dot, DotProp<true>)
    .describe("Batchwise dot product: the matrices of lhs and rhs multiplied pairwise over the batch dimensions.")
    .add_argument("lhs", "NDArray-or-Symbol", "The first input")
    .add_argument("rhs", "NDArray-or-Symbol", "The second input")
    .add_arguments(DotParam::Docs());

}  // namespace troupe
