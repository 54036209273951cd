// Child processes for `troupe launch`, the multi-process benchmarks and the multi-process tests: a program
// started with fork/exec from an argv, an environment (this process's with variables set on top, or only
// the given ones), a working directory, and its stdin/stdout/stderr on pipes, files, /dev/null or this
// process's own. Its stdout can be read line by line with a deadline; its exit can be waited for with a
// deadline (a pidfd, so no polling and no hang); it can be signalled alone or with its process group.
// The destructor kills (SIGKILL, the whole group when it has its own) and reaps a child still running, so
// nothing outlives its owner.
//
// Failures: starting a process throws troupe::Error (no pipe, no fork, an output file that cannot be opened,
// a working directory that does not exist); a program that cannot be executed (not found, not executable)
// is a child that exits 127, as a shell reports it. Every other call reports failure as a value (nullopt,
// false, -1) and never throws or aborts.
//
// Thread-safety: a Process is used by one thread at a time. The free functions may be called from any
// thread.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "proc/pipe.h"

namespace troupe::proc {

// Where one of the child's standard streams goes.
enum class Stream {
  kInherit,   // this process's own
  kPipe,      // a pipe this object holds (stdin: Write/CloseInput; stdout: ReadLine/ReadSome)
  kFile,      // a file: stdin reads it; stdout/stderr truncate or create it (mode 0644)
  kNull,      // /dev/null
  kToStdout,  // stderr only: the same place as stdout (with stdout on a pipe, one stream of lines)
};

// What to start and how.
struct SpawnOptions {
  // argv[0] is a path, or a name looked up in PATH (FindProgram). Must not be empty.
  std::vector<std::string> argv;
  // Set on top of this process's environment, or (with clear_env) the whole environment.
  std::map<std::string, std::string> env;
  bool clear_env = false;
  // The child's working directory; empty: this process's.
  std::string working_dir;
  Stream stdin_to = Stream::kPipe;
  Stream stdout_to = Stream::kPipe;
  Stream stderr_to = Stream::kInherit;
  std::string stdin_path, stdout_path, stderr_path;  // for Stream::kFile
  // The child gets SIGTERM when this process dies, even by SIGKILL (PR_SET_PDEATHSIG).
  bool die_with_parent = false;
  // The child leads a process group of its own (setpgid), so SignalGroup reaches what it starts too.
  bool new_process_group = false;
};

class Process {
 public:
  // Starts `options.argv`. `name` is for messages ("worker 1"). Throws troupe::Error when it cannot start.
  Process(std::string name, SpawnOptions options);
  // The common shape: stdin and stdout on pipes, stderr this process's own or (merge_stderr) with stdout.
  Process(std::string name, const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
          bool merge_stderr = false, bool die_with_parent = false);
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  const std::string& name() const { return name_; }
  int pid() const { return pid_; }

  // The next stdout line starting with `prefix` (earlier lines are skipped), or nullopt when none came
  // within timeout_ms or stdout ended (or is not a pipe).
  std::optional<std::string> ReadLine(const std::string& prefix, int timeout_ms);
  // For a caller that polls many children: one read of what stdout has; complete lines are appended to
  // `lines` (a last partial line too once stdout has ended). Returns false once stdout has ended.
  bool ReadSome(std::vector<std::string>* lines);
  // The stdout pipe (readable when ReadSome has something) and the exit descriptor (a pidfd, readable once
  // the child has exited); -1 when there is none.
  int out_fd() const { return out_.get(); }
  int exit_fd() const { return pidfd_.get(); }

  // Writes to the child's stdin; false when it could not be written (no pipe, or the child closed it).
  bool Write(const std::string& text);
  // Closes the child's stdin (it reads end of file).
  void CloseInput();

  // Sends `sig` to the child (nothing once it has been reaped). False when it could not be sent.
  bool Signal(int sig);
  // Sends `sig` to the child's process group (new_process_group), else to the child alone.
  bool SignalGroup(int sig);

  // The exit status (128 + signal when killed by one), or -1 while it still runs after timeout_ms
  // (timeout_ms < 0: wait as long as it takes). Once reaped, returns the same status again.
  int Wait(int timeout_ms);
  // The same with a deadline: -1 when it still runs at `deadline`.
  int WaitUntil(std::chrono::steady_clock::time_point deadline);
  // SIGTERM (to its group when it has one), up to `grace` for it to end, then SIGKILL; returns its exit
  // status. Returns at once when it has already been reaped.
  int Stop(std::chrono::milliseconds grace);
  // The status once reaped, -1 before.
  int status() const { return status_; }

 private:
  std::string name_;
  int pid_ = -1;
  bool group_ = false;
  Fd out_, in_, pidfd_;
  int status_ = -1;  // -1: not reaped yet
  std::string buf_;
};

// The path of `program` as exec would find it: itself when it has a slash, else the first executable
// PATH entry of that name; empty when there is none.
std::string FindProgram(const std::string& program);

// True once process `pid` is gone, or a zombie (one reparented to a PID 1 that does not reap stays one).
bool ProcessGone(int pid);

// The path of the running executable (/proc/self/exe), to start copies of it in other roles. Throws
// troupe::Error when it cannot be read.
std::string SelfExe();

// This process's environment as a map (entries without '=' are left out).
std::map<std::string, std::string> CurrentEnvironment();

}  // namespace troupe::proc
