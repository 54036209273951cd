// The distributed KVStore as real processes on 127.0.0.1: a scheduler, servers and workers, each
// its own process (the dist_node program), ephemeral ports, every process reaped at the end.
//   - the semantic scenarios of dist_scenarios.h, all exit codes 0 (uneven batches included);
//   - kill -9 of a worker mid-round: the other worker's pull fails naming it, within a bound (a stopped
//     worker, SIGSTOP, is in kvstore_faults_test, with both sides of the heartbeat timeout);
//   - kill -9 of a server, restarted from its checkpoint: training continues with the exact values; kill -9
//     of a server that stays dead: the workers' calls fail naming it, within a bound;
//   - a wrong token is refused, and hostile bytes on the server's and the scheduler's ports leave a
//     well-behaved worker served;
//   - an observer (ClusterObserver, what `troupe shell --connect` uses) sees every node, the keys, a value
//     the workers pushed and the servers' counters, and a killed worker as dead within the heartbeat timeout.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kvstore/dist.h"
#include "kvstore/net/internal/frame_codec.h"
#include "proc/socket.h"
#include "tests/kvstore/dist_process_harness.h"

namespace troupe {
namespace {

using dist_test::Cluster;
using dist_test::Proc;
using dist_test::kHeartbeatIntervalMs;
using dist_test::kHeartbeatTimeoutMs;
using dist_test::kLineTimeoutMs;
using Clock = std::chrono::steady_clock;

class DistProcessScenario : public ::testing::TestWithParam<std::string> {};

TEST_P(DistProcessScenario, PassesAcrossProcesses) {
  const std::string name = GetParam();
  const auto dir = std::filesystem::temp_directory_path() / ("troupe_dist_proc_" + std::to_string(::getpid()) + "_" + name);
  Cluster c(2, 2, {{"TROUPE_KVSTORE_CHECKPOINT_DIR", dir.string()}});  // the servers' (big_array checkpoints)
  auto w0 = c.Worker(name, {{"TROUPE_TEST_DIR", dir.string()}});
  auto w1 = c.Worker(name, {{"TROUPE_TEST_DIR", dir.string()}});
  EXPECT_EQ(w0->Wait(), 0);
  EXPECT_EQ(w1->Wait(), 0);
  EXPECT_EQ(c.scheduler->Wait(), 0);
  for (auto& s : c.servers) EXPECT_EQ(s->Wait(), 0);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(All, DistProcessScenario,
                         ::testing::Values("sync_rounds", "sync_optimizer", "async_sgd", "barrier", "big_array",
                                           "compression", "string_keys", "uneven_batches"));

// kill -9 of one worker while the other waits in a sync round.
void DeadWorker(int sig, int bound_ms) {
  Cluster c(2, 2);
  auto victim = c.Worker("round_then_block");
  auto survivor = c.Worker("round_then_expect_death");
  victim->WaitLine("READY");
  survivor->WaitLine("READY");
  const auto killed = Clock::now();
  victim->Signal(sig);
  const int status = survivor->Wait(bound_ms);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed).count();
  EXPECT_EQ(status, 0) << "the survivor hung or failed (status -1 = still running after " << bound_ms << " ms)";
  EXPECT_LE(ms, bound_ms);
  std::printf("signal %d: the survivor's call failed and it exited %lld ms after the signal\n", sig,
              static_cast<long long>(ms));
  victim->Signal(SIGKILL);
  EXPECT_EQ(victim->Wait(), 128 + SIGKILL);
  EXPECT_EQ(c.scheduler->Wait(), 1);  // a worker died: the run did not end in order, and says so
  for (auto& s : c.servers) EXPECT_EQ(s->Wait(), 0);
}

TEST(DistProcess, KilledWorkerFailsTheOthersCallsWithoutHanging) {
  // The connection closes at once; the bound is the heartbeat timeout.
  DeadWorker(SIGKILL, kHeartbeatTimeoutMs);
}

TEST(DistProcess, KilledServerRestartsFromItsCheckpoint) {
  const auto dir = std::filesystem::temp_directory_path() / ("troupe_dist_ckpt_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  Cluster c(2, 2, {{"TROUPE_KVSTORE_CHECKPOINT_DIR", dir.string()}});
  auto w0 = c.Worker("train_across_server_restart");
  auto w1 = c.Worker("train_across_server_restart");
  w0->WaitLine("READY");
  w1->WaitLine("READY");
  c.servers[1]->Signal(SIGKILL);
  EXPECT_EQ(c.servers[1]->Wait(), 128 + SIGKILL);
  c.StartServer(1);  // same rank, same checkpoint directory
  c.servers[1]->WaitLine("troupe server 1: started");
  w0->Write("GO\n");
  w1->Write("GO\n");
  EXPECT_EQ(w0->Wait(), 0);
  EXPECT_EQ(w1->Wait(), 0);
  EXPECT_EQ(c.scheduler->Wait(), 0);  // the server came back: an orderly end
  for (auto& s : c.servers) EXPECT_EQ(s->Wait(), 0);
  std::filesystem::remove_all(dir);
}

TEST(DistProcess, KilledServerFailsTheWorkersCallsWithoutHanging) {
  Cluster c(2, 2);
  auto w0 = c.Worker("round_then_expect_server_death");
  auto w1 = c.Worker("round_then_expect_server_death");
  w0->WaitLine("READY");
  w1->WaitLine("READY");
  c.servers[1]->Signal(SIGKILL);
  EXPECT_EQ(c.servers[1]->Wait(), 128 + SIGKILL);
  const auto go = Clock::now();
  w0->Write("GO\n");
  w1->Write("GO\n");
  // The calls wait up to the heartbeat timeout for the server to come back, then fail; leaving waits as long
  // for the dead server's answer. Bound: both, plus start-up slack.
  const int bound_ms = 2 * kHeartbeatTimeoutMs + 3000;
  EXPECT_EQ(w0->Wait(bound_ms), 0);
  EXPECT_EQ(w1->Wait(bound_ms), 0);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - go).count();
  EXPECT_LE(ms, bound_ms);
  std::printf("server killed: both workers' calls failed and they exited %lld ms after GO\n", static_cast<long long>(ms));
  EXPECT_EQ(c.scheduler->Wait(), 1);  // a server was lost for good: not an orderly end
  EXPECT_EQ(c.servers[0]->Wait(), 0);
}

TEST(DistProcess, RestartedServerKnowsWhichWorkersLeft) {
  const auto dir = std::filesystem::temp_directory_path() / ("troupe_dist_leave_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  Cluster c(2, 2, {{"TROUPE_KVSTORE_CHECKPOINT_DIR", dir.string()}});
  std::unique_ptr<Proc> w[2] = {c.Worker("leave_then_restart"), c.Worker("leave_then_restart")};
  const int first_rank = std::stoi(w[0]->WaitLine("RANK ").substr(5));
  w[1]->WaitLine("RANK ");
  Proc& stays = *w[first_rank == 0 ? 0 : 1];
  Proc& leaves = *w[first_rank == 0 ? 1 : 0];
  EXPECT_EQ(leaves.Wait(), 0);
  stays.WaitLine("READY");
  c.servers[1]->Signal(SIGKILL);
  EXPECT_EQ(c.servers[1]->Wait(), 128 + SIGKILL);
  c.StartServer(1);
  c.servers[1]->WaitLine("troupe server 1: started");
  stays.Write("GO\n");
  EXPECT_EQ(stays.Wait(2 * kHeartbeatTimeoutMs + 3000), 0) << "the round after the restart hung or failed";
  EXPECT_EQ(c.scheduler->Wait(), 0);
  for (auto& s : c.servers) EXPECT_EQ(s->Wait(), 0);
  std::filesystem::remove_all(dir);
}

// Sends `bytes`, then waits for the peer to close the connection (it refused them).
bool RefusedAndClosed(int port, const std::vector<std::byte>& bytes) {
  const int fd = proc::ConnectLoopback(port);
  if (fd < 0) return false;
  std::size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;
    off += static_cast<std::size_t>(n);
  }
  char buf[4096];
  pollfd p{fd, POLLIN, 0};
  bool closed = false;
  while (::poll(&p, 1, kLineTimeoutMs) > 0) {
    if (::recv(fd, buf, sizeof buf, 0) <= 0) {
      closed = true;
      break;
    }
  }
  ::close(fd);
  return closed;
}

TEST(DistProcess, WrongTokenAndHostileClientsAreRefused) {
  Cluster c(1, 1);
  auto intruder = c.Worker("expect_refused", {{"TROUPE_CLUSTER_TOKEN", "not-the-token"}});
  EXPECT_EQ(intruder->Wait(), 0);
  auto worker = c.Worker("serve_while_attacked");
  worker->WaitLine("READY");
  std::mt19937 rng(7);
  std::printf("hostile-client seed 7\n");
  for (int port : {c.server_ports[0], c.scheduler_port}) {
    std::vector<std::byte> random(8192);
    for (auto& b : random) b = static_cast<std::byte>(rng() & 0xff);
    EXPECT_TRUE(RefusedAndClosed(port, random)) << "random bytes, port " << port;
    std::vector<std::byte> oversized(8);
    const std::uint64_t n = std::uint64_t{1} << 36;
    std::memcpy(oversized.data(), &n, 8);
    EXPECT_TRUE(RefusedAndClosed(port, oversized)) << "oversized prefix, port " << port;
    const auto hello = net::EncodeFrame(net::Hello{net::Role::kWorker, 0, net::kProtocolVersion, "127.0.0.1", 0});
    EXPECT_TRUE(RefusedAndClosed(port, hello)) << "a hello without authenticating, port " << port;
    // A truncated frame: half a hello, then the client goes away.
    const int fd = proc::ConnectLoopback(port);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(::send(fd, hello.data(), hello.size() / 2, MSG_NOSIGNAL), static_cast<ssize_t>(hello.size() / 2));
    ::close(fd);
  }
  worker->Write("GO\n");
  EXPECT_EQ(worker->Wait(), 0);
  EXPECT_EQ(c.scheduler->Wait(), 0);
  EXPECT_EQ(c.servers[0]->Wait(), 0);
}

TEST(DistProcess, ObserverSeesTheClusterAndAKilledWorkerDead) {
  Cluster c(2, 2);
  EXPECT_THROW(ClusterObserver::Connect("127.0.0.1", c.scheduler_port, "not-the-token"), Error);
  auto victim = c.Worker("round_then_block");
  auto other = c.Worker("round_then_block");
  victim->WaitLine("READY");
  other->WaitLine("READY");
  auto obs = ClusterObserver::Connect("127.0.0.1", c.scheduler_port, "process-test-token");

  std::string cluster;
  const auto nodes = obs->Nodes(&cluster);
  EXPECT_EQ(cluster, "running");
  std::map<std::string, int> alive;
  for (const ClusterNodeInfo& n : nodes) alive[n.role] += n.state == "alive" ? 1 : 0;
  EXPECT_EQ(alive["scheduler"], 1);
  EXPECT_EQ(alive["server"], 2);
  EXPECT_EQ(alive["worker"], 2);
  for (const ClusterNodeInfo& n : nodes) {
    if (n.role == "server") {
      EXPECT_EQ(n.address, "127.0.0.1:" + std::to_string(c.server_ports[static_cast<std::size_t>(n.rank)]));
    }
  }

  // Both workers pushed 1s once (no optimizer: the round's sum is the value).
  const auto keys = obs->Keys();
  ASSERT_EQ(keys.size(), 1u);
  EXPECT_EQ(keys[0].key, 0);
  EXPECT_EQ(keys[0].shape, (std::vector<std::int64_t>{4}));
  EXPECT_EQ(obs->Pull(0).ToVector<float>(), std::vector<float>(4, 2.f));
  EXPECT_THROW(obs->Pull(7), Error);
  std::int64_t pushes = 0;
  for (const ClusterServerStats& st : obs->Stats()) {
    pushes += st.pushes;
    EXPECT_EQ(st.workers, 2);
  }
  EXPECT_EQ(pushes, 2);

  const auto killed = Clock::now();
  victim->Signal(SIGKILL);
  EXPECT_EQ(victim->Wait(), 128 + SIGKILL);
  bool dead = false;
  while (!dead && Clock::now() - killed < std::chrono::milliseconds(kHeartbeatTimeoutMs)) {
    std::string broken;
    int n_dead = 0;
    for (const ClusterNodeInfo& n : obs->Nodes(nullptr, &broken)) n_dead += n.role == "worker" && n.state == "dead";
    dead = n_dead == 1 && broken.find("died") != std::string::npos;
    if (!dead) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling the live answer, not syncing
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed).count();
  EXPECT_TRUE(dead) << "the observer did not see the killed worker dead within " << kHeartbeatTimeoutMs << " ms";
  std::printf("observer: the killed worker showed as dead %lld ms after kill -9\n", static_cast<long long>(ms));
  obs.reset();
  other->Signal(SIGKILL);
  EXPECT_EQ(other->Wait(), 128 + SIGKILL);
  EXPECT_EQ(c.scheduler->Wait(), 1);
  for (auto& sv : c.servers) EXPECT_EQ(sv->Wait(), 0);
}

}  // namespace
}  // namespace troupe
