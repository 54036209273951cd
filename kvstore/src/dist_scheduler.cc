// The scheduler of the distributed KVStore (kvstore/dist.h): membership and ranks, barriers, heartbeats,
// death notices and the orderly end. One actor; every connection is a broker of it (kvstore/net).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "kvstore/internal/dist_common.h"
#include "kvstore/internal/dist_roles.h"
#include "kvstore/net/internal/transport.h"

namespace troupe::internal {
namespace {

struct Member {
  caf::actor conn;
  net::Role role = net::Role::kWorker;
  int rank = -1;
  std::string host;
  std::uint16_t port = 0;
  bool alive = true;
  bool left = false;
  Clock::time_point last_seen;
};

class Scheduler {
 public:
  Scheduler(caf::event_based_actor* self, DistConfig config, std::shared_ptr<Outcome> outcome)
      : self_(self), config_(std::move(config)), outcome_(std::move(outcome)), born_(Clock::now()) {
    servers_.assign(static_cast<std::size_t>(config_.num_servers), -1);
    workers_.assign(static_cast<std::size_t>(config_.num_workers), -1);
  }

  caf::behavior Make() {
    self_->send(self_, net::tick_atom::value);
    return {
        [this](net::recv_atom, const caf::actor& conn, const net::Message& m) { OnFrame(conn, m); },
        [this](net::closed_atom, const caf::actor& conn, const std::string& why) { OnClosed(conn, why); },
        [this](net::tick_atom) { OnTick(); },
    };
  }

 private:
  Member* Find(const caf::actor& conn) {
    for (auto& m : members_) {
      if (m.conn == conn) return &m;
    }
    return nullptr;
  }
  std::string Name(const Member& m) const { return NodeName(m.role, m.rank, m.host); }
  void Send(const caf::actor& conn, const net::Message& m) { net::Send(conn, m); }
  void Refuse(const caf::actor& conn, const std::string& why) {
    std::fprintf(stderr, "troupe scheduler: refused a node: %s\n", why.c_str());
    refused_.insert(conn);
    Send(conn, net::ErrorMsg{0, "refused by the scheduler: " + why, -1, net::Role::kScheduler});
    self_->send(conn, net::close_atom::value);
  }

  int ActiveWorkers() const {
    int n = 0;
    for (int idx : workers_) {
      if (idx >= 0 && members_[static_cast<std::size_t>(idx)].alive && !members_[static_cast<std::size_t>(idx)].left) ++n;
    }
    return n;
  }

  net::Command StartCommand(int rank) const {
    net::Command c{0, "start", {}};
    c.args = {{"rank", std::to_string(rank)},
              {"num_servers", std::to_string(config_.num_servers)},
              {"num_workers", std::to_string(config_.num_workers)}};
    for (std::size_t r = 0; r < servers_.size(); ++r) {
      const Member& s = members_[static_cast<std::size_t>(servers_[r])];
      c.args.emplace_back("server." + std::to_string(r), s.host + ":" + std::to_string(s.port));
    }
    // A server that rejoins a running cluster must not wait for workers that are gone.
    for (int idx : workers_) {
      if (idx < 0) continue;
      const Member& w = members_[static_cast<std::size_t>(idx)];
      if (w.left) c.args.emplace_back("left", std::to_string(w.rank));
      if (!w.alive && !w.left) c.args.emplace_back("dead", std::to_string(w.rank));
    }
    if (!broken_.empty()) c.args.emplace_back("broken", broken_);
    return c;
  }

  void OnFrame(const caf::actor& conn, const net::Message& m) {
    if (observers_.count(conn) != 0) return OnObserverFrame(conn, m);
    Member* node = Find(conn);
    if (node == nullptr) {
      if (refused_.count(conn) != 0) return;  // frames the refused node sent before it saw the refusal
      const auto* hello = std::get_if<net::Hello>(&m);
      if (hello == nullptr) return Refuse(conn, "the first frame of a connection must be a hello");
      return OnHello(conn, *hello);
    }
    node->last_seen = Clock::now();
    if (std::holds_alternative<net::Heartbeat>(m)) return;
    if (const auto* b = std::get_if<net::Barrier>(&m)) return OnBarrier(*node, *b);
    if (const auto* c = std::get_if<net::Command>(&m)) return OnCommand(*node, *c);
    Send(conn, net::ErrorMsg{0, "the scheduler does not take this kind of frame", -1, net::Role::kScheduler});
  }

