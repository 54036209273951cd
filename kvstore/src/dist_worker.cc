// A worker of the distributed KVStore (kvstore/dist.h): the KVStore the training loop drives. It reaches
// the cluster through its WorkerLink (kvstore/internal/dist_worker_link.h: the worker's actor and the
// requests in flight).
//
// A Push, Pull or PushPull of a key is one engine function per key (after the local reduction and the
// compression, which are engine functions of their own). It encodes one frame per part of the key, hands
// them to the link and completes when every part was answered; an answer's value is copied into the
// output there. The functions of a key are ordered by a variable of the key: a push writes it and a pull
// reads it, so a pull starts after the push was answered — after the sync round's update. Pushes carry
// their number per key (TensorMsg::round), so that a restarted server applies each once.
//
// Failures (a dead node, a server's error) complete the function with the error, which poisons what it
// writes (the outputs and the key's variable; tensor/ndarray.h): the caller sees it at WaitToRead. The next
// call on that key first drains the key's variable, so the key works again once the cluster does.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "base/error.h"
#include "kvstore/dist.h"
#include "kvstore/gradient_compression.h"
#include "kvstore/internal/dist_common.h"
#include "kvstore/internal/dist_worker_link.h"
#include "kvstore/internal/store_checks.h"

namespace troupe {
namespace internal {
namespace {

// One part of a key: the server holding it and its elements [begin, end) of the flattened array.
struct Part {
  int server = 0;
  std::int64_t begin = 0;
  std::int64_t end = 0;
};

// The completion of one engine function waiting for several answers: the parts of a key, or the keys of a
// frame (net::TensorBatch). Each answer's value goes to its slot of the output; the function fails if any
// answer failed, and then its keys drain before their next call.
struct Gather {
  struct Slot {
    void* target = nullptr;  // where the answered value goes (null: the answer carries no value)
    std::size_t bytes = 0;   // its bytes
  };
  std::vector<Slot> slots;
  std::vector<std::atomic<bool>*> key_failed;
  std::atomic<int> left{0};
  std::mutex mu;
  std::string error;
  CallbackOnComplete done;

  void Complete(std::size_t i, Reply r) {
    const Slot& s = slots[i];
    if (r.error.empty() && s.target != nullptr) {
      if (!r.value || r.value->data.size() != s.bytes) {
        r.error = "kvstore worker: a server answered with " + std::to_string(r.value ? r.value->data.size() : 0) +
                  " bytes for " + std::to_string(s.bytes) + " bytes";
      } else {
        std::memcpy(s.target, r.value->data.bytes.data(), s.bytes);
      }
    }
    if (!r.error.empty()) {
      std::lock_guard<std::mutex> lock(mu);
      if (error.empty()) error = r.error;
    }
    if (left.fetch_sub(1) == 1) {
      if (error.empty()) return done();
      for (std::atomic<bool>* f : key_failed) f->store(true);
      done(std::make_exception_ptr(Error(error)));
    }
  }
};

class KVStoreDist final : public KVStore {
 public:
  KVStoreDist(const std::string& type, const DistConfig& config) : KVStore(type), config_(config) {
    config_.Validate();
    WarnIfInsecure(config_, "worker");
    WorkerLink::Cluster cluster;
    link_ = WorkerLink::Start(config_, type != "dist_async", &cluster);
    rank_ = cluster.rank;
    num_workers_ = cluster.num_workers;
    num_servers_ = cluster.num_servers;
    server_bytes_.assign(static_cast<std::size_t>(num_servers_), 0);
  }

  // Without Finalize, the store's end is this worker's failure (a program that threw, or returned early):
  // a dist_sync job fails for everyone, naming it.
  ~KVStoreDist() override {
    if (link_) Shutdown(End::kFail);
  }

  void Finalize() override {
    if (!link_) return;
    const std::string error = Shutdown(End::kFinalize);
    if (!error.empty()) throw Error("KVStore::Finalize: the job failed: " + error);
  }

  using KVStore::Init;

  int rank() const override { return rank_; }
  int num_workers() const override { return num_workers_; }

