// The matrix operators on the GPU (transpose, SwapAxis, expand_dims, squeeze, reshape_like, reverse, tile,
// repeat, slice, slice_axis, slice_like, SliceChannel, stack): the operator of matrix.cc runs the properties'
// movements with this file's strided copy instead of the CPU's, so both devices share every shape rule and
// plan. Any element type, as on the CPU.
//
// The copy kernel gives each destination element to one thread: the plan's dimensions with a zero destination
// stride (a gradient of tile or repeat, where several output elements came from one input element) are
// walked inside the thread in the CPU's order, so kAddTo sums the same terms in the same order as the CPU and
// no two threads write one element. Kernels loop grid-stride on the stream the engine hands over; launch errors
// throw troupe::Error naming the operator. Registers its GPU code from a static initialiser; compiled only
// with CUDA.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>

#include "op/nn/common/cuda_kernels.cuh"
#include "op/nn/matrix/matrix.h"
#include "tensor/detail/cuda_common.h"

namespace troupe {

namespace {

using internal::Blocks;
using internal::Check;
using internal::CheckLaunch;
using internal::kThreads;
using matrix::CopyPlan;

// A simplified plan split into the dimensions that reach distinct destination elements (`outer`) and those
// with a zero destination stride (`reduce`, walked by one thread). Both keep the plan's order of dimensions.
struct SplitPlan {
  CopyPlan outer, reduce;
  std::int64_t outer_count = 1, reduce_count = 1;
};

SplitPlan Split(const CopyPlan& p) {
  SplitPlan s;
  s.outer.src_offset = p.src_offset;
  s.outer.dst_offset = p.dst_offset;
  for (int d = 0; d < p.ndim; ++d) {
    if (p.dst_stride[d] == 0) {
      s.reduce.Push(p.shape[d], p.src_stride[d], 0);
      s.reduce_count *= p.shape[d];
    } else {
      s.outer.Push(p.shape[d], p.src_stride[d], p.dst_stride[d]);
      s.outer_count *= p.shape[d];
    }
  }
  return s;
}

// Offsets (in elements) of index i of plan's dimensions, innermost last.
__device__ inline void Offsets(const CopyPlan& p, std::int64_t i, std::int64_t* src, std::int64_t* dst) {
  for (int d = p.ndim - 1; d >= 0; --d) {
    const std::int64_t c = i % p.shape[d];
    i /= p.shape[d];
    *src += c * p.src_stride[d];
    *dst += c * p.dst_stride[d];
  }
}

template <typename T, bool kAdd>
__global__ void CopyKernel(SplitPlan p, const T* src, T* dst) {
  TROUPE_GRID_LOOP(i, p.outer_count) {
    std::int64_t so = p.outer.src_offset, d = p.outer.dst_offset;
    Offsets(p.outer, i, &so, &d);
    T acc = kAdd ? dst[d] : T();
    for (std::int64_t r = 0; r < p.reduce_count; ++r) {
      std::int64_t s = so, unused = 0;
      Offsets(p.reduce, r, &s, &unused);
      if constexpr (kAdd) {
        acc = matrix::Add(acc, src[s]);
      } else {
        acc = src[s];
      }
    }
    dst[d] = acc;
  }
}

// An unsigned integer of N bytes: a plain copy moves bits, whatever the element type.
template <int N>
using Bits = std::conditional_t<N == 1, std::uint8_t,
                                std::conditional_t<N == 2, std::uint16_t,
                                                   std::conditional_t<N == 4, std::uint32_t, std::uint64_t>>>;

// RunCopy's contract on the GPU, enqueued on the run context's stream.
void RunCopyGpu(const CopyPlan& plan, const TBlob& src, const TBlob& dst, OpReqType req, const RunContext& rctx) {
  const std::optional<CopyPlan> to_run = matrix::PlanToRun(plan, src, dst, req);
  if (!to_run) return;
  cudaStream_t s = nn_cuda::Prepare(rctx, "matrix operator");
  const SplitPlan split = Split(*to_run);
  DTypeSwitch(dst.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (req == kAddTo) {
      CopyKernel<T, true><<<Blocks(split.outer_count), kThreads, 0, s>>>(split, static_cast<const T*>(src.dptr),
                                                                         static_cast<T*>(dst.dptr));
    } else {
      using B = Bits<sizeof(T)>;
      CopyKernel<B, false><<<Blocks(split.outer_count), kThreads, 0, s>>>(split, static_cast<const B*>(src.dptr),
                                                                          static_cast<B*>(dst.dptr));
    }
  });
  CheckLaunch("copy kernel", "matrix operator");
}

void ZeroFillGpu(const TBlob& b, const RunContext& rctx) {
  if (b.dptr == nullptr || !b.shape.known() || b.Bytes() == 0) return;
  Check(cudaMemsetAsync(b.dptr, 0, b.Bytes(), nn_cuda::Prepare(rctx, "matrix operator")), "cudaMemsetAsync",
        "matrix operator");
}

[[maybe_unused]] const bool kGpuRegistered = [] {
  for (const char* name : {"transpose", "SwapAxis", "expand_dims", "squeeze", "reshape_like", "reverse", "tile",
                           "repeat", "slice", "slice_axis", "slice_like", "SliceChannel", "stack"}) {
    RegisterGpuOperator(name, [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
      return matrix::MakeMatrixOperator(p.Copy(), RunCopyGpu, ZeroFillGpu);
    });
  }
  return true;
}();

}  // namespace

}  // namespace troupe
