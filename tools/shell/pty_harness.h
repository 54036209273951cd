// Test support: drives an interactive program (`troupe shell`) on a pseudo-terminal (forkpty), as a user
// types. Waits for expected output with a deadline (poll), never by sleeping. Used by tools/shell/shell_test.cc
// and tests/kvstore/shell_cluster_test.cc.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace troupe::test {

// A child process on a pseudo-terminal: `argv` (argv[0] a path) with HOME=home, TERM=xterm and `env` set.
class Pty {
 public:
  Pty(const std::vector<std::string>& argv, const std::string& home,
      const std::map<std::string, std::string>& env = {}) {
    winsize ws{};
    ws.ws_row = 40;
    ws.ws_col = 200;
    pid_ = forkpty(&fd_, nullptr, nullptr, &ws);
    if (pid_ == 0) {
      setenv("HOME", home.c_str(), 1);
      setenv("TERM", "xterm", 1);
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~Pty() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (fd_ >= 0) close(fd_);
  }
  bool started() const { return pid_ > 0; }

  void Send(const std::string& keys) {
    ASSERT_EQ(::write(fd_, keys.data(), keys.size()), static_cast<ssize_t>(keys.size()));
  }

  // Reads until `text` appears after the cursor (then moves the cursor past it), EOF, or the deadline.
  bool WaitFor(const std::string& text, int timeout_ms = 20000) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (true) {
      const std::size_t at = seen_.find(text, cursor_);
      if (at != std::string::npos) {
        cursor_ = at + text.size();
        return true;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !ReadSome(static_cast<int>(left.count()))) return false;
    }
  }
  // Everything read since the last successful WaitFor.
  std::string Pending() const { return seen_.substr(cursor_); }
  const std::string& seen() const { return seen_; }

  // libedit prints the prompt and then switches the terminal to its raw mode: keys sent before that would
  // be echoed by the terminal and read as a cooked line. Waits (reading output) until canonical mode is off.
  bool WaitForLineEditing(int timeout_ms = 20000) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      termios t{};
      if (tcgetattr(fd_, &t) != 0) return false;
      if ((t.c_lflag & ICANON) == 0) return true;
      ReadSome(1);
    }
    return false;
  }
  // The prompt, then line editing.
  bool WaitForPrompt() { return WaitFor("troupe> ") && WaitForLineEditing(); }

  // Reads to EOF and reaps the child; its exit status, or -1 after the deadline.
  int WaitExit(int timeout_ms = 20000) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (true) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return -1;
      if (!ReadSome(static_cast<int>(left.count()))) break;
    }
    int status = 0;
    // EOF on the pty master comes when the child closed it, i.e. exits: reaping does not wait long.
    if (waitpid(pid_, &status, 0) != pid_) return -1;
    exited_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  // False on EOF (the child closed the terminal) or timeout.
  bool ReadSome(int timeout_ms) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) <= 0) return false;
    std::array<char, 4096> buf{};
    const ssize_t n = read(fd_, buf.data(), buf.size());
    if (n <= 0) return false;
    seen_.append(buf.data(), static_cast<std::size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  bool exited_ = false;
  std::string seen_;
  std::size_t cursor_ = 0;
};

}  // namespace troupe::test
