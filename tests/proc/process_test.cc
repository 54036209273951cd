// troupe::proc: starting children (argv, environment, working directory, streams on pipes, files and
// /dev/null), reading their output with a deadline, waiting for their exit with a deadline, stopping them
// and their process groups, the destructor's kill-and-reap, pipes, termination signals on a pipe, and
// loopback connections. Every child is reaped by the test; nothing waits on a sleep.
#include "proc/process.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "proc/pipe.h"
#include "proc/signals.h"
#include "proc/socket.h"

namespace troupe::proc {
namespace {

constexpr int kTimeoutMs = 10000;  // generous: a loaded CI machine; never reached when the code is right

// A scratch folder removed at the end of a test.
class TempDir {
 public:
  TempDir() {
    std::string templ = (std::filesystem::temp_directory_path() / "troupe-proc-test-XXXXXX").string();
    EXPECT_NE(::mkdtemp(templ.data()), nullptr);
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ProcessTest, ReadsStdoutLinesAndTheExitStatus) {
  Process p("sh", {"sh", "-c", "echo first; echo second; exit 3"}, {});
  EXPECT_EQ(p.ReadLine("sec", kTimeoutMs), std::optional<std::string>("second"));  // "first" is skipped
  EXPECT_EQ(p.ReadLine("", kTimeoutMs), std::nullopt);                             // stdout ended
  EXPECT_EQ(p.Wait(kTimeoutMs), 3);
  EXPECT_EQ(p.Wait(0), 3);  // the same status again once reaped
  EXPECT_EQ(p.status(), 3);
}

TEST(ProcessTest, WaitWithADeadlineReturnsWhileTheChildRuns) {
  Process p("sleep", {"sleep", "1000"}, {});
  EXPECT_EQ(p.Wait(20), -1);
  EXPECT_EQ(p.WaitUntil(std::chrono::steady_clock::now() + std::chrono::milliseconds(20)), -1);
  EXPECT_TRUE(p.Signal(SIGKILL));
  EXPECT_EQ(p.Wait(kTimeoutMs), 128 + SIGKILL);
  EXPECT_FALSE(p.Signal(SIGKILL));  // reaped: nothing is sent to a pid that may be reused
}

TEST(ProcessTest, StopTerminatesThenKills) {
  Process polite("sleep", {"sleep", "1000"}, {});
  EXPECT_EQ(polite.Stop(std::chrono::milliseconds(kTimeoutMs)), 128 + SIGTERM);

  SpawnOptions o;
  o.argv = {"sh", "-c", "trap '' TERM; echo ready; while :; do sleep 1; done"};
  o.new_process_group = true;
  Process stubborn("stubborn", o);
  ASSERT_TRUE(stubborn.ReadLine("ready", kTimeoutMs));
  EXPECT_EQ(stubborn.Stop(std::chrono::milliseconds(50)), 128 + SIGKILL);
}

TEST(ProcessTest, SignalGroupReachesTheChildsChildren) {
  SpawnOptions o;
  o.argv = {"sh", "-c", "sleep 1000 & echo $!; wait"};
  o.new_process_group = true;
  Process p("group", o);
  const auto line = p.ReadLine("", kTimeoutMs);
  ASSERT_TRUE(line);
  const int grandchild = std::atoi(line->c_str());
  ASSERT_GT(grandchild, 0);
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, grandchild, 0));
  ASSERT_GE(pidfd, 0);
  EXPECT_TRUE(p.SignalGroup(SIGKILL));
  EXPECT_EQ(p.Wait(kTimeoutMs), 128 + SIGKILL);
  pollfd f{pidfd, POLLIN, 0};
  EXPECT_EQ(::poll(&f, 1, kTimeoutMs), 1) << "the grandchild " << grandchild << " outlived SIGKILL to its group";
  ::close(pidfd);
}

TEST(ProcessTest, TheDestructorKillsAndReaps) {
  int pid = -1;
  {
    Process p("sleep", {"sleep", "1000"}, {});
    pid = p.pid();
    EXPECT_FALSE(ProcessGone(pid));
  }
  EXPECT_TRUE(ProcessGone(pid));
}

TEST(ProcessTest, EnvironmentIsSetOnTopOrAlone) {
  ::setenv("TROUPE_PROC_TEST_INHERITED", "yes", 1);
  Process on_top("sh", {"sh", "-c", "echo \"v=$TROUPE_PROC_TEST_SET $TROUPE_PROC_TEST_INHERITED\""},
                 {{"TROUPE_PROC_TEST_SET", "given"}});
  EXPECT_EQ(on_top.ReadLine("v=", kTimeoutMs), std::optional<std::string>("v=given yes"));
  EXPECT_EQ(on_top.Wait(kTimeoutMs), 0);

  SpawnOptions o;
  o.argv = {"/bin/sh", "-c", "echo \"v=$TROUPE_PROC_TEST_SET ${TROUPE_PROC_TEST_INHERITED:-unset}\""};
  o.env = {{"TROUPE_PROC_TEST_SET", "alone"}};
  o.clear_env = true;
  Process alone("sh", o);
  EXPECT_EQ(alone.ReadLine("v=", kTimeoutMs), std::optional<std::string>("v=alone unset"));
  EXPECT_EQ(alone.Wait(kTimeoutMs), 0);
  ::unsetenv("TROUPE_PROC_TEST_INHERITED");
}

TEST(ProcessTest, WorkingDirectoryAndFiles) {
  TempDir dir;
  SpawnOptions o;
  o.argv = {"sh", "-c", "pwd; echo oops >&2; cat"};
  o.working_dir = dir.path();
  o.stdin_to = Stream::kFile;
  o.stdin_path = dir.path() + "/in.txt";
  o.stdout_to = Stream::kFile;
  o.stdout_path = dir.path() + "/out.txt";
  o.stderr_to = Stream::kFile;
  o.stderr_path = dir.path() + "/err.txt";
  std::ofstream(o.stdin_path) << "from the file\n";
  Process p("files", o);
  EXPECT_EQ(p.out_fd(), -1);
  EXPECT_FALSE(p.Write("x"));  // stdin is a file, not a pipe
  EXPECT_EQ(p.Wait(kTimeoutMs), 0);
  const std::string canonical = std::filesystem::canonical(dir.path()).string();
  EXPECT_EQ(ReadFile(o.stdout_path), canonical + "\nfrom the file\n");
  EXPECT_EQ(ReadFile(o.stderr_path), "oops\n");
}

TEST(ProcessTest, StderrMergedIntoStdoutAndNull) {
  Process merged("sh", {"sh", "-c", "echo to-stderr >&2"}, {}, /*merge_stderr=*/true);
  EXPECT_EQ(merged.ReadLine("to-", kTimeoutMs), std::optional<std::string>("to-stderr"));
  EXPECT_EQ(merged.Wait(kTimeoutMs), 0);

  SpawnOptions o;
  o.argv = {"sh", "-c", "echo gone; echo also-gone >&2; read x || echo eof"};
  o.stdin_to = Stream::kNull;
  o.stdout_to = Stream::kNull;
  o.stderr_to = Stream::kToStdout;
  Process quiet("quiet", o);
  EXPECT_EQ(quiet.Wait(kTimeoutMs), 0);
}

TEST(ProcessTest, StdinPipeAndPartialLastLine) {
  Process cat("cat", {"cat"}, {});
  EXPECT_TRUE(cat.Write("hello\nwor"));
  EXPECT_EQ(cat.ReadLine("hello", kTimeoutMs), std::optional<std::string>("hello"));
  EXPECT_TRUE(cat.Write("ld"));
  cat.CloseInput();
  EXPECT_FALSE(cat.Write("late"));
  std::vector<std::string> lines;
  // ReadSome blocks for one read at most; stdout ends once cat has seen end of input.
  while (cat.ReadSome(&lines)) {
  }
  EXPECT_EQ(lines, std::vector<std::string>{"world"});
  EXPECT_EQ(cat.Wait(kTimeoutMs), 0);
}

TEST(ProcessTest, FailuresToStart) {
  // Not found: the child exits 127, as a shell reports it.
  Process missing("missing", {"troupe-proc-test-no-such-program"}, {});
  EXPECT_EQ(missing.Wait(kTimeoutMs), 127);
  // What can be checked before fork is an error that names the thing.
  EXPECT_THROW(Process("empty", SpawnOptions{}), Error);
  SpawnOptions no_dir;
  no_dir.argv = {"true"};
  no_dir.working_dir = "/troupe-proc-test-no-such-folder";
  try {
    Process p("no-dir", no_dir);
    ADD_FAILURE() << "started in a folder that does not exist";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/troupe-proc-test-no-such-folder"), std::string::npos) << e.what();
  }
  SpawnOptions bad_file;
  bad_file.argv = {"true"};
  bad_file.stdout_to = Stream::kFile;
  bad_file.stdout_path = "/troupe-proc-test-no-such-folder/out.txt";
  EXPECT_THROW(Process("bad-file", bad_file), Error);
  SpawnOptions bad_stdout;
  bad_stdout.argv = {"true"};
  bad_stdout.stdout_to = Stream::kToStdout;
  EXPECT_THROW(Process("bad-stdout", bad_stdout), Error);
}

TEST(ProcessTest, FindProgramSelfExeAndEnvironment) {
  EXPECT_FALSE(FindProgram("sh").empty());
  EXPECT_EQ(FindProgram("troupe-proc-test-no-such-program"), "");
  EXPECT_EQ(FindProgram("./relative/path"), "./relative/path");
  EXPECT_NE(SelfExe().find("process_test"), std::string::npos) << SelfExe();
  EXPECT_EQ(CurrentEnvironment().count("PATH"), 1U);
}

TEST(PipeTest, WriteAllAndFdOwnership) {
  Pipe p = MakePipe();
  ASSERT_TRUE(p.read.valid());
  ASSERT_TRUE(p.write.valid());
  EXPECT_NE(::fcntl(p.read.get(), F_GETFD) & FD_CLOEXEC, 0);
  EXPECT_TRUE(WriteAll(p.write.get(), "abc"));
  char buf[4] = {};
  EXPECT_EQ(::read(p.read.get(), buf, 3), 3);
  EXPECT_EQ(std::string(buf), "abc");
  Fd moved = std::move(p.write);
  EXPECT_FALSE(p.write.valid());
  const int raw = moved.get();
  moved.Reset();
  EXPECT_EQ(::fcntl(raw, F_GETFD), -1);        // closed
  EXPECT_EQ(::read(p.read.get(), buf, 1), 0);  // the only writer is gone: end of file
}

TEST(SignalsTest, TerminationSignalsArriveOnThePipe) {
  CatchTerminationSignals();
  CatchTerminationSignals();  // a second call changes nothing
  ASSERT_GE(TerminationSignalFd(), 0);
  EXPECT_EQ(CaughtTerminationSignal(), 0);
  ASSERT_EQ(::raise(SIGTERM), 0);  // would end the test process without the handler
  pollfd f{TerminationSignalFd(), POLLIN, 0};
  EXPECT_EQ(::poll(&f, 1, kTimeoutMs), 1);
  EXPECT_EQ(CaughtTerminationSignal(), SIGTERM);
}

TEST(SocketTest, ConnectLoopback) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const int port = ntohs(addr.sin_port);
  EXPECT_EQ(ConnectLoopback(port), -1);  // bound, not listening: refused
  ASSERT_EQ(::listen(listener, 1), 0);
  const int fd = ConnectLoopback(port);
  EXPECT_GE(fd, 0);
  if (fd >= 0) ::close(fd);
  ::close(listener);
}

}  // namespace
}  // namespace troupe::proc
