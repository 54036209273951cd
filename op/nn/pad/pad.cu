// Pad on the GPU: pad.h's SourceIndex per axis, one thread per output element (forward) and one thread per
// input element (backward: the sum of the head gradients of the output positions that copy it, visited in
// increasing output order, so a written gradient is summed in T in the CPU's order). A 4-D input is run as
// 5-D with a leading spatial axis of size 1. float32 and float64.
//
// Kernels loop grid-stride and are enqueued on the stream the engine hands over; launch errors throw
// troupe::Error naming the operator. Registers its GPU code from a static initialiser; compiled only with
// CUDA.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "op/internal/op_util.h"
#include "op/nn/common/cuda_kernels.cuh"
#include "op/nn/pad/pad.h"
#include "tensor/detail/cuda_common.h"

namespace troupe {

namespace {

using internal::Blocks;
using internal::CheckLaunch;
using internal::kThreads;
using nn_cuda::Prepare;

constexpr const char* kName = "Pad";

// Three spatial axes (a 4-D input's first is 1 wide, unpadded) and the number of (N, C) slices.
struct Geometry {
  std::int64_t slices;
  std::int64_t in[3], out[3], before[3];
  char mode;
  TROUPE_HOST_DEVICE std::int64_t InSlice() const { return in[0] * in[1] * in[2]; }
  TROUPE_HOST_DEVICE std::int64_t OutSlice() const { return out[0] * out[1] * out[2]; }
};

Geometry GeometryOf(const TShape& in, const TShape& out, const std::vector<std::int64_t>& pad, char mode) {
  Geometry g{};
  g.slices = in[0] * in[1];
  g.mode = mode;
  const int lead = 5 - in.ndim();  // 1 for a 4-D input
  for (int a = 0; a < 3; ++a) {
    const int axis = a + 2 - lead;  // the input's axis, < 2 for the added one
    g.in[a] = axis >= 2 ? in[axis] : 1;
    g.out[a] = axis >= 2 ? out[axis] : 1;
    g.before[a] = axis >= 2 ? pad[2 * axis] : 0;
  }
  return g;
}

template <typename T>
__global__ void ForwardKernel(const T* x, T* y, Geometry g, T value, OpReqType req) {
  const std::int64_t out_slice = g.OutSlice(), in_slice = g.InSlice();
  TROUPE_GRID_LOOP(i, g.slices * out_slice) {
    std::int64_t q = i % out_slice;
    const std::int64_t o2 = q % g.out[2];
    q /= g.out[2];
    const std::int64_t o1 = q % g.out[1], o0 = q / g.out[1];
    const std::int64_t s0 = padding::SourceIndex(o0, g.in[0], g.before[0], g.mode);
    const std::int64_t s1 = padding::SourceIndex(o1, g.in[1], g.before[1], g.mode);
    const std::int64_t s2 = padding::SourceIndex(o2, g.in[2], g.before[2], g.mode);
    const bool pad = s0 < 0 || s1 < 0 || s2 < 0;
    Assign(y + i, req, pad ? value : x[(i / out_slice) * in_slice + (s0 * g.in[1] + s1) * g.in[2] + s2]);
  }
}

// The output positions of one axis that copy input position j: up to three ranges [lo, hi), ascending.
struct Ranges {
  int count = 0;
  std::int64_t lo[3], hi[3];
  TROUPE_HOST_DEVICE void Add(std::int64_t l, std::int64_t h) {
    lo[count] = l;
    hi[count] = h;
    ++count;
  }
};
TROUPE_HOST_DEVICE inline Ranges SourcesOf(std::int64_t j, std::int64_t n, std::int64_t before, std::int64_t m,
                                           char mode) {
  Ranges r;
  const std::int64_t center = j + before;
  if (mode == 'c') {
    r.Add(center, center + 1);
  } else if (mode == 'e') {
    // The first position also fills the padding before, the last the padding after.
    r.Add(j == 0 ? 0 : center, j == n - 1 ? m : center + 1);
  } else {
    // reflect: output o < before copies before - o; output o >= before + n copies 2 (n - 1) - (o - before).
    if (j >= 1 && j <= before) r.Add(before - j, before - j + 1);
    r.Add(center, center + 1);
    const std::int64_t right = before + 2 * (n - 1) - j;
    if (right >= before + n && right < m) r.Add(right, right + 1);
  }
  return r;
}

template <typename T>
__global__ void BackwardKernel(const T* og, T* gx, Geometry g, OpReqType req) {
  const std::int64_t out_slice = g.OutSlice(), in_slice = g.InSlice();
  TROUPE_GRID_LOOP(i, g.slices * in_slice) {
    std::int64_t q = i % in_slice;
    const std::int64_t j2 = q % g.in[2];
    q /= g.in[2];
    const std::int64_t j1 = q % g.in[1], j0 = q / g.in[1];
    const Ranges r0 = SourcesOf(j0, g.in[0], g.before[0], g.out[0], g.mode);
    const Ranges r1 = SourcesOf(j1, g.in[1], g.before[1], g.out[1], g.mode);
    const Ranges r2 = SourcesOf(j2, g.in[2], g.before[2], g.out[2], g.mode);
    const T* src = og + (i / in_slice) * out_slice;
    T acc = T(0);
    for (int a = 0; a < r0.count; ++a) {
      for (std::int64_t o0 = r0.lo[a]; o0 < r0.hi[a]; ++o0) {
        for (int b = 0; b < r1.count; ++b) {
          for (std::int64_t o1 = r1.lo[b]; o1 < r1.hi[b]; ++o1) {
            const T* row = src + (o0 * g.out[1] + o1) * g.out[2];
            for (int c = 0; c < r2.count; ++c) {
              for (std::int64_t o2 = r2.lo[c]; o2 < r2.hi[c]; ++o2) acc += row[o2];
            }
          }
        }
      }
    }
    Assign(gx + i, req, acc);
  }
}

class PadGpuOp final : public Operator {
 public:
  explicit PadGpuOp(const PadParam& p) : p_(p), mode_(p.mode[0]) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const std::int64_t n = out[0].Size();
    internal::FloatSwitch(in[0].dtype, kName, [&](auto tag) {
      using T = decltype(tag);
      if (n == 0) return;
      cudaStream_t s = Prepare(ctx.run_ctx, kName);
      const Geometry g = GeometryOf(in[0].shape, out[0].shape, p_.pad_width, mode_);
      ForwardKernel<T><<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(in[0].dptr), static_cast<T*>(out[0].dptr),
                                                      g, static_cast<T>(p_.constant_value), req[0]);
      CheckLaunch("pad kernel", kName);
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>&,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const std::int64_t n = in_grad[0].Size();
    internal::FloatSwitch(in_grad[0].dtype, kName, [&](auto tag) {
      using T = decltype(tag);
      if (n == 0) return;
      cudaStream_t s = Prepare(ctx.run_ctx, kName);
      const Geometry g = GeometryOf(in_grad[0].shape, out_grad[0].shape, p_.pad_width, mode_);
      BackwardKernel<T><<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(out_grad[0].dptr),
                                                       static_cast<T*>(in_grad[0].dptr), g, req[0]);
      CheckLaunch("pad gradient kernel", kName);
    });
  }

 private:
  PadParam p_;
  char mode_;
};

[[maybe_unused]] const bool kGpuRegistered = [] {
  RegisterGpuOperator(kName, [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
    PadParam param;
    param.Init(p.GetParams(), kName);
    return std::make_unique<PadGpuOp>(param);
  });
  return true;
}();

}  // namespace

}  // namespace troupe
