// The harness of the multi-process tests of the distributed KVStore (kvstore_dist_process_test.cc,
// kvstore_faults_test.cc): dist_node processes (TROUPE_DIST_NODE) as scheduler, servers and workers on
// 127.0.0.1 with ephemeral ports, their lines awaited with a deadline, every process reaped.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "proc/process.h"

namespace troupe::dist_test {

using Clock = std::chrono::steady_clock;
using Env = std::map<std::string, std::string>;

constexpr int kHeartbeatIntervalMs = 300;
constexpr int kHeartbeatTimeoutMs = 3000;
constexpr int kLineTimeoutMs = 60000;  // a line the test waits for; a failure, not a hang, when it never comes

// A dist_node process (proc/process.h) whose failures to answer are test failures.
class Proc {
 public:
  // With `merge_stderr`, WaitLine sees what the process prints on stderr too.
  Proc(const std::string& name, const std::vector<std::string>& args, const Env& env, bool merge_stderr = false)
      : p_(name, WithProgram(args), env, merge_stderr) {}

  // The next stdout line starting with `prefix` (one kept by WaitLineKeeping first), or "" (and a test
  // failure) when none came in time.
  std::string WaitLine(const std::string& prefix, int timeout_ms = kLineTimeoutMs) {
    for (auto it = kept_.begin(); it != kept_.end(); ++it) {
      if (it->rfind(prefix, 0) == 0) {
        std::string line = *it;
        kept_.erase(it);
        return line;
      }
    }
    auto line = p_.ReadLine(prefix, timeout_ms);
    if (!line) {
      ADD_FAILURE() << p_.name() << " did not print a line starting with '" << prefix << "'";
      return "";
    }
    return *line;
  }
  // WaitLine(prefix), keeping the lines starting with `also` that come before it for a later WaitLine (two
  // threads of a node print them, in either order).
  std::string WaitLineKeeping(const std::string& prefix, const std::string& also) {
    for (;;) {
      auto line = p_.ReadLine(also, kLineTimeoutMs);
      if (!line) {
        ADD_FAILURE() << p_.name() << " did not print a line starting with '" << prefix << "'";
        return "";
      }
      if (line->rfind(prefix, 0) == 0) return *line;
      kept_.push_back(*line);
    }
  }
  void Write(const std::string& s) { EXPECT_TRUE(p_.Write(s)) << p_.name(); }
  void Signal(int sig) { p_.Signal(sig); }
  int pid() const { return p_.pid(); }
  // The exit status (128 + signal when killed), or -1 after the timeout.
  int Wait(int timeout_ms = kLineTimeoutMs) { return p_.Wait(timeout_ms); }

 private:
  static std::vector<std::string> WithProgram(const std::vector<std::string>& args) {
    std::vector<std::string> all{TROUPE_DIST_NODE};
    all.insert(all.end(), args.begin(), args.end());
    return all;
  }
  proc::Process p_;
  std::vector<std::string> kept_;
};

int PortOf(const std::string& line) { return std::stoi(line.substr(line.rfind(':') + 1)); }

// A cluster's common environment.
struct Cluster {
  Env env;
  std::unique_ptr<Proc> scheduler;
  std::vector<std::unique_ptr<Proc>> servers;
  int scheduler_port = 0;
  std::vector<int> server_ports;

  // `before_servers` runs once the scheduler listens, before any server starts (given its port).
  // `server_env`: more variables for the server of a rank (fault injection aimed at one server).
  Cluster(int num_servers, int num_workers, Env extra = {}, const std::function<void(int)>& before_servers = {},
          std::map<int, Env> server_env = {})
      : server_env_(std::move(server_env)) {
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
    if (before_servers) before_servers(scheduler_port);
    for (int r = 0; r < num_servers; ++r) StartServer(r);
  }

  // Servers get explicit ranks (so that the restart test can start "server 1" again).
  void StartServer(int rank) {
    Env s = env;
    s["DMLC_ROLE"] = "server";
    s["TROUPE_SERVER_RANK"] = std::to_string(rank);
    for (const auto& [k, v] : server_env_[rank]) s[k] = v;
    auto p = std::make_unique<Proc>("server " + std::to_string(rank), std::vector<std::string>{}, s);
    // The main thread prints where it listens once the node is up; the node's actor prints "troupe server N:
    // started" when the scheduler's answer comes, which can be first.
    const int port = PortOf(p->WaitLineKeeping("troupe server: listening on", "troupe server"));
    if (static_cast<std::size_t>(rank) < servers.size()) {
      servers[static_cast<std::size_t>(rank)] = std::move(p);
      server_ports[static_cast<std::size_t>(rank)] = port;
    } else {
      servers.push_back(std::move(p));
      server_ports.push_back(port);
    }
  }

  // Expects the scheduler to exit with `scheduler_status` (1 after a failed job) and every server with 0.
  void ExpectEnd(int scheduler_status) {
    EXPECT_EQ(scheduler->Wait(), scheduler_status);
    for (auto& s : servers) EXPECT_EQ(s->Wait(), 0) << "a server";
  }

  std::unique_ptr<Proc> Worker(const std::string& program, Env extra = {}) {
    Env w = env;
    w["DMLC_ROLE"] = "worker";
    for (const auto& [k, v] : extra) w[k] = v;
    return std::make_unique<Proc>("worker " + program, std::vector<std::string>{program}, w);
  }

 private:
  std::map<int, Env> server_env_;
};

}  // namespace troupe::dist_test
