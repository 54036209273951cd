// The float32 fallback for half-precision arrays: runs an operator's Forward or Backward on float32 copies of
// its float16/bfloat16 arguments and converts what it wrote back (rounding once, to nearest even). Operators
// call it where they have no kernel of their own for a half type on this CPU (oneDNN off or without the ISA,
// float16 convolutions, pooling, fully connected layers), so every such operator accepts the types AMP
// graphs give it and computes them at float32 precision.
//
// Not thread-safe: one object per operator object, whose calls never overlap (op/operator.h). The copies
// live in buffers the object keeps and reuses between calls.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <vector>

#include "op/operator.h"
#include "tensor/tensor.h"

namespace troupe::internal {

// float16 or bfloat16.
inline bool IsHalfType(DType t) { return t == DType::kFloat16 || t == DType::kBfloat16; }

// Whether any of the blobs holds a half type.
bool AnyHalf(std::initializer_list<const std::vector<TBlob>*> lists);

class FloatStaging {
 public:
  // op.Forward with every half blob of in_data, out_data and aux_states replaced by a float32 copy; the
  // outputs (and the auxiliary states, which Forward may update) are converted back under their request.
  void Forward(Operator& op, const OpContext& ctx, const std::vector<TBlob>& in_data,
               const std::vector<OpReqType>& req, const std::vector<TBlob>& out_data,
               const std::vector<TBlob>& aux_states);
  // The same for Backward: in_grad is converted back under req.
  void Backward(Operator& op, const OpContext& ctx, const std::vector<TBlob>& out_grad,
                const std::vector<TBlob>& in_data, const std::vector<TBlob>& out_data,
                const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>& aux_states);

 private:
  // b itself when it is not a half type (or empty); else a float32 buffer, holding b's values when `fill`.
  TBlob Stage(const TBlob& b, bool fill);
  std::vector<TBlob> StageAll(const std::vector<TBlob>& blobs, bool fill);
  // Outputs: filled only under kAddTo.
  std::vector<TBlob> StageOutputs(const std::vector<TBlob>& blobs, const std::vector<OpReqType>& req);
  std::vector<std::vector<float>> buffers_;
  std::size_t used_ = 0;
};

// Converts n float32 values into a half-type array (dtype float16 or bfloat16), or back.
void FloatToHalf(const float* from, void* to, DType to_type, std::size_t n);
void HalfToFloat(const void* from, DType from_type, float* to, std::size_t n);

}  // namespace troupe::internal
