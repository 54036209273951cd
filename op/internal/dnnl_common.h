// oneDNN (Debian's libdnnl, OpenMP runtime) for the CPU operators: the process's CPU engine, the calling
// worker's stream with its OpenMP team sized to the kernel-thread budget, memory descriptors of troupe's plain
// NCHW arrays, and a carver that lays a primitive's blocked buffers and scratchpad out in the operator's
// temp-space resource (an operator keeps memory between calls only on purpose: Convolution's reordered
// weights).
//
// Operators use oneDNN for float32 (and Convolution for bfloat16 too), where it is enabled (TROUPE_DNNL, default 1) and where it wins for the
// shape (each operator says which); their own kernels stay the reference and the fallback. oneDNN's types stay
// in op/'s .cc files: this header is internal and never included by a public one.
//
// Thread-safety: DnnlWinograd, DnnlEngine and DnnlEnabled (tensor/detail/kernels.h) are thread-safe;
// DnnlStream returns the calling thread's stream.
// oneDNN primitives are immutable and may run on several threads at once; an operator's cached primitives
// are entered by one engine worker at a time (the engine's contract for Operator objects).
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

#include "op/operator.h"
#include "tensor/detail/kernels.h"  // DnnlEnabled, UseCpuKernelThreads
#include "tensor/tensor.h"

namespace troupe::internal {

// False when TROUPE_DNNL_WINOGRAD=0 (read once): convolutions then use oneDNN's direct algorithm only.
bool DnnlWinograd();

// The CPU engine (created on first use). Every call also sizes the calling thread's OpenMP team to the
// kernel-thread budget of one engine worker (UseCpuKernelThreads: TROUPE_BLAS_THREADS, the budget OpenBLAS
// uses too), so that workers x kernel threads <= cores. Primitives are created with the engine, so they see
// that team size: oneDNN splits a primitive's work for the team size at creation, and another split rounds
// differently (a primitive made before the team was sized gave gradients that differed in the last bits).
const dnnl::engine& DnnlEngine();

// The calling thread's stream (its team sized as by DnnlEngine).
dnnl::stream& DnnlStream();

// The right padding that makes a window of `extent` with stride `stride` and left padding `pad` give exactly
// `out` outputs over `size` inputs (MXNet's floor or ceil rule); negative when no window reaches the last
// inputs.
inline std::int64_t DnnlRightPad(std::int64_t out, std::int64_t stride, std::int64_t extent, std::int64_t size,
                                 std::int64_t pad) {
  return (out - 1) * stride + extent - size - pad;
}

// A plain (row-major) descriptor of `shape` (float32 unless `type` says otherwise): ncdhw for 5 dimensions, nchw
// for 4, nc for 2, x for 1. With `groups` > 1 a 4-D weight shape (F, C/g, kh, kw) becomes the grouped goihw
// (g, F/g, C/g, kh, kw), a 5-D one (F, C/g, kd, kh, kw) the grouped goidhw.
dnnl::memory::desc PlainDesc(const TShape& shape, int groups = 1,
                             dnnl::memory::data_type type = dnnl::memory::data_type::f32);
// oneDNN's type for a troupe type it computes in here: f32, or bf16 (bfloat16); any other throws troupe::Error.
dnnl::memory::data_type DnnlType(DType dtype);
// Whether oneDNN runs bfloat16 primitives on this CPU: natively with AVX512-BF16 or AMX, emulated on plain
// AVX-512 (still faster than converting to float32); false before AVX-512, where troupe converts instead.
bool DnnlBf16();
// The channel-blocked layout oneDNN's convolutions run natively on this CPU (nChw16c with AVX-512, else nChw8c)
// for a 4-D float32 array, and whether `shape` can take it (4-D, at least one image, channels a multiple of the
// block). The executor's inference fusion keeps arrays between fused convolutions in it (op/detail/fusion.h).
dnnl::memory::desc BlockedDesc(const TShape& shape);
bool BlockedLayoutFits(const TShape& shape);
// Copies a float32 array of `shape` from one layout to the other (plain NCHW or BlockedDesc), on the calling
// thread's stream; waits for it.
void ReorderLayout(const void* from, bool from_blocked, void* to, bool to_blocked, const TShape& shape);
dnnl::memory::dims Dims(const TShape& shape);

// Lays buffers out in one block of temp space: Reserve every buffer's size first (each returns its offset),
// then Bind the block and reach each buffer with At(offset). Buffers are 64-byte aligned.
class DnnlSpace {
 public:
  std::size_t Reserve(std::size_t bytes);  // returns the buffer's offset
  std::size_t bytes() const { return bytes_; }
  void Bind(void* base) { base_ = static_cast<char*>(base); }
  void* At(std::size_t offset) const { return base_ + offset; }

 private:
  std::size_t bytes_ = 0;
  char* base_ = nullptr;
};

// A tensor as one primitive argument sees it: the user's plain array, or a buffer in temp space in the layout
// the primitive wants, which a reorder fills from the user's array (an input) or empties into it (an
// output). An output under kAddTo always goes through its buffer and is summed onto the user's array by the
// reorder. Plan once per shape; In, or Out then Leave, on every call.
struct DnnlArg {
  dnnl::memory::desc user;  // the user's layout
  dnnl::memory::desc want;  // the primitive's
  std::size_t offset = 0;   // of the buffer in the DnnlSpace (inputs: only when the layouts differ)
  bool reordered = false;   // the layouts differ
  dnnl::reorder to_want, to_user, add_to_user;

  // space null: an input whose reordered copy the caller keeps itself (its reorder is made, no buffer
  // reserved; In is not used).
  void Plan(const dnnl::memory::desc& user_desc, const dnnl::memory::desc& primitive_desc, bool is_output,
            DnnlSpace* space);
  dnnl::memory In(const void* user_ptr, const DnnlSpace& space, dnnl::stream& stream) const;
  dnnl::memory Out(void* user_ptr, const DnnlSpace& space, OpReqType req) const;
  void Leave(const dnnl::memory& m, void* user_ptr, dnnl::stream& stream, OpReqType req) const;
};

// oneDNN's exception as a troupe::Error naming the operator.
[[noreturn]] void ThrowDnnl(const char* op, const dnnl::error& e);

}  // namespace troupe::internal
