// One node of the multi-process tests of the distributed KVStore (kvstore_dist_process_test.cc).
//
// With DMLC_ROLE=scheduler or server it runs that role (RunDistRoleFromEnv, as `troupe scheduler|server`
// does). With DMLC_ROLE=worker it joins the cluster of the DMLC_* environment and runs the worker program
// named by argv[1]: a semantic scenario of dist_scenarios.h, or one of the failure programs below. It
// prints READY lines the test waits for, reads GO lines from stdin where the test must act first, and
// exits 0 when every check held (1 otherwise, with the reason on stderr).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>
#include <fstream>
#include <iostream>
#include <string>

#include "base/error.h"
#include "kvstore/dist.h"
#include "tests/kvstore/dist_scenarios.h"

namespace troupe {
namespace {

void Say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// Blocks until the test writes a line (or closes stdin).
void AwaitGo() {
  std::string line;
  std::getline(std::cin, line);
}

std::unique_ptr<KVStore> Join(const std::string& type) { return CreateDistKVStore(type, DistConfig::FromEnv()); }

// Joins, runs one round of key 0 (4 floats, pushing ones into `out`), says READY and waits for GO.
std::unique_ptr<KVStore> RoundThenGo(NDArray* out) {
  auto kv = Join("dist_sync");
  kv->Init({0}, {dist_test::Filled(TShape{4}, 0.f)});
  kv->PushPull({0}, {dist_test::Filled(TShape{4}, 1.f)}, {*out});
  out->WaitToRead();
  Say("READY");
  AwaitGo();
  return kv;
}

// The victim of the kill tests: one round, READY, then waits to be killed (or stopped).
int RoundThenBlock() {
  NDArray out(TShape{4}, Context::CPU(0));
  auto kv = RoundThenGo(&out);
  std::_Exit(0);  // not reached when killed; never leave in order (the test is about dying)
}

// The survivor: one round, READY, then a round the victim never joins: its pull must fail, naming the
// dead worker, instead of hanging.
int RoundThenExpectDeath() {
  auto kv = Join("dist_sync");
  kv->Init({0}, {dist_test::Filled(TShape{4}, 0.f)});
  NDArray out(TShape{4}, Context::CPU(0));
  kv->PushPull({0}, {dist_test::Filled(TShape{4}, 1.f)}, {out});
  dist_test::ExpectValues("round 1", out.ToVector<float>(), std::vector<float>(4, 2.f));
  const std::string victim = "worker " + std::to_string(1 - kv->rank());
  Say("READY");
  kv->PushPull({0}, {dist_test::Filled(TShape{4}, 1.f)}, {out});
  try {
    out.WaitToRead();
  } catch (const Error& e) {
    const std::string what = e.what();
    Say("FAILED AS PROMISED: " + what);
    if (what.find(victim) == std::string::npos || what.find("died") == std::string::npos) {
      std::fprintf(stderr, "the error does not name %s as dead: %s\n", victim.c_str(), what.c_str());
      return 1;
    }
    // The store stays usable for a clean exit: a barrier now fails the same way, at once.
    try {
      kv->Barrier();
      std::fprintf(stderr, "a barrier with a dead worker succeeded\n");
      return 1;
    } catch (const Error& b) {
      Say(std::string("BARRIER FAILED TOO: ") + b.what());
    }
    // Leaving reports the failed job too (the process would exit non-zero with it).
    try {
      kv->Finalize();
      std::fprintf(stderr, "Finalize of a failed job succeeded\n");
      return 1;
    } catch (const Error& f) {
      Say(std::string("FINALIZE FAILED TOO: ") + f.what());
      if (std::string(f.what()).find(victim) == std::string::npos) return 1;
    }
    return 0;
  }
  std::fprintf(stderr, "round 2 completed although worker %d died\n", 1 - kv->rank());
  return 1;
}

// Server restart: sgd with momentum on the servers, two rounds, a checkpoint, READY; the test kills a
// server and starts it again from the checkpoint, then says GO; two more rounds must continue exactly.
int TrainAcrossServerRestart() {
  auto kv = Join("dist_sync");
  const TShape shape{5000};  // over the test's bound of 1000: split over both servers
  kv->Init({0, 1}, {dist_test::Filled(shape, 1.f), dist_test::Filled(TShape{3}, 1.f)});
  kv->SetOptimizer(OptimizerConfig("sgd", {{"learning_rate", "0.1"}, {"momentum", "0.9"}}));
  const float grad = 1.f + static_cast<float>(kv->rank());  // the sum of both workers' gradients is 3
  NDArray out(shape, Context::CPU(0)), out1(TShape{3}, Context::CPU(0));
  float w = 1.f, mom = 0.f;
  auto round = [&](int r) {
    kv->PushPull({0, 1}, {dist_test::Filled(shape, grad), dist_test::Filled(TShape{3}, grad)}, {out, out1});
    mom = 0.9f * mom - 0.1f * 3.f;
    w += mom;
    dist_test::ExpectValues("round " + std::to_string(r) + " key 0", out.ToVector<float>(),
                            std::vector<float>(5000, w));
    dist_test::ExpectValues("round " + std::to_string(r) + " key 1", out1.ToVector<float>(), std::vector<float>(3, w));
  };
  round(1);
  round(2);
  kv->Barrier();
  if (kv->rank() == 0) kv->Checkpoint();
  kv->Barrier();
  Say("READY");
  AwaitGo();
  round(3);
  round(4);
  Say("DONE");
  kv->Finalize();
  return 0;
}

// A server dies between rounds and does not come back: the next round's call must fail, naming it, once
// the wait for its return (the heartbeat timeout) is over — not hang.
int RoundThenExpectServerDeath() {
  auto kv = Join("dist_sync");
  const TShape shape{5000};  // split over both servers
  kv->Init({0}, {dist_test::Filled(shape, 0.f)});
  NDArray out(shape, Context::CPU(0));
  kv->PushPull({0}, {dist_test::Filled(shape, 1.f)}, {out});
  dist_test::ExpectValues("round 1", out.ToVector<float>(), std::vector<float>(5000, 2.f));
  Say("READY");
  AwaitGo();
  kv->PushPull({0}, {dist_test::Filled(shape, 1.f)}, {out});
  try {
    out.WaitToRead();
  } catch (const Error& e) {
    const std::string what = e.what();
    Say("FAILED AS PROMISED: " + what);
    if (what.find("server 1") == std::string::npos || what.find("died") == std::string::npos) {
      std::fprintf(stderr, "the error does not name server 1 as dead: %s\n", what.c_str());
      return 1;
    }
    kv->Finalize();  // this worker's own calls failed, but it leaves in order
    return 0;
  }
  std::fprintf(stderr, "round 2 completed although server 1 died\n");
  return 1;
}

// A worker leaves, then a server restarts: the restarted server must know that worker is gone (from the
// scheduler), or the next round would wait for it forever. Rank 1 leaves after 2 rounds and a checkpoint;
// rank 0 says READY, waits for the restart (GO), then runs a round alone.
int LeaveThenRestart() {
  auto kv = Join("dist_sync");
  Say("RANK " + std::to_string(kv->rank()));
  const TShape shape{5000};  // split over both servers
  kv->Init({0}, {dist_test::Filled(shape, 0.f)});
  NDArray out(shape, Context::CPU(0));
  for (int round = 1; round <= 2; ++round) {
    kv->PushPull({0}, {dist_test::Filled(shape, 1.f + static_cast<float>(kv->rank()))}, {out});
    dist_test::ExpectValues("round " + std::to_string(round), out.ToVector<float>(), std::vector<float>(5000, 3.f));
  }
  kv->Barrier();
  if (kv->rank() == 0) kv->Checkpoint();
  kv->Barrier();
  if (kv->rank() == 1) {
    kv->Finalize();  // this worker leaves in order
    return 0;
  }
  Say("READY");
  AwaitGo();
  kv->PushPull({0}, {dist_test::Filled(shape, 5.f)}, {out});
  dist_test::ExpectValues("the round after the restart", out.ToVector<float>(), std::vector<float>(5000, 5.f));
  kv->Finalize();
  return 0;
}

// For `troupe launch` with any number of workers: 3 PushPull rounds, each worker pushing ones; the pulled
// value is the number of workers.
int AnyWorkers() {
  auto kv = Join("dist_sync");
  kv->Init({0}, {dist_test::Filled(TShape{4}, 0.f)});
  NDArray out(TShape{4}, Context::CPU(0));
  for (int round = 1; round <= 3; ++round) {
    kv->PushPull({0}, {dist_test::Filled(TShape{4}, 1.f)}, {out});
    dist_test::ExpectValues("round " + std::to_string(round), out.ToVector<float>(),
                            std::vector<float>(4, static_cast<float>(kv->num_workers())));
  }
  Say("worker rank " + std::to_string(kv->rank()) + " of " + std::to_string(kv->num_workers()) + ": 3 rounds exact");
  kv->Finalize();
  return 0;
}

// For the shell's cluster test (tests/kvstore/shell_cluster_test.cc): key 0 (4 floats) and key 1 (1500,
// split over the servers when the big-array bound is 1000), one round each (worker r pushes r + 1 into key
// 0 and ones into key 1), READY, then waits for a line on the FIFO named by TROUPE_TEST_FIFO (opening it
// blocks until the test opens it for writing; launch gives workers no stdin), takes part in one barrier
// when `barrier` (push_wait_barrier) and leaves in order.
int PushThenWait(bool barrier) {
  const char* fifo = std::getenv("TROUPE_TEST_FIFO");
  if (fifo == nullptr) throw Error("push_then_wait needs TROUPE_TEST_FIFO");
  auto kv = Join("dist_sync");
  kv->Init({0, 1}, {dist_test::Filled(TShape{4}, 0.f), dist_test::Filled(TShape{1500}, 0.f)});
  NDArray a(TShape{4}, Context::CPU(0)), b(TShape{1500}, Context::CPU(0));
  kv->PushPull({0}, {dist_test::Filled(TShape{4}, static_cast<float>(kv->rank() + 1))}, {a});
  kv->PushPull({1}, {dist_test::Filled(TShape{1500}, 1.f)}, {b});
  a.WaitToRead();
  b.WaitToRead();
  Say("READY");
  std::ifstream go(fifo);
  std::string line;
  std::getline(go, line);
  if (barrier) kv->Barrier();
  kv->Finalize();
  return 0;
}

// A well-behaved worker while the test attacks the nodes' ports: READY, wait for GO, then rounds.
int ServeWhileAttacked() {
  auto kv = Join("dist_sync");
  kv->Init({0}, {dist_test::Filled(TShape{64}, 0.f)});
  Say("READY");
  AwaitGo();
  NDArray out(TShape{64}, Context::CPU(0));
  for (int r = 1; r <= 3; ++r) {
    kv->PushPull({0}, {dist_test::Filled(TShape{64}, static_cast<float>(r))}, {out});
    dist_test::ExpectValues("round " + std::to_string(r), out.ToVector<float>(), std::vector<float>(64, static_cast<float>(r)));
  }
  kv->Finalize();
  return 0;
}

// A worker with the wrong token: joining must fail with the refusal.
int ExpectRefused() {
  try {
    Join("dist_sync");
  } catch (const Error& e) {
    Say(std::string("REFUSED: ") + e.what());
    return std::string(e.what()).find("wrong cluster token") != std::string::npos ? 0 : 1;
  }
  std::fprintf(stderr, "a worker with the wrong token joined\n");
  return 1;
}

// Milliseconds since `t0`.
long long MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
}

// Runs `call`, which must throw troupe::Error containing every one of `want`: prints "FAILED AS PROMISED
// after N ms: <message>" and returns 0; 1 when it did not throw or the message lacks one of them.
int ExpectFailure(const std::string& what, const std::function<void()>& call, const std::vector<std::string>& want) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    call();
  } catch (const Error& e) {
    const std::string message = e.what();
    Say("FAILED AS PROMISED after " + std::to_string(MsSince(t0)) + " ms: " + message);
    for (const std::string& w : want) {
      if (message.find(w) == std::string::npos) {
        std::fprintf(stderr, "%s: the error does not say '%s': %s\n", what.c_str(), w.c_str(), message.c_str());
        return 1;
      }
    }
    return 0;
  }
  std::fprintf(stderr, "%s succeeded, but had to fail\n", what.c_str());
  return 1;
}

