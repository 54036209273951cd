// CPU matrix products: float32 through oneDNN's dnnl_sgemm where the build has oneDNN (faster than OpenBLAS
// on every shape measured here, 1.03-1.55x, and on the same OpenMP threads as oneDNN's operators, so that
// OpenBLAS's own thread pool never spins beside them: LeNet training 3060 -> 4100 images/s), float64 (and
// float32 without oneDNN) through OpenBLAS (cblas_sgemm / cblas_dgemm).
#include <cblas.h>
#if TROUPE_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#endif

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <string_view>

#include "base/address_space.h"
#include "base/error.h"
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

// One OpenBLAS call in flight. OpenBLAS gives each call a work buffer from its pool of slots, mapping a new
// one (kOpenBlasBufferBytes) only when every mapped slot is busy, and keeps slots mapped for the life of the
// process; when it cannot map one it spins forever (base/address_space.h). So a call needs new address space
// only when more calls run at once than ever before: only then, and only under an address-space limit, is
// the space checked, and the call refused with a troupe::Error instead of hanging.
class OpenBlasCall {
 public:
  OpenBlasCall(const char* routine, int m, int n, int k) {
    const int now = in_flight_.fetch_add(1, std::memory_order_acq_rel) + 1;
    int seen = most_.load(std::memory_order_acquire);
    if (now <= seen) return;
    if (!AddressSpaceAvailable(kOpenBlasBufferBytes)) {
      in_flight_.fetch_sub(1, std::memory_order_acq_rel);
      throw Error(std::string("Dot: OpenBLAS's ") + routine + " for " + std::to_string(m) + "x" + std::to_string(k) +
                  " times " + std::to_string(k) + "x" + std::to_string(n) + " needs a " +
                  std::to_string(kOpenBlasBufferBytes >> 20) + " MiB work buffer and cannot map it: " +
                  AddressSpaceNote() + "; raise the limit, or use fewer engine workers (TROUPE_CPU_WORKERS)");
    }
    while (now > seen && !most_.compare_exchange_weak(seen, now, std::memory_order_acq_rel)) {
    }
  }
  ~OpenBlasCall() { in_flight_.fetch_sub(1, std::memory_order_acq_rel); }
  OpenBlasCall(const OpenBlasCall&) = delete;
  OpenBlasCall& operator=(const OpenBlasCall&) = delete;

 private:
  static inline std::atomic<int> in_flight_{0};  // calls running now
  static inline std::atomic<int> most_{0};       // the most that ever ran at once (slots OpenBLAS has mapped)
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
  // check is a load and a compare.
  const int threads = CpuKernelThreads();
  thread_local int requested = 0;  // the budget this thread last followed
  thread_local int team = 1;       // the most threads this thread's OpenMP team has had
  if (threads == requested) return;
  requested = threads;
  // libgomp gives every calling thread its own team, and when it cannot start one of its threads it ends the
  // process ("libgomp: Thread creation failed") from inside a kernel. Under an address-space limit the team
  // grows only as far as the new threads' stacks fit (each warned about once per thread): fewer threads,
  // never an exit.
  int n = threads;
  if (n > team) {
    pthread_attr_t attr;
    std::size_t stack = std::size_t{8} << 20;
    if (pthread_getattr_default_np(&attr) == 0) {
      pthread_attr_getstacksize(&attr, &stack);
      pthread_attr_destroy(&attr);
    }
    const std::size_t per_thread = stack + (std::size_t{1} << 20);  // and a guard page, a TLS block
    while (n > team && !AddressSpaceAvailable(static_cast<std::size_t>(n - team) * per_thread)) --n;
    if (n < threads) {
      std::fprintf(stderr, "troupe: using %d OpenMP thread(s) for oneDNN on this worker, not %d: %s\n", n, threads,
                   AddressSpaceNote().c_str());
    }
    team = std::max(team, n);
  }
  if (omp_get_max_threads() != n) omp_set_num_threads(n);
#endif
}

void CpuParallelFor(std::int64_t n, std::int64_t grain, const std::function<void(std::int64_t, std::int64_t)>& fn) {
  if (n <= 0) return;
#if TROUPE_HAVE_DNNL
  const std::int64_t ranges = std::min<std::int64_t>(CpuKernelThreads(), n / std::max<std::int64_t>(grain, 1));
  if (ranges > 1) {
    // The same OpenMP team as oneDNN's calls from this thread (no second pool spinning beside it).
    UseCpuKernelThreads();
    std::exception_ptr error;
    std::atomic<bool> failed{false};
#pragma omp parallel num_threads(static_cast<int>(ranges))
    {
      const std::int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      const std::int64_t begin = n * t / nt, end = n * (t + 1) / nt;
      try {
        if (begin < end) fn(begin, end);
      } catch (...) {
        if (!failed.exchange(true)) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
    return;
  }
#else
  (void)grain;
#endif
  fn(0, n);
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
          const std::string note = st == dnnl_out_of_memory ? AddressSpaceNote() : "";
          throw Error("Dot: oneDNN's sgemm failed (status " + std::to_string(static_cast<int>(st)) +
                      (st == dnnl_out_of_memory ? ", out of memory" : "") + ") for " + std::to_string(m) + "x" +
                      std::to_string(k) + " times " + std::to_string(k) + "x" + std::to_string(n) +
                      (note.empty() ? "" : ": " + note));
        }
        return;
      }
#endif
    {
      const OpenBlasCall call("sgemm", m, n, k);
      cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, static_cast<float>(alpha), static_cast<const float*>(a.dptr),
                  lda > 0 ? lda : 1, static_cast<const float*>(b.dptr), ldb > 0 ? ldb : 1, static_cast<float>(beta),
                  static_cast<float*>(c.dptr), ldc);
      return;
    }
    case DType::kFloat64: {
      const OpenBlasCall call("dgemm", m, n, k);
      cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, static_cast<const double*>(a.dptr), lda > 0 ? lda : 1,
                  static_cast<const double*>(b.dptr), ldb > 0 ? ldb : 1, beta, static_cast<double*>(c.dptr), ldc);
      return;
    }
    default:
      throw Error(std::string("Dot: dtype ") + DTypeName(c.dtype) + " is not supported on the CPU (float32, float64)");
  }
}

}  // namespace troupe::internal

namespace troupe {

std::int64_t CpuGemmNanoseconds() { return internal::gemm_ns.load(std::memory_order_relaxed); }

const char* CpuSgemmLibrary() { return internal::DnnlEnabled() ? "oneDNN" : "OpenBLAS"; }

}  // namespace troupe
