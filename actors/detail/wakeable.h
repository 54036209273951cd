// WakeableActor — a CAF actor that runs a drain function each time it is woken by a message.
//
// This is the "doorbell" hand-off of DESIGN.md §7: producers put work into a queue the actor owns and send
// one wake message only when the actor has gone to sleep, so a busy actor receives no messages at all.
// The actor is spawned 'detached' (its own thread: blocking work never runs on a CAF scheduler thread)
// unless asked to run on the scheduler. This header includes CAF: only .cc files in actors/ and engine/
// that implement actors include it.
#pragma once

#include <functional>
#include <vector>

#include "caf/actor.hpp"
#include "caf/actor_system.hpp"
#include "caf/atom.hpp"

namespace troupe::internal {

using wake_atom = caf::atom_constant<caf::atom("wake")>;

class WakeableActor {
 public:
  WakeableActor() = default;
  // Spawns the actor in `system`. `on_wake` runs on the actor's thread for every wake message.
  void Spawn(caf::actor_system& system, std::function<void()> on_wake, bool detached = true);
  // Sends one wake message. Thread-safe.
  void Wake() const;
  const caf::actor& handle() const { return handle_; }
  bool spawned() const { return static_cast<bool>(handle_); }

 private:
  caf::actor handle_;
};

// CAF 0.17 quirk: spawning an actor, creating a scoped_actor or constructing an actor_system stores a
// reference to the system's logger in a thread-local of the *calling* thread, and ~actor_system blocks until
// every such reference is gone. troupe makes those calls from whatever thread happens to push (a lazily
// started lane, a GPU device created on first use), so a long-lived user thread would deadlock the
// shutdown. This guard puts the calling thread's logger reference back the way it found it.
class LoggerRefGuard {
 public:
  LoggerRefGuard();
  ~LoggerRefGuard();
  LoggerRefGuard(const LoggerRefGuard&) = delete;
  LoggerRefGuard& operator=(const LoggerRefGuard&) = delete;

 private:
  bool had_logger_;
};

// Asks every actor in `actors` to exit (after the messages already in their mailboxes) and blocks until all
// have terminated.
void StopAndWait(caf::actor_system& system, const std::vector<caf::actor>& actors);

}  // namespace troupe::internal
