// ClusterObserver (kvstore/dist.h): an observer connection to the scheduler and to each live server, driven
// by a scoped actor on the caller's thread (every call sends its requests and waits for the answers).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "base/error.h"
#include "kvstore/dist.h"
#include "kvstore/internal/dist_common.h"
#include "kvstore/net/internal/transport.h"

namespace troupe {

namespace {

constexpr std::size_t kObserverMaxFrame = std::size_t{1} << 31;

std::vector<std::string> Words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::int64_t ToInt(const std::string& s, const std::string& what) {
  try {
    std::size_t used = 0;
    const long long v = std::stoll(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  throw Error("ClusterObserver: malformed " + what + " '" + s + "' in an answer");
}

// "(2,3)" -> {2, 3}; "()" -> {}.
std::vector<std::int64_t> ParseShape(const std::string& text) {
  std::vector<std::int64_t> dims;
  std::string inner = text;
  inner.erase(std::remove_if(inner.begin(), inner.end(), [](char c) { return c == '(' || c == ')' || c == ' '; }),
              inner.end());
  std::stringstream list(inner);
  for (std::string d; std::getline(list, d, ',');) {
    if (!d.empty()) dims.push_back(ToInt(d, "shape"));
  }
  return dims;
}

}  // namespace

struct ClusterObserver::Impl {
  std::shared_ptr<net::NetSystem> net;
  std::unique_ptr<caf::scoped_actor> self;
  std::string token;
  int timeout_ms = 5000;
  std::string scheduler_address;
  caf::actor scheduler;
  std::map<std::string, caf::actor> servers;  // by address
  std::vector<caf::actor> closed;             // connections that ended
  std::uint64_t next_id = 1;

  bool IsClosed(const caf::actor& conn) const { return std::find(closed.begin(), closed.end(), conn) != closed.end(); }

  // Waits up to timeout_ms for the frame from `conn` that answers request `id` (a Hello when id is 0). An
  // error frame for the request (or for the connection) and a closed connection throw, naming `who`. With
  // `cancelled`, it also asks `cancelled` every 100 ms (true: throws "interrupted").
  net::Message Await(const caf::actor& conn, std::uint64_t id, const std::string& who,
                     const std::function<bool()>& cancelled = {}) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (cancelled && cancelled()) throw Error("ClusterObserver: interrupted while waiting for " + who);
      if (left.count() <= 0) {
        throw Error("ClusterObserver: no answer from " + who + " within " + std::to_string(timeout_ms) + " ms");
      }
      if (cancelled) left = std::min(left, std::chrono::milliseconds(100));
      std::optional<net::Message> got;
      std::string error;
      (*self)->receive(
          [&](net::recv_atom, const caf::actor& c, const net::Message& m) {
            if (c != conn) return;  // a late answer on another connection
            if (const auto* e = std::get_if<net::ErrorMsg>(&m)) {
              if (e->request_id == id || e->request_id == 0) error = who + ": " + e->message;
              return;
            }
            if (id == 0 ? std::holds_alternative<net::Hello>(m)
                        : (std::holds_alternative<net::Command>(m) && std::get<net::Command>(m).request_id == id) ||
                              (std::holds_alternative<net::Ack>(m) && std::get<net::Ack>(m).request_id == id)) {
              got = m;
            }
          },
          [&](net::closed_atom, const caf::actor& c, const std::string& why) {
            closed.push_back(c);
            if (c == conn) error = who + " closed the connection: " + why;
          },
          caf::after(left) >> [] {});
      if (!error.empty()) throw Error("ClusterObserver: " + error);
      if (got) return std::move(*got);
    }
  }

  caf::actor Open(const std::string& address, const std::string& who) {
    const auto [host, port] = net::SplitHostPort(address);
    net::ConnOptions options;
    options.max_frame_bytes = kObserverMaxFrame;
    options.token = token;
    options.hello_timeout_ms = timeout_ms;
    caf::actor conn = net::Connect(net->system(), host, port, caf::actor_cast<caf::actor>(*self), options, 0);
    net::Send(conn, net::Message{net::Hello{net::Role::kObserver, -1, net::kProtocolVersion, "", 0}});
    Await(conn, 0, who);
    return conn;
  }

  net::Message Request(const caf::actor& conn, net::Message m, std::uint64_t id, const std::string& who,
                       const std::function<bool()>& cancelled = {}) {
    // A connection that closed earlier answers nothing: say so now instead of waiting out the timeout.
    if (IsClosed(conn)) throw Error("ClusterObserver: " + who + " closed the connection earlier (the cluster ended, or that node went away)");
    net::Send(conn, m);
    return Await(conn, id, who, cancelled);
  }

