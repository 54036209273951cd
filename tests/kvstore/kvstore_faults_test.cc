// The distributed KVStore under faults and hostile peers, as real processes on 127.0.0.1 (dist_node as
// scheduler, servers and workers; tests/kvstore/dist_process_harness.h). Each case ends in a clear error or
// a finished job, in bounded time:
//   - admission before allocation: unauthenticated connections held open, 1 GiB length prefixes and a
//     64 MiB frame before any authentication cost the node at most 64 KiB each (its VmRSS and VmHWM from
//     /proc), and the worker is served throughout;
//   - 1000 idle connections opened before the servers and workers: the cluster still forms, and every one
//     of them is closed (to make room, or after the hello timeout);
//   - a missing token: a role refuses to start unless insecure (then warns), and insecure and tokened nodes
//     do not mix;
//   - a stolen rank: a second server claiming a live server's rank is refused, and the job goes on;
//   - the workers' models differ at Init (a longer key, a missing key): every worker fails within 2 s,
//     naming the key, both ranks and both shapes;
//   - a failing worker (exits without KVStore::Finalize): the other worker's next round fails naming it;
//   - no progress with every node alive (one worker in a sync round, the other in a barrier): both fail once
//     the progress timeout expires, naming who did not arrive, not before;
//   - fault injection (TROUPE_FAULT_*): a connection closed after N frames fails the job naming the worker;
//     dropped tensor frames end in a progress error, not a hang; a server killed after N updates fails the
//     calls naming it; delayed frames still give exact rounds;
//   - heartbeats on both sides of the timeout: a worker stopped (SIGSTOP) is declared dead no earlier than
//     the timeout minus one interval and no later than the timeout plus one interval (and slack); a worker
//     stopped for half the timeout and resumed is not, and its round completes.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "proc/socket.h"
#include "tests/kvstore/dist_process_harness.h"

namespace troupe {
namespace {

using dist_test::Cluster;
using dist_test::Env;
using dist_test::kHeartbeatIntervalMs;
using dist_test::kHeartbeatTimeoutMs;
using dist_test::Proc;
using Clock = std::chrono::steady_clock;

long long MsSince(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
}

// A field of /proc/<pid>/status in KiB ("VmRSS", "VmHWM"), or -1.
long long StatusKiB(int pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  }
  return -1;
}

// Waits until the peer closes `fd` (reading and dropping what it sends) or `deadline` passes; true when it
// closed.
bool ClosedBy(int fd, Clock::time_point deadline) {
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return true;
  }
}

// Reads the node's first frame on a new connection (its authentication challenge: the node has accepted
// and set up the connection); false when none came within 10 s.
bool ReadsChallenge(int fd) {
  std::uint64_t n = 0;
  std::size_t got = 0;
  std::vector<char> buf(8);
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (got < 8 + n) {
    pollfd p{fd, POLLIN, 0};
    if (Clock::now() > deadline || ::poll(&p, 1, 100) < 0) return false;
    if ((p.revents & POLLIN) == 0) continue;
    if (got == 8) buf.resize(8 + n);
    const ssize_t r = ::recv(fd, buf.data() + got, (got < 8 ? 8 : 8 + n) - got, 0);
    if (r <= 0) return false;
    got += static_cast<std::size_t>(r);
    if (got == 8) {
      std::memcpy(&n, buf.data(), 8);
      if (n > 4096) return false;
    }
  }
  return true;
}

void SendBytes(int fd, const void* data, std::size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n <= 0) return;  // the node closed on us: that is the point
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

// This process holds many sockets in some tests.
void RaiseDescriptorLimit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &r);
  }
}

