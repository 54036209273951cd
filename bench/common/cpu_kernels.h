// What the CPU anchors of the benchmarks share: the matrix product in the library the operators' products use
// (oneDNN's dnnl_sgemm, or OpenBLAS with TROUPE_DNNL=0 or without oneDNN), and anchors run on the engine
// worker that runs the operators.
//
// Why on the worker: oneDNN's threads are an OpenMP team per calling thread. A second thread calling oneDNN
// starts a second team; its idle threads spin beside the first team's on the same cores, and with more OpenMP
// threads than cores libgomp's idle threads sleep after a short spin, so that every small parallel region then
// waits for futex wake-ups (the LeNet layer's sgemm bound fell from 68 to 10 GFLOP/s here). OpenBLAS's own
// thread pool (TROUPE_DNNL=0) spins beside an OpenMP team the same way.
//
// Thread-safety: Sgemm is thread-safe; OnWorker's body is called by the measuring thread.
#pragma once

#include <functional>
#include <string>

#include "base/context.h"
#include "bench/common/measure.h"
#include "engine/engine.h"

namespace troupe::bench {

// Whether the operators' products and kernels use oneDNN in this process (CpuSgemmLibrary, tensor/kernel_stats.h).
bool DnnlInUse();

// "oneDNN dnnl_sgemm" or "OpenBLAS cblas_sgemm": what Sgemm calls.
std::string SgemmLibrary();

// Row-major C = op(A) op(B) + beta C (alpha 1), op(A) m x k, op(B) k x n, in SgemmLibrary() with the engine
// workers' kernel-thread count. Throws troupe::Error when the library reports a failure.
void Sgemm(bool transpose_a, bool transpose_b, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
           float beta, float* c, int ldc);

// An anchor's body whose calls each run as one engine function on `ctx`'s worker, waited for as the
// operators' calls are (one push and one WaitForVar per call, which an operator call pays too). `var` orders
// the calls; the caller owns it (AnchorVar).
Body OnWorker(Context ctx, VarHandle var, std::function<void()> call);

// Runs `call` once as an engine function on `ctx`'s worker and waits for it (anchors that set up oneDNN
// primitives do it there, for the reason above).
void RunOnWorker(Context ctx, VarHandle var, const std::function<void()>& call);

// A variable for OnWorker, deleted (after every function that uses it) when the scope ends.
class AnchorVar {
 public:
  AnchorVar();
  ~AnchorVar();
  AnchorVar(const AnchorVar&) = delete;
  AnchorVar& operator=(const AnchorVar&) = delete;
  VarHandle get() const { return var_; }

 private:
  VarHandle var_;
};

}  // namespace troupe::bench
