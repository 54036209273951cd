// The pure parts of `troupe launch`'s remote launchers (tools/launch_remote.h):
//   - MapTaskRank: the role of an mpirun/srun task from Open MPI, PMI and Slurm variables; missing, malformed
//     and inconsistent values are errors that name the variable;
//   - ParseHostfile: host, host:port, user@host, [v6]:port, comments, blank lines; bad lines and empty files;
//   - ShellQuote and RemoteShellCommand, run by a real /bin/sh here (as the ssh host's login shell would):
//     hostile strings survive, the environment comes from stdin, the exit status is the command's, and
//     the end of stdin stops the command's whole session.
#include "tools/launch_remote.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <string>
#include <vector>

#include "proc/process.h"

namespace troupe::tools {
namespace {

using Env = std::map<std::string, std::string>;

TEST(MapTaskRank, OpenMpiRanks) {
  // 2 servers + 3 workers: ranks 0, 1 are servers, 2..4 workers 0..2.
  const int expect_index[] = {0, 1, 0, 1, 2};
  for (int rank = 0; rank < 5; ++rank) {
    const TaskRole r =
        MapTaskRank("mpi", {{"OMPI_COMM_WORLD_RANK", std::to_string(rank)}, {"OMPI_COMM_WORLD_SIZE", "5"}}, 2, 3);
    ASSERT_TRUE(r.error.empty()) << r.error;
    EXPECT_EQ(r.role, rank < 2 ? "server" : "worker");
    EXPECT_EQ(r.index, expect_index[rank]);
    EXPECT_EQ(r.rank, rank);
  }
}

TEST(MapTaskRank, PmiAndSlurm) {
  TaskRole r = MapTaskRank("mpi", {{"PMI_RANK", "3"}, {"PMI_SIZE", "4"}}, 1, 3);
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.role, "worker");
  EXPECT_EQ(r.index, 2);
  // Open MPI's variables win over PMI's.
  r = MapTaskRank("mpi",
                  {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"PMI_RANK", "3"}, {"PMI_SIZE", "4"}},
                  1, 3);
  EXPECT_EQ(r.role, "server");
  r = MapTaskRank("slurm", {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "3"}}, 1, 2);
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.role, "worker");
  EXPECT_EQ(r.index, 0);
  // Slurm reads only Slurm's variables (an MPI rank inside an srun step is not its task id).
  r = MapTaskRank("slurm", {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "3"}}, 1, 2);
  EXPECT_NE(r.error.find("SLURM_PROCID"), std::string::npos) << r.error;
}