  void Init(const std::vector<int>& keys, const std::vector<NDArray>& values) override {
    NoteIntKeys("Init");
    CheckOpen("Init");
    CheckInitArgs(keys, values, [this](int k) { return StoredOf(k); }, [this](int k) { return KeyName(k); });
    for (std::size_t i = 0; i < keys.size(); ++i) {
      // One frame carries at most kMaxTensorBytes of a key: a part per server must fit.
      const bool split = values[i].Size() >= config_.bigarray_bound && num_servers_ > 1;
      const std::size_t part = split ? (values[i].Bytes() + num_servers_ - 1) / num_servers_ : values[i].Bytes();
      if (part > net::kMaxTensorBytes) {
        throw Error("KVStore::Init: key " + KeyName(keys[i]) + " has " + std::to_string(values[i].Bytes()) +
                    " bytes, and one server holds at most " + std::to_string(net::kMaxTensorBytes) +
                    " bytes of a key; run more servers" +
                    (split ? std::string() : " or lower TROUPE_KVSTORE_BIGARRAY_BOUND so that it is split"));
      }
    }
    std::vector<std::future<Reply>> replies;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const NDArray& v = values[i];
      auto key = std::make_unique<Key>();
      key->proto = NDArray(v.shape(), Context::CPU(0), v.dtype(), v.engine());
      key->order = NDArray(TShape{1}, Context::CPU(0), DType::kFloat32, v.engine());
      key->parts = Place(v.Size(), v.Bytes());
      if (rank_ == 0) {
        // Worker 0's values initialise the servers (MXNet); the others only learn the key's layout.
        auto host = std::make_shared<NDArray>(v.ctx().is_gpu() ? v.CopyTo(Context::CPU(0)) : v);
        host->WaitToRead();
        const TBlob b = host->data();
        for (std::size_t p = 0; p < key->parts.size(); ++p) {
          const std::uint64_t id = NextId();
          replies.push_back(Call(key->parts[p].server, id, TensorFrame(net::TensorOp::kInit, keys[i], *key, p, b, id, host)));
        }
      }
      keys_[keys[i]] = std::move(key);
    }
    // Every worker declares its keys to server 0, which checks that all workers' models agree (a
    // difference fails the job for everyone, and so the barrier below).
    net::Command declare{NextId(), "declare", {{"call", std::to_string(init_calls_++)}}};
    for (std::size_t i = 0; i < keys.size(); ++i) {
      declare.args.emplace_back("key", std::to_string(keys[i]) + " " + DTypeName(values[i].dtype()) +
                                           ShapeText(values[i].shape().ToVector()));
    }
    replies.push_back(Call(0, declare.request_id, declare));
    for (auto& f : replies) {
      const Reply r = f.get();
      if (!r.error.empty()) throw Error("KVStore::Init: " + r.error);
    }
    Barrier();
  }

  void PushGroups(const KeyGroups& groups, const std::vector<NDArray>& values, int priority) override {
    std::vector<Job> jobs;
    for (const auto& [key, idx] : groups) {
      Key& k = Prepare(key);
      jobs.push_back(MakeJob(net::TensorOp::kPush, key, k, Source(key, k, values, idx, priority), {}));
    }
    SendJobs(std::move(jobs), priority);
  }

  void PullGroups(const KeyGroups& groups, const std::vector<NDArray>& outs, int priority) override {
    std::vector<Job> jobs;
    for (const auto& [key, idx] : groups) {
      Key& k = Prepare(key);
      jobs.push_back(MakeJob(net::TensorOp::kPull, key, k, {}, Outputs(k, outs, idx)));
    }
    SendJobs(std::move(jobs), priority);
  }

  // One round trip per key: the push and the pull of a key are one frame (and a call's small keys for one
  // server one frame together).
  void PushPullGroups(const KeyGroups& pushes, const std::vector<NDArray>& values, const KeyGroups& pulls,
                      const std::vector<NDArray>& outs, int priority) override {
    std::vector<Job> jobs;
    for (const auto& [key, idx] : pushes) {
      Key& k = Prepare(key);
      jobs.push_back(MakeJob(net::TensorOp::kPushPull, key, k, Source(key, k, values, idx, priority),
                             Outputs(k, outs, pulls.at(key))));
    }
    SendJobs(std::move(jobs), priority);
  }

  void SetUpdater(Updater) override {
    throw Error("KVStore::SetUpdater: a '" + type_ +
                "' store updates on its servers, and no code crosses the wire; use SetOptimizer with a "
                "declarative OptimizerConfig");
  }

  void SetOptimizer(const OptimizerConfig& config) override {
    std::unique_ptr<Optimizer> opt = Optimizer::Create(config);  // a bad config fails here, before sending
    if (rank_ == 0) AllServers(net::Command{0, "set_optimizer", OptimizerArgs(config)}, "SetOptimizer");
    optimizer_ = std::move(opt);
    Barrier();
  }

