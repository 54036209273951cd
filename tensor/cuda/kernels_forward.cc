// The NDArray GPU kernels as the tensor module sees them: forwarders to the GPU backend (libtroupe_gpu.so,
// where tensor/cuda/*.cu are built), loaded on first use (base/gpu_module.h). In a build without CUDA, or when
// the backend cannot be loaded, the allocators fail with the reason and the kernels throw it. (Storage
// rarely reaches them that way: it refuses GPU and pinned contexts first, when Runtime::GpuCount() is 0.)
#include "base/error.h"
#include "base/gpu_module.h"
#include "tensor/detail/kernels.h"
#include "tensor/internal/gpu_table.h"

namespace troupe::internal {

namespace {
// Throws troupe::Error (the loader's message: no CUDA in this build, or why the backend did not load).
const GpuKernelTable& Table() { return GpuModuleTable<GpuKernelTable>(kGpuKernelTableSymbol); }

// The table, or null with *error set.
const GpuKernelTable* TableOrError(std::string* error) {
  try {
    return &Table();
  } catch (const Error& e) {
    *error = e.what();
    return nullptr;
  }
}
}  // namespace

void* GpuMalloc(int dev_id, std::size_t bytes, std::string* error) {
  const GpuKernelTable* t = TableOrError(error);
  return t != nullptr ? t->malloc(dev_id, bytes, error) : nullptr;
}
void GpuFree(int dev_id, void* ptr) {
  if (GpuModuleLoaded()) Table().free(dev_id, ptr);  // nothing was allocated without the backend
}
void* GpuHostAlloc(std::size_t bytes, std::string* error) {
  const GpuKernelTable* t = TableOrError(error);
  return t != nullptr ? t->host_alloc(bytes, error) : nullptr;
}
void GpuHostFree(void* ptr) {
  if (GpuModuleLoaded()) Table().host_free(ptr);
}
bool GpuMemInfo(int dev_id, std::size_t* free_bytes, std::size_t* total_bytes) {
  std::string error;
  const GpuKernelTable* t = TableOrError(&error);
  return t != nullptr && t->mem_info(dev_id, free_bytes, total_bytes);
}
void GpuCopy(void* dst, const void* src, std::size_t bytes, CopyKind kind, int dev_id, void* stream) {
  Table().copy(dst, src, bytes, kind, dev_id, stream);
}
void GpuCopyPeer(void* dst, int dst_dev, const void* src, int src_dev, std::size_t bytes, void* stream) {
  Table().copy_peer(dst, dst_dev, src, src_dev, bytes, stream);
}
void GpuBinary(BinaryOp op, const TBlob& lhs, const TBlob& rhs, const TBlob& out, void* stream) {
  Table().binary(op, lhs, rhs, out, stream);
}
void GpuBinaryScalar(BinaryOp op, const TBlob& lhs, double scalar, const TBlob& out, void* stream) {
  Table().binary_scalar(op, lhs, scalar, out, stream);
}
void GpuFill(const TBlob& out, double value, void* stream) { Table().fill(out, value, stream); }
void GpuCast(const TBlob& in, const TBlob& out, void* stream) { Table().cast(in, out, stream); }
void GpuSample(Distribution dist, const TBlob& out, std::uint64_t key, std::uint64_t base, double p1, double p2,
               void* stream) {
  Table().sample(dist, out, key, base, p1, p2, stream);
}
void GpuGemm(const TBlob& a, const TBlob& b, const TBlob& c, bool transpose_a, bool transpose_b, int m, int n, int k,
             double alpha, double beta, void* stream) {
  Table().gemm(a, b, c, transpose_a, transpose_b, m, n, k, alpha, beta, stream);
}

}  // namespace troupe::internal
