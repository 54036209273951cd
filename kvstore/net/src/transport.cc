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
#include <unordered_map>

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

// Mailed to a connection broker by Send: a frame to queue, and "write what is queued" after a sender's
// direct write left part of its frame.
using send_atom = caf::atom_constant<caf::atom("tr_send")>;
using pump_atom = caf::atom_constant<caf::atom("tr_pump")>;

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

// Calls f on each tensor payload's Blob of a message (a push's value, a reply's value).
template <class M, class F>
void ForEachTensorBlob(M& m, F&& f) {
  if (auto* t = std::get_if<TensorMsg>(&m)) f(t->value.data);
  if (auto* a = std::get_if<Ack>(&m); a != nullptr && a->value) f(a->value->data);
}

// The tensor bytes of a message that an owner keeps alive (a borrowed view is copied instead).
std::vector<std::span<const std::byte>> OwnedTensorBytes(const Message& m) {
  std::vector<std::span<const std::byte>> out;
  ForEachTensorBlob(m, [&out](const Blob& b) {
    if (b.owner != nullptr && b.size() > 0) out.push_back(b.bytes);
  });
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

// The write side of a connection, shared by its broker (on CAF's multiplexer thread) and senders on any
// thread (Send), under mu_. Frames are written in the order they were handed over:
//  - a sender writes its frame straight to the socket when nothing is waiting before it (no frame queued
//    here, none mailed to the broker and not yet queued, nothing in CAF's write buffer) — no thread hand-off;
//  - otherwise the frame is mailed to the broker, which queues it; the broker writes queued frames directly
//    while CAF has nothing queued, and 64 KiB at a time through CAF when the socket is full (CAF reports
//    when it drained: Transferred, and direct writes resume).
class Writer {
 public:
  enum class Now { kWritten, kStarted, kMailIt };

  // On a sender's thread. kWritten: the socket took the whole frame. kStarted: it took a part and the rest
  // is queued: mail the broker pump_atom. kMailIt: mail the frame to the broker (counted: from here on,
  // later frames wait behind it).
  Now TryNow(const Message& m, std::span<const std::byte> encoded) {
    std::lock_guard<std::mutex> lock(mu_);
    if (fd_ < 0 || closed_ || !direct_ || caf_pending_ != 0 || mailed_ != 0 || !out_.empty()) {
      ++mailed_;
      return Now::kMailIt;
    }
    try {
      Enqueue(m, encoded);
    } catch (const std::exception&) {
      // Out of memory (the sender checked the message): the broker tries again, and on failure closes the
      // connection the usual way, which fails the requests waiting on it.
      ++mailed_;
      return Now::kMailIt;
    }
    WriteDirect(out_.front());
    if (out_.front().done()) {
      out_.pop_front();
      return Now::kWritten;
    }
    return Now::kStarted;
  }

  // On the broker's thread.
  void Start(int fd) {
    std::lock_guard<std::mutex> lock(mu_);
    fd_ = fd;
  }
  // A mailed frame arrived (encoded beforehand when `encoded` is not empty).
  void Queue(caf::io::broker* self, caf::io::connection_handle hdl, const Message& m,
             std::span<const std::byte> encoded) {
    std::lock_guard<std::mutex> lock(mu_);
    if (mailed_ > 0) --mailed_;
    if (closed_) return;
    Enqueue(m, encoded);  // throws before queuing
    PumpLocked(self, hdl);
  }
  void Pump(caf::io::broker* self, caf::io::connection_handle hdl) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!closed_) PumpLocked(self, hdl);
  }
  // CAF wrote bytes of its buffer; `remaining` are still in it.
  void Transferred(caf::io::broker* self, caf::io::connection_handle hdl, std::size_t remaining) {
    std::lock_guard<std::mutex> lock(mu_);
    caf_pending_ = remaining;
    if (!closed_ && caf_pending_ == 0) PumpLocked(self, hdl);
  }
  // No more writes from here (the socket is about to close). With `flush`, what is queued goes to CAF's
  // buffer first, which CAF writes before closing.
  void Close(caf::io::broker* self, caf::io::connection_handle hdl, bool flush) {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    if (flush) {
      direct_ = false;
      PumpLocked(self, hdl);
    }
    closed_ = true;
    out_.clear();
  }

 private:
  // Appends the frame of m (or `encoded`, a frame encoded beforehand) to the queue; throws as EncodeFrameTo
  // does, before anything is queued.
  void Enqueue(const Message& m, std::span<const std::byte> encoded) {
    if (encoded.empty()) {
      EncodeFrameTo(m, [&](FramePieces pieces) { out_.emplace_back(m, pieces); });
    } else {
      out_.emplace_back(Message{}, FramePieces(&encoded, 1));
    }
  }

  // Writes what the socket takes of f, from f's memory; a failure other than a full socket turns direct
  // writes off (CAF's own write meets it too and closes the connection the usual way).
  void WriteDirect(OutFrame& f) {
    while (direct_ && !f.done()) {
      iovec iov[16];
      msghdr mh{};
      mh.msg_iov = iov;
      for (std::size_t i = f.next; i < f.pieces.size() && mh.msg_iovlen < std::size(iov); ++i) {
        const std::size_t skip = i == f.next ? f.offset : 0;
        iov[mh.msg_iovlen].iov_base = const_cast<std::byte*>(f.pieces[i].data() + skip);
        iov[mh.msg_iovlen].iov_len = f.pieces[i].size() - skip;
        ++mh.msg_iovlen;
      }
      const ssize_t n = ::sendmsg(fd_, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        f.Advance(static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) direct_ = false;
      return;
    }
  }

  // Writes what it can of the queued frames: directly while CAF has nothing queued; when the socket is
  // full, the next kNudgeBytes are copied into CAF's write buffer (CAF writes them once the socket drains
  // and reports it: Transferred). With direct writes off, CAF takes everything.
  void PumpLocked(caf::io::broker* self, caf::io::connection_handle hdl) {
    while (!out_.empty()) {
      OutFrame& f = out_.front();
      if (caf_pending_ == 0) WriteDirect(f);
      if (!f.done() && (caf_pending_ == 0 || !direct_)) {
        std::size_t n = direct_ ? std::min(kNudgeBytes, f.left()) : f.left();
        caf_pending_ += n;
        while (n > 0) {
          const auto& p = f.pieces[f.next];
          const std::size_t here = std::min(n, p.size() - f.offset);
          self->write(hdl, here, p.data() + f.offset);
          f.Advance(here);
          n -= here;
        }
      }
      if (!f.done()) break;
      out_.pop_front();
    }
    if (caf_pending_ > 0) self->flush(hdl);
  }

  std::mutex mu_;
  int fd_ = -1;          // the socket, once the broker started
  bool closed_ = false;  // the broker closes (or closed) the socket: nothing more may touch it
  bool direct_ = true;   // false after a direct write failed, or when closing
  std::size_t caf_pending_ = 0;  // bytes in CAF's write buffer, as CAF last reported (Transferred)
  std::size_t mailed_ = 0;       // frames mailed to the broker and not yet queued
  std::deque<OutFrame> out_;     // frames waiting (the first may be partly written)
};

