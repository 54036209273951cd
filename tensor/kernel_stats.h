// Counters the NDArray kernels keep about themselves, for benchmarks and profiles.
//
// Thread-safe: every function reads a process-wide atomic counter.
#pragma once

#include <cstdint>

namespace troupe {

// Nanoseconds all threads together have spent in CPU matrix products (CpuGemm) since the process
// started. A benchmark reads it before and after a run for the BLAS share of its time (`troupe bench train`'s
// in-run bound). Costs two clock reads per product.
std::int64_t CpuGemmNanoseconds();

// The library of float32 CPU matrix products: "oneDNN" (dnnl_sgemm) or "OpenBLAS" (TROUPE_DNNL=0, or a build
// without oneDNN), for benchmarks that time raw products beside the operators built on them.
const char* CpuSgemmLibrary();

}  // namespace troupe
