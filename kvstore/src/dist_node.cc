// DistConfig (the DMLC_* / TROUPE_* environment), DistNode (a scheduler or server in this process) and
// RunDistRoleFromEnv: see kvstore/dist.h.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/error.h"
#include "kvstore/dist.h"
#include "kvstore/internal/dist_common.h"
#include "kvstore/internal/dist_roles.h"
#include "kvstore/net/internal/transport.h"

namespace troupe {
namespace {

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

std::int64_t EnvInt(const char* name, std::int64_t fallback, std::int64_t min) {
  const char* v = Env(name);
  if (v == nullptr) return fallback;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  if (*end != '\0' || x < min) {
    throw Error(std::string("kvstore: ") + name + "='" + v + "' must be an integer >= " + std::to_string(min));
  }
  return x;
}

// The IPv4 address of a network interface (DMLC_INTERFACE, e.g. eth0).
std::string InterfaceAddress(const std::string& name) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) throw Error("kvstore: cannot list the network interfaces (DMLC_INTERFACE)");
  std::string found;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET || name != a->ifa_name) continue;
    char buf[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof buf);
    found = buf;
    break;
  }
  freeifaddrs(list);
  if (found.empty()) throw Error("kvstore: DMLC_INTERFACE='" + name + "' names no interface with an IPv4 address");
  return found;
}

}  // namespace

DistConfig DistConfig::FromEnv() {
  DistConfig c;
  if (const char* v = Env("DMLC_PS_ROOT_URI")) c.root_uri = v;
  c.root_port = static_cast<int>(EnvInt("DMLC_PS_ROOT_PORT", c.root_port, 0));
  c.num_servers = static_cast<int>(EnvInt("DMLC_NUM_SERVER", c.num_servers, 1));
  c.num_workers = static_cast<int>(EnvInt("DMLC_NUM_WORKER", c.num_workers, 1));
  if (const char* v = Env("DMLC_INTERFACE")) c.host = InterfaceAddress(v);
  if (const char* v = Env("DMLC_NODE_HOST")) c.host = v;
  if (const char* v = Env("TROUPE_CLUSTER_TOKEN")) c.token = v;
  c.insecure = EnvInt("TROUPE_INSECURE", c.insecure ? 1 : 0, 0) != 0;
  c.hello_timeout_ms = static_cast<int>(EnvInt("TROUPE_HELLO_TIMEOUT_MS", c.hello_timeout_ms, 1));
  c.max_pending_connections = static_cast<std::size_t>(
      EnvInt("TROUPE_KVSTORE_MAX_PENDING", static_cast<std::int64_t>(c.max_pending_connections), 1));
  c.max_connections = static_cast<std::size_t>(
      EnvInt("TROUPE_KVSTORE_MAX_CONNECTIONS", static_cast<std::int64_t>(c.max_connections), 1));
  c.max_buffered_bytes = static_cast<std::size_t>(
      EnvInt("TROUPE_KVSTORE_MAX_BUFFERED_BYTES", static_cast<std::int64_t>(c.max_buffered_bytes), 1 << 20));
  c.heartbeat_interval_ms = static_cast<int>(EnvInt("TROUPE_HEARTBEAT_INTERVAL_MS", c.heartbeat_interval_ms, 1));
  c.heartbeat_timeout_ms = static_cast<int>(EnvInt("TROUPE_HEARTBEAT_TIMEOUT_MS", c.heartbeat_timeout_ms, 1));
  c.connect_timeout_ms = static_cast<int>(EnvInt("TROUPE_CONNECT_TIMEOUT_MS", c.connect_timeout_ms, 1));
  c.progress_timeout_ms = static_cast<int>(EnvInt("TROUPE_PROGRESS_TIMEOUT_MS", c.progress_timeout_ms, 0));
  c.reconnect_timeout_ms = static_cast<int>(EnvInt("TROUPE_RECONNECT_TIMEOUT_MS", c.reconnect_timeout_ms, 1));
  c.fault_kill_after_rounds = EnvInt("TROUPE_FAULT_KILL_AFTER_ROUNDS", c.fault_kill_after_rounds, 0);
  c.rank = static_cast<int>(EnvInt("TROUPE_SERVER_RANK", c.rank, -1));
  if (const char* v = Env("TROUPE_KVSTORE_CHECKPOINT_DIR")) c.checkpoint_dir = v;
  c.checkpoint_every = EnvInt("TROUPE_KVSTORE_CHECKPOINT_EVERY", c.checkpoint_every, 0);
  c.bigarray_bound = EnvInt("TROUPE_KVSTORE_BIGARRAY_BOUND", c.bigarray_bound, 1);
  c.max_frame_bytes = static_cast<std::size_t>(
      EnvInt("TROUPE_KVSTORE_MAX_FRAME_BYTES", static_cast<std::int64_t>(c.max_frame_bytes), 1024));
  c.coalesce_bytes = static_cast<std::size_t>(
      EnvInt("TROUPE_KVSTORE_COALESCE_BYTES", static_cast<std::int64_t>(c.coalesce_bytes), 0));
  c.Validate();
  return c;
}

