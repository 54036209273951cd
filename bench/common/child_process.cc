// A child process with piped stdin/stdout: see bench/common/child_process.h.
#include "bench/common/child_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <utility>
#include <stdexcept>

extern char** environ;

namespace troupe::bench {

ChildProcess::ChildProcess(std::string name, const std::vector<std::string>& argv,
                           const std::map<std::string, std::string>& env, bool merge_stderr, bool die_with_parent)
    : name_(std::move(name)) {
  int out[2], in[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(in, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    if (env.count(kv.substr(0, kv.find('='))) == 0) env_strings.push_back(kv);
  }
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<std::string> args = argv;
  // A name without a slash is looked up in PATH (as execvp would); not found: execve fails, the child exits 127.
  if (!args.empty() && !FindProgram(args[0]).empty()) args[0] = FindProgram(args[0]);
  std::vector<char*> argp, envp;
  for (auto& a : args) argp.push_back(a.data());
  argp.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    if (die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(143);  // the parent died before prctl
    }
    ::dup2(out[1], 1);
    if (merge_stderr) ::dup2(out[1], 2);
    ::dup2(in[0], 0);
    ::execve(argp[0], argp.data(), envp.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(in[0]);
  out_ = out[0];
  in_ = in[1];
  pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && status_ < 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  for (int fd : {out_, in_, pidfd_}) {
    if (fd >= 0) ::close(fd);
  }
}

std::optional<std::string> ChildProcess::ReadLine(const std::string& prefix, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    for (auto nl = buf_.find('\n'); nl != std::string::npos; nl = buf_.find('\n')) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      if (line.rfind(prefix, 0) == 0) return line;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return std::nullopt;
    pollfd p{out_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<long long>(left, INT_MAX))) <= 0) return std::nullopt;
    char chunk[4096];
    const ssize_t n = ::read(out_, chunk, sizeof chunk);
    if (n <= 0) return std::nullopt;
    buf_.append(chunk, static_cast<std::size_t>(n));
  }
}

bool ChildProcess::ReadSome(std::vector<std::string>* lines) {
  char chunk[4096];
  const ssize_t n = ::read(out_, chunk, sizeof chunk);
  if (n > 0) buf_.append(chunk, static_cast<std::size_t>(n));
  for (auto nl = buf_.find('\n'); nl != std::string::npos; nl = buf_.find('\n')) {
    lines->push_back(buf_.substr(0, nl));
    buf_.erase(0, nl + 1);
  }
  if (n > 0 || (n < 0 && errno == EINTR)) return true;
  if (!buf_.empty()) lines->push_back(std::exchange(buf_, {}));
  return false;
}

bool ChildProcess::Write(const std::string& text) {
  return ::write(in_, text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

void ChildProcess::CloseInput() {
  if (in_ >= 0) ::close(in_);
  in_ = -1;
}

void ChildProcess::Signal(int sig) {
  if (status_ < 0) ::kill(pid_, sig);
}

int ChildProcess::Wait(int timeout_ms) {
  if (status_ >= 0) return status_;
  pollfd p{pidfd_, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) <= 0) return -1;
  int st = 0;
  ::waitpid(pid_, &st, 0);
  status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return status_;
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
  if (n <= 0) throw std::runtime_error("cannot read /proc/self/exe");
  return std::string(buf, static_cast<std::size_t>(n));
}

std::string RandomHexToken() {
  std::random_device rd;
  std::string token(32, '0');
  for (char& c : token) c = "0123456789abcdef"[rd() & 15];
  return token;
}

ChildCluster::ChildCluster(int servers, int workers, int timeout_ms) {
  std::map<std::string, std::string> env{{"DMLC_PS_ROOT_URI", "127.0.0.1"},
                                         {"DMLC_NUM_SERVER", std::to_string(servers)},
                                         {"DMLC_NUM_WORKER", std::to_string(workers)},
                                         {"TROUPE_CLUSTER_TOKEN", RandomHexToken()}};
  auto e = env;
  e["DMLC_ROLE"] = "scheduler";
  e["DMLC_PS_ROOT_PORT"] = "0";
  scheduler_ = std::make_unique<ChildProcess>("scheduler", std::vector<std::string>{SelfExe()}, e);
  const auto line = scheduler_->ReadLine("troupe scheduler: listening on", timeout_ms);
  if (!line) return;
  env["DMLC_PS_ROOT_PORT"] = line->substr(line->rfind(':') + 1);
  e = env;
  e["DMLC_ROLE"] = "server";
  for (int s = 0; s < servers; ++s) {
    servers_.push_back(std::make_unique<ChildProcess>("server", std::vector<std::string>{SelfExe()}, e));
  }
  worker_env_ = env;
  worker_env_["DMLC_ROLE"] = "worker";
  started_ = true;
}

ChildCluster::~ChildCluster() = default;

void ChildCluster::Wait(int timeout_ms, std::vector<std::string>* failures) {
  if (!started_) {
    failures->push_back("the scheduler did not start");
    return;
  }
  for (auto& s : servers_) {
    if (const int st = s->Wait(timeout_ms); st != 0) failures->push_back("a server exited " + std::to_string(st));
  }
  if (const int st = scheduler_->Wait(timeout_ms); st != 0) {
    failures->push_back("the scheduler exited " + std::to_string(st));
  }
}

int PrintWorkerResult(nlohmann::ordered_json result, const std::vector<std::string>& failures) {
  result["failures"] = failures;
  std::printf("RESULT %s\n", result.dump().c_str());
  std::fflush(stdout);
  return failures.empty() ? 0 : 1;
}

std::vector<nlohmann::ordered_json> CollectWorkerResults(const std::vector<std::unique_ptr<ChildProcess>>& workers,
                                                 int timeout_ms, std::vector<std::string>* failures) {
  std::vector<nlohmann::ordered_json> results;
  for (const auto& w : workers) {
    const auto line = w->ReadLine("RESULT ", timeout_ms);
    if (!line) {
      failures->push_back("a worker printed no result");
    } else {
      results.push_back(nlohmann::ordered_json::parse(line->substr(7)));
      for (const auto& f : results.back()["failures"]) failures->push_back(f.get<std::string>());
    }
    if (const int st = w->Wait(timeout_ms); st != 0) failures->push_back("a worker exited " + std::to_string(st));
  }
  return results;
}

int ConnectLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace troupe::bench
