// The wire of `--net netns` (bench/common/netns.h): nodes in namespaces of their own reach each other over
// the bridge at their 10.88.x.x addresses, a program started through Wrap runs in its node's namespace, the
// shaping is reported as applied (latency only where the kernel has netem), and nothing is left behind:
// neither after TearDown nor when the owning process is killed (the guard's teardown). Skips, saying why,
// where namespaces cannot be made (not root, no iproute2, a container that forbids them).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "bench/common/netns.h"
#include "proc/process.h"

namespace troupe::bench {
namespace {

std::string Output(const std::vector<std::string>& argv) {
  proc::Process p(argv.front(), argv, {}, /*merge_stderr=*/true);
  p.CloseInput();
  std::vector<std::string> lines;
  while (p.ReadSome(&lines)) {
  }
  p.Wait(30000);
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

bool Listed(const std::string& name) {
  const std::string list = Output({"ip", "netns", "list"});
  return list.find(name + " ") != std::string::npos || list.find(name + "\n") != std::string::npos;
}

sockaddr_in Addr(const std::string& ip, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return a;
}

TEST(NetnsWireTest, NodesTalkOverTheBridgeAndTearDownLeavesNothing) {
  if (const std::string why = NetnsWire::Unavailable(); !why.empty()) GTEST_SKIP() << "no netns here: " << why;
  std::vector<std::string> names;
  {
    NetnsWire wire(3, NetShaping{1.0, 25});
    for (int i = 0; i < 3; ++i) names.push_back(wire.Namespace(i));
    names.push_back(wire.hub());
    for (const std::string& n : names) EXPECT_TRUE(Listed(n)) << n;

    // A listener in node 2, a client in node 0: bytes cross the bridge.
    int lfd = -1, cfd = -1;
    wire.RunIn(2, [&] { lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); });
    wire.RunIn(0, [&] { cfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); });
    ASSERT_GE(lfd, 0);
    ASSERT_GE(cfd, 0);
    sockaddr_in a = Addr(wire.Address(2), 0);
    socklen_t len = sizeof a;
    ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
    ASSERT_EQ(::listen(lfd, 1), 0);
    ASSERT_EQ(::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len), 0);
    ASSERT_EQ(::connect(cfd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
    const int sfd = ::accept(lfd, nullptr, nullptr);
    ASSERT_GE(sfd, 0);
    ASSERT_EQ(::send(cfd, "ping", 4, 0), 4);
    char buf[4] = {};
    ASSERT_EQ(::recv(sfd, buf, 4, MSG_WAITALL), 4);
    EXPECT_EQ(std::string(buf, 4), "ping");
    // This process's own namespace does not have the address (the thread came back).
    const int other = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in b = Addr(wire.Address(2), 0);
    EXPECT_NE(::bind(other, reinterpret_cast<sockaddr*>(&b), sizeof b), 0);
    for (int fd : {lfd, cfd, sfd, other}) ::close(fd);

    // A program started through Wrap runs in its node's namespace.
    EXPECT_NE(Output(wire.Wrap(1, {"ip", "-4", "addr", "show", "veth0"})).find(wire.Address(1) + "/16"),
              std::string::npos);
    // What was applied is said: the rate always; the latency, or why not.
    const auto applied = wire.Applied();
    EXPECT_EQ(applied["rate_gbit"].get<double>(), 1.0);
    if (applied["latency_us_applied"].get<double>() == 0) {
      EXPECT_TRUE(applied.contains("latency_note"));
    } else {
      EXPECT_EQ(applied["latency_us_applied"].get<double>(), 25.0);
    }
    EXPECT_NE(applied["qdiscs_node0"].get<std::string>().find("tbf"), std::string::npos);
    EXPECT_TRUE(wire.TearDown().empty());
    EXPECT_TRUE(wire.TearDown().empty());  // idempotent
  }
  for (const std::string& n : names) EXPECT_FALSE(Listed(n)) << n << " is left behind";
}

TEST(NetnsWireTest, AKilledOwnerLeavesNothingBehind) {
  if (const std::string why = NetnsWire::Unavailable(); !why.empty()) GTEST_SKIP() << "no netns here: " << why;
  int report[2];
  ASSERT_EQ(::pipe2(report, O_CLOEXEC), 0);
  const pid_t owner = ::fork();
  ASSERT_GE(owner, 0);
  if (owner == 0) {
    // The owner: makes a wire, says its hub's name and its guard's pid, then waits to be killed.
    ::close(report[0]);
    NetnsWire wire(2, NetShaping{1.0, 0});
    const std::string line = wire.hub() + " " + wire.Namespace(0) + " " + wire.Namespace(1) + " " +
                             std::to_string(wire.guard_pid()) + "\n";
    if (::write(report[1], line.data(), line.size()) < 0) ::_exit(1);
    for (;;) ::pause();
  }
  ::close(report[1]);
  std::string line;
  char c;
  while (::read(report[0], &c, 1) == 1 && c != '\n') line += c;
  ::close(report[0]);
  std::vector<std::string> words;
  for (std::size_t at = 0; at < line.size();) {
    const std::size_t sp = line.find(' ', at);
    words.push_back(line.substr(at, sp == std::string::npos ? std::string::npos : sp - at));
    at = sp == std::string::npos ? line.size() : sp + 1;
  }
  ASSERT_EQ(words.size(), 4u) << "the owner reported '" << line << "'";
  const int guard = std::stoi(words[3]);
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, guard, 0));
  ASSERT_GE(pidfd, 0);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(Listed(words[static_cast<std::size_t>(i)]));
  ::kill(owner, SIGKILL);
  ::waitpid(owner, nullptr, 0);
  // The guard sees its pipe close, tears down and exits: wait for that exit, not for a time.
  pollfd p{pidfd, POLLIN, 0};
  ASSERT_EQ(::poll(&p, 1, 30000), 1) << "the guard did not finish within 30 s";
  ::close(pidfd);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(Listed(words[static_cast<std::size_t>(i)])) << words[static_cast<std::size_t>(i)];
}

}  // namespace
}  // namespace troupe::bench
