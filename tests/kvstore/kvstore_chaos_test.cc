// Chaos (label `chaos`): dist_sync training with fault injection on, as real processes on 127.0.0.1 — every
// server closes its workers' connections every few frames (TROUPE_FAULT_CLOSE_AFTER on the connections it
// accepted) and server 1 kills itself once (TROUPE_FAULT_KILL_AFTER_ROUNDS) and is started again from its
// checkpoint, while two workers run rounds in which every pulled value must equal the sum of both
// workers' pushes of its round (tests/kvstore/dist_node chaos_rounds). Nothing may be lost or applied
// twice: every value is checked, and every process must end in order.
//
// CI runs the short form (60 rounds); TROUPE_CHAOS_ROUNDS sets more (e.g. 2000 for a long soak).
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "tests/kvstore/dist_process_harness.h"

namespace troupe {
namespace {

using dist_test::Cluster;

TEST(DistChaos, SyncRoundsStayExactThroughDroppedConnectionsAndAServerKill) {
  const char* n = std::getenv("TROUPE_CHAOS_ROUNDS");
  const std::string rounds = n != nullptr ? n : "60";
  std::printf("chaos: %s rounds\n", rounds.c_str());
  const auto dir = std::filesystem::temp_directory_path() / ("troupe_chaos_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const dist_test::Env drops{{"TROUPE_FAULT_CLOSE_AFTER", "25"}, {"TROUPE_FAULT_CLOSE_ACCEPTED", "1"}};
  dist_test::Env kill = drops;
  kill["TROUPE_FAULT_KILL_AFTER_ROUNDS"] = "30";
  Cluster c(2, 2,
            {{"TROUPE_KVSTORE_CHECKPOINT_DIR", dir.string()},
             {"TROUPE_KVSTORE_CHECKPOINT_EVERY", "7"},
             {"TROUPE_CHAOS_ROUNDS", rounds}},
            {}, {{0, drops}, {1, kill}});
  auto a = c.Worker("chaos_rounds");
  auto b = c.Worker("chaos_rounds");
  // Server 1 kills itself once; it is started again (by hand here, as an operator or troupe launch would).
  EXPECT_EQ(c.servers[1]->Wait(), 128 + SIGKILL) << "server 1 did not kill itself";
  c.StartServer(1);
  EXPECT_NE(c.servers[1]->WaitLine("troupe server 1: resumed from its checkpoint"), "");
  EXPECT_NE(a->WaitLine("DONE", 600000), "");
  EXPECT_NE(b->WaitLine("DONE", 600000), "");
  EXPECT_EQ(a->Wait(), 0);
  EXPECT_EQ(b->Wait(), 0);
  c.ExpectEnd(0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace troupe
