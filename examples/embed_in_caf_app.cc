// embed_in_caf_app — an existing CAF application that runs troupe inside its own caf::actor_system.
//
// The application owns the actor system (its own actor_system_config) and its own actors; troupe's engine
// is created on that system (EngineConfig::actor_system) instead of starting a second one, so troupe's
// actors — the dependency actor and the CPU device's workers — are spawned in the application's system next
// to the application's (the program counts them in the system's registry).
//
// The application's actors and troupe talk in messages, never by blocking:
//   - `client` (an application actor) sends requests to `tensor_service` (another application actor):
//     "the sum of squares of 1..n", all at once, and checks every answer;
//   - tensor_service answers each request with a response promise: it pushes the NDArray work to troupe's
//     engine (x * x, then sum) and one more engine function that reads the result and sends it back to
//     tensor_service as a CAF message (caf::anon_send from the engine's worker), which then delivers the
//     promise. No actor ever waits for the engine, so the CAF scheduler threads stay free;
//   - a bad request (n < 1), or one troupe refuses (its troupe::Error's message), is answered with a CAF
//     error, and the client's error handler receives it (every request has one).
//
// Usage: embed_in_caf_app [--requests N] [--workers W]
// Exit status 0 when every answer was right, the bad request came back as an error and troupe's actors ran
// in the application's system; 1 otherwise; 2 on bad arguments.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "caf/all.hpp"
#include "engine/engine.h"
#include "op/imperative.h"
#include "tensor/ndarray.h"

using troupe::NDArray;

using sum_squares_atom = caf::atom_constant<caf::atom("sumsquare")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using run_atom = caf::atom_constant<caf::atom("run")>;

namespace {

// ---- tensor_service: the application's gateway to troupe ----

struct ServiceState {
  int next_id = 0;
  std::unordered_map<int, caf::response_promise> pending;  // answered when the engine reports back
};

caf::behavior TensorService(caf::stateful_actor<ServiceState>* self, troupe::Engine* engine) {
  return {
      [=](sum_squares_atom, int n) -> caf::result<double> {
        if (n < 1) return caf::make_error(caf::sec::invalid_argument, "sum of squares of 1..n: n must be >= 1");
        std::vector<float> values;
        for (int i = 1; i <= n; ++i) values.push_back(static_cast<float>(i));
        NDArray sum;
        try {
          // Pushed to the engine; these calls return at once (shape errors throw here, before anything runs).
          NDArray x = NDArray::FromVector(values, troupe::TShape({static_cast<std::int64_t>(values.size())}),
                                          troupe::Context::CPU(), engine);
          NDArray squares = troupe::Invoke("elemwise_mul", {x, x})[0];
          sum = troupe::Invoke("sum", {squares})[0];
        } catch (const troupe::Error& e) {
          return caf::make_error(caf::sec::invalid_argument, std::string(e.what()));
        }
        const int id = self->state.next_id++;
        auto promise = self->make_response_promise<double>();
        self->state.pending.emplace(id, promise);
        // Runs on an engine worker once `sum` is written; reports to this actor with a message (anon_send is
        // thread-safe), and the promise is delivered in the actor's own context. Should the pushed work fail,
        // `sum` is poisoned and this function skipped: the client's request then ends in its timeout error
        // (never a hang).
        caf::actor me = caf::actor_cast<caf::actor>(self);
        engine->PushSync(
            [me, id, sum](troupe::RunContext) {
              caf::anon_send(me, done_atom::value, id, static_cast<double>(sum.data().dptr_as<float>()[0]));
            },
            sum.ctx(), {sum.var()}, {}, troupe::FnProperty::kNormal, 0, "report to tensor_service");
        return promise;
      },
      [=](done_atom, int id, double value) {
        auto it = self->state.pending.find(id);
        if (it == self->state.pending.end()) return;
        it->second.deliver(value);
        self->state.pending.erase(it);
      },
  };
}

// ---- client: an application actor using the service ----

struct Tally {
  caf::response_promise done;  // to whoever sent `run`
  int outstanding = 0;
  int right = 0;  // correct answers, plus the bad request answered with an error
};

caf::behavior Client(caf::event_based_actor* self, caf::actor service) {
  return {
      [=](run_atom, int requests) -> caf::result<int> {
        auto tally = std::make_shared<Tally>();
        tally->done = self->make_response_promise<int>();
        tally->outstanding = requests + 1;
        auto finish_one = [tally] {
          if (--tally->outstanding == 0) tally->done.deliver(tally->right);
        };
        for (int i = 0; i < requests; ++i) {
          const int n = 1 + i % 300;  // sums of squares up to 1..300 are exact in float32
          self->request(service, std::chrono::seconds(30), sum_squares_atom::value, n)
              .then(
                  [=](double value) {
                    const double expected = n * (n + 1.0) * (2.0 * n + 1.0) / 6.0;
                    if (value == expected) {
                      ++tally->right;
                    } else {
                      std::printf("client: sum of squares 1..%d = %g, expected %g: WRONG\n", n, value, expected);
                    }
                    finish_one();
                  },
                  [=](caf::error& err) {
                    std::printf("client: request %d failed: %s\n", n, self->system().render(err).c_str());
                    finish_one();
                  });
        }
        // A request troupe must refuse: the error travels back as a CAF error value.
        self->request(service, std::chrono::seconds(30), sum_squares_atom::value, 0)
            .then(
                [=](double value) {
                  std::printf("client: sum of squares 1..0 answered %g instead of an error: WRONG\n", value);
                  finish_one();
                },
                [=](caf::error& err) {
                  std::printf("client: the bad request came back as an error, as it should: %s\n",
                              self->system().render(err).c_str());
                  ++tally->right;
                  finish_one();
                });
        return tally->done;
      },
  };
}

}  // namespace

