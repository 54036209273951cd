// Operator fusion for inference: the operators the executor's inference pass (graph/executor.h) puts in
// place of a chain of nodes, as MXNet 1.9's MKLDNN subgraph backend does (_sg_mkldnn_conv).
//
// FuseConvolution makes the property of one oneDNN convolution primitive with post-ops:
//   Convolution [-> BatchNorm] -> Activation                       (relu, sigmoid, tanh or softrelu)
//   Convolution [-> BatchNorm] -> elemwise_add(·, sum) [-> act]    (with_sum: the result is added onto `sum`, an
//                                                                   input of its own; oneDNN's sum post-op)
//   Convolution -> BatchNorm                                       (batch_norm alone)
// A BatchNorm is folded into the convolution's weights and bias with its moving statistics (MXNet's with_bn);
// a training forward pass (is_train without use_global_stats) runs the convolution and the BatchNorm one after
// the other instead, with the batch's statistics, updating the moving ones as BatchNorm does.
// Its arguments are the convolution's (data, weight[, bias]), then "gamma", "beta" with a BatchNorm, then "sum"
// with with_sum; its auxiliary states BatchNorm's (moving_mean, moving_var); one output (BatchNorm's first),
// which may take the buffer of "sum" in place. It has no backward pass: only graphs bound without gradients are
// fused. Between fused convolutions the executor may keep arrays in oneDNN's channel-blocked layout (ConvFusion):
// no reorder at either end of such a convolution; nothing but fused convolutions ever reads such an array.
// Results equal the unfused chain's up to float32 rounding (the sum and the relu happen on the
// convolution's float32 accumulator instead of a stored copy of it; the folded weights are rounded to float32).
//
// Declared surface of the op module for graph/ (detail/: never installed): the executor's inference pass
// builds these nodes; users reach fusion through ExecutorOptions::fuse_inference only.
//
// Thread-safety: FuseConvolution is thread-safe; the property it returns is immutable.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "op/operator.h"

namespace troupe {

// The fused property for `conv` (and `batch_norm`, the BatchNorm reading its output, or null), or null where
// this build or setting does not fuse it: `conv` is not a 2-D Convolution, `batch_norm` is not a BatchNorm over
// axis 1, oneDNN is not built in or is switched off (TROUPE_DNNL=0), or nothing is asked for. The caller checks
// the rest (CPU context, float32 arrays, no other reader of the intermediate arrays, BatchNorm's statistics
// outputs unread).
// The activations a fused convolution applies as its last post-op (MXNet's _sg_mkldnn_conv fuses the same):
// Activation with act_type relu, sigmoid, tanh or softrelu.
enum class FusedActivation : std::uint8_t { kNone, kRelu, kSigmoid, kTanh, kSoftrelu };
// The post-op for an Activation's act_type; kNone for one that does not fuse (softsign).
FusedActivation FusedActivationOf(const std::string& act_type);

struct ConvFusion {
  const OperatorProperty* batch_norm = nullptr;  // the BatchNorm reading the convolution's output, or null
  bool sum = false;                              // with_sum
  FusedActivation act = FusedActivation::kNone;  // the activation after the sum
  // The data input, the output and "sum" in oneDNN's channel-blocked layout instead of NCHW: the executor keeps
  // an array blocked when a fused convolution writes it and only fused convolutions read it (as data or as
  // sum), and FusedConvolutionKeepsBlocked(its shape) holds. The output takes the buffer of "sum" only when
  // both have the same layout.
  bool blocked_in = false;
  bool blocked_out = false;
  bool blocked_sum = false;
};
std::shared_ptr<const OperatorProperty> FuseConvolution(const OperatorProperty& conv, const ConvFusion& fusion);

// Whether an array of `shape` may be kept in the channel-blocked layout between fused convolutions (4-D, at
// least one image, channels a multiple of the CPU's block); false without oneDNN.
bool FusedConvolutionKeepsBlocked(const TShape& shape);

}  // namespace troupe
