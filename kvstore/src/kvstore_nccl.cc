// KVStore type "nccl": parameter synchronisation across the GPUs of one machine with NCCL (MXNet 1.x's
// KVStoreNCCL, src/kvstore/kvstore_nccl.h with CommNCCL in comm.h). Semantics are those of "device"
// (kvstore/kvstore.h); only the reduction differs.
//
// A push of a key takes one value per GPU, each on a distinct GPU. Its sum is one engine function that
// reads the values' variables and writes the key's merge buffer (and scratch buffers): inside it,
// ncclGroupStart, one out-of-place ncclAllReduce(sum) per value, ncclGroupEnd, then a wait for the streams
// the reduction ran on, so that the function's completion means the sum is there. The all-reduce leaves
// the sum on every GPU of the push: the copy of the GPU the key is stored on goes straight into the merge
// buffer, the others into per-key scratch buffers. When the key is stored elsewhere (a CPU, or a GPU that
// took no part in the push) the first GPU's result is copied to the merge buffer afterwards. Then, as in
// kvstore_local.cc, the updater (which pushes its own work) or a swap of the merge buffer and the stored
// value. A pull is one CopyFromTo per output (MXNet broadcasts with ncclBcast; a copy per output gives the
// same values and needs no communicator over the outputs' devices).
//
// Communicators: one ncclComm per GPU of a push's set of GPUs, made with ncclCommInitAll the first time a
// push uses that set (on the pushing thread, so a failure is thrown at the call), cached by the sorted
// list of GPU ids, with one CUDA stream per GPU for the ranks that do not run on the engine's stream.
//
// Every NCCL call of the process is serialised by one mutex, held from ncclGroupStart until the streams
// are synchronised: communicators are not thread-safe, and two threads launching the per-GPU kernels of
// two collectives could interleave them in different orders on different GPUs and hang (MXNet's CommNCCL
// serialises its NCCL calls for the same reason).
//
// Every call checks all its arguments before it pushes anything, so an error leaves the store as it was.
//
// Built into the GPU backend (libtroupe_gpu.so, loaded on demand: base/gpu_module.h); KVStore::Create("nccl")
// reaches it through GpuKVStoreTable (kvstore/internal/gpu_table.h).
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/error.h"
#include "actors/runtime.h"
#include "kvstore/internal/gpu_table.h"
#include "kvstore/internal/store_checks.h"
#include "kvstore/kvstore.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <mutex>

namespace troupe {

namespace {

void CheckCuda(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the (non-sticky) error so that the store stays usable
    throw Error(what + ": CUDA error: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
  }
}

void CheckNccl(ncclResult_t r, const std::string& what, ncclComm_t comm = nullptr) {
  if (r == ncclSuccess) return;
  std::string msg = what + ": NCCL error: " + ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') msg += std::string(" (") + last + ")";
  throw Error(msg);
}

// The process-wide lock around NCCL work (see the file comment).
std::mutex& NcclMutex() {
  static std::mutex mu;
  return mu;
}

// Restores the calling thread's current device on scope exit (engine workers keep theirs set).
class CurrentDeviceGuard {
 public:
  CurrentDeviceGuard() {
    if (cudaGetDevice(&saved_) != cudaSuccess) saved_ = -1;
  }
  ~CurrentDeviceGuard() {
    if (saved_ >= 0) cudaSetDevice(saved_);
  }
  CurrentDeviceGuard(const CurrentDeviceGuard&) = delete;
  CurrentDeviceGuard& operator=(const CurrentDeviceGuard&) = delete;

