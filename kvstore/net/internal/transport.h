// The transport of the distributed KVStore (issue 8, DESIGN.md §4): a process-wide CAF actor system with the
// io middleman, and one CAF broker per TCP connection that turns the byte stream into frames
// (kvstore/net/internal/frame_codec.h) and back. Internal to kvstore/ (it includes CAF).
//
// A connection broker belongs to an owner actor (a scheduler, server or worker node). It sends the owner
//   (recv_atom, caf::actor conn, net::Message)   for every decoded frame, in stream order, and
//   (closed_atom, caf::actor conn, std::string)   once, when the peer closed the connection, the stream
//                                                 ended inside a frame or a frame was refused (the
//                                                 broker logs the reason to stderr and closes the socket).
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
// Reading: the broker reads each frame's 8-byte prefix, then exactly its body. A body of 64 KiB or more is
// read into a buffer of its own (from a pool of the connection) that the decoded message then owns: no
// copy between the socket and the consumer (DESIGN.md §4).
// A broker quits (closing its socket) when its owner terminates, so nothing outlives a node.
//
// Thread-safety: Listen, Connect and Send may be called from any thread; everything else is actor messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "caf/all.hpp"
#include "caf/io/all.hpp"
#include "kvstore/net/internal/frame_codec.h"

namespace troupe::net {

// An encoded frame shared between the thread that encoded it and the broker that writes it.
using SharedBytes = std::shared_ptr<const std::vector<std::byte>>;

using close_atom = caf::atom_constant<caf::atom("tr_close")>;
using recv_atom = caf::atom_constant<caf::atom("tr_recv")>;
using closed_atom = caf::atom_constant<caf::atom("tr_closed")>;
using tick_atom = caf::atom_constant<caf::atom("tr_tick")>;

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

// Starts a listening broker on host:port (port 0 = ephemeral; SO_REUSEADDR set) whose accepted
// connections become connection brokers of `owner`. Returns the listener (stop it with an exit message
// or let it follow its owner) and the bound port. Throws troupe::Error naming host and port on failure.
struct Listener {
  caf::actor actor;
  std::uint16_t port = 0;
};
Listener Listen(caf::actor_system& system, const std::string& host, std::uint16_t port, const caf::actor& owner,
                std::size_t max_frame_bytes);

// Sees every decoded frame in the broker, before the owner; returns true when it consumed the frame (then
// the owner never gets it). A worker answers its requests here, on the broker's thread, saving a hop
// through its actor. Must not block.
using FrameHook = std::function<bool(Message&)>;

// Connects to host:port (blocking) and returns the connection broker, owned by `owner`. A refused
// connection is retried every 100 ms for up to `retry_ms` (nodes of a cluster start in any order). Throws
// troupe::Error naming the address on failure.
caf::actor Connect(caf::actor_system& system, const std::string& host, std::uint16_t port, const caf::actor& owner,
                   std::size_t max_frame_bytes, int retry_ms = 0, FrameHook hook = nullptr);

// "host:port" -> parts; throws troupe::Error for a malformed address.
std::pair<std::string, std::uint16_t> SplitHostPort(const std::string& address);

}  // namespace troupe::net

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::net::Message)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::net::SharedBytes)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::net::FrameHook)
