// The distributed KVStore (DESIGN.md §4): the roles of a ps-lite style cluster — one scheduler,
// servers that own key ranges, workers that push and pull — talking length-prefixed Cap'n Proto frames over
// TCP (kvstore/net). A worker is a KVStore (CreateDistKVStore, or KVStore::Create("dist_sync") with the
// DMLC_* environment); the scheduler and the servers are DistNodes, started in this process or as their own
// processes (RunDistRoleFromEnv, `troupe scheduler`, `troupe server`).
//
// Semantics:
//   - dist_sync: a server sums one push of a key per live worker that has not left, then updates once
//     (the optimizer set by SetOptimizer, or the sum replaces the value) and answers every push of the
//     round; a pull after a push waits for that round's update. dist_device_sync: the same, after a worker
//     has summed its own devices' values. dist_async: every push is applied at once.
//   - Init and SetOptimizer are sent by worker 0 and end with a barrier of all workers (as MXNet). Every
//     worker must Init the same keys, in the same order, with the same shapes.
//   - Keys of fewer than `bigarray_bound` elements live on one server, chosen so that the servers carry
//     similar bytes (in Init order); bigger arrays are split into one part per server (part boundaries at
//     multiples of 16 elements, so 2-bit compressed parts stay whole words).
//   - One Push, Pull or PushPull call with several keys sends the keys bound for the same server together:
//     keys that are not split and not compressed go in one frame (net::TensorBatch) up to `coalesce_bytes` of
//     tensor data (more frames past that; a bigger key alone), in the call's key order (ascending: Module's
//     keys are its parameters in order, so the first layer's, which MXNet gives the highest priority
//     -index, go first); the server handles them in that order as if each had come alone and answers what it
//     has ready at the same time in one frame (net::ReplyBatch). Such a frame is one engine function: it
//     starts when all of its keys' values are ready, and a failure of any of its keys fails all of them
//     (every output it writes carries the error).
//   - Gradient compression (SetGradientCompression, 2-bit) applies to worker -> server pushes; the
//     residuals stay on the worker.
//   - Failures never hang: every node sends heartbeats to the scheduler and the scheduler to every node.
//     A node whose connection closes without leaving, or that misses heartbeats for `heartbeat_timeout_ms`,
//     is dead: the pending Push/Pull/Barrier calls that need it fail with a troupe::Error naming it
//     ("worker 1 at 127.0.0.1 died: ..."), surfacing where the caller waits (the pulled arrays'
//     WaitToRead, Barrier). A worker that dies or fails (its store destroyed without Finalize) breaks a
//     sync job: every node is told, and every waiting call fails with its name. Workers whose keys differ
//     at Init fail at Init (server 0 compares every worker's declarations). A barrier or sync round that
//     makes no progress for `progress_timeout_ms` with everyone alive fails the job, naming who is missing.
//   - Servers: one that checkpoints by itself (`checkpoint_every` > 0 and `checkpoint_dir`) is restartable:
//     its workers keep what they push to it until it has checkpointed it; when it dies or its connection
//     drops, their calls wait up to `reconnect_timeout_ms` (reconnecting with backoff) for it to come back
//     (a process started with `rank` set and the same checkpoint_dir, e.g. by `troupe launch`), then resend
//     what its checkpoint lacks, in order; pushes carry their number, so none is applied twice or lost, and
//     the job goes on as if nothing happened. Another server's death fails the calls that need it after
//     `heartbeat_timeout_ms` (requests in flight at once).
//   - A worker leaves with KVStore::Finalize (after its pending calls finished): servers stop waiting for it
//     in sync rounds and barriers stop counting it, so workers with different numbers of batches finish.
//     When every worker has left the scheduler stops the servers and every node returns 0.
//   - Checkpoints: a server writes its keys' values, the optimizer configuration and its state to
//     `checkpoint_dir/server-<rank>.*` on KVStore::Checkpoint() and every `checkpoint_every` updates; a
//     server started with `rank` >= 0 loads them.
//   - Security: every connection authenticates first, both ways, by challenge-response over the cluster
//     token (HMAC-SHA256; the token never crosses the wire); a peer with another token is refused with an
//     error frame, and one that does not authenticate within `hello_timeout_ms` is closed. Before that it
//     may send only frames of at most 4 KiB; a node caps its unauthenticated and authenticated connections
//     and the bytes of frames it receives at once (kvstore/net/internal/transport.h). A node refuses to
//     start without a token unless `insecure`. A malformed, truncated or oversized frame closes only that
//     connection (logged). Servers listen on `host` only. Optimizers travel as declarative configs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvstore/kvstore.h"

