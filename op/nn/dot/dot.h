// dot and batch_dot (dot.cc): the operator both devices run, built around one device's matrix product
// (the CPU's CpuGemm, or cuBLAS through GpuGemm in dot.cu), so that shapes, batching and the gradients'
// products are one code. Thread-safe: the factory keeps no state.
#pragma once

#include <memory>

#include "op/operator.h"
#include "tensor/tensor.h"

namespace troupe::dot {

// Row-major C = alpha * op(A) * op(B) + beta * C with op(A) m x k, op(B) k x n (CpuGemm's contract), on the
// run context's device and stream.
using GemmFn = void (*)(const TBlob& a, const TBlob& b, const TBlob& c, bool transpose_a, bool transpose_b, int m,
                        int n, int k, double alpha, double beta, const RunContext& rctx);

// The operator of a dot or batch_dot property (its parameters read back through GetParams) that multiplies
// with `gemm`. Throws troupe::Error for a forward_stype other than dense.
std::unique_ptr<Operator> MakeDotOperator(const OperatorProperty& prop, GemmFn gemm);

}  // namespace troupe::dot
