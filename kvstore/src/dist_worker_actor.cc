// The worker's side of the cluster: its actor (connections, handshakes, heartbeats, failures, a
// restartable server's return) and the table of requests in flight, behind WorkerLink
// (kvstore/internal/dist_worker_link.h).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <variant>
#include <vector>

#include "base/error.h"
#include "kvstore/dist.h"
#include "kvstore/internal/dist_common.h"
#include "kvstore/internal/dist_worker_link.h"
#include "kvstore/net/internal/transport.h"

namespace troupe {
namespace internal {
namespace {

struct StartInfo {
  std::string error;
  int rank = -1;
  int num_workers = 0;
  int num_servers = 0;
};
using StartFn = std::function<void(StartInfo)>;

}  // namespace
}  // namespace internal
}  // namespace troupe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::internal::ReplyFn)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::internal::StartFn)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::internal::Args)

namespace troupe {
namespace internal {
namespace {

using start_atom = caf::atom_constant<caf::atom("wk_start")>;
using request_atom = caf::atom_constant<caf::atom("wk_req")>;
using leave_atom = caf::atom_constant<caf::atom("wk_leave")>;
using mode_atom = caf::atom_constant<caf::atom("wk_mode")>;
using connected_atom = caf::atom_constant<caf::atom("wk_conn")>;
using fail_atom = caf::atom_constant<caf::atom("wk_fail")>;
using reconnect_atom = caf::atom_constant<caf::atom("wk_recon")>;


// Answers of at most this many bytes are handled in the connection's broker (FrameHook); bigger ones
// (a tensor to copy into the output) go to the worker's actor, off the thread that reads the sockets.
constexpr std::size_t kAnswerInBrokerBytes = std::size_t{64} << 10;
// A batch of answers (a step's small keys, at most DistConfig::coalesce_bytes by default) is answered in the
// broker up to this many bytes in all: copying them there costs less than waking the worker's actor to do it.
constexpr std::size_t kBatchAnswerInBrokerBytes = std::size_t{1} << 20;

// The requests in flight and which servers are up, shared by the worker's actor (handshakes, failures,
// the scheduler), the engine functions (which send tensor requests straight to a server's broker when it
// is up) and the brokers (which answer small replies themselves). Each request is answered exactly once:
// whoever takes it from the table calls it.
class Requests {
 public:
  explicit Requests(int num_servers = 0) { Resize(num_servers); }
  void Resize(int num_servers) {
    std::lock_guard<std::mutex> lock(mu_);
    links_.assign(static_cast<std::size_t>(num_servers), caf::actor{});
    recover_.assign(static_cast<std::size_t>(num_servers), false);
  }
  // Whether server r checkpoints by itself (its mode answer said so): then what is sent to it is kept
  // (Retention) until it has checkpointed it, and its death suspends the requests in flight instead of
  // failing them.
  void SetRecover(int r, bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    if (r >= 0 && r < static_cast<int>(recover_.size())) recover_[static_cast<std::size_t>(r)] = on;
  }
  bool Recover(int r) {
    std::lock_guard<std::mutex> lock(mu_);
    return RecoverLocked(r);
  }
  // When server `target` is up: registers the request and returns its connection; else null (nothing
  // registered: the caller goes through the actor, which queues the request until the server is back).
  // *recover says whether the server checkpoints by itself (read under the same lock).
  caf::actor RegisterIfUp(int target, std::uint64_t id, const ReplyFn& fn, const net::Message& frame, bool* recover) {
    std::lock_guard<std::mutex> lock(mu_);
    *recover = RecoverLocked(target);
    if (target < 0 || target >= static_cast<int>(links_.size()) || !links_[static_cast<std::size_t>(target)]) {
      return nullptr;
    }
    pending_[id] = Pending{target, fn, Clock::now(), KeptFrame(target, frame)};
    return links_[static_cast<std::size_t>(target)];
  }
  // RegisterIfUp for several requests to one server under one lock: all of them, or none.
  caf::actor RegisterAllIfUp(int target, const std::vector<WorkerLink::Outgoing>& batch, bool* recover) {
    std::lock_guard<std::mutex> lock(mu_);
    *recover = RecoverLocked(target);
    if (target < 0 || target >= static_cast<int>(links_.size()) || !links_[static_cast<std::size_t>(target)]) {
      return nullptr;
    }
    const auto now = Clock::now();
    for (const auto& o : batch) pending_[o.id] = Pending{target, o.fn, now, KeptFrame(target, o.frame)};
    return links_[static_cast<std::size_t>(target)];
  }
  void Add(int target, std::uint64_t id, const ReplyFn& fn, const net::Message& frame = {}) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_[id] = Pending{target, fn, Clock::now(), KeptFrame(target, frame)};
  }
  // A request taken from the table: its target, its frame when it kept one (to resend it once a
  // restartable server is back) and its answer.
  struct InFlight {
    int target;
    std::uint64_t id;
    std::optional<net::Message> frame;
    ReplyFn fn;
  };
  // Every request to `target` (or to anyone, for kAny).
  static constexpr int kAny = -1000;
  std::vector<InFlight> TakeInFlight(int target) {
    return TakeIf([target](const Pending& p) { return target == kAny || p.target == target; });
  }
  // The requests registered before `cutoff` (unanswered for too long).
  std::vector<InFlight> TakeOlderThan(Clock::time_point cutoff) {
    return TakeIf([cutoff](const Pending& p) { return p.since < cutoff; });
  }
  // Server r's connection once its handshake is done, or null when it is down.
  void SetLink(int r, const caf::actor& conn) {
    std::lock_guard<std::mutex> lock(mu_);
    if (r >= 0 && r < static_cast<int>(links_.size())) links_[static_cast<std::size_t>(r)] = conn;
  }
  ReplyFn Take(std::uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(id);
    if (it == pending_.end()) return nullptr;
    ReplyFn fn = std::move(it->second.fn);
    pending_.erase(it);
    return fn;
  }
  // Pushes kept for a resend to a restarted server (only to servers that checkpoint by themselves): per
  // (server, key, part), by push number, each an owning copy; dropped once the server has checkpointed them.
  void Retain(int server, const net::TensorMsg& t) {
    net::TensorMsg copy = t;
    copy.value.data = net::Blob::Copy(t.value.data.bytes);
    std::lock_guard<std::mutex> lock(mu_);
    retained_[{server, t.key, t.part_index}][t.round] = std::move(copy);
  }
  void Prune(int server, int key, std::uint64_t upto) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = retained_.lower_bound({server, key, 0}); it != retained_.end() && std::get<0>(it->first) == server &&
                                                                 std::get<1>(it->first) == key;
         ++it) {
      it->second.erase(it->second.begin(), it->second.upper_bound(upto));
    }
  }
  // The kept pushes to `server`, per key, numbered above what it applied (`applied`: key -> pushes; a key
  // it lacks counts 0), in order.
  std::vector<net::TensorMsg> RetainedAbove(int server, const std::map<int, std::uint64_t>& applied) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<net::TensorMsg> out;
    for (const auto& [where, rounds] : retained_) {
      if (std::get<0>(where) != server) continue;
      auto a = applied.find(std::get<1>(where));
      for (auto it = rounds.upper_bound(a == applied.end() ? 0 : a->second); it != rounds.end(); ++it) {
        out.push_back(it->second);
      }
    }
    return out;
  }
  // The first error this worker's calls met (the failure it reports when it ends without Finalize).
  void NoteError(const std::string& e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (first_error_.empty() && !e.empty()) first_error_ = e;
  }
  std::string first_error() {
    std::lock_guard<std::mutex> lock(mu_);
    return first_error_;
  }

  // The broker's hook: answers an ack or error of a registered request, unless it carries a big tensor;
  // a batch of answers whole, unless its tensors are big together.
  bool AnswerInBroker(net::Message& m) {
    if (auto* b = std::get_if<net::ReplyBatch>(&m)) {
      std::size_t bytes = 0;
      for (const net::Ack& a : b->acks) bytes += a.value ? a.value->data.size() : 0;
      if (bytes > kBatchAnswerInBrokerBytes) return false;
      for (net::ErrorMsg& e : b->errors) {
        if (e.request_id == 0) continue;
        NoteError(e.message);
        if (ReplyFn fn = Take(e.request_id)) fn(Reply{std::move(e.message), std::nullopt, {}});
      }
      for (net::Ack& a : b->acks) {
        if (ReplyFn fn = Take(a.request_id)) fn(Reply{{}, std::move(a.value), {}});
      }
      return true;
    }
    std::uint64_t id = 0;
    Reply reply;
    if (auto* a = std::get_if<net::Ack>(&m)) {
      if (a->value && a->value->data.size() > kAnswerInBrokerBytes) return false;
      id = a->request_id;
      reply.value = std::move(a->value);
    } else if (auto* e = std::get_if<net::ErrorMsg>(&m)) {
      if (e->request_id == 0) return false;
      id = e->request_id;
      reply.error = std::move(e->message);
      NoteError(reply.error);
    } else {
      return false;
    }
    ReplyFn fn = Take(id);
    if (fn) fn(std::move(reply));
    return true;  // an answer nobody waits for any more (its server was declared down) is dropped
  }

 private:
  std::mutex mu_;
  std::vector<caf::actor> links_;  // server rank -> connection, null while down
  bool RecoverLocked(int r) const {  // under mu_
    return r >= 0 && r < static_cast<int>(recover_.size()) && recover_[static_cast<std::size_t>(r)];
  }
  // The frame a request keeps for a resend: only to a server that may come back from its checkpoint.
  std::optional<net::Message> KeptFrame(int target, const net::Message& frame) const {  // under mu_
    if (!RecoverLocked(target)) return std::nullopt;
    return frame;
  }

  struct Pending {
    int target;
    ReplyFn fn;
    Clock::time_point since;            // when it was sent
    std::optional<net::Message> frame;  // kept for a resend to a restarted server (views, no copies)
  };
  template <class Pred>
  std::vector<InFlight> TakeIf(Pred pred) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<InFlight> out;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (pred(it->second)) {
        out.push_back(InFlight{it->second.target, it->first, std::move(it->second.frame), std::move(it->second.fn)});
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
    return out;
  }
  std::vector<bool> recover_;  // per server
  std::map<std::tuple<int, int, std::uint32_t>, std::map<std::uint64_t, net::TensorMsg>> retained_;
  std::unordered_map<std::uint64_t, Pending> pending_;
  std::string first_error_;
};

