// The cluster commands of `troupe shell --connect HOST:PORT`: the shell becomes an observer of a
// running cluster (kvstore/dist.h ClusterObserver: it takes no part in rounds, sends no heartbeats and is
// not counted) and gains
//   nodes                 every node: role, rank, address, state (alive, joining, left, dead) and when the
//                         scheduler last heard from it; the cluster's state, the barrier rounds completed and
//                         why rounds fail, if they do
//   kv keys               every key on every live server: dtype, shape, server, part
//   kv pull KEY [NAME]    the stored value (a split key's parts joined flat); printed, and kept as NAME
//   kv stats              per server: keys, pushes and bytes in, pulls and bytes out, updates, workers, mode
//   checkpoint [DIR]      every live server writes its checkpoint (to DIR, or its configured directory)
//   barrier [ROUND]       waits until the workers complete barrier round ROUND (default: their next one);
//                         the shell is not a worker, so it neither joins nor delays the round; Ctrl-C
//                         interrupts the wait
//
// Thread-safety: as the interpreter's (one thread).
#pragma once

#include <memory>

namespace troupe {
class ClusterObserver;
}

namespace troupe::shell {

class Interpreter;

// Adds the commands to `interp`; they use `observer` (kept alive by the commands).
void AddClusterCommands(Interpreter* interp, std::shared_ptr<ClusterObserver> observer);

}  // namespace troupe::shell