  void Barrier() override {
    const std::uint64_t id = NextId();
    const Reply r = Call(kScheduler, id, net::Barrier{id, net::kWorkerGroup}).get();
    if (!r.error.empty()) throw Error("KVStore::Barrier: " + r.error);
  }

  void Checkpoint(const std::string& dir) override {
    if (!dir.empty()) throw Error(std::string("KVStore::Checkpoint: ") + kNoPeerPaths);
    net::Command c{0, "checkpoint", {}};
    WaitKeys();
    AllServers(c, "Checkpoint");
  }

 private:
  struct Key {
    NDArray proto;  // cpu(0), the key's shape and dtype: the argument checks, the reduction and pull target
    NDArray order;  // its variable orders the key's pushes before its pulls
    std::vector<Part> parts;
    std::atomic<bool> failed{false};  // a function of the key failed: drain `order` before the next one
    std::uint64_t round = 0;          // pushes of this key so far (each push carries its number)
    std::vector<NDArray> residuals, compressed;  // per part, with compression on
    std::vector<NDArray> staging;                // host copies of device values
  };

  std::uint64_t NextId() { return next_id_.fetch_add(1) + 1; }

  const NDArray* StoredOf(int key) const override {
    auto it = keys_.find(key);
    return it == keys_.end() ? nullptr : &it->second->proto;
  }

  // With compression on, every value must be float32 (checked before anything is pushed).
  void CheckPushValues(const char* op, const KeyGroups& groups, const std::vector<NDArray>& values) override {
    if (compression_.empty()) return;
    for (const auto& [key, idx] : groups) {
      for (std::size_t i : idx) {
        if (values[i].dtype() != DType::kFloat32) {
          throw Error(std::string("KVStore::") + op + ": gradient compression takes float32 values; key " +
                      KeyName(key) + " is " + DTypeName(values[i].dtype()));
        }
      }
    }
  }

  // Small keys go to the server with the fewest bytes so far; big ones are split across all servers, at
  // multiples of 16 elements (whole words of 2-bit codes).
  std::vector<Part> Place(std::int64_t n, std::size_t bytes) {
    std::vector<Part> parts;
    if (n >= config_.bigarray_bound && num_servers_ > 1) {
      for (int s = 0; s < num_servers_; ++s) {
        const auto edge = [&](int i) { return i == num_servers_ ? n : std::min(n, (n * i / num_servers_) / 16 * 16); };
        const Part p{s, edge(s), edge(s + 1)};
        if (p.end <= p.begin) continue;
        server_bytes_[static_cast<std::size_t>(s)] += static_cast<std::size_t>(p.end - p.begin) * (bytes / static_cast<std::size_t>(std::max<std::int64_t>(n, 1)));
        parts.push_back(p);
      }
      return parts;
    }
    const auto least = std::min_element(server_bytes_.begin(), server_bytes_.end());
    *least += bytes;
    parts.push_back(Part{static_cast<int>(least - server_bytes_.begin()), 0, n});
    return parts;
  }

  // The key's entry, with a failure of its previous function drained (that error reached the arrays the
  // failed function wrote; the key itself starts clean).
  Key& Prepare(int key) {
    Key& k = *keys_.at(key);
    if (k.failed.exchange(false)) {
      try {
        k.order.WaitToWrite();
      } catch (const std::exception&) {
      }
    }
    return k;
  }

  void WaitKeys() {
    for (auto& [key, k] : keys_) {
      try {
        k->order.WaitToWrite();
        k->proto.WaitToWrite();
      } catch (const std::exception&) {
      }
    }
  }

