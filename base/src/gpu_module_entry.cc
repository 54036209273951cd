// Compiled into the GPU backend (libtroupe_gpu.so) only: the version its loader (base/src/gpu_module.cc)
// checks, so that a module from another build is refused with a message instead of misbehaving.
extern "C" __attribute__((visibility("default"))) const char* troupe_gpu_module_version() {
  return TROUPE_GPU_MODULE_VERSION;
}
