// The interleaved attention products (interleaved_matmul.cc: property and CPU operator; interleaved_matmul.cu:
// cuBLAS strided-batched GEMMs): the parameters, the four operator kinds and the layout both devices read, so
// that they agree on which element is which.
//
// Layout (time-major, `heads` = H, head_dim = d = E / H, attention batch a = b * H + h for batch entry b and
// head h):
//   queries_keys_values (S, B, 3E): the last axis is H blocks [q (d), k (d), v (d)], one per head;
//   queries (S, B, E):              H blocks of d;
//   keys_values (S, B, 2E):         H blocks [k (d), v (d)];
//   attention (H * B, Sq, Sk):      one map per attention batch;
//   a *_valatt output (Sq, B, E):   H blocks of d, as the queries.
// A head's block in an interleaved array is a row-major (rows x d) matrix with row stride Slice::row, starting
// at Slice::offset + a * Slice::batch: exactly what a strided-batched GEMM reads.
//
// Pure data and functions: thread-safe. Compiles under nvcc.
#pragma once

#include <cmath>
#include <cstdint>

#include "op/param.h"
#include "tensor/tensor.h"

namespace troupe::interleaved {

struct InterleavedMatMulParam : Params<InterleavedMatMulParam> {
  int heads = 1;
  static void Declare(ParamSchema<InterleavedMatMulParam>& s) {
    s.Field("heads", &InterleavedMatMulParam::heads).LowerBound(1).Describe("Set number of heads");
  }
};

enum class Kind { kSelfQK, kSelfValAtt, kEncDecQK, kEncDecValAtt };

inline const char* NameOf(Kind k) {
  switch (k) {
    case Kind::kSelfQK:
      return "_contrib_interleaved_matmul_selfatt_qk";
    case Kind::kSelfValAtt:
      return "_contrib_interleaved_matmul_selfatt_valatt";
    case Kind::kEncDecQK:
      return "_contrib_interleaved_matmul_encdec_qk";
    case Kind::kEncDecValAtt:
      return "_contrib_interleaved_matmul_encdec_valatt";
  }
  return "?";
}

// One head's slice in a time-major interleaved array: element (t, d) of attention batch a is at
// t * row + a * batch + offset + d.
struct Slice {
  std::int64_t row, batch, offset;
};

// The sizes of one call: batch entries B, heads H, head size d, query and key lengths.
struct Sizes {
  std::int64_t batch, heads, d, sq, sk;
  std::int64_t attn() const { return batch * heads; }
};

// The sizes from the first two inputs' shapes (checked by the property).
inline Sizes SizesOf(Kind kind, int heads, const TShape& s0, const TShape& s1) {
  Sizes z;
  z.heads = heads;
  z.batch = s0[1];
  switch (kind) {
    case Kind::kSelfQK:
    case Kind::kSelfValAtt:
      z.d = s0[2] / 3 / heads;
      z.sq = z.sk = s0[0];
      break;
    case Kind::kEncDecQK:
      z.d = s0[2] / heads;
      z.sq = s0[0];
      z.sk = s1[0];
      break;
    case Kind::kEncDecValAtt:
      z.d = s0[2] / 2 / heads;
      z.sk = s0[0];
      z.sq = s1[1];
      break;
  }
  return z;
}

// 1 / sqrt(d) as MXNet computes it (the square root in float for float32).
template <typename T>
double ScaleOf(std::int64_t d) {
  return static_cast<double>(static_cast<T>(T(1) / std::sqrt(static_cast<T>(d))));
}

inline bool IsSelf(Kind k) { return k == Kind::kSelfQK || k == Kind::kSelfValAtt; }
// The queries: in the interleaved q-k-v array for self-attention, their own array otherwise.
inline Slice QuerySlice(Kind k, const Sizes& z) {
  if (IsSelf(k)) return {z.attn() * 3 * z.d, 3 * z.d, 0};
  return {z.attn() * z.d, z.d, 0};
}
inline Slice KeySlice(Kind k, const Sizes& z) {
  if (IsSelf(k)) return {z.attn() * 3 * z.d, 3 * z.d, z.d};
  return {z.attn() * 2 * z.d, 2 * z.d, 0};
}
inline Slice ValueSlice(Kind k, const Sizes& z) {
  if (IsSelf(k)) return {z.attn() * 3 * z.d, 3 * z.d, 2 * z.d};
  return {z.attn() * 2 * z.d, 2 * z.d, z.d};
}
// A *_valatt output (or its gradient).
inline Slice OutSlice(Kind, const Sizes& z) { return {z.attn() * z.d, z.d, 0}; }

}  // namespace troupe::interleaved
