// The CPU anchors' shared kernels (see cpu_kernels.h).
#include "bench/common/cpu_kernels.h"

#include <cblas.h>
#if TROUPE_HAVE_DNNL
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#endif

#include <cstring>
#include <string>

#include "base/error.h"
#include "tensor/kernel_stats.h"

extern "C" int openblas_get_num_threads(void);

namespace troupe::bench {

bool DnnlInUse() { return std::strcmp(CpuSgemmLibrary(), "oneDNN") == 0; }

std::string SgemmLibrary() { return DnnlInUse() ? "oneDNN dnnl_sgemm" : "OpenBLAS cblas_sgemm"; }

void Sgemm(bool transpose_a, bool transpose_b, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
           float beta, float* c, int ldc) {
#if TROUPE_HAVE_DNNL
  if (DnnlInUse()) {
    // The engine workers' kernel-thread budget (TROUPE_BLAS_THREADS), as the operators' calls use it.
    if (omp_get_max_threads() != openblas_get_num_threads()) omp_set_num_threads(openblas_get_num_threads());
    if (dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc) !=
        dnnl_success) {
      throw Error("dnnl_sgemm failed for " + std::to_string(m) + "x" + std::to_string(k) + " times " +
                  std::to_string(k) + "x" + std::to_string(n));
    }
    return;
  }
#endif
  cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans, transpose_b ? CblasTrans : CblasNoTrans, m, n,
              k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

Body OnWorker(Context ctx, VarHandle var, std::function<void()> call) {
  return [ctx, var, call = std::move(call)](std::int64_t calls, Clock::time_point deadline) {
    return TimedLoop(calls, deadline, [&] { RunOnWorker(ctx, var, call); });
  };
}

void RunOnWorker(Context ctx, VarHandle var, const std::function<void()>& call) {
  Engine* engine = Engine::Get();
  engine->PushSync([&call](RunContext) { call(); }, ctx, {}, {var});
  engine->WaitForVar(var);
}

AnchorVar::AnchorVar() : var_(Engine::Get()->NewVariable()) {}

AnchorVar::~AnchorVar() {
  Engine::Get()->DeleteVariable([](RunContext) {}, Context::CPU(0), var_);
  Engine::Get()->WaitForAll();
}

}  // namespace troupe::bench