  // What a push sends: the value itself (one host value), or the host sum of the values; then, with
  // compression on, the 2-bit codes of each part.
  struct Src {
    NDArray array;                      // the bytes sent (uncompressed)
    std::vector<NDArray> compressed;    // per part, when compressing
    float threshold = 0.f;
  };
  Src Source(int key, Key& k, const std::vector<NDArray>& values, const std::vector<std::size_t>& idx, int priority) {
    Src src;
    const bool host0 = !values[idx[0]].ctx().is_gpu();
    if (idx.size() == 1 && host0) {
      src.array = values[idx[0]];
    } else {
      // Local reduction first (dist_device_sync and several devices): on the host, into proto.
      std::vector<NDArray> reads;
      if (k.staging.size() < idx.size()) k.staging.resize(idx.size());
      for (std::size_t j = 0; j < idx.size(); ++j) {
        const NDArray& v = values[idx[j]];
        if (v.ctx().is_gpu()) {
          if (k.staging[j].is_none()) k.staging[j] = NDArray(v.shape(), Context::CPU(0), v.dtype(), v.engine());
          CopyFromTo(v, k.staging[j], priority);
          reads.push_back(k.staging[j]);
        } else {
          reads.push_back(v);
        }
      }
      std::vector<TBlob> blobs;
      std::vector<VarHandle> vars;
      for (const NDArray& r : reads) {
        blobs.push_back(r.data());
        vars.push_back(r.var());
      }
      const TBlob out = k.proto.data();
      k.proto.engine()->PushSync([blobs, out](RunContext) { SumOnHost(blobs, out); }, Context::CPU(0), vars,
                                 {k.proto.var()}, FnProperty::kNormal, priority, "kvstore_dist_reduce");
      src.array = k.proto;
    }
    if (!compression_.empty()) {
      if (src.array.dtype() != DType::kFloat32) {
        throw Error("KVStore::Push: gradient compression takes float32 values; key " + KeyName(key) +
                    " is " + DTypeName(src.array.dtype()));
      }
      if (gc_ == nullptr || gc_config_ != compression_) {
        gc_ = std::make_unique<GradientCompression>(compression_);
        gc_config_ = compression_;
      }
      const NDArray flat = src.array.Reshape(TShape{src.array.Size()});
      if (k.residuals.empty()) {
        for (const Part& p : k.parts) {
          const std::int64_t len = p.end - p.begin;
          k.residuals.push_back(NDArray::Zeros(TShape{len}, Context::CPU(0), DType::kFloat32, k.proto.engine()));
          k.compressed.emplace_back(TShape{GradientCompression::CompressedSize(len)}, Context::CPU(0),
                                    DType::kFloat32, k.proto.engine());
        }
      }
      for (std::size_t p = 0; p < k.parts.size(); ++p) {
        gc_->Quantize(flat.Slice(k.parts[p].begin, k.parts[p].end), k.residuals[p], k.compressed[p], priority);
      }
      src.compressed = k.compressed;
      src.threshold = gc_->threshold();
    }
    return src;
  }

  // Where a pull lands: the first host output (the others are copied from it), or proto.
  struct Outs {
    NDArray target;
    std::vector<NDArray> copies;
    bool present = false;
  };
  Outs Outputs(Key& k, const std::vector<NDArray>& outs, const std::vector<std::size_t>& idx) {
    Outs o;
    o.present = true;
    for (std::size_t j : idx) {
      if (o.target.is_none() && !outs[j].ctx().is_gpu()) {
        o.target = outs[j];
      } else {
        o.copies.push_back(outs[j]);
      }
    }
    if (o.target.is_none()) o.target = k.proto;
    return o;
  }

  // One part's frame: the part of `b` (or the compressed codes) for init/push/pushPull, the request for
  // a pull.
  // The message views the bytes of `b` (or `codes`); `owner` keeps them alive until the broker wrote it to
  // the socket.
  net::Message TensorFrame(net::TensorOp op, int key, const Key& k, std::size_t p, const TBlob& b, std::uint64_t id,
                           const std::shared_ptr<const void>& owner, const TBlob* codes = nullptr,
                           float threshold = 0.f, int priority = 0, std::uint64_t round = 0) {
    const Part& part = k.parts[p];
    net::TensorMsg t;
    t.op = op;
    t.request_id = id;
    t.key = key;
    t.part_index = static_cast<std::uint32_t>(p);
    t.part_count = static_cast<std::uint32_t>(k.parts.size());
    t.priority = priority;
    t.round = round;
    t.value.dtype = k.proto.dtype();
    t.value.shape = k.parts.size() == 1 ? k.proto.shape().ToVector() : std::vector<std::int64_t>{part.end - part.begin};
    if (op != net::TensorOp::kPull) {
      if (codes != nullptr) {
        t.compressed = true;
        t.compression_threshold = threshold;
        t.value.data = net::Blob{{static_cast<const std::byte*>(codes->dptr),
                                  static_cast<std::size_t>(GradientCompression::CompressedSize(part.end - part.begin)) * 4},
                                 owner};
      } else {
        const std::size_t elem = DTypeSize(k.proto.dtype());
        t.value.data = net::Blob{{static_cast<const std::byte*>(b.dptr) + static_cast<std::size_t>(part.begin) * elem,
                                  static_cast<std::size_t>(part.end - part.begin) * elem},
                                 owner};
      }
    }
    net::ValidateMessage(t);
    return t;
  }

