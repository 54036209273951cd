// The distributed KVStore as real processes on 127.0.0.1 (issue 8): a scheduler, servers and workers, each
// its own process (the dist_node program), ephemeral ports, every process reaped at the end.
//   - the semantic scenarios of dist_scenarios.h, all exit codes 0 (uneven batches included);
//   - kill -9 of a worker mid-round: the other worker's pull fails naming it, within a bound; a stopped
//     (SIGSTOP) worker is found by the heartbeats the same way;
//   - kill -9 of a server, restarted from its checkpoint: training continues with the exact values;
//   - a wrong token is refused, and hostile bytes on the server's and the scheduler's ports leave a
//     well-behaved worker served.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kvstore/net/internal/frame_codec.h"

extern char** environ;

namespace troupe {
namespace {

using Clock = std::chrono::steady_clock;
using Env = std::map<std::string, std::string>;

constexpr int kHeartbeatIntervalMs = 300;
constexpr int kHeartbeatTimeoutMs = 3000;
constexpr int kLineTimeoutMs = 60000;  // a line the test waits for; a failure, not a hang, when it never comes

// A child process with a pipe on its stdout and (optionally) one on its stdin.
class Proc {
 public:
  Proc(const std::string& name, const std::vector<std::string>& args, const Env& env) : name_(name) {
    int out[2], in[2];
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv = *e;
      const std::string key = kv.substr(0, kv.find('='));
      if (env.count(key) == 0) env_strings.push_back(kv);
    }
    for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    std::vector<char*> argv, envp;
    std::vector<std::string> all_args{TROUPE_DIST_NODE};
    all_args.insert(all_args.end(), args.begin(), args.end());
    for (auto& a : all_args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      ::dup2(in[0], 0);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(out[1]);
    ::close(in[0]);
    out_ = out[0];
    in_ = in[1];
    pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
  }
  ~Proc() {
    if (pid_ > 0 && status_ < -1) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    for (int fd : {out_, in_, pidfd_}) {
      if (fd >= 0) ::close(fd);
    }
  }

  // The next stdout line starting with `prefix` (earlier lines are skipped), or "" after the timeout.
  std::string WaitLine(const std::string& prefix, int timeout_ms = kLineTimeoutMs) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      for (auto nl = buf_.find('\n'); nl != std::string::npos; nl = buf_.find('\n')) {
        const std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        if (line.rfind(prefix, 0) == 0) return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) break;
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) break;
      char chunk[4096];
      const ssize_t n = ::read(out_, chunk, sizeof chunk);
      if (n <= 0) break;
      buf_.append(chunk, static_cast<std::size_t>(n));
    }
    ADD_FAILURE() << name_ << " did not print a line starting with '" << prefix << "'";
    return "";
  }

  void Write(const std::string& s) { EXPECT_EQ(::write(in_, s.data(), s.size()), static_cast<ssize_t>(s.size())); }
  void Signal(int sig) { ::kill(pid_, sig); }

  // The exit status (128 + signal when killed), or -1 after the timeout.
  int Wait(int timeout_ms = kLineTimeoutMs) {
    if (status_ >= 0) return status_;
    pollfd p{pidfd_, POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return -1;
    int st = 0;
    ::waitpid(pid_, &st, 0);
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return status_;
  }

 private:
  std::string name_;
  pid_t pid_ = -1;
  int out_ = -1, in_ = -1, pidfd_ = -1;
  int status_ = -2;  // -2 running
  std::string buf_;
};

int PortOf(const std::string& line) { return std::stoi(line.substr(line.rfind(':') + 1)); }

// A cluster's common environment.
struct Cluster {
  Env env;
  std::unique_ptr<Proc> scheduler;
  std::vector<std::unique_ptr<Proc>> servers;
  int scheduler_port = 0;
  std::vector<int> server_ports;

