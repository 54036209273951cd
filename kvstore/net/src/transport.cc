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
#include <atomic>
#include <mutex>
#include <optional>
#include <random>
#include <unordered_map>

#include <sys/socket.h>
#include <sys/uio.h>
#include <cerrno>

#include "base/error.h"
#include "kvstore/net/internal/auth.h"

namespace troupe::net {
namespace {

// Bodies at least this big are read into a buffer of their own and adopted by the decoder (no copy).
constexpr std::size_t kAdoptBytes = std::size_t{64} << 10;
constexpr std::size_t kPrefixBytes = 8;
// At a frame boundary a connection reads what is there up to this many bytes: a small frame comes in with
// its prefix in one system call (and several small frames in one), instead of the prefix, then the body.
// After a frame of kAdoptBytes or more the next prefix is read alone, so that a big body is still read
// whole into a buffer of its own (not copied) when big frames follow one another.
constexpr std::size_t kReadAheadBytes = 4096;
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
  if (auto* b = std::get_if<TensorBatch>(&m)) {
    for (auto& t : b->entries) f(t.value.data);
  }
  if (auto* b = std::get_if<ReplyBatch>(&m)) {
    for (auto& a : b->acks) {
      if (a.value) f(a.value->data);
    }
  }
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

  explicit Writer(bool accepted = false) : accepted_(accepted) {}

  // Frames handed to Send for this connection so far (fault injection counts them).
  std::uint64_t CountSent() { return ++sent_; }
  // This process accepted the connection (else it connected).
  bool accepted() const { return accepted_; }