// The worker's actor: connections, handshake, requests in flight, heartbeats, failures.
class WorkerActor {
 public:
  WorkerActor(caf::event_based_actor* self, DistConfig config, bool sync, std::shared_ptr<Requests> requests)
      : self_(self), config_(std::move(config)), sync_(sync), requests_(std::move(requests)) {}

  caf::behavior Make() {
    return {
        [this](start_atom, const caf::actor& scheduler, const StartFn& done) {
          scheduler_ = scheduler;
          start_fn_ = done;
          last_seen_ = Clock::now();
          Send(scheduler_, net::Hello{net::Role::kWorker, -1, net::kProtocolVersion, config_.host, 0});
          self_->send(self_, net::tick_atom::value);
        },
        [this](request_atom, int target, std::uint64_t id, const net::Message& frame, const ReplyFn& fn) {
          Request(target, id, frame, fn);
        },
        [this](leave_atom) { leaving_ = true; },
        [this](fail_atom, const std::string& why) {
          leaving_ = true;
          Fail(why);
        },
        [this](mode_atom, int target, std::uint64_t generation, const std::string& error, const Args& state) {
          // A reply to a handshake that a later event (death, replacement) made stale is ignored.
          if (target < 0 || target >= static_cast<int>(servers_.size())) return;
          const ServerLink& s = servers_[static_cast<std::size_t>(target)];
          if (s.generation != generation || !s.conn) return;
          if (!error.empty()) return ServerDown(target, error);
          ServerUp(target, state);
        },
        [this](reconnect_atom, int r, std::uint64_t generation) {
          // A scheduled reconnect to a restartable server whose connection ended; stale once anything else
          // happened to the link (a death notice, the server's return elsewhere, a newer attempt).
          if (r < 0 || r >= static_cast<int>(servers_.size()) || !failed_.empty() || leaving_) return;
          const ServerLink& s = servers_[static_cast<std::size_t>(r)];
          if (s.generation == generation && !s.up && !s.conn) Connect(r);
        },
        [this](connected_atom, int target, std::uint64_t generation, const caf::actor& conn, const std::string& error) {
          OnConnected(target, generation, conn, error);
        },
        [this](net::recv_atom, const caf::actor& conn, const net::Message& m) { OnFrame(conn, m); },
        [this](net::closed_atom, const caf::actor& conn, const std::string& why) { OnClosed(conn, why); },
        [this](net::tick_atom) { OnTick(); },
    };
  }

