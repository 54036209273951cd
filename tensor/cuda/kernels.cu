// CUDA side of the NDArray layer: device memory, copies, elementwise kernels, random sampling (Philox, the
// same numbers as the CPU kernels for the same key and counter) and cuBLAS matrix products. Built into the
// GPU backend (libtroupe_gpu.so); the tensor module reaches these through GpuKernelTable (kernels_forward.cc).
// The backend is linked with -Bsymbolic-functions, so its own calls (op/'s .cu files calling GpuGemm) and the
// table's addresses bind to these definitions, not to the same-named forwarders of libtroupe_tensor.
//
// Every function enqueues on the stream it is given and returns; errors (launch failures, cuBLAS status)
// throw troupe::Error, which the engine turns into a poisoned variable.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>
#include <type_traits>

#include "tensor/detail/cuda_common.h"
#include "tensor/detail/elementwise.h"
#include "tensor/detail/kernels.h"
#include "tensor/detail/philox.h"
#include "tensor/internal/gpu_table.h"
#include "tensor/resource.h"

namespace troupe::internal {

namespace {

// Grid-stride loops (TROUPE_GRID_LOOP): any n fits in the grid.
template <typename T>
__global__ void BinaryKernel(BinaryOp op, const T* a, const T* b, T* o, std::int64_t n) {
  using C = Compute<T>;
  TROUPE_GRID_LOOP(i, n) { o[i] = T(ApplyBinary<C>(op, static_cast<C>(a[i]), static_cast<C>(b[i]))); }
}

template <typename T>
__global__ void BinaryScalarKernel(BinaryOp op, const T* a, Compute<T> s, T* o, std::int64_t n) {
  using C = Compute<T>;
  TROUPE_GRID_LOOP(i, n) { o[i] = T(ApplyBinary<C>(op, static_cast<C>(a[i]), s)); }
}

template <typename T>
__global__ void FillKernel(T* o, T v, std::int64_t n) {
  TROUPE_GRID_LOOP(i, n) { o[i] = v; }
}

template <typename I, typename O>
__global__ void CastKernel(const I* a, O* o, std::int64_t n) {
  TROUPE_GRID_LOOP(i, n) { o[i] = ConvertTo<O>(a[i]); }
}

__device__ inline float DevUniformFloat(std::uint32_t w) { return static_cast<float>(w >> 8) * (1.0f / 16777216.0f); }
__device__ inline double DevUniformDouble(std::uint32_t hi, std::uint32_t lo) {
  return static_cast<double>(((static_cast<std::uint64_t>(hi) << 32) | lo) >> 11) * (1.0 / 9007199254740992.0);
}

template <typename T>
__global__ void UniformKernel(T* o, std::int64_t n, std::uint64_t key, std::uint64_t base, double low, double high) {
  TROUPE_GRID_LOOP(i, n) {
    std::uint32_t r[4];
    if constexpr (std::is_same_v<T, double>) {
      PhiloxBlock(key, base + static_cast<std::uint64_t>(i) / 2, r);
      const int w = static_cast<int>(i % 2) * 2;
      o[i] = low + (high - low) * DevUniformDouble(r[w], r[w + 1]);
    } else {
      PhiloxBlock(key, base + static_cast<std::uint64_t>(i) / 4, r);
      const float lo = static_cast<float>(low), span = static_cast<float>(high - low);
      o[i] = T(lo + span * DevUniformFloat(r[i % 4]));
    }
  }
}

template <typename T>
__global__ void NormalKernel(T* o, std::int64_t n, std::uint64_t key, std::uint64_t base, double mean, double stddev) {
  TROUPE_GRID_LOOP(i, n) {
    std::uint32_t r[4];
    if constexpr (std::is_same_v<T, double>) {
      PhiloxBlock(key, base + static_cast<std::uint64_t>(i), r);
      const double u1 = 1.0 - DevUniformDouble(r[0], r[1]), u2 = DevUniformDouble(r[2], r[3]);
      o[i] = mean + stddev * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
    } else {
      PhiloxBlock(key, base + static_cast<std::uint64_t>(i) / 2, r);
      const int w = static_cast<int>(i % 2) * 2;
      const float u1 = 1.0f - DevUniformFloat(r[w]), u2 = DevUniformFloat(r[w + 1]);
      o[i] = T(static_cast<float>(mean) + static_cast<float>(stddev) * sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2));
    }
  }
}

}  // namespace