  void OnHello(const caf::actor& conn, const net::Hello& hello) {
    if (std::string why = CheckHello(hello); !why.empty()) return Refuse(conn, why);
    if (hello.role == net::Role::kScheduler) return Refuse(conn, "a second scheduler tried to join");
    if (hello.role == net::Role::kObserver) {
      observers_.insert(conn);
      return Send(conn, net::Hello{net::Role::kScheduler, -1, net::kProtocolVersion, config_.root_uri, 0});
    }
    if (hello.role == net::Role::kServer && hello.port == 0) return Refuse(conn, "a server must announce its port");
    Member m;
    m.conn = conn;
    m.role = hello.role;
    m.rank = hello.rank;
    m.host = hello.host;
    m.port = hello.port;
    m.last_seen = Clock::now();
    if (started_) {
      // Only a server may (re)join a running cluster: into the slot of a dead server.
      if (m.role != net::Role::kServer) return Refuse(conn, "the cluster has started; a worker cannot join it now");
      if (stopping_) return Refuse(conn, "the cluster is ending (every worker has left)");
      int slot = -1;
      if (m.rank >= 0 && m.rank < config_.num_servers) {
        // A rank that is held cannot be claimed: a restarted server takes its rank once the old process's
        // connection is gone (closed, or silent past the heartbeat timeout).
        const Member& old = members_[static_cast<std::size_t>(servers_[static_cast<std::size_t>(m.rank)])];
        if (old.alive) {
          return Refuse(conn, "server rank " + std::to_string(m.rank) + " is held by " + Name(old) +
                                  ", which is alive; a restarted server takes its rank once the old one's "
                                  "connection is gone (it closed, or was silent for TROUPE_HEARTBEAT_TIMEOUT_MS)");
        }
      }
      for (std::size_t r = 0; r < servers_.size(); ++r) {
        const bool dead = !members_[static_cast<std::size_t>(servers_[r])].alive;
        if (dead && (m.rank < 0 || m.rank == static_cast<int>(r))) {
          slot = static_cast<int>(r);
          break;
        }
      }
      if (slot < 0) {
        return Refuse(conn, "no server slot " + (m.rank >= 0 ? std::to_string(m.rank) + " " : std::string()) +
                                "is free: a server can only take the place of a dead one");
      }
      m.rank = slot;
      members_.push_back(m);
      servers_[static_cast<std::size_t>(slot)] = static_cast<int>(members_.size()) - 1;
      Send(conn, StartCommand(slot));
      std::fprintf(stderr, "troupe scheduler: %s is back\n", Name(m).c_str());
      Broadcast(net::Role::kWorker, net::Command{0, "server_up", {{"rank", std::to_string(slot)},
                                                                  {"address", m.host + ":" + std::to_string(m.port)}}});
      return;
    }
    members_.push_back(m);
    MaybeStart();
  }

