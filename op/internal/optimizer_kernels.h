// The element-wise steps of the optimizers (MXNet 1.9's SGDKernel, SGDMomKernel, NAGMomKernel,
// AdamUpdateKernel, its dense AdaGrad sequence and RMSPropUpdateKernel / RMSPropAlexUpdateKernel), shared by
// the CPU loops (op/src/optimizer.cc) and the CUDA kernels (op/src/optimizer.cu): both devices compute the
// same expressions in the same order, so a weight updated on a GPU matches one updated on the CPU up to the
// devices' own rounding of sqrt and division.
//
// Internal to op/ (included by op/src/optimizer.cc and op/src/optimizer.cu). Header-only step functions;
// GpuOptimizerStep is defined in op/src/optimizer.cu (built into the GPU backend, libtroupe_gpu.so) and
// reached through op/src/optimizer_forward.cc, which loads the backend on first use or throws without CUDA.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "tensor/tensor.h"

namespace troupe::internal {

enum class OptimizerKind { kSgd, kSgdMom, kNag, kAdam, kAdaGrad, kRmsProp, kRmsPropCentered };

// The scalars of one update, fixed when it is pushed (later SetLearningRate calls do not affect updates
// already queued). Each kind reads its own: sgd lr wd rescale clip (+ momentum); nag the same with momentum;
// adam lr (the bias-corrected step) beta1 beta2 epsilon wd rescale clip; adagrad lr epsilon wd rescale clip;
// rmsprop lr gamma1 (gamma2 centered) epsilon wd rescale clip clip_weights.
struct OptimizerScalars {
  double lr = 0, momentum = 0, wd = 0, rescale = 1, clip = -1;
  double beta1 = 0, beta2 = 0, epsilon = 0;
  double gamma1 = 0, gamma2 = 0, clip_weights = -1;
};

// The number of state arrays of a kind (momentum; mean and var; history; n, or n, g and delta centered).
inline int OptimizerStateCount(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::kSgd: return 0;
    case OptimizerKind::kSgdMom:
    case OptimizerKind::kNag:
    case OptimizerKind::kAdaGrad:
    case OptimizerKind::kRmsProp: return 1;
    case OptimizerKind::kAdam: return 2;
    case OptimizerKind::kRmsPropCentered: return 3;
  }
  return 0;
}

// The scalars converted once to the element type.
template <typename T>
struct StepScalars {
  T lr, momentum, wd, rescale, clip, beta1, beta2, eps, gamma1, gamma2, clip_w;
  explicit StepScalars(const OptimizerScalars& s)
      : lr(T(s.lr)), momentum(T(s.momentum)), wd(T(s.wd)), rescale(T(s.rescale)), clip(T(s.clip)),
        beta1(T(s.beta1)), beta2(T(s.beta2)), eps(T(s.epsilon)), gamma1(T(s.gamma1)), gamma2(T(s.gamma2)),
        clip_w(T(s.clip_weights)) {}
};

// MXNet's clip: c < 0 means no clipping. Written as std::max(-c, std::min(c, g)) evaluates (NaN included).
template <typename T>
TROUPE_HOST_DEVICE inline T ClipValue(T g, T c) {
  if (c < T(0)) return g;
  const T m = (g < c) ? g : c;
  return (-c < m) ? m : -c;
}

template <typename T>
TROUPE_HOST_DEVICE inline T SqrtOf(T x) {
#ifdef __CUDA_ARCH__
  return sqrt(x);
#else
  return std::sqrt(x);
#endif
}