  // What one key of a call sends and where its answer goes, with the engine variables it reads and writes.
  struct Job {
    net::TensorOp op = net::TensorOp::kPush;
    int key = 0;
    Key* k = nullptr;
    TBlob data;                  // the pushed value (uncompressed)
    std::vector<TBlob> codes;    // per part, when compressed
    float threshold = 0.f;
    TBlob target;                // where the answer's value goes (has_target)
    bool has_target = false;
    std::uint64_t round = 0;     // the push's number (0 for a pull)
    std::vector<NDArray> held;   // the arrays whose bytes the frames view (kept until answered)
    std::vector<NDArray> copies; // outputs copied from the target afterwards
    NDArray target_array;
    std::vector<VarHandle> reads, writes;
    std::size_t bytes = 0;       // tensor bytes of the key (sent or answered)
  };

  Job MakeJob(net::TensorOp op, int key, Key& k, const Src& src, const Outs& outs) {
    Job j;
    j.op = op;
    j.key = key;
    j.k = &k;
    j.writes = {k.order.var()};
    if (op == net::TensorOp::kPull) {
      j.reads = {k.order.var()};
      j.writes = {outs.target.var()};
    }
    if (!src.array.is_none()) {
      if (src.compressed.empty()) {
        j.data = src.array.data();
        j.reads.push_back(src.array.var());
        j.held.push_back(src.array);
      } else {
        for (const NDArray& c : src.compressed) {
          j.codes.push_back(c.data());
          j.reads.push_back(c.var());
          j.held.push_back(c);
        }
      }
    }
    if (outs.present) {
      j.target = outs.target.data();
      j.has_target = true;
      j.target_array = outs.target;
      j.copies = outs.copies;
      if (op != net::TensorOp::kPull) j.writes.push_back(outs.target.var());
    }
    j.threshold = src.threshold;
    j.round = op == net::TensorOp::kPull ? 0 : ++k.round;
    j.bytes = k.proto.Bytes();
    return j;
  }

  // Pushes the engine functions of a call's keys, in key order: the keys for one server that are not split
  // and not compressed share one function and one frame (net::TensorBatch) up to the coalescing limit; any
  // other key has a function of its own. Then the copies to further outputs.
  void SendJobs(std::vector<Job> jobs, int priority) {
    const std::size_t limit = std::min(config_.coalesce_bytes, config_.max_frame_bytes / 2);
    auto batchable = [&](const Job& j) {
      return limit > 0 && j.k->parts.size() == 1 && j.codes.empty() && j.bytes <= limit;
    };
    std::vector<std::vector<Job*>> functions;                    // in the order of their first key
    std::map<int, std::pair<std::size_t, std::size_t>> open;  // server -> (its open batch in functions, bytes)
    for (Job& j : jobs) {
      if (!batchable(j)) {
        functions.push_back({&j});
        continue;
      }
      const int server = j.k->parts[0].server;
      auto it = open.find(server);
      if (it != open.end() && it->second.second + j.bytes <= limit) {
        functions[it->second.first].push_back(&j);
        it->second.second += j.bytes;
        continue;
      }
      open[server] = {functions.size(), j.bytes};  // the first batch for this server, or the next one past the limit
      functions.push_back({&j});
    }
    for (const std::vector<Job*>& f : functions) {
      if (f.size() == 1) {
        PushOne(*f[0], priority);
      } else {
        PushBatch(f, priority);
      }
    }
    for (const Job& j : jobs) {
      for (const NDArray& c : j.copies) CopyFromTo(j.target_array, c, priority);
    }
  }

  // A variable both read and written is declared written only.
  static void DropWritten(std::vector<VarHandle>* reads, const std::vector<VarHandle>& writes) {
    reads->erase(std::remove_if(reads->begin(), reads->end(),
                                [&](VarHandle v) { return std::find(writes.begin(), writes.end(), v) != writes.end(); }),
                 reads->end());
  }

