#include "kvstore/internal/store_checks.h"

#include <algorithm>
#include <type_traits>

#include "base/error.h"

namespace troupe::internal {

void CheckKeyCount(const char* op, std::size_t keys, std::size_t arrays, const char* what) {
  if (keys != arrays) {
    throw Error(std::string("KVStore::") + op + ": " + std::to_string(keys) + " keys but " + std::to_string(arrays) +
                " " + what + "s; pass one " + what + " per key (repeat a key for several devices)");
  }
}

void CheckInitArgs(const std::vector<int>& keys, const std::vector<NDArray>& values, const StoredOf& stored,
                   const KeyNameOf& key_name) {
  CheckKeyCount("Init", keys.size(), values.size(), "value");
  std::vector<int> seen;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const int key = keys[i];
    if (stored(key) != nullptr || std::find(seen.begin(), seen.end(), key) != seen.end()) {
      throw Error("KVStore::Init: key " + key_name(key) + " initialised twice; initialise each key once");
    }
    seen.push_back(key);
    if (values[i].is_none()) {
      throw Error("KVStore::Init: key " + key_name(key) + ": the value is a none array; pass an initialised array");
    }
  }
}

KeyGroups CheckArrays(const char* op, const std::vector<int>& keys, const std::vector<NDArray>& arrays,
                      const char* what, const StoredOf& stored, const KeyNameOf& key_name) {
  CheckKeyCount(op, keys.size(), arrays.size(), what);
  KeyGroups groups;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const int key = keys[i];
    const std::string where = std::string("KVStore::") + op + ": key " + key_name(key);
    const NDArray* s = stored(key);
    if (s == nullptr) throw Error(where + " has not been initialised; call Init first");
    const NDArray& a = arrays[i];
    const std::string which = std::string(what) + " " + std::to_string(i);
    if (a.is_none()) throw Error(where + ": " + which + " is a none array");
    if (a.shape() != s->shape()) {
      throw Error(where + ": " + which + " has shape " + a.shape().ToString() + " but the key was initialised with shape " +
                  s->shape().ToString());
    }
    if (a.dtype() != s->dtype()) {
      throw Error(where + ": " + which + " has dtype " + DTypeName(a.dtype()) +
                  " but the key was initialised with dtype " + DTypeName(s->dtype()));
    }
    if (a.engine() != s->engine()) throw Error(where + ": " + which + " belongs to another engine than the key's initial value");
    groups[key].push_back(i);
  }
  return groups;
}

// dst = sum of srcs (host memory, all of dst's dtype and size). Works block by block so that the partial
// sum stays in cache while each source is added.
void SumOnHost(const std::vector<TBlob>& srcs, const TBlob& dst) {
  DTypeSwitch(dst.dtype, [&](auto tag) {
    using T = decltype(tag);
    // half_t and bf16_t add through float.
    using Acc = std::conditional_t<std::is_arithmetic_v<T>, T, float>;
    T* out = static_cast<T*>(dst.dptr);
    const std::int64_t n = dst.Size();
    constexpr std::int64_t kBlock = 4096;
    for (std::int64_t b = 0; b < n; b += kBlock) {
      const std::int64_t e = std::min(n, b + kBlock);
      const T* s0 = static_cast<const T*>(srcs[0].dptr);
      std::copy(s0 + b, s0 + e, out + b);
      for (std::size_t j = 1; j < srcs.size(); ++j) {
        const T* s = static_cast<const T*>(srcs[j].dptr);
        for (std::int64_t i = b; i < e; ++i) out[i] = static_cast<T>(static_cast<Acc>(out[i]) + static_cast<Acc>(s[i]));
      }
    }
  });
}

}  // namespace troupe::internal