 private:
  struct ServerLink {
    caf::actor conn;
    std::uint64_t generation = 0;  // bumped by every connect and every death: stale replies are ignored
    std::string address;
    bool up = false;          // handshake done and not dead
    bool was_up = false;      // it was up before: its next handshake is a reconnect
    int backoff_ms = 100;     // before the next reconnect attempt (doubles up to 2 s while it fails)
    Clock::time_point down_since;  // when it went down (reconnects are tried for the reconnect timeout)
    std::string down_reason;  // why it is down (empty before the first handshake)
  };
  struct Queued {  // a request for a server that is down, waiting for it to come back
    int target;
    std::uint64_t id;
    net::Message frame;
    ReplyFn fn;
    Clock::time_point deadline;
  };

  void Send(const caf::actor& conn, const net::Message& m) { net::Send(conn, m); }

  std::string ServerName(int r) const {
    const std::string& a = servers_[static_cast<std::size_t>(r)].address;
    return NodeName(net::Role::kServer, r, a.substr(0, a.rfind(':')));
  }

  // `frame` was checked by the caller (ValidateMessage).
  void Request(int target, std::uint64_t id, const net::Message& frame, const ReplyFn& fn) {
    if (!failed_.empty()) return fn(Reply{failed_, std::nullopt, {}});
    if (target == kScheduler) {
      requests_->Add(target, id, fn);
      net::Send(scheduler_, frame);
      return;
    }
    if (target < 0 || target >= static_cast<int>(servers_.size())) {
      return fn(Reply{"kvstore worker: no server " + std::to_string(target), std::nullopt, {}});
    }
    ServerLink& s = servers_[static_cast<std::size_t>(target)];
    if (requests_->Recover(target)) Remember(target, frame);
    if (!s.up) {
      queued_.push_back(Queued{target, id, frame, fn, Clock::now() + std::chrono::milliseconds(DownWaitMs(target))});
      return;
    }
    requests_->Add(target, id, fn, frame);
    net::Send(s.conn, frame);
  }