// The writers of this process's live connections, by broker (Send finds them here).
std::mutex g_writers_mu;
std::unordered_map<caf::actor_id, std::weak_ptr<Writer>> g_writers;  // guarded by g_writers_mu

void RegisterWriter(const caf::actor& conn, const std::shared_ptr<Writer>& w) {
  std::lock_guard<std::mutex> lock(g_writers_mu);
  g_writers[conn.id()] = w;
}

std::shared_ptr<Writer> FindWriter(const caf::actor& conn) {
  std::lock_guard<std::mutex> lock(g_writers_mu);
  auto it = g_writers.find(conn.id());
  if (it == g_writers.end()) return nullptr;
  auto w = it->second.lock();
  if (w == nullptr) g_writers.erase(it);  // the broker is gone
  return w;
}

void ForgetWriter(caf::actor_id id, const Writer* w) {
  std::lock_guard<std::mutex> lock(g_writers_mu);
  auto it = g_writers.find(id);
  if (it != g_writers.end() && (it->second.expired() || it->second.lock().get() == w)) g_writers.erase(it);
}

struct ConnState {
  ConnState(std::size_t max_frame_bytes, std::shared_ptr<Writer> w)
      : decoder(max_frame_bytes), pool(std::make_shared<BufferPool>()), writer(std::move(w)) {}
  FrameDecoder decoder;
  std::shared_ptr<BufferPool> pool;
  std::shared_ptr<Writer> writer;
  std::string peer;
  bool done = false;
  bool in_body = false;   // the next read is a body (else a prefix)
  bool adopting = false;  // that body is read into a pool buffer
};