  void MaybeStart() {
    std::vector<int> servers, workers;
    for (std::size_t i = 0; i < members_.size(); ++i) {
      if (!members_[i].alive) continue;
      (members_[i].role == net::Role::kServer ? servers : workers).push_back(static_cast<int>(i));
    }
    if (static_cast<int>(servers.size()) > config_.num_servers || static_cast<int>(workers.size()) > config_.num_workers) {
      const int extra = servers.size() > static_cast<std::size_t>(config_.num_servers) ? servers.back() : workers.back();
      Member& m = members_[static_cast<std::size_t>(extra)];
      m.alive = false;
      return Refuse(m.conn, "the cluster already has " + std::to_string(config_.num_servers) + " servers and " +
                                std::to_string(config_.num_workers) + " workers (DMLC_NUM_SERVER, DMLC_NUM_WORKER)");
    }
    if (static_cast<int>(servers.size()) < config_.num_servers || static_cast<int>(workers.size()) < config_.num_workers) {
      return;
    }
    // Servers that asked for a rank keep it; the others fill the free slots in arrival order.
    for (int idx : servers) {
      const int want = members_[static_cast<std::size_t>(idx)].rank;
      if (want >= 0 && want < config_.num_servers && servers_[static_cast<std::size_t>(want)] < 0) {
        servers_[static_cast<std::size_t>(want)] = idx;
      } else {
        members_[static_cast<std::size_t>(idx)].rank = -1;
      }
    }
    for (int idx : servers) {
      if (members_[static_cast<std::size_t>(idx)].rank >= 0) continue;
      const auto free = std::find(servers_.begin(), servers_.end(), -1);
      members_[static_cast<std::size_t>(idx)].rank = static_cast<int>(free - servers_.begin());
      *free = idx;
    }
    for (std::size_t r = 0; r < workers.size(); ++r) {
      workers_[r] = workers[r];
      members_[static_cast<std::size_t>(workers[r])].rank = static_cast<int>(r);
    }
    started_ = true;
    // `troupe launch` reads this line: a job whose workers all end before it came never used the cluster.
    std::printf("troupe scheduler: the cluster formed: %d server%s, %d worker%s\n", config_.num_servers,
                config_.num_servers == 1 ? "" : "s", config_.num_workers, config_.num_workers == 1 ? "" : "s");
    std::fflush(stdout);
    // Servers first: a worker connects to them as soon as it has its own start.
    for (const net::Role role : {net::Role::kServer, net::Role::kWorker}) {
      for (const Member& m : members_) {
        if (m.alive && m.role == role) Send(m.conn, StartCommand(m.rank));
      }
    }
  }

  // An observer asks for the node table: "nodes" answers with one ("node", "<role> <rank> <host:port> <state>
  // <ms since its last frame>") per node that said hello (state alive, joining, left or dead), and
  // ("cluster", "forming|running|ending"), ("barriers", rounds completed) and ("broken", why) when a worker
  // died. "barrier" (optional ("round", N), default the next one) answers ("round", N) once the workers have
  // completed barrier round N: at once if they have, with an error if no such round can come.
  void OnObserverFrame(const caf::actor& conn, const net::Message& m) {
    const auto* c = std::get_if<net::Command>(&m);
    if (c == nullptr) return;  // heartbeats and the like: observers need none
    if (c->name == "barrier") return OnObserverBarrier(conn, *c);
    if (c->name != "nodes") {
      return Send(conn, net::ErrorMsg{c->request_id, "the scheduler has no observer command '" + c->name +
                                                         "' (nodes, barrier)", -1, net::Role::kScheduler});
    }
    net::Command reply{c->request_id, "nodes", {}};
    reply.args.emplace_back("cluster", !started_ ? "forming" : stopping_ ? "ending" : "running");
    reply.args.emplace_back("barriers", std::to_string(barrier_rounds_));
    if (!broken_.empty()) reply.args.emplace_back("broken", broken_);
    const auto now = Clock::now();
    for (const Member& x : members_) {
      const char* state = !x.alive ? (x.left ? "left" : "dead") : x.left ? "left" : started_ ? "alive" : "joining";
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - x.last_seen).count();
      reply.args.emplace_back("node", std::string(RoleName(x.role)) + " " + std::to_string(x.rank) + " " + x.host +
                                          ":" + std::to_string(x.port) + " " + state + " " + std::to_string(ms));
    }
    Send(conn, reply);
  }

  void OnBarrier(Member& node, const net::Barrier& b) {
    if (node.role != net::Role::kWorker || b.group != net::kWorkerGroup) {
      return Send(node.conn, net::ErrorMsg{b.request_id, "only barriers of the worker group are supported", -1,
                                           net::Role::kScheduler});
    }
    if (!broken_.empty()) return Send(node.conn, net::ErrorMsg{b.request_id, broken_, dead_rank_, net::Role::kWorker});
    if (barrier_.empty()) barrier_started_ = Clock::now();
    barrier_.emplace_back(node.conn, b.request_id);
    CheckBarrier();
  }

