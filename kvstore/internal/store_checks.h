// Argument checks shared by the KVStore types (kvstore_local.cc, kvstore_nccl.cc) and the string-key
// overloads (kvstore.cc): the same errors, with the same messages, whatever the type. Each throws
// troupe::Error naming the call and the key, before anything is pushed. Internal to kvstore/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tensor/ndarray.h"

namespace troupe::internal {

// key -> indices of its values, keys in increasing order (MXNet's GroupKVPairs).
using KeyGroups = std::map<int, std::vector<std::size_t>>;

// The stored value of a key, or null when the key has not been initialised.
using StoredOf = std::function<const NDArray*(int key)>;
// A key as the caller wrote it (KVStore::KeyName).
using KeyNameOf = std::function<std::string(int key)>;

// "KVStore::<op>: N keys but M values; ..." unless the counts are equal. `what` is singular ("value").
void CheckKeyCount(const char* op, std::size_t keys, std::size_t arrays, const char* what);

// Init: one value per key, each key once (not stored yet, not twice in `keys`), no none value.
void CheckInitArgs(const std::vector<int>& keys, const std::vector<NDArray>& values, const StoredOf& stored,
                   const KeyNameOf& key_name);

// Push / Pull: one array per key, every key initialised, every array with its key's stored shape, dtype and
// engine. `what` is "value" or "output". Returns the keys' groups.
KeyGroups CheckArrays(const char* op, const std::vector<int>& keys, const std::vector<NDArray>& arrays,
                      const char* what, const StoredOf& stored, const KeyNameOf& key_name);

}  // namespace troupe::internal

namespace troupe::internal {

// dst = sum of srcs (host memory; every blob of dst's dtype and size). Used by the local and dist stores.
void SumOnHost(const std::vector<TBlob>& srcs, const TBlob& dst);

// MXNet's dequantize_2bit on host memory (kvstore/gradient_compression.h's layout): n values from `in`
// (ceil(n / 4) bytes) into `out`. Defined in gradient_compression.cc; the dist servers decode pushes with it.
void Dequantize2BitCpu(const std::uint8_t* in, float* out, std::int64_t n, float threshold);

}  // namespace troupe::internal