namespace troupe {

struct DistConfig {
  std::string root_uri = "127.0.0.1";  // the scheduler's address (DMLC_PS_ROOT_URI)
  int root_port = 0;                   // its port (DMLC_PS_ROOT_PORT); 0 for a scheduler = ephemeral
  int num_servers = 1;                 // DMLC_NUM_SERVER
  int num_workers = 1;                 // DMLC_NUM_WORKER
  std::string host = "127.0.0.1";      // address this node listens on and announces (DMLC_NODE_HOST, or
                                       // the IPv4 address of DMLC_INTERFACE)
  std::string token;                   // TROUPE_CLUSTER_TOKEN: the shared secret every connection proves
                                       // (HMAC-SHA256 challenge-response; it never crosses the wire)
  bool insecure = false;               // TROUPE_INSECURE=1 (--insecure): allow an empty token (anyone who
                                       // reaches a port can join); warned about on every start
  int hello_timeout_ms = 5000;         // TROUPE_HELLO_TIMEOUT_MS: a new connection must authenticate in time
  std::size_t max_pending_connections = 128;  // TROUPE_KVSTORE_MAX_PENDING: unauthenticated connections at
                                              // once per node (a new one closes the oldest)
  std::size_t max_connections = 1024;  // TROUPE_KVSTORE_MAX_CONNECTIONS: authenticated connections per node
  std::size_t max_buffered_bytes = std::size_t{4} << 30;  // TROUPE_KVSTORE_MAX_BUFFERED_BYTES: bytes of
                                                          // frames a node receives at once
  int heartbeat_interval_ms = 1000;    // TROUPE_HEARTBEAT_INTERVAL_MS
  int heartbeat_timeout_ms = 10000;    // TROUPE_HEARTBEAT_TIMEOUT_MS
  int connect_timeout_ms = 60000;      // TROUPE_CONNECT_TIMEOUT_MS: how long a node waits for the cluster
  int reconnect_timeout_ms = 60000;    // TROUPE_RECONNECT_TIMEOUT_MS: how long a worker's calls wait for a
                                       // server that checkpoints by itself to come back from its checkpoint
  int progress_timeout_ms = 120000;    // TROUPE_PROGRESS_TIMEOUT_MS: a barrier or sync round whose parties have
                                       // not all arrived this long after the first fails the job, naming
                                       // who is missing (0 = wait forever)
  int rank = -1;                       // servers: the rank to take (a restart); TROUPE_SERVER_RANK
  std::string checkpoint_dir;          // servers: TROUPE_KVSTORE_CHECKPOINT_DIR
  std::int64_t checkpoint_every = 0;   // servers: updates between checkpoints, 0 = only on command;
                                       // TROUPE_KVSTORE_CHECKPOINT_EVERY
  std::int64_t bigarray_bound = 1000000;              // TROUPE_KVSTORE_BIGARRAY_BOUND (elements)
  std::size_t max_frame_bytes = std::size_t{1} << 30;  // TROUPE_KVSTORE_MAX_FRAME_BYTES
  std::size_t coalesce_bytes = std::size_t{1} << 20;  // TROUPE_KVSTORE_COALESCE_BYTES: a worker's keys of one
                                                      // Push/Pull/PushPull call for one server travel in one
                                                      // frame up to this many tensor bytes (0 = one frame per key)
  std::int64_t fault_kill_after_rounds = 0;  // TROUPE_FAULT_KILL_AFTER_ROUNDS: fault injection (tests): a
                                             // server kills itself (SIGKILL) after this many updates since
                                             // it started (0 = never); not one that resumed from a checkpoint

  // The configuration from the environment (the variables named above; unset ones keep the defaults).
  // Throws troupe::Error naming the variable for a malformed value or an unknown interface.
  static DistConfig FromEnv();
  // Throws troupe::Error for an inconsistent configuration (counts < 1, timeouts <= 0, ...) and for an
  // empty token without `insecure`.
  void Validate() const;
};

// A new random cluster token: 256 bits from OpenSSL's generator, as 64 hex digits (what `troupe launch`
// hands its processes).
std::string NewClusterToken();

// A scheduler or a server running in this process (on the kvstore's own actor system). The constructor
// returns once the node listens; the node then runs until the cluster ends or Stop().
//
// Thread-safety: all members are thread-safe.
class DistNode {
 public:
  // Throws troupe::Error when the node cannot listen (scheduler) or cannot reach the scheduler (server).
  static std::unique_ptr<DistNode> StartScheduler(const DistConfig& config);
  static std::unique_ptr<DistNode> StartServer(const DistConfig& config);
  ~DistNode();  // Stop() then wait

  // The port the node listens on (the scheduler's root port; a server's worker port).
  int port() const;
  // Blocks until the node has ended; returns its exit status: 0 after an orderly end, 1 after a failure
  // (message()).
  int Wait();
  // Like Wait, giving up after `timeout_ms`: returns -1 when still running.
  int WaitFor(int timeout_ms);
  // Why the node ended (empty after an orderly end).
  std::string message() const;
  // Ends the node now (its connections close; peers see it as dead).
  void Stop();

