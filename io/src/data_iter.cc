// The data-iterator registry, ShardRange and CreateDataIter (io/io.h).
//
// `prefetch_buffer` is handled here, not by the iterators: CreateDataIter takes it out of the keyword
// arguments (an int >= 0, default 4), hands the rest to the iterator's factory and wraps the result in
// MakePrefetcher unless it is 0. Every registered iterator therefore accepts it without declaring it, and
// Register lists it first among the iterator's parameters so that `help` shows it.
#include <algorithm>
#include <cctype>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>

#include "base/error.h"
#include "io/io.h"

namespace troupe {

namespace {
constexpr char kPrefetchKey[] = "prefetch_buffer";

// The one parameter every registered iterator takes, parsed here before the iterator sees the rest.
struct PrefetchParam : Params<PrefetchParam> {
  int prefetch_buffer = 4;
  static void Declare(ParamSchema<PrefetchParam>& s) {
    s.Field(kPrefetchKey, &PrefetchParam::prefetch_buffer)
        .Default(4)
        .LowerBound(0)
        .Describe("Batches prepared ahead on a background thread; 0 turns prefetching off.");
  }
};
}  // namespace

std::pair<std::uint64_t, std::uint64_t> ShardRange(std::uint64_t n, int num_parts, int part_index,
                                                   const std::string& who) {
  if (num_parts < 1) {
    throw Error(who + ": num_parts must be >= 1, got " + std::to_string(num_parts));
  }
  if (part_index < 0 || part_index >= num_parts) {
    throw Error(who + ": part_index must be in [0, " + std::to_string(num_parts) +
                ") for num_parts=" + std::to_string(num_parts) + ", got " + std::to_string(part_index));
  }
  const auto parts = static_cast<std::uint64_t>(num_parts);
  const auto p = static_cast<std::uint64_t>(part_index);
  const std::uint64_t base = n / parts, extra = n % parts;
  // The first `extra` parts hold base + 1 samples, the rest base.
  const std::uint64_t begin = p * base + std::min(p, extra);
  const std::uint64_t end = begin + base + (p < extra ? 1 : 0);
  return {begin, end};
}

// ------------------------------------------------------------------------------------------- registry
struct DataIterRegistry::Impl {
  mutable std::mutex mu;
  std::deque<DataIterInfo> infos;  // a deque keeps the references Register hands out valid
  std::map<std::string, DataIterInfo*> names;
};

DataIterRegistry::DataIterRegistry() : impl_(std::make_unique<Impl>()) {}

DataIterRegistry& DataIterRegistry::Get() {
  // Constructed on first use, so registrations from any translation unit find it during static init.
  static DataIterRegistry r;
  return r;
}

DataIterInfo& DataIterRegistry::Register(const std::string& name,
                                         std::function<std::unique_ptr<DataIter>(const Kwargs&)> factory) {
  std::lock_guard lock(impl_->mu);
  if (impl_->names.count(name) != 0) throw Error("data iterator '" + name + "' is registered twice");
  DataIterInfo& info = impl_->infos.emplace_back();
  info.name = name;
  info.factory = std::move(factory);
  info.params = PrefetchParam::Docs();
  impl_->names[name] = &info;
  return info;
}

const DataIterInfo* DataIterRegistry::Find(const std::string& name) const {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->names.find(name);
  return it == impl_->names.end() ? nullptr : it->second;
}

std::vector<std::string> DataIterRegistry::ListNames() const {
  std::lock_guard lock(impl_->mu);
  std::vector<std::string> out;
  for (const auto& info : impl_->infos) out.push_back(info.name);
  std::sort(out.begin(), out.end());
  return out;
}

std::unique_ptr<DataIter> CreateDataIter(const std::string& name, const Kwargs& kwargs) {
  const DataIterInfo* info = DataIterRegistry::Get().Find(name);
  if (info == nullptr) {
    const std::vector<std::string> all = DataIterRegistry::Get().ListNames();
    const std::string similar = SimilarNames(name, all);
    std::string every;
    for (const auto& n : all) every += (every.empty() ? "" : ", ") + n;
    throw Error("unknown data iterator '" + name + "'" + (similar.empty() ? "" : "; did you mean: " + similar) +
                " (registered: " + (every.empty() ? "none" : every) + ")");
  }

  Kwargs prefetch_kwargs, rest;
  for (const auto& kv : kwargs) (kv.first == kPrefetchKey ? prefetch_kwargs : rest).push_back(kv);
  PrefetchParam prefetch;
  prefetch.Init(prefetch_kwargs, name);
  std::unique_ptr<DataIter> it = info->factory(rest);
  if (it == nullptr) throw Error("data iterator '" + name + "': its factory returned no iterator");
  if (prefetch.prefetch_buffer == 0) return it;
  return MakePrefetcher(std::move(it), prefetch.prefetch_buffer);
}

}  // namespace troupe
