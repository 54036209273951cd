// The interleaved attention products of MXNet 1.9's contrib (src/operator/contrib/transformer.cc) that
// GluonNLP's BERT and Transformer use: _contrib_interleaved_matmul_selfatt_qk,
// _contrib_interleaved_matmul_selfatt_valatt, _contrib_interleaved_matmul_encdec_qk and
// _contrib_interleaved_matmul_encdec_valatt: the properties and the CPU operator, forward and backward. The
// GPU operator is interleaved_matmul.cu (cuBLAS). MXNet's CPU code takes float32 only; float64 is computed
// the same way here.
//
// Layout: interleaved_matmul.h. selfatt_qk / encdec_qk give attention[a] = q_a k_a^T / sqrt(d) (q_a: (Sq, d),
// k_a: (Sk, d)); selfatt_valatt / encdec_valatt give out_a = attention[a] v_a. The products run through
// CpuGemm on each attention batch's head slices, copied out of (and back into) the interleaved arrays.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "op/internal/op_util.h"
#include "op/nn/transformer/interleaved_matmul.h"
#include "op/operator.h"
#include "op/param.h"
#include "tensor/detail/kernels.h"

namespace troupe {

namespace {

using interleaved::InterleavedMatMulParam;
using interleaved::KeySlice;
using interleaved::Kind;
using interleaved::NameOf;
using interleaved::OutSlice;
using interleaved::QuerySlice;
using interleaved::ScaleOf;
using interleaved::Sizes;
using interleaved::SizesOf;
using interleaved::Slice;
using interleaved::ValueSlice;

// The slice of attention batch a, rows x d, copied into dst (contiguous).
template <typename T>
void Gather(const T* base, const Slice& s, std::int64_t a, std::int64_t rows, std::int64_t d, T* dst) {
  for (std::int64_t t = 0; t < rows; ++t) {
    const T* src = base + t * s.row + a * s.batch + s.offset;
    std::copy(src, src + d, dst + t * d);
  }
}
// Writes (req) or adds (kAddTo) the contiguous rows x d block into attention batch a's slice.
template <typename T>
void Scatter(const T* src, const Slice& s, std::int64_t a, std::int64_t rows, std::int64_t d, T* base, OpReqType req) {
  for (std::int64_t t = 0; t < rows; ++t) {
    internal::AssignEach(base + t * s.row + a * s.batch + s.offset, d, req,
                         [&](std::int64_t i) { return src[t * d + i]; });
  }
}

// Row-major C (m x n) = alpha op(A) op(B) + beta C on contiguous blocks.
template <typename T>
void Mm(const T* a, const T* b, T* c, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
        double beta) {
  const DType dt = DTypeOf<T>();
  const Context cpu = Context::CPU();
  internal::CpuGemm(TBlob(const_cast<T*>(a), ta ? TShape{k, m} : TShape{m, k}, dt, cpu),
                    TBlob(const_cast<T*>(b), tb ? TShape{n, k} : TShape{k, n}, dt, cpu),
                    TBlob(c, TShape{m, n}, dt, cpu), ta, tb, static_cast<int>(m), static_cast<int>(n),
                    static_cast<int>(k), alpha, beta);
}

void ZeroIfWrite(const TBlob& g, OpReqType req) {
  if (req == kWriteTo || req == kWriteInplace) std::memset(g.dptr, 0, g.Bytes());
}

template <Kind kKind>
class InterleavedOp final : public Operator {
 public:
  explicit InterleavedOp(int heads) : heads_(heads) {}