 private:
  int saved_ = -1;
};

// NCCL's element type for a DType; false for bool (a sum of bools is not a bool).
bool NcclType(DType t, ncclDataType_t* out) {
  switch (t) {
    case DType::kFloat32:
      *out = ncclFloat32;
      return true;
    case DType::kFloat64:
      *out = ncclFloat64;
      return true;
    case DType::kFloat16:
      *out = ncclFloat16;
      return true;
    case DType::kBfloat16:
      *out = ncclBfloat16;
      return true;
    case DType::kUint8:
      *out = ncclUint8;
      return true;
    case DType::kInt8:
      *out = ncclInt8;
      return true;
    case DType::kInt32:
      *out = ncclInt32;
      return true;
    case DType::kInt64:
      *out = ncclInt64;
      return true;
    case DType::kBool:
      return false;
  }
  return false;
}

std::string DeviceList(const std::vector<int>& devs) {
  std::string s;
  for (int d : devs) s += (s.empty() ? "" : ", ") + Context::GPU(d).ToString();
  return s;
}

// The communicators of one set of GPUs (ranks in increasing GPU id) and a stream per GPU. Shared by the
// store and the engine functions that use it, so it lives until the last of them has run.
class CommSet {
 public:
  // Throws troupe::Error (naming `where`) when NCCL or CUDA fails; nothing is leaked then.
  CommSet(std::vector<int> devs, const std::string& where) : devs_(std::move(devs)) {
    std::lock_guard<std::mutex> lock(NcclMutex());
    CurrentDeviceGuard guard;
    // ncclCommInitAll with one device is valid: the all-reduce is then a copy. The handles are kept only
    // on success (on failure NCCL owns whatever it made).
    std::vector<ncclComm_t> comms(devs_.size(), nullptr);
    CheckNccl(ncclCommInitAll(comms.data(), static_cast<int>(devs_.size()), devs_.data()),
              where + ": ncclCommInitAll over " + DeviceList(devs_));
    comms_ = std::move(comms);
    streams_.assign(devs_.size(), nullptr);
    try {
      for (std::size_t i = 0; i < devs_.size(); ++i) {
        CheckCuda(cudaSetDevice(devs_[i]), where + ": cudaSetDevice");
        // A blocking stream (not cudaStreamNonBlocking): it waits for work on the legacy default stream,
        // which is where the naive engine runs GPU functions (without synchronising after them).
        CheckCuda(cudaStreamCreate(&streams_[i]), where + ": cudaStreamCreate");
      }
    } catch (...) {
      Release();
      throw;
    }
  }
  ~CommSet() {
    std::lock_guard<std::mutex> lock(NcclMutex());
    CurrentDeviceGuard guard;
    Release();
  }
  CommSet(const CommSet&) = delete;
  CommSet& operator=(const CommSet&) = delete;

  std::size_t Rank(int dev) const {
    return static_cast<std::size_t>(std::find(devs_.begin(), devs_.end(), dev) - devs_.begin());
  }
  ncclComm_t comm(std::size_t rank) const { return comms_[rank]; }
  cudaStream_t stream(std::size_t rank) const { return streams_[rank]; }

 private:
  void Release() {
    for (ncclComm_t c : comms_) {
      if (c != nullptr) ncclCommDestroy(c);
    }
    for (std::size_t i = 0; i < streams_.size(); ++i) {
      if (streams_[i] != nullptr) {
        cudaSetDevice(devs_[i]);
        cudaStreamDestroy(streams_[i]);
      }
    }
    comms_.clear();
    streams_.clear();
  }

  std::vector<int> devs_;
  std::vector<ncclComm_t> comms_;
  std::vector<cudaStream_t> streams_;
};

// One rank's part of an all-reduce.
struct RankBuffers {
  int dev;
  const void* send;
  void* recv;
};

// Sums `count` elements over every rank of `set` (one RankBuffers per rank, any order), on the devices'
// streams; the rank on `exec_dev` uses `exec_stream` (the engine's stream of the function, so that work
// the engine ordered before on that stream comes first). Returns once the sums are complete. Runs inside
// an engine function. Throws troupe::Error naming `what`.
void AllReduce(const CommSet& set, const std::vector<RankBuffers>& ranks, std::size_t count, ncclDataType_t type,
               int exec_dev, cudaStream_t exec_stream, const std::string& what) {
  if (count == 0) return;
  std::lock_guard<std::mutex> lock(NcclMutex());
  CurrentDeviceGuard guard;
  std::vector<cudaStream_t> streams;
  CheckNccl(ncclGroupStart(), what + ": ncclGroupStart");
  // Every call of the group is made, and the group always closed, before an error is thrown.
  ncclResult_t failed = ncclSuccess;
  std::string failed_what;
  ncclComm_t failed_comm = nullptr;
  for (const RankBuffers& r : ranks) {
    const std::size_t rank = set.Rank(r.dev);
    const cudaStream_t s = r.dev == exec_dev ? exec_stream : set.stream(rank);
    streams.push_back(s);
    const ncclResult_t res = ncclAllReduce(r.send, r.recv, count, type, ncclSum, set.comm(rank), s);
    if (res != ncclSuccess && failed == ncclSuccess) {
      failed = res;
      failed_what = what + ": ncclAllReduce on " + Context::GPU(r.dev).ToString();
      failed_comm = set.comm(rank);
    }
  }
  const ncclResult_t end = ncclGroupEnd();
  CheckNccl(failed, failed_what, failed_comm);
  CheckNccl(end, what + ": ncclGroupEnd");
  // The engine takes the function's completion as "the sum is there": wait for every rank's stream.
  for (std::size_t i = 0; i < streams.size(); ++i) {
    CheckCuda(cudaStreamSynchronize(streams[i]),
              what + ": waiting for the all-reduce on " + Context::GPU(ranks[i].dev).ToString());
  }
}

class KVStoreNccl final : public KVStore {
 public:
  KVStoreNccl() : KVStore("nccl") {}