TEST(DistFaults, StrangersCostTheNodeNoMemoryBeforeAuthenticating) {
  RaiseDescriptorLimit();
  Cluster c(1, 1, {{"TROUPE_HELLO_TIMEOUT_MS", "20000"}});
  auto worker = c.Worker("serve_while_attacked");
  worker->WaitLine("READY");
  constexpr int kHeld = 100;         // below the pending cap (128): all held at once
  constexpr int kHugePrefixes = 20;  // 1 GiB announced, nothing sent
  constexpr int kBigFrames = 20;     // 64 MiB announced, 4 MiB sent
  constexpr long long kPerConnectionKiB = 64;
  const struct {
    const char* name;
    int pid;
    int port;
  } nodes[] = {{"scheduler", c.scheduler->pid(), c.scheduler_port},
               {"server", c.servers[0]->pid(), c.server_ports[0]}};
  for (const auto& node : nodes) {
    const long long rss0 = StatusKiB(node.pid, "VmRSS"), hwm0 = StatusKiB(node.pid, "VmHWM");
    ASSERT_GT(rss0, 0);
    std::vector<int> held;
    for (int i = 0; i < kHeld; ++i) {
      held.push_back(proc::ConnectLoopback(node.port));
      ASSERT_GE(held.back(), 0);
    }
    // Once each connection got the node's challenge, the node has accepted and set it up.
    for (int fd : held) ASSERT_TRUE(ReadsChallenge(fd)) << node.name;
    const long long rss_held = StatusKiB(node.pid, "VmRSS");
    const std::vector<char> four_mib(std::size_t{4} << 20, 'x');
    for (int i = 0; i < kHugePrefixes + kBigFrames; ++i) {
      const int fd = proc::ConnectLoopback(node.port);
      ASSERT_GE(fd, 0);
      const std::uint64_t n = i < kHugePrefixes ? (std::uint64_t{1} << 30) : (std::uint64_t{64} << 20);
      SendBytes(fd, &n, 8);
      if (i >= kHugePrefixes) SendBytes(fd, four_mib.data(), four_mib.size());
      EXPECT_TRUE(ClosedBy(fd, Clock::now() + std::chrono::seconds(10))) << node.name << ": an oversized frame was kept";
      ::close(fd);
    }
    const long long rss1 = StatusKiB(node.pid, "VmRSS"), hwm1 = StatusKiB(node.pid, "VmHWM");
    std::printf("%s: VmRSS %lld KiB, %lld with %d unauthenticated connections held (+%lld), %lld after %d oversized "
                "frames; VmHWM %lld -> %lld KiB (+%lld)\n",
                node.name, rss0, rss_held, kHeld, rss_held - rss0, rss1, kHugePrefixes + kBigFrames, hwm0, hwm1,
                hwm1 - hwm0);
    EXPECT_LE(rss_held - rss0, kHeld * kPerConnectionKiB) << node.name;
    EXPECT_LE(hwm1 - hwm0, (kHeld + kHugePrefixes + kBigFrames) * kPerConnectionKiB) << node.name;
    for (int fd : held) ::close(fd);
  }
  worker->Write("GO\n");
  EXPECT_EQ(worker->Wait(), 0);
  c.ExpectEnd(0);
}

TEST(DistFaults, AThousandIdleConnectionsDoNotKeepTheClusterFromForming) {
  RaiseDescriptorLimit();
  constexpr int kIdle = 1000;
  constexpr int kHelloTimeoutMs = 2000;
  std::vector<int> idle;
  Clock::time_point opened;
  Cluster c(1, 2, {{"TROUPE_HELLO_TIMEOUT_MS", std::to_string(kHelloTimeoutMs)}}, [&](int port) {
    for (int i = 0; i < kIdle; ++i) {
      const int fd = proc::ConnectLoopback(port);
      if (fd >= 0) idle.push_back(fd);
    }
    opened = Clock::now();
  });
  ASSERT_EQ(static_cast<int>(idle.size()), kIdle);
  auto w0 = c.Worker("sync_rounds");
  auto w1 = c.Worker("sync_rounds");
  EXPECT_EQ(w0->Wait(), 0);
  EXPECT_EQ(w1->Wait(), 0);
  // Every idle connection is closed by the scheduler: most at once (more than the pending cap were waiting),
  // the rest once the hello timeout passed.
  int closed = 0;
  const auto deadline = opened + std::chrono::milliseconds(kHelloTimeoutMs + 5000);
  for (int fd : idle) {
    closed += ClosedBy(fd, deadline) ? 1 : 0;
    ::close(fd);
  }
  EXPECT_EQ(closed, kIdle);
  std::printf("%d idle connections: the cluster formed and trained; %d were closed by the scheduler within %d ms\n",
              kIdle, closed, kHelloTimeoutMs + 5000);
  c.ExpectEnd(0);
}

