// Pieces shared by the distributed KVStore's roles (kvstore/src/dist_*.cc): node names for error messages,
// command arguments, heartbeat bookkeeping and the outcome a DistNode waits for. Internal to kvstore/.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "kvstore/dist.h"
#include "kvstore/net/internal/frame_codec.h"
#include "kvstore/net/internal/transport.h"

namespace troupe::internal {

using Clock = std::chrono::steady_clock;

const char* RoleName(net::Role role);
// "worker 1 at 127.0.0.1" (or "worker at ..." before a rank was assigned).
std::string NodeName(net::Role role, int rank, const std::string& host);

// Why no peer may name a file-system path (a checkpoint directory is the server's own configuration).
inline constexpr const char* kNoPeerPaths =
    "a server writes its checkpoints to its own directory (troupe server --checkpoint-dir, "
    "TROUPE_KVSTORE_CHECKPOINT_DIR); no peer can name one";

// The value of `key` in a command's arguments, or `fallback`.
std::string Arg(const net::Command& command, const std::string& key, const std::string& fallback = {});
// As an int; throws troupe::Error when missing or malformed.
int IntArg(const net::Command& command, const std::string& key);

// Appends `rank` to a list of ranks for a message ("0, 2").
void AppendRank(std::string* list, int rank);

// "(2,3)" for a shape.
std::string ShapeText(const std::vector<std::int64_t>& shape);

// The hello frame's checks (the connection authenticated before it); returns the reason for refusing it,
// or empty.
std::string CheckHello(const net::Hello& hello);

// How this node's connections authenticate and what they may read (its token and limits); a listening
// node's options carry its Admission, named after the node.
net::ConnOptions ConnOptionsOf(const DistConfig& config);
net::ConnOptions ListenOptionsOf(const DistConfig& config, const std::string& node);

// Prints the warning of a node started without a token (DistConfig::insecure), once per start.
void WarnIfInsecure(const DistConfig& config, const char* role);

// The outcome of a node (scheduler or server), set once by its actor when it ends; DistNode waits on it.
struct Outcome {
  void Set(int status, const std::string& message);
  // -1 while running (after waiting up to timeout_ms; < 0 waits forever).
  int Wait(int timeout_ms);
  std::string message();

  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  int status = 0;
  std::string text;
};

// The optimizer configuration as command arguments ("type", "param.<k>", "lr_scheduler", "sched.<k>") and
// back; used by set_optimizer and by server checkpoints.
std::vector<std::pair<std::string, std::string>> OptimizerArgs(const OptimizerConfig& config);
OptimizerConfig OptimizerFromArgs(const std::vector<std::pair<std::string, std::string>>& args);

}  // namespace troupe::internal
