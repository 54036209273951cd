// CPU matrix products: float32 through oneDNN's dnnl_sgemm where the build has oneDNN (faster than OpenBLAS
// on every shape measured here, 1.03-1.55x, and on the same OpenMP threads as oneDNN's operators, so that
// OpenBLAS's own thread pool never spins beside them: LeNet training 3060 -> 4100 images/s), float64 (and
// float32 without oneDNN) through OpenBLAS (cblas_sgemm / cblas_dgemm).
#include <cblas.h>
#if TROUPE_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#endif

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <string_view>

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

bool DnnlEnabled() {
#if TROUPE_HAVE_DNNL
  static const bool enabled = [] {
    const char* v = std::getenv("TROUPE_DNNL");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return enabled;
#else
  return false;
#endif
}

void UseCpuKernelThreads() {
#if TROUPE_HAVE_DNNL
  // The budget can change while the process runs (more CPU devices started): follow it on every call; the
  // check is two loads.
  const int threads = CpuKernelThreads();
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
#endif
}

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
#if TROUPE_HAVE_DNNL
      if (k > 0 && DnnlEnabled()) {
        UseCpuKernelThreads();
        const dnnl_status_t st =
            dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n, k, static_cast<float>(alpha),
                       static_cast<const float*>(a.dptr), lda, static_cast<const float*>(b.dptr), ldb,
                       static_cast<float>(beta), static_cast<float*>(c.dptr), ldc);
        if (st != dnnl_success) {
          throw Error("Dot: oneDNN's sgemm failed (status " + std::to_string(static_cast<int>(st)) + ") for " +
                      std::to_string(m) + "x" + std::to_string(k) + " times " + std::to_string(k) + "x" +
                      std::to_string(n));
        }
        return;
      }
#endif
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

const char* CpuSgemmLibrary() { return internal::DnnlEnabled() ? "oneDNN" : "OpenBLAS"; }

}  // namespace troupe