// The workers' models differ (TROUPE_TEST_MODEL: "big" makes key 1 twice as long, "fewer" leaves key 1
// out): Init must fail on every worker, naming the key, both ranks and both shapes (the test checks the
// time).
int MismatchedInit() {
  auto kv = Join("dist_sync");
  const char* model = std::getenv("TROUPE_TEST_MODEL");
  const std::string m = model != nullptr ? model : "";
  std::vector<int> keys{0, 1};
  std::vector<NDArray> values{dist_test::Filled(TShape{4}, 0.f), dist_test::Filled(TShape{m == "big" ? 16 : 8}, 0.f)};
  if (m == "fewer") {
    keys.pop_back();
    values.pop_back();
  }
  std::vector<std::string> want{"models differ", "key 1", "worker 0", "worker 1"};
  if (m == "big") want.insert(want.end(), {"float32(8)", "float32(16)"});
  if (m == "fewer") want.push_back("but not by worker");
  const int status = ExpectFailure("Init of differing models", [&] { kv->Init(keys, values); }, want);
  if (status != 0) return status;
  return ExpectFailure("Finalize after the failed Init", [&] { kv->Finalize(); }, {"models differ"});
}

// A worker that fails after one round (returns 1 without Finalize, as a program that threw would).
int FailAfterRound() {
  auto kv = Join("dist_sync");
  kv->Init({0}, {dist_test::Filled(TShape{4}, 0.f)});
  NDArray out(TShape{4}, Context::CPU(0));
  kv->PushPull({0}, {dist_test::Filled(TShape{4}, 1.f)}, {out});
  out.WaitToRead();
  Say("FAILING");
  std::fprintf(stderr, "fail_after_round: failing on purpose\n");
  return 1;
}