TEST(DistFaults, NodesWithoutATokenRefuseToStartUnlessInsecure) {
  Env env{{"DMLC_ROLE", "scheduler"}, {"DMLC_PS_ROOT_URI", "127.0.0.1"}, {"DMLC_PS_ROOT_PORT", "0"},
          {"TROUPE_CLUSTER_TOKEN", ""}};
  {
    Proc refused("scheduler", {}, env, /*merge_stderr=*/true);
    EXPECT_NE(refused.WaitLine("troupe scheduler: kvstore: no cluster token"), "");
    EXPECT_EQ(refused.Wait(), 1);
  }
  // Insecure on request: every node warns, and such a cluster works; a node with a token cannot join it.
  Cluster c(1, 2, {{"TROUPE_CLUSTER_TOKEN", ""}, {"TROUPE_INSECURE", "1"}});
  auto tokened = c.Worker("expect_refused", {{"TROUPE_CLUSTER_TOKEN", "a-token"}, {"TROUPE_INSECURE", "0"}});
  EXPECT_EQ(tokened->Wait(), 0);
  auto w0 = std::make_unique<Proc>("worker 0", std::vector<std::string>{"sync_rounds"},
                                   [&] { Env e = c.env; e["DMLC_ROLE"] = "worker"; return e; }(), true);
  auto w1 = c.Worker("sync_rounds");
  EXPECT_NE(w0->WaitLine("troupe worker: WARNING: running without a cluster token"), "");
  EXPECT_EQ(w0->Wait(), 0);
  EXPECT_EQ(w1->Wait(), 0);
  c.ExpectEnd(0);
}

TEST(DistFaults, AHeldServerRankCannotBeClaimed) {
  Cluster c(1, 1);
  auto worker = c.Worker("serve_while_attacked");
  worker->WaitLine("READY");
  Env s = c.env;
  s["DMLC_ROLE"] = "server";
  s["TROUPE_SERVER_RANK"] = "0";
  Proc thief("server 0 again", {}, s, /*merge_stderr=*/true);
  const std::string line = thief.WaitLine("troupe server 0: the scheduler refused this server");
  EXPECT_NE(line.find("server rank 0 is held by server 0"), std::string::npos) << line;
  EXPECT_EQ(thief.Wait(), 1);
  worker->Write("GO\n");  // the job goes on with the real server 0
  EXPECT_EQ(worker->Wait(), 0);
  c.ExpectEnd(0);
}

void DifferingModels(const std::string& model) {
  Cluster c(2, 2);
  auto a = c.Worker("mismatched_init");
  auto b = c.Worker("mismatched_init", {{"TROUPE_TEST_MODEL", model}});
  for (Proc* w : {a.get(), b.get()}) {
    const std::string line = w->WaitLine("FAILED AS PROMISED after ");
    ASSERT_NE(line, "");
    const long long ms = std::stoll(line.substr(std::strlen("FAILED AS PROMISED after ")));
    EXPECT_LE(ms, 2000) << line;
    std::printf("%s\n", line.c_str());
    EXPECT_EQ(w->Wait(), 0);
  }
  c.ExpectEnd(1);  // the job failed
}

TEST(DistFaults, DifferingShapesFailEveryWorkerAtInit) { DifferingModels("big"); }
TEST(DistFaults, AMissingKeyFailsEveryWorkerAtInit) { DifferingModels("fewer"); }

TEST(DistFaults, AFailingWorkerFailsTheJobForEveryone) {
  Cluster c(1, 2);
  auto failing = c.Worker("fail_after_round");
  auto other = c.Worker("rounds_until_other_fails");
  failing->WaitLine("FAILING");
  const auto t0 = Clock::now();
  EXPECT_EQ(failing->Wait(), 1);
  const std::string line = other->WaitLine("FAILED AS PROMISED after ");
  EXPECT_NE(line.find("ended without KVStore::Finalize"), std::string::npos) << line;
  EXPECT_LE(MsSince(t0), kHeartbeatTimeoutMs) << line;
  EXPECT_EQ(other->Wait(), 0);
  c.ExpectEnd(1);
}