  // How long a request waits for server r to come back: a server that checkpoints by itself may be
  // restarted from its checkpoint (TROUPE_RECONNECT_TIMEOUT_MS), another only replaced (the heartbeat timeout).
  int DownWaitMs(int r) { return requests_->Recover(r) ? config_.reconnect_timeout_ms : config_.heartbeat_timeout_ms; }

  // Worker 0's frames that set a server up (its keys' initial values, the optimizer), kept to send again to
  // a server restarted from a checkpoint that lacks them.
  void Remember(int r, const net::Message& frame) {
    if (const auto* t = std::get_if<net::TensorMsg>(&frame); t != nullptr && t->op == net::TensorOp::kInit) {
      replay_init_[r][t->key] = frame;
    } else if (const auto* c = std::get_if<net::Command>(&frame); c != nullptr && c->name == "set_optimizer") {
      replay_optimizer_[r] = frame;
    }
  }

  // Server r came back from its checkpoint (a reconnect): sends it, in order, what it lacks — worker 0's
  // initial values of keys it does not hold and the optimizer if it has none, then every kept push numbered
  // above what it applied (a push still waiting for its answer goes with its own request id, so that the
  // answer completes it; so does a push queued while the server was down).
  void Replay(int r, const Args& state) {
    ServerLink& s = servers_[static_cast<std::size_t>(r)];
    std::map<int, std::uint64_t> applied;
    bool has_optimizer = false;
    for (const auto& [k, v] : state) {
      if (k == "optimizer") has_optimizer = v == "1";
      int key = 0;
      unsigned long long n = 0;
      if (k == "round" && std::sscanf(v.c_str(), "%d %llu", &key, &n) == 2) applied[key] = n;
    }
    auto send_fresh = [&](net::Message frame) {
      const std::uint64_t id = ++internal_ids_ | (std::uint64_t{1} << 63);
      std::visit([id](auto& m) {
        if constexpr (requires { m.request_id; }) m.request_id = id;
      }, frame);
      requests_->Add(r, id, [](Reply) {}, frame);
      net::Send(s.conn, frame);
    };
    for (const auto& [key, frame] : replay_init_[r]) {
      if (applied.count(key) == 0) send_fresh(frame);
    }
    if (!has_optimizer && replay_optimizer_.count(r) != 0) send_fresh(replay_optimizer_[r]);
    std::size_t pushes = 0;
    for (const net::TensorMsg& t : requests_->RetainedAbove(r, applied)) {
      ReplyFn fn = [](Reply) {};  // answered before the server died: the answer is not waited for
      for (auto it = queued_.begin(); it != queued_.end(); ++it) {
        if (it->target == r && it->id == t.request_id) {
          fn = std::move(it->fn);
          queued_.erase(it);
          break;
        }
      }
      requests_->Add(r, t.request_id, fn, t);
      net::Send(s.conn, t);
      ++pushes;
    }
    std::fprintf(stderr, "troupe kvstore worker %d: %s is back; resent %zu pushes its checkpoint lacks\n", rank_,
                 ServerName(r).c_str(), pushes);
  }

  int TargetOf(const caf::actor& conn) const {
    if (conn == scheduler_) return kScheduler;
    for (std::size_t r = 0; r < servers_.size(); ++r) {
      if (servers_[r].conn == conn) return static_cast<int>(r);
    }
    return -2;
  }