  // One engine function for one key: sends every part of a push, pull or pushPull and completes when all are
  // answered.
  void PushOne(Job& j, int priority) {
    DropWritten(&j.reads, j.writes);
    auto held = std::make_shared<std::vector<NDArray>>(j.held);
    auto fn = [this, op = j.op, key = j.key, kp = j.k, data = j.data, codes = j.codes, held, target = j.target,
               threshold = j.threshold, priority, round = j.round, has_target = j.has_target](
                  RunContext, CallbackOnComplete done) {
      auto gather = std::make_shared<Gather>();
      gather->left = static_cast<int>(kp->parts.size());
      gather->done = done;
      gather->key_failed = {&kp->failed};
      const std::size_t elem = DTypeSize(kp->proto.dtype());
      for (const Part& part : kp->parts) {
        gather->slots.push_back(Gather::Slot{
            has_target ? static_cast<std::byte*>(target.dptr) + static_cast<std::size_t>(part.begin) * elem : nullptr,
            static_cast<std::size_t>(part.end - part.begin) * elem});
      }
      for (std::size_t p = 0; p < kp->parts.size(); ++p) {
        net::Message frame;
        const std::uint64_t id = NextId();
        try {
          frame = TensorFrame(op, key, *kp, p, data, id, held, codes.empty() ? nullptr : &codes[p], threshold,
                              priority, round);
        } catch (const std::exception& e) {
          gather->Complete(p, Reply{e.what(), std::nullopt, {}});
          continue;
        }
        ReplyFn reply([gather, p](Reply r) { gather->Complete(p, std::move(r)); });
        link_->SendTensor(kp->parts[p].server, id, std::get<net::TensorMsg>(frame), std::move(reply));
      }
    };
    j.k->proto.engine()->PushAsync(std::move(fn), Context::CPU(0), j.reads, j.writes, FnProperty::kAsync, priority,
                                   j.op == net::TensorOp::kPull ? "kvstore_dist_pull" : "kvstore_dist_push");
  }

  // One engine function for several unsplit, uncompressed keys bound for one server: one frame
  // (net::TensorBatch) in key order, complete when every key was answered; any key's failure fails the
  // function (and so every output it writes, and each key drains before its next call).
  void PushBatch(const std::vector<Job*>& jobs, int priority) {
    std::vector<VarHandle> reads, writes;
    for (const Job* j : jobs) {
      reads.insert(reads.end(), j->reads.begin(), j->reads.end());
      writes.insert(writes.end(), j->writes.begin(), j->writes.end());
    }
    auto unique = [](std::vector<VarHandle>* v) {
      std::sort(v->begin(), v->end());
      v->erase(std::unique(v->begin(), v->end()), v->end());
    };
    unique(&reads);
    unique(&writes);
    DropWritten(&reads, writes);
    struct Item {
      net::TensorOp op;
      int key;
      Key* k;
      TBlob data, target;
      bool has_target;
      std::uint64_t round;
    };
    std::vector<Item> items;
    auto held = std::make_shared<std::vector<NDArray>>();
    for (Job* j : jobs) {
      items.push_back(Item{j->op, j->key, j->k, j->data, j->target, j->has_target, j->round});
      held->insert(held->end(), j->held.begin(), j->held.end());
    }
    const int server = jobs[0]->k->parts[0].server;
    const net::TensorOp op = jobs[0]->op;
    auto fn = [this, items = std::move(items), held, priority, server](RunContext, CallbackOnComplete done) {
      auto gather = std::make_shared<Gather>();
      gather->left = static_cast<int>(items.size());
      gather->done = done;
      std::vector<WorkerLink::Outgoing> out;
      out.reserve(items.size());
      for (const Item& it : items) {
        gather->slots.push_back(Gather::Slot{it.has_target ? it.target.dptr : nullptr, it.k->proto.Bytes()});
        gather->key_failed.push_back(&it.k->failed);
      }
      for (std::size_t i = 0; i < items.size(); ++i) {
        const Item& it = items[i];
        const std::uint64_t id = NextId();
        net::Message frame;
        try {
          frame = TensorFrame(it.op, it.key, *it.k, 0, it.data, id, held, nullptr, 0.f, priority, it.round);
        } catch (const std::exception& e) {
          gather->Complete(i, Reply{e.what(), std::nullopt, {}});
          continue;
        }
        out.push_back(WorkerLink::Outgoing{
            id, std::move(std::get<net::TensorMsg>(frame)),
            ReplyFn([gather, i](Reply r) { gather->Complete(i, std::move(r)); })});
      }
      if (!out.empty()) link_->SendBatch(server, std::move(out));
    };
    jobs[0]->k->proto.engine()->PushAsync(std::move(fn), Context::CPU(0), reads, writes, FnProperty::kAsync, priority,
                                          op == net::TensorOp::kPull ? "kvstore_dist_pull_batch"
                                                                     : "kvstore_dist_push_batch");
  }