  using KVStore::Init;

  // As "device": the key is stored on the device of its initial value (any device, CPUs included).
  void Init(const std::vector<int>& keys, const std::vector<NDArray>& values) override {
    NoteIntKeys("Init");
    internal::CheckInitArgs(keys, values, [this](int k) { return StoredOf(k); }, [this](int k) { return KeyName(k); });
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const NDArray& v = values[i];
      Entry& e = store_[keys[i]];
      e.stored = NDArray(v.shape(), v.ctx(), v.dtype(), v.engine());
      CopyFromTo(v, e.stored);
    }
  }


  void SetUpdater(Updater updater) override { updater_ = std::move(updater); }

  // MXNet's KVStoreNCCL refuses gradient compression too; {"type": "none"} is refused alike, since there
  // is nothing to turn off.
  void SetGradientCompression(const Kwargs&) override {
    throw Error(
        "KVStore::SetGradientCompression: gradient compression is not supported by an 'nccl' store (as in "
        "MXNet); use Create(\"device\") or a dist type");
  }

 private:
  struct Entry {
    NDArray stored;
    NDArray merged;                  // the reduction's target (swapped with stored when there is no updater)
    std::map<int, NDArray> scratch;  // GPU id -> that GPU's copy of the all-reduce result
  };

  const NDArray* StoredOf(int key) const override {
    const auto it = store_.find(key);
    return it == store_.end() ? nullptr : &it->second.stored;
  }

  void CheckPushValues(const char* op, const KeyGroups& groups, const std::vector<NDArray>& values) override {
    CheckForNccl(op, groups, values);  // creates the communicators a push needs, before anything is pushed
  }
  void PushGroups(const KeyGroups& groups, const std::vector<NDArray>& values, int priority) override {
    DoPush(groups, values, CheckForNccl("Push", groups, values), priority);  // the sets made by the check
  }
  void PullGroups(const KeyGroups& groups, const std::vector<NDArray>& outs, int priority) override {
    for (const auto& [key, idx] : groups) {
      for (std::size_t i : idx) CopyFromTo(store_.at(key).stored, outs[i], priority);
    }
  }

  // What NCCL needs of a push: GPU values, at most one per GPU for a key (NCCL has one rank per device
  // in a communicator), a dtype NCCL sums. Returns the communicator set of each group (in `groups`'
  // order), creating the missing ones: all before anything is pushed.
  std::vector<std::shared_ptr<CommSet>> CheckForNccl(const char* op, const KeyGroups& groups,
                                                     const std::vector<NDArray>& values) {
    std::vector<std::vector<int>> dev_lists;
    for (const auto& [key, idx] : groups) {
      const std::string where = std::string("KVStore::") + op + ": key " + KeyName(key);
      ncclDataType_t type;
      if (!NcclType(values[idx[0]].dtype(), &type)) {
        throw Error(where + " has dtype " + DTypeName(values[idx[0]].dtype()) +
                    ", which NCCL cannot sum; use a numeric dtype or Create(\"device\")");
      }
      std::map<int, std::size_t> by_gpu;  // GPU id -> index of its value
      for (std::size_t i : idx) {
        const Context c = values[i].ctx();
        if (!c.is_gpu()) {
          throw Error(where + ": value " + std::to_string(i) + " is on " + c.ToString() +
                      "; an nccl store sums GPU arrays (one per GPU); use local or device for other devices");
        }
        const auto [it, fresh] = by_gpu.emplace(c.dev_id, i);
        if (!fresh) {
          throw Error(where + ": values " + std::to_string(it->second) + " and " + std::to_string(i) + " are both on " +
                      c.ToString() +
                      "; an nccl store takes at most one value per GPU for a key (sum them on that GPU first, "
                      "or use device)");
        }
      }
      std::vector<int> devs;
      for (const auto& [dev, i] : by_gpu) devs.push_back(dev);  // sorted: std::map
      dev_lists.push_back(std::move(devs));
    }
    std::vector<std::shared_ptr<CommSet>> sets;
    auto g = groups.begin();
    for (auto& devs : dev_lists) {
      std::shared_ptr<CommSet>& set = comms_[devs];
      if (set == nullptr) {
        try {
          set = std::make_shared<CommSet>(devs, std::string("KVStore::") + op + ": key " + KeyName(g->first));
        } catch (...) {
          comms_.erase(devs);  // try again on the next push
          throw;
        }
      }
      sets.push_back(set);
      ++g;
    }
    return sets;
  }

