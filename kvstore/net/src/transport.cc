// The transport of the distributed KVStore: see kvstore/net/internal/transport.h.
#include "kvstore/net/internal/transport.h"

#include <chrono>
#include <cstdio>
#include <thread>
#include <future>
#include <mutex>

#include "actors/error.h"

namespace troupe::net {
namespace {

// Bytes asked of the socket per read: large enough that a 4 MiB tensor arrives in a few reads.
constexpr std::size_t kReadChunk = std::size_t{1} << 20;

struct ConnState {
  explicit ConnState(std::size_t max_frame_bytes) : decoder(max_frame_bytes) {}
  FrameDecoder decoder;
  std::string peer;
  bool done = false;
};

caf::behavior ConnectionBroker(caf::io::broker* self, caf::io::connection_handle hdl, caf::actor owner,
                               std::size_t max_frame_bytes) {
  auto st = std::make_shared<ConnState>(max_frame_bytes);
  st->peer = self->remote_addr(hdl) + ":" + std::to_string(self->remote_port(hdl));
  self->configure_read(hdl, caf::io::receive_policy::at_most(kReadChunk));
  self->monitor(owner);
  // The owner is gone: nobody reads this connection any more.
  self->set_down_handler([self](const caf::down_msg&) { self->quit(); });
  auto finish = [self, hdl, owner, st](const std::string& why, bool log) {
    if (st->done) return;
    st->done = true;
    if (log) std::fprintf(stderr, "troupe kvstore: closing the connection from %s: %s\n", st->peer.c_str(), why.c_str());
    self->send(owner, closed_atom::value, caf::actor_cast<caf::actor>(self), why);
    self->close(hdl);
    self->quit();
  };
  return {
      [self, owner, st, finish](caf::io::new_data_msg& msg) {
        if (st->done) return;
        std::string error;
        try {
          st->decoder.Feed(reinterpret_cast<const std::byte*>(msg.buf.data()), msg.buf.size());
        } catch (const std::exception& e) {
          error = e.what();
        }
        // Frames decoded before a bad one are delivered: they were well formed.
        while (auto m = st->decoder.Next()) {
          self->send(owner, recv_atom::value, caf::actor_cast<caf::actor>(self), std::move(*m));
        }
        if (!error.empty()) finish(error, true);
      },
      [self, hdl, st](send_atom, const SharedBytes& bytes) {
        if (st->done) return;
        self->write(hdl, bytes->size(), bytes->data());
        self->flush(hdl);
      },
      [self, hdl, st](close_atom) {
        if (st->done) return;
        st->done = true;
        self->flush(hdl);
        self->close(hdl);  // graceful: queued bytes are written first
        self->quit();
      },
      [st, finish](const caf::io::connection_closed_msg&) {
        std::string why = "the peer closed the connection";
        try {
          st->decoder.Finish();
        } catch (const std::exception& e) {
          why = e.what();
        }
        finish(why, false);
      },
  };
}

struct ListenArgs {
  std::string host;
  std::uint16_t port = 0;
  std::size_t max_frame_bytes = 0;
  std::promise<std::pair<std::uint16_t, std::string>> bound;  // port, or 0 and the error
};

caf::behavior ListenerBroker(caf::io::broker* self, caf::actor owner, std::shared_ptr<ListenArgs> args) {
  auto r = self->add_tcp_doorman(args->port, args->host.c_str(), true);
  if (!r) {
    args->bound.set_value({0, self->system().render(r.error())});
    self->quit();
    return {};
  }
  args->bound.set_value({r->second, {}});
  self->monitor(owner);
  self->set_down_handler([self](const caf::down_msg&) { self->quit(); });
  const std::size_t max_frame_bytes = args->max_frame_bytes;
  return {
      [self, owner, max_frame_bytes](const caf::io::new_connection_msg& msg) {
        // The owner learns of the connection from its first frame (the hello).
        self->fork(ConnectionBroker, msg.handle, owner, max_frame_bytes);
      },
  };
}

std::mutex g_system_mu;
std::weak_ptr<NetSystem> g_system;  // guarded by g_system_mu

}  // namespace

SharedBytes EncodeShared(const Message& message) {
  return std::make_shared<const std::vector<std::byte>>(EncodeFrame(message));
}

NetSystem::NetSystem() : config_(std::make_unique<caf::actor_system_config>()) {
  config_->load<caf::io::middleman>();
  config_->set("scheduler.max-threads", std::size_t{2});
  config_->set("scheduler.policy", caf::atom("sharing"));  // no polling naps (actors/src/runtime.cc)
  config_->set("logger.verbosity", caf::atom("quiet"));
  system_ = std::make_unique<caf::actor_system>(*config_);
}

NetSystem::~NetSystem() { system_.reset(); }  // waits for every actor of the nodes to quit

std::shared_ptr<NetSystem> NetSystem::Acquire() {
  std::lock_guard<std::mutex> lock(g_system_mu);
  if (auto s = g_system.lock()) return s;
  std::shared_ptr<NetSystem> s(new NetSystem());
  g_system = s;
  return s;
}

Listener Listen(caf::actor_system& system, const std::string& host, std::uint16_t port, const caf::actor& owner,
                std::size_t max_frame_bytes) {
  auto args = std::make_shared<ListenArgs>();
  args->host = host;
  args->port = port;
  args->max_frame_bytes = max_frame_bytes;
  auto bound = args->bound.get_future();
  caf::actor listener = system.middleman().spawn_broker(ListenerBroker, owner, args);
  auto [bound_port, error] = bound.get();
  if (bound_port == 0) {
    throw Error("kvstore: cannot listen on " + host + ":" + std::to_string(port) + ": " + error +
                " (is the address one of this machine's, and the port free?)");
  }
  return Listener{listener, bound_port};
}

caf::actor Connect(caf::actor_system& system, const std::string& host, std::uint16_t port, const caf::actor& owner,
                   std::size_t max_frame_bytes, int retry_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(retry_ms);
  auto r = system.middleman().spawn_client(ConnectionBroker, host, port, owner, max_frame_bytes);
  while (!r && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the peer may not listen yet
    r = system.middleman().spawn_client(ConnectionBroker, host, port, owner, max_frame_bytes);
  }
  if (!r) {
    throw Error("kvstore: cannot connect to " + host + ":" + std::to_string(port) + ": " + system.render(r.error()));
  }
  return *r;
}

std::pair<std::string, std::uint16_t> SplitHostPort(const std::string& address) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) throw Error("kvstore: bad address '" + address + "' (host:port)");
  const std::string port = address.substr(colon + 1);
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p <= 0 || p > 65535) {
    throw Error("kvstore: bad port in address '" + address + "'");
  }
  return {address.substr(0, colon), static_cast<std::uint16_t>(p)};
}

}  // namespace troupe::net