  // On a sender's thread. kWritten: the socket took the whole frame. kStarted: it took a part and the rest
  // is queued: mail the broker pump_atom. kMailIt: mail the frame to the broker (counted: from here on,
  // later frames wait behind it).
  Now TryNow(const Message& m, std::span<const std::byte> encoded) {
    std::lock_guard<std::mutex> lock(mu_);
    if (fd_ < 0 || !open_ || closed_ || !direct_ || caf_pending_ != 0 || mailed_ != 0 || !out_.empty()) {
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
  // A mailed frame arrived (encoded beforehand when `encoded` is not empty); the broker holds the frames
  // mailed before the connection is open and queues them once it is.
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
  // A frame of the broker's own (authentication), written before the connection is open.
  void QueueOwn(caf::io::broker* self, caf::io::connection_handle hdl, const Message& m) {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    Enqueue(m, {});
    PumpLocked(self, hdl);
  }
  // The peer authenticated: senders may write directly from now on (before, a frame is mailed to the
  // broker, which refuses it: see sent_too_early).
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
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

  const bool accepted_ = false;
  std::atomic<std::uint64_t> sent_{0};
  std::mutex mu_;
  int fd_ = -1;          // the socket, once the broker started
  bool open_ = false;    // the peer authenticated: the owner's frames may go out
  bool closed_ = false;  // the broker closes (or closed) the socket: nothing more may touch it
  bool direct_ = true;   // false after a direct write failed, or when closing
  std::size_t caf_pending_ = 0;  // bytes in CAF's write buffer, as CAF last reported (Transferred)
  std::size_t mailed_ = 0;       // frames mailed to the broker and not yet queued
  std::deque<OutFrame> out_;     // frames waiting (the first may be partly written)
};

// ---- fault injection (FaultPlan in transport.h; docs/settings.md) ----

// A number in [min, max] from the environment, or nullopt when unset; throws troupe::Error when malformed.
std::optional<double> EnvDouble(const char* name, double min, double max) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (*end != '\0' || !(x >= min && x <= max)) {
    throw Error(std::string("kvstore: ") + name + "='" + v + "' must be a number in [" + std::to_string(min) + ", " +
                std::to_string(max) + "]");
  }
  return x;
}

FaultPlan ReadFaultPlan() {
  FaultPlan f;
  if (auto x = EnvDouble("TROUPE_FAULT_DROP", 0, 1)) f.drop = *x;
  if (auto x = EnvDouble("TROUPE_FAULT_DELAY_MS", 0, 60000)) f.delay_ms = static_cast<int>(*x);
  if (auto x = EnvDouble("TROUPE_FAULT_CLOSE_AFTER", 0, 1e15)) f.close_after = static_cast<std::uint64_t>(*x);
  if (auto x = EnvDouble("TROUPE_FAULT_SEED", 0, 1e15)) f.seed = static_cast<std::uint64_t>(*x);
  if (auto x = EnvDouble("TROUPE_FAULT_CLOSE_ACCEPTED", 0, 1)) f.close_accepted_only = *x != 0;
  return f;
}

std::once_flag g_faults_once;
FaultPlan g_faults;

// Logs an injected fault: the first few, then every 1000th (a test may inject thousands).
void LogFault(const std::string& line) {
  static std::atomic<std::uint64_t> count{0};
  const std::uint64_t n = ++count;
  if (n <= 5 || n % 1000 == 0) {
    std::fprintf(stderr, "troupe kvstore: fault injection: %s (%llu faults so far)\n", line.c_str(),
                 static_cast<unsigned long long>(n));
  }
}

bool IsTensorFrame(const Message& m) {
  return std::holds_alternative<TensorMsg>(m) || std::holds_alternative<TensorBatch>(m) ||
         std::holds_alternative<ReplyBatch>(m) || (std::holds_alternative<Ack>(m) && std::get<Ack>(m).value);
}

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

using auth_timeout_atom = caf::atom_constant<caf::atom("tr_authto")>;
using evict_atom = caf::atom_constant<caf::atom("tr_evict")>;
using linger_atom = caf::atom_constant<caf::atom("tr_linger")>;
using fault_close_atom = caf::atom_constant<caf::atom("tr_fclose")>;

// A connection closed with a refusal stays open this long (or until the peer closes) so that the peer
// reads the refusal: closing a socket with unread bytes in it resets the connection, and the reset can
// discard what the peer had not read yet.
constexpr auto kLingerTime = std::chrono::milliseconds(500);

// Log kinds of Admission::Log.
enum LogKind { kLogEvicted, kLogTimedOut, kLogAuthFailed, kLogRefused, kLogOther };

const char* KindOf(const Message& m) {
  static const char* kNames[] = {"hello", "tensor", "barrier", "heartbeat", "command", "ack", "error",
                                 "auth challenge", "auth proof", "tensor batch", "reply batch"};
  static_assert(std::size(kNames) == std::variant_size_v<Message>, "a name for every kind of Message");
  return kNames[m.index()];
}

struct ConnState {
  ConnState(const ConnOptions& o, bool connect, std::shared_ptr<Writer> w)
      : options(o),
        connect_side(connect),
        decoder(std::min(kPreAuthMaxFrameBytes, o.max_frame_bytes)),
        pool(std::make_shared<BufferPool>()),
        writer(std::move(w)) {}
  ConnOptions options;
  bool connect_side;  // this end connected (else it accepted)
  FrameDecoder decoder;
  std::shared_ptr<BufferPool> pool;
  std::shared_ptr<Writer> writer;
  std::string peer;
  bool done = false;
  bool lingering = false;   // closed, waiting for the peer to read the refusal (kLingerTime)
  bool in_body = false;     // the next read is (a chunk of) a body, else a prefix
  bool adopting = false;    // that body is read whole into a pool buffer
  bool body_big = false;    // that body has kAdoptBytes or more (the next prefix is read alone)
  std::size_t body_left = 0;     // bytes of the current body still to read (chunked reading)
  std::size_t body_reserved = 0;  // bytes of the current body counted in the admission's buffered bytes
  // Authentication (kvstore/net/internal/auth.h).
  bool authed = false;
  std::string own_nonce, peer_nonce;
};

caf::behavior ConnectionBroker(caf::io::broker* self, caf::io::connection_handle hdl, caf::actor owner,
                               ConnOptions options, bool connect_side, FrameHook hook, std::shared_ptr<Writer> writer) {
  auto st = std::make_shared<ConnState>(options, connect_side, std::move(writer));
  st->peer = self->remote_addr(hdl) + ":" + std::to_string(self->remote_port(hdl));
  // Small frames (barriers, small keys, acks) go out at once: a request/response protocol gains nothing
  // from Nagle's coalescing. The handle of a default-multiplexer connection is its socket.
  if (auto r = caf::io::network::tcp_nodelay(static_cast<caf::io::network::native_socket>(hdl.id()), true); !r) {
    std::fprintf(stderr, "troupe kvstore: cannot set TCP_NODELAY on the connection from %s\n", st->peer.c_str());
  }
  self->configure_read(hdl, caf::io::receive_policy::at_most(kReadAheadBytes));
  self->ack_writes(hdl, true);  // the Writer needs to know when CAF's queue is empty
  st->writer->Start(static_cast<int>(hdl.id()));
  // However the broker ends, no sender touches the socket afterwards (CAF closes it in the broker's cleanup,
  // on this thread, after the attached functions ran), and its admission forgets it.
  self->attach_functor([w = st->writer, id = self->id(), self, hdl, st] {
    w->Close(self, hdl, false);
    ForgetWriter(id, w.get());
    if (st->options.admission) {
      st->options.admission->Release(st->body_reserved);
      st->body_reserved = 0;
      st->options.admission->Closed(id, Admission::End::kOther);
    }
  });
  self->monitor(owner);
  // The owner is gone: nobody reads this connection any more.
  self->set_down_handler([self, hdl, st](const caf::down_msg&) {
    st->writer->Close(self, hdl, false);
    self->quit();
  });
  // Tells Connect how the authentication ended (once): "" when it succeeded, else why the connection ended.
  auto report_auth = [st](const std::string& why) {
    if (auto p = std::exchange(st->options.authenticated, nullptr)) p->set_value(why);
  };
  // Ends the connection; `end` counts it in the admission, `log` (a LogKind, or -1) prints `why`. With
  // `linger`, what is queued is written and the socket stays open until the peer closes or kLingerTime
  // passed (the owner learns of the end at once either way).
  auto finish = [self, hdl, owner, st, report_auth](const std::string& why, int log,
                                                    Admission::End end = Admission::End::kOther, bool linger = false) {
    if (st->done) return;
    st->done = true;
    report_auth(why.empty() ? std::string("the connection ended") : why);
    st->writer->Close(self, hdl, linger);
    const std::string line = "troupe kvstore: closing the connection from " + st->peer + ": " + why;
    if (log >= 0 && st->options.admission) {
      st->options.admission->Log(log, line);
    } else if (log >= 0) {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    if (st->options.admission) st->options.admission->Closed(self->id(), end);
    if (st->options.owner_backlog) st->options.owner_backlog->fetch_add(1, std::memory_order_acq_rel);
    self->send(owner, closed_atom::value, caf::actor_cast<caf::actor>(self), why);
    if (linger) {
      st->lingering = true;
      self->flush(hdl);
      self->delayed_send(self, kLingerTime, linger_atom::value);
      return;
    }
    self->close(hdl);
    self->quit();
  };
  // Refuses the peer with an error frame it can read (it has not authenticated: nothing else is sent),
  // then ends the connection as finish does.
  auto refuse = [self, hdl, st, finish](const std::string& why, int log, Admission::End end) {
    if (st->done) return;
    try {
      st->writer->QueueOwn(self, hdl, ErrorMsg{0, why, -1, Role::kScheduler});
    } catch (const std::exception&) {
    }
    finish(why, log, end, /*linger=*/true);
  };
  // The peer authenticated: its frames go to the owner, and the owner's frames may go out.
  auto open = [self, hdl, st, refuse, report_auth]() {
    if (st->options.admission && !st->options.admission->Authenticated(self->id())) {
      return refuse("the node holds its maximum of " + std::to_string(st->options.admission->limits().max_connections) +
                        " connections (TROUPE_KVSTORE_MAX_CONNECTIONS)",
                    kLogRefused, Admission::End::kOther);
    }
    st->authed = true;
    report_auth("");
    st->decoder.set_max_frame_bytes(st->options.max_frame_bytes);
    st->writer->Open();
  };
  // No owner can send before authentication (Connect returns after it, and an accepting owner learns of a
  // connection from its first frame, which comes after it): a frame that does is a bug, and ends the
  // connection rather than break the protocol.
  auto sent_too_early = [finish]() {
    finish("the owner sent a frame before the connection authenticated (a bug)", kLogOther);
  };
  // A frame before authentication; false when the connection ended.
  auto on_auth_frame = [st, self, hdl, finish, refuse, open](const Message& m) -> bool {
    if (const auto* c = std::get_if<AuthChallenge>(&m)) {
      if (!st->peer_nonce.empty()) {
        refuse("a second authentication challenge", kLogAuthFailed, Admission::End::kAuthFailed);
        return false;
      }
      st->peer_nonce = c->nonce;
      st->writer->QueueOwn(self, hdl, AuthProof{AuthProofFor(st->options.token, st->connect_side, st->peer_nonce,
                                                             st->own_nonce)});
      return true;
    }
    if (const auto* p = std::get_if<AuthProof>(&m)) {
      if (st->peer_nonce.empty()) {
        refuse("an authentication proof before the challenge", kLogAuthFailed, Admission::End::kAuthFailed);
        return false;
      }
      if (!VerifyAuthProof(st->options.token, st->connect_side, st->own_nonce, st->peer_nonce, p->mac)) {
        refuse("authentication failed: wrong cluster token (the peer at " + st->peer +
                   " does not hold this node's TROUPE_CLUSTER_TOKEN; every node of a cluster needs the same one)",
               kLogAuthFailed, Admission::End::kAuthFailed);
        return false;
      }
      open();
      return !st->done;
    }
    if (const auto* e = std::get_if<ErrorMsg>(&m)) {
      finish("refused by the peer: " + e->message, kLogAuthFailed, Admission::End::kAuthFailed);
      return false;
    }
    refuse(std::string("a ") + KindOf(m) + " frame before authenticating", kLogAuthFailed, Admission::End::kAuthFailed);
    return false;
  };
  // Authentication starts at once: both sides send a challenge, and the peer has hello_timeout_ms.
  st->own_nonce = RandomBytes(kAuthNonceBytes);
  st->writer->QueueOwn(self, hdl, AuthChallenge{st->own_nonce});
  self->delayed_send(self, std::chrono::milliseconds(std::max(1, st->options.hello_timeout_ms)), auth_timeout_atom::value);
  return {
      [self, hdl, owner, st, finish, hook, on_auth_frame](caf::io::new_data_msg& msg) {
        if (st->done) return;
        std::string error;
        int error_log = kLogOther;
        // Hands the decoded frames on; false when the connection ended meanwhile (a refused auth frame).
        auto deliver = [&]() {
          while (auto m = st->decoder.Next()) {
            if (!st->authed) {
              if (!on_auth_frame(*m)) return false;
              continue;
            }
            const caf::actor conn = caf::actor_cast<caf::actor>(self);
            if (hook && hook(conn, *m)) continue;
            if (st->options.owner_backlog) st->options.owner_backlog->fetch_add(1, std::memory_order_acq_rel);
            self->send(owner, recv_atom::value, conn, std::move(*m));
          }
          return !st->done;
        };
        // A frame's prefix is in: its body counts in the admission's buffered bytes until it is whole.
        auto reserve = [&](std::size_t n) {
          if (!st->options.admission) return;
          if (!st->options.admission->Reserve(n)) {
            error_log = kLogRefused;
            throw Error("a frame of " + std::to_string(n) + " bytes would take the node over its cap of " +
                        std::to_string(st->options.admission->limits().max_buffered_bytes) +
                        " bytes of frames being received (TROUPE_KVSTORE_MAX_BUFFERED_BYTES)");
          }
          st->body_reserved = n;
        };
        auto release = [&] {
          if (st->options.admission) st->options.admission->Release(st->body_reserved);
          st->body_reserved = 0;
        };
        // The next read at a frame boundary: ahead, unless the last frame was big (kReadAheadBytes).
        auto read_next_prefix = [&](bool after_big) {
          self->configure_read(hdl, after_big ? caf::io::receive_policy::exactly(kPrefixBytes)
                                              : caf::io::receive_policy::at_most(kReadAheadBytes));
        };
        try {
          if (!st->in_body) {
            // Up to kReadAheadBytes (or exactly a prefix after a big frame): whole frames are handed on as
            // each ends, before the next prefix is fed (it may meet the limits the previous frame changed).
            const auto* p = reinterpret_cast<const std::byte*>(msg.buf.data());
            std::size_t left = msg.buf.size();
            while (left > 0) {
              if (const std::size_t need = st->decoder.prefix_missing(); need > 0) {
                const std::size_t take = std::min(need, left);
                st->decoder.Feed(p, take);
                p += take;
                left -= take;
                if (st->decoder.prefix_missing() == 0) reserve(st->decoder.awaiting_body());
                continue;
              }
              const std::size_t missing = st->decoder.body_missing();
              const std::size_t take = std::min(missing, left);
              st->decoder.Feed(p, take);
              p += take;
              left -= take;
              if (take == missing) {
                release();
                if (!deliver()) return;
              }
            }
            const std::size_t missing = st->decoder.body_missing();
            if (missing > 0) {
              // A body still to come (its prefix ended this read, or its start is in already): read exactly.
              const std::size_t n = st->decoder.awaiting_body();  // the whole body, when none of it is in
              st->in_body = true;
              st->body_left = missing;
              st->body_big = missing >= kAdoptBytes;
              st->adopting = n >= kAdoptBytes && n <= kBodyChunkBytes;
              // CAF reads the next bytes into msg.buf once this handler returns: for a big body, make that
              // a pool buffer of exactly the body's size (no resize, no later copy).
              if (st->adopting) {
                auto buf = st->pool->Take(n);
                msg.buf.swap(*buf);
              }
              self->configure_read(hdl, caf::io::receive_policy::exactly(std::min(missing, kBodyChunkBytes)));
            } else {
              read_next_prefix(false);
            }
          } else {
            if (st->adopting) {
              auto body = std::make_unique<std::vector<char>>();
              body->swap(msg.buf);
              st->body_left = 0;
              st->decoder.AdoptBody(st->pool->Share(std::move(body)));
            } else {
              st->decoder.Feed(reinterpret_cast<const std::byte*>(msg.buf.data()), msg.buf.size());
              st->body_left -= std::min(st->body_left, msg.buf.size());
            }
            if (st->body_left > 0) {
              self->configure_read(hdl, caf::io::receive_policy::exactly(std::min(st->body_left, kBodyChunkBytes)));
            } else {
              st->in_body = false;
              release();
              read_next_prefix(st->body_big);
            }
          }
        } catch (const std::exception& e) {
          error = e.what();
        }
        // Frames decoded before a bad one are delivered: they were well formed.
        if (!deliver()) return;
        if (!error.empty()) {
          finish(error, st->authed ? error_log : kLogAuthFailed,
                 st->authed ? Admission::End::kOther : Admission::End::kAuthFailed);
        }
      },
      [self, hdl, st, finish, sent_too_early](send_atom, const Message& m) {
        if (st->done) return;
        if (!st->authed) return sent_too_early();
        try {
          st->writer->Queue(self, hdl, m, {});
        } catch (const std::exception& e) {
          // The sender checked the message (ValidateMessage), so this is out of memory or a bug (nothing of
          // the frame was queued: the pieces arrive only once encoded). The request it carried is lost, so
          // closing tells the owner, which fails the requests waiting on this connection instead of leaving
          // them hanging.
          return finish(std::string("a frame could not be encoded: ") + e.what(), kLogOther);
        }
      },
      [self, hdl, st, sent_too_early](send_atom, const SharedBytes& bytes) {
        if (st->done) return;
        if (!st->authed) return sent_too_early();
        st->writer->Queue(self, hdl, Message{}, std::span<const std::byte>(*bytes));
      },
      [self, hdl, st](pump_atom) {
        if (!st->done) st->writer->Pump(self, hdl);
      },
      [self, hdl, st](const caf::io::data_transferred_msg& msg) {
        if (!st->done) st->writer->Transferred(self, hdl, msg.remaining);
      },
      [st, finish](auth_timeout_atom) {
        if (st->done || st->authed) return;
        finish("did not authenticate within " + std::to_string(st->options.hello_timeout_ms) +
                   " ms (TROUPE_HELLO_TIMEOUT_MS)",
               kLogTimedOut, Admission::End::kTimedOut);
      },
      [st, finish](evict_atom) {
        if (st->done || st->authed) return;
        finish("closed to make room: more than " + std::to_string(st->options.admission->limits().max_pending) +
                   " connections were waiting to authenticate (TROUPE_KVSTORE_MAX_PENDING)",
               kLogEvicted, Admission::End::kEvicted);
      },
      [self, hdl, st](close_atom) {
        if (st->done) return;
        // What is queued goes to CAF, which writes it before closing; the socket stays open until the peer
        // closes it or kLingerTime passed, so that the peer reads the last frames (a refusal) before the
        // end (unless the owner ends first: then the broker quits at once).
        st->writer->Close(self, hdl, true);
        st->done = true;
        st->lingering = true;
        self->flush(hdl);
        self->delayed_send(self, kLingerTime, linger_atom::value);
      },
      [st, finish](fault_close_atom) {
        if (!st->done) {
          finish("fault injection: closed after " + std::to_string(Faults().close_after) +
                     " frames (TROUPE_FAULT_CLOSE_AFTER)",
                 kLogOther);
        }
      },
      [self, hdl](linger_atom) {
        self->close(hdl);
        self->quit();
      },
      [self, hdl, st, finish](const caf::io::connection_closed_msg&) {
        if (st->lingering) {
          self->close(hdl);
          self->quit();
          return;
        }
        std::string why = "the peer closed the connection";
        try {
          st->decoder.Finish();
        } catch (const std::exception& e) {
          why = e.what();
        }
        if (!st->authed) why += " before authenticating";
        finish(why, -1, st->authed ? Admission::End::kOther : Admission::End::kAuthFailed);
      },
  };
}

struct ListenArgs {
  std::string host;
  std::uint16_t port = 0;
  ConnOptions options;
  FrameHook hook;  // of every accepted connection
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
  const ConnOptions options = args->options;
  return {
      [self, owner, options, hook = args->hook](const caf::io::new_connection_msg& msg) {
        auto writer = std::make_shared<Writer>(/*accepted=*/true);
        // Registered before anyone can know the connection (the owner learns of it from its first frame).
        caf::actor conn = self->fork(ConnectionBroker, msg.handle, owner, options, false, hook, writer);
        RegisterWriter(conn, writer);
        if (caf::actor oldest = options.admission->Accepted(conn)) self->send(oldest, evict_atom::value);
      },
  };
}

std::mutex g_system_mu;
std::weak_ptr<NetSystem> g_system;  // guarded by g_system_mu

}  // namespace

Admission::Admission(AdmissionLimits limits, std::string node) : limits_(limits), node_(std::move(node)) {}

AdmissionStats Admission::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  AdmissionStats s = stats_;
  s.pending = pending_.size();
  s.authenticated = authenticated_;
  s.buffered_bytes = buffered_.load();
  s.peak_buffered_bytes = peak_buffered_.load();
  return s;
}

caf::actor Admission::Accepted(const caf::actor& conn) {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.accepted;
  pending_.push_back(conn);
  if (pending_.size() <= std::max<std::size_t>(limits_.max_pending, 1)) return nullptr;
  caf::actor oldest = pending_.front();
  pending_.erase(pending_.begin());
  return oldest;
}

void Admission::ForgetPending(caf::actor_id conn) {
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [conn](const caf::actor& a) { return a.id() == conn; }),
                 pending_.end());
}

