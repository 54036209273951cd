// dist_push_pull — a worker program for `troupe launch`: the distributed KVStore's push, pull and barrier.
//
//   troupe launch -n 2 -s 1 -- ./dist_push_pull
//   TROUPE_KVSTORE_BIGARRAY_BOUND=1000 troupe launch -n 3 -s 2 -- ./dist_push_pull --big 5000
//
// `troupe launch` starts a scheduler, the servers and N copies of this program, each with launch's own
// environment plus the DMLC_* variables and a cluster token. Each copy joins the cluster with
// KVStore::Create("dist_sync"), initialises two keys — a small one, and optionally a big one that is split over every server when it has
// at least TROUPE_KVSTORE_BIGARRAY_BOUND elements (default 1000000) — and runs a few rounds: every worker
// pushes values that depend on its rank and the round, pulls, and checks that it got the sum of what every
// worker pushed (dist_sync: a server answers a round once it has one push from each worker, and with no
// optimizer set the sum replaces the stored value). A barrier ends each round.
//
// MXNet's habit is kept as well: started with DMLC_ROLE=scheduler or server, the program runs that role
// (RunDistRoleFromEnv), so it can make up a whole cluster by itself. Started without DMLC_ROLE it says it must
// be started by `troupe launch` and exits 2.
//
// Usage: dist_push_pull [--small N] [--big N] [--rounds R]
// Exit status 0 when every pulled value was right, 1 when one was not or the cluster failed (the error names
// the node), 2 on bad arguments or without a cluster.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "kvstore/dist.h"
#include "kvstore/kvstore.h"

using troupe::NDArray;
using troupe::TShape;

namespace {

void Usage() {
  std::puts("usage: troupe launch -n WORKERS -s SERVERS -- dist_push_pull [--small N] [--big N] [--rounds R]\n"
            "A worker of a distributed KVStore job: pushes rank-dependent values of a key of --small elements\n"
            "(and of one of --big elements when given), pulls the sums and checks them, --rounds times.\n"
            "Exits 1 when a pulled value is wrong.");
}

// What worker `rank` pushes to a key in `round`: element i is (rank + 1) * round + i % 7.
std::vector<float> Pushed(int rank, int round, std::int64_t size) {
  std::vector<float> v(static_cast<std::size_t>(size));
  for (std::int64_t i = 0; i < size; ++i) v[i] = static_cast<float>((rank + 1) * round + i % 7);
  return v;
}

// What every worker must pull afterwards: the sum over ranks 0 .. workers-1.
std::vector<float> Expected(int workers, int round, std::int64_t size) {
  std::vector<float> sum(static_cast<std::size_t>(size), 0.0f);
  for (int r = 0; r < workers; ++r) {
    const std::vector<float> v = Pushed(r, round, size);
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += v[i];
  }
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t small = 8, big = 0;
  int rounds = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--small" && i + 1 < argc) {
      small = std::atoll(argv[++i]);
    } else if (arg == "--big" && i + 1 < argc) {
      big = std::atoll(argv[++i]);
    } else if (arg == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else {
      Usage();
      return arg == "--help" || arg == "-h" ? 0 : 2;
    }
  }
  if (small < 1 || big < 0 || rounds < 1) {
    std::fprintf(stderr, "dist_push_pull: --small and --rounds must be >= 1, --big >= 0\n");
    return 2;
  }

  // Scheduler or server: run the role until the cluster ends (MXNet's programs do the same).
  const int role_status = troupe::RunDistRoleFromEnv();
  if (role_status >= 0) return role_status;
  const char* role = std::getenv("DMLC_ROLE");
  if (role == nullptr || *role == '\0') {
    std::fprintf(stderr,
                 "dist_push_pull: DMLC_ROLE is not set. This is a worker of a distributed job; start it with\n"
                 "  troupe launch -n 2 -s 1 -- %s\n"
                 "which starts the scheduler and the servers and gives every process the DMLC_* variables.\n",
                 argv[0]);
    return 2;
  }

  try {
    // Joins the cluster the environment describes; returns once every node is there.
    auto kv = troupe::KVStore::Create("dist_sync");
    const int rank = kv->rank(), workers = kv->num_workers();
    const std::int64_t bound = troupe::DistConfig::FromEnv().bigarray_bound;
    const troupe::Context cpu = troupe::Context::CPU();
    std::vector<int> keys = {0};
    std::vector<std::int64_t> sizes = {small};
    if (big > 0) {
      keys.push_back(1);
      sizes.push_back(big);
    }
    std::printf("rank %d of %d workers: keys of", rank, workers);
    for (std::int64_t s : sizes) {
      std::printf(" %lld elements (%s)", static_cast<long long>(s), s >= bound ? "split over the servers" : "one server");
    }
    std::printf("\n");

    // Every worker initialises the same keys (worker 0's values are stored; Init ends with a barrier).
    std::vector<NDArray> zeros, outs;
    for (std::int64_t s : sizes) {
      zeros.push_back(NDArray::Zeros(TShape({s}), cpu));
      outs.emplace_back(TShape({s}), cpu);
    }
    kv->Init(keys, zeros);

    int wrong = 0;
    for (int round = 1; round <= rounds; ++round) {
      std::vector<NDArray> values;
      for (std::int64_t s : sizes) values.push_back(NDArray::FromVector(Pushed(rank, round, s), TShape({s}), cpu));
      kv->Push(keys, values);
      kv->Pull(keys, outs);  // ordered after this worker's push; answered once the round's sum is in
      for (std::size_t k = 0; k < keys.size(); ++k) {
        const std::vector<float> got = outs[k].ToVector<float>();  // waits for the pull (rethrows its error)
        const std::vector<float> want = Expected(workers, round, sizes[k]);
        std::int64_t bad = -1;
        for (std::size_t i = 0; i < got.size() && bad < 0; ++i) bad = got[i] == want[i] ? -1 : static_cast<std::int64_t>(i);
        if (bad >= 0) {
          ++wrong;
          std::printf("rank %d round %d key %d: element %lld is %g, expected %g: WRONG\n", rank, round, keys[k],
                      static_cast<long long>(bad), got[bad], want[bad]);
        } else {
          std::printf("rank %d round %d key %d: pulled [%g, %g, ...] = the sum of %d workers' pushes: ok\n", rank,
                      round, keys[k], got[0], got.size() > 1 ? got[1] : got[0], workers);
        }
      }
      kv->Barrier();  // every worker has checked this round before anyone pushes the next
    }
    std::printf("rank %d: %s\n", rank, wrong == 0 ? "every pull was right" : "some pulls were WRONG");
    // Leaves the cluster in order (without it, the store's end would count as this worker's failure); when
    // every worker has left, the scheduler ends the servers.
    kv->Finalize();
    return wrong == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist_push_pull: %s\n", e.what());
    return 1;
  }
}
