// The NDArray GPU kernels in a build without CUDA: every entry point says so. (Storage never reaches them: it
// refuses GPU and pinned contexts first, since Runtime::GpuCount() is 0.)
#include "tensor/detail/kernels.h"

namespace troupe::internal {

namespace {
[[noreturn]] void NoCuda(const char* what) {
  throw Error(std::string(what) + ": troupe was built without CUDA (configure with nvcc present, or "
              "-DTROUPE_USE_CUDA=ON); use Context::CPU()");
}
}  // namespace

void* GpuMalloc(int, std::size_t, std::string* error) {
  *error = "troupe was built without CUDA";
  return nullptr;
}
void GpuFree(int, void*) {}
void* GpuHostAlloc(std::size_t, std::string* error) {
  *error = "troupe was built without CUDA";
  return nullptr;
}
void GpuHostFree(void*) {}
bool GpuMemInfo(int, std::size_t*, std::size_t*) { return false; }
void GpuCopy(void*, const void*, std::size_t, CopyKind, int, void*) { NoCuda("GPU copy"); }
void GpuCopyPeer(void*, int, const void*, int, std::size_t, void*) { NoCuda("GPU peer copy"); }
void GpuBinary(BinaryOp, const TBlob&, const TBlob&, const TBlob&, void*) { NoCuda("GPU elementwise"); }
void GpuBinaryScalar(BinaryOp, const TBlob&, double, const TBlob&, void*) { NoCuda("GPU elementwise"); }
void GpuFill(const TBlob&, double, void*) { NoCuda("GPU fill"); }
void GpuCast(const TBlob&, const TBlob&, void*) { NoCuda("GPU cast"); }
void GpuSample(Distribution, const TBlob&, std::uint64_t, std::uint64_t, double, double, void*) {
  NoCuda("GPU sampling");
}
void GpuGemm(const TBlob&, const TBlob&, const TBlob&, bool, bool, int, int, int, double, double, void*) {
  NoCuda("GPU Dot");
}

}  // namespace troupe::internal