  void DoPush(const KeyGroups& groups, const std::vector<NDArray>& values,
              const std::vector<std::shared_ptr<CommSet>>& sets, int priority) {
    std::size_t g = 0;
    for (const auto& [key, idx] : groups) {
      Entry& e = store_.at(key);
      Reduce(key, &e, values, idx, sets[g++], priority);
      if (updater_) {
        updater_(key, e.merged, &e.stored);
      } else {
        // The sum becomes the stored value; the old one is the next merge buffer. Pulls pushed before read
        // it first: the engine orders the next reduction (a write) after them.
        std::swap(e.stored, e.merged);
      }
    }
  }

  // e->merged = sum of values[idx...] (one per GPU of `set`), pushed.
  void Reduce(int key, Entry* e, const std::vector<NDArray>& values, const std::vector<std::size_t>& idx,
              std::shared_ptr<CommSet> set, int priority) {
    const NDArray& s = e->stored;
    Engine* engine = s.engine();
    if (e->merged.is_none()) e->merged = NDArray(s.shape(), s.ctx(), s.dtype(), engine);
    // Each rank's output: the merge buffer on the key's own GPU, a scratch buffer elsewhere.
    std::vector<RankBuffers> ranks;
    std::vector<VarHandle> reads, writes;
    const NDArray* first_out = nullptr;  // the result on the first value's GPU
    bool merged_written = false;
    for (std::size_t i : idx) {
      const NDArray& v = values[i];
      const NDArray* out = &e->merged;
      if (!(v.ctx() == s.ctx())) {
        NDArray& sc = e->scratch[v.ctx().dev_id];
        if (sc.is_none()) sc = NDArray(s.shape(), v.ctx(), s.dtype(), engine);
        out = &sc;
      } else {
        merged_written = true;
      }
      if (first_out == nullptr) first_out = out;
      ranks.push_back(RankBuffers{v.ctx().dev_id, v.data().dptr, out->data().dptr});
      if (std::find(reads.begin(), reads.end(), v.var()) == reads.end()) reads.push_back(v.var());
      writes.push_back(out->var());
    }
    ncclDataType_t type = ncclFloat32;
    NcclType(s.dtype(), &type);  // checked in CheckForNccl
    const std::size_t count = static_cast<std::size_t>(s.Size());
    const Context exec = values[idx[0]].ctx();
    std::string what = "KVStore nccl: the sum of key " + KeyName(key);
    engine->PushSync(
        [set = std::move(set), ranks = std::move(ranks), count, type, exec, what = std::move(what)](RunContext rctx) {
          const cudaStream_t stream = rctx.stream != nullptr ? *static_cast<cudaStream_t*>(rctx.stream) : nullptr;
          AllReduce(*set, ranks, count, type, exec.dev_id, stream, what);
        },
        exec, reads, writes, FnProperty::kNormal, priority, "KVStoreNcclAllReduce");
    // The key lives on a device that took no part (a CPU, or another GPU): fetch the first GPU's copy.
    if (!merged_written) CopyFromTo(*first_out, e->merged, priority);
  }

  std::unordered_map<int, Entry> store_;
  Updater updater_;
  std::map<std::vector<int>, std::shared_ptr<CommSet>> comms_;  // by sorted GPU ids
};

std::unique_ptr<KVStore> CreateNcclKVStoreImpl() {
  if (Runtime::GpuCount() > 0) return std::make_unique<KVStoreNccl>();
  throw Error(
      "KVStore::Create(\"nccl\"): nccl needs GPUs and this machine has none (CUDA sees no device); use local "
      "or device");
}

const internal::GpuKVStoreTable kTable{&CreateNcclKVStoreImpl};

}  // namespace
}  // namespace troupe

// The KVStore's entry into the GPU backend (kGpuKVStoreTableSymbol).
extern "C" __attribute__((visibility("default"))) const troupe::internal::GpuKVStoreTable* troupe_gpu_kvstore_table() {
  return &troupe::kTable;
}