// The other worker trains on: its next round must fail, naming the failed worker, within a few heartbeat
// intervals; so must its leave.
int RoundsUntilOtherFails() {
  auto kv = Join("dist_sync");
  kv->Init({0}, {dist_test::Filled(TShape{4}, 0.f)});
  NDArray out(TShape{4}, Context::CPU(0));
  kv->PushPull({0}, {dist_test::Filled(TShape{4}, 1.f)}, {out});
  out.WaitToRead();
  const std::string other = "worker " + std::to_string(1 - kv->rank());
  const int status = ExpectFailure("the round after the other worker failed", [&] {
    for (int r = 0; r < 1000; ++r) {
      kv->PushPull({0}, {dist_test::Filled(TShape{4}, 1.f)}, {out});
      out.WaitToRead();
    }
  }, {other, "failed"});
  if (status != 0) return status;
  return ExpectFailure("Finalize of the failed job", [&] { kv->Finalize(); }, {other, "failed"});
}

// Rank 0 waits in a sync round, rank 1 in a barrier: both alive, no progress. Both must fail once the
// progress timeout expires, with an error saying who did not arrive.
int PushVersusBarrier() {
  auto kv = Join("dist_sync");
  kv->Init({0}, {dist_test::Filled(TShape{4}, 0.f)});
  NDArray out(TShape{4}, Context::CPU(0));
  Say("READY");
  if (kv->rank() == 0) {
    return ExpectFailure("a round the other worker never joins", [&] {
      kv->PushPull({0}, {dist_test::Filled(TShape{4}, 1.f)}, {out});
      out.WaitToRead();
    }, {"made no progress", "TROUPE_PROGRESS_TIMEOUT_MS"});
  }
  return ExpectFailure("a barrier the other worker never reaches", [&] { kv->Barrier(); },
                       {"made no progress", "TROUPE_PROGRESS_TIMEOUT_MS"});
}