  void OnFrame(const caf::actor& conn, const net::Message& m) {
    const int target = TargetOf(conn);
    if (target == -2) return;  // a connection already replaced
    if (target == kScheduler) last_seen_ = Clock::now();
    if (const auto* a = std::get_if<net::Ack>(&m)) return Answer(a->request_id, Reply{{}, a->value, {}});
    if (const auto* b = std::get_if<net::ReplyBatch>(&m)) {
      for (const net::Ack& a : b->acks) Answer(a.request_id, Reply{{}, a.value, {}});
      for (const net::ErrorMsg& e : b->errors) Answer(e.request_id, Reply{e.message, std::nullopt, {}});
      return;
    }
    if (const auto* e = std::get_if<net::ErrorMsg>(&m)) {
      if (e->request_id != 0) return Answer(e->request_id, Reply{e->message, std::nullopt, {}});
      // Not about one request: a refusal (the connection closes next) or the cluster failed to form.
      if (target == kScheduler) return Fail(e->message);
      return ServerDown(target, e->message);
    }
    if (const auto* h = std::get_if<net::Hello>(&m)) {
      if (target < 0) return;
      if (std::string why = CheckHello(*h); !why.empty()) return ServerDown(target, "refused: " + why);
      // The server knows this worker now; tell it the mode, and the link is up once it agreed.
      // Answered through the actor (the broker hook could run it on another thread): forward the reply.
      const std::uint64_t id = ++internal_ids_ | (std::uint64_t{1} << 63);
      auto self = caf::actor_cast<caf::actor>(self_);
      const std::uint64_t generation = servers_[static_cast<std::size_t>(target)].generation;
      requests_->Add(target, id, [self, target, generation](Reply r) {
        caf::anon_send(self, mode_atom::value, target, generation, r.error, r.args);
      });
      Send(conn, net::Command{id, "mode", {{"sync", sync_ ? "1" : "0"}}});
      return;
    }
    if (const auto* c = std::get_if<net::Command>(&m); c != nullptr && target >= 0) {
      if (c->request_id != 0) return Answer(c->request_id, Reply{{}, std::nullopt, c->args});
      if (c->name == "checkpointed") {
        // The server wrote a checkpoint: what it holds needs no resend any more.
        for (const auto& [k, v] : c->args) {
          if (k != "round") continue;
          int key = 0;
          unsigned long long n = 0;
          if (std::sscanf(v.c_str(), "%d %llu", &key, &n) == 2) requests_->Prune(target, key, n);
        }
      }
      return;
    }
    if (const auto* c = std::get_if<net::Command>(&m); c != nullptr && target == kScheduler) {
      try {
        OnSchedulerCommand(*c);
      } catch (const std::exception& ex) {
        Fail(std::string("kvstore worker: bad command from the scheduler: ") + ex.what());
      }
    }
  }

  void OnSchedulerCommand(const net::Command& c) {
    if (c.name == "start") {
      rank_ = IntArg(c, "rank");
      num_workers_ = IntArg(c, "num_workers");
      const int n = IntArg(c, "num_servers");
      servers_.assign(static_cast<std::size_t>(n), ServerLink{});
      requests_->Resize(n);
      for (int r = 0; r < n; ++r) {
        servers_[static_cast<std::size_t>(r)].address = Arg(c, "server." + std::to_string(r));
        Connect(r);
      }
      return;
    }
    // A dead server is not tried again at its old address: the scheduler says where it comes back (server_up).
    if (c.name == "node_dead" && Arg(c, "role") == "server") {
      return ServerDown(IntArg(c, "rank"), Arg(c, "message"), /*retry=*/false);
    }
    // The job failed (a worker died or failed, the models differ, a wait made no progress): in dist_sync
    // every call fails with it from now on; dist_async goes on (KVStore::Finalize reports it either way).
    if (c.name == "broken" && sync_) return Fail(Arg(c, "message", "the job failed"));
    if (c.name == "server_up") {
      const int r = IntArg(c, "rank");
      if (r < 0 || r >= static_cast<int>(servers_.size())) return;
      // Requests still on the old connection went to the dead process: fail them before reconnecting.
      if (servers_[static_cast<std::size_t>(r)].conn) ServerDown(r, ServerName(r) + " was replaced");
      servers_[static_cast<std::size_t>(r)].address = Arg(c, "address");
      Connect(r);
    }
  }

