// The transport of the distributed KVStore: see kvstore/net/internal/transport.h.
#include "kvstore/net/internal/transport.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <future>
#include <map>
#include <mutex>

#include "actors/error.h"

namespace troupe::net {
namespace {

// Bodies at least this big are read into a buffer of their own and adopted by the decoder (no copy).
constexpr std::size_t kAdoptBytes = std::size_t{64} << 10;
constexpr std::size_t kPrefixBytes = 8;
// What a connection's pool keeps per buffer size: up to this many bytes (a round of a model's keys can
// be in flight at once), and at least a few buffers.
constexpr std::size_t kPoolBytesPerSize = std::size_t{96} << 20;
constexpr std::size_t kPoolMinPerSize = 4;

// Reusable body buffers of one connection. A buffer handed out returns here when the decoded message that
// owns it is released (on whatever thread consumes it), so steady traffic allocates (and faults in) no
// new pages.
class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  // A buffer of exactly n bytes (recycled, or new).
  std::unique_ptr<std::vector<char>> Take(std::size_t n) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(n);
      if (it != free_.end() && !it->second.empty()) {
        auto v = std::move(it->second.back());
        it->second.pop_back();
        return v;
      }
    }
    return std::make_unique<std::vector<char>>(n);
  }
  // Shares `v`; when the last owner lets go, it comes back to this pool.
  std::shared_ptr<std::vector<char>> Share(std::unique_ptr<std::vector<char>> v) {
    auto self = shared_from_this();
    return std::shared_ptr<std::vector<char>>(v.release(), [self](std::vector<char>* p) { self->Give(p); });
  }

 private:
  void Give(std::vector<char>* p) {
    std::unique_ptr<std::vector<char>> v(p);
    std::lock_guard<std::mutex> lock(mu_);
    auto& list = free_[v->size()];
    if (list.size() < std::max(kPoolMinPerSize, kPoolBytesPerSize / std::max<std::size_t>(v->size(), 1))) {
      list.push_back(std::move(v));
    }
  }

  std::mutex mu_;
  std::map<std::size_t, std::vector<std::unique_ptr<std::vector<char>>>> free_;
};

struct ConnState {
  explicit ConnState(std::size_t max_frame_bytes)
      : decoder(max_frame_bytes), pool(std::make_shared<BufferPool>()) {}
  FrameDecoder decoder;
  std::shared_ptr<BufferPool> pool;
  std::string peer;
  bool done = false;
  bool in_body = false;   // the next read is a body (else a prefix)
  bool adopting = false;  // that body is read into a pool buffer
};

caf::behavior ConnectionBroker(caf::io::broker* self, caf::io::connection_handle hdl, caf::actor owner,
                               std::size_t max_frame_bytes, FrameHook hook) {
  auto st = std::make_shared<ConnState>(max_frame_bytes);
  st->peer = self->remote_addr(hdl) + ":" + std::to_string(self->remote_port(hdl));
  // Small frames (barriers, small keys, acks) go out at once: a request/response protocol gains nothing
  // from Nagle's coalescing. The handle of a default-multiplexer connection is its socket.
  if (auto r = caf::io::network::tcp_nodelay(static_cast<caf::io::network::native_socket>(hdl.id()), true); !r) {
    std::fprintf(stderr, "troupe kvstore: cannot set TCP_NODELAY on the connection from %s\n", st->peer.c_str());
  }
  self->configure_read(hdl, caf::io::receive_policy::exactly(kPrefixBytes));
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
  auto write = [self, hdl, st](const std::byte* p, std::size_t n) { self->write(hdl, n, p); };
  return {
      [self, hdl, owner, st, finish, hook](caf::io::new_data_msg& msg) {
        if (st->done) return;
        std::string error;
        try {
          if (!st->in_body) {
            st->decoder.Feed(reinterpret_cast<const std::byte*>(msg.buf.data()), msg.buf.size());
            const std::size_t n = st->decoder.awaiting_body();
            st->in_body = true;
            st->adopting = n >= kAdoptBytes;
            // CAF reads the next bytes into msg.buf once this handler returns: for a big body, make that
            // a pool buffer of exactly the body's size (no resize, no zero-fill, no later copy).
            if (st->adopting) {
              auto buf = st->pool->Take(n);
              msg.buf.swap(*buf);
            }
            self->configure_read(hdl, caf::io::receive_policy::exactly(n));
          } else {
            if (st->adopting) {
              auto body = std::make_unique<std::vector<char>>();
              body->swap(msg.buf);
              st->decoder.AdoptBody(st->pool->Share(std::move(body)));
            } else {
              st->decoder.Feed(reinterpret_cast<const std::byte*>(msg.buf.data()), msg.buf.size());
            }
            st->in_body = false;
            self->configure_read(hdl, caf::io::receive_policy::exactly(kPrefixBytes));
          }
        } catch (const std::exception& e) {
          error = e.what();
        }
        // Frames decoded before a bad one are delivered: they were well formed.
        while (auto m = st->decoder.Next()) {
          if (hook && hook(*m)) continue;
          self->send(owner, recv_atom::value, caf::actor_cast<caf::actor>(self), std::move(*m));
        }
        if (!error.empty()) finish(error, true);
      },
      [self, hdl, st, write, finish](send_atom, const Message& m) {
        if (st->done) return;
        try {
          EncodeFrameTo(m, write);
        } catch (const std::exception& e) {
          // The sender checked the message (ValidateMessage), so this is out of memory or a bug. Part of the
          // frame may be written: the stream is unusable. Closing tells the owner, which fails the requests
          // waiting on this connection instead of leaving them hanging.
          return finish(std::string("a frame could not be encoded: ") + e.what(), true);
        }
        self->flush(hdl);
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
        self->fork(ConnectionBroker, msg.handle, owner, max_frame_bytes, FrameHook{});
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
                   std::size_t max_frame_bytes, int retry_ms, FrameHook hook) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(retry_ms);
  auto r = system.middleman().spawn_client(ConnectionBroker, host, port, owner, max_frame_bytes, hook);
  while (!r && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the peer may not listen yet
    r = system.middleman().spawn_client(ConnectionBroker, host, port, owner, max_frame_bytes, hook);
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
