// Vector math on float32 arrays for the CPU kernels: exp, tanh, the logistic sigmoid, log, erf and GELU (and the
// bfloat16 conversions), evaluated with
// polynomials that the compiler vectorises (no libm call in the loop), and dispatched at run time to the
// widest instruction set the processor has (AVX-512, AVX2 or the x86-64 baseline; GCC's target_clones): the
// shipped build needs no -march flag. The C library's expf/tanhf are scalar calls; these run 8-16 elements
// per instruction.
//
// Accuracy against the C library (tests/tensor/vector_math_test.cc checks it over the whole float range):
// exp and sigmoid within 2 ulp of the correctly rounded result where it is a normal float, tanh within 3 ulp.
// NaN in gives NaN out; exp overflows to +inf above about 88.72 and flushes to 0 below ln(FLT_MIN) = -87.34
// (no denormal results); tanh and sigmoid saturate to +-1 and 0/1 as the C library's do. log within 1 ulp
// (denormal inputs included; log(0) = -inf, log of a negative number NaN); erf within 6 ulp (and exactly
// +-1 beyond +-4); GELU is MXNet's 0.5 x (1 + erf(x / sqrt(2))) with that erf, so for x below about -2 it
// carries the formula's cancellation in 1 + erf (an absolute error of a few 1e-8 |x|), as MXNet's does.
//
// Thread-safety: pure functions. x and y may be the same array (in place) but must not otherwise overlap.
// Call them directly; do not take their addresses: they are GCC target_clones (IFUNCs), and a function pointer
// to one makes the dynamic loader run its resolver while relocating the caller's library, before a sanitizer's
// runtime is initialised (the ThreadSanitizer suites crashed at start-up that way).
#pragma once

#include <cstdint>

namespace troupe::internal {

void VecExp(const float* x, float* y, std::int64_t n);
void VecTanh(const float* x, float* y, std::int64_t n);
void VecSigmoid(const float* x, float* y, std::int64_t n);
void VecLog(const float* x, float* y, std::int64_t n);
void VecErf(const float* x, float* y, std::int64_t n);
void VecGelu(const float* x, float* y, std::int64_t n);

// float32 to bfloat16 (as its 16 bits; round to nearest even, NaN stays a quiet NaN: bf16_t's conversion) and
// back (exact), at memory speed: the half-precision operators convert through these.
void VecFloatToBf16(const float* x, std::uint16_t* y, std::int64_t n);
void VecBf16ToFloat(const std::uint16_t* x, float* y, std::int64_t n);

}  // namespace troupe::internal