// Heartbeats: one round, READY, wait for GO (the test may stop and resume this process meanwhile), one
// more round, leave in order.
int TwoRoundsWithPause() {
  NDArray out(TShape{4}, Context::CPU(0));
  auto kv = RoundThenGo(&out);
  kv->PushPull({0}, {dist_test::Filled(TShape{4}, 1.f)}, {out});
  dist_test::ExpectValues("the round after the pause", out.ToVector<float>(), std::vector<float>(4, 2.f));
  kv->Finalize();
  Say("DONE");
  return 0;
}

// Fault injection: prints its rank, then PushPull rounds until one fails (the test injects the fault);
// 0 when one failed within 1000 rounds, with "FAILED AS PROMISED after N ms: <error>".
int RoundsUntilFailure() {
  auto kv = Join("dist_sync");
  Say("RANK " + std::to_string(kv->rank()));
  kv->Init({0}, {dist_test::Filled(TShape{256}, 0.f)});
  NDArray out(TShape{256}, Context::CPU(0));
  return ExpectFailure("1000 rounds under fault injection", [&] {
    for (int r = 0; r < 1000; ++r) {
      kv->PushPull({0}, {dist_test::Filled(TShape{256}, 1.f)}, {out});
      out.WaitToRead();
    }
  }, {});
}

