// Operator fusion for inference: the operators the executor's inference pass (graph/executor.h) puts in
// place of a chain of nodes, as MXNet 1.9's MKLDNN subgraph backend does (_sg_mkldnn_conv).
//
// FuseConvolution makes the property of one oneDNN convolution primitive with post-ops:
//   Convolution -> Activation(relu)                 (with_relu)
//   Convolution -> elemwise_add(·, sum) [-> relu]   (with_sum: the convolution's result is added onto `sum`,
//                                                    an input of its own; oneDNN's sum post-op)
// Its arguments are the convolution's (data, weight[, bias]) then "sum" when with_sum; one output, which may
// take the buffer of "sum" in place. It has no backward pass: only graphs bound without gradients are fused.
// Results equal the unfused chain's up to float32 rounding (the sum and the relu happen on the
// convolution's float32 accumulator instead of a stored copy of it).
//
// Declared surface of the op module for graph/ (detail/: never installed): the executor's inference pass
// builds these nodes; users reach fusion through ExecutorOptions::fuse_inference only.
//
// Thread-safety: FuseConvolution is thread-safe; the property it returns is immutable.
#pragma once

#include <memory>

#include "op/operator.h"

namespace troupe {

// The fused property for `conv`, or null where this build or setting does not fuse it: `conv` is not a 2-D
// Convolution, oneDNN is not built in or is switched off (TROUPE_DNNL=0), or neither post-op is asked for.
// The caller checks the rest (CPU context, float32 arrays, no other reader of the intermediate arrays).
std::shared_ptr<const OperatorProperty> FuseConvolution(const OperatorProperty& conv, bool with_sum, bool with_relu);

}  // namespace troupe