// ---- memory ----------------------------------------------------------------------------------------

void* GpuMalloc(int dev_id, std::size_t bytes, std::string* error) {
  cudaError_t e = cudaSetDevice(dev_id);
  void* p = nullptr;
  if (e == cudaSuccess) e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state for the retry
    *error = cudaGetErrorString(e);
    return nullptr;
  }
  return p;
}

void GpuFree(int dev_id, void* ptr) {
  if (cudaSetDevice(dev_id) == cudaSuccess) cudaFree(ptr);  // errors at exit (runtime unloading) are harmless
}

void* GpuHostAlloc(std::size_t bytes, std::string* error) {
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *error = cudaGetErrorString(e);
    return nullptr;
  }
  return p;
}

void GpuHostFree(void* ptr) { cudaFreeHost(ptr); }

bool GpuMemInfo(int dev_id, std::size_t* free_bytes, std::size_t* total_bytes) {
  if (cudaSetDevice(dev_id) != cudaSuccess) return false;
  return cudaMemGetInfo(free_bytes, total_bytes) == cudaSuccess;
}

void GpuCopy(void* dst, const void* src, std::size_t bytes, CopyKind kind, int dev_id, void* stream) {
  if (bytes == 0) return;
  SetDevice(dev_id);
  const cudaMemcpyKind k = kind == CopyKind::kHostToDevice   ? cudaMemcpyHostToDevice
                           : kind == CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                             : cudaMemcpyDeviceToDevice;
  Check(cudaMemcpyAsync(dst, src, bytes, k, StreamOf(stream)), "cudaMemcpyAsync");
}

void GpuCopyPeer(void* dst, int dst_dev, const void* src, int src_dev, std::size_t bytes, void* stream) {
  if (bytes == 0) return;
  SetDevice(dst_dev);
  Check(cudaMemcpyPeerAsync(dst, dst_dev, src, src_dev, bytes, StreamOf(stream)), "cudaMemcpyPeerAsync");
}

// ---- elementwise -----------------------------------------------------------------------------------

void GpuBinary(BinaryOp op, const TBlob& lhs, const TBlob& rhs, const TBlob& out, void* stream) {
  const std::int64_t n = out.Size();
  if (n == 0) return;
  SetDevice(out.ctx.dev_id);
  DTypeSwitch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      throw Error("arithmetic is not defined for dtype bool");
    } else {
      BinaryKernel<T><<<Blocks(n), kThreads, 0, StreamOf(stream)>>>(
          op, static_cast<const T*>(lhs.dptr), static_cast<const T*>(rhs.dptr), static_cast<T*>(out.dptr), n);
    }
  });
  CheckLaunch("elementwise kernel");
}

void GpuBinaryScalar(BinaryOp op, const TBlob& lhs, double scalar, const TBlob& out, void* stream) {
  const std::int64_t n = out.Size();
  if (n == 0) return;
  SetDevice(out.ctx.dev_id);
  DTypeSwitch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      throw Error("arithmetic is not defined for dtype bool");
    } else {
      using C = Compute<T>;
      const C s = static_cast<C>(ConvertTo<T>(scalar));
      BinaryScalarKernel<T><<<Blocks(n), kThreads, 0, StreamOf(stream)>>>(op, static_cast<const T*>(lhs.dptr), s,
                                                                          static_cast<T*>(out.dptr), n);
    }
  });
  CheckLaunch("elementwise scalar kernel");
}