// A server dies mid-training and comes back from its checkpoint: 30 rounds of sgd with momentum on the
// servers over a split key and a small one, each round's value checked exactly (as TrainAcrossServerRestart
// does, but the test kills the server while the rounds run: pushes are in flight, and the checkpoint is
// some rounds behind). Prints "ROUND r" after each round.
int TrainThroughServerDeath() {
  auto kv = Join("dist_sync");
  const TShape shape{5000};  // over the test's bound of 1000: split over both servers
  kv->Init({0, 1}, {dist_test::Filled(shape, 1.f), dist_test::Filled(TShape{3}, 1.f)});
  kv->SetOptimizer(OptimizerConfig("sgd", {{"learning_rate", "0.01"}, {"momentum", "0.9"}}));
  const float grad = 1.f + static_cast<float>(kv->rank());  // the sum of both workers' gradients is 3
  NDArray out(shape, Context::CPU(0)), out1(TShape{3}, Context::CPU(0));
  float w = 1.f, mom = 0.f;
  for (int r = 1; r <= 30; ++r) {
    kv->PushPull({0, 1}, {dist_test::Filled(shape, grad), dist_test::Filled(TShape{3}, grad)}, {out, out1});
    mom = 0.9f * mom - 0.01f * 3.f;
    w += mom;
    dist_test::ExpectValues("round " + std::to_string(r) + " key 0", out.ToVector<float>(), std::vector<float>(5000, w));
    dist_test::ExpectValues("round " + std::to_string(r) + " key 1", out1.ToVector<float>(), std::vector<float>(3, w));
    Say("ROUND " + std::to_string(r));
  }
  kv->Finalize();
  Say("DONE");
  return 0;
}

