// The process's address-space limit (RLIMIT_AS, set by `ulimit -v`), for code that must check before it
// calls a library that cannot fail cleanly when the space runs out: OpenBLAS's pthread build loops forever
// when it cannot map a work buffer (tensor/cpu/blas.cc), libgomp exits the process when it cannot start a
// thread. Such code asks AddressSpaceAvailable() first and, when it is false, throws troupe::Error with
// AddressSpaceNote() in the message (or uses fewer threads). Every function is thread-safe; without a limit
// they cost one getrlimit call.
#pragma once

#include <cstddef>
#include <string>

namespace troupe {

// The address-space limit in bytes; 0 when there is none.
std::size_t AddressSpaceLimit();

// Bytes of address space the process has mapped now (VmSize); 0 when unknown.
std::size_t AddressSpaceUsed();

// True when `bytes` more of address space can be mapped now: always without a limit; with one, it reserves
// that much (no memory, PROT_NONE) and releases it at once. Another thread may take the space right after.
bool AddressSpaceAvailable(std::size_t bytes);

// "the address-space limit (ulimit -v) is 977 MiB and 812 MiB of it are mapped", or "" without a limit.
std::string AddressSpaceNote();

// The work buffer OpenBLAS 0.3.21 (Debian's pthread build) maps for each of its threads when the thread
// starts, and for each thread that calls a BLAS routine while no free buffer is left: BUFFER_SIZE (128 MiB)
// plus a page, and a margin for the allocator. When it cannot map one, blas_memory_alloc retries forever
// (100% CPU, no error): troupe checks for this much space before it lets OpenBLAS need a new buffer.
inline constexpr std::size_t kOpenBlasBufferBytes = (std::size_t{129} << 20);

}  // namespace troupe
