// `troupe shell --connect` against real clusters on 127.0.0.1 (its cluster mode):
//   - a cluster started by `troupe launch -n 2 -s 2`: `nodes` lists the scheduler, both servers and both
//     workers as alive; `kv keys` shows a small key and a key split over both servers; `kv pull` shows the
//     values the workers pushed (and keeps one as a variable the shell computes with); `kv stats` counts the
//     pushes; a wrong token is refused; on a terminal, Ctrl-C interrupts a `barrier`; `barrier` waits until the workers complete their next barrier
//     round (the test releases them only once the scheduler logs the shell's wait); then the workers leave
//     and launch exits 0, and a shell still connected fails its commands at once (not after its timeout);
//   - a cluster started by `troupe launch --keep-going` (without it launch stops everything when a worker
//     dies): `barrier` on a round the workers do not reach fails after --timeout-ms; after kill -9 of a
//     worker, `nodes` shows it dead within the heartbeat timeout, and `barrier` says no round can come.
// The workers are tests/kvstore/dist_node's push_then_wait (push_wait_barrier in the launched cluster): they
// hold still on a FIFO until the test is done.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "proc/process.h"
#include "proc/socket.h"
#include "tools/shell/pty_harness.h"

namespace troupe {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

constexpr int kTimeoutMs = 60000;
constexpr int kHeartbeatTimeoutMs = 3000;
constexpr const char* kToken = "shell-cluster-test-token";

struct Result {
  int status = -1;
  std::string out;
};

class ShellCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("troupe_shell_cluster_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fifo_ = (dir_ / "go").string();
    ASSERT_EQ(::mkfifo(fifo_.c_str(), 0600), 0);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `troupe shell --connect 127.0.0.1:PORT -c TEXT` with the token (unless another is given; none: the
  // shell finds the file troupe launch wrote in TokenDir()).
  Result Shell(int port, const std::string& text, const std::string& token = kToken, const std::string& options = "") {
    const std::string out = (dir_ / "shell.txt").string();
    const std::string with = token.empty() ? "env -u TROUPE_CLUSTER_TOKEN TROUPE_TOKEN_DIR=" + TokenDir()
                                           : "TROUPE_CLUSTER_TOKEN=" + token;
    const std::string cmd = with + " " + TROUPE_CLI_PATH + " shell " + options + " --connect 127.0.0.1:" +
                            std::to_string(port) + " -c '" + text + "' > " + out + " 2>&1 < /dev/null";
    const int raw = std::system(cmd.c_str());
    Result r;
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    std::ifstream in(out);
    r.out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    return r;
  }

  // Releases every push_then_wait worker: opening the FIFO for writing unblocks their reads.
  void ReleaseWorkers() {
    std::ofstream go(fifo_);
    go << "GO\nGO\n";
  }

  std::map<std::string, std::string> Env() const {
    return {{"DMLC_PS_ROOT_URI", "127.0.0.1"},
            {"TROUPE_CLUSTER_TOKEN", kToken},
            {"TROUPE_HEARTBEAT_INTERVAL_MS", "300"},
            {"TROUPE_HEARTBEAT_TIMEOUT_MS", std::to_string(kHeartbeatTimeoutMs)},
            {"TROUPE_KVSTORE_BIGARRAY_BOUND", "1000"},
            {"TROUPE_TEST_FIFO", fifo_}};
  }

  std::string TokenDir() const { return (dir_ / "tokens").string(); }

  fs::path dir_;
  std::string fifo_;
};

int PortOf(const std::string& line) { return std::stoi(line.substr(line.rfind(':') + 1)); }

int Count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST_F(ShellCluster, SeesALaunchedClustersNodesKeysAndValues) {
  proc::Process launch("troupe launch",
                             {TROUPE_CLI_PATH, "launch", "-n", "2", "-s", "2", "--", TROUPE_DIST_NODE, "push_wait_barrier"},
                             Env(), /*merge_stderr=*/true);
  const auto sched = launch.ReadLine("[scheduler] troupe scheduler: listening on", kTimeoutMs);
  ASSERT_TRUE(sched.has_value());
  const int port = PortOf(*sched);
  for (int i = 0; i < 2; ++i) {
    const auto ready = launch.ReadLine("[worker ", kTimeoutMs);  // the workers print nothing else
    ASSERT_TRUE(ready.has_value());
    EXPECT_THAT(*ready, HasSubstr("READY"));
  }

  Result r = Shell(port, "nodes; kv keys; kv pull 0 w; kv pull 1; kv stats; print w + 1; barrier 1");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("cluster running; barrier rounds completed: 1"));
  // The rows of the nodes table (the role column is 10 wide).
  EXPECT_EQ(Count(r.out, "\nscheduler  - "), 1) << r.out;
  EXPECT_EQ(Count(r.out, "\nserver     "), 2) << r.out;
  EXPECT_EQ(Count(r.out, "\nworker     "), 2) << r.out;
  EXPECT_EQ(Count(r.out, " alive "), 5) << r.out;
  // kv keys: key 0 whole on one server, key 1 in two parts.
  EXPECT_THAT(r.out, HasSubstr("1/1"));
  EXPECT_THAT(r.out, HasSubstr("1/2"));
  EXPECT_THAT(r.out, HasSubstr("2/2"));
  // Worker 0 pushed 1s and worker 1 2s into key 0; both pushed 1s into key 1 (1500 values, joined flat).
  EXPECT_THAT(r.out, HasSubstr("[3. 3. 3. 3.]\n<NDArray 4 @cpu(0)>"));
  EXPECT_THAT(r.out, HasSubstr("<NDArray 1500 @cpu(0)>"));
  EXPECT_THAT(r.out, HasSubstr("[4. 4. 4. 4.]"));  // w + 1: the pulled value is a shell variable
  EXPECT_THAT(r.out, HasSubstr("pushes"));
  EXPECT_EQ(Count(r.out, "server 0: ") + Count(r.out, "server 1: "), 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("the workers completed barrier round 1"));  // Init's: answered at once

  r = Shell(port, "nodes", "not-the-token");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("wrong cluster token"));
  r = Shell(port, "kv pull 99; kv frobnicate; barrier 0");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("no server holds key 99"));
  EXPECT_THAT(r.out, HasSubstr("kv keys"));
  EXPECT_THAT(r.out, HasSubstr("'0' is not a round number"));

  // Interactively, on a terminal: Ctrl-C interrupts a barrier no worker will reach (they wait on the
  // FIFO), the shell is back, and the next command works.
  {
    test::Pty pty({TROUPE_CLI_PATH, "shell", "--no-history", "--timeout-ms", "600000", "--connect",
                   "127.0.0.1:" + std::to_string(port)},
                  dir_.string(), {{"TROUPE_CLUSTER_TOKEN", kToken}});
    ASSERT_TRUE(pty.started());
    ASSERT_TRUE(pty.WaitForPrompt()) << pty.seen();
    pty.Send("barrier\r");
    // The scheduler logs the wait: the request is in, and only Ctrl-C can end it now.
    ASSERT_TRUE(launch.ReadLine("[scheduler] troupe scheduler: an observer waits for the workers' barrier round 2",
                                kTimeoutMs).has_value());
    pty.Send("\x03");
    ASSERT_TRUE(pty.WaitFor("interrupted while waiting for the scheduler")) << pty.seen();
    ASSERT_TRUE(pty.WaitForPrompt()) << pty.seen();
    pty.Send("nodes\r");
    ASSERT_TRUE(pty.WaitFor("barrier rounds completed: 1")) << pty.seen();
    ASSERT_TRUE(pty.WaitForPrompt()) << pty.seen();
    pty.Send("\x04");
    EXPECT_EQ(pty.WaitExit(), 0) << pty.seen();
  }

  // `barrier` waits for the workers' next round (round 1 was Init's): they reach it only after the test
  // releases them, which it does once the scheduler has logged the shell's wait.
  // A shell that stays connected while the cluster ends (below), with a timeout far beyond the test's.
  test::Pty after({TROUPE_CLI_PATH, "shell", "--no-history", "--timeout-ms", "3600000", "--connect",
                   "127.0.0.1:" + std::to_string(port)},
                  dir_.string(), {{"TROUPE_CLUSTER_TOKEN", kToken}});
  ASSERT_TRUE(after.started());
  ASSERT_TRUE(after.WaitForPrompt()) << after.seen();
  proc::Process waiter("shell barrier",
                             {TROUPE_CLI_PATH, "shell", "--timeout-ms", "600000", "--connect",
                              "127.0.0.1:" + std::to_string(port), "-c", "barrier"},
                             {{"TROUPE_CLUSTER_TOKEN", kToken}}, /*merge_stderr=*/true);
  ASSERT_TRUE(launch.ReadLine("[scheduler] troupe scheduler: an observer waits for the workers' barrier round 2 (1 "
                              "completed)", kTimeoutMs).has_value());
  ReleaseWorkers();
  const auto waited = waiter.ReadLine("the workers completed barrier round", kTimeoutMs);
  ASSERT_TRUE(waited.has_value());
  EXPECT_EQ(*waited, "the workers completed barrier round 2");
  // No `nodes` after it: the workers leave right after this round and the cluster stops with them, so a
  // command sent now races with the shutdown (it failed about 1 run in 12).
  EXPECT_EQ(waiter.Wait(kTimeoutMs), 0);

  std::vector<std::string> lines;
  while (launch.ReadSome(&lines)) {
  }
  EXPECT_EQ(launch.Wait(kTimeoutMs), 0);

  // The cluster has ended: the connected shell's commands fail at once (its timeout is an hour; the harness
  // waits 20 s), the first with the closed connection, the next ones without asking a dead connection again.
  after.Send("nodes\r");
  ASSERT_TRUE(after.WaitFor("closed the connection")) << after.seen();
  ASSERT_TRUE(after.WaitForPrompt()) << after.seen();
  after.Send("kv stats\r");
  ASSERT_TRUE(after.WaitFor("closed the connection earlier (the cluster ended")) << after.seen();
  ASSERT_TRUE(after.WaitForPrompt()) << after.seen();
  after.Send("\x04");
  EXPECT_EQ(after.WaitExit(), 0) << after.seen();
}

