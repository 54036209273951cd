// File descriptors that close themselves (Fd) and pipes made of two of them (MakePipe), for the child
// processes of proc/process.h and for anyone who needs a POSIX pipe without leaking it on an error path.
//
// Thread-safety: an Fd is a value; one thread uses an object at a time. MakePipe may be called from any
// thread (its descriptors are close-on-exec from the start, so a concurrent fork/exec cannot inherit them).
#pragma once

#include <string>
#include <utility>

namespace troupe::proc {

// Owns one file descriptor and closes it when destroyed or reset. Move-only.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) Reset(std::exchange(other.fd_, -1));
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  // The descriptor, or -1 when none is held.
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives the descriptor up without closing it.
  int Release() { return std::exchange(fd_, -1); }
  // Closes the descriptor held (errors of close are ignored: the descriptor is gone either way) and holds `fd`.
  void Reset(int fd = -1);

 private:
  int fd_ = -1;
};

// The two ends of a pipe: bytes written to `write` are read from `read`.
struct Pipe {
  Fd read;
  Fd write;
};

// A new pipe, both ends close-on-exec. Throws troupe::Error (naming the system error) when the process is
// out of descriptors or the kernel refuses.
Pipe MakePipe();

// Writes all of `data` to `fd`, retrying after EINTR and short writes. False when a write failed (the
// reader is gone: EPIPE, with SIGPIPE ignored or blocked; or another error); never throws.
bool WriteAll(int fd, const std::string& data);

}  // namespace troupe::proc
