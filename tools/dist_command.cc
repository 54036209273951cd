// `troupe scheduler` and `troupe server`: see tools/dist_command.h.
#include "tools/dist_command.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>

#include "kvstore/dist.h"

namespace troupe::tools {

DistCommand::DistCommand(CLI::App* root) {
  scheduler_ = root->add_subcommand("scheduler", "Run the scheduler of a distributed KVStore cluster");
  scheduler_->footer(
      "The scheduler keeps the cluster's membership and ranks, barriers and heartbeats, and ends the cluster "
      "when every worker has left. It listens on --host:--port (DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT) and waits "
      "for --num-servers servers and --num-workers workers. Every node must hold the same TROUPE_CLUSTER_TOKEN "
      "(connections prove it by HMAC challenge-response; it never crosses the wire); without one the scheduler "
      "refuses to start unless given --insecure.\n\n"
      "Examples:\n"
      "  TROUPE_CLUSTER_TOKEN=s3cret troupe scheduler --port 9091 --num-servers 2 --num-workers 4\n"
      "  TROUPE_CLUSTER_TOKEN=s3cret DMLC_PS_ROOT_PORT=9091 DMLC_NUM_SERVER=1 DMLC_NUM_WORKER=2 troupe scheduler\n"
      "  troupe scheduler --insecure --port 9091   (a trusted network only: anyone reaching the port can join)\n");
  scheduler_->add_option("--port", port_, "Port to listen on (DMLC_PS_ROOT_PORT; 0 = any free port, printed)")
      ->check(CLI::Range(0, 65535));
  scheduler_->add_option("--host", host_, "Address to listen on (DMLC_PS_ROOT_URI; default 127.0.0.1)");
  scheduler_->add_option("--num-servers", num_servers_, "Servers in the cluster (DMLC_NUM_SERVER)")->check(CLI::Range(1, 100000));
  scheduler_->add_option("--num-workers", num_workers_, "Workers in the cluster (DMLC_NUM_WORKER)")->check(CLI::Range(1, 100000));
  scheduler_->add_flag("--insecure", insecure_,
                       "Run without TROUPE_CLUSTER_TOKEN (TROUPE_INSECURE=1): anyone who reaches the port can join, "
                       "read and change parameters; warned about on every start");

  server_ = root->add_subcommand("server", "Run a server of a distributed KVStore cluster");
  server_->footer(
      "A server owns the keys (and parts of big keys) the workers send it, sums each sync round, runs the "
      "optimizer the workers configured, and writes checkpoints. It registers with the scheduler at --root "
      "(DMLC_PS_ROOT_URI:DMLC_PS_ROOT_PORT) and listens for workers on --host (DMLC_NODE_HOST; any free "
      "port). A server restarted with --rank and the same --checkpoint-dir reloads its keys and rejoins. It "
      "needs the cluster's TROUPE_CLUSTER_TOKEN (or --insecure, as the scheduler).\n\n"
      "Examples:\n"
      "  TROUPE_CLUSTER_TOKEN=s3cret troupe server --root 127.0.0.1:9091\n"
      "  troupe server --root 10.0.0.1:9091 --host 10.0.0.7 --rank 1 --checkpoint-dir /data/ckpt --checkpoint-every 1000\n");
  server_->add_option("--root", root_, "The scheduler's address, HOST:PORT");
  server_->add_option("--host", host_, "Address to listen on and announce (DMLC_NODE_HOST)");
  server_->add_option("--rank", rank_, "Take this rank (a restart; TROUPE_SERVER_RANK)")->check(CLI::Range(0, 100000));
  server_->add_option("--checkpoint-dir", checkpoint_dir_, "Directory of checkpoints (TROUPE_KVSTORE_CHECKPOINT_DIR)");
  server_->add_option("--checkpoint-every", checkpoint_every_,
                      "Updates between checkpoints, 0 = on command only (TROUPE_KVSTORE_CHECKPOINT_EVERY)")
      ->check(CLI::Range(0LL, 1LL << 60));
  server_->add_flag("--insecure", insecure_, "Run without TROUPE_CLUSTER_TOKEN (TROUPE_INSECURE=1), as the scheduler's");
}

bool DistCommand::chosen() const { return scheduler_->parsed() || server_->parsed(); }

int DistCommand::Run() {
  const bool scheduler = scheduler_->parsed();
  const char* role = scheduler ? "scheduler" : "server";
  if (insecure_) ::setenv("TROUPE_INSECURE", "1", 1);  // before FromEnv, which refuses an empty token
  DistConfig c;
  try {
    c = DistConfig::FromEnv();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe %s: %s\n", role, e.what());
    return 2;
  }
  if (scheduler) {
    if (port_ >= 0) c.root_port = port_;
    if (!host_.empty()) c.root_uri = host_;
    if (num_servers_ > 0) c.num_servers = num_servers_;
    if (num_workers_ > 0) c.num_workers = num_workers_;
  } else {
    if (!root_.empty()) {
      const auto colon = root_.rfind(':');
      if (colon == std::string::npos) {
        std::fprintf(stderr, "troupe server: --root '%s' must be HOST:PORT\n", root_.c_str());
        return 2;
      }
      c.root_uri = root_.substr(0, colon);
      c.root_port = std::atoi(root_.c_str() + colon + 1);
    }
    if (!host_.empty()) c.host = host_;
    if (rank_ >= 0) c.rank = rank_;
    if (!checkpoint_dir_.empty()) c.checkpoint_dir = checkpoint_dir_;
    if (checkpoint_every_ >= 0) c.checkpoint_every = checkpoint_every_;
  }
  std::unique_ptr<DistNode> node = scheduler ? DistNode::StartScheduler(c) : DistNode::StartServer(c);
  std::printf("troupe %s: listening on %s:%d\n", scheduler ? "scheduler" : "server",
              (scheduler ? c.root_uri : c.host).c_str(), node->port());
  std::fflush(stdout);
  const int status = node->Wait();
  if (status != 0) std::fprintf(stderr, "troupe %s: %s\n", scheduler ? "scheduler" : "server", node->message().c_str());
  return status;
}

}  // namespace troupe::tools
