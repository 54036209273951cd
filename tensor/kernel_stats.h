// Counters the NDArray kernels keep about themselves, for benchmarks and profiles.
//
// Thread-safe: every function reads a process-wide atomic counter.
#pragma once

#include <cstdint>

namespace troupe {

// Nanoseconds all threads together have spent in CPU matrix products (OpenBLAS GEMM) since the process
// started. A benchmark reads it before and after a run for the BLAS share of its time (`troupe bench train`'s
// in-run bound). Costs two clock reads per product.
std::int64_t CpuGemmNanoseconds();

}  // namespace troupe