  // Sends one request and returns its answer's future (answered on a node's death too).
  // Throws once the store was finalized (its connections are gone).
  void CheckOpen(const char* op) const override {
    if (!link_) {
      throw Error(std::string("KVStore::") + op + ": this store has left the cluster (KVStore::Finalize)");
    }
  }

  std::future<Reply> Call(int target, std::uint64_t id, net::Message frame) {
    CheckOpen("call");
    auto promise = std::make_shared<std::promise<Reply>>();
    auto future = promise->get_future();
    link_->Request(target, id, std::move(frame), ReplyFn([promise](Reply r) { promise->set_value(std::move(r)); }));
    return future;
  }

  void AllServers(net::Command c, const char* op) {
    std::vector<std::future<Reply>> replies;
    for (int s = 0; s < num_servers_; ++s) {
      c.request_id = NextId();
      replies.push_back(Call(s, c.request_id, c));
    }
    std::string error;
    for (auto& f : replies) {
      const Reply r = f.get();
      if (!r.error.empty() && error.empty()) error = r.error;
    }
    if (!error.empty()) throw Error(std::string("KVStore::") + op + ": " + error);
  }

  // Leaves the cluster after the pending functions finished (orderly), then stops the actor.
  // kFinalize: a clean leave once the pending calls finished; returns why the job failed (the scheduler's
  // answer), or empty. kFail: tells the scheduler that this worker failed, fails what is pending, and
  // waits for the key functions to end (they use this object).
  enum class End { kFinalize, kFail };
  std::string Shutdown(End end) {
    std::string error;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.heartbeat_timeout_ms);
    if (end == End::kFinalize) {
      WaitKeys();
      link_->Leave();  // from now on, closing connections are expected
      try {
        std::vector<std::future<Reply>> replies;
        for (int s = kScheduler; s < num_servers_; ++s) {
          const std::uint64_t id = NextId();
          replies.push_back(Call(s, id, net::Command{id, "leave", {}}));
        }
        for (auto& f : replies) f.wait_until(deadline);
        if (replies.front().wait_until(deadline) == std::future_status::ready) {
          error = replies.front().get().error;
        } else {
          error = "the scheduler did not answer the leave within " + std::to_string(config_.heartbeat_timeout_ms) + " ms";
        }
      } catch (const std::exception& e) {
        error = e.what();
      }
    } else if (end == End::kFail) {
      const std::string first = link_->first_error();
      const std::string why = "worker " + std::to_string(rank_) +
                              " ended without KVStore::Finalize() (its program failed or stopped early" +
                              (first.empty() ? std::string(")") : "; its first error: " + first + ")");
      try {
        const std::uint64_t id = NextId();
        Call(kScheduler, id, net::Command{id, "fail", {{"message", why}}}).wait_until(deadline);
      } catch (const std::exception&) {
      }
      link_->Fail(why);  // what is pending fails, and so does anything later
      WaitKeys();
    }
    link_.reset();  // stops the actor
    return error;
  }

  DistConfig config_;
  std::unique_ptr<WorkerLink> link_;
  int rank_ = -1;
  int num_workers_ = 0;
  int num_servers_ = 0;
  std::vector<std::size_t> server_bytes_;
  std::map<int, std::unique_ptr<Key>> keys_;
  std::atomic<std::uint64_t> next_id_{0};
  std::int64_t init_calls_ = 0;  // Init calls so far (their declarations are compared per call)
  std::unique_ptr<GradientCompression> gc_;
  Kwargs gc_config_;
};

}  // namespace
}  // namespace internal

std::unique_ptr<KVStore> CreateDistKVStore(const std::string& type, const DistConfig& config) {
  if (type != "dist_sync" && type != "dist_async" && type != "dist_device_sync") {
    throw Error("CreateDistKVStore: unknown type '" + type + "'; known: dist_sync, dist_async, dist_device_sync");
  }
  return std::make_unique<internal::KVStoreDist>(type, config);
}

}  // namespace troupe