// The chaos test's worker: TROUPE_CHAOS_ROUNDS (default 60) dist_sync rounds over a split key and two
// small ones, no optimizer, so that every pulled value must equal the sum of both workers' pushes of its
// round: worker w pushes (w + 1) * r + key / 2 in round r, and the sum is 3 r + key. Prints "ROUND r".
int ChaosRounds() {
  const char* n = std::getenv("TROUPE_CHAOS_ROUNDS");
  const int rounds = n != nullptr ? std::atoi(n) : 60;
  auto kv = Join("dist_sync");
  const std::vector<int> keys{0, 1, 2};
  const std::vector<std::int64_t> sizes{3000, 8, 100};  // key 0 over the test's bound of 1000: split
  std::vector<NDArray> zeros, outs;
  for (std::int64_t size : sizes) {
    zeros.push_back(dist_test::Filled(TShape{size}, 0.f));
    outs.emplace_back(TShape{size}, Context::CPU(0));
  }
  kv->Init(keys, zeros);
  const float w = static_cast<float>(kv->rank());
  for (int r = 1; r <= rounds; ++r) {
    std::vector<NDArray> pushes;
    for (std::size_t k = 0; k < keys.size(); ++k) {
      pushes.push_back(dist_test::Filled(TShape{sizes[k]}, (w + 1.f) * static_cast<float>(r) + 0.5f * static_cast<float>(k)));
    }
    kv->PushPull(keys, pushes, outs);
    for (std::size_t k = 0; k < keys.size(); ++k) {
      dist_test::ExpectValues("round " + std::to_string(r) + " key " + std::to_string(k), outs[k].ToVector<float>(),
                              std::vector<float>(static_cast<std::size_t>(sizes[k]), 3.f * static_cast<float>(r) +
                                                                                        static_cast<float>(k)));
    }
    Say("ROUND " + std::to_string(r));
  }
  kv->Finalize();
  Say("DONE");
  return 0;
}

int Main(int argc, char** argv) {
  if (const int status = RunDistRoleFromEnv(); status >= 0) return status;
  if (argc < 2) {
    std::fprintf(stderr, "usage: DMLC_ROLE=worker dist_node <scenario>\n");
    return 2;
  }
  const std::string name = argv[1];
  try {
    if (name == "round_then_block") return RoundThenBlock();
    if (name == "round_then_expect_death") return RoundThenExpectDeath();
    if (name == "train_across_server_restart") return TrainAcrossServerRestart();
    if (name == "serve_while_attacked") return ServeWhileAttacked();
    if (name == "leave_then_restart") return LeaveThenRestart();
    if (name == "any_workers") return AnyWorkers();
    if (name == "push_then_wait") return PushThenWait(false);
    if (name == "push_wait_barrier") return PushThenWait(true);
    if (name == "round_then_expect_server_death") return RoundThenExpectServerDeath();
    if (name == "expect_refused") return ExpectRefused();
    if (name == "mismatched_init") return MismatchedInit();
    if (name == "fail_after_round") return FailAfterRound();
    if (name == "rounds_until_other_fails") return RoundsUntilOtherFails();
    if (name == "push_versus_barrier") return PushVersusBarrier();
    if (name == "two_rounds_with_pause") return TwoRoundsWithPause();
    if (name == "rounds_until_failure") return RoundsUntilFailure();
    if (name == "train_through_server_death") return TrainThroughServerDeath();
    if (name == "chaos_rounds") return ChaosRounds();
    const auto& all = dist_test::Scenarios();
    auto it = all.find(name);
    if (it == all.end()) {
      std::fprintf(stderr, "dist_node: unknown scenario '%s'\n", name.c_str());
      return 2;
    }
    const char* dir = std::getenv("TROUPE_TEST_DIR");
    auto kv = Join(dist_test::ScenarioType(name));
    it->second(*kv, dir != nullptr ? dir : "");
    kv->Finalize();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist_node %s: %s\n", name.c_str(), e.what());
    return 1;
  }
}

}  // namespace
}  // namespace troupe

int main(int argc, char** argv) { return troupe::Main(argc, argv); }
