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

namespace troupe::internal {

using Clock = std::chrono::steady_clock;

const char* RoleName(net::Role role);
// "worker 1 at 127.0.0.1" (or "worker at ..." before a rank was assigned).
std::string NodeName(net::Role role, int rank, const std::string& host);

// The value of `key` in a command's arguments, or `fallback`.
std::string Arg(const net::Command& command, const std::string& key, const std::string& fallback = {});
// As an int; throws troupe::Error when missing or malformed.
int IntArg(const net::Command& command, const std::string& key);

// The hello frame's checks against this node's token; returns the reason for refusing it, or empty.
std::string CheckHello(const net::Hello& hello, const std::string& token);

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