bool Admission::Authenticated(caf::actor_id conn) {
  std::lock_guard<std::mutex> lock(mu_);
  ForgetPending(conn);
  if (authenticated_ >= limits_.max_connections) {
    ++stats_.refused;
    return false;
  }
  ++authenticated_;
  authed_.insert(conn);
  return true;
}

void Admission::Closed(caf::actor_id conn, End why) {
  std::lock_guard<std::mutex> lock(mu_);
  ForgetPending(conn);
  if (authed_.erase(conn) != 0) --authenticated_;
  switch (why) {
    case End::kTimedOut: ++stats_.timed_out; break;
    case End::kAuthFailed: ++stats_.auth_failed; break;
    case End::kEvicted: ++stats_.evicted; break;
    case End::kOther: break;
  }
}

// Every received frame passes here: lock-free (the count and its peak are atomics).
bool Admission::Reserve(std::size_t bytes) {
  std::size_t now = buffered_.load(std::memory_order_relaxed);
  do {
    if (now + bytes > limits_.max_buffered_bytes) {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.refused;
      return false;
    }
  } while (!buffered_.compare_exchange_weak(now, now + bytes, std::memory_order_relaxed));
  std::size_t peak = peak_buffered_.load(std::memory_order_relaxed);
  while (now + bytes > peak && !peak_buffered_.compare_exchange_weak(peak, now + bytes, std::memory_order_relaxed)) {
  }
  return true;
}

