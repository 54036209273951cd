// CPU matrix products through OpenBLAS (cblas_sgemm / cblas_dgemm).
#include <cblas.h>

#include <atomic>
#include <chrono>

#include "tensor/detail/kernels.h"
#include "tensor/kernel_stats.h"

namespace troupe::internal {
namespace {

std::atomic<std::int64_t> gemm_ns{0};

// Adds the lifetime of the object to gemm_ns.
class GemmTimer {
 public:
  GemmTimer() : t0_(std::chrono::steady_clock::now()) {}
  ~GemmTimer() {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_);
    gemm_ns.fetch_add(ns.count(), std::memory_order_relaxed);
  }

 private:
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace

int CpuKernelThreads() { return openblas_get_num_threads(); }

void CpuGemm(const TBlob& a, const TBlob& b, const TBlob& c, bool transpose_a, bool transpose_b, int m, int n, int k,
             double alpha, double beta) {
  const CBLAS_TRANSPOSE ta = transpose_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = transpose_b ? CblasTrans : CblasNoTrans;
  // Row-major: A is m x k (k x m when transposed), B is k x n (n x k when transposed), C is m x n.
  const int lda = transpose_a ? m : k, ldb = transpose_b ? k : n, ldc = n;
  if (m == 0 || n == 0) return;
  const GemmTimer timer;
  switch (c.dtype) {
    case DType::kFloat32:
      cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, static_cast<float>(alpha), static_cast<const float*>(a.dptr),
                  lda > 0 ? lda : 1, static_cast<const float*>(b.dptr), ldb > 0 ? ldb : 1, static_cast<float>(beta),
                  static_cast<float*>(c.dptr), ldc);
      return;
    case DType::kFloat64:
      cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, static_cast<const double*>(a.dptr), lda > 0 ? lda : 1,
                  static_cast<const double*>(b.dptr), ldb > 0 ? ldb : 1, beta, static_cast<double*>(c.dptr), ldc);
      return;
    default:
      throw Error(std::string("Dot: dtype ") + DTypeName(c.dtype) + " is not supported on the CPU (float32, float64)");
  }
}

}  // namespace troupe::internal

namespace troupe {

std::int64_t CpuGemmNanoseconds() { return internal::gemm_ns.load(std::memory_order_relaxed); }

}  // namespace troupe