caf::behavior ConnectionBroker(caf::io::broker* self, caf::io::connection_handle hdl, caf::actor owner,
                               std::size_t max_frame_bytes, FrameHook hook, std::shared_ptr<Writer> writer) {
  auto st = std::make_shared<ConnState>(max_frame_bytes, std::move(writer));
  st->peer = self->remote_addr(hdl) + ":" + std::to_string(self->remote_port(hdl));
  // Small frames (barriers, small keys, acks) go out at once: a request/response protocol gains nothing
  // from Nagle's coalescing. The handle of a default-multiplexer connection is its socket.
  if (auto r = caf::io::network::tcp_nodelay(static_cast<caf::io::network::native_socket>(hdl.id()), true); !r) {
    std::fprintf(stderr, "troupe kvstore: cannot set TCP_NODELAY on the connection from %s\n", st->peer.c_str());
  }
  self->configure_read(hdl, caf::io::receive_policy::exactly(kPrefixBytes));
  self->ack_writes(hdl, true);  // the Writer needs to know when CAF's queue is empty
  st->writer->Start(static_cast<int>(hdl.id()));
  // However the broker ends, no sender touches the socket afterwards (CAF closes it in the broker's cleanup,
  // on this thread, after the attached functions ran).
  self->attach_functor([w = st->writer, id = self->id(), self, hdl] {
    w->Close(self, hdl, false);
    ForgetWriter(id, w.get());
  });
  self->monitor(owner);
  // The owner is gone: nobody reads this connection any more.
  self->set_down_handler([self, hdl, st](const caf::down_msg&) {
    st->writer->Close(self, hdl, false);
    self->quit();
  });
  auto finish = [self, hdl, owner, st](const std::string& why, bool log) {
    if (st->done) return;
    st->done = true;
    st->writer->Close(self, hdl, false);
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
          st->writer->Queue(self, hdl, m, {});
        } catch (const std::exception& e) {
          // The sender checked the message (ValidateMessage), so this is out of memory or a bug (nothing of
          // the frame was queued: the pieces arrive only once encoded). The request it carried is lost, so
          // closing tells the owner, which fails the requests waiting on this connection instead of leaving
          // them hanging.
          return finish(std::string("a frame could not be encoded: ") + e.what(), true);
        }
      },
      [self, hdl, st](send_atom, const SharedBytes& bytes) {
        if (st->done) return;
        st->writer->Queue(self, hdl, Message{}, std::span<const std::byte>(*bytes));
      },
      [self, hdl, st](pump_atom) {
        if (!st->done) st->writer->Pump(self, hdl);
      },
      [self, hdl, st](const caf::io::data_transferred_msg& msg) {
        if (!st->done) st->writer->Transferred(self, hdl, msg.remaining);
      },
      [self, hdl, st](close_atom) {
        if (st->done) return;
        st->writer->Close(self, hdl, true);  // what is queued goes to CAF, which writes it before closing
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
        auto writer = std::make_shared<Writer>();
        // Registered before anyone can know the connection (the owner learns of it from its first frame).
        RegisterWriter(self->fork(ConnectionBroker, msg.handle, owner, max_frame_bytes, FrameHook{}, writer), writer);
      },
  };
}

std::mutex g_system_mu;
std::weak_ptr<NetSystem> g_system;  // guarded by g_system_mu

}  // namespace

SharedBytes EncodeShared(const Message& message) {
  return std::make_shared<const std::vector<std::byte>>(EncodeFrame(message));
}

namespace {
void SendVia(const caf::actor& conn, const Message& m, const SharedBytes& bytes) {
  if (!conn) return;
  if (auto w = FindWriter(conn)) {
    std::span<const std::byte> encoded;
    if (bytes) encoded = *bytes;
    switch (w->TryNow(m, encoded)) {
      case Writer::Now::kWritten:
        return;
      case Writer::Now::kStarted:
        caf::anon_send(conn, pump_atom::value);
        return;
      case Writer::Now::kMailIt:
        break;
    }
  }
  // Not written here (or the connection is gone: the message is dropped with its broker).
  if (bytes) {
    caf::anon_send(conn, send_atom::value, bytes);
    return;
  }
  // The broker reads the message later: a borrowed view becomes a copy the message owns.
  Message mailed = m;
  ForEachTensorBlob(mailed, [](Blob& b) {
    if (b.owner == nullptr && b.size() > 0) b = Blob::Copy(b.bytes);
  });
  caf::anon_send(conn, send_atom::value, std::move(mailed));
}
}  // namespace

void Send(const caf::actor& conn, const Message& m) { SendVia(conn, m, nullptr); }
void Send(const caf::actor& conn, const SharedBytes& bytes) { SendVia(conn, Message{}, bytes); }

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
  auto writer = std::make_shared<Writer>();
  auto r = system.middleman().spawn_client(ConnectionBroker, host, port, owner, max_frame_bytes, hook, writer);
  while (!r && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the peer may not listen yet
    r = system.middleman().spawn_client(ConnectionBroker, host, port, owner, max_frame_bytes, hook, writer);
  }
  if (!r) {
    throw Error("kvstore: cannot connect to " + host + ":" + std::to_string(port) + ": " + system.render(r.error()));
  }
  RegisterWriter(*r, writer);  // before the caller can send to it
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
