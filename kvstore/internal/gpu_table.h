// What the GPU backend (libtroupe_gpu.so, where kvstore/src/kvstore_nccl.cc is built) gives the KVStore:
// the "nccl" store, returned by its extern "C" function kGpuKVStoreTableSymbol and reached from
// KVStore::Create (kvstore/src/kvstore.cc), which loads the backend on first use. Internal to kvstore/.
#pragma once

#include <memory>

#include "kvstore/kvstore.h"

namespace troupe::internal {

struct GpuKVStoreTable {
  // Throws troupe::Error when the machine has no GPU.
  std::unique_ptr<KVStore> (*create_nccl)();
};
inline constexpr const char* kGpuKVStoreTableSymbol = "troupe_gpu_kvstore_table";

}  // namespace troupe::internal
