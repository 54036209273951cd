// The interleaved attention products on the GPU: every product of interleaved_matmul.cc's CPU operator as one
// cuBLAS strided-batched GEMM over the attention batches, reading and writing the heads' blocks in place in
// the interleaved arrays (leading dimension = the array's row stride, batch stride = one head's block:
// interleaved_matmul.h), as MXNet's transformer.cu does; float32 (no TF32: the handle keeps cuBLAS's default
// math) and float64. Gradients of interleaved arrays that receive only some slices (the values of
// selfatt_qk, the queries and keys of the valatt kinds, the values of encdec_qk) are zeroed first under
// kWriteTo and then accumulated into, as on the CPU.
//
// One cuBLAS handle per worker thread and device (the tensor module's GpuGemm keeps its own the same way);
// engine workers are dedicated threads, so a handle is never used by two at once. Registers with
// RegisterGpuOperator from a static initialiser; compiled only with CUDA.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "op/internal/op_util.h"
#include "op/nn/common/cuda_kernels.cuh"
#include "op/nn/transformer/interleaved_matmul.h"
#include "tensor/detail/cuda_common.h"

namespace troupe {

namespace {

using interleaved::InterleavedMatMulParam;
using interleaved::KeySlice;
using interleaved::Kind;
using interleaved::NameOf;
using interleaved::OutSlice;
using interleaved::QuerySlice;
using interleaved::ScaleOf;
using interleaved::Sizes;
using interleaved::SizesOf;
using interleaved::Slice;
using interleaved::ValueSlice;
using internal::BlasHandle;
using internal::CheckBlas;

// This thread's handle for the stream's device, bound to the stream.
cublasHandle_t Handle(const RunContext& rctx, const char* op) {
  return BlasHandle(rctx.ctx.dev_id, nn_cuda::Prepare(rctx, op), op);
}

// One row-major matrix per attention batch: batch a's starts at ptr + a * stride, rows ld apart.
template <typename T>
struct Mat {
  T* ptr;
  std::int64_t ld, stride;
};
// A head's block of an interleaved array (base + slice offset, the slice's row and batch strides).
template <typename T>
Mat<T> Block(T* base, const Slice& s) {
  return {base + s.offset, s.row, s.batch};
}
// A contiguous (rows x cols) matrix per attention batch (the attention maps).
template <typename T>
Mat<T> Dense(T* base, std::int64_t rows, std::int64_t cols) {
  return {base, cols, rows * cols};
}

// For every attention batch: row-major C (m x n) = alpha op(A) op(B) + beta C, op(A) m x k, op(B) k x n.
// Column-major cuBLAS computes C^T = op(B)^T op(A)^T: the operands swap, each block's row stride is its
// leading dimension.
template <typename T>
void GemmBatched(cublasHandle_t h, bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, double alpha,
                 Mat<const T> a, Mat<const T> b, double beta, Mat<T> c, std::int64_t batch, const char* op) {
  if (m == 0 || n == 0 || batch == 0) return;
  const cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const T al = static_cast<T>(alpha), be = static_cast<T>(beta);
  auto ld = [](std::int64_t v) { return static_cast<int>(std::max<std::int64_t>(v, 1)); };
  if constexpr (sizeof(T) == 4) {
    CheckBlas(cublasSgemmStridedBatched(h, ob, oa, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &al,
                                        b.ptr, ld(b.ld), b.stride, a.ptr, ld(a.ld), a.stride, &be, c.ptr, ld(c.ld),
                                        c.stride, static_cast<int>(batch)),
              "cublasSgemmStridedBatched", op);
  } else {
    CheckBlas(cublasDgemmStridedBatched(h, ob, oa, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &al,
                                        b.ptr, ld(b.ld), b.stride, a.ptr, ld(a.ld), a.stride, &be, c.ptr, ld(c.ld),
                                        c.stride, static_cast<int>(batch)),
              "cublasDgemmStridedBatched", op);
  }
}

template <Kind kKind>
class InterleavedGpuOp final : public Operator {
 public:
  explicit InterleavedGpuOp(int heads) : heads_(heads) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    const char* op = NameOf(kKind);
    internal::FloatSwitch(in[0].dtype, op, [&](auto tag) {
      using T = decltype(tag);
      const Sizes z = SizesOf(kKind, heads_, in[0].shape, in[1 % in.size()].shape);
      const double beta = req[0] == kAddTo ? 1.0 : 0.0;
      cublasHandle_t h = Handle(ctx.run_ctx, op);
      T* o = static_cast<T*>(out[0].dptr);
      if constexpr (kKind == Kind::kSelfQK || kKind == Kind::kEncDecQK) {
        // attention[a] = scale q_a k_a^T.
        const T* x = static_cast<const T*>(in[0].dptr);
        const T* keys = kKind == Kind::kSelfQK ? x : static_cast<const T*>(in[1].dptr);
        GemmBatched<T>(h, false, true, z.sq, z.sk, z.d, ScaleOf<T>(z.d), Block(x, QuerySlice(kKind, z)),
                       Block(keys, KeySlice(kKind, z)), beta, Dense(o, z.sq, z.sk), z.attn(), op);
      } else {
        // out_a = attention[a] v_a, written into the output's head blocks.
        const T* x = static_cast<const T*>(in[0].dptr);
        const T* att = static_cast<const T*>(in[1].dptr);
        GemmBatched<T>(h, false, false, z.sq, z.d, z.sk, 1.0, Dense(att, z.sq, z.sk), Block(x, ValueSlice(kKind, z)),
                       beta, Block(o, OutSlice(kKind, z)), z.attn(), op);
      }
    });
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    const char* op = NameOf(kKind);
    internal::FloatSwitch(in[0].dtype, op, [&](auto tag) {
      using T = decltype(tag);
      const Sizes z = SizesOf(kKind, heads_, in[0].shape, in[1 % in.size()].shape);
      cublasHandle_t h = Handle(ctx.run_ctx, op);
      cudaStream_t s = nn_cuda::Prepare(ctx.run_ctx, op);
      const T* og = static_cast<const T*>(out_grad[0].dptr);
      if constexpr (kKind == Kind::kSelfQK || kKind == Kind::kEncDecQK) {
        // d(q_a) = scale dA_a k_a, d(k_a) = scale dA_a^T q_a.
        const bool self = kKind == Kind::kSelfQK;
        const T* x = static_cast<const T*>(in[0].dptr);
        const T* keys = self ? x : static_cast<const T*>(in[1].dptr);
        const OpReqType req_q = req[0], req_k = self ? req[0] : req[1];
        // The keys' array is zeroed under a write and then receives its slices; the queries' slices cover their
        // own array (encdec), so they are written under the request directly.
        if (req_k != kNullOp) nn_cuda::ZeroIfWritten(in_grad[self ? 0 : 1], req_k, s, op);
        const double beta_q = self || req_q == kAddTo ? 1.0 : 0.0;
        const double scale = ScaleOf<T>(z.d);
        const Mat<const T> ga = Dense(og, z.sq, z.sk);
        if (req_q != kNullOp) {
          T* gx = static_cast<T*>(in_grad[0].dptr);
          GemmBatched<T>(h, false, false, z.sq, z.d, z.sk, scale, ga, Block(keys, KeySlice(kKind, z)), beta_q,
                         Block(gx, QuerySlice(kKind, z)), z.attn(), op);
        }
        if (req_k != kNullOp) {
          T* gkeys = static_cast<T*>(in_grad[self ? 0 : 1].dptr);
          GemmBatched<T>(h, true, false, z.sk, z.d, z.sq, scale, ga, Block(x, QuerySlice(kKind, z)), 1.0,
                         Block(gkeys, KeySlice(kKind, z)), z.attn(), op);
        }
      } else {
        // d(v_a) = A_a^T dOut_a, dA_a = dOut_a v_a^T.
        const T* x = static_cast<const T*>(in[0].dptr);
        const T* att = static_cast<const T*>(in[1].dptr);
        const Mat<const T> gout = Block(og, OutSlice(kKind, z));
        if (req[0] != kNullOp) {
          nn_cuda::ZeroIfWritten(in_grad[0], req[0], s, op);
          T* gx = static_cast<T*>(in_grad[0].dptr);
          GemmBatched<T>(h, true, false, z.sk, z.d, z.sq, 1.0, Dense(att, z.sq, z.sk), gout, 1.0,
                         Block(gx, ValueSlice(kKind, z)), z.attn(), op);
        }
        if (req[1] != kNullOp) {
          T* gatt = static_cast<T*>(in_grad[1].dptr);
          GemmBatched<T>(h, false, true, z.sq, z.sk, z.d, 1.0, gout, Block(x, ValueSlice(kKind, z)),
                         req[1] == kAddTo ? 1.0 : 0.0, Dense(gatt, z.sq, z.sk), z.attn(), op);
        }
      }
    });
  }

 private:
  int heads_;
};

template <Kind kKind>
void Register() {
  RegisterGpuOperator(NameOf(kKind), [](const OperatorProperty& p, Context) -> std::unique_ptr<Operator> {
    InterleavedMatMulParam param;
    param.Init(p.GetParams(), NameOf(kKind));
    return std::make_unique<InterleavedGpuOp<kKind>>(param.heads);
  });
}

[[maybe_unused]] const bool kGpuRegistered = [] {
  Register<Kind::kSelfQK>();
  Register<Kind::kSelfValAtt>();
  Register<Kind::kEncDecQK>();
  Register<Kind::kEncDecValAtt>();
  return true;
}();

}  // namespace

}  // namespace troupe