// Without TROUPE_CLUSTER_TOKEN, launch makes a 256-bit token, leaves it in a file only the user can read,
// and the shell finds it by the scheduler's address; the file goes when launch ends.
TEST_F(ShellCluster, FindsTheTokenALaunchWrote) {
  auto env = Env();
  env.erase("TROUPE_CLUSTER_TOKEN");
  env["TROUPE_TOKEN_DIR"] = TokenDir();
  proc::Process launch("troupe launch",
                             {TROUPE_CLI_PATH, "launch", "-n", "2", "-s", "1", "--", TROUPE_DIST_NODE, "push_then_wait"},
                             env, /*merge_stderr=*/true);
  const auto sched = launch.ReadLine("[scheduler] troupe scheduler: listening on", kTimeoutMs);
  ASSERT_TRUE(sched.has_value());
  const int port = PortOf(*sched);
  const auto said = launch.ReadLine("troupe launch: the cluster token is in ", kTimeoutMs);
  ASSERT_TRUE(said.has_value());
  const std::string path = TokenDir() + "/127.0.0.1_" + std::to_string(port) + ".token";
  EXPECT_THAT(*said, HasSubstr(path));
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::string token;
  std::getline(std::ifstream(path), token);
  EXPECT_EQ(token.size(), 64u) << token;  // 256 bits in hex
  EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos) << token;
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(launch.ReadLine("[worker ", kTimeoutMs).has_value());
  Result r = Shell(port, "nodes", "");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(Count(r.out, " alive "), 4) << r.out;
  ReleaseWorkers();
  std::vector<std::string> lines;
  while (launch.ReadSome(&lines)) {
  }
  EXPECT_EQ(launch.Wait(kTimeoutMs), 0);
  EXPECT_FALSE(fs::exists(path)) << "launch left its token file behind";
  // Without a token anywhere, the shell says how to give one (once --timeout-ms has passed without one).
  r = Shell(port, "nodes", "", "--timeout-ms 300");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("no cluster token"));
}

