#include "actors/detail/wakeable.h"

#include "caf/all.hpp"

namespace troupe::internal {

namespace {
using stop_atom = caf::atom_constant<caf::atom("stop")>;
}

LoggerRefGuard::LoggerRefGuard() : had_logger_(caf::logger::current_logger() != nullptr) {}

LoggerRefGuard::~LoggerRefGuard() {
  if (!had_logger_) caf::logger::set_current_actor_system(nullptr);
}

void WakeableActor::Spawn(caf::actor_system& system, std::function<void()> on_wake, bool detached) {
  LoggerRefGuard guard;
  // The unused int: CAF 0.17's init_fun_factory dereferences a null shared_ptr<tuple<>> when an actor is
  // spawned with no arguments (undefined behaviour that UBSan reports); one argument avoids that path.
  auto body = [fn = std::move(on_wake)](caf::event_based_actor* self, int) -> caf::behavior {
    return {
        [fn](wake_atom) { fn(); },
        // Orderly stop: processed after every wake message sent before it.
        [self](stop_atom) { self->quit(); },
    };
  };
  handle_ = detached ? system.spawn<caf::detached>(std::move(body), 0) : system.spawn(std::move(body), 0);
}

void WakeableActor::Wake() const { caf::anon_send(handle_, wake_atom::value); }

void StopAndWait(caf::actor_system& system, const std::vector<caf::actor>& actors) {
  if (actors.empty()) return;
  LoggerRefGuard guard;
  caf::scoped_actor self{system};
  for (const auto& a : actors) {
    if (a) self->send(a, stop_atom::value);
  }
  for (const auto& a : actors) {
    if (a) self->wait_for(a);
  }
}

}  // namespace troupe::internal