  Cluster(int num_servers, int num_workers, Env extra = {}) {
    env = {{"DMLC_PS_ROOT_URI", "127.0.0.1"},
           {"DMLC_NUM_SERVER", std::to_string(num_servers)},
           {"DMLC_NUM_WORKER", std::to_string(num_workers)},
           {"TROUPE_CLUSTER_TOKEN", "process-test-token"},
           {"TROUPE_HEARTBEAT_INTERVAL_MS", std::to_string(kHeartbeatIntervalMs)},
           {"TROUPE_HEARTBEAT_TIMEOUT_MS", std::to_string(kHeartbeatTimeoutMs)},
           {"TROUPE_CONNECT_TIMEOUT_MS", "60000"},
           {"TROUPE_KVSTORE_BIGARRAY_BOUND", "1000"}};
    for (const auto& [k, v] : extra) env[k] = v;
    Env s = env;
    s["DMLC_ROLE"] = "scheduler";
    s["DMLC_PS_ROOT_PORT"] = "0";
    scheduler = std::make_unique<Proc>("scheduler", std::vector<std::string>{}, s);
    scheduler_port = PortOf(scheduler->WaitLine("troupe scheduler: listening on"));
    env["DMLC_PS_ROOT_PORT"] = std::to_string(scheduler_port);
    for (int r = 0; r < num_servers; ++r) StartServer(r);
  }

  // Servers get explicit ranks (so that the restart test can start "server 1" again).
  void StartServer(int rank) {
    Env s = env;
    s["DMLC_ROLE"] = "server";
    s["TROUPE_SERVER_RANK"] = std::to_string(rank);
    auto p = std::make_unique<Proc>("server " + std::to_string(rank), std::vector<std::string>{}, s);
    const int port = PortOf(p->WaitLine("troupe server: listening on"));
    if (static_cast<std::size_t>(rank) < servers.size()) {
      servers[static_cast<std::size_t>(rank)] = std::move(p);
      server_ports[static_cast<std::size_t>(rank)] = port;
    } else {
      servers.push_back(std::move(p));
      server_ports.push_back(port);
    }
  }

  std::unique_ptr<Proc> Worker(const std::string& program, Env extra = {}) {
    Env w = env;
    w["DMLC_ROLE"] = "worker";
    for (const auto& [k, v] : extra) w[k] = v;
    return std::make_unique<Proc>("worker " + program, std::vector<std::string>{program}, w);
  }
};

class DistProcessScenario : public ::testing::TestWithParam<std::string> {};

TEST_P(DistProcessScenario, PassesAcrossProcesses) {
  const std::string name = GetParam();
  const auto dir = std::filesystem::temp_directory_path() / ("troupe_dist_proc_" + std::to_string(::getpid()) + "_" + name);
  Cluster c(2, 2);
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

// kill -9 (or SIGSTOP) of one worker while the other waits in a sync round.
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

TEST(DistProcess, StoppedWorkerIsFoundByHeartbeats) {
  // Its sockets stay open: only the missed heartbeats tell. Bound: timeout + one interval + start-up slack.
  DeadWorker(SIGSTOP, 2 * kHeartbeatTimeoutMs + kHeartbeatIntervalMs);
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

int ConnectRaw(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Sends `bytes`, then waits for the peer to close the connection (it refused them).
bool RefusedAndClosed(int port, const std::vector<std::byte>& bytes) {
  const int fd = ConnectRaw(port);
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
    const auto hello = net::EncodeFrame(net::Hello{net::Role::kWorker, 0, net::kProtocolVersion, "wrong", "127.0.0.1", 0});
    EXPECT_TRUE(RefusedAndClosed(port, hello)) << "wrong token, port " << port;
    // A truncated frame: half a hello, then the client goes away.
    const int fd = ConnectRaw(port);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(::send(fd, hello.data(), hello.size() / 2, MSG_NOSIGNAL), static_cast<ssize_t>(hello.size() / 2));
    ::close(fd);
  }
  worker->Write("GO\n");
  EXPECT_EQ(worker->Wait(), 0);
  EXPECT_EQ(c.scheduler->Wait(), 0);
  EXPECT_EQ(c.servers[0]->Wait(), 0);
}

}  // namespace
}  // namespace troupe