  // Connecting blocks (and retries while the server starts), so it runs on a thread of its own: this actor
  // keeps sending heartbeats meanwhile. The result comes back as connected_atom.
  void Connect(int r) {
    ServerLink& s = servers_[static_cast<std::size_t>(r)];
    const std::uint64_t generation = ++s.generation;
    const std::string address = s.address;
    const caf::actor owner = caf::actor_cast<caf::actor>(self_);
    const net::ConnOptions options = ConnOptionsOf(config_);
    const int timeout_ms = config_.connect_timeout_ms;
    auto requests = requests_;
    self_->system().spawn([=](caf::blocking_actor* helper) {
      helper->monitor(owner);
      const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
      caf::actor conn;
      std::string error;
      for (;;) {
        try {
          const auto [host, port] = net::SplitHostPort(address);
          conn = net::Connect(helper->system(), host, port, owner, options, 0,
                              [requests](const caf::actor&, net::Message& m) { return requests->AnswerInBroker(m); });
          error.clear();
          break;
        } catch (const std::exception& e) {
          error = e.what();
        }
        if (Clock::now() >= deadline) break;
        bool owner_gone = false;  // the worker ended: stop trying
        helper->receive([&](const caf::down_msg&) { owner_gone = true; },
                        caf::after(std::chrono::milliseconds(100)) >> [] {});
        if (owner_gone) return;
      }
      helper->send(owner, connected_atom::value, r, generation, conn, error);
    });
  }

  void OnConnected(int r, std::uint64_t generation, const caf::actor& conn, const std::string& error) {
    if (r < 0 || r >= static_cast<int>(servers_.size())) return;
    ServerLink& s = servers_[static_cast<std::size_t>(r)];
    if (s.generation != generation) {  // superseded by a death or a newer address
      if (conn) self_->send(conn, net::close_atom::value);
      return;
    }
    if (!error.empty()) return ServerDown(r, error);
    s.conn = conn;
    Send(s.conn, net::Hello{net::Role::kWorker, rank_, net::kProtocolVersion, config_.host, 0});
  }

  void ServerUp(int r, const Args& state) {
    ServerLink& s = servers_[static_cast<std::size_t>(r)];
    const bool reconnect = s.was_up;
    s.up = true;
    s.was_up = true;
    s.down_reason.clear();
    bool checkpointing = false;
    for (const auto& [k, v] : state) checkpointing = checkpointing || (k == "checkpointing" && v == "1");
    requests_->SetRecover(r, checkpointing);
    if (reconnect && checkpointing) Replay(r, state);
    // Requests queued for this server go out (in order, after the resent pushes, which took their own out of
    // the queue); those for servers still down keep their own deadlines.
    auto queued = std::move(queued_);
    queued_.clear();
    for (Queued& q : queued) {
      if (servers_[static_cast<std::size_t>(q.target)].up) {
        Request(q.target, q.id, q.frame, q.fn);
      } else {
        queued_.push_back(std::move(q));
      }
    }
    requests_->SetLink(r, s.conn);
    if (start_fn_ && std::all_of(servers_.begin(), servers_.end(), [](const ServerLink& x) { return x.up; })) {
      auto fn = std::move(start_fn_);
      start_fn_ = nullptr;
      fn(StartInfo{{}, rank_, num_workers_, static_cast<int>(servers_.size())});
    }
  }

  void ServerDown(int r, const std::string& why, bool retry = true) {
    if (r < 0 || r >= static_cast<int>(servers_.size())) return;
    ServerLink& s = servers_[static_cast<std::size_t>(r)];
    const bool was_up = s.up;
    if (s.conn) self_->send(s.conn, net::close_atom::value);
    s.conn = nullptr;
    s.up = false;
    ++s.generation;
    s.down_reason = why;
    requests_->SetLink(r, nullptr);
    if (start_fn_) return Fail("cannot reach " + ServerName(r) + ": " + why);
    if (requests_->Recover(r) && failed_.empty()) {
      // It checkpoints by itself, so it may come back from its checkpoint: the requests in flight wait for
      // it (and are resent then), up to the reconnect timeout.
      const auto deadline = Clock::now() + std::chrono::milliseconds(config_.reconnect_timeout_ms);
      for (auto& f : requests_->TakeInFlight(r)) {
        // A request sent before the server said it checkpoints (its handshake) kept no frame: it fails.
        if (!f.frame) {
          f.fn(Reply{why, std::nullopt, {}});
          continue;
        }
        queued_.push_back(Queued{r, f.id, std::move(*f.frame), std::move(f.fn), deadline});
      }
      if (was_up && !leaving_) {
        std::fprintf(stderr, "troupe kvstore worker %d: %s is down (%s); waiting up to %d ms for it to come back\n",
                     rank_, ServerName(r).c_str(), why.c_str(), config_.reconnect_timeout_ms);
      }
      // Its connection may only have dropped: try it again, backing off, for as long as requests wait for it
      // (a death notice or the server's return elsewhere supersedes this).
      if (was_up) s.down_since = Clock::now();
      if (retry && !leaving_ &&
          Clock::now() - s.down_since < std::chrono::milliseconds(config_.reconnect_timeout_ms)) {
        s.backoff_ms = was_up ? 100 : std::min(2000, std::max(100, 2 * s.backoff_ms));
        self_->delayed_send(self_, std::chrono::milliseconds(s.backoff_ms), reconnect_atom::value, r, s.generation);
      }
      return;
    }
    requests_->NoteError(why);
    // Requests in flight are lost with the server: fail them now.
    for (auto& f : requests_->TakeInFlight(r)) f.fn(Reply{why, std::nullopt, {}});
  }

