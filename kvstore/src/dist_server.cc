// A server of the distributed KVStore (kvstore/dist.h): owns the keys (or parts of big keys) the workers
// send it, sums a sync round's pushes, runs the optimizer, answers pulls, writes and loads checkpoints.
// One actor; the connections (to the scheduler, from each worker) are brokers of it (kvstore/net). The
// values are NDArrays on cpu(0): a small key's on a synchronous engine of the servers' own, so that its
// optimizer update runs on the thread handling the frame, a big key's on the process's engine (EngineForKey).
// The server waits for each update to finish before it answers, so a reply always carries the updated value.
// A worker's small tensor frame is handled in its connection's broker, on the thread that read it, when the
// actor is idle and nothing mailed to it waits (Server::TakeInBroker): a small-key round then costs one thread
// hand-off on the server instead of two. Frames with big tensors, and commands, go to the actor, so that
// the thread that reads the sockets goes on reading while the actor sums.
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "base/error.h"
#include "engine/profiler.h"
#include "kvstore/internal/dist_common.h"
#include "kvstore/internal/dist_roles.h"
#include "kvstore/internal/store_checks.h"
#include "kvstore/net/internal/transport.h"
#include "tensor/ndarray.h"
#include "op/optimizer.h"

namespace troupe::internal {
namespace {

using init_atom = caf::atom_constant<caf::atom("srv_init")>;
using gone_atom = caf::atom_constant<caf::atom("srv_gone")>;
using finish_atom = caf::atom_constant<caf::atom("srv_finish")>;

// A worker's tensor frame with at most this many tensor bytes is handled in its broker when the server is
// idle. Bigger ones (a big key's sum, a batch of big keys) go to the actor, off the thread that reads the
// sockets, and so do commands (a checkpoint, a leave that completes every round): rare, and some are long.
constexpr std::size_t kFrameInBrokerBytes = std::size_t{64} << 10;

bool SmallTensorFrame(const net::Message& m) {
  if (const auto* t = std::get_if<net::TensorMsg>(&m)) return t->value.data.size() <= kFrameInBrokerBytes;
  const auto* b = std::get_if<net::TensorBatch>(&m);
  if (b == nullptr) return false;
  std::size_t bytes = 0;
  for (const net::TensorMsg& t : b->entries) bytes += t.value.data.size();
  return bytes <= kFrameInBrokerBytes;
}

// A key of at most this many bytes is updated on the thread that handles its frame: its arrays belong to a
// synchronous engine of the servers' own (the naive engine, which runs a function inside Push), so the
// optimizer's update runs inside Optimizer::Update. Through the process's engine, the update went to a worker
// thread and the handler slept until it was done: two thread wake-ups per frame, 70 us of the MLP's 0.9 ms
// dist_sync step here, more than the update itself (SGD with momentum: 0.2 ns a float). Bigger keys stay on
// the process's engine, whose workers update several of a frame's keys at once (Server::SettleUpdates).
constexpr std::size_t kInlineUpdateBytes = std::size_t{1} << 20;

Engine* EngineForKey(std::size_t bytes) {
  if (bytes > kInlineUpdateBytes) return Engine::Get();
  // Never destroyed: a reply may still hold a key's array while the process exits.
  static Engine* const inline_engine = [] {
    EngineConfig config;
    config.type = EngineType::kNaive;
    return Engine::Create(config).release();
  }();
  return inline_engine;
}

// An array for a key's value on this server, on the engine of its size (EngineForKey).
NDArray KeyArray(const TShape& shape, DType dtype) {
  const std::size_t bytes = static_cast<std::size_t>(shape.Size()) * DTypeSize(dtype);
  return NDArray(shape, Context::CPU(0), dtype, EngineForKey(bytes));
}

struct Waiter {
  caf::actor conn;
  std::uint64_t id = 0;
  bool wants_value = false;
};

struct Entry {
  NDArray stored;
  NDArray merged;
  // Replies view `stored` until their broker has written them to the socket (kvstore/net/internal/
  // transport.h); each holds a copy of this pointer. Before the server writes an array a reply may still
  // view (use_count > 1), it takes fresh memory instead (copy-on-write), so a reply always carries the value
  // it was made with. In a sync round every reply is written before the workers can push the next round,
  // so the copy is rare; in dist_async a push may arrive while a reply is still being written.
  std::shared_ptr<const NDArray> stored_hold, merged_hold;
  std::uint32_t part_index = 0;
  std::uint32_t part_count = 1;
  std::set<int> pushed;  // workers whose push is in the current sync round
  Clock::time_point round_started;  // when its first push arrived
  std::int64_t rounds = 0;          // sync rounds completed (applied), kept in checkpoints
  std::map<int, std::uint64_t> worker_rounds;  // dist_async: each worker's pushes applied, kept in checkpoints
  // The round's first push, kept as received (its frame buffer) until the second arrives: the two are
  // then summed into `merged` in one pass instead of a copy and an add.
  net::Blob first_push;
  std::vector<Waiter> waiters;
  std::vector<std::pair<caf::actor, net::TensorMsg>> deferred;  // a worker's next-round pushes
  // An optimizer update pushed while a frame is handled is waited for once for all of the frame's keys
  // (Server::SettleUpdates), not once per key: until then `stored` and `merged` are the engine's.
  bool unsettled = false;
  std::string update_error;  // why such an update failed (its answers become errors), until the flush
};

struct WorkerConn {
  int rank = -1;
  std::string host;
  bool observer = false;  // a look into the cluster (ClusterObserver): pulls and reading commands only
};

// What a checkpoint holds (loaded before the actor starts, so that a bad one is an error at start-up).
struct Checkpoint {
  std::map<int, Entry> entries;
  std::vector<std::pair<std::string, std::string>> optimizer_args;  // empty = no optimizer
  std::unique_ptr<Optimizer> optimizer;                             // with its states loaded
  std::int64_t updates = 0;
};

std::string CheckpointBase(const std::string& dir, int rank) {
  return (std::filesystem::path(dir) / ("server-" + std::to_string(rank))).string();
}

Checkpoint LoadCheckpoint(const DistConfig& config) {
  Checkpoint ck;
  if (config.rank < 0 || config.checkpoint_dir.empty()) return ck;
  const std::string base = CheckpointBase(config.checkpoint_dir, config.rank);
  if (!std::filesystem::exists(base + ".params")) return ck;  // a first start: nothing to load
  std::vector<NDArray> arrays;
  std::vector<std::string> names;
  const Context cpu = Context::CPU(0);
  NDArray::Load(base + ".params", &arrays, &names, &cpu);
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    int key = 0;
    unsigned part = 0, parts = 1;
    if (std::sscanf(names[i].c_str(), "key:%d:%u:%u", &key, &part, &parts) != 3) {
      throw Error("kvstore server: checkpoint " + base + ".params has an array named '" + names[i] +
                  "', not key:<key>:<part>:<parts>; is it a server checkpoint?");
    }
    Entry& e = ck.entries[key];
    e.stored = arrays[i].CopyTo(cpu, EngineForKey(arrays[i].Bytes()));
    e.merged = KeyArray(arrays[i].shape(), arrays[i].dtype());
    e.part_index = part;
    e.part_count = parts;
  }
  std::ifstream meta(base + ".meta");
  std::string line;
  while (std::getline(meta, line)) {
    const auto tab = line.find('\t');
    if (tab == std::string::npos) continue;
    const std::string k = line.substr(0, tab), v = line.substr(tab + 1);
    if (k == "updates") {
      ck.updates = std::stoll(v);
    } else if (k == "round" || k == "wround") {
      // "round\t<key> <rounds>" (sync) and "wround\t<key> <worker> <pushes>" (async).
      std::istringstream in(v);
      int key = 0, worker = 0;
      std::int64_t n = 0;
      in >> key;
      if (k == "wround") in >> worker;
      in >> n;
      auto it = ck.entries.find(key);
      if (!in || it == ck.entries.end()) {
        throw Error("kvstore server: checkpoint " + base + ".meta has a bad line '" + line + "'");
      }
      if (k == "round") {
        it->second.rounds = n;
      } else {
        it->second.worker_rounds[worker] = static_cast<std::uint64_t>(n);
      }
    } else if (k.rfind("opt.", 0) == 0) {
      ck.optimizer_args.emplace_back(k.substr(4), v);
    }
  }
  if (!ck.optimizer_args.empty()) {
    ck.optimizer = Optimizer::Create(OptimizerFromArgs(ck.optimizer_args));
    if (std::filesystem::exists(base + ".states")) ck.optimizer->LoadStates(base + ".states");
  }
  return ck;
}

// Thread-safety: everything runs under mu_, on the actor's thread or (TakeInBroker) on a broker's.
class Server {
 public:
  Server(DistConfig config, std::shared_ptr<Outcome> outcome, Checkpoint ck)
      : config_(std::move(config)), outcome_(std::move(outcome)) {
    entries_ = std::move(ck.entries);
    updates_ = ck.updates;
    optimizer_args_ = std::move(ck.optimizer_args);
    optimizer_ = std::move(ck.optimizer);
    resumed_ = !entries_.empty();
    last_seen_ = Clock::now();
  }

