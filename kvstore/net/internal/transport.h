// The transport of the distributed KVStore (DESIGN.md §4): a process-wide CAF actor system with the
// io middleman, and one CAF broker per TCP connection that turns the byte stream into frames
// (kvstore/net/internal/frame_codec.h) and back. Internal to kvstore/ (it includes CAF).
//
// A connection broker belongs to an owner actor (a scheduler, server or worker node). It sends the owner
//   (recv_atom, caf::actor conn, net::Message)   for every decoded frame its FrameHook (if any) did not
//                                                 take, in stream order, and
//   (closed_atom, caf::actor conn, std::string)   once, when the peer closed the connection, the stream
//                                                 ended inside a frame, a frame was refused or the peer
//                                                 failed to authenticate (the broker logs the reason to
//                                                 stderr and closes the socket).
// and takes from it
//   frames, through Send (from any thread): written in the order they were handed over, straight from the
//                             sender's memory to the socket on the sender's thread when nothing waits
//                             before them (no hand-off to the broker: a small frame costs one system call),
//                             else queued in the broker, which writes them directly while CAF has nothing
//                             queued and 64 KiB at a time through CAF's write buffer when the socket is
//                             full (CAF reports when it drained, and direct writes resume). Tensor bytes are
//                             not copied in user space, so a tensor whose Blob has an owner may be read
//                             after Send returned, until the socket took it: the owner keeps it valid, and
//                             the sender must not change it until the answer arrives (the worker: its
//                             engine function holds the array) or while the owner is shared (the server:
//                             copy-on-write of stored values). A Blob without an owner is copied before
//                             Send returns.
//   (close_atom)              flush what is queued, close, quit.
// Admission (DESIGN.md §4: a peer is a stranger until it authenticates): before anything else both sides
// authenticate (kvstore/net/internal/auth.h). Until the peer's proof checked out, the broker reads frames of
// at most kPreAuthMaxFrameBytes, takes nothing but the authentication frames (and an error frame, which
// ends the connection) and delivers nothing to its owner (whose frames can only follow it); a peer that has
// not authenticated within ConnOptions::hello_timeout_ms is closed. A listening node's Admission caps its
// unauthenticated connections (the oldest is closed to make room for a new one, so a flood of idle
// connections cannot keep a real node out), its authenticated ones, and the bytes of frames it is
// receiving at once; each refusal is logged (at most one line a second per kind).
// Reading: the broker reads each frame's 8-byte prefix, then its body. A body of 64 KiB up to
// kBodyChunkBytes is read into a buffer of its own (from a pool of the connection) that the decoded
// message then owns: no copy between the socket and the consumer (DESIGN.md §4). A bigger body is read
// kBodyChunkBytes at a time into the decoder's buffer, whose pages are touched only as the bytes arrive:
// no announced length is allocated and zero-filled up front beyond one chunk.
// A broker quits (closing its socket) when its owner terminates, so nothing outlives a node.
//
// Thread-safety: Listen, Connect and Send may be called from any thread; everything else is actor messages.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "caf/all.hpp"
#include "caf/io/all.hpp"
#include "kvstore/net/internal/frame_codec.h"