// One element i of an update of kind K: w (weight), g (gradient), s0..s2 (states, null when unused).
template <OptimizerKind K, typename T>
TROUPE_HOST_DEVICE inline void OptimizerStepAt(const StepScalars<T>& a, std::int64_t i, T* w, const T* g, T* s0,
                                               T* s1, T* s2) {
  if constexpr (K == OptimizerKind::kSgd) {
    // weight = (1 - lr wd) weight - lr clip(rescale grad).
    w[i] = (T(1) - a.lr * a.wd) * w[i] - a.lr * ClipValue(a.rescale * g[i], a.clip);
  } else if constexpr (K == OptimizerKind::kSgdMom) {
    // mom = momentum mom - lr wd weight - lr clip(rescale grad); weight += mom.
    s0[i] = a.momentum * s0[i] - a.lr * a.wd * w[i] - a.lr * ClipValue(a.rescale * g[i], a.clip);
    w[i] += s0[i];
  } else if constexpr (K == OptimizerKind::kNag) {
    // In place: the momentum's weight-decay term reads the weight already written (as MXNet 1.9.1 does
    // when out is the weight; checked against its values).
    const T cg = ClipValue(a.rescale * g[i], a.clip);
    s0[i] = a.momentum * s0[i];
    w[i] = w[i] - s0[i] + (a.momentum + T(1)) * (s0[i] - a.lr * (cg + a.wd * w[i]));
    s0[i] = s0[i] - a.lr * (cg + a.wd * w[i]);
  } else if constexpr (K == OptimizerKind::kAdam) {
    // Clips after adding weight decay (checked against mx.nd.adam_update 1.9.1).
    const T gi = ClipValue(a.rescale * g[i] + a.wd * w[i], a.clip);
    s0[i] = a.beta1 * s0[i] + (T(1) - a.beta1) * gi;
    s1[i] = a.beta2 * s1[i] + (T(1) - a.beta2) * gi * gi;
    w[i] -= a.lr * s0[i] / (SqrtOf(s1[i]) + a.eps);
  } else if constexpr (K == OptimizerKind::kAdaGrad) {
    // MXNet's dense AdaGrad is a sequence of NDArray operations, each rounded to T; the same order here.
    const T gi = ClipValue(g[i] * a.rescale, a.clip);
    s0[i] = s0[i] + gi * gi;
    const T div = gi / SqrtOf(s0[i] + a.eps);
    w[i] = w[i] + (div + w[i] * a.wd) * (-a.lr);
  } else if constexpr (K == OptimizerKind::kRmsProp) {
    const T gi = ClipValue(a.rescale * g[i] + a.wd * w[i], a.clip);
    s0[i] = (T(1) - a.gamma1) * (gi * gi) + a.gamma1 * s0[i];
    w[i] = ClipValue(w[i] - a.lr * (gi / SqrtOf(s0[i] + a.eps)), a.clip_w);
  } else {  // kRmsPropCentered (RMSPropAlexUpdateKernel): n, g, delta
    const T gi = ClipValue(a.rescale * g[i] + a.wd * w[i], a.clip);
    s0[i] = (T(1) - a.gamma1) * gi * gi + a.gamma1 * s0[i];
    s1[i] = (T(1) - a.gamma1) * gi + a.gamma1 * s1[i];
    s2[i] = a.gamma2 * s2[i] - (a.lr * gi / SqrtOf(s0[i] - s1[i] * s1[i] + a.eps));
    w[i] = ClipValue(w[i] + s2[i], a.clip_w);
  }
}

// Calls fn(std::integral_constant<OptimizerKind, k>{}): the loop inside fn sees the kind as a constant.
template <typename Fn>
void OptimizerKindSwitch(OptimizerKind k, Fn&& fn) {
  switch (k) {
    case OptimizerKind::kSgd: return fn(std::integral_constant<OptimizerKind, OptimizerKind::kSgd>{});
    case OptimizerKind::kSgdMom: return fn(std::integral_constant<OptimizerKind, OptimizerKind::kSgdMom>{});
    case OptimizerKind::kNag: return fn(std::integral_constant<OptimizerKind, OptimizerKind::kNag>{});
    case OptimizerKind::kAdam: return fn(std::integral_constant<OptimizerKind, OptimizerKind::kAdam>{});
    case OptimizerKind::kAdaGrad: return fn(std::integral_constant<OptimizerKind, OptimizerKind::kAdaGrad>{});
    case OptimizerKind::kRmsProp: return fn(std::integral_constant<OptimizerKind, OptimizerKind::kRmsProp>{});
    case OptimizerKind::kRmsPropCentered:
      return fn(std::integral_constant<OptimizerKind, OptimizerKind::kRmsPropCentered>{});
  }
}

// One update of weight from grad with the kind's states (OptimizerStateCount of them), float32 or float64,
// all on one GPU, enqueued on `stream` (the engine's cudaStream_t*). Throws troupe::Error on a CUDA
// failure, or in a build without CUDA.
void GpuOptimizerStep(OptimizerKind kind, const OptimizerScalars& scalars, const TBlob& weight, const TBlob& grad,
                      const std::vector<TBlob>& states, void* stream);

}  // namespace troupe::internal