  // The counter of what this server's connections mailed it (net::ConnOptions::owner_backlog).
  const std::shared_ptr<std::atomic<std::int64_t>>& backlog() const { return backlog_; }

  // The actor's behaviour; every handler holds mu_.
  caf::behavior Make(caf::event_based_actor* self) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      self_ = self;
    }
    return {
        [this](init_atom, const caf::actor& scheduler, std::uint16_t port) {
          std::lock_guard<std::mutex> lock(mu_);
          scheduler_ = scheduler;
          port_ = port;
          Send(scheduler_, net::Hello{net::Role::kServer, config_.rank, net::kProtocolVersion, config_.host, port_});
          self_->send(self_, net::tick_atom::value);
        },
        [this](net::recv_atom, const caf::actor& conn, const net::Message& m) {
          std::lock_guard<std::mutex> lock(mu_);
          const Mailed taken(*backlog_);
          HandleFrame(conn, m);
        },
        [this](net::closed_atom, const caf::actor& conn, const std::string& why) {
          std::lock_guard<std::mutex> lock(mu_);
          const Mailed taken(*backlog_);
          OnClosed(conn, why);
        },
        [this](net::tick_atom) {
          std::lock_guard<std::mutex> lock(mu_);
          OnTick();
        },
        [this](gone_atom, int rank, const std::string& what) {
          std::lock_guard<std::mutex> lock(mu_);
          for (const auto& [conn, w] : workers_) {
            if (w.rank == rank && !w.observer) return;  // it is back (a new connection with its rank)
          }
          WorkerDied(rank, what);
        },
        [this](finish_atom, int status, const std::string& message) {
          std::lock_guard<std::mutex> lock(mu_);
          Finish(status, message);
        },
    };
  }

  // The actor ended (however it ended): no broker handles a frame for it afterwards.
  void Stopped() {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }

  // The FrameHook of the workers' connections (on the broker's thread): handles a tensor frame of at most
  // kFrameInBrokerBytes tensor bytes right there when the actor is idle and nothing the brokers mailed it
  // waits (then this frame cannot overtake an earlier one of its connection, nor a close); else leaves it
  // to the actor.
  bool TakeInBroker(const caf::actor& conn, const net::Message& m) {
    if (backlog_->load(std::memory_order_acquire) != 0 || !SmallTensorFrame(m)) return false;
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock() || self_ == nullptr || stopped_ || finished_) return false;
    in_broker_ = true;
    try {
      HandleFrame(conn, m);
    } catch (const std::exception& e) {
      // As an exception in the actor's handler would: the server ends.
      std::fprintf(stderr, "troupe %s: %s\n", Me().c_str(), e.what());
      caf::anon_send(caf::actor_cast<caf::actor>(self_), finish_atom::value, 1, std::string(e.what()));
    }
    in_broker_ = false;
    return true;
  }

 private:
  // Takes one off the backlog when a mailed message has been handled (however the handler ends).
  struct Mailed {
    explicit Mailed(std::atomic<std::int64_t>& backlog) : backlog(backlog) {}
    ~Mailed() { backlog.fetch_sub(1, std::memory_order_acq_rel); }
    std::atomic<std::int64_t>& backlog;
  };

  void HandleFrame(const caf::actor& conn, const net::Message& m) {
    // What handling the frame says to each connection leaves together, at the end (Flush).
    ++gathering_;
    try {
      OnFrame(conn, m);
    } catch (...) {
      --gathering_;
      Flush();
      throw;
    }
    --gathering_;
    Flush();
  }

  // Written on this thread when nothing waits on the connection, else by its broker (a value reply views
  // `stored`: see Entry::stored_hold). While a frame is handled, messages are gathered and Flush sends
  // them: the answers a connection gets from one frame (a batch's keys, or a sync round that the frame
  // completed for every worker) go out as one ReplyBatch instead of a frame each.
  void Send(const caf::actor& conn, const net::Message& m) {
    if (gathering_ > 0) {
      gathered_.push_back(Said{conn, m, answering_});
      return;
    }
    net::Send(conn, m);
  }
  // Waits for an entry's optimizer update pushed while this frame was handled; a failure is kept for its
  // answers (Flush) and never thrown here.
  void Settle(Entry& e) {
    if (!e.unsettled) return;
    e.unsettled = false;
    try {
      e.stored.WaitToRead();
    } catch (const std::exception& ex) {
      e.update_error = Me() + ": the update of a key failed: " + ex.what();
      errored_.push_back(&e);
    }
  }
  void SettleUpdates() {
    for (Entry* e : unsettled_) Settle(*e);
    unsettled_.clear();
  }
  // Sends what was gathered, per connection in order: consecutive answers (acks, and errors about a
  // request) in one ReplyBatch when there are several; anything else as it is. Called before a connection
  // is closed too, so that nothing said to it before is lost.
  void Flush() {
    SettleUpdates();  // the replies view `stored`: its pending updates first
    auto gathered = std::move(gathered_);
    gathered_.clear();
    for (auto& [conn, m, entry] : gathered) {
      // An answer after an update that failed when it was waited for reports the failure instead.
      const auto* a = std::get_if<net::Ack>(&m);
      if (a != nullptr && entry != nullptr && !entry->update_error.empty()) {
        m = net::ErrorMsg{a->request_id, entry->update_error, -1, net::Role::kWorker};
      }
    }
    for (Entry* e : errored_) e->update_error.clear();
    errored_.clear();
    std::vector<bool> sent(gathered.size(), false);
    for (std::size_t i = 0; i < gathered.size(); ++i) {
      if (sent[i]) continue;
      const caf::actor& conn = gathered[i].conn;
      // Only workers read batches of answers (the scheduler and observers get one answer per request).
      auto w = workers_.find(conn);
      const bool batches = w != workers_.end() && !w->second.observer;
      net::ReplyBatch batch;
      std::size_t answers = 0;
      std::optional<net::Message> single;
      auto flush_answers = [&] {
        if (answers == 1) net::Send(conn, *single);
        if (answers > 1) net::Send(conn, batch);
        batch = {};
        single.reset();
        answers = 0;
      };
      for (std::size_t j = i; j < gathered.size(); ++j) {
        if (sent[j] || gathered[j].conn != conn) continue;
        sent[j] = true;
        net::Message& m = gathered[j].message;
        if (!batches) {
          net::Send(conn, m);
        } else if (auto* a = std::get_if<net::Ack>(&m)) {
          if (answers++ == 0) single = *a;
          batch.acks.push_back(std::move(*a));
        } else if (auto* e = std::get_if<net::ErrorMsg>(&m); e != nullptr && e->request_id != 0) {
          if (answers++ == 0) single = *e;
          batch.errors.push_back(std::move(*e));
        } else {
          flush_answers();
          net::Send(conn, m);
        }
      }
      flush_answers();
    }
  }
  void Fail(const caf::actor& conn, std::uint64_t id, const std::string& why, int dead_rank = -1) {
    Send(conn, net::ErrorMsg{id, why, dead_rank, net::Role::kWorker});
  }
  // Before the scheduler's start, the rank asked for (if any).
  std::string Me() const {
    const int r = rank_ >= 0 ? rank_ : config_.rank;
    return r >= 0 ? "server " + std::to_string(r) : std::string("server");
  }

  int ActiveWorkers() const {
    return num_workers_ - static_cast<int>(left_.size()) - static_cast<int>(dead_.size());
  }
  // Workers of `pushed` that are still active: a push of a worker that left since stays in the sum but
  // does not stand in for an active worker's.
  int ActivePushed(const std::set<int>& pushed) const {
    int n = 0;
    for (int r : pushed) n += left_.count(r) == 0 && dead_.count(r) == 0 ? 1 : 0;
    return n;
  }

  void OnFrame(const caf::actor& conn, const net::Message& m) {
    if (conn == scheduler_) {
      last_seen_ = Clock::now();
      if (const auto* c = std::get_if<net::Command>(&m)) return OnSchedulerCommand(*c);
      if (const auto* e = std::get_if<net::ErrorMsg>(&m)) return Finish(1, "the scheduler refused this server: " + e->message);
      return;  // heartbeats
    }
    if (rank_ < 0) {
      early_.emplace_back(conn, m);  // before the scheduler's start: keep it until then
      return;
    }
    auto it = workers_.find(conn);
    if (it == workers_.end()) {
      const auto* hello = std::get_if<net::Hello>(&m);
      std::string why = hello == nullptr ? "the first frame of a connection must be a hello" : CheckHello(*hello);
      const bool observer = hello != nullptr && hello->role == net::Role::kObserver;
      if (why.empty() && !observer && (hello->role != net::Role::kWorker || hello->rank < 0 || hello->rank >= num_workers_)) {
        why = "only workers with a rank from the scheduler (and observers) connect to a server";
      }
      if (why.empty() && !observer) {
        // A rank that is held cannot be claimed by a second connection (whose close would end the job).
        for (const auto& [other, wc] : workers_) {
          if (!wc.observer && wc.rank == hello->rank) {
            why = "worker rank " + std::to_string(hello->rank) + " is already connected (from " + wc.host + ")";
          }
        }
        if (dead_.count(hello->rank) != 0 || left_.count(hello->rank) != 0) {
          why = "worker " + std::to_string(hello->rank) + " has " + (dead_.count(hello->rank) ? "died" : "left") +
                "; its rank cannot rejoin";
        }
      }
      if (!why.empty()) {
        std::fprintf(stderr, "troupe %s: refused a connection: %s\n", Me().c_str(), why.c_str());
        Fail(conn, 0, "refused by " + Me() + ": " + why);
        Flush();
        caf::anon_send(conn, net::close_atom::value);
        return;
      }
      workers_[conn] = WorkerConn{observer ? -1 : hello->rank, hello->host, observer};
      Send(conn, net::Hello{net::Role::kServer, rank_, net::kProtocolVersion, config_.host, port_});
      return;
    }
    const WorkerConn& w = it->second;
    if (w.observer) return OnObserverFrame(conn, m);
    if (const auto* t = std::get_if<net::TensorMsg>(&m)) {
      ++tensor_frames_;
      return OnTensor(conn, w, *t);
    }
    if (const auto* b = std::get_if<net::TensorBatch>(&m)) {
      ++tensor_frames_;
      ++batches_;
      // A worker's keys for this server in one frame: each handled as if it came alone, in order; their
      // answers leave together (Flush).
      for (const net::TensorMsg& t : b->entries) {
        auto again = workers_.find(conn);  // an entry's failure may have ended the job
        if (again == workers_.end() || finished_) return;
        OnTensor(conn, again->second, t);
      }
      return;
    }
    if (const auto* c = std::get_if<net::Command>(&m)) return OnWorkerCommand(conn, w, *c);
    if (std::holds_alternative<net::Heartbeat>(m)) return;
    Fail(conn, 0, Me() + " does not take this kind of frame");
  }

  // An observer reads: pulls of stored values (answered at once, never waiting for a round), "keys",
  // "stats" and "checkpoint".
  void OnObserverFrame(const caf::actor& conn, const net::Message& m) {
    if (const auto* t = std::get_if<net::TensorMsg>(&m)) {
      if (t->op != net::TensorOp::kPull) return Fail(conn, t->request_id, Me() + ": an observer can only pull");
      auto it = entries_.find(t->key);
      if (it == entries_.end()) {
        return Fail(conn, t->request_id, Me() + " holds no key " + std::to_string(t->key));
      }
      return ReplyValue(conn, t->request_id, it->second);
    }
    const auto* c = std::get_if<net::Command>(&m);
    if (c == nullptr) {
      if (std::holds_alternative<net::Heartbeat>(m)) return;
      return Fail(conn, 0, Me() + " does not take this kind of frame from an observer");
    }
    if (c->name == "checkpoint") return OnWorkerCommand(conn, WorkerConn{-1, "", true}, *c);
    net::Command reply{c->request_id, c->name, {}};
    if (c->name == "keys") {
      // "<key> <dtype> <shape> <part>/<parts>" per key, in key order.
      for (const auto& [key, e] : entries_) {
        reply.args.emplace_back("key", std::to_string(key) + " " + DTypeName(e.stored.dtype()) + " " +
                                           ShapeText(e.stored.shape().ToVector()) + " " +
                                           std::to_string(e.part_index) + "/" + std::to_string(e.part_count));
      }
    } else if (c->name == "stats") {
      int workers = 0;
      for (const auto& [wc, wk] : workers_) workers += wk.observer ? 0 : 1;
      reply.args = {{"rank", std::to_string(rank_)},        {"keys", std::to_string(entries_.size())},
                    {"pushes", std::to_string(pushes_)},    {"pulls", std::to_string(pulls_)},
                    {"updates", std::to_string(updates_)},  {"bytes_in", std::to_string(bytes_in_)},
                    {"bytes_out", std::to_string(bytes_out_)}, {"workers", std::to_string(workers)},
                    {"tensor_frames", std::to_string(tensor_frames_)}, {"batches", std::to_string(batches_)},
                    {"mode", !mode_set_ ? "unset" : sync_ ? "sync" : "async"}};
    } else {
      return Fail(conn, c->request_id, Me() + " has no observer command '" + c->name + "' (keys, stats, checkpoint)");
    }
    Send(conn, reply);
  }

  void OnSchedulerCommand(const net::Command& c) {
    try {
      if (c.name == "start") {
        rank_ = IntArg(c, "rank");
        num_workers_ = IntArg(c, "num_workers");
        // Joining a running cluster (a restart): the workers that already left or died.
        for (const auto& [k, v] : c.args) {
          if (k == "left") left_.insert(std::stoi(v));
          if (k == "dead") {
            dead_.insert(std::stoi(v));
            dead_rank_ = std::stoi(v);
          }
          if (k == "broken") broken_ = v;
        }
        if (config_.rank >= 0 && config_.rank != rank_) {
          return Finish(1, "asked for rank " + std::to_string(config_.rank) + " but the scheduler gave " +
                               std::to_string(rank_));
        }
        std::printf("troupe server %d: started (listening on %s:%u)\n", rank_, config_.host.c_str(), port_);
        if (resumed_) {
          std::int64_t lo = -1, hi = -1;
          for (const auto& [key, e] : entries_) {
            lo = lo < 0 ? e.rounds : std::min(lo, e.rounds);
            hi = std::max(hi, e.rounds);
          }
          std::printf("troupe server %d: resumed from its checkpoint in %s: %zu keys at rounds %lld..%lld, %lld updates, "
                      "optimizer %s; the workers resend what it lacks\n",
                      rank_, config_.checkpoint_dir.c_str(), entries_.size(), static_cast<long long>(lo),
                      static_cast<long long>(hi), static_cast<long long>(updates_),
                      optimizer_ != nullptr ? "restored" : "none");
        }
        std::fflush(stdout);
        auto early = std::move(early_);
        early_.clear();
        for (const auto& [conn, m] : early) OnFrame(conn, m);
        return;
      }
      if (c.name == "node_dead") {
        if (Arg(c, "role") == "worker") WorkerDied(IntArg(c, "rank"), Arg(c, "message"));
        return;
      }
      if (c.name == "broken") return Break(Arg(c, "message", "the job failed"), IntArg(c, "rank"));
      if (c.name == "stop") return Finish(0, "");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "troupe %s: bad command from the scheduler: %s\n", Me().c_str(), e.what());
    }
  }

  void OnWorkerCommand(const caf::actor& conn, const WorkerConn& w, const net::Command& c) {
    try {
      if (c.name == "mode") {
        const bool sync = Arg(c, "sync") == "1";
        if (mode_set_ && sync != sync_) {
          return Fail(conn, c.request_id, "worker " + std::to_string(w.rank) + " asked for " +
                                              (sync ? "dist_sync" : "dist_async") + " but other workers use " +
                                              (sync_ ? "dist_sync" : "dist_async") + "; create every worker's store with the same type");
        }
        sync_ = sync;
        mode_set_ = true;
        // The answer tells the worker what this server holds, so that after a restart it resends what the
        // checkpoint lacks: whether it checkpoints by itself, whether it has an optimizer, and per key the
        // pushes it applied (sync: the rounds; async: this worker's pushes).
        net::Command reply{c.request_id, "mode", {{"checkpointing", RecoveryOn() ? "1" : "0"},
                                                   {"optimizer", optimizer_ != nullptr ? "1" : "0"}}};
        AppendRounds(w.rank, &reply.args);
        return Send(conn, reply);
      } else if (c.name == "set_optimizer") {
        if (w.rank != 0) {
          return Fail(conn, c.request_id, Me() + ": only worker 0 sets the optimizer (as in MXNet), not " +
                                              (w.observer ? std::string("an observer") : "worker " + std::to_string(w.rank)));
        }
        std::vector<std::pair<std::string, std::string>> args = c.args;
        optimizer_ = Optimizer::Create(OptimizerFromArgs(args));
        optimizer_args_ = std::move(args);
      } else if (c.name == "checkpoint") {
        for (const auto& [k, v] : c.args) {
          if (k == "dir") {
            std::fprintf(stderr, "troupe %s: refused a checkpoint into '%s' asked by %s\n", Me().c_str(), v.c_str(),
                         w.observer ? "an observer" : ("worker " + std::to_string(w.rank)).c_str());
            return Fail(conn, c.request_id, Me() + ": " + kNoPeerPaths);
          }
        }
        if (config_.checkpoint_dir.empty()) {
          return Fail(conn, c.request_id, Me() + " has no checkpoint directory: start the servers with "
                                                 "--checkpoint-dir (TROUPE_KVSTORE_CHECKPOINT_DIR)");
        }
        WriteCheckpoint(config_.checkpoint_dir);
      } else if (c.name == "declare") {
        if (w.observer) return Fail(conn, c.request_id, Me() + ": an observer declares no keys");
        return OnDeclare(conn, w.rank, c);
      } else if (c.name == "leave") {
        left_.insert(w.rank);
        Send(conn, net::Ack{c.request_id, std::nullopt});
        for (auto& [key, e] : entries_) MaybeComplete(key, e);
        return;
      } else {
        return Fail(conn, c.request_id, Me() + " has no command '" + c.name + "'");
      }
      Send(conn, net::Ack{c.request_id, std::nullopt});
    } catch (const std::exception& e) {
      Fail(conn, c.request_id, Me() + ": " + c.name + " failed: " + e.what());
    }
  }

  void OnTensor(const caf::actor& conn, const WorkerConn& w, const net::TensorMsg& t) {
    const std::string key_text = "key " + std::to_string(t.key);
    static constexpr const char* kSpanNames[] = {"server init", "server push", "server pull", "server pushpull"};
    const ProfileScope span("kvstore", kSpanNames[static_cast<int>(t.op)],
                            Profiler::on() ? key_text + " from worker " + std::to_string(w.rank) : std::string());
    if (t.op == net::TensorOp::kInit) {
      auto it = entries_.find(t.key);
      if (it != entries_.end()) {
        // Already there: a second Init, or a restarted server that loaded its checkpoint. Keep the value.
        if (it->second.stored.shape().ToVector() != t.value.shape || it->second.stored.dtype() != t.value.dtype) {
          return Fail(conn, t.request_id, Me() + ": " + key_text + " is already initialised with shape " +
                                              ShapeText(it->second.stored.shape().ToVector()) + ", not " +
                                              ShapeText(t.value.shape));
        }
        return Send(conn, net::Ack{t.request_id, std::nullopt});
      }
      Entry& e = entries_[t.key];
      const TShape shape(t.value.shape);
      e.stored = KeyArray(shape, t.value.dtype);
      e.merged = KeyArray(shape, t.value.dtype);
      e.stored.WaitToWrite();
      std::memcpy(e.stored.data().dptr, t.value.data.bytes.data(), t.value.data.size());
      e.part_index = t.part_index;
      e.part_count = t.part_count;
      return Send(conn, net::Ack{t.request_id, std::nullopt});
    }
    auto it = entries_.find(t.key);
    if (it == entries_.end()) {
      return Fail(conn, t.request_id, Me() + ": " + key_text + " has not been initialised; call Init first");
    }
    Entry& e = it->second;
    if (t.op != net::TensorOp::kPull) {
      const DType want = t.compressed ? DType::kFloat32 : t.value.dtype;
      if (e.stored.shape().ToVector() != t.value.shape || e.stored.dtype() != want) {
        const std::string why = key_text + " holds " + DTypeName(e.stored.dtype()) +
                                ShapeText(e.stored.shape().ToVector()) + " but worker " + std::to_string(w.rank) +
                                " pushed " + DTypeName(want) + ShapeText(t.value.shape);
        // In a sync round the other workers would wait for this push: the job fails for everyone.
        if (sync_) ReportFailure(why);
        return Fail(conn, t.request_id, Me() + ": " + why);
      }
      ++pushes_;
      bytes_in_ += static_cast<std::int64_t>(t.value.data.size());
    }
    if (t.op == net::TensorOp::kPull) {
      if (sync_ && e.pushed.count(w.rank) != 0) {
        e.waiters.push_back({conn, t.request_id, true});  // its own push is in this round: answer after it
      } else {
        ReplyValue(conn, t.request_id, e);
      }
      return;
    }
    if (!sync_) {
      // A numbered push this server applied already (a resend to a server restarted from a checkpoint, or a
      // duplicate) is answered without applying it again.
      if (t.round != 0 && t.round <= e.worker_rounds[w.rank]) {
        if (t.op == net::TensorOp::kPushPull) return ReplyValue(conn, t.request_id, e);
        return Send(conn, net::Ack{t.request_id, std::nullopt});
      }
      if (t.round != 0) e.worker_rounds[w.rank] = t.round;
      try {
        Accumulate(e, t, true);
        Update(t.key, e);
      } catch (const std::exception& ex) {
        return Fail(conn, t.request_id, Me() + ": the update of " + key_text + " failed: " + ex.what());
      }
      answering_ = &e;
      if (t.op == net::TensorOp::kPushPull) {
        ReplyValue(conn, t.request_id, e);
      } else {
        Send(conn, net::Ack{t.request_id, std::nullopt});
      }
      answering_ = nullptr;
      return;
    }
    if (!broken_.empty()) return Fail(conn, t.request_id, broken_, dead_rank_);
    // A numbered push: round r applies to round r only. An earlier one was applied already (a resend after
    // a restart, or a duplicate): answered at once with the value, which is round r's or later's. A later
    // one waits for its round.
    if (t.round != 0 && static_cast<std::int64_t>(t.round) <= e.rounds) {
      if (t.op == net::TensorOp::kPushPull) return ReplyValue(conn, t.request_id, e);
      return Send(conn, net::Ack{t.request_id, std::nullopt});
    }
    if (e.pushed.count(w.rank) != 0 || (t.round != 0 && static_cast<std::int64_t>(t.round) > e.rounds + 1)) {
      e.deferred.emplace_back(conn, t);  // this worker is a round ahead: keep its push for its round
      return;
    }
    if (e.pushed.empty()) e.round_started = Clock::now();
    Accumulate(e, t, e.pushed.empty(), /*defer_first=*/true);
    e.pushed.insert(w.rank);
    e.waiters.push_back({conn, t.request_id, t.op == net::TensorOp::kPushPull});
    MaybeComplete(t.key, e);
  }

  // merged = payload (first push of a round) or merged += payload. With `defer_first`, an uncompressed
  // first push is only kept (Entry::first_push) and summed with the second.
  // Nothing else touches `merged` here: the last update that read it was waited for (Update), and a reply
  // still viewing it (it was `stored` before a swap) makes it fresh memory.
  void Accumulate(Entry& e, const net::TensorMsg& t, bool first, bool defer_first = false) {
    Settle(e);  // the last update read `merged`
    if (first && defer_first && !t.compressed) {
      e.first_push = t.value.data;
      return;
    }
    if (first) Unshare(&e.merged, &e.merged_hold, false);
    const TBlob out = e.merged.data();
    if (e.first_push.size() != 0) {
      const net::Blob first_push = std::exchange(e.first_push, {});  // keeps its buffer alive to the end
      const TBlob kept(const_cast<std::byte*>(first_push.bytes.data()), out.shape, out.dtype, out.ctx);
      Unshare(&e.merged, &e.merged_hold, false);
      const TBlob target = e.merged.data();
      if (!t.compressed) {
        const TBlob in(const_cast<std::byte*>(t.value.data.bytes.data()), out.shape, out.dtype, out.ctx);
        return SumOnHost({kept, in}, target);
      }
      std::memcpy(target.dptr, kept.dptr, e.merged.Bytes());
      return Accumulate(e, t, false);
    }
    const std::int64_t n = out.shape.Size();
    if (t.compressed) {
      float* dst = static_cast<float*>(out.dptr);
      const auto* in = reinterpret_cast<const std::uint8_t*>(t.value.data.bytes.data());
      if (first) return Dequantize2BitCpu(in, dst, n, t.compression_threshold);
      scratch_.resize(static_cast<std::size_t>(n));
      Dequantize2BitCpu(in, scratch_.data(), n, t.compression_threshold);
      for (std::int64_t i = 0; i < n; ++i) dst[i] += scratch_[static_cast<std::size_t>(i)];
      return;
    }
    if (first) {
      std::memcpy(out.dptr, t.value.data.bytes.data(), t.value.data.size());
      return;
    }
    const TBlob in(const_cast<std::byte*>(t.value.data.bytes.data()), out.shape, out.dtype, out.ctx);
    SumOnHost({out, in}, out);
  }

  // stored = optimizer(merged) or merged; waits for the optimizer (the reply must carry the new value). The
  // server's arrays are touched by this actor only, apart from the optimizer's engine functions, so without
  // an optimizer nothing is pending and no wait is needed.
  void Update(int key, Entry& e) {
    const ProfileScope span("kvstore", "server update", Profiler::on() ? "key " + std::to_string(key) : std::string());
    Settle(e);
    const bool checkpoint_due = config_.checkpoint_every > 0 && (updates_ + 1) % config_.checkpoint_every == 0 &&
                                !config_.checkpoint_dir.empty();
    if (optimizer_ != nullptr) {
      Unshare(&e.stored, &e.stored_hold, true);  // updated in place
      optimizer_->Update(key, e.stored, e.merged);
      if (gathering_ > 0 && !checkpoint_due && config_.fault_kill_after_rounds == 0) {
        // Waited for at the end of the frame, with the other keys' updates (SettleUpdates).
        e.unsettled = true;
        unsettled_.push_back(&e);
      } else {
        e.stored.WaitToRead();
      }
    } else {
      std::swap(e.stored, e.merged);
      std::swap(e.stored_hold, e.merged_hold);
    }
    ++updates_;
    if (config_.fault_kill_after_rounds > 0 && !resumed_ && ++updates_here_ == config_.fault_kill_after_rounds) {
      std::fprintf(stderr, "troupe %s: fault injection: killing this process after %lld updates (TROUPE_FAULT_KILL_AFTER_ROUNDS)\n",
                   Me().c_str(), static_cast<long long>(updates_here_));
      std::fflush(stderr);
      std::raise(SIGKILL);
    }
    if (config_.checkpoint_every > 0 && updates_ % config_.checkpoint_every == 0 && !config_.checkpoint_dir.empty()) {
      try {
        WriteCheckpoint(config_.checkpoint_dir);
      } catch (const std::exception& ex) {
        std::fprintf(stderr, "troupe %s: periodic checkpoint failed: %s\n", Me().c_str(), ex.what());
      }
    }
  }

  void MaybeComplete(int key, Entry& e) {
    if (e.pushed.empty() || ActivePushed(e.pushed) < ActiveWorkers()) return;
    Settle(e);  // the last update read `merged`
    if (e.first_push.size() != 0) {  // a round of one push
      Unshare(&e.merged, &e.merged_hold, false);
      std::memcpy(e.merged.data().dptr, e.first_push.bytes.data(), e.merged.Bytes());
      e.first_push = {};
    }
    std::vector<Waiter> waiters = std::move(e.waiters);
    e.waiters.clear();
    e.pushed.clear();
    ++e.rounds;
    std::string error;
    try {
      Update(key, e);
    } catch (const std::exception& ex) {
      error = Me() + ": the update of key " + std::to_string(key) + " failed: " + ex.what();
    }
    answering_ = &e;
    for (const Waiter& w : waiters) {
      if (!error.empty()) {
        Fail(w.conn, w.id, error);
      } else if (w.wants_value) {
        ReplyValue(w.conn, w.id, e);
      } else {
        Send(w.conn, net::Ack{w.id, std::nullopt});
      }
    }
    answering_ = nullptr;
    // Pushes that arrived a round early start the next round.
    auto deferred = std::move(e.deferred);
    e.deferred.clear();
    for (auto& [conn, t] : deferred) {
      auto it = workers_.find(conn);
      if (it != workers_.end()) OnTensor(conn, it->second, t);
    }
  }

  void ReplyValue(const caf::actor& conn, std::uint64_t id, Entry& e) {
    const TBlob b = e.stored.data();  // up to date: every update was waited for
    ++pulls_;
    bytes_out_ += e.stored.Bytes();
    if (e.stored_hold == nullptr) e.stored_hold = std::make_shared<const NDArray>(e.stored);
    net::TensorPayload v{e.stored.dtype(), e.stored.shape().ToVector(),
                         net::Blob{{static_cast<const std::byte*>(b.dptr), e.stored.Bytes()}, e.stored_hold}};
    Send(conn, net::Ack{id, std::move(v)});
  }

  // Before writing *a: when a reply still views its memory, *a gets fresh memory (with its values when
  // `keep`); the hold is dropped either way (the next reply makes a new one).
  static void Unshare(NDArray* a, std::shared_ptr<const NDArray>* hold, bool keep) {
    if (*hold != nullptr && hold->use_count() > 1) {
      NDArray fresh(a->shape(), Context::CPU(0), a->dtype(), a->engine());
      if (keep) std::memcpy(fresh.data().dptr, a->data().dptr, a->Bytes());
      *a = fresh;
    }
    hold->reset();
  }

  void WorkerDied(int rank, const std::string& what) {
    if (rank < 0 || dead_.count(rank) != 0 || left_.count(rank) != 0) return;
    dead_.insert(rank);
    Break(what.empty() ? "worker " + std::to_string(rank) + " died" : what, rank);
  }

  // The job cannot go on: every waiting push and pull fails with `what`, and so does every later sync push
  // (the first failure is the one reported).
  void Break(const std::string& what, int rank) {
    if (!broken_.empty()) return;
    broken_ = what;
    dead_rank_ = rank;
    for (auto& [key, e] : entries_) {
      for (const Waiter& w : e.waiters) Fail(w.conn, w.id, broken_, rank);
      for (const auto& [conn, t] : e.deferred) Fail(conn, t.request_id, broken_, rank);
      e.waiters.clear();
      e.deferred.clear();
      e.pushed.clear();
      e.first_push = {};
    }
    for (auto& [call, d] : declared_) {
      for (const Waiter& w : d.waiters) Fail(w.conn, w.id, broken_, rank);
    }
    declared_.clear();
  }

  void OnClosed(const caf::actor& conn, const std::string& why) {
    if (conn == scheduler_) {
      if (!finished_) Finish(1, "lost the scheduler: " + why);
      return;
    }
    auto it = workers_.find(conn);
    if (it == workers_.end()) return;
    const WorkerConn w = it->second;
    workers_.erase(it);
    if (w.observer || left_.count(w.rank) != 0) return;
    if (RecoveryOn() && !finished_) {
      // A restartable server's workers reconnect and resend what it lacks (a dropped connection is not a
      // death): the scheduler, which hears from every worker, says when one died.
      std::fprintf(stderr, "troupe %s: worker %d disconnected (%s); waiting for it to reconnect\n", Me().c_str(),
                   w.rank, why.c_str());
      return;
    }
    // A worker that closes without leaving died. The scheduler hears of it too, and its notice says why (a
    // worker that failed tells it before closing): the job breaks with that notice, or with the closed
    // connection if none came within a heartbeat interval. Acting on the close at once would race the
    // notice, which comes over another connection, and tell the other workers less.
    const std::string what = NodeName(net::Role::kWorker, w.rank, w.host) + " died: " + why;
    if (finished_) return WorkerDied(w.rank, what);
    self_->delayed_send(self_, std::chrono::milliseconds(config_.heartbeat_interval_ms), gone_atom::value, w.rank, what);
  }

  // Whether this server checkpoints by itself (then workers keep what they pushed since its last checkpoint,
  // to resend it to a restarted server).
  bool RecoveryOn() const { return config_.checkpoint_every > 0 && !config_.checkpoint_dir.empty(); }

  // ("round", "<key> <pushes applied>") per key: the sync rounds, or worker `rank`'s pushes in async.
  void AppendRounds(int rank, std::vector<std::pair<std::string, std::string>>* args) const {
    for (const auto& [key, e] : entries_) {
      std::uint64_t n = static_cast<std::uint64_t>(e.rounds);
      if (!sync_) {
        auto it = e.worker_rounds.find(rank);
        n = it == e.worker_rounds.end() ? 0 : it->second;
      }
      args->emplace_back("round", std::to_string(key) + " " + std::to_string(n));
    }
  }

  // After a checkpoint: tells every worker what it holds, so that they drop what they kept for a restart.
  void AnnounceCheckpoint() {
    for (const auto& [conn, w] : workers_) {
      if (w.observer) continue;
      net::Command c{0, "checkpointed", {}};
      AppendRounds(w.rank, &c.args);
      Send(conn, c);
    }
  }

  // Tells the scheduler that the job cannot go on (it tells every node), and fails what waits here; the
  // message is "server N: <what>".
  void ReportFailure(const std::string& what) {
    if (!broken_.empty()) return;
    const std::string message = Me() + ": " + what;
    std::fprintf(stderr, "troupe %s\n", message.c_str());
    Send(scheduler_, net::Command{++internal_ids_, "fail", {{"message", message}}});
    Break(message, -1);
  }

  // Every worker declares its keys at Init (to server 0), and the answers wait until every active worker
  // has declared Init call `call`: then the declarations must agree, or every declarer gets the first
  // difference (and the job fails), so no worker's Init can succeed beside a differing one.
  void OnDeclare(const caf::actor& conn, int rank, const net::Command& c) {
    if (!broken_.empty()) return Fail(conn, c.request_id, broken_, dead_rank_);
    const std::int64_t call = std::stoll(Arg(c, "call", "0"));
    Declarations& d = declared_[call];
    if (d.waiters.empty()) d.since = Clock::now();
    d.waiters.push_back({conn, c.request_id, false});
    auto& keys = d.keys[rank];
    for (const auto& [k, v] : c.args) {
      if (k != "key") continue;
      const auto space = v.find(' ');
      keys[v.substr(0, space)] = space == std::string::npos ? "" : v.substr(space + 1);
    }
    for (int r = 0; r < num_workers_; ++r) {
      if (left_.count(r) == 0 && dead_.count(r) == 0 && d.keys.count(r) == 0) return;  // not all in yet
    }
    const Declarations done = std::move(d);
    declared_.erase(call);
    const std::string diff = DeclarationsDiffer(done.keys);
    if (!diff.empty()) {
      ReportFailure("the workers' models differ at KVStore::Init: " + diff +
                    " (every worker must Init the same keys with the same shapes and dtypes)");
      for (const Waiter& w : done.waiters) Fail(w.conn, w.id, broken_, -1);
      return;
    }
    for (const Waiter& w : done.waiters) Send(w.conn, net::Ack{w.id, std::nullopt});
  }

  // The first difference between the workers' declarations of one Init call, or empty.
  static std::string DeclarationsDiffer(const std::map<int, std::map<std::string, std::string>>& declarations) {
    const auto& [first, want] = *declarations.begin();
    for (const auto& [r, got] : declarations) {
      std::string diff;
      for (const auto& [key, desc] : want) {
        auto it = got.find(key);
        if (it == got.end()) {
          diff = "key " + key + " is declared by worker " + std::to_string(first) + " (" + desc + ") but not by worker " +
                 std::to_string(r);
        } else if (it->second != desc) {
          diff = "key " + key + " is " + desc + " on worker " + std::to_string(first) + " but " + it->second +
                 " on worker " + std::to_string(r);
        }
        if (!diff.empty()) break;
      }
      for (const auto& [key, desc] : got) {
        if (!diff.empty()) break;
        if (want.count(key) == 0) {
          diff = "key " + key + " is declared by worker " + std::to_string(r) + " (" + desc + ") but not by worker " +
                 std::to_string(first);
        }
      }
      if (!diff.empty()) return diff;
    }
    return {};
  }

  // A sync round whose workers have not all pushed within the progress timeout fails the job, naming the
  // key, the round and who is missing.
  void CheckRoundProgress() {
    if (config_.progress_timeout_ms <= 0 || !broken_.empty()) return;
    const auto now = Clock::now();
    for (const auto& [call, d] : declared_) {
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - d.since).count();
      if (waited < config_.progress_timeout_ms) continue;
      std::string missing;
      for (int r = 0; r < num_workers_; ++r) {
        if (left_.count(r) == 0 && dead_.count(r) == 0 && d.keys.count(r) == 0) {
          AppendRank(&missing, r);
        }
      }
      return ReportFailure("KVStore::Init call " + std::to_string(call + 1) + " made no progress for " +
                           std::to_string(waited) + " ms (TROUPE_PROGRESS_TIMEOUT_MS): worker(s) " + missing +
                           " did not declare their keys (every worker must call Init alike)");
    }
    if (!sync_) return;
    for (const auto& [key, e] : entries_) {
      if (e.pushed.empty()) continue;
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - e.round_started).count();
      if (waited < config_.progress_timeout_ms) continue;
      std::string missing, pushed;
      for (int r = 0; r < num_workers_; ++r) {
        if (left_.count(r) != 0 || dead_.count(r) != 0) continue;
        AppendRank(e.pushed.count(r) != 0 ? &pushed : &missing, r);
      }
      return ReportFailure("key " + std::to_string(key) + " round " + std::to_string(e.rounds + 1) +
                           " made no progress for " + std::to_string(waited) +
                           " ms (TROUPE_PROGRESS_TIMEOUT_MS): worker(s) " + missing + " did not push (pushed: " +
                           pushed + ")");
    }
  }

  void OnTick() {
    if (finished_) return;
    CheckRoundProgress();
    if (Clock::now() - last_seen_ > std::chrono::milliseconds(config_.heartbeat_timeout_ms)) {
      return Finish(1, "the scheduler sent nothing for " + std::to_string(config_.heartbeat_timeout_ms) + " ms");
    }
    Send(scheduler_, net::Heartbeat{rank_, ++beats_});
    self_->delayed_send(self_, std::chrono::milliseconds(config_.heartbeat_interval_ms), net::tick_atom::value);
  }

  void WriteCheckpoint(const std::string& dir) {
    SettleUpdates();
    std::filesystem::create_directories(dir);
    const std::string base = CheckpointBase(dir, rank_);
    std::vector<NDArray> arrays;
    std::vector<std::string> names;
    for (const auto& [key, e] : entries_) {
      arrays.push_back(e.stored);
      names.push_back("key:" + std::to_string(key) + ":" + std::to_string(e.part_index) + ":" +
                      std::to_string(e.part_count));
    }
    // Each file is written aside and renamed into place; the values go last, so a checkpoint whose values
    // file exists has its metadata too.
    {
      std::ofstream meta(base + ".meta.tmp", std::ios::trunc);
      meta << "updates\t" << updates_ << "\n";
      for (const auto& [key, e] : entries_) {
        meta << "round\t" << key << " " << e.rounds << "\n";
        for (const auto& [worker, n] : e.worker_rounds) meta << "wround\t" << key << " " << worker << " " << n << "\n";
      }
      for (const auto& [k, v] : optimizer_args_) meta << "opt." << k << "\t" << v << "\n";
      if (!meta) throw Error("cannot write " + base + ".meta.tmp");
    }
    if (optimizer_ != nullptr) {
      // Its own format: with the update counts, so that a restarted server continues exactly.
      optimizer_->SaveStates(base + ".states.tmp", Optimizer::StatesFormat::kTroupe);
      std::filesystem::rename(base + ".states.tmp", base + ".states");
    }
    std::filesystem::rename(base + ".meta.tmp", base + ".meta");
    NDArray::Save(base + ".params.tmp", arrays, names);
    std::filesystem::rename(base + ".params.tmp", base + ".params");
    AnnounceCheckpoint();
  }

  void Finish(int status, const std::string& message) {
    if (in_broker_) {  // only the actor quits itself
      caf::anon_send(caf::actor_cast<caf::actor>(self_), finish_atom::value, status, message);
      return;
    }
    if (finished_) return;
    finished_ = true;
    if (!message.empty()) std::fprintf(stderr, "troupe %s: %s\n", Me().c_str(), message.c_str());
    Flush();
    for (const auto& [conn, w] : workers_) self_->send(conn, net::close_atom::value);
    if (scheduler_) self_->send(scheduler_, net::close_atom::value);
    outcome_->Set(status, message);
    self_->quit();
  }

  std::mutex mu_;
  caf::event_based_actor* self_ = nullptr;  // set before the actor handles anything
  bool stopped_ = false;                    // the actor ended
  bool in_broker_ = false;                  // a frame is handled in a broker (TakeInBroker)
  const std::shared_ptr<std::atomic<std::int64_t>> backlog_ = std::make_shared<std::atomic<std::int64_t>>(0);
  DistConfig config_;
  std::shared_ptr<Outcome> outcome_;
  caf::actor scheduler_;
  std::uint16_t port_ = 0;
  int rank_ = -1;
  int num_workers_ = 1;
  bool sync_ = true;
  bool mode_set_ = false;
  std::map<caf::actor, WorkerConn> workers_;
  std::vector<std::pair<caf::actor, net::Message>> early_;  // worker frames that came before the start
  std::set<int> left_, dead_;
  std::string broken_;
  int dead_rank_ = -1;
  std::map<int, Entry> entries_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<std::pair<std::string, std::string>> optimizer_args_;
  std::int64_t updates_ = 0;
  std::int64_t updates_here_ = 0;  // since this process started (fault injection)
  bool resumed_ = false;           // loaded a checkpoint at start
  // Observer statistics: pushes received (and their payload bytes), values sent back.
  std::int64_t pushes_ = 0, pulls_ = 0, bytes_in_ = 0, bytes_out_ = 0;
  std::int64_t tensor_frames_ = 0, batches_ = 0;  // worker frames with tensor requests; batches among them
  std::vector<float> scratch_;
  int gathering_ = 0;  // > 0 while a frame is handled
  // What it said so far (Send, Flush), with the entry whose update an answer reports (answering_).
  struct Said {
    caf::actor conn;
    net::Message message;
    Entry* entry = nullptr;
  };
  std::vector<Said> gathered_;
  Entry* answering_ = nullptr;      // set while the answers after an entry's update are sent
  std::vector<Entry*> unsettled_;   // entries (of entries_, a std::map: stable) with an update not waited for
  std::vector<Entry*> errored_;     // entries whose update failed when waited for (until the flush)
  // Init declarations (OnDeclare), by Init call: per worker rank, key -> "dtype(shape)"; the declarers
  // waiting for the answer; when the first came.
  struct Declarations {
    std::map<int, std::map<std::string, std::string>> keys;
    std::vector<Waiter> waiters;
    Clock::time_point since;
  };
  std::map<std::int64_t, Declarations> declared_;
  std::uint64_t internal_ids_ = 0;
  Clock::time_point last_seen_;
  std::uint64_t beats_ = 0;
  bool finished_ = false;
};

}  // namespace

