// The index map between a "big" shape and a "small" one (NumPy-style broadcasting) that broadcast_* and
// sum/mean share on both devices, and the broadcast output shape (namespace tensor_ops).
//
// Properties are immutable after Init (thread-safe to share); helpers are pure functions. Compiles under
// nvcc (the .cu file includes it): no CAF or Cap'n Proto, and what runs in kernels is TROUPE_HOST_DEVICE.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "op/internal/op_util.h"
#include "op/operator.h"
#include "op/param.h"
#include "tensor/tensor.h"

namespace troupe {

namespace tensor_ops {

// Maps between a "big" shape and a "small" one of the same rank whose dimensions each equal the big one's or
// are 1 (the broadcast / reduced dimensions). Used by broadcast_* (small = an operand, big = the output) and
// by sum/mean (big = the input, small = the output with kept dimensions), on both devices.
struct BroadcastIndexer {
  int ndim = 0;
  std::int64_t big[TShape::kMaxDims] = {};
  std::int64_t small[TShape::kMaxDims] = {};
  std::int64_t big_stride[TShape::kMaxDims] = {};
  std::int64_t small_stride[TShape::kMaxDims] = {};  // 0 where small is broadcast (small 1, big > 1)
  std::int64_t big_size = 0, small_size = 0;
  std::int64_t reduce_size = 0;  // big elements per small element

  // Offset in small of the element that big element `i` reads (big_size > 0).
  TROUPE_HOST_DEVICE std::int64_t SmallOffset(std::int64_t i) const {
    std::int64_t off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      off += (i % big[d]) * small_stride[d];
      i /= big[d];
    }
    return off;
  }
  // Offset in big of the r-th (0 <= r < reduce_size) of the elements that reduce onto small element `o`.
  TROUPE_HOST_DEVICE std::int64_t BigOffset(std::int64_t o, std::int64_t r) const {
    std::int64_t off = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      std::int64_t c;
      if (small[d] == big[d]) {
        c = o % small[d];
        o /= small[d];
      } else {
        c = r % big[d];
        r /= big[d];
      }
      off += c * big_stride[d];
    }
    return off;
  }
};

// dst[o] = (req) the sum, in double, of f(i) over the big elements i that read small element o, for every o:
// the gradient of a broadcast operand (f the output-shaped term), a sum over reduced dimensions. The terms of
// one element are added in increasing big index. Host code.
template <typename T, typename F>
void SumToSmall(T* dst, const BroadcastIndexer& ix, OpReqType req, F&& f) {
  if (req == kNullOp) return;
  for (std::int64_t o = 0; o < ix.small_size; ++o) {
    double acc = 0;
    for (std::int64_t r = 0; r < ix.reduce_size; ++r) acc += static_cast<double>(f(ix.BigOffset(o, r)));
    Assign(dst + o, req, static_cast<T>(acc));
  }
}

// small is padded with leading 1s to big's rank; each of its dimensions must be 1 or big's (checked by the
// callers' shape inference; violated here it throws troupe::Error).
BroadcastIndexer MakeBroadcastIndexer(const TShape& big, const TShape& small);

// The output shape of broadcasting lhs with rhs NumPy-style (MXNet 1.x's BinaryBroadcastShape: ranks are
// aligned at the right, each pair of dimensions must be equal or contain a 1). Throws troupe::Error naming
// `op` and both shapes.
TShape BroadcastShape(const TShape& lhs, const TShape& rhs, const std::string& op);

}  // namespace tensor_ops

}  // namespace troupe