  struct Impl;

 private:
  explicit DistNode(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A worker of the cluster described by `config`: "dist_sync", "dist_async" or "dist_device_sync". Blocks
// until the scheduler has seen every node (up to connect_timeout_ms) and this worker reached every server.
// Throws troupe::Error for another type, a refused hello, or a timeout.
std::unique_ptr<KVStore> CreateDistKVStore(const std::string& type, const DistConfig& config);

// A look into a running cluster from outside it (what `troupe shell --connect` uses): connects to the
// scheduler with the cluster token as an observer, reads the node table, and asks the servers for their keys,
// stored values and counters, or to checkpoint. An observer takes no part in rounds or barriers, sends no
// heartbeats and is not counted as a node; it can come and go while the cluster runs.
//
// Thread-safety: one thread uses an observer. Calls block until the answers arrive or timeout_ms passes
// (troupe::Error naming the node that did not answer).
struct ClusterNodeInfo {
  std::string role;     // "scheduler", "server", "worker"
  int rank = -1;        // -1 for the scheduler, or a node that joined before the cluster formed
  std::string address;  // host:port (port 0 for workers: they listen on nothing)
  std::string state;    // "alive", "joining" (before the cluster formed), "left" (finished), "dead"
  std::int64_t last_heartbeat_ms = 0;  // since the scheduler last heard from it (0 for the scheduler)
};
struct ClusterKeyInfo {
  int key = 0;
  int server = 0;                  // the server rank holding it (or this part of it)
  std::string dtype;               // "float32", ...
  std::vector<std::int64_t> shape;  // of this part
  int part = 0, parts = 1;         // a big array is split over the servers in `parts` parts
};
struct ClusterServerStats {
  int rank = 0;
  std::int64_t keys = 0, pushes = 0, pulls = 0, updates = 0, bytes_in = 0, bytes_out = 0;
  std::int64_t tensor_frames = 0;  // frames from workers carrying tensor requests (a batch counts once)
  std::int64_t batches = 0;        // of those, batches of several keys (net::TensorBatch)
  int workers = 0;   // connected workers
  std::string mode;  // "sync", "async" or "unset"
};

class ClusterObserver {
 public:
  // Throws troupe::Error when the scheduler cannot be reached or refuses (wrong token, other version).
  // timeout_ms bounds every call below: one that gets no answer within it throws. A call on a connection
  // that has closed (the cluster ended) throws at once.
  static std::unique_ptr<ClusterObserver> Connect(const std::string& scheduler_host, int scheduler_port,
                                                  const std::string& token, int timeout_ms = 5000);
  ~ClusterObserver();
  ClusterObserver(const ClusterObserver&) = delete;
  ClusterObserver& operator=(const ClusterObserver&) = delete;

  // The scheduler first, then every node that joined, in arrival order; `cluster` gets "forming", "running" or
  // "ending", `broken` why sync rounds fail (a worker died), and `barriers` how many barrier rounds the
  // workers have completed, when given.
  std::vector<ClusterNodeInfo> Nodes(std::string* cluster = nullptr, std::string* broken = nullptr,
                                     std::int64_t* barriers = nullptr);
  // Waits until the workers have completed barrier round `round` (1, 2, ...; 0: the round after those
  // completed when the scheduler gets the request) and returns it. The observer is not a worker: it neither
  // joins nor delays the round. Waits up to the timeout while the round may still come; throws
  // troupe::Error when it cannot (a worker died, every worker left, the scheduler went away), when the
  // timeout passes, or when `cancelled` (asked every 100 ms) returns true.
  std::int64_t Barrier(std::int64_t round = 0, const std::function<bool()>& cancelled = {});
  // Every key of every live server, by key then part.
  std::vector<ClusterKeyInfo> Keys();
  // The stored value of `key` on the CPU (the parts of a split key joined into one flat array). Throws
  // troupe::Error for a key no server holds.
  NDArray Pull(int key);
  std::vector<ClusterServerStats> Stats();
  // Every live server writes its checkpoint to its configured directory (`dir` must be empty: no peer names
  // a path to a server).
  void Checkpoint(const std::string& dir = {});

  struct Impl;

 private:
  explicit ClusterObserver(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// MXNet's start-up rule: with DMLC_ROLE=scheduler or server in the environment, runs that role from
// DistConfig::FromEnv() until the cluster ends and returns its exit status; returns -1 when DMLC_ROLE is
// unset or "worker". Errors are printed to stderr (status 1).
int RunDistRoleFromEnv();

}  // namespace troupe
