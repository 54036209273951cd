// The transport of the distributed KVStore: see kvstore/net/internal/transport.h.
#include "kvstore/net/internal/transport.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <future>
#include <map>
#include <deque>
#include <mutex>

#include <sys/socket.h>
#include <sys/uio.h>
#include <cerrno>

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

// Past this, a frame that the socket stops taking is handed to CAF a piece at a time: CAF writes the piece
// when the socket has room again and says so (data_transferred_msg), and the rest goes out directly then.
constexpr std::size_t kNudgeBytes = std::size_t{64} << 10;

// A frame waiting to be written: the pieces that view the message's tensors (kept alive and unchanged by
// `hold`'s owners: see transport.h) and copies of the rest (the prefix, Cap'n Proto's segment table and
// small segments, which live only while EncodeFrameTo runs).
struct OutFrame {
  OutFrame(const Message& m, FramePieces pieces);
  bool done() const { return next == pieces.size(); }
  std::size_t left() const;
  void Advance(std::size_t n);

  Message hold;
  std::vector<std::byte> copied;
  std::vector<std::span<const std::byte>> pieces;
  std::size_t next = 0;    // the first piece not wholly written
  std::size_t offset = 0;  // bytes of it written
};

// The tensor bytes of a message that an owner keeps alive (a borrowed view is copied instead).
std::vector<std::span<const std::byte>> OwnedTensorBytes(const Message& m) {
  std::vector<std::span<const std::byte>> out;
  auto add = [&out](const Blob& b) {
    if (b.owner != nullptr && b.size() > 0) out.push_back(b.bytes);
  };
  if (const auto* t = std::get_if<TensorMsg>(&m)) add(t->value.data);
  if (const auto* a = std::get_if<Ack>(&m); a != nullptr && a->value) add(a->value->data);
  return out;
}

OutFrame::OutFrame(const Message& m, FramePieces in) : hold(m) {
  const auto owned = OwnedTensorBytes(hold);
  auto viewed = [&owned](std::span<const std::byte> p) {
    return std::any_of(owned.begin(), owned.end(), [&p](std::span<const std::byte> o) {
      return p.data() >= o.data() && p.data() + p.size() <= o.data() + o.size();
    });
  };
  std::size_t copy_bytes = 0;
  for (const auto& p : in) copy_bytes += viewed(p) ? 0 : p.size();
  copied.reserve(copy_bytes);
  pieces.reserve(in.size());
  for (const auto& p : in) {
    if (p.empty()) continue;
    if (viewed(p)) {
      pieces.push_back(p);
    } else {
      copied.insert(copied.end(), p.begin(), p.end());  // no reallocation: reserved above
      pieces.emplace_back(copied.data() + copied.size() - p.size(), p.size());
    }
  }
}

std::size_t OutFrame::left() const {
  std::size_t n = 0;
  for (std::size_t i = next; i < pieces.size(); ++i) n += pieces[i].size();
  return n - offset;
}

void OutFrame::Advance(std::size_t n) {
  while (n > 0 && next < pieces.size()) {
    const std::size_t here = std::min(n, pieces[next].size() - offset);
    offset += here;
    n -= here;
    if (offset == pieces[next].size()) {
      ++next;
      offset = 0;
    }
  }
}

struct ConnState {
  explicit ConnState(std::size_t max_frame_bytes)
      : decoder(max_frame_bytes), pool(std::make_shared<BufferPool>()) {}
  FrameDecoder decoder;
  std::shared_ptr<BufferPool> pool;
  std::string peer;
  bool done = false;
  bool in_body = false;   // the next read is a body (else a prefix)
  bool adopting = false;  // that body is read into a pool buffer
  // Writing. Frames wait in `out` (oldest first) until written. `caf_pending`: bytes handed to CAF's write
  // buffer and not yet on the socket, as CAF last reported them (data_transferred_msg, delivered in the
  // same thread as it happens); while it is 0 CAF has nothing queued, so bytes may go to the socket
  // directly without changing the stream's order.
  std::deque<OutFrame> out;
  std::size_t caf_pending = 0;
  bool direct = true;  // false after a direct write failed (or when closing): CAF writes the rest
};

// Writes what it can of the waiting frames. While CAF has nothing queued, bytes go from the frames'
// memory to the socket in gathered non-blocking writes (tensor bytes are not copied in user space). When
// the socket is full, the next kNudgeBytes are copied into CAF's write buffer: CAF writes them once the
// socket drains and reports it, and that report calls Pump again. With direct writes off, CAF takes all.
void Pump(caf::io::broker* self, caf::io::connection_handle hdl, ConnState& st) {
  const int fd = static_cast<int>(hdl.id());
  while (!st.out.empty()) {
    OutFrame& f = st.out.front();
    while (st.caf_pending == 0 && st.direct && !f.done()) {
      iovec iov[16];
      msghdr mh{};
      mh.msg_iov = iov;
      for (std::size_t i = f.next; i < f.pieces.size() && mh.msg_iovlen < std::size(iov); ++i) {
        const std::size_t skip = i == f.next ? f.offset : 0;
        iov[mh.msg_iovlen].iov_base = const_cast<std::byte*>(f.pieces[i].data() + skip);
        iov[mh.msg_iovlen].iov_len = f.pieces[i].size() - skip;
        ++mh.msg_iovlen;
      }
      const ssize_t n = ::sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        f.Advance(static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      // EAGAIN: the socket is full. Any other error: CAF's write meets it too and closes the connection the
      // usual way (connection_closed_msg).
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) st.direct = false;
      break;
    }
    if (!f.done() && (st.caf_pending == 0 || !st.direct)) {
      std::size_t n = st.direct ? std::min(kNudgeBytes, f.left()) : f.left();
      st.caf_pending += n;
      while (n > 0) {
        const auto& p = f.pieces[f.next];
        const std::size_t here = std::min(n, p.size() - f.offset);
        self->write(hdl, here, p.data() + f.offset);
        f.Advance(here);
        n -= here;
      }
    }
    if (!f.done()) break;
    st.out.pop_front();
  }
  if (st.caf_pending > 0) self->flush(hdl);
}

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
  self->ack_writes(hdl, true);  // Pump needs to know when CAF's queue is empty
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
      [self, hdl, st, finish](send_atom, const Message& m) {
        if (st->done) return;
        try {
          EncodeFrameTo(m, [&](FramePieces pieces) { st->out.emplace_back(m, pieces); });
        } catch (const std::exception& e) {
          // The sender checked the message (ValidateMessage), so this is out of memory or a bug (nothing of
          // the frame was queued: the pieces arrive only once encoded). The request it carried
          // is lost, so closing tells the owner, which fails the requests waiting on this connection
          // instead of leaving them hanging.
          return finish(std::string("a frame could not be encoded: ") + e.what(), true);
        }
        Pump(self, hdl, *st);
      },
      [self, hdl, st](send_atom, const SharedBytes& bytes) {
        if (st->done) return;
        // Small (one frame encoded for many peers): copied with the frame's other small pieces.
        const std::span<const std::byte> piece(*bytes);
        st->out.emplace_back(Message{}, FramePieces(&piece, 1));
        Pump(self, hdl, *st);
      },
      [self, hdl, st](const caf::io::data_transferred_msg& msg) {
        st->caf_pending = msg.remaining;
        if (!st->done && st->caf_pending == 0) Pump(self, hdl, *st);
      },
      [self, hdl, st](close_atom) {
        if (st->done) return;
        st->direct = false;  // everything waiting goes to CAF, which writes it before closing
        Pump(self, hdl, *st);
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
