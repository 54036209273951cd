// `troupe launch`: see tools/launch_command.h.
#include "tools/launch_command.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/common/child_process.h"

namespace troupe::tools {
namespace {

using bench::ChildProcess;
using Clock = std::chrono::steady_clock;

constexpr int kStartTimeoutMs = 30000;  // for the scheduler's "listening" line
constexpr int kStopGraceMs = 3000;      // SIGTERM, then SIGKILL after this
constexpr int kEndTimeoutMs = 60000;    // for the scheduler and servers once every worker is done

// SIGINT/SIGTERM to launch: a byte on this pipe, read by the watch loop.
int g_signal_pipe[2] = {-1, -1};
volatile sig_atomic_t g_signal = 0;

void OnSignal(int sig) {
  g_signal = sig;
  const char c = 1;
  [[maybe_unused]] const ssize_t n = ::write(g_signal_pipe[1], &c, 1);
}

std::string RandomToken() {
  std::random_device rd;
  std::string t;
  for (int i = 0; i < 32; ++i) t += "0123456789abcdef"[rd() & 15];
  return t;
}

struct Proc {
  std::unique_ptr<ChildProcess> child;
  std::string label;  // "scheduler", "server 0", "worker 2"
  bool worker = false;
  bool output_open = true;
  int status = -1;  // -1 running
  bool stopped_by_launch = false;
};

std::string Describe(const Proc& p) {
  std::string s = "troupe launch: " + p.label + " (pid " + std::to_string(p.child->pid()) + ") ";
  if (p.status < 0) return s + "still running";
  if (p.stopped_by_launch) return s + "stopped by launch";
  if (p.status == 0) return s + "exited 0";
  if (p.status > 128) return s + "killed by signal " + std::to_string(p.status - 128);
  return s + "exited " + std::to_string(p.status);
}

void Print(const Proc& p, const std::vector<std::string>& lines) {
  for (const std::string& l : lines) std::printf("[%s] %s\n", p.label.c_str(), l.c_str());
  std::fflush(stdout);
}

// Stops every process still running: SIGTERM, then SIGKILL after the grace period; reaps them all.
void StopAll(std::vector<Proc>& procs) {
  for (Proc& p : procs) {
    if (p.status < 0) {
      p.stopped_by_launch = true;
      p.child->Signal(SIGTERM);
    }
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(kStopGraceMs);
  for (Proc& p : procs) {
    if (p.status >= 0) continue;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    p.status = p.child->Wait(static_cast<int>(std::max<long long>(left, 0)));
    if (p.status < 0) {
      p.child->Signal(SIGKILL);
      p.status = p.child->Wait(kStopGraceMs);
    }
  }
}

}  // namespace

LaunchCommand::LaunchCommand(CLI::App* root) {
  app_ = root->add_subcommand("launch", "Launch a distributed KVStore job: scheduler, servers and workers");
  app_->footer(
      "Starts the scheduler and -s servers (this troupe executable) and -n copies of CMD as workers, with "
      "DMLC_ROLE, DMLC_PS_ROOT_URI, DMLC_PS_ROOT_PORT, DMLC_NUM_SERVER, DMLC_NUM_WORKER, DMLC_NODE_HOST, "
      "TROUPE_CLUSTER_TOKEN (TROUPE_CLUSTER_TOKEN from the environment, else a random one) and "
      "TROUPE_LAUNCH_INDEX (the worker's index in launch, 0..n-1; its KVStore rank is the scheduler's). Every "
      "line a process prints (stdout and stderr) is shown as '[worker 1] ...'. When a process fails, launch "
      "stops the others and prints one line per process; Ctrl-C stops everything. Exit status: 0 when every "
      "process exited 0, 1 when one failed, 130 when interrupted, 2 on bad usage. Launchers: local (ssh, mpi "
      "and slurm are not built yet).\n\n"
      "Examples:\n"
      "  troupe launch -n 2 -s 1 -- ./my_worker --epochs 3\n"
      "  troupe launch -n 4 -s 2 --env OMP_NUM_THREADS=1 -- ./my_worker\n");
  app_->add_option("-n,--num-workers", options_.workers, "Workers (copies of CMD)")->required()->check(CLI::Range(1, 10000));
  app_->add_option("-s,--num-servers", options_.servers, "Servers")->check(CLI::Range(1, 10000))->capture_default_str();
  app_->add_option("--launcher", options_.launcher, "Where processes run: local")
      ->check(CLI::IsMember({"local"}))
      ->capture_default_str();
  app_->add_option("--host", options_.host, "Address the scheduler and servers listen on")->capture_default_str();
  app_->add_option("--port", options_.port, "The scheduler's port (0: any free one)")->check(CLI::Range(0, 65535));
  app_->add_option("--env", options_.env, "K=V for every process (repeatable)");
  app_->add_option("command", options_.command, "The worker command and its arguments (after --)")->required();
  app_->allow_extras(false);
}

bool LaunchCommand::chosen() const { return app_->parsed(); }

int RunLaunch(const LaunchOptions& o) {
  std::map<std::string, std::string> env{{"DMLC_PS_ROOT_URI", o.host},
                                         {"DMLC_NODE_HOST", o.host},
                                         {"DMLC_NUM_SERVER", std::to_string(o.servers)},
                                         {"DMLC_NUM_WORKER", std::to_string(o.workers)}};
  const char* token = std::getenv("TROUPE_CLUSTER_TOKEN");
  env["TROUPE_CLUSTER_TOKEN"] = token != nullptr && *token != '\0' ? token : RandomToken();
  for (const std::string& kv : o.env) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::fprintf(stderr, "troupe launch: --env '%s' is not K=V\n", kv.c_str());
      return 2;
    }
    env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (::pipe(g_signal_pipe) != 0) {
    std::fprintf(stderr, "troupe launch: cannot create a pipe\n");
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  const std::string self = bench::SelfExe();
  std::vector<Proc> procs;
  auto start = [&](const std::string& label, std::vector<std::string> argv, std::map<std::string, std::string> e,
                   bool worker) -> Proc& {
    Proc p;
    p.child = std::make_unique<ChildProcess>(label, std::move(argv), e, /*merge_stderr=*/true);
    p.label = label;
    p.worker = worker;
    procs.push_back(std::move(p));
    return procs.back();
  };

  // The scheduler first: its port is what everyone else needs.
  auto e = env;
  e["DMLC_ROLE"] = "scheduler";
  e["DMLC_PS_ROOT_PORT"] = std::to_string(o.port);
  Proc& scheduler = start("scheduler", {self, "scheduler"}, e, false);
  const auto line = scheduler.child->ReadLine("troupe scheduler: listening on", kStartTimeoutMs);
  if (!line) {
    std::fprintf(stderr, "troupe launch: the scheduler did not start (no 'listening' line within %d ms)\n",
                 kStartTimeoutMs);
    StopAll(procs);
    for (const Proc& p : procs) std::fprintf(stderr, "%s\n", Describe(p).c_str());
    return 1;
  }
  Print(scheduler, {*line});
  env["DMLC_PS_ROOT_PORT"] = line->substr(line->rfind(':') + 1);
  for (int s = 0; s < o.servers; ++s) {
    e = env;
    e["DMLC_ROLE"] = "server";
    start("server " + std::to_string(s), {self, "server"}, e, false);
  }
  for (int w = 0; w < o.workers; ++w) {
    e = env;
    e["DMLC_ROLE"] = "worker";
    e["TROUPE_LAUNCH_INDEX"] = std::to_string(w);
    start("worker " + std::to_string(w), o.command, e, true);
  }
  std::string pids;
  for (const Proc& p : procs) pids += " " + std::to_string(p.child->pid());
  std::printf("troupe launch: started 1 scheduler, %d servers, %d workers; pids%s\n", o.servers, o.workers,
              pids.c_str());
  std::fflush(stdout);

  // Watch: output lines, exits, signals.
  bool failed = false;
  Clock::time_point workers_done{};
  for (;;) {
    std::vector<pollfd> fds{{g_signal_pipe[0], POLLIN, 0}};
    for (const Proc& p : procs) {
      if (p.output_open) fds.push_back({p.child->out_fd(), POLLIN, 0});
      if (p.status < 0) fds.push_back({p.child->exit_fd(), POLLIN, 0});
    }
    if (fds.size() == 1) break;  // every process ended and said everything
    ::poll(fds.data(), fds.size(), 500);
    if (g_signal != 0) {
      std::fprintf(stderr, "troupe launch: interrupted (signal %d); stopping every process\n", static_cast<int>(g_signal));
      StopAll(procs);
      for (Proc& p : procs) {
        std::vector<std::string> rest;
        while (p.output_open && p.child->ReadSome(&rest)) {
        }
        Print(p, rest);
        std::fprintf(stderr, "%s\n", Describe(p).c_str());
      }
      return 130;
    }
    for (Proc& p : procs) {
      for (const pollfd& f : fds) {
        if (f.fd == p.child->out_fd() && p.output_open && (f.revents & (POLLIN | POLLHUP)) != 0) {
          std::vector<std::string> lines;
          p.output_open = p.child->ReadSome(&lines);
          Print(p, lines);
        }
      }
      if (p.status < 0) {
        p.status = p.child->Wait(0);
        if (p.status > 0 && !failed) {
          failed = true;
          std::fprintf(stderr, "%s; stopping the others\n", Describe(p).c_str());
          StopAll(procs);
        }
      }
    }
    const bool workers_left = std::any_of(procs.begin(), procs.end(), [](const Proc& p) { return p.worker && p.status < 0; });
    if (!workers_left && workers_done == Clock::time_point{}) workers_done = Clock::now();
    // Once every worker is done the scheduler ends the cluster; one that does not within the timeout is stopped.
    if (!workers_left && Clock::now() - workers_done > std::chrono::milliseconds(kEndTimeoutMs)) {
      failed = true;
      std::fprintf(stderr, "troupe launch: the scheduler and servers did not end %d ms after the last worker\n",
                   kEndTimeoutMs);
      StopAll(procs);
    }
  }
  for (const Proc& p : procs) {
    if (p.status != 0) failed = true;
  }
  if (failed) {
    for (const Proc& p : procs) std::fprintf(stderr, "%s\n", Describe(p).c_str());
    return 1;
  }
  std::printf("troupe launch: every process exited 0\n");
  return 0;
}

}  // namespace troupe::tools