TEST(DistFaults, NoProgressWithEveryoneAliveFailsEveryWaitingParty) {
  constexpr int kProgressMs = 2000;
  Cluster c(1, 2, {{"TROUPE_PROGRESS_TIMEOUT_MS", std::to_string(kProgressMs)}});
  auto a = c.Worker("push_versus_barrier");
  auto b = c.Worker("push_versus_barrier");
  a->WaitLine("READY");
  b->WaitLine("READY");
  for (Proc* w : {a.get(), b.get()}) {
    const std::string line = w->WaitLine("FAILED AS PROMISED after ");
    ASSERT_NE(line, "");
    std::printf("%s\n", line.c_str());
    const long long ms = std::stoll(line.substr(std::strlen("FAILED AS PROMISED after ")));
    // Not before the timeout; within a heartbeat interval (the check's period) and slack after it.
    EXPECT_GE(ms, kProgressMs - 50) << line;
    EXPECT_LE(ms, kProgressMs + kHeartbeatIntervalMs + 1500) << line;
    EXPECT_NE(line.find("did not"), std::string::npos) << line;
    EXPECT_EQ(w->Wait(), 0);
  }
  c.ExpectEnd(1);
}

TEST(DistFaults, AStoppedWorkerIsDeclaredDeadWithinOneIntervalOfTheTimeout) {
  Cluster c(1, 2);
  auto victim = c.Worker("round_then_block");
  auto survivor = c.Worker("round_then_expect_death");
  victim->WaitLine("READY");
  survivor->WaitLine("READY");
  const auto stopped = Clock::now();
  victim->Signal(SIGSTOP);
  const std::string line = survivor->WaitLine("FAILED AS PROMISED");
  const long long ms = MsSince(stopped);
  std::printf("SIGSTOP: the survivor's round failed %lld ms after the stop (timeout %d ms, interval %d ms): %s\n", ms,
              kHeartbeatTimeoutMs, kHeartbeatIntervalMs, line.c_str());
  // The victim's last heartbeat came at most one interval before the stop.
  EXPECT_GE(ms, kHeartbeatTimeoutMs - kHeartbeatIntervalMs) << line;
  EXPECT_LE(ms, kHeartbeatTimeoutMs + kHeartbeatIntervalMs + 500) << line;
  EXPECT_NE(line.find("no heartbeat for"), std::string::npos) << line;
  EXPECT_EQ(survivor->Wait(), 0);
  victim->Signal(SIGKILL);
  EXPECT_EQ(victim->Wait(), 128 + SIGKILL);
  EXPECT_EQ(c.scheduler->Wait(), 1);
}

TEST(DistFaults, AWorkerStoppedForHalfTheTimeoutIsNotDeclaredDead) {
  Cluster c(1, 2);
  auto paused = c.Worker("two_rounds_with_pause");
  auto other = c.Worker("two_rounds_with_pause");
  paused->WaitLine("READY");
  other->WaitLine("READY");
  paused->Signal(SIGSTOP);
  // The stimulus: the process stays stopped for half the timeout (this sleep is the fault, not a wait).
  std::this_thread::sleep_for(std::chrono::milliseconds(kHeartbeatTimeoutMs / 2));
  paused->Signal(SIGCONT);
  other->Write("GO\n");
  paused->Write("GO\n");
  EXPECT_NE(paused->WaitLine("DONE"), "");
  EXPECT_NE(other->WaitLine("DONE"), "");
  EXPECT_EQ(paused->Wait(), 0);
  EXPECT_EQ(other->Wait(), 0);
  c.ExpectEnd(0);  // nobody was declared dead
}

// Fault injection built into the transport (TROUPE_FAULT_*, docs/settings.md) drives the failure paths.

// The rank a rounds_until_failure worker printed.
int RankOf(Proc& w) {
  const std::string line = w.WaitLine("RANK ");
  return line.empty() ? -1 : std::stoi(line.substr(5));
}

TEST(DistFaults, InjectedConnectionCloseFailsTheJobNamingTheWorker) {
  Cluster c(1, 2);
  auto faulty = c.Worker("rounds_until_failure", {{"TROUPE_FAULT_CLOSE_AFTER", "40"}});
  auto other = c.Worker("rounds_until_failure");
  const int faulty_rank = RankOf(*faulty);
  RankOf(*other);
  const std::string mine = faulty->WaitLine("FAILED AS PROMISED");
  const std::string theirs = other->WaitLine("FAILED AS PROMISED");
  std::printf("%s\n%s\n", mine.c_str(), theirs.c_str());
  EXPECT_NE(mine.find("fault injection: closed after 40 frames"), std::string::npos) << mine;
  EXPECT_NE(theirs.find("worker " + std::to_string(faulty_rank)), std::string::npos) << theirs;
  EXPECT_EQ(faulty->Wait(), 0);
  EXPECT_EQ(other->Wait(), 0);
  EXPECT_EQ(c.scheduler->Wait(), 1);
}