TEST(MapTaskRank, BadValuesAreClearErrors) {
  const auto error = [](const std::string& launcher, const Env& env) {
    const TaskRole r = MapTaskRank(launcher, env, 1, 2);
    EXPECT_TRUE(r.role.empty());
    return r.error;
  };
  EXPECT_NE(error("mpi", {}).find("OMPI_COMM_WORLD_RANK"), std::string::npos);
  EXPECT_NE(error("mpi", {}).find("mpirun"), std::string::npos);
  EXPECT_NE(error("slurm", {}).find("srun"), std::string::npos);
  EXPECT_NE(error("slurm", {{"SLURM_PROCID", "1"}}).find("SLURM_NTASKS is not"), std::string::npos);
  EXPECT_NE(error("slurm", {{"SLURM_PROCID", "x"}, {"SLURM_NTASKS", "3"}}).find("'x'"), std::string::npos);
  EXPECT_NE(error("slurm", {{"SLURM_PROCID", "-1"}, {"SLURM_NTASKS", "3"}}).find("SLURM_PROCID"), std::string::npos);
  EXPECT_NE(error("slurm", {{"SLURM_PROCID", "1 "}, {"SLURM_NTASKS", "3"}}).find("SLURM_PROCID"), std::string::npos);
  EXPECT_NE(error("slurm", {{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "3"}}).find("not below"), std::string::npos);
  EXPECT_NE(error("mpi", {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"}}).find("has 4 tasks"),
            std::string::npos);
  EXPECT_NE(error("pvm", {}).find("unknown launcher"), std::string::npos);
}

TEST(ParseHostfile, Forms) {
  std::string error;
  const auto hosts = ParseHostfile(
      "# the cluster\n\nnode1\n  node2:2222  # a comment\nalice@node3\n[::1]:22\n::1\r\nbob@[fe80::1]:2200\n", &error);
  ASSERT_EQ(hosts.size(), 6u) << error;
  EXPECT_EQ(hosts[0].host, "node1");
  EXPECT_EQ(hosts[0].port, 0);
  EXPECT_EQ(hosts[1].host, "node2");
  EXPECT_EQ(hosts[1].port, 2222);
  EXPECT_EQ(hosts[2].host, "alice@node3");
  EXPECT_EQ(hosts[2].Address(), "node3");
  EXPECT_EQ(hosts[3].Address(), "::1");
  EXPECT_EQ(hosts[3].port, 22);
  EXPECT_EQ(hosts[4].host, "::1") << "a bare IPv6 address has no port";
  EXPECT_EQ(hosts[4].port, 0);
  EXPECT_EQ(hosts[5].host, "bob@[fe80::1]");
  EXPECT_EQ(hosts[5].Address(), "fe80::1");
  EXPECT_EQ(hosts[5].port, 2200);
}

TEST(ParseHostfile, BadFilesAreClearErrors) {
  for (const auto& [text, needle] :
       std::vector<std::pair<std::string, std::string>>{{"", "no hosts"},
                                                        {"# only a comment\n\n", "no hosts"},
                                                        {"node1\nnode2:0\n", "line 2"},
                                                        {"node1:99999\n", "1..65535"},
                                                        {"node1:ssh\n", "port"},
                                                        {"node1 node2\n", "one host a line"},
                                                        {":22\n", "no host"}}) {
    std::string error;
    EXPECT_TRUE(ParseHostfile(text, &error).empty()) << text;
    EXPECT_NE(error.find(needle), std::string::npos) << "'" << text << "' gave: " << error;
  }
}

// Runs `sh -c SCRIPT` with `input` on its stdin (kept open: its end would stop a RemoteShellCommand);
// returns (exit status, output lines).
std::pair<int, std::vector<std::string>> Sh(const std::string& script, const std::string& input) {
  proc::Process sh("sh", {"/bin/sh", "-c", script}, {}, /*merge_stderr=*/true);
  sh.Write(input);
  std::vector<std::string> lines;
  while (sh.ReadSome(&lines)) {
  }
  return {sh.Wait(30000), lines};
}

const std::vector<std::string> kHostile = {"plain", "two words", "it's",      "\"double\"", "$HOME",
                                           "`id`",  "$(id)",     "a\\b",      "*",          "; exit 7",
                                           "",      "tab\there", "new\nline", "'",          "''"};

TEST(RemoteShell, QuotingSurvivesAShell) {
  std::string script = "printf '<%s>\\n'";
  std::string expected;
  for (const std::string& s : kHostile) {
    script += ' ';
    script += ShellQuote(s);
  }
  const auto [status, lines] = Sh(script, "");
  EXPECT_EQ(status, 0);
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  for (const std::string& s : kHostile) expected += "<" + s + ">\n";
  EXPECT_EQ(all, expected);
}

TEST(RemoteShell, RunsTheCommandWithTheEnvironmentFromStdin) {
  std::string error;
  const std::string block =
      RemoteEnvBlock({{"DMLC_ROLE", "worker"}, {"SPACED", "a b  c"}, {"Q", "it's $HOME"}}, &error);
  ASSERT_FALSE(block.empty()) << error;
  std::vector<std::string> argv{"sh", "-c", "printf '%s|' \"$DMLC_ROLE\" \"$SPACED\" \"$Q\" \"$(pwd)\" \"$@\"; exit 7",
                                "x"};
  argv.insert(argv.end(), kHostile.begin(), kHostile.begin() + 10);
  const auto [status, lines] = Sh(RemoteShellCommand("/tmp", argv, 1), block);
  EXPECT_EQ(status, 7) << "the command's exit status";
  ASSERT_EQ(lines.size(), 1u);
  std::string expected = "worker|a b  c|it's $HOME|/tmp|";
  for (int i = 0; i < 10; ++i) expected += kHostile[i] + "|";
  EXPECT_EQ(lines[0], expected);
  EXPECT_EQ(Sh(RemoteShellCommand("/no/such/dir", {"true"}, 1), "\n").first, 127);
}

TEST(RemoteShell, EndOfStdinStopsTheCommandsSession) {
  // The command starts a background child too; both must go when stdin ends.
  proc::Process sh("sh",
                         {"/bin/sh", "-c", RemoteShellCommand("/", {"sh", "-c", "sleep 1000 & echo $! $$; wait"}, 1)},
                         {}, /*merge_stderr=*/true);
  sh.Write("\n");
  std::vector<std::string> lines;
  while (lines.empty() && sh.ReadSome(&lines)) {
  }
  ASSERT_EQ(lines.size(), 1u);
  const int child = std::stoi(lines[0]);
  const int command = std::stoi(lines[0].substr(lines[0].find(' ')));
  EXPECT_EQ(sh.Wait(0), -1) << "still running while stdin is open";
  sh.CloseInput();
  EXPECT_EQ(sh.Wait(30000), 128 + SIGTERM);
  for (const int pid : {child, command}) {
    // The background sleep is reparented (to init or a subreaper) and reaped there; poll with a deadline.
    bool gone = false;
    for (int i = 0; i < 3000 && !gone; ++i) {
      gone = proc::ProcessGone(pid);
      if (!gone) ::usleep(1000);
    }
    EXPECT_TRUE(gone) << "process " << pid << " is still there";
  }
}

TEST(RemoteShell, EnvBlockRefusesWhatAShellCannotTake) {
  std::string error;
  EXPECT_TRUE(RemoteEnvBlock({{"1BAD", "x"}}, &error).empty());
  EXPECT_NE(error.find("1BAD"), std::string::npos);
  EXPECT_TRUE(RemoteEnvBlock({{"A-B", "x"}}, &error).empty());
  EXPECT_TRUE(RemoteEnvBlock({{"OK", "two\nlines"}}, &error).empty());
  EXPECT_NE(error.find("newline"), std::string::npos);
  EXPECT_EQ(RemoteEnvBlock({{"A", "1"}, {"B", ""}}, &error), "A=1\nB=\n\n");
}

}  // namespace
}  // namespace troupe::tools