  void CheckBarrier() {
    if (barrier_.empty() || static_cast<int>(barrier_.size()) < ActiveWorkers()) return;
    for (const auto& [conn, id] : barrier_) Send(conn, net::Ack{id, std::nullopt});
    barrier_.clear();
    ++barrier_rounds_;
    AnswerObserverBarriers();
  }

  void OnObserverBarrier(const caf::actor& conn, const net::Command& c) {
    std::int64_t round = barrier_rounds_ + 1;
    for (const auto& [k, v] : c.args) {
      if (k != "round") continue;
      char* end = nullptr;
      round = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || round < 1) {
        return Send(conn, net::ErrorMsg{c.request_id, "barrier: the round must be a positive integer, not '" + v + "'",
                                        -1, net::Role::kScheduler});
      }
    }
    observer_barriers_.push_back({conn, c.request_id, round});
    AnswerObserverBarriers();
    if (!observer_barriers_.empty() && observer_barriers_.back().request_id == c.request_id &&
        observer_barriers_.back().conn == conn) {
      std::fprintf(stderr, "troupe scheduler: an observer waits for the workers' barrier round %lld (%lld completed)\n",
                   static_cast<long long>(round), static_cast<long long>(barrier_rounds_));
    }
  }

  // Answers the observers whose round has come, and fails the others when no further round can come.
  void AnswerObserverBarriers() {
    std::string never;
    if (!broken_.empty()) never = "no further barrier round can complete: " + broken_;
    if (stopping_) never = "no further barrier round can complete: every worker has left";
    std::vector<ObserverBarrier> waiting;
    for (ObserverBarrier& b : observer_barriers_) {
      if (b.round <= barrier_rounds_) {
        Send(b.conn, net::Command{b.request_id, "barrier", {{"round", std::to_string(b.round)},
                                                            {"completed", std::to_string(barrier_rounds_)}}});
      } else if (!never.empty()) {
        Send(b.conn, net::ErrorMsg{b.request_id, never + " (" + std::to_string(barrier_rounds_) + " completed)", -1,
                                   net::Role::kScheduler});
      } else {
        waiting.push_back(std::move(b));
      }
    }
    observer_barriers_ = std::move(waiting);
  }

  void OnCommand(Member& node, const net::Command& c) {
    if (c.name == "leave" && node.role == net::Role::kWorker) {
      node.left = true;
      // A worker that leaves a failed job learns it here (KVStore::Finalize throws it).
      if (!broken_.empty()) {
        Send(node.conn, net::ErrorMsg{c.request_id, broken_, dead_rank_, net::Role::kWorker});
      } else {
        Send(node.conn, net::Ack{c.request_id, std::nullopt});
      }
      CheckBarrier();
      return CheckEnd();
    }
    if (c.name == "fail" && node.role == net::Role::kWorker) {
      // The worker failed (its store was destroyed without KVStore::Finalize): not a clean leave.
      Send(node.conn, net::Ack{c.request_id, std::nullopt});
      return Death(node, Arg(c, "message", "it failed"), "failed");
    }
    if (c.name == "fail" && node.role == net::Role::kServer) {
      // A server found that the job cannot go on (the workers' models differ, a round made no progress).
      Send(node.conn, net::Ack{c.request_id, std::nullopt});
      return BreakJob(Arg(c, "message", Name(node) + " failed the job"), -1);
    }
    Send(node.conn, net::ErrorMsg{c.request_id, "the scheduler has no command '" + c.name + "'", -1,
                                  net::Role::kScheduler});
  }

  void Broadcast(net::Role role, const net::Message& m) {
    const net::SharedBytes bytes = net::EncodeShared(m);
    for (const Member& x : members_) {
      if (x.alive && x.role == role) net::Send(x.conn, bytes);
    }
  }