void DistConfig::Validate() const {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw Error("kvstore: bad cluster configuration: " + what);
  };
  need(num_servers >= 1, "num_servers (DMLC_NUM_SERVER) must be >= 1");
  need(num_workers >= 1, "num_workers (DMLC_NUM_WORKER) must be >= 1");
  need(root_port >= 0 && root_port <= 65535, "root_port (DMLC_PS_ROOT_PORT) must be in 0..65535");
  need(!root_uri.empty(), "root_uri (DMLC_PS_ROOT_URI) is empty");
  need(!host.empty(), "host (DMLC_NODE_HOST) is empty");
  need(heartbeat_interval_ms > 0 && heartbeat_timeout_ms > heartbeat_interval_ms,
       "the heartbeat timeout must exceed the interval (TROUPE_HEARTBEAT_TIMEOUT_MS > TROUPE_HEARTBEAT_INTERVAL_MS)");
  need(connect_timeout_ms > 0, "connect_timeout_ms must be > 0");
  need(progress_timeout_ms >= 0, "progress_timeout_ms (TROUPE_PROGRESS_TIMEOUT_MS) must be >= 0 (0 = off)");
  need(bigarray_bound >= 1, "bigarray_bound must be >= 1");
  need(max_frame_bytes >= 1024, "max_frame_bytes must be >= 1024");
  need(hello_timeout_ms > 0, "hello_timeout_ms (TROUPE_HELLO_TIMEOUT_MS) must be > 0");
  need(max_pending_connections >= 1 && max_connections >= 1, "the connection caps must be >= 1");
  need(max_buffered_bytes >= max_frame_bytes || max_buffered_bytes >= (std::size_t{1} << 20),
       "max_buffered_bytes must be >= 1 MiB");
  if (token.empty() && !insecure) {
    throw Error(
        "kvstore: no cluster token: set TROUPE_CLUSTER_TOKEN to the same secret on every node (troupe launch "
        "makes one and hands it to its processes), or, on a network you trust, pass --insecure "
        "(TROUPE_INSECURE=1) to run without one");
  }
}

namespace internal {
void WarnIfInsecure(const DistConfig& config, const char* role) {
  if (!config.token.empty()) return;
  std::fprintf(stderr,
               "troupe %s: WARNING: running without a cluster token (--insecure): any process that reaches this "
               "cluster's ports can join it, read and change its parameters\n",
               role);
}
}  // namespace internal

struct DistNode::Impl {
  std::shared_ptr<net::NetSystem> net;
  std::shared_ptr<internal::Outcome> outcome = std::make_shared<internal::Outcome>();
  internal::NodeHandle node;
};

std::unique_ptr<DistNode> DistNode::StartScheduler(const DistConfig& config) {
  config.Validate();
  internal::WarnIfInsecure(config, "scheduler");
  auto impl = std::make_unique<Impl>();
  impl->net = net::NetSystem::Acquire();
  impl->node = internal::SpawnScheduler(*impl->net, config, impl->outcome);
  return std::unique_ptr<DistNode>(new DistNode(std::move(impl)));
}

std::unique_ptr<DistNode> DistNode::StartServer(const DistConfig& config) {
  config.Validate();
  if (config.root_port == 0) throw Error("kvstore server: the scheduler's port (DMLC_PS_ROOT_PORT) is not set");
  internal::WarnIfInsecure(config, "server");
  auto impl = std::make_unique<Impl>();
  impl->net = net::NetSystem::Acquire();
  impl->node = internal::SpawnServer(*impl->net, config, impl->outcome);
  return std::unique_ptr<DistNode>(new DistNode(std::move(impl)));
}

DistNode::DistNode(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DistNode::~DistNode() {
  Stop();
  Wait();
}

int DistNode::port() const { return impl_->node.port; }
int DistNode::Wait() { return impl_->outcome->Wait(-1); }
int DistNode::WaitFor(int timeout_ms) { return impl_->outcome->Wait(timeout_ms); }
std::string DistNode::message() const { return impl_->outcome->message(); }

void DistNode::Stop() {
  if (impl_->node.actor) caf::anon_send_exit(impl_->node.actor, caf::exit_reason::user_shutdown);
}

int RunDistRoleFromEnv() {
  const char* role = Env("DMLC_ROLE");
  if (role == nullptr || std::string(role) == "worker") return -1;
  try {
    const DistConfig config = DistConfig::FromEnv();
    std::unique_ptr<DistNode> node;
    if (std::string(role) == "scheduler") {
      node = DistNode::StartScheduler(config);
      std::printf("troupe scheduler: listening on %s:%d\n", config.root_uri.c_str(), node->port());
      std::fflush(stdout);
    } else if (std::string(role) == "server") {
      node = DistNode::StartServer(config);
      std::printf("troupe server: listening on %s:%d\n", config.host.c_str(), node->port());
      std::fflush(stdout);
    } else {
      std::fprintf(stderr, "troupe: DMLC_ROLE='%s' is not a role; use scheduler, server or worker\n", role);
      return 1;
    }
    const int status = node->Wait();
    if (status != 0) std::fprintf(stderr, "troupe %s: %s\n", role, node->message().c_str());
    return status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe %s: %s\n", role, e.what());
    return 1;
  }
}

}  // namespace troupe