namespace troupe::net {

// An encoded frame shared between the thread that encoded it and the broker that writes it.
using SharedBytes = std::shared_ptr<const std::vector<std::byte>>;

// The largest frame read from a peer that has not authenticated yet.
inline constexpr std::size_t kPreAuthMaxFrameBytes = 4096;
// Bodies bigger than this are read a chunk at a time (see above).
inline constexpr std::size_t kBodyChunkBytes = std::size_t{16} << 20;

// A listening node's caps on what its peers may hold (DistConfig's settings of the same names).
struct AdmissionLimits {
  std::size_t max_pending = 128;       // unauthenticated connections at once; a new one closes the oldest
  std::size_t max_connections = 1024;  // authenticated connections at once; more are refused
  std::size_t max_buffered_bytes = std::size_t{4} << 30;  // announced bytes of the frames being received
};

// The counters of an Admission (tests, diagnostics).
struct AdmissionStats {
  std::size_t pending = 0, authenticated = 0;  // connections now
  std::uint64_t accepted = 0;                  // connections accepted in all
  std::uint64_t evicted = 0;                   // unauthenticated ones closed to make room
  std::uint64_t timed_out = 0;                 // closed for not authenticating in time
  std::uint64_t auth_failed = 0;               // closed for a wrong proof (or a frame out of turn)
  std::uint64_t refused = 0;                   // refused by max_connections or max_buffered_bytes
  std::size_t buffered_bytes = 0, peak_buffered_bytes = 0;
};

// The connections of one listening node and its caps. Thread-safe.
class Admission {
 public:
  Admission(AdmissionLimits limits, std::string node);
  const AdmissionLimits& limits() const { return limits_; }
  const std::string& node() const { return node_; }
  AdmissionStats Stats() const;

  // A connection was accepted; returns the oldest unauthenticated connection to close when there are now
  // more than max_pending (else null).
  caf::actor Accepted(const caf::actor& conn);
  // The connection authenticated: false (and it is refused) when max_connections are already held.
  bool Authenticated(caf::actor_id conn);
  // The connection ended; `why` counts it (kTimedOut, kAuthFailed, kEvicted or kOther).
  enum class End { kOther, kTimedOut, kAuthFailed, kEvicted };
  void Closed(caf::actor_id conn, End why);
  // A frame of `bytes` starts arriving: false when it would take the buffered bytes over the cap.
  bool Reserve(std::size_t bytes);
  void Release(std::size_t bytes);
  // Logs a refusal to stderr, at most one line a second per `kind` (the lines held back are counted).
  void Log(int kind, const std::string& line);

 private:
  void ForgetPending(caf::actor_id conn);  // under mu_

  const AdmissionLimits limits_;
  const std::string node_;
  mutable std::mutex mu_;
  std::vector<caf::actor> pending_;  // in arrival order
  std::size_t authenticated_ = 0;
  std::set<caf::actor_id> authed_;
  AdmissionStats stats_;  // but for the buffered bytes:
  std::atomic<std::size_t> buffered_{0}, peak_buffered_{0};
  struct LogState {
    std::chrono::steady_clock::time_point last{};
    std::uint64_t held = 0;
  };
  std::map<int, LogState> log_;
};

// How a connection authenticates and what it may read.
struct ConnOptions {
  std::size_t max_frame_bytes = kDefaultMaxFrameBytes;  // after authentication
  std::string token;                                    // the cluster token; empty = insecure mode
  int hello_timeout_ms = 5000;                          // to authenticate
  std::shared_ptr<Admission> admission;                 // a listening node's; null for outgoing connections
  // Outgoing connections (set by Connect): "" once the peer authenticated, else why the connection ended.
  std::shared_ptr<std::promise<std::string>> authenticated;
  // When set, counts the messages (recv_atom, closed_atom) the broker mailed its owner: the broker adds one
  // before each, the owner takes one after handling it. A FrameHook that acts for the owner on the broker's
  // thread may take a frame only while it is zero, so that frames and closes reach the owner in order.
  std::shared_ptr<std::atomic<std::int64_t>> owner_backlog;
};

using close_atom = caf::atom_constant<caf::atom("tr_close")>;
using recv_atom = caf::atom_constant<caf::atom("tr_recv")>;
using closed_atom = caf::atom_constant<caf::atom("tr_closed")>;
using tick_atom = caf::atom_constant<caf::atom("tr_tick")>;

// Fault injection built into the transport (as ps-lite's PS_DROP_MSG), for tests of the failure paths;
// read once per process from the environment (docs/settings.md). Applied to the frames a process sends
// through Send after authentication, per connection:
//   TROUPE_FAULT_DROP=P          drop a fraction P (0..1) of the tensor frames (init, push, pull and the
//                                answers that carry values): their requests are never answered
//   TROUPE_FAULT_DELAY_MS=D      delay every frame by D ms on the sending thread (a slow link)
//   TROUPE_FAULT_CLOSE_AFTER=N   close each connection once it has carried N frames (both sides see it close)
//   TROUPE_FAULT_CLOSE_ACCEPTED=1  only the connections this process accepted (a server's from workers, not
//                                its own to the scheduler)
//   TROUPE_FAULT_SEED=S          the seed of the drops (default 1)
// A malformed value is an error when the first node starts (NetSystem::Acquire). Every injected fault is
// logged (the first few, then every 1000th).
struct FaultPlan {
  double drop = 0;
  int delay_ms = 0;
  std::uint64_t close_after = 0;
  std::uint64_t seed = 1;
  bool close_accepted_only = false;
  bool any() const { return drop > 0 || delay_ms > 0 || close_after > 0; }
};
// Throws troupe::Error naming a malformed variable.
FaultPlan ParseFaultPlan();
const FaultPlan& Faults();

// EncodeFrame into a shared buffer (throws troupe::Error as EncodeFrame does).
SharedBytes EncodeShared(const Message& message);

// Hands a frame to the connection broker `conn` (see above). The message was checked (ValidateMessage).
// A connection that is gone drops it (its owner learns of the close from closed_atom).
void Send(const caf::actor& conn, const Message& message);
// One frame encoded beforehand (EncodeShared; e.g. one for many peers).
void Send(const caf::actor& conn, const SharedBytes& frame);

// The actor system of the distributed KVStore in this process: created by the first node, destroyed
// (after every actor in it has quit) when the last node releases it. Separate from the engine's Runtime
// so that the engine needs no io module and a node's brokers never wait behind engine work.
class NetSystem {
 public:
  static std::shared_ptr<NetSystem> Acquire();
  ~NetSystem();
  NetSystem(const NetSystem&) = delete;
  NetSystem& operator=(const NetSystem&) = delete;