  net::Command Command(const caf::actor& conn, const std::string& name, const std::string& who,
                       std::vector<std::pair<std::string, std::string>> args = {},
                       const std::function<bool()>& cancelled = {}) {
    const std::uint64_t id = next_id++;
    net::Message answer = Request(conn, net::Command{id, name, std::move(args)}, id, who, cancelled);
    if (auto* c = std::get_if<net::Command>(&answer)) return std::move(*c);
    return net::Command{id, "ack", {}};  // an Ack: done, nothing to report
  }

  // The live servers: (rank, connection), connecting to new addresses.
  std::vector<std::pair<int, caf::actor>> Servers() {
    std::vector<std::pair<int, caf::actor>> out;
    for (const ClusterNodeInfo& n : Nodes(nullptr, nullptr)) {
      if (n.role != "server" || n.state != "alive") continue;
      auto it = servers.find(n.address);
      if (it == servers.end() || IsClosed(it->second)) {
        it = servers.insert_or_assign(n.address, Open(n.address, "server " + std::to_string(n.rank))).first;
      }
      out.emplace_back(n.rank, it->second);
    }
    return out;
  }

  std::vector<ClusterNodeInfo> Nodes(std::string* cluster, std::string* broken, std::int64_t* barriers = nullptr) {
    const net::Command c = Command(scheduler, "nodes", "the scheduler at " + scheduler_address);
    std::vector<ClusterNodeInfo> nodes{{"scheduler", -1, scheduler_address, "alive", 0}};
    for (const auto& [k, v] : c.args) {
      if (k == "cluster" && cluster) *cluster = v;
      if (k == "barriers" && barriers) *barriers = ToInt(v, "barrier count");
      if (k == "broken" && broken) *broken = v;
      if (k != "node") continue;
      const auto w = Words(v);
      if (w.size() != 5) throw Error("ClusterObserver: malformed node '" + v + "' from the scheduler");
      nodes.push_back({w[0], static_cast<int>(ToInt(w[1], "rank")), w[2], w[3], ToInt(w[4], "heartbeat age")});
    }
    return nodes;
  }
};

ClusterObserver::ClusterObserver(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ClusterObserver::~ClusterObserver() {
  if (!impl_) return;
  for (const auto& [address, conn] : impl_->servers) (*impl_->self)->send(conn, net::close_atom::value);
  if (impl_->scheduler) (*impl_->self)->send(impl_->scheduler, net::close_atom::value);
  impl_->self.reset();  // the connection brokers follow their owner
}

std::unique_ptr<ClusterObserver> ClusterObserver::Connect(const std::string& scheduler_host, int scheduler_port,
                                                          const std::string& token, int timeout_ms) {
  if (scheduler_port <= 0 || scheduler_port > 65535) {
    throw Error("ClusterObserver: bad scheduler port " + std::to_string(scheduler_port));
  }
  auto impl = std::make_unique<Impl>();
  impl->net = net::NetSystem::Acquire();
  impl->self = std::make_unique<caf::scoped_actor>(impl->net->system());
  impl->token = token;
  impl->timeout_ms = std::max(1, timeout_ms);
  impl->scheduler_address = scheduler_host + ":" + std::to_string(scheduler_port);
  impl->scheduler = impl->Open(impl->scheduler_address, "the scheduler at " + impl->scheduler_address);
  return std::unique_ptr<ClusterObserver>(new ClusterObserver(std::move(impl)));
}

std::vector<ClusterNodeInfo> ClusterObserver::Nodes(std::string* cluster, std::string* broken,
                                                    std::int64_t* barriers) {
  return impl_->Nodes(cluster, broken, barriers);
}

std::int64_t ClusterObserver::Barrier(std::int64_t round, const std::function<bool()>& cancelled) {
  std::vector<std::pair<std::string, std::string>> args;
  if (round > 0) args.emplace_back("round", std::to_string(round));
  const net::Command c = impl_->Command(impl_->scheduler, "barrier", "the scheduler at " + impl_->scheduler_address,
                                        std::move(args), cancelled ? cancelled : [] { return false; });
  for (const auto& [k, v] : c.args) {
    if (k == "round") return ToInt(v, "barrier round");
  }
  throw Error("ClusterObserver: the scheduler's barrier answer names no round");
}

std::vector<ClusterKeyInfo> ClusterObserver::Keys() {
  std::vector<ClusterKeyInfo> keys;
  for (const auto& [rank, conn] : impl_->Servers()) {
    const net::Command c = impl_->Command(conn, "keys", "server " + std::to_string(rank));
    for (const auto& [k, v] : c.args) {
      const auto w = Words(v);  // key dtype (shape) part/parts; the shape has no spaces
      const auto slash = w.size() == 4 ? w[3].find('/') : std::string::npos;
      if (slash == std::string::npos) throw Error("ClusterObserver: malformed key '" + v + "' from server " + std::to_string(rank));
      keys.push_back({static_cast<int>(ToInt(w[0], "key")), rank, w[1], ParseShape(w[2]),
                      static_cast<int>(ToInt(w[3].substr(0, slash), "part")),
                      static_cast<int>(ToInt(w[3].substr(slash + 1), "parts"))});
    }
  }
  std::sort(keys.begin(), keys.end(),
            [](const ClusterKeyInfo& a, const ClusterKeyInfo& b) { return std::tie(a.key, a.part) < std::tie(b.key, b.part); });
  return keys;
}

NDArray ClusterObserver::Pull(int key) {
  std::vector<std::pair<ClusterKeyInfo, caf::actor>> parts;
  const auto servers = impl_->Servers();
  for (const ClusterKeyInfo& k : Keys()) {
    if (k.key != key) continue;
    for (const auto& [rank, conn] : servers) {
      if (rank == k.server) parts.emplace_back(k, conn);
    }
  }
  if (parts.empty()) throw Error("ClusterObserver::Pull: no server holds key " + std::to_string(key));
  std::vector<net::TensorPayload> values;
  for (const auto& [info, conn] : parts) {
    const std::uint64_t id = impl_->next_id++;
    net::TensorMsg t;
    t.op = net::TensorOp::kPull;
    t.request_id = id;
    t.key = key;
    t.part_index = static_cast<std::uint32_t>(info.part);
    t.part_count = static_cast<std::uint32_t>(info.parts);
    net::Message answer = impl_->Request(conn, t, id, "server " + std::to_string(info.server));
    auto* ack = std::get_if<net::Ack>(&answer);
    if (ack == nullptr || !ack->value) throw Error("ClusterObserver::Pull: server " + std::to_string(info.server) + " sent no value");
    values.push_back(std::move(*ack->value));
  }
  TShape shape(values[0].shape);
  if (values.size() > 1) {  // a split key: its parts joined as one flat array
    std::int64_t n = 0;
    for (const auto& v : values) n += TShape(v.shape).Size();
    shape = TShape{n};
  }
  NDArray out(shape, Context::CPU(0), values[0].dtype);
  out.WaitToWrite();
  auto* dst = static_cast<std::byte*>(out.data().dptr);
  std::size_t at = 0;
  for (const auto& v : values) {
    if (at + v.data.size() > out.Bytes()) throw Error("ClusterObserver::Pull: the parts of key " + std::to_string(key) + " do not fit together");
    std::memcpy(dst + at, v.data.bytes.data(), v.data.size());
    at += v.data.size();
  }
  return out;
}

std::vector<ClusterServerStats> ClusterObserver::Stats() {
  std::vector<ClusterServerStats> out;
  for (const auto& [rank, conn] : impl_->Servers()) {
    const net::Command c = impl_->Command(conn, "stats", "server " + std::to_string(rank));
    ClusterServerStats s;
    s.rank = rank;
    for (const auto& [k, v] : c.args) {
      if (k == "keys") s.keys = ToInt(v, k);
      if (k == "pushes") s.pushes = ToInt(v, k);
      if (k == "pulls") s.pulls = ToInt(v, k);
      if (k == "updates") s.updates = ToInt(v, k);
      if (k == "bytes_in") s.bytes_in = ToInt(v, k);
      if (k == "bytes_out") s.bytes_out = ToInt(v, k);
      if (k == "tensor_frames") s.tensor_frames = ToInt(v, k);
      if (k == "batches") s.batches = ToInt(v, k);
      if (k == "workers") s.workers = static_cast<int>(ToInt(v, k));
      if (k == "mode") s.mode = v;
    }
    out.push_back(s);
  }
  return out;
}

void ClusterObserver::Checkpoint(const std::string& dir) {
  if (!dir.empty()) throw Error(std::string("ClusterObserver::Checkpoint: ") + internal::kNoPeerPaths);
  std::vector<std::pair<std::string, std::string>> args;
  for (const auto& [rank, conn] : impl_->Servers()) impl_->Command(conn, "checkpoint", "server " + std::to_string(rank), args);
}

}  // namespace troupe