int main(int argc, char** argv) {
  int requests = 50, workers = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--requests" && i + 1 < argc) {
      requests = std::atoi(argv[++i]);
    } else if (arg == "--workers" && i + 1 < argc) {
      workers = std::atoi(argv[++i]);
    } else {
      std::puts("usage: embed_in_caf_app [--requests N] [--workers W]\n"
                "A CAF application that creates troupe's engine (W CPU workers) in its own actor system; its\n"
                "actors send N requests whose NDArray work runs on troupe, answered by messages.");
      return arg == "--help" || arg == "-h" ? 0 : 2;
    }
  }
  if (requests < 1 || requests > 10000 || workers < 1) {
    std::fprintf(stderr, "embed_in_caf_app: --requests must be in 1..10000, --workers >= 1\n");
    return 2;
  }

  // The application's actor system, configured by the application (2 scheduler threads on this machine).
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", size_t{2});
  caf::actor_system system{cfg};
  caf::scoped_actor self{system};
  const std::size_t before = system.registry().running();

  bool ok = true;
  try {
    troupe::EngineConfig config;
    config.actor_system = &system;  // troupe runs inside the application's system
    config.runtime.cpu_workers = workers;
    auto engine = troupe::Engine::Create(config);

    auto service = system.spawn(TensorService, engine.get());
    auto client = system.spawn(Client, service);
    int right = -1;
    self->request(client, caf::infinite, run_atom::value, requests)
        .receive([&](int r) { right = r; },
                 [&](caf::error& err) { std::printf("run failed: %s\n", system.render(err).c_str()); });
    const std::size_t with_troupe = system.registry().running();
    const long troupe_actors = static_cast<long>(with_troupe) - static_cast<long>(before) - 2;  // less service, client
    std::printf("%d of %d requests answered right (the bad one included)\n", right, requests + 1);
    std::printf("actors running in the application's system: %zu before troupe, %zu with it "
                "(%ld of them troupe's, %d CPU workers)\n",
                before, with_troupe, troupe_actors, workers);
    ok = right == requests + 1 && troupe_actors >= 1;

    self->send_exit(client, caf::exit_reason::user_shutdown);
    self->send_exit(service, caf::exit_reason::user_shutdown);
    engine->WaitForAll();
    // The engine (and its actors) go before the application's system does.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "embed_in_caf_app: %s\n", e.what());
    ok = false;
  }
  std::printf("%s\n", ok ? "embed_in_caf_app: OK" : "embed_in_caf_app: FAILED");
  return ok ? 0 : 1;
}