  void Forward(const OpContext&, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    internal::FloatSwitch(in[0].dtype, NameOf(kKind), [&](auto tag) {
      using T = decltype(tag);
      const Sizes z = SizesOf(kKind, heads_, in[0].shape, in[1 % in.size()].shape);
      const std::int64_t d = z.d;
      const double beta = req[0] == kAddTo ? 1.0 : 0.0;
      std::vector<T> q(static_cast<std::size_t>(z.sq * d)), kv(static_cast<std::size_t>(z.sk * d)),
          tmp(static_cast<std::size_t>(z.sq * d));
      T* o = out[0].dptr_as<T>();
      for (std::int64_t a = 0; a < z.attn(); ++a) {
        if constexpr (kKind == Kind::kSelfQK || kKind == Kind::kEncDecQK) {
          const T* x = in[0].dptr_as<T>();
          const T* keys = kKind == Kind::kSelfQK ? x : in[1].dptr_as<T>();
          Gather(x, QuerySlice(kKind, z), a, z.sq, d, q.data());
          Gather(keys, KeySlice(kKind, z), a, z.sk, d, kv.data());
          Mm(q.data(), kv.data(), o + a * z.sq * z.sk, false, true, z.sq, z.sk, d, ScaleOf<T>(d), beta);
        } else {
          const T* att = in[1].dptr_as<T>();
          Gather(in[0].dptr_as<T>(), ValueSlice(kKind, z), a, z.sk, d, kv.data());
          Mm(att + a * z.sq * z.sk, kv.data(), tmp.data(), false, false, z.sq, d, z.sk, 1.0, 0.0);
          Scatter(tmp.data(), OutSlice(kKind, z), a, z.sq, d, o, req[0]);
        }
      }
    });
  }

  void Backward(const OpContext&, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    internal::FloatSwitch(in[0].dtype, NameOf(kKind), [&](auto tag) {
      using T = decltype(tag);
      const Sizes z = SizesOf(kKind, heads_, in[0].shape, in[1 % in.size()].shape);
      const std::int64_t d = z.d;
      const T* og = out_grad[0].dptr_as<T>();
      std::vector<T> q(static_cast<std::size_t>(z.sq * d)), kv(static_cast<std::size_t>(z.sk * d)),
          gq(static_cast<std::size_t>(z.sq * d)), gk(static_cast<std::size_t>(z.sk * d));
      if constexpr (kKind == Kind::kSelfQK || kKind == Kind::kEncDecQK) {
        // d(q_a) = scale dA_a k_a, d(k_a) = scale dA_a^T q_a.
        const bool self = kKind == Kind::kSelfQK;
        const T* x = in[0].dptr_as<T>();
        const T* keys = self ? x : in[1].dptr_as<T>();
        const OpReqType req_q = req[0], req_k = self ? req[0] : req[1];
        T* gx = req_q == kNullOp ? nullptr : in_grad[0].dptr_as<T>();
        T* gkeys = req_k == kNullOp ? nullptr : in_grad[self ? 0 : 1].dptr_as<T>();
        // The interleaved gradients are zeroed first and then receive each slice; the queries' slices cover
        // their array, so they are written under the request directly.
        if (req_k != kNullOp) ZeroIfWrite(in_grad[self ? 0 : 1], req_k);
        const OpReqType req_q_slices = self ? (req_q == kNullOp ? kNullOp : kAddTo) : req_q;
        const double scale = ScaleOf<T>(d);
        for (std::int64_t a = 0; a < z.attn(); ++a) {
          const T* ga = og + a * z.sq * z.sk;
          Gather(x, QuerySlice(kKind, z), a, z.sq, d, q.data());
          Gather(keys, KeySlice(kKind, z), a, z.sk, d, kv.data());
          if (req_q != kNullOp) {
            Mm(ga, kv.data(), gq.data(), false, false, z.sq, d, z.sk, scale, 0.0);
            Scatter(gq.data(), QuerySlice(kKind, z), a, z.sq, d, gx, req_q_slices);
          }
          if (req_k != kNullOp) {
            Mm(ga, q.data(), gk.data(), true, false, z.sk, d, z.sq, scale, 0.0);
            Scatter(gk.data(), KeySlice(kKind, z), a, z.sk, d, gkeys, kAddTo);
          }
        }
      } else {
        // d(v_a) = A_a^T dOut_a, dA_a = dOut_a v_a^T.
        const T* x = in[0].dptr_as<T>();
        const T* att = in[1].dptr_as<T>();
        if (req[0] != kNullOp) ZeroIfWrite(in_grad[0], req[0]);
        const double beta_att = req[1] == kAddTo ? 1.0 : 0.0;
        for (std::int64_t a = 0; a < z.attn(); ++a) {
          Gather(og, OutSlice(kKind, z), a, z.sq, d, gq.data());
          if (req[0] != kNullOp) {
            Mm(att + a * z.sq * z.sk, gq.data(), gk.data(), true, false, z.sk, d, z.sq, 1.0, 0.0);
            Scatter(gk.data(), ValueSlice(kKind, z), a, z.sk, d, in_grad[0].dptr_as<T>(), kAddTo);
          }
          if (req[1] != kNullOp) {
            Gather(x, ValueSlice(kKind, z), a, z.sk, d, kv.data());
            Mm(gq.data(), kv.data(), in_grad[1].dptr_as<T>() + a * z.sq * z.sk, false, true, z.sq, z.sk, d, 1.0,
               beta_att);
          }
        }
      }
    });
  }