  void OnClosed(const caf::actor& conn, const std::string& why) {
    refused_.erase(conn);
    if (observers_.erase(conn) != 0) {
      observer_barriers_.erase(std::remove_if(observer_barriers_.begin(), observer_barriers_.end(),
                                              [&](const ObserverBarrier& b) { return b.conn == conn; }),
                               observer_barriers_.end());
      return;
    }
    Member* node = Find(conn);
    if (node == nullptr || !node->alive) return;
    if (node->left || (stopping_ && node->role == net::Role::kServer)) {
      node->alive = false;
      return CheckEnd();
    }
    Death(*node, why);
  }

  // `verb`: "died" (its connection closed or went silent) or "failed" (it said so).
  void Death(Member& node, const std::string& why, const char* verb = "died") {
    node.alive = false;
    self_->send(node.conn, net::close_atom::value);
    if (!started_) return;  // it never was a member: the cluster waits for another node
    const std::string what = Name(node) + " " + verb + ": " + why;
    std::fprintf(stderr, "troupe scheduler: %s\n", what.c_str());
    const net::Command notice{0, "node_dead", {{"role", RoleName(node.role)}, {"rank", std::to_string(node.rank)},
                                               {"message", what}}};
    Broadcast(net::Role::kServer, notice);
    Broadcast(net::Role::kWorker, notice);
    if (node.role == net::Role::kWorker) BreakJob(what, node.rank);
    CheckEnd();
  }

  // The job cannot go on (a worker died or failed, the workers' models differ, a wait made no progress):
  // barriers fail with `what` from now on, and every server and worker is told, so that every waiting
  // party fails with it (the first failure is the one reported).
  void BreakJob(const std::string& what, int rank) {
    died_ = true;
    if (!broken_.empty()) return;
    broken_ = what;
    dead_rank_ = rank;
    std::fprintf(stderr, "troupe scheduler: the job failed: %s\n", what.c_str());
    for (const auto& [conn, id] : barrier_) Send(conn, net::ErrorMsg{id, broken_, dead_rank_, net::Role::kWorker});
    barrier_.clear();
    AnswerObserverBarriers();
    const net::Command notice{0, "broken", {{"message", what}, {"rank", std::to_string(rank)}}};
    Broadcast(net::Role::kServer, notice);
    Broadcast(net::Role::kWorker, notice);
  }