void GpuFill(const TBlob& out, double value, void* stream) {
  const std::int64_t n = out.Size();
  if (n == 0) return;
  SetDevice(out.ctx.dev_id);
  DTypeSwitch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    FillKernel<T><<<Blocks(n), kThreads, 0, StreamOf(stream)>>>(static_cast<T*>(out.dptr), ConvertTo<T>(value), n);
  });
  CheckLaunch("fill kernel");
}

void GpuCast(const TBlob& in, const TBlob& out, void* stream) {
  const std::int64_t n = out.Size();
  if (n == 0) return;
  SetDevice(out.ctx.dev_id);
  DTypeSwitch(in.dtype, [&](auto in_tag) {
    using I = decltype(in_tag);
    DTypeSwitch(out.dtype, [&](auto out_tag) {
      using O = decltype(out_tag);
      CastKernel<I, O>
          <<<Blocks(n), kThreads, 0, StreamOf(stream)>>>(static_cast<const I*>(in.dptr), static_cast<O*>(out.dptr), n);
    });
  });
  CheckLaunch("cast kernel");
}

void GpuSample(Distribution dist, const TBlob& out, std::uint64_t key, std::uint64_t base, double p1, double p2,
               void* stream) {
  const std::int64_t n = out.Size();
  if (n == 0) return;
  SetDevice(out.ctx.dev_id);
  DTypeSwitch(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<Compute<T>>) {
      T* o = static_cast<T*>(out.dptr);
      if (dist == Distribution::kNormal) {
        NormalKernel<T><<<Blocks(n), kThreads, 0, StreamOf(stream)>>>(o, n, key, base, p1, p2);
      } else {
        UniformKernel<T><<<Blocks(n), kThreads, 0, StreamOf(stream)>>>(o, n, key, base, p1, p2);
      }
    } else {
      throw Error("random sampling needs a floating dtype");
    }
  });
  CheckLaunch("sampling kernel");
}

// ---- cuBLAS ----------------------------------------------------------------------------------------

void GpuGemm(const TBlob& a, const TBlob& b, const TBlob& c, bool transpose_a, bool transpose_b, int m, int n, int k,
             double alpha, double beta, void* stream) {
  if (m == 0 || n == 0) return;
  cublasHandle_t h = BlasHandle(c.ctx.dev_id, StreamOf(stream));
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
  const cublasOperation_t ob = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t oa = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int lda = transpose_a ? m : k, ldb = transpose_b ? k : n;
  if (c.dtype == DType::kFloat32) {
    const float al = static_cast<float>(alpha), be = static_cast<float>(beta);
    CheckBlas(cublasSgemm(h, ob, oa, n, m, k, &al, static_cast<const float*>(b.dptr), ldb > 0 ? ldb : 1,
                          static_cast<const float*>(a.dptr), lda > 0 ? lda : 1, &be, static_cast<float*>(c.dptr), n),
              "cublasSgemm");
  } else if (c.dtype == DType::kFloat64) {
    CheckBlas(cublasDgemm(h, ob, oa, n, m, k, &alpha, static_cast<const double*>(b.dptr), ldb > 0 ? ldb : 1,
                          static_cast<const double*>(a.dptr), lda > 0 ? lda : 1, &beta, static_cast<double*>(c.dptr), n),
              "cublasDgemm");
  } else {
    throw Error(std::string("Dot: dtype ") + DTypeName(c.dtype) + " is not supported on the GPU (float32, float64)");
  }
}

namespace {
const GpuKernelTable kTable{&GpuMalloc,  &GpuFree, &GpuHostAlloc, &GpuHostFree, &GpuMemInfo,
                                &GpuCopy,    &GpuCopyPeer, &GpuBinary, &GpuBinaryScalar, &GpuFill,
                                &GpuCast,    &GpuSample, &GpuGemm};
}  // namespace

}  // namespace troupe::internal

// The tensor module's entry into the GPU backend (kGpuKernelTableSymbol).
extern "C" __attribute__((visibility("default"))) const troupe::internal::GpuKernelTable* troupe_gpu_kernel_table() {
  return &troupe::internal::kTable;
}