// `troupe launch ... & troupe shell --connect ...` as typed one after the other: the shell starts before the
// scheduler listens and before launch has written the token, and waits for both (up to --timeout-ms).
TEST_F(ShellCluster, WaitsForAClusterThatIsStillStarting) {
  const int port = proc::FreeLoopbackPort();
  ASSERT_GT(port, 0);
  proc::Process shell("troupe shell",
                      {TROUPE_CLI_PATH, "shell", "--timeout-ms", "60000", "--connect", "127.0.0.1:" + std::to_string(port),
                       "-c", "nodes"},
                      {{"TROUPE_TOKEN_DIR", TokenDir()}}, /*merge_stderr=*/true);
  auto env = Env();
  env.erase("TROUPE_CLUSTER_TOKEN");
  env["TROUPE_TOKEN_DIR"] = TokenDir();
  proc::Process launch("troupe launch",
                       {TROUPE_CLI_PATH, "launch", "--port", std::to_string(port), "-n", "2", "-s", "1", "--",
                        TROUPE_DIST_NODE, "push_then_wait"},
                       env, /*merge_stderr=*/true);
  const auto table = shell.ReadLine("cluster ", kTimeoutMs);
  ASSERT_TRUE(table.has_value());
  EXPECT_EQ(shell.Wait(kTimeoutMs), 0);
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(launch.ReadLine("[worker ", kTimeoutMs).has_value());  // READY
  ReleaseWorkers();
  std::vector<std::string> lines;
  while (launch.ReadSome(&lines)) {
  }
  EXPECT_EQ(launch.Wait(kTimeoutMs), 0);
}

