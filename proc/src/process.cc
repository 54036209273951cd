// Child processes: see proc/process.h.
#include "proc/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "base/error.h"

extern char** environ;

namespace troupe::proc {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void Fail(const std::string& name, const std::string& what) {
  throw Error("cannot start " + name + ": " + what + " (" + std::strerror(errno) + ")");
}

// The descriptor a file-backed stream opens in the parent (close-on-exec; the child dup2s it into place).
Fd OpenStream(const std::string& name, Stream stream, const std::string& path, bool input) {
  if (stream == Stream::kNull) {
    Fd fd(::open("/dev/null", (input ? O_RDONLY : O_WRONLY) | O_CLOEXEC));
    if (!fd.valid()) Fail(name, "cannot open /dev/null");
    return fd;
  }
  if (stream != Stream::kFile) return Fd();
  if (path.empty()) throw Error("cannot start " + name + ": Stream::kFile needs a path");
  Fd fd(input ? ::open(path.c_str(), O_RDONLY | O_CLOEXEC)
              : ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) Fail(name, std::string("cannot open '") + path + "' for " + (input ? "reading" : "writing"));
  return fd;
}

// Milliseconds from now to `deadline`, clamped to [0, INT_MAX] for poll.
int MillisUntil(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, INT_MAX));
}

}  // namespace

namespace {

SpawnOptions CommonShape(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                         bool merge_stderr, bool die_with_parent) {
  SpawnOptions o;
  o.argv = argv;
  o.env = env;
  o.stderr_to = merge_stderr ? Stream::kToStdout : Stream::kInherit;
  o.die_with_parent = die_with_parent;
  return o;
}

}  // namespace

Process::Process(std::string name, const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
                 bool merge_stderr, bool die_with_parent)
    : Process(std::move(name), CommonShape(argv, env, merge_stderr, die_with_parent)) {}

Process::Process(std::string name, SpawnOptions options) : name_(std::move(name)) {
  if (options.argv.empty()) throw Error("cannot start " + name_ + ": no program given (argv is empty)");
  if (options.stdout_to == Stream::kToStdout || options.stdin_to == Stream::kToStdout) {
    throw Error("cannot start " + name_ + ": only stderr can go to stdout");
  }
  if (!options.working_dir.empty()) {
    struct stat st {};
    if (::stat(options.working_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      Fail(name_, "the working directory '" + options.working_dir + "' is not a folder");
    }
  }
  // Everything the child needs is made here: between fork and exec only async-signal-safe calls are made.
  Pipe out, in;
  if (options.stdout_to == Stream::kPipe) out = MakePipe();
  if (options.stdin_to == Stream::kPipe) in = MakePipe();
  Fd in_file = OpenStream(name_, options.stdin_to, options.stdin_path, true);
  Fd out_file = OpenStream(name_, options.stdout_to, options.stdout_path, false);
  Fd err_file = OpenStream(name_, options.stderr_to, options.stderr_path, false);
  const int child_in = in.read.valid() ? in.read.get() : in_file.get();  // -1: inherit
  const int child_out = out.write.valid() ? out.write.get() : out_file.get();
  const int child_err = options.stderr_to == Stream::kToStdout ? (child_out >= 0 ? child_out : 1) : err_file.get();

  std::vector<std::string> env_strings;
  if (!options.clear_env) {
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv = *e;
      if (options.env.count(kv.substr(0, kv.find('='))) == 0) env_strings.push_back(kv);
    }
  }
  for (const auto& [k, v] : options.env) env_strings.push_back(k + "=" + v);
  std::vector<std::string> args = options.argv;
  // A name without a slash is looked up in PATH (as execvp would); not found: execve fails, the child exits 127.
  if (const std::string found = FindProgram(args[0]); !found.empty()) args[0] = found;
  std::vector<char*> argp, envp;
  for (auto& a : args) argp.push_back(a.data());
  argp.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const char* cwd = options.working_dir.empty() ? nullptr : options.working_dir.c_str();

  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) Fail(name_, "fork failed");
  if (pid_ == 0) {
    if (options.new_process_group) ::setpgid(0, 0);
    if (options.die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(143);  // the parent died before prctl
    }
    // dup2 clears close-on-exec on the copy; the originals close at exec.
    if (child_in >= 0) ::dup2(child_in, 0);
    if (child_out >= 0) ::dup2(child_out, 1);
    if (child_err >= 0) ::dup2(child_err, 2);
    if (cwd != nullptr && ::chdir(cwd) != 0) ::_exit(127);
    ::execve(argp[0], argp.data(), envp.data());
    ::_exit(127);
  }
  if (options.new_process_group) {
    ::setpgid(pid_, pid_);  // also here: whoever runs first, the group exists before anyone signals it
    group_ = true;
  }
  out_ = std::move(out.read);
  in_ = std::move(in.write);
  pidfd_.Reset(static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0)));
}