TEST(DistFaults, DroppedTensorFramesEndInAClearErrorNotAHang) {
  constexpr int kProgressMs = 1500;
  Cluster c(1, 2, {{"TROUPE_PROGRESS_TIMEOUT_MS", std::to_string(kProgressMs)}});
  const auto t0 = Clock::now();
  auto lossy = c.Worker("rounds_until_failure", {{"TROUPE_FAULT_DROP", "0.5"}, {"TROUPE_FAULT_SEED", "7"}});
  auto other = c.Worker("rounds_until_failure");
  for (Proc* w : {lossy.get(), other.get()}) {
    const std::string line = w->WaitLine("FAILED AS PROMISED");
    std::printf("%s\n", line.c_str());
    EXPECT_NE(line.find("made no progress"), std::string::npos) << line;
    EXPECT_EQ(w->Wait(), 0);
  }
  // The first drop comes within a few rounds; then the progress check (every heartbeat interval) fires.
  EXPECT_LE(MsSince(t0), 20000);
  EXPECT_EQ(c.scheduler->Wait(), 1);
}

TEST(DistFaults, AServerKilledByFaultInjectionFailsTheCallsNamingIt) {
  Cluster c(1, 2, {{"TROUPE_FAULT_KILL_AFTER_ROUNDS", "5"}});
  auto a = c.Worker("rounds_until_failure");
  auto b = c.Worker("rounds_until_failure");
  EXPECT_EQ(c.servers[0]->Wait(), 128 + SIGKILL);
  const auto killed = Clock::now();
  for (Proc* w : {a.get(), b.get()}) {
    const std::string line = w->WaitLine("FAILED AS PROMISED");
    std::printf("%s\n", line.c_str());
    EXPECT_NE(line.find("server 0"), std::string::npos) << line;
    EXPECT_EQ(w->Wait(), 0);
  }
  // Calls wait up to the heartbeat timeout for the server to come back, then fail.
  EXPECT_LE(MsSince(killed), 2 * kHeartbeatTimeoutMs + 2000);
  EXPECT_EQ(c.scheduler->Wait(), 1);
}

TEST(DistFaults, DelayedFramesStillGiveExactRounds) {
  Cluster c(2, 2, {{"TROUPE_FAULT_DELAY_MS", "3"}});
  auto a = c.Worker("sync_rounds");
  auto b = c.Worker("sync_rounds");
  EXPECT_EQ(a->Wait(), 0);
  EXPECT_EQ(b->Wait(), 0);
  c.ExpectEnd(0);
}

// A server killed with SIGKILL while pushes are in flight, started again by hand from its checkpoint (a few
// rounds behind): the workers keep their calls, resend what the checkpoint lacks, and every round's value
// is exact; the job ends in order.
TEST(DistFaults, AServerKilledMidTrainingComesBackAndNothingIsLostOrAppliedTwice) {
  const auto dir = std::filesystem::temp_directory_path() / ("troupe_faults_restart_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  Cluster c(2, 2, {{"TROUPE_KVSTORE_CHECKPOINT_DIR", dir.string()}, {"TROUPE_KVSTORE_CHECKPOINT_EVERY", "5"}});
  auto a = c.Worker("train_through_server_death");
  auto b = c.Worker("train_through_server_death");
  ASSERT_NE(a->WaitLine("ROUND 8"), "");
  c.servers[1]->Signal(SIGKILL);
  EXPECT_EQ(c.servers[1]->Wait(), 128 + SIGKILL);
  c.StartServer(1);
  const std::string resumed = c.servers[1]->WaitLine("troupe server 1: resumed from its checkpoint");
  std::printf("%s\n", resumed.c_str());
  EXPECT_NE(a->WaitLine("DONE"), "");
  EXPECT_NE(b->WaitLine("DONE"), "");
  EXPECT_EQ(a->Wait(), 0);
  EXPECT_EQ(b->Wait(), 0);
  c.ExpectEnd(0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace troupe
