// `troupe launch` with the local launcher (tools/launch_command.h), end to end: real processes on
// 127.0.0.1 — the troupe executable for the scheduler and servers, tests/kvstore/dist_node as the workers.
//   - 1 scheduler, 2 servers, 3 workers: every worker's rounds are exact, every process exits 0;
//   - one worker exits 1: launch stops the others and exits non-zero with a line per process;
//   - SIGINT to launch: it stops everything; no process it started is left (checked by pid);
//   - `troupe scheduler` by hand without a token refuses to start unless --insecure (then warns);
//   - the worker command: '--' optional, checked before anything starts, and workers that never join the
//     cluster explained (with a warning up front for `troupe train` without a dist_* KVStore).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <poll.h>
#include <sys/syscall.h>

#include <cerrno>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "proc/process.h"

namespace troupe {
namespace {

constexpr int kTimeoutMs = 120000;

// Runs `troupe launch ARGS`, returns (exit status, every line it printed).
std::pair<int, std::vector<std::string>> Launch(const std::vector<std::string>& args) {
  std::vector<std::string> argv{TROUPE_CLI_PATH, "launch"};
  argv.insert(argv.end(), args.begin(), args.end());
  proc::Process launch("troupe launch", argv, {}, /*merge_stderr=*/true);
  std::vector<std::string> lines;
  while (launch.ReadSome(&lines)) {
  }
  for (const auto& l : lines) std::printf("%s\n", l.c_str());
  return {launch.Wait(kTimeoutMs), lines};
}

// The pids of launch's "troupe launch: started ...; pids A B C" line (none when it does not come).
std::vector<int> StartedPids(proc::Process* launch) {
  std::vector<int> pids;
  const auto started = launch->ReadLine("troupe launch: started", kTimeoutMs);
  if (!started) return pids;
  std::istringstream in(started->substr(started->find("pids") + 4));
  for (int pid = 0; in >> pid;) pids.push_back(pid);
  return pids;
}

int Count(const std::vector<std::string>& lines, const std::string& needle) {
  int n = 0;
  for (const auto& l : lines) n += l.find(needle) != std::string::npos ? 1 : 0;
  return n;
}

TEST(Launch, LocalJobRunsAndEveryProcessExitsZero) {
  const auto [status, lines] = Launch({"-n", "3", "-s", "2", "--", TROUPE_DIST_NODE, "any_workers"});
  EXPECT_EQ(status, 0);
  EXPECT_EQ(Count(lines, "of 3: 3 rounds exact"), 3) << "every worker's rounds were exact";
  for (const char* who : {"[worker 0]", "[worker 1]", "[worker 2]", "[server 0]", "[server 1]", "[scheduler]"}) {
    EXPECT_GE(Count(lines, who), 1) << who << "'s output is shown with its prefix";
  }
  EXPECT_EQ(Count(lines, "troupe launch: every process exited 0"), 1);
}

// --env before "--" must not swallow the worker's own options (a repeatable option in CLI11 takes every
// argument up to the next option unless told not to).
TEST(Launch, EnvOptionsLeaveTheWorkersOptionsAlone) {
  const std::string worker = std::string("[ \"$A$B\" = 12 ] || exit 3; echo \"worker sees $1 $2\"; exec ") +
                             TROUPE_DIST_NODE + " any_workers";
  const auto [status, lines] =
      Launch({"-n", "2", "-s", "1", "--env", "A=1", "--env", "B=2", "--", "sh", "-c", worker, "sh", "--x", "--y=1"});
  EXPECT_EQ(status, 0);
  EXPECT_EQ(Count(lines, "worker sees --x --y=1"), 2);
}

// The processes of a local launch share the host's cores: each is told how many run there, unless the
// user said otherwise.
TEST(Launch, LocalProcessesAreToldHowManyShareTheHost) {
  const std::string worker = std::string("echo \"host share $TROUPE_HOST_PROCESSES\"; exec ") + TROUPE_DIST_NODE +
                             " any_workers";
  auto [status, lines] = Launch({"-n", "2", "-s", "1", "--", "sh", "-c", worker});
  EXPECT_EQ(status, 0);
  EXPECT_EQ(Count(lines, "host share 3"), 2);
  std::tie(status, lines) =
      Launch({"-n", "2", "-s", "1", "--env", "TROUPE_HOST_PROCESSES=1", "--", "sh", "-c", worker});
  EXPECT_EQ(status, 0);
  EXPECT_EQ(Count(lines, "host share 1"), 2) << "a value the user gives is kept";
}

// A role started by hand without TROUPE_CLUSTER_TOKEN refuses to run unless told --insecure, and then warns.
TEST(Launch, ByHandRolesNeedATokenOrInsecure) {
  {
    proc::Process refused("troupe scheduler", {TROUPE_CLI_PATH, "scheduler", "--port", "0"}, {},
                                /*merge_stderr=*/true);
    EXPECT_TRUE(refused.ReadLine("troupe scheduler: kvstore: no cluster token", kTimeoutMs).has_value());
    EXPECT_EQ(refused.Wait(kTimeoutMs), 2);
  }
  proc::Process insecure("troupe scheduler", {TROUPE_CLI_PATH, "scheduler", "--port", "0", "--insecure"}, {},
                               /*merge_stderr=*/true);
  EXPECT_TRUE(insecure.ReadLine("troupe scheduler: WARNING: running without a cluster token", kTimeoutMs).has_value());
  EXPECT_TRUE(insecure.ReadLine("troupe scheduler: listening on", kTimeoutMs).has_value());
  insecure.Signal(SIGKILL);
  EXPECT_EQ(insecure.Wait(kTimeoutMs), 128 + SIGKILL);
}

TEST(Launch, AFailingWorkerStopsTheJob) {
  const std::string worker = std::string("if [ \"$TROUPE_LAUNCH_INDEX\" = 1 ]; then echo failing on purpose; exit 1; fi; exec ") +
                             TROUPE_DIST_NODE + " any_workers";
  const auto [status, lines] = Launch({"-n", "3", "-s", "1", "--", "sh", "-c", worker});
  EXPECT_EQ(status, 1);
  EXPECT_EQ(Count(lines, "[worker 1] failing on purpose"), 1);
  EXPECT_GE(Count(lines, "worker 1 (pid"), 1);
  EXPECT_GE(Count(lines, ") exited 1"), 1);
  // The summary: one line per process (the failed one is named twice: when it failed and in the summary).
  EXPECT_EQ(Count(lines, "stopped by launch") + Count(lines, ") exited"), 5 + 1);
}

TEST(Launch, SigintLeavesNoProcessBehind) {
  proc::Process launch("troupe launch", {TROUPE_CLI_PATH, "launch", "-n", "2", "-s", "1", "--", "sleep", "1000"},
                             {}, /*merge_stderr=*/true);
  const std::vector<int> pids = StartedPids(&launch);
  ASSERT_EQ(pids.size(), 4u);
  launch.Signal(SIGINT);
  EXPECT_EQ(launch.Wait(kTimeoutMs), 130);
  for (int pid : pids) {
    errno = 0;
    EXPECT_EQ(::kill(pid, 0), -1) << "process " << pid << " is still there";
    EXPECT_EQ(errno, ESRCH);
  }
}

// The '--' before the worker command is optional: the first word that is not one of launch's options starts
// the command, and what follows stays the worker's, even options and words that name troupe subcommands.
TEST(Launch, TheWorkerCommandNeedsNoDoubleDash) {
  const std::string worker = std::string("echo \"worker sees $1 $2 $3\"; exec ") + TROUPE_DIST_NODE + " any_workers";
  const auto [status, lines] = Launch({"-n", "2", "-s", "1", "sh", "-c", worker, "sh", "train", "--epochs", "-n"});
  EXPECT_EQ(status, 0);
  EXPECT_EQ(Count(lines, "worker sees train --epochs -n"), 2);
}

// A worker command that cannot run is named before any process starts.
TEST(Launch, AMissingWorkerCommandIsNamedBeforeAnythingStarts) {
  const auto [status, lines] = Launch({"-n", "2", "-s", "1", "--", "/nonexistent/worker", "--x"});
  EXPECT_EQ(status, 2);
  EXPECT_EQ(Count(lines, "troupe launch: the worker command '/nonexistent/worker' does not exist"), 1);
  EXPECT_EQ(Count(lines, "troupe launch: started"), 0);
  const auto [status2, lines2] = Launch({"-n", "1", "--", "no-such-program-here"});
  EXPECT_EQ(status2, 2);
  EXPECT_EQ(Count(lines2, "'no-such-program-here' is not on PATH"), 1);
}

// Workers that never create a distributed KVStore never join: launch says so as soon as they have ended
// (instead of the scheduler waiting for them until its timeout), and warns up front when the command is
// `troupe train` without --kvstore dist_*.
TEST(Launch, WorkersThatNeverJoinAreExplained) {
  const auto [status, lines] = Launch({"-n", "2", "-s", "1", "--", "true"});
  EXPECT_EQ(status, 1);
  EXPECT_EQ(Count(lines, "troupe launch: every worker ended without joining the cluster"), 1);
  EXPECT_EQ(Count(lines, "--kvstore dist_sync"), 1) << "it says how to join";
  EXPECT_EQ(Count(lines, "the cluster did not form within"), 0) << "launch did not wait for the scheduler's timeout";
  EXPECT_EQ(Count(lines, "stopped by launch"), 2) << "the scheduler and the server";

  // A joining job is not told anything of the kind.
  const auto [ok, ok_lines] = Launch({"-n", "1", "-s", "1", "--", TROUPE_DIST_NODE, "any_workers"});
  EXPECT_EQ(ok, 0);
  EXPECT_EQ(Count(ok_lines, "without joining"), 0);
  EXPECT_EQ(Count(ok_lines, "[scheduler] troupe scheduler: the cluster formed: 1 server, 1 worker"), 1);

  // `troupe train` without a dist store: the warning comes before anything runs (--help: the worker ends at
  // once, so the job ends by the rule above).
  const auto [train, train_lines] = Launch({"-n", "1", "-s", "1", TROUPE_CLI_PATH, "train", "--help"});
  EXPECT_EQ(train, 1);
  EXPECT_EQ(Count(train_lines, "troupe launch: warning: the workers run 'troupe train' without --kvstore dist_sync"), 1);
  const auto [dist, dist_lines] =
      Launch({"-n", "1", "-s", "1", TROUPE_CLI_PATH, "train", "--kvstore=dist_sync", "--help"});
  EXPECT_EQ(Count(dist_lines, "troupe launch: warning"), 0);
}

// A scheduler that cannot start (its port taken) says why, through launch, and nothing is left running.
TEST(Launch, ASchedulerThatCannotStartSaysWhy) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string port = std::to_string(ntohs(a.sin_port));
  const auto [status, lines] = Launch({"-n", "1", "--port", port, "--", "true"});
  ::close(fd);
  EXPECT_EQ(status, 1);
  EXPECT_EQ(Count(lines, "[scheduler] troupe: kvstore: cannot listen on 127.0.0.1:" + port), 1);
  EXPECT_EQ(Count(lines, "troupe launch: the scheduler did not start (it exited; its output is above)"), 1);
  EXPECT_EQ(Count(lines, "troupe launch: started"), 0);
}

// A launch killed outright (SIGKILL: no chance to stop anything) still takes its processes with it.
TEST(Launch, AKilledLaunchLeavesNoProcessBehind) {
  proc::Process launch("troupe launch", {TROUPE_CLI_PATH, "launch", "-n", "2", "-s", "1", "--", "sleep", "1000"}, {},
                       /*merge_stderr=*/true);
  const std::vector<int> pids = StartedPids(&launch);
  ASSERT_EQ(pids.size(), 4u);
  launch.Signal(SIGKILL);
  EXPECT_EQ(launch.Wait(kTimeoutMs), 128 + SIGKILL);
  for (int pid : pids) {
    // A pidfd becomes readable when its process exits (reaped or not); ESRCH: it is gone already.
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (fd >= 0) {
      pollfd p{fd, POLLIN, 0};
      ::poll(&p, 1, kTimeoutMs);
      ::close(fd);
    }
    EXPECT_TRUE(proc::ProcessGone(pid)) << "process " << pid << " outlived the killed launch";
  }
}

TEST(Launch, BadUsageIsAUsageError) {
  EXPECT_EQ(Launch({"-n", "2", "--launcher", "carrier-pigeon", "--", "true"}).first, 2);
  EXPECT_EQ(Launch({"-n", "2", "--env", "NOEQUALS", "--", "true"}).first, 2);
  EXPECT_EQ(Launch({"--", "true"}).first, 2) << "-n is required";
  const auto [status, lines] = Launch({"-n", "2"});
  EXPECT_EQ(status, 2);
  EXPECT_EQ(Count(lines, "troupe launch: name the workers' command after the options"), 1);
}

}  // namespace
}  // namespace troupe
