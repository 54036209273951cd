// The tensor module's compute kernels, behind one interface for both devices: Cpu* run on the calling thread
// (an engine worker), Gpu* enqueue on the CUDA stream they are given (tensor/cuda/*.cu, built into the GPU
// backend libtroupe_gpu.so and reached through the forwarders of tensor/cuda/kernels_forward.cc, which load it
// on first use); in a build without CUDA, or when the backend cannot be loaded, the Gpu* functions throw
// troupe::Error saying why. Kernels throw troupe::Error on
// failure; they never abort. Every function is thread-safe (it touches only the blobs it is given).
//
// Declared surface of the tensor module (detail/: never installed): NDArray uses it, and so do the operators
// of op/ (GEMM, fills, samples), which is why it is not in an internal/ folder.
//
// Every kernel takes TBlobs of identical shapes (the caller checked them) unless stated otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "tensor/tensor.h"

namespace troupe::internal {

// Throws troupe::Error unless `ctx` names a device of this machine (and build).
void CheckDeviceExists(Context ctx);

enum class BinaryOp { kAdd, kSub, kMul, kDiv };
const char* BinaryOpName(BinaryOp op);  // "add", "sub", "mul", "div": function names and messages

// ---- CPU (tensor/cpu/) ----
void CpuBinary(BinaryOp op, const TBlob& lhs, const TBlob& rhs, const TBlob& out);
// out = lhs op scalar
void CpuBinaryScalar(BinaryOp op, const TBlob& lhs, double scalar, const TBlob& out);
void CpuFill(const TBlob& out, double value);
// out = in converted to out.dtype (same element count).
void CpuCast(const TBlob& in, const TBlob& out);
// Random samples from a Philox stream (see tensor/resource.h): uniform in [p1, p2), or normal with mean p1 and
// standard deviation p2. Element i of a float-like array uses block base + i/4 (uniform) or base + i/2
// (normal); float64 uses twice the words.
enum class Distribution { kUniform, kNormal };
void CpuSample(Distribution dist, const TBlob& out, std::uint64_t key, std::uint64_t base, double p1, double p2);
// Philox blocks a sampling kernel of n elements of `dtype` consumes (so the generator can Reserve them).
std::uint64_t SampleBlocks(std::int64_t n, DType dtype, Distribution dist);
// Row-major C = alpha * op(A) * op(B) + beta * C with op(A) m x k, op(B) k x n (float32: oneDNN's sgemm where
// DnnlEnabled(), else OpenBLAS; float64: OpenBLAS).
void CpuGemm(const TBlob& a, const TBlob& b, const TBlob& c, bool transpose_a, bool transpose_b, int m, int n, int k,
             double alpha, double beta);
// CpuGemm's time is counted for CpuGemmNanoseconds() (tensor/kernel_stats.h).
// The threads one CPU kernel call may use: OpenBLAS's thread count, which the runtime sets from
// TROUPE_BLAS_THREADS so that engine workers x kernel threads <= cores.
int CpuKernelThreads();
// False when TROUPE_DNNL=0 (read once) or the build has no oneDNN: products and operators then use OpenBLAS
// and troupe's own kernels only.
bool DnnlEnabled();
// Sizes the calling thread's OpenMP team (oneDNN's threads) to CpuKernelThreads(); call before a oneDNN
// call. Nothing in a build without oneDNN.
void UseCpuKernelThreads();
// Runs fn(begin, end) over [0, n) cut into one contiguous range per thread of the calling thread's kernel team
// (at most CpuKernelThreads() ranges, none shorter than `grain`), and returns when all are done; the first
// exception a range throws is rethrown here. Serial (one call, fn(0, n)) in a build without oneDNN's OpenMP
// runtime, or when n < 2 * grain. For an operator's own loops over independent rows or planes.
void CpuParallelFor(std::int64_t n, std::int64_t grain, const std::function<void(std::int64_t, std::int64_t)>& fn);

// ---- GPU (tensor/cuda/) ----
// Memory: null with *error set when the allocation fails.
void* GpuMalloc(int dev_id, std::size_t bytes, std::string* error);
void GpuFree(int dev_id, void* ptr);
void* GpuHostAlloc(std::size_t bytes, std::string* error);
void GpuHostFree(void* ptr);
// Free and total memory of a GPU; false when it cannot be queried.
bool GpuMemInfo(int dev_id, std::size_t* free_bytes, std::size_t* total_bytes);

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };
// Asynchronous copy on `stream` (a cudaStream_t*); dev_id is the device the stream belongs to.
void GpuCopy(void* dst, const void* src, std::size_t bytes, CopyKind kind, int dev_id, void* stream);
void GpuCopyPeer(void* dst, int dst_dev, const void* src, int src_dev, std::size_t bytes, void* stream);

void GpuBinary(BinaryOp op, const TBlob& lhs, const TBlob& rhs, const TBlob& out, void* stream);
void GpuBinaryScalar(BinaryOp op, const TBlob& lhs, double scalar, const TBlob& out, void* stream);
void GpuFill(const TBlob& out, double value, void* stream);
void GpuCast(const TBlob& in, const TBlob& out, void* stream);
void GpuSample(Distribution dist, const TBlob& out, std::uint64_t key, std::uint64_t base, double p1, double p2,
               void* stream);
// cuBLAS (one handle per worker thread and device), row-major like CpuGemm.
void GpuGemm(const TBlob& a, const TBlob& b, const TBlob& c, bool transpose_a, bool transpose_b, int m, int n, int k,
             double alpha, double beta, void* stream);

}  // namespace troupe::internal