NodeHandle SpawnServer(net::NetSystem& net, const DistConfig& config, std::shared_ptr<Outcome> outcome) {
  auto ck = std::make_shared<Checkpoint>(LoadCheckpoint(config));
  auto state = std::make_shared<Server>(config, outcome, std::move(*ck));
  caf::actor actor = net.system().spawn([state, outcome](caf::event_based_actor* self) {
    self->attach_functor([state, outcome](const caf::error&) {
      state->Stopped();
      outcome->Set(1, "the server stopped");
    });
    return state->Make(self);
  });
  try {
    // Every connection counts what it mails the server; the workers' connections offer it their frames first.
    net::ConnOptions listen = ListenOptionsOf(config, "server"), connect = ConnOptionsOf(config);
    listen.owner_backlog = connect.owner_backlog = state->backlog();
    const net::Listener l = net::Listen(net.system(), config.host, 0, actor, listen,
                                        [state](const caf::actor& conn, net::Message& m) { return state->TakeInBroker(conn, m); });
    caf::actor scheduler = net::Connect(net.system(), config.root_uri, static_cast<std::uint16_t>(config.root_port),
                                        actor, connect, config.connect_timeout_ms);
    caf::anon_send(actor, init_atom::value, scheduler, l.port);
    return NodeHandle{actor, l.port};
  } catch (...) {
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
    throw;
  }
}

}  // namespace troupe::internal
