// The link between a worker's KVStore (kvstore/src/dist_worker.cc, the face) and the cluster: the worker's
// actor, which owns the connections to the scheduler and to every server, and the table of requests in
// flight, which the engine functions, the actor and the connections' brokers share
// (kvstore/src/dist_worker_actor.cc). Free of CAF: the face talks to the cluster only through this.
//
// Every request is answered exactly once (ReplyFn): with the server's answer, or with an error when a node
// died, the job failed, or nothing came within the progress timeout. A server that checkpoints by itself
// (it says so when the link connects) is restartable: what is sent to it is kept until it has checkpointed
// it, its death suspends the requests in flight (up to DistConfig::reconnect_timeout_ms), and on its
// return the link resends what it lacks, in order (kvstore/dist.h).
//
// Thread-safety: every member is thread-safe. Internal to kvstore/.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kvstore/dist.h"
#include "kvstore/net/internal/frame_codec.h"

namespace troupe::internal {

using Args = std::vector<std::pair<std::string, std::string>>;

// The answer to one request: an error message, or success with an optional value.
struct Reply {
  std::string error;
  std::optional<net::TensorPayload> value;
  Args args;  // a command's answer (the mode handshake's)
};
using ReplyFn = std::function<void(Reply)>;

// Request target: the scheduler; 0.. are server ranks.
inline constexpr int kScheduler = -1;

class WorkerLink {
 public:
  struct Cluster {
    int rank = -1;
    int num_workers = 0;
    int num_servers = 0;
  };
  // Connects to the scheduler of `config` and waits until the cluster formed and every server answered (up
  // to config.connect_timeout_ms). Throws troupe::Error for a refusal or a timeout.
  static std::unique_ptr<WorkerLink> Start(const DistConfig& config, bool sync, Cluster* cluster);
  ~WorkerLink();  // Stop()
  WorkerLink(const WorkerLink&) = delete;
  WorkerLink& operator=(const WorkerLink&) = delete;

  // Sends `frame` (checked: net::ValidateMessage) to `target`; `fn` gets the answer.
  void Request(int target, std::uint64_t id, net::Message frame, ReplyFn fn);
  // An engine function's tensor frame for a server: kept for a resend when the server checkpoints by
  // itself (a numbered push), and written straight to the server's connection when it is up (one hop
  // less), else queued by the actor until the server is back.
  void SendTensor(int server, std::uint64_t id, const net::TensorMsg& frame, ReplyFn fn);
  // Several tensor requests to one server in one frame (net::TensorBatch), in the given order; each is
  // registered, kept and answered as if sent alone by SendTensor. A server that is down gets them one by one
  // once it is back.
  struct Outgoing {
    std::uint64_t id = 0;
    net::TensorMsg frame;  // checked (net::ValidateMessage)
    ReplyFn fn;
  };
  void SendBatch(int server, std::vector<Outgoing> batch);
  // From now on, connections closing are the cluster ending (the worker is leaving).
  void Leave();
  // Fails every request in flight, and every later one, with `why`.
  void Fail(const std::string& why);
  // The first error a request met (the failure the worker reports when it ends without Finalize).
  std::string first_error();
  // Stops the actor (its connections close).
  void Stop();

  struct Impl;

 private:
  explicit WorkerLink(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace troupe::internal
