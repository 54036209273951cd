// Argument checks shared by the KVStore types (kvstore_local.cc, kvstore_nccl.cc) and the string-key
// overloads (kvstore.cc): the same errors, with the same messages, whatever the type. Each throws
// troupe::Error naming the call and the key, before anything is pushed. Internal to kvstore/.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ops/ndarray.h"

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