  // A barrier round whose workers have not all arrived within the progress timeout fails the job, naming
  // who is missing.
  void CheckBarrierProgress(Clock::time_point now) {
    if (config_.progress_timeout_ms <= 0 || barrier_.empty() || !broken_.empty()) return;
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - barrier_started_).count();
    if (waited < config_.progress_timeout_ms) return;
    std::string missing, arrived;
    for (int idx : workers_) {
      if (idx < 0) continue;
      const Member& w = members_[static_cast<std::size_t>(idx)];
      if (!w.alive || w.left) continue;
      const bool here = std::any_of(barrier_.begin(), barrier_.end(), [&](const auto& x) { return x.first == w.conn; });
      AppendRank(here ? &arrived : &missing, w.rank);
    }
    BreakJob("barrier round " + std::to_string(barrier_rounds_ + 1) + " made no progress for " + std::to_string(waited) +
                 " ms (TROUPE_PROGRESS_TIMEOUT_MS): worker(s) " + missing + " did not arrive (arrived: " +
                 (arrived.empty() ? "none" : arrived) + ")",
             -1);
  }

  // Every worker has left or died: stop the servers; the scheduler ends when they are gone.
  void CheckEnd() {
    if (!started_) return;
    for (int idx : workers_) {
      const Member& w = members_[static_cast<std::size_t>(idx)];
      if (w.alive && !w.left) return;
    }
    if (!stopping_) {
      stopping_ = true;
      // A server that died and never came back lost its keys: the run did not end in order.
      for (int idx : servers_) {
        if (!members_[static_cast<std::size_t>(idx)].alive) died_ = true;
      }
      Broadcast(net::Role::kServer, net::Command{0, "stop", {}});
      AnswerObserverBarriers();
    }
    for (const Member& m : members_) {
      if (m.alive && m.role == net::Role::kServer) return;
    }
    Finish(died_ ? 1 : 0, died_ ? "a node of the cluster died (see above)" : "");
  }

  void OnTick() {
    if (finished_) return;
    const auto now = Clock::now();
    const auto timeout = std::chrono::milliseconds(config_.heartbeat_timeout_ms);
    const net::SharedBytes beat = net::EncodeShared(net::Heartbeat{-1, ++beats_});
    for (Member& m : members_) {
      if (!m.alive) continue;
      if (now - m.last_seen > timeout) {
        const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(now - m.last_seen).count();
        Death(m, "no heartbeat for " + std::to_string(silent) + " ms (TROUPE_HEARTBEAT_TIMEOUT_MS=" +
                     std::to_string(config_.heartbeat_timeout_ms) + ")");
        continue;
      }
      net::Send(m.conn, beat);
    }
    CheckBarrierProgress(now);
    if (!started_ && now - born_ > std::chrono::milliseconds(config_.connect_timeout_ms)) {
      int s = 0, w = 0;
      for (const Member& m : members_) {
        if (m.alive) ++(m.role == net::Role::kServer ? s : w);
      }
      const std::string why = "the cluster did not form within " + std::to_string(config_.connect_timeout_ms) +
                              " ms: " + std::to_string(s) + " of " + std::to_string(config_.num_servers) +
                              " servers and " + std::to_string(w) + " of " + std::to_string(config_.num_workers) +
                              " workers joined";
      for (const Member& m : members_) {
        if (m.alive) Send(m.conn, net::ErrorMsg{0, why, -1, net::Role::kScheduler});
      }
      return Finish(1, why);
    }
    if (!finished_) self_->delayed_send(self_, std::chrono::milliseconds(config_.heartbeat_interval_ms), net::tick_atom::value);
  }

  void Finish(int status, const std::string& message) {
    if (finished_) return;
    finished_ = true;
    for (const Member& m : members_) {
      if (m.alive) self_->send(m.conn, net::close_atom::value);
    }
    for (const caf::actor& o : observers_) self_->send(o, net::close_atom::value);
    outcome_->Set(status, message);
    self_->quit();
  }

  caf::event_based_actor* self_;
  DistConfig config_;
  std::shared_ptr<Outcome> outcome_;
  Clock::time_point born_;
  std::vector<Member> members_;   // every node that said hello, in arrival order
  std::vector<int> servers_;      // rank -> index in members_ (-1 before the start)
  std::vector<int> workers_;
  std::vector<std::pair<caf::actor, std::uint64_t>> barrier_;  // waiting workers
  Clock::time_point barrier_started_;                          // when the first of them arrived
  std::int64_t barrier_rounds_ = 0;                            // barrier rounds the workers completed
  struct ObserverBarrier {
    caf::actor conn;
    std::uint64_t request_id;
    std::int64_t round;
  };
  std::vector<ObserverBarrier> observer_barriers_;  // observers waiting for a round
  std::set<caf::actor> refused_;  // connections refused (closing)
  std::set<caf::actor> observers_;  // ClusterObserver connections (not members)
  std::string broken_;            // set when a worker died: barriers fail with it
  int dead_rank_ = -1;
  bool started_ = false, stopping_ = false, finished_ = false, died_ = false;
  std::uint64_t beats_ = 0;
};

}  // namespace

NodeHandle SpawnScheduler(net::NetSystem& net, const DistConfig& config, std::shared_ptr<Outcome> outcome) {
  caf::actor actor = net.system().spawn([config, outcome](caf::event_based_actor* self) {
    auto state = std::make_shared<Scheduler>(self, config, outcome);
    self->attach_functor([state, outcome](const caf::error&) {
      outcome->Set(1, "the scheduler stopped");  // no-op after an orderly Finish
    });
    return state->Make();
  });
  net::Listener l;
  try {
    l = net::Listen(net.system(), config.root_uri, static_cast<std::uint16_t>(config.root_port), actor,
                    ListenOptionsOf(config, "scheduler"));
  } catch (...) {
    caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
    throw;
  }
  return NodeHandle{actor, l.port};
}

}  // namespace troupe::internal
