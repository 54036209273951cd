// `troupe shell` end to end: the built command with -c, with a script on stdin, and interactively on a
// pseudo-terminal (forkpty) as a user types: values, errors, Tab completion, Ctrl-C, Ctrl-D and history.
// The pty harness (tools/shell/pty_harness.h) waits for expected output with a deadline (poll), never by sleeping.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tools/shell/pty_harness.h"

namespace {

using troupe::test::Pty;

const std::string kCli = TROUPE_CLI_PATH;
const std::string kDir = TROUPE_SHELL_TEST_DIR;

struct Result {
  int status = -1;
  std::string out, err;
};

// Runs the command with `input` on stdin (a file, so not a terminal); collects stdout and stderr.
Result RunCli(const std::vector<std::string>& args, const std::string& input = "") {
  mkdir(kDir.c_str(), 0755);
  const std::string in = kDir + "/stdin.txt", out = kDir + "/stdout.txt", err = kDir + "/stderr.txt";
  std::ofstream(in) << input;
  std::string cmd = "HOME=" + kDir + " '" + kCli + "' shell";
  for (const auto& a : args) {
    std::string q;
    for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    cmd += " '" + q + "'";
  }
  cmd += " <" + in + " >" + out + " 2>" + err;
  Result r;
  const int s = std::system(cmd.c_str());
  r.status = WIFEXITED(s) ? WEXITSTATUS(s) : -1;
  auto slurp = [](const std::string& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

TEST(ShellCommand, DashCPrintsValues) {
  const Result r = RunCli({"-c", "a = ones(2,3); b = a * 2 + 1; print b"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "[[3. 3. 3.]\n [3. 3. 3.]]\n<NDArray 2x3 @cpu(0)>\n");
  EXPECT_EQ(r.err, "");
}

TEST(ShellCommand, DashCGoesOnAfterAnErrorAndExitsOne) {
  const Result r = RunCli({"-c", "a = ones(2)\nb = FullyConected(data=a, num_hidden=2)\nprint a + 1"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("error: column 5: unknown function or operator 'FullyConected'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("did you mean: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("FullyConnected"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "[2. 2.]\n<NDArray 2 @cpu(0)>\n");
}

TEST(ShellCommand, HelpShowsAnOperatorsParameters) {
  const Result r = RunCli({"-c", "help FullyConnected"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("FullyConnected: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("num_hidden (int"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no_bias (boolean"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("flatten"), std::string::npos) << r.out;
}

TEST(ShellCommand, ScriptOnStdinRunsWithoutAPrompt) {
  Result r = RunCli({}, "x = arange(4)\n# a comment\ny = x[1:3] * 10; y\n");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "[10. 20.]\n<NDArray 2 @cpu(0)>\n");
  r = RunCli({}, "x = 1 +\nprint 2\n");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("parse error at column 8"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "2\n");
}

TEST(ShellCommand, UsageErrorsExitTwo) {
  EXPECT_EQ(RunCli({"--bogus"}).status, 2);
  const Result r = RunCli({"--help"});
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("Exit status"), std::string::npos);
}

TEST(ShellInteractive, ValuesErrorsCompletionCtrlCAndCtrlD) {
  const std::string home = kDir + "/home";
  mkdir(kDir.c_str(), 0755);
  mkdir(home.c_str(), 0755);
  std::remove((home + "/.troupe_history").c_str());
  Pty pty({kCli, "shell"}, home);
  ASSERT_TRUE(pty.started());
  ASSERT_TRUE(pty.WaitForPrompt()) << pty.seen();

  pty.Send("a = ones(2,3)\r");
  ASSERT_TRUE(pty.WaitForPrompt()) << pty.seen();
  pty.Send("print a * 2 + 1\r");
  ASSERT_TRUE(pty.WaitFor("[[3. 3. 3.]\r\n [3. 3. 3.]]\r\n<NDArray 2x3 @cpu(0)>")) << pty.seen();
  ASSERT_TRUE(pty.WaitForPrompt()) << pty.seen();

  // A mistyped operator: an error suggesting the right name, and the shell goes on.
  pty.Send("c = FullyConected(data=a, num_hidden=4)\r");
  ASSERT_TRUE(pty.WaitFor("did you mean: ")) << pty.seen();
  ASSERT_TRUE(pty.WaitForPrompt()) << pty.seen();
  pty.Send("a[0] - 1\r");
  ASSERT_TRUE(pty.WaitFor("[0. 0. 0.]\r\n<NDArray 3 @cpu(0)>")) << pty.seen();
  ASSERT_TRUE(pty.WaitForPrompt()) << pty.seen();

  // Tab completes an operator name: `help FullyConn` alone would be an error.
  pty.Send("help FullyConn\t");
  ASSERT_TRUE(pty.WaitFor("ected ")) << pty.seen();  // libedit redraws the completed word
  pty.Send("\r");
  ASSERT_TRUE(pty.WaitFor("num_hidden (int")) << pty.seen();
  ASSERT_TRUE(pty.WaitForPrompt()) << pty.seen();
  // ... and a variable name.
  pty.Send("longname = ones(1) * 7\r");
  ASSERT_TRUE(pty.WaitForPrompt()) << pty.seen();
  pty.Send("print longn\t\r");
  ASSERT_TRUE(pty.WaitFor("[7.]\r\n<NDArray 1 @cpu(0)>")) << pty.seen();
  ASSERT_TRUE(pty.WaitForPrompt()) << pty.seen();

  // Ctrl-C cancels the line being typed (it is not run) and the shell stays.
  pty.Send("zz = 1 +");
  ASSERT_TRUE(pty.WaitFor("zz = 1 +")) << pty.seen();
  pty.Send("\x03");
  ASSERT_TRUE(pty.WaitForPrompt()) << pty.seen();
  EXPECT_EQ(pty.Pending().find("error"), std::string::npos) << pty.seen();
  pty.Send("vars\r");
  ASSERT_TRUE(pty.WaitFor("longname  1 float32 @cpu(0)")) << pty.seen();
  ASSERT_TRUE(pty.WaitForPrompt()) << pty.seen();
  EXPECT_EQ(pty.seen().find("zz  "), std::string::npos) << pty.seen();
  EXPECT_EQ(pty.seen().find("parse error"), std::string::npos) << pty.seen();

  // Ctrl-C while `wait` waits for a long product (54 GFLOP: seconds here): the wait is interrupted, the shell
  // is back at once, and the product goes on; printing from it later waits for it.
  pty.Send("big = dot(uniform(3000,3000), uniform(3000,3000)); wait\r");
  ASSERT_TRUE(pty.WaitFor("; wait\r\n")) << pty.seen();  // libedit took the line: the command runs
  pty.Send("\x03");
  ASSERT_TRUE(pty.WaitFor("interrupted: the shell is back")) << pty.seen();
  ASSERT_TRUE(pty.WaitForPrompt()) << pty.seen();
  pty.Send("big[0][0:1] * 0 + longname\r");
  ASSERT_TRUE(pty.WaitFor("[7.]\r\n<NDArray 1 @cpu(0)>")) << pty.seen();
  ASSERT_TRUE(pty.WaitForPrompt()) << pty.seen();

  // Ctrl-D on an empty line leaves with status 0.
  pty.Send("\x04");
  EXPECT_EQ(pty.WaitExit(), 0) << pty.seen();

  std::ifstream history(home + "/.troupe_history");
  std::stringstream h;
  h << history.rdbuf();
  // libedit's history file encodes blanks as \040.
  EXPECT_NE(h.str().find("print\\040a\\040*\\0402\\040+\\0401"), std::string::npos) << h.str();
  EXPECT_EQ(h.str().find("zz"), std::string::npos) << h.str();  // the cancelled line
}

TEST(ShellInteractive, QuitLeaves) {
  const std::string home = kDir + "/home2";
  mkdir(kDir.c_str(), 0755);
  mkdir(home.c_str(), 0755);
  Pty pty({kCli, "shell"}, home);
  ASSERT_TRUE(pty.started());
  ASSERT_TRUE(pty.WaitForPrompt()) << pty.seen();
  pty.Send("quit\r");
  EXPECT_EQ(pty.WaitExit(), 0) << pty.seen();
}

}  // namespace