  void Answer(std::uint64_t id, Reply reply) {
    requests_->NoteError(reply.error);
    if (ReplyFn fn = requests_->Take(id)) fn(std::move(reply));
  }

  // The cluster is unusable for this worker (the scheduler died or refused it): fail everything.
  void Fail(const std::string& why) {
    if (failed_.empty()) failed_ = why;
    requests_->NoteError(why);
    if (start_fn_) {
      auto fn = std::move(start_fn_);
      start_fn_ = nullptr;
      fn(StartInfo{why, -1, 0, 0});
    }
    for (std::size_t r = 0; r < servers_.size(); ++r) requests_->SetLink(static_cast<int>(r), nullptr);
    for (auto& f : requests_->TakeInFlight(Requests::kAny)) f.fn(Reply{why, std::nullopt, {}});
    auto queued = std::move(queued_);
    queued_.clear();
    for (Queued& q : queued) q.fn(Reply{why, std::nullopt, {}});
  }

  void OnClosed(const caf::actor& conn, const std::string& why) {
    // While leaving, peers close as the cluster ends (a server may stop before it read this worker's
    // leave): the requests still waiting on that connection are answered with the error, so the leave
    // does not wait for them.
    const int target = TargetOf(conn);
    if (target == kScheduler) return Fail("lost the scheduler: " + why);
    // A restartable server's connection may only have dropped (it says whether it died through the
    // scheduler).
    if (target >= 0) {
      ServerDown(target, ServerName(target) + (requests_->Recover(target) ? " closed the connection: " : " died: ") + why);
    }
  }

  void OnTick() {
    const auto now = Clock::now();
    if (failed_.empty() && !leaving_ && now - last_seen_ > std::chrono::milliseconds(config_.heartbeat_timeout_ms)) {
      Fail("the scheduler sent nothing for " + std::to_string(config_.heartbeat_timeout_ms) + " ms");
    }
    if (failed_.empty() && scheduler_) Send(scheduler_, net::Heartbeat{rank_, ++beats_});
    // A request unanswered well past the nodes' own progress checks (a lost frame, a wedged node) fails
    // rather than hang.
    if (config_.progress_timeout_ms > 0) {
      const int limit_ms = config_.progress_timeout_ms + config_.heartbeat_timeout_ms;
      for (auto& [target, id, frame, fn] : requests_->TakeOlderThan(now - std::chrono::milliseconds(limit_ms))) {
        const std::string why = "no answer from " + (target == kScheduler ? std::string("the scheduler") : ServerName(target)) +
                                " within " + std::to_string(limit_ms) +
                                " ms (TROUPE_PROGRESS_TIMEOUT_MS + TROUPE_HEARTBEAT_TIMEOUT_MS): the request or its "
                                "answer was lost";
        requests_->NoteError(why);
        fn(Reply{why, std::nullopt, {}});
      }
    }
    for (auto it = queued_.begin(); it != queued_.end();) {
      if (now >= it->deadline) {
        auto fn = std::move(it->fn);
        const int r = it->target;
        it = queued_.erase(it);
        requests_->NoteError(ServerName(r) + " is down");
        fn(Reply{ServerName(r) + " is down and did not come back within " + std::to_string(DownWaitMs(r)) +
                     " ms (" + (requests_->Recover(r) ? "TROUPE_RECONNECT_TIMEOUT_MS" : "TROUPE_HEARTBEAT_TIMEOUT_MS") +
                     "): " +
                     servers_[static_cast<std::size_t>(r)].down_reason,
                 std::nullopt, {}});
      } else {
        ++it;
      }
    }
    if (failed_.empty()) {
      self_->delayed_send(self_, std::chrono::milliseconds(std::max(1, config_.heartbeat_interval_ms)),
                          net::tick_atom::value);
    }
  }

  caf::event_based_actor* self_;
  DistConfig config_;
  bool sync_;
  caf::actor scheduler_;
  StartFn start_fn_;
  int rank_ = -1;
  int num_workers_ = 0;
  std::vector<ServerLink> servers_;
  std::shared_ptr<Requests> requests_;
  std::vector<Queued> queued_;
  std::map<int, std::map<int, net::Message>> replay_init_;  // server -> key -> worker 0's init frame
  std::map<int, net::Message> replay_optimizer_;            // server -> the last set_optimizer
  std::string failed_;
  bool leaving_ = false;
  Clock::time_point last_seen_;
  std::uint64_t beats_ = 0;
  std::uint64_t internal_ids_ = 0;
};

}  // namespace