TEST_F(ShellCluster, ShowsAKilledWorkerDeadWithinTheHeartbeatTimeout) {
  // --keep-going: launch would otherwise stop the whole cluster as soon as the worker dies.
  proc::Process launch("troupe launch",
                             {TROUPE_CLI_PATH, "launch", "--keep-going", "-n", "2", "-s", "1", "--", TROUPE_DIST_NODE,
                              "push_then_wait"},
                             Env(), /*merge_stderr=*/true);
  const auto sched = launch.ReadLine("[scheduler] troupe scheduler: listening on", kTimeoutMs);
  ASSERT_TRUE(sched.has_value());
  const int port = PortOf(*sched);
  // "troupe launch: started ...; pids SCHEDULER SERVER WORKER0 WORKER1"
  const auto started = launch.ReadLine("troupe launch: started", kTimeoutMs);
  ASSERT_TRUE(started.has_value());
  std::vector<int> pids;
  {
    std::istringstream words(started->substr(started->find("pids") + 4));
    for (int pid; words >> pid;) pids.push_back(pid);
  }
  ASSERT_EQ(pids.size(), 4u) << *started;
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(launch.ReadLine("[worker ", kTimeoutMs).has_value());  // READY
  EXPECT_EQ(Count(Shell(port, "nodes").out, " alive "), 4);  // the scheduler, the server, two workers
  // A round the workers do not reach (they wait on the FIFO) fails after --timeout-ms, as every command does.
  const Result timed_out = Shell(port, "barrier", kToken, "--timeout-ms 1500");
  EXPECT_EQ(timed_out.status, 1);
  EXPECT_THAT(timed_out.out,
              HasSubstr("no answer from the scheduler at 127.0.0.1:" + std::to_string(port) + " within 1500 ms"));

  const auto killed = Clock::now();
  ASSERT_EQ(::kill(pids[2], SIGKILL), 0);  // worker 0
  Result r;
  bool dead = false;
  while (!dead && Clock::now() - killed < std::chrono::milliseconds(kHeartbeatTimeoutMs)) {
    r = Shell(port, "nodes");  // each call is a new observer asking the scheduler
    dead = r.status == 0 && Count(r.out, " dead ") == 1;
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - killed).count();
  EXPECT_TRUE(dead) << "not shown dead within " << kHeartbeatTimeoutMs << " ms:\n" << r.out;
  EXPECT_THAT(r.out, HasSubstr("rounds fail: worker"));
  EXPECT_EQ(Count(r.out, " alive "), 3) << r.out;  // launch kept the others running
  r = Shell(port, "barrier");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.out, HasSubstr("no further barrier round can complete: worker"));
  std::printf("shell: the killed worker showed as dead %lld ms after kill -9\n", static_cast<long long>(ms));

  ReleaseWorkers();
  std::vector<std::string> lines;
  while (launch.ReadSome(&lines)) {
  }
  EXPECT_EQ(launch.Wait(kTimeoutMs), 1);  // a worker died: launch reports the failure at the end
  std::string text;
  for (const std::string& l : lines) text += l + "\n";
  EXPECT_THAT(text, HasSubstr("worker 0 (pid " + std::to_string(pids[2]) + ") killed by signal 9; the others keep "
                              "going (--keep-going)"));
  // The survivor ran on, and its leave (KVStore::Finalize) reports the failed job, naming the dead worker;
  // the server ended in order; the scheduler reports the death.
  EXPECT_THAT(text, HasSubstr("KVStore::Finalize: the job failed: worker "));
  EXPECT_THAT(text, HasSubstr(" at 127.0.0.1 died: "));
  EXPECT_THAT(text, HasSubstr("worker 1 (pid " + std::to_string(pids[3]) + ") exited 1"));
  EXPECT_THAT(text, HasSubstr("server 0 (pid " + std::to_string(pids[1]) + ") exited 0"));
  EXPECT_THAT(text, HasSubstr("scheduler (pid " + std::to_string(pids[0]) + ") exited 1"));
}

}  // namespace
}  // namespace troupe