Process::~Process() {
  if (pid_ > 0 && status_ < 0) {
    if (group_) ::kill(-pid_, SIGKILL);
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

std::optional<std::string> Process::ReadLine(const std::string& prefix, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    for (auto nl = buf_.find('\n'); nl != std::string::npos; nl = buf_.find('\n')) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      if (line.rfind(prefix, 0) == 0) return line;
    }
    if (!out_.valid() || Clock::now() >= deadline) return std::nullopt;
    pollfd p{out_.get(), POLLIN, 0};
    const int ready = ::poll(&p, 1, MillisUntil(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return std::nullopt;
    char chunk[4096];
    const ssize_t n = ::read(out_.get(), chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    buf_.append(chunk, static_cast<std::size_t>(n));
  }
}

bool Process::ReadSome(std::vector<std::string>* lines) {
  if (!out_.valid()) return false;
  char chunk[4096];
  const ssize_t n = ::read(out_.get(), chunk, sizeof chunk);
  if (n > 0) buf_.append(chunk, static_cast<std::size_t>(n));
  for (auto nl = buf_.find('\n'); nl != std::string::npos; nl = buf_.find('\n')) {
    lines->push_back(buf_.substr(0, nl));
    buf_.erase(0, nl + 1);
  }
  if (n > 0 || (n < 0 && errno == EINTR)) return true;
  if (!buf_.empty()) lines->push_back(std::exchange(buf_, {}));
  return false;
}

bool Process::Write(const std::string& text) { return in_.valid() && WriteAll(in_.get(), text); }

void Process::CloseInput() { in_.Reset(); }

bool Process::Signal(int sig) { return status_ < 0 && pid_ > 0 && ::kill(pid_, sig) == 0; }

bool Process::SignalGroup(int sig) {
  if (!group_) return Signal(sig);
  return status_ < 0 && pid_ > 0 && ::kill(-pid_, sig) == 0;
}

int Process::Wait(int timeout_ms) {
  if (status_ >= 0 || pid_ <= 0) return status_;
  if (timeout_ms >= 0) return WaitUntil(Clock::now() + std::chrono::milliseconds(timeout_ms));
  int st = 0;
  while (::waitpid(pid_, &st, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return status_;
}

int Process::WaitUntil(Clock::time_point deadline) {
  if (status_ >= 0 || pid_ <= 0) return status_;
  int st = 0;
  for (;;) {
    // WNOHANG first: the child may have ended already (and without a pidfd this is the only way to know).
    const pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) break;
    if (r < 0 && errno != EINTR) return -1;
    if (Clock::now() >= deadline) return -1;
    if (pidfd_.valid()) {
      pollfd p{pidfd_.get(), POLLIN, 0};
      ::poll(&p, 1, MillisUntil(deadline));
    } else {
      // No pidfd (a kernel before 5.3): wait in short steps up to the deadline.
      ::poll(nullptr, 0, std::min(MillisUntil(deadline), 10));
    }
  }
  status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return status_;
}

int Process::Stop(std::chrono::milliseconds grace) {
  if (status_ >= 0 || pid_ <= 0) return status_;
  SignalGroup(SIGTERM);
  if (WaitUntil(Clock::now() + grace) >= 0) return status_;
  SignalGroup(SIGKILL);
  return Wait(-1);
}

std::string FindProgram(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t at = 0;
  while (at <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', at), dirs.size());
    const std::string candidate = (end > at ? dirs.substr(at, end - at) : std::string(".")) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    at = end + 1;
  }
  return {};
}

bool ProcessGone(int pid) {
  if (::kill(pid, 0) == -1 && errno == ESRCH) return true;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  std::FILE* f = std::fopen(path, "r");
  if (f == nullptr) return true;
  char buf[512] = {};
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const char* paren = std::strrchr(buf, ')');  // the state follows the command name, which may hold spaces
  return n > 0 && paren != nullptr && std::strncmp(paren, ") Z ", 4) == 0;
}

std::string SelfExe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw Error(std::string("cannot read /proc/self/exe (") + std::strerror(errno) + ")");
  return std::string(buf, static_cast<std::size_t>(n));
}

std::map<std::string, std::string> CurrentEnvironment() {
  std::map<std::string, std::string> env;
  for (char** v = environ; *v != nullptr; ++v) {
    const std::string kv = *v;
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

}  // namespace troupe::proc
