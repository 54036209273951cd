// The actors of the distributed KVStore's scheduler and server roles (kvstore/src/dist_scheduler.cc,
// dist_server.cc), started by DistNode (dist_node.cc). Internal to kvstore/.
#pragma once

#include <cstdint>
#include <memory>

#include "kvstore/internal/dist_common.h"
#include "kvstore/net/internal/transport.h"

namespace troupe::internal {

struct NodeHandle {
  caf::actor actor;
  std::uint16_t port = 0;  // the port it listens on
};

// The scheduler, listening on config.root_uri:config.root_port. `outcome` is set when it ends.
NodeHandle SpawnScheduler(net::NetSystem& net, const DistConfig& config, std::shared_ptr<Outcome> outcome);
// A server listening on config.host (ephemeral port) that registers with the scheduler. Throws
// troupe::Error when it cannot listen, reach the scheduler, or load its checkpoint.
NodeHandle SpawnServer(net::NetSystem& net, const DistConfig& config, std::shared_ptr<Outcome> outcome);

}  // namespace troupe::internal
