// The GPU backend, loaded on demand.
//
// In a build with CUDA, everything that needs CUDA (cudart, cuBLAS, cuDNN, NCCL) lives in one separately
// built module, libtroupe_gpu.so, that the troupe libraries open with dlopen the first time a GPU is asked
// for (Runtime::GpuCount(), a GPU or pinned-memory context, a GPU operator, KVStore "nccl"). A process that
// only uses CPU contexts never maps a CUDA library. The module registers its GPU operators when it is
// loaded. It is looked for, in order: at the path in TROUPE_GPU_MODULE (docs/settings.md), next to
// libtroupe_base.so (the build tree and an installed lib/ both put it there), then by the dynamic linker's
// own search (LD_LIBRARY_PATH, ...).
//
// Every function here is thread-safe; the module is loaded at most once per process and never unloaded.
#pragma once

#include <string>

namespace troupe {

// True when this build of troupe has a GPU backend (it was configured with CUDA).
bool GpuModuleBuilt();

// True when the GPU backend is loaded in this process. Never loads it.
bool GpuModuleLoaded();

// Loads the GPU backend if it is not loaded yet. Throws troupe::Error when the build has no CUDA or the
// module cannot be loaded; the message names the file and quotes the dynamic linker's reason (dlerror),
// e.g. the CUDA library it could not find. A failed load is not retried: later calls throw the same error.
void LoadGpuModule();

// Why the GPU backend is not available: "" when it is loaded or has not been tried yet, else the message
// LoadGpuModule() throws. Never loads it.
std::string GpuModuleError();

// The file the GPU backend was loaded from ("" when it is not loaded).
std::string GpuModulePath();

namespace internal {
// LoadGpuModule(), then the address of the module's extern "C" symbol `name` (the per-module function
// tables, see actors/detail/devices.h, tensor/detail/kernels.h, ...). Throws troupe::Error when it is absent.
void* GpuModuleSymbol(const char* name);

// The table a module's part of the backend exports: `symbol` names an extern "C" function taking nothing and
// returning a const Table*. Loads the backend on first use; throws troupe::Error as GpuModuleSymbol does (a
// later call tries again, and the loader throws its remembered failure).
template <typename Table>
const Table& GpuModuleTable(const char* symbol) {
  static const Table* const table = [symbol] {
    using Entry = const Table* (*)();
    return reinterpret_cast<Entry>(GpuModuleSymbol(symbol))();
  }();
  return *table;
}
}  // namespace internal

}  // namespace troupe