struct WorkerLink::Impl {
  std::shared_ptr<net::NetSystem> net;
  std::shared_ptr<Requests> requests = std::make_shared<Requests>();
  caf::actor actor;
};

WorkerLink::WorkerLink(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WorkerLink::~WorkerLink() { Stop(); }

std::unique_ptr<WorkerLink> WorkerLink::Start(const DistConfig& config, bool sync, Cluster* cluster) {
  auto impl = std::make_unique<Impl>();
  impl->net = net::NetSystem::Acquire();
  impl->actor = impl->net->system().spawn([config, sync, requests = impl->requests](caf::event_based_actor* self) {
    auto state = std::make_shared<WorkerActor>(self, config, sync, requests);
    self->attach_functor([state](const caf::error&) {});
    return state->Make();
  });
  std::unique_ptr<WorkerLink> link(new WorkerLink(std::move(impl)));  // stops the actor if this throws
  Impl& m = *link->impl_;
  caf::actor scheduler = net::Connect(m.net->system(), config.root_uri, static_cast<std::uint16_t>(config.root_port),
                                      m.actor, ConnOptionsOf(config), config.connect_timeout_ms);
  auto promise = std::make_shared<std::promise<StartInfo>>();
  auto future = promise->get_future();
  caf::anon_send(m.actor, start_atom::value, scheduler, StartFn([promise](StartInfo i) { promise->set_value(i); }));
  if (future.wait_for(std::chrono::milliseconds(config.connect_timeout_ms)) != std::future_status::ready) {
    throw Error("kvstore worker: the cluster at " + config.root_uri + ":" + std::to_string(config.root_port) +
                " did not form within " + std::to_string(config.connect_timeout_ms) +
                " ms (are the scheduler, DMLC_NUM_SERVER servers and DMLC_NUM_WORKER workers running?)");
  }
  const StartInfo info = future.get();
  if (!info.error.empty()) throw Error("kvstore worker: cannot join the cluster: " + info.error);
  *cluster = Cluster{info.rank, info.num_workers, info.num_servers};
  return link;
}

void WorkerLink::Request(int target, std::uint64_t id, net::Message frame, ReplyFn fn) {
  caf::anon_send(impl_->actor, request_atom::value, target, id, std::move(frame), std::move(fn));
}

void WorkerLink::SendTensor(int server, std::uint64_t id, const net::TensorMsg& frame, ReplyFn fn) {
  Requests& requests = *impl_->requests;
  bool recover = false;
  caf::actor conn = requests.RegisterIfUp(server, id, fn, frame, &recover);  // one lock on the common path
  if (recover && frame.round != 0) requests.Retain(server, frame);
  if (conn) {
    net::Send(conn, frame);
  } else {
    caf::anon_send(impl_->actor, request_atom::value, server, id, net::Message{frame}, std::move(fn));
  }
}

void WorkerLink::SendBatch(int server, std::vector<Outgoing> batch) {
  if (batch.size() == 1) return SendTensor(server, batch[0].id, batch[0].frame, std::move(batch[0].fn));
  Requests& requests = *impl_->requests;
  bool recover = false;
  caf::actor conn = requests.RegisterAllIfUp(server, batch, &recover);  // one lock for the whole batch
  if (!conn) {
    // The server is down: the actor queues each request until it is back (resent one by one then).
    for (Outgoing& o : batch) {
      if (recover && o.frame.round != 0) requests.Retain(server, o.frame);
      caf::anon_send(impl_->actor, request_atom::value, server, o.id, net::Message{o.frame}, std::move(o.fn));
    }
    return;
  }
  net::TensorBatch frame;
  frame.entries.reserve(batch.size());
  for (Outgoing& o : batch) {
    if (recover && o.frame.round != 0) requests.Retain(server, o.frame);
    frame.entries.push_back(std::move(o.frame));
  }
  net::Send(conn, frame);
}

void WorkerLink::Leave() { caf::anon_send(impl_->actor, leave_atom::value); }
void WorkerLink::Fail(const std::string& why) { caf::anon_send(impl_->actor, fail_atom::value, why); }
std::string WorkerLink::first_error() { return impl_->requests->first_error(); }

void WorkerLink::Stop() {
  if (!impl_->actor) return;
  caf::anon_send_exit(impl_->actor, caf::exit_reason::user_shutdown);
  impl_->actor = nullptr;
}

}  // namespace internal
}  // namespace troupe