void Admission::Release(std::size_t bytes) { buffered_.fetch_sub(bytes, std::memory_order_relaxed); }

void Admission::Log(int kind, const std::string& line) {
  std::uint64_t held = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    LogState& l = log_[kind];
    const auto now = std::chrono::steady_clock::now();
    if (l.last != std::chrono::steady_clock::time_point{} && now - l.last < std::chrono::seconds(1)) {
      ++l.held;
      return;
    }
    l.last = now;
    held = std::exchange(l.held, 0);
  }
  if (held > 0) {
    std::fprintf(stderr, "%s (and %llu more like it in the last second)\n", line.c_str(),
                 static_cast<unsigned long long>(held));
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

SharedBytes EncodeShared(const Message& message) {
  return std::make_shared<const std::vector<std::byte>>(EncodeFrame(message));
}

namespace {
// Applies the fault plan to a frame about to be sent on `w`'s connection: false when it is not to be sent
// (dropped, or the connection is being closed).
bool InjectFaults(const caf::actor& conn, Writer& w, const Message& m) {
  const FaultPlan& f = Faults();
  const std::uint64_t n = w.CountSent();
  if (f.close_after > 0 && n >= f.close_after && (!f.close_accepted_only || w.accepted())) {
    if (n == f.close_after) {
      LogFault("closing a connection after " + std::to_string(n) + " frames");
      caf::anon_send(conn, fault_close_atom::value);
    }
    return false;
  }
  if (f.drop > 0 && IsTensorFrame(m)) {
    static std::mutex mu;
    static std::mt19937_64 rng(f.seed);
    bool drop = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      drop = std::uniform_real_distribution<double>(0, 1)(rng) < f.drop;
    }
    if (drop) {
      LogFault("dropped a tensor frame");
      return false;
    }
  }
  if (f.delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(f.delay_ms));
  return true;
}

void SendVia(const caf::actor& conn, const Message& m, const SharedBytes& bytes) {
  if (!conn) return;
  if (auto w = FindWriter(conn)) {
    if (Faults().any() && !InjectFaults(conn, *w, m)) return;
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

FaultPlan ParseFaultPlan() { return ReadFaultPlan(); }

const FaultPlan& Faults() {
  std::call_once(g_faults_once, [] {
    try {
      g_faults = ParseFaultPlan();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "troupe kvstore: %s; fault injection stays off\n", e.what());
    }
    if (g_faults.any()) {
      std::fprintf(stderr,
                   "troupe kvstore: fault injection on: drop %g of tensor frames, delay %d ms, close after %llu "
                   "frames (seed %llu)\n",
                   g_faults.drop, g_faults.delay_ms, static_cast<unsigned long long>(g_faults.close_after),
                   static_cast<unsigned long long>(g_faults.seed));
    }
  });
  return g_faults;
}

std::shared_ptr<NetSystem> NetSystem::Acquire() {
  ParseFaultPlan();  // a malformed setting is an error where the first node starts
  std::lock_guard<std::mutex> lock(g_system_mu);
  if (auto s = g_system.lock()) return s;
  std::shared_ptr<NetSystem> s(new NetSystem());
  g_system = s;
  return s;
}

Listener Listen(caf::actor_system& system, const std::string& host, std::uint16_t port, const caf::actor& owner,
                const ConnOptions& options, FrameHook hook) {
  auto args = std::make_shared<ListenArgs>();
  args->hook = std::move(hook);
  args->host = host;
  args->port = port;
  args->options = options;
  if (!args->options.admission) {
    args->options.admission = std::make_shared<Admission>(AdmissionLimits{}, host + ":" + std::to_string(port));
  }
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
                   const ConnOptions& options, int retry_ms, FrameHook hook) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(retry_ms);
  ConnOptions outgoing = options;
  outgoing.admission = nullptr;  // caps are a listening node's
  outgoing.authenticated = std::make_shared<std::promise<std::string>>();
  auto authenticated = outgoing.authenticated->get_future();
  auto writer = std::make_shared<Writer>();
  auto r = system.middleman().spawn_client(ConnectionBroker, host, port, owner, outgoing, true, hook, writer);
  while (!r && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the peer may not listen yet
    r = system.middleman().spawn_client(ConnectionBroker, host, port, owner, outgoing, true, hook, writer);
  }
  if (!r) {
    throw Error("kvstore: cannot connect to " + host + ":" + std::to_string(port) + ": " + system.render(r.error()));
  }
  RegisterWriter(*r, writer);  // before the caller can send to it
  const std::string where = host + ":" + std::to_string(port);
  // The broker ends the connection itself after the hello timeout; the margin covers a busy machine.
  if (authenticated.wait_for(std::chrono::milliseconds(options.hello_timeout_ms + 5000)) != std::future_status::ready) {
    caf::anon_send_exit(*r, caf::exit_reason::user_shutdown);
    throw Error("kvstore: cannot connect to " + where + ": it did not authenticate within " +
                std::to_string(options.hello_timeout_ms) + " ms");
  }
  if (const std::string why = authenticated.get(); !why.empty()) {
    throw Error("kvstore: cannot connect to " + where + ": " + why);
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