  caf::actor_system& system() { return *system_; }

 private:
  NetSystem();
  std::unique_ptr<caf::actor_system_config> config_;
  std::unique_ptr<caf::actor_system> system_;
};

// Sees every decoded frame of connection `conn` in its broker, before the owner; returns true when it
// consumed the frame (then the owner never gets it). Saves a hop through the owner's actor: a worker answers
// its requests here, a server handles small frames here when its actor is idle. It runs on the thread that
// reads the sockets: whatever it does keeps every connection of the process waiting.
using FrameHook = std::function<bool(const caf::actor& conn, Message&)>;

// Starts a listening broker on host:port (port 0 = ephemeral; SO_REUSEADDR set) whose accepted
// connections become connection brokers of `owner` (with options.admission, or a new one of default caps),
// each with `hook` when one is given.
// Returns the listener (stop it with an exit message or let it follow its owner) and the bound port.
// Throws troupe::Error naming host and port on failure.
struct Listener {
  caf::actor actor;
  std::uint16_t port = 0;
};
Listener Listen(caf::actor_system& system, const std::string& host, std::uint16_t port, const caf::actor& owner,
                const ConnOptions& options, FrameHook hook = nullptr);

// Connects to host:port (blocking) and returns the connection broker, owned by `owner`. A refused
// connection is retried every 100 ms for up to `retry_ms` (nodes of a cluster start in any order). Throws
// troupe::Error naming the address on failure.
// Returns once the connection has authenticated both ways; throws troupe::Error naming the address and the
// reason when the peer refused it (another token) or did not authenticate within options.hello_timeout_ms.
caf::actor Connect(caf::actor_system& system, const std::string& host, std::uint16_t port, const caf::actor& owner,
                   const ConnOptions& options, int retry_ms = 0, FrameHook hook = nullptr);

// "host:port" -> parts; throws troupe::Error for a malformed address.
std::pair<std::string, std::uint16_t> SplitHostPort(const std::string& address);

}  // namespace troupe::net

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::net::Message)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::net::SharedBytes)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::net::FrameHook)
