// OrderCheck — a run-time check of the dependency rule, for tests: with TROUPE_ENGINE_CHECK_ORDER=1 in the
// environment, every function is recorded on each of its variables in the order its shard queued it, and
// when a function starts, every earlier function on those variables that conflicts with it (one of the two
// writes) must have finished; else the process prints both functions and how each was granted, and aborts.
// Off (the default) it costs one predictable branch per push, start and finish.
// Thread-safety: all thread-safe (one mutex; the check is for tests, not for speed).
#pragma once

#include <cstdint>

namespace troupe::internal {

struct OprBlock;
class ActorVar;

class OrderCheck {
 public:
  static bool enabled() { return enabled_; }
  // A push's name, unique in the process (several engines may run at once).
  static std::uint64_t NewId();
  // The shard queued `b` on `v` (in the variable's push order).
  static void Pushed(const ActorVar* v, const OprBlock* b, bool write);
  // `b` starts to run: checks every variable of b.
  static void Started(const OprBlock* b);
  // `b` finished (before its completion is posted).
  static void Finished(const OprBlock* b);

 private:
  static const bool enabled_;
};

}  // namespace troupe::internal
