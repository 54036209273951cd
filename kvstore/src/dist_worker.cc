// A worker of the distributed KVStore (kvstore/dist.h): the KVStore the training loop drives, and the actor
// that owns its connections (to the scheduler and to every server) and its requests in flight.
//
// A Push, Pull or PushPull of a key is one engine function per key (after the local reduction and the
// compression, which are engine functions of their own). It encodes one frame per part of the key, hands
// them to the worker actor and completes when every part was answered; an answer's value is copied into
// the output there. The functions of a key are ordered by a variable of the key: a push writes it and a
// pull reads it, so a pull starts after the push was answered — after the sync round's update.
//
// Failures (a dead node, a server's error) complete the function with the error, which poisons what it
// writes (the outputs and the key's variable; ops/ndarray.h): the caller sees it at WaitToRead. The next
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
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <variant>
#include <vector>

#include "actors/error.h"
#include "kvstore/dist.h"
#include "kvstore/gradient_compression.h"
#include "kvstore/internal/dist_common.h"
#include "kvstore/internal/store_checks.h"
#include "kvstore/net/internal/transport.h"

namespace troupe {
namespace internal {
namespace {

// The answer to one request: an error message, or success with an optional value.
struct Reply {
  std::string error;
  std::optional<net::TensorPayload> value;
  std::vector<std::pair<std::string, std::string>> args;  // a command's answer (the mode handshake's)
};
using Args = std::vector<std::pair<std::string, std::string>>;
using ReplyFn = std::function<void(Reply)>;

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

constexpr int kScheduler = -1;  // request target: the scheduler; 0.. are server ranks

// Answers of at most this many bytes are handled in the connection's broker (FrameHook); bigger ones
// (a tensor to copy into the output) go to the worker's actor, off the thread that reads the sockets.
constexpr std::size_t kAnswerInBrokerBytes = std::size_t{64} << 10;

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
    return r >= 0 && r < static_cast<int>(recover_.size()) && recover_[static_cast<std::size_t>(r)];
  }
  // When server `target` is up: registers the request and returns its connection; else null (nothing
  // registered: the caller goes through the actor, which queues the request until the server is back).
  caf::actor RegisterIfUp(int target, std::uint64_t id, const ReplyFn& fn, const net::Message& frame) {
    std::lock_guard<std::mutex> lock(mu_);
    if (target < 0 || target >= static_cast<int>(links_.size()) || !links_[static_cast<std::size_t>(target)]) {
      return nullptr;
    }
    pending_[id] = Pending{target, fn, Clock::now(), KeptFrame(target, frame)};
    return links_[static_cast<std::size_t>(target)];
  }
  void Add(int target, std::uint64_t id, const ReplyFn& fn, const net::Message& frame = {}) {
    std::lock_guard<std::mutex> lock(mu_);
    pending_[id] = Pending{target, fn, Clock::now(), KeptFrame(target, frame)};
  }
  // Every request to server `target`, with its frame (to resend it once the server is back).
  struct InFlight {
    std::uint64_t id;
    net::Message frame;
    ReplyFn fn;
  };
  std::vector<InFlight> TakeInFlight(int target) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<InFlight> out;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.target == target) {
        out.push_back(InFlight{it->first, std::move(it->second.frame), std::move(it->second.fn)});
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
    return out;
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
  // The requests registered before `cutoff` (unanswered for too long), with their targets.
  std::vector<std::pair<int, ReplyFn>> TakeOlderThan(Clock::time_point cutoff) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::pair<int, ReplyFn>> out;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.since < cutoff) {
        out.emplace_back(it->second.target, std::move(it->second.fn));
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
    return out;
  }
  // Every request to `target` (or to anyone, for kAny).
  static constexpr int kAny = -1000;
  std::vector<ReplyFn> TakeTarget(int target) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<ReplyFn> out;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (target == kAny || it->second.target == target) {
        out.push_back(std::move(it->second.fn));
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
    return out;
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

  // The broker's hook: answers an ack or error of a registered request, unless it carries a big tensor.
  bool AnswerInBroker(net::Message& m) {
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
  // The frame a request keeps for a resend: only to a server that may come back from its checkpoint.
  net::Message KeptFrame(int target, const net::Message& frame) const {  // under mu_
    const bool keep = target >= 0 && target < static_cast<int>(recover_.size()) && recover_[static_cast<std::size_t>(target)];
    return keep ? frame : net::Message{};
  }

  struct Pending {
    int target;
    ReplyFn fn;
    Clock::time_point since;  // when it was sent
    net::Message frame;       // kept for a resend to a restarted server (views, no copies)
  };
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
    if (!failed_.empty()) return fn(Reply{failed_, std::nullopt});
    if (target == kScheduler) {
      requests_->Add(target, id, fn);
      net::Send(scheduler_, frame);
      return;
    }
    if (target < 0 || target >= static_cast<int>(servers_.size())) {
      return fn(Reply{"kvstore worker: no server " + std::to_string(target), std::nullopt});
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
    if (const auto* a = std::get_if<net::Ack>(&m)) return Answer(a->request_id, Reply{{}, a->value});
    if (const auto* e = std::get_if<net::ErrorMsg>(&m)) {
      if (e->request_id != 0) return Answer(e->request_id, Reply{e->message, std::nullopt});
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
                              [requests](net::Message& m) { return requests->AnswerInBroker(m); });
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
        if (std::holds_alternative<net::Hello>(f.frame)) {
          f.fn(Reply{why, std::nullopt});
          continue;
        }
        queued_.push_back(Queued{r, f.id, std::move(f.frame), std::move(f.fn), deadline});
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
    for (ReplyFn& fn : requests_->TakeTarget(r)) fn(Reply{why, std::nullopt});
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
    for (ReplyFn& fn : requests_->TakeTarget(Requests::kAny)) fn(Reply{why, std::nullopt});
    auto queued = std::move(queued_);
    queued_.clear();
    for (Queued& q : queued) q.fn(Reply{why, std::nullopt});
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
      for (auto& [target, fn] : requests_->TakeOlderThan(now - std::chrono::milliseconds(limit_ms))) {
        const std::string why = "no answer from " + (target == kScheduler ? std::string("the scheduler") : ServerName(target)) +
                                " within " + std::to_string(limit_ms) +
                                " ms (TROUPE_PROGRESS_TIMEOUT_MS + TROUPE_HEARTBEAT_TIMEOUT_MS): the request or its "
                                "answer was lost";
        requests_->NoteError(why);
        fn(Reply{why, std::nullopt});
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
                 std::nullopt});
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

// One part of a key: the server holding it and its elements [begin, end) of the flattened array.
struct Part {
  int server = 0;
  std::int64_t begin = 0;
  std::int64_t end = 0;
};

// The completion of one engine function waiting for several parts' answers.
struct Gather {
  std::atomic<int> left{0};
  std::mutex mu;
  std::string error;
  CallbackOnComplete done;
  void* target = nullptr;  // where answered values go (null: answers carry no value)
  std::size_t elem = 0;    // bytes per element of the target
  std::atomic<bool>* key_failed = nullptr;

  void Complete(const std::vector<Part>& parts, std::size_t p, Reply r) {
    if (r.error.empty() && target != nullptr) {
      const Part& part = parts[p];
      const std::size_t bytes = static_cast<std::size_t>(part.end - part.begin) * elem;
      if (!r.value || r.value->data.size() != bytes) {
        r.error = "kvstore worker: a server answered with " + std::to_string(r.value ? r.value->data.size() : 0) +
                  " bytes for a part of " + std::to_string(bytes) + " bytes";
      } else {
        std::memcpy(static_cast<std::byte*>(target) + static_cast<std::size_t>(part.begin) * elem,
                    r.value->data.bytes.data(), bytes);
      }
    }
    if (!r.error.empty()) {
      std::lock_guard<std::mutex> lock(mu);
      if (error.empty()) error = r.error;
    }
    if (left.fetch_sub(1) == 1) {
      if (error.empty()) return done();
      if (key_failed != nullptr) key_failed->store(true);
      done(std::make_exception_ptr(Error(error)));
    }
  }
};

class KVStoreDist final : public KVStore {
 public:
  KVStoreDist(const std::string& type, const DistConfig& config)
      : KVStore(type), config_(config), net_(net::NetSystem::Acquire()) {
    config_.Validate();
    WarnIfInsecure(config_, "worker");
    const bool sync = type != "dist_async";
    actor_ = net_->system().spawn([config = config_, sync, requests = requests_](caf::event_based_actor* self) {
      auto state = std::make_shared<WorkerActor>(self, config, sync, requests);
      self->attach_functor([state](const caf::error&) {});
      return state->Make();
    });
    try {
      caf::actor scheduler = net::Connect(net_->system(), config_.root_uri, static_cast<std::uint16_t>(config_.root_port),
                                          actor_, ConnOptionsOf(config_), config_.connect_timeout_ms);
      auto promise = std::make_shared<std::promise<StartInfo>>();
      auto future = promise->get_future();
      caf::anon_send(actor_, start_atom::value, scheduler, StartFn([promise](StartInfo i) { promise->set_value(i); }));
      if (future.wait_for(std::chrono::milliseconds(config_.connect_timeout_ms)) != std::future_status::ready) {
        throw Error("kvstore worker: the cluster at " + config_.root_uri + ":" + std::to_string(config_.root_port) +
                    " did not form within " + std::to_string(config_.connect_timeout_ms) +
                    " ms (are the scheduler, DMLC_NUM_SERVER servers and DMLC_NUM_WORKER workers running?)");
      }
      const StartInfo info = future.get();
      if (!info.error.empty()) throw Error("kvstore worker: cannot join the cluster: " + info.error);
      rank_ = info.rank;
      num_workers_ = info.num_workers;
      num_servers_ = info.num_servers;
      server_bytes_.assign(static_cast<std::size_t>(num_servers_), 0);
    } catch (...) {
      Shutdown(End::kQuit);
      throw;
    }
  }

  // Without Finalize, the store's end is this worker's failure (a program that threw, or returned early):
  // a dist_sync job fails for everyone, naming it.
  ~KVStoreDist() override {
    if (actor_) Shutdown(End::kFail);
  }

  void Finalize() override {
    if (!actor_) return;
    const std::string error = Shutdown(End::kFinalize);
    if (!error.empty()) throw Error("KVStore::Finalize: the job failed: " + error);
  }

  using KVStore::Init;
  using KVStore::Pull;
  using KVStore::Push;
  using KVStore::PushPull;

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

  void Push(const std::vector<int>& keys, const std::vector<NDArray>& values, int priority) override {
    NoteIntKeys("Push");
    const KeyGroups groups = Check("Push", keys, values, "value");
    CheckCompression("Push", keys, values);
    for (const auto& [key, idx] : groups) {
      Key& k = Prepare(key);
      Send(net::TensorOp::kPush, key, k, Source(key, k, values, idx, priority), {}, priority);
    }
  }

  void Pull(const std::vector<int>& keys, const std::vector<NDArray>& outs, int priority) override {
    NoteIntKeys("Pull");
    const KeyGroups groups = Check("Pull", keys, outs, "output");
    for (const auto& [key, idx] : groups) {
      Key& k = Prepare(key);
      Send(net::TensorOp::kPull, key, k, {}, Outputs(k, outs, idx), priority);
    }
  }

  void PushPull(const std::vector<int>& keys, const std::vector<NDArray>& values, const std::vector<NDArray>& outs,
                int priority) override {
    NoteIntKeys("PushPull");
    const KeyGroups groups = Check("PushPull", keys, values, "value");
    const KeyGroups out_groups = Check("PushPull", keys, outs, "output");
    CheckCompression("PushPull", keys, values);
    for (const auto& [key, idx] : groups) {
      Key& k = Prepare(key);
      Send(net::TensorOp::kPushPull, key, k, Source(key, k, values, idx, priority), Outputs(k, outs, out_groups.at(key)),
           priority);
    }
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

  const NDArray* StoredOf(int key) const {
    auto it = keys_.find(key);
    return it == keys_.end() ? nullptr : &it->second->proto;
  }
  KeyGroups Check(const char* op, const std::vector<int>& keys, const std::vector<NDArray>& arrays,
                  const char* what) const {
    CheckOpen(op);
    return CheckArrays(op, keys, arrays, what, [this](int k) { return StoredOf(k); },
                       [this](int k) { return KeyName(k); });
  }

  // With compression on, every value must be float32 (checked before anything is pushed).
  void CheckCompression(const char* op, const std::vector<int>& keys, const std::vector<NDArray>& values) const {
    if (compression_.empty()) return;
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (values[i].dtype() != DType::kFloat32) {
        throw Error(std::string("KVStore::") + op + ": gradient compression takes float32 values; key " +
                    KeyName(keys[i]) + " is " + DTypeName(values[i].dtype()));
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

  // One engine function: send every part of a push, pull or pushPull and complete when all are answered.
  void Send(net::TensorOp op, int key, Key& k, const Src& src, const Outs& outs, int priority) {
    std::vector<VarHandle> reads, writes{k.order.var()};
    if (op == net::TensorOp::kPull) {
      reads = {k.order.var()};
      writes = {outs.target.var()};
    }
    TBlob data;
    std::vector<TBlob> codes;
    // The arrays whose bytes the frames view, kept alive until every frame was written (and unchanged: this
    // function holds them until the answers arrive).
    auto held = std::make_shared<std::vector<NDArray>>();
    if (!src.array.is_none()) {
      if (src.compressed.empty()) {
        data = src.array.data();
        reads.push_back(src.array.var());
        held->push_back(src.array);
      } else {
        for (const NDArray& c : src.compressed) {
          codes.push_back(c.data());
          reads.push_back(c.var());
          held->push_back(c);
        }
      }
    }
    TBlob target;
    if (outs.present) {
      target = outs.target.data();
      if (op != net::TensorOp::kPull) writes.push_back(outs.target.var());
    }
    // A variable both read and written is declared written only.
    reads.erase(std::remove_if(reads.begin(), reads.end(),
                               [&](VarHandle v) { return std::find(writes.begin(), writes.end(), v) != writes.end(); }),
                reads.end());
    const float threshold = src.threshold;
    Key* kp = &k;
    const std::uint64_t round = op == net::TensorOp::kPull ? 0 : ++k.round;
    auto fn = [this, op, key, kp, data, codes, held, target, threshold, priority, round, has_target = outs.present](
                  RunContext, CallbackOnComplete done) {
      auto gather = std::make_shared<Gather>();
      gather->left = static_cast<int>(kp->parts.size());
      gather->done = done;
      gather->key_failed = &kp->failed;
      if (has_target) {
        gather->target = target.dptr;
        gather->elem = DTypeSize(kp->proto.dtype());
      }
      for (std::size_t p = 0; p < kp->parts.size(); ++p) {
        net::Message frame;
        const std::uint64_t id = NextId();
        try {
          frame = TensorFrame(op, key, *kp, p, data, id, held, codes.empty() ? nullptr : &codes[p], threshold,
                              priority, round);
        } catch (const std::exception& e) {
          gather->Complete(kp->parts, p, Reply{e.what(), std::nullopt});
          continue;
        }
        ReplyFn reply([gather, kp, p](Reply r) { gather->Complete(kp->parts, p, std::move(r)); });
        const int server = kp->parts[p].server;
        // Kept until the server has checkpointed it, for a resend should it restart from its checkpoint.
        if (round != 0 && requests_->Recover(server)) requests_->Retain(server, std::get<net::TensorMsg>(frame));
        // Straight to the server's broker when it is up (one hop less); else through the actor.
        if (caf::actor conn = requests_->RegisterIfUp(server, id, reply, frame)) {
          net::Send(conn, frame);
        } else {
          caf::anon_send(actor_, request_atom::value, server, id, std::move(frame), std::move(reply));
        }
      }
    };
    k.proto.engine()->PushAsync(std::move(fn), Context::CPU(0), reads, writes, FnProperty::kAsync, priority,
                                op == net::TensorOp::kPull ? "kvstore_dist_pull" : "kvstore_dist_push");
    for (const NDArray& c : outs.copies) CopyFromTo(outs.target, c, priority);
  }

  // Sends one request and returns its answer's future (answered on a node's death too).
  // Throws once the store was finalized (its connections are gone).
  void CheckOpen(const char* op) const {
    if (!actor_) {
      throw Error(std::string("KVStore::") + op + ": this store has left the cluster (KVStore::Finalize)");
    }
  }

  std::future<Reply> Call(int target, std::uint64_t id, net::Message frame) {
    CheckOpen("call");
    auto promise = std::make_shared<std::promise<Reply>>();
    auto future = promise->get_future();
    caf::anon_send(actor_, request_atom::value, target, id, std::move(frame),
                   ReplyFn([promise](Reply r) { promise->set_value(std::move(r)); }));
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
  // waits for the key functions to end (they use this object). kQuit: never joined; just stop.
  enum class End { kFinalize, kFail, kQuit };
  std::string Shutdown(End end) {
    std::string error;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.heartbeat_timeout_ms);
    if (end == End::kFinalize) {
      WaitKeys();
      caf::anon_send(actor_, leave_atom::value);  // from now on, closing connections are expected
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
      const std::string first = requests_->first_error();
      const std::string why = "worker " + std::to_string(rank_) +
                              " ended without KVStore::Finalize() (its program failed or stopped early" +
                              (first.empty() ? std::string(")") : "; its first error: " + first + ")");
      try {
        const std::uint64_t id = NextId();
        Call(kScheduler, id, net::Command{id, "fail", {{"message", why}}}).wait_until(deadline);
      } catch (const std::exception&) {
      }
      caf::anon_send(actor_, fail_atom::value, why);  // what is pending fails, and so does anything later
      WaitKeys();
    }
    caf::anon_send_exit(actor_, caf::exit_reason::user_shutdown);
    actor_ = nullptr;
    return error;
  }

  DistConfig config_;
  std::shared_ptr<net::NetSystem> net_;
  std::shared_ptr<Requests> requests_ = std::make_shared<Requests>();
  caf::actor actor_;
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