 private:
  int heads_;
};

template <Kind kKind>
class InterleavedProp final : public OperatorProperty {
 public:
  void Init(const Kwargs& kwargs) override { p_.Init(kwargs, NameOf(kKind)); }
  Kwargs GetParams() const override { return p_.GetParams(); }
  std::vector<std::string> ListArguments() const override {
    switch (kKind) {
      case Kind::kSelfQK:
        return {"queries_keys_values"};
      case Kind::kSelfValAtt:
        return {"queries_keys_values", "attention"};
      case Kind::kEncDecQK:
        return {"queries", "keys_values"};
      case Kind::kEncDecValAtt:
        return {"keys_values", "attention"};
    }
    return {};
  }
  bool InferShape(std::vector<TShape>* in, std::vector<TShape>* out, std::vector<TShape>* aux) const override {
    aux->clear();
    out->resize(1);
    const std::string op = NameOf(kKind);
    const std::vector<std::string> names = ListArguments();
    for (std::size_t i = 0; i < in->size(); ++i) {
      if (!(*in)[i].known()) return false;
      if ((*in)[i].ndim() != 3) {
        throw Error(op + ": '" + names[i] + "' must be 3-D, got " + (*in)[i].ToString());
      }
    }
    const TShape s0 = (*in)[0];
    const std::int64_t h = p_.heads;
    // The interleaved axis must split evenly into heads and parts.
    auto split = [&](std::int64_t parts) {
      if (s0[2] % (parts * h) != 0) {
        throw Error(op + ": '" + names[0] + "' has " + std::to_string(s0[2]) +
                    " values per position, not a multiple of " +
                    (parts > 1 ? std::to_string(parts) + " x " : std::string()) + "heads (" + std::to_string(h) + ")");
      }
    };
    TShape o;
    switch (kKind) {
      case Kind::kSelfQK:
        split(3);
        o = TShape{h * s0[1], s0[0], s0[0]};
        break;
      case Kind::kSelfValAtt: {
        split(3);
        const TShape att = (*in)[1];
        if (att[0] != h * s0[1] || att[1] != s0[0] || att[2] != s0[0]) {
          throw Error(op + ": 'attention' must have shape (heads * batch, seq, seq) = " +
                      TShape{h * s0[1], s0[0], s0[0]}.ToString() + ", got " + att.ToString());
        }
        o = TShape{s0[0], s0[1], s0[2] / 3};
        break;
      }
      case Kind::kEncDecQK: {
        split(1);
        const TShape kv = (*in)[1];
        if (kv[2] != 2 * s0[2] || kv[1] != s0[1]) {
          throw Error(op + ": 'keys_values' must have shape (seq, " + std::to_string(s0[1]) + ", " +
                      std::to_string(2 * s0[2]) + ") for queries " + s0.ToString() + ", got " + kv.ToString());
        }
        o = TShape{h * s0[1], s0[0], kv[0]};
        break;
      }
      case Kind::kEncDecValAtt: {
        split(2);
        const TShape att = (*in)[1];
        if (att[0] != h * s0[1] || att[2] != s0[0]) {
          throw Error(op + ": 'attention' must have shape (heads * batch, query seq, " + std::to_string(s0[0]) +
                      ") with heads * batch = " + std::to_string(h * s0[1]) + ", got " + att.ToString());
        }
        o = TShape{att[1], s0[1], s0[2] / 2};
        break;
      }
    }
    AssignShape(out, 0, o, op, "output");
    return true;
  }
  std::unique_ptr<OperatorProperty> Copy() const override { return std::make_unique<InterleavedProp>(*this); }
  std::string TypeString() const override { return NameOf(kKind); }
  std::vector<int> DeclareBackwardDependency(const std::vector<int>& out_grad, const std::vector<int>& in_data,
                                             const std::vector<int>&) const override {
    std::vector<int> d{out_grad[0]};
    d.insert(d.end(), in_data.begin(), in_data.end());
    return d;
  }
  std::unique_ptr<Operator> CreateOperator(Context ctx) const override {
    if (ctx.is_gpu()) return CreateGpuOperator(*this, ctx);  // interleaved_matmul.cu
    return std::make_unique<InterleavedOp<kKind>>(p_.heads);
  }

