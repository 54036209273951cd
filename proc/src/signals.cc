// Termination signals on a pipe: see proc/signals.h.
#include "proc/signals.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>

#include "base/error.h"

namespace troupe::proc {
namespace {

// Plain ints and a lock-free atomic: all the handler may touch.
std::atomic<int> g_read_fd{-1};
std::atomic<int> g_write_fd{-1};
volatile sig_atomic_t g_signal = 0;
std::mutex g_install_mutex;

void OnSignal(int sig) {
  const int saved = errno;  // a handler must not change errno under the code it interrupted
  g_signal = sig;
  const char c = 1;
  [[maybe_unused]] const ssize_t n = ::write(g_write_fd.load(std::memory_order_relaxed), &c, 1);
  errno = saved;
}

}  // namespace

void CatchTerminationSignals() {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  if (g_read_fd.load() >= 0) return;
  int fds[2];
  // Non-blocking write end: a flood of signals fills the pipe and the handler's write fails instead of
  // blocking inside the handler.
  if (::pipe2(fds, O_CLOEXEC) != 0 || ::fcntl(fds[1], F_SETFL, O_NONBLOCK) != 0) {
    throw Error(std::string("cannot create the signal pipe (") + std::strerror(errno) + ")");
  }
  g_write_fd.store(fds[1]);
  g_read_fd.store(fds[0]);
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  if (::sigaction(SIGINT, &sa, nullptr) != 0 || ::sigaction(SIGTERM, &sa, nullptr) != 0 ||
      ::sigaction(SIGPIPE, &ignore, nullptr) != 0) {
    throw Error(std::string("cannot install the signal handlers (") + std::strerror(errno) + ")");
  }
}

int TerminationSignalFd() { return g_read_fd.load(); }

int CaughtTerminationSignal() { return g_signal; }

}  // namespace troupe::proc
