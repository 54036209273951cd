// The GPU backend's loader (base/gpu_module.h). TROUPE_GPU_MODULE_FILE (the module's file name) and
// TROUPE_GPU_MODULE_VERSION are defined for this file alone, by base/CMakeLists.txt, in a build with CUDA.
#include "base/gpu_module.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "base/error.h"

namespace troupe {
namespace {

constexpr const char* kNoCuda =
    "this build of troupe has no CUDA (it was configured without nvcc, or with -DTROUPE_USE_CUDA=OFF); use a "
    "CPU context (cpu:0), or rebuild troupe with CUDA";

struct ModuleState {
  std::mutex mu;       // held while loading
  bool tried = false;  // under mu
  std::string path;    // under mu; the file loaded
  std::string error;   // under mu; set when the load failed
  std::atomic<void*> handle{nullptr};
};

ModuleState& State() {
  static ModuleState s;
  return s;
}

#ifdef TROUPE_GPU_MODULE_FILE
bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// The folder of the library this function is in (libtroupe_base.so), with a trailing '/'; "" if unknown.
std::string OwnFolder() {
  Dl_info info;
  if (::dladdr(reinterpret_cast<void*>(&OwnFolder), &info) == 0 || info.dli_fname == nullptr) return "";
  std::string f = info.dli_fname;
  const auto slash = f.rfind('/');
  return slash == std::string::npos ? "" : f.substr(0, slash + 1);
}

std::string DlError() {
  const char* e = ::dlerror();
  return e != nullptr ? e : "unknown dynamic linker error";
}

// Loads the module; on failure fills *error. Called once, under State().mu.
void* Open(std::string* path, std::string* error) {
  const char* env = std::getenv("TROUPE_GPU_MODULE");
  std::string candidate;
  if (env != nullptr && *env != '\0') {
    candidate = env;  // chosen by the user: no fallback
  } else {
    const std::string beside = OwnFolder() + TROUPE_GPU_MODULE_FILE;
    // Not next to libtroupe_base.so: let the dynamic linker search (LD_LIBRARY_PATH, RUNPATH, ld.so.cache).
    candidate = FileExists(beside) ? beside : std::string(TROUPE_GPU_MODULE_FILE);
  }
  *path = candidate;
  // RTLD_LOCAL: the module's symbols do not become visible to later lookups; RTLD_NODELETE: its
  // registered operators stay valid even if someone dlcloses it.
  void* h = ::dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (h == nullptr) {
    *error = "cannot load troupe's GPU backend " + candidate + ": " + DlError() +
             (env != nullptr && *env != '\0' ? " (the path is TROUPE_GPU_MODULE's)" : "") +
             ". GPUs need that file (TROUPE_GPU_MODULE names it) and the CUDA runtime, cuBLAS, cuDNN and NCCL "
             "where the dynamic linker finds them (LD_LIBRARY_PATH); or use a CPU context (cpu:0)";
    return nullptr;
  }
  using VersionFn = const char* (*)();
  auto version = reinterpret_cast<VersionFn>(::dlsym(h, "troupe_gpu_module_version"));
  if (version == nullptr || std::strcmp(version(), TROUPE_GPU_MODULE_VERSION) != 0) {
    *error = "cannot use troupe's GPU backend " + candidate + ": it is not the one built with this troupe (" +
             (version == nullptr ? std::string("no version") : "version " + std::string(version())) + ", expected " +
             TROUPE_GPU_MODULE_VERSION + "); point TROUPE_GPU_MODULE at the right file";
    return nullptr;
  }
  return h;
}
#endif  // TROUPE_GPU_MODULE_FILE

}  // namespace

bool GpuModuleBuilt() {
#ifdef TROUPE_GPU_MODULE_FILE
  return true;
#else
  return false;
#endif
}

bool GpuModuleLoaded() { return State().handle.load(std::memory_order_acquire) != nullptr; }

void LoadGpuModule() {
  ModuleState& s = State();
  if (s.handle.load(std::memory_order_acquire) != nullptr) return;
#ifdef TROUPE_GPU_MODULE_FILE
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.tried) {
    s.tried = true;
    void* h = Open(&s.path, &s.error);
    s.handle.store(h, std::memory_order_release);
  }
  if (s.handle.load(std::memory_order_relaxed) == nullptr) throw Error(s.error);
#else
  throw Error(kNoCuda);
#endif
}

std::string GpuModuleError() {
  if (!GpuModuleBuilt()) return kNoCuda;
  ModuleState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.error;
}

std::string GpuModulePath() {
  ModuleState& s = State();
  if (s.handle.load(std::memory_order_acquire) == nullptr) return "";
  std::lock_guard<std::mutex> lock(s.mu);
  return s.path;
}

namespace internal {
void* GpuModuleSymbol(const char* name) {
  LoadGpuModule();
  void* h = State().handle.load(std::memory_order_acquire);
  void* sym = ::dlsym(h, name);
  if (sym == nullptr) {
    throw Error("troupe's GPU backend " + GpuModulePath() + " has no entry '" + name +
                "': it is not the one built with this troupe");
  }
  return sym;
}
}  // namespace internal

}  // namespace troupe