 private:
  InterleavedMatMulParam p_;
};

}  // namespace

TROUPE_REGISTER_OP_PROPERTY(_contrib_interleaved_matmul_selfatt_qk, InterleavedProp<Kind::kSelfQK>)
    .describe(
        "Self-attention scores q k^T / sqrt(head_dim) per head from interleaved queries, keys and values "
        "(seq, batch, 3 * embed) -> (heads * batch, seq, seq).")
    .add_argument("queries_keys_values", "NDArray-or-Symbol", "Interleaved queries, keys and values")
    .add_arguments(InterleavedMatMulParam::Docs());
TROUPE_REGISTER_OP_PROPERTY(_contrib_interleaved_matmul_selfatt_valatt, InterleavedProp<Kind::kSelfValAtt>)
    .describe(
        "Self-attention output: each head's attention map times its values from the interleaved projections "
        "-> (seq, batch, embed).")
    .add_argument("queries_keys_values", "NDArray-or-Symbol", "Queries, keys and values interleaved")
    .add_argument("attention", "NDArray-or-Symbol", "Attention maps")
    .add_arguments(InterleavedMatMulParam::Docs());
TROUPE_REGISTER_OP_PROPERTY(_contrib_interleaved_matmul_encdec_qk, InterleavedProp<Kind::kEncDecQK>)
    .describe(
        "Encoder-decoder attention scores q k^T / sqrt(head_dim) per head from queries (qseq, batch, embed) "
        "and interleaved keys and values (kseq, batch, 2 * embed) -> (heads * batch, qseq, kseq).")
    .add_argument("queries", "NDArray-or-Symbol", "Queries")
    .add_argument("keys_values", "NDArray-or-Symbol", "Keys and values interleaved")
    .add_arguments(InterleavedMatMulParam::Docs());
TROUPE_REGISTER_OP_PROPERTY(_contrib_interleaved_matmul_encdec_valatt, InterleavedProp<Kind::kEncDecValAtt>)
    .describe(
        "Encoder-decoder attention output: each head's attention map times its values from the interleaved "
        "keys and values -> (qseq, batch, embed).")
    .add_argument("keys_values", "NDArray-or-Symbol", "Keys and values interleaved")
    .add_argument("attention", "NDArray-or-Symbol", "Attention maps")
    .add_arguments(InterleavedMatMulParam::Docs());

}  // namespace troupe
