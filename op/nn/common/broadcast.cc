// The broadcast index map and output shape (op/nn/common/broadcast.h).
#include "op/nn/common/broadcast.h"

#include <sstream>
#include <string>

#include "base/error.h"

namespace troupe {

namespace tensor_ops {

BroadcastIndexer MakeBroadcastIndexer(const TShape& big, const TShape& small) {
  BroadcastIndexer ix;
  ix.ndim = big.ndim();
  if (small.ndim() > big.ndim()) {
    throw Error("broadcast: shape " + small.ToString() + " has more dimensions than " + big.ToString());
  }
  const int pad = big.ndim() - small.ndim();
  for (int d = 0; d < ix.ndim; ++d) {
    ix.big[d] = big[d];
    ix.small[d] = d < pad ? 1 : small[d - pad];
    if (ix.small[d] != ix.big[d] && ix.small[d] != 1) {
      throw Error("broadcast: shape " + small.ToString() + " cannot be broadcast to " + big.ToString());
    }
  }
  std::int64_t bs = 1, ss = 1;
  for (int d = ix.ndim - 1; d >= 0; --d) {
    ix.big_stride[d] = bs;
    ix.small_stride[d] = ix.small[d] == ix.big[d] ? ss : 0;
    bs *= ix.big[d];
    ss *= ix.small[d];
  }
  ix.big_size = bs;
  ix.small_size = ss;
  ix.reduce_size = 1;
  for (int d = 0; d < ix.ndim; ++d) {
    if (ix.small[d] != ix.big[d]) ix.reduce_size *= ix.big[d];
  }
  return ix;
}

TShape BroadcastShape(const TShape& lhs, const TShape& rhs, const std::string& op) {
  if (lhs.ndim() < 0 || rhs.ndim() < 0) return TShape();  // rank unknown: nothing to say yet
  const int nd = std::max(lhs.ndim(), rhs.ndim());
  TShape out = TShape::Filled(nd, -1);
  const int bl = nd - lhs.ndim(), br = nd - rhs.ndim();
  for (int i = 0; i < nd; ++i) {
    const std::int64_t l = i >= bl ? lhs[i - bl] : 1, r = i >= br ? rhs[i - br] : 1;
    if (l == r) {
      out[i] = l;
    } else if (l == 1) {
      out[i] = r;
    } else if (r == 1) {
      out[i] = l;
    } else if (l < 0 || r < 0) {
      out[i] = l < 0 ? r : l;  // one side unknown: the other decides (or 1 broadcasts)
    } else {
      throw Error(op + ": operands could not be broadcast together: argument 'lhs' has shape " + lhs.ToString() +
                  " and argument 'rhs' has shape " + rhs.ToString() +
                  " (each pair of dimensions, aligned at the right, must be equal or contain a 1)");
    }
  }
  return out;
}

}  // namespace tensor_ops

}  // namespace troupe
