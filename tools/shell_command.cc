// `troupe shell` (see shell_command.h).
#include "tools/shell_command.h"

// libedit's readline-compatible API (Debian libedit-dev, BSD licensed).
#include <editline/readline.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "kvstore/dist.h"
#include "tools/cluster_token.h"
#include "tools/shell/cluster_commands.h"
#include "tools/shell/interpreter.h"

namespace troupe::tools {
namespace {

// Runs the statements of `text`; prints outputs on stdout and errors on stderr. Returns the number of
// failed statements; stops after `quit`.
int RunText(shell::Interpreter* interp, const std::string& text) {
  int failed = 0;
  for (const std::string& statement : shell::Interpreter::SplitStatements(text)) {
    const shell::Outcome o = interp->Run(statement);
    if (o.ok && !o.text.empty()) std::printf("%s\n", o.text.c_str());
    std::fflush(stdout);
    if (!o.ok) {
      std::fprintf(stderr, "error: %s\n", o.text.c_str());
      std::fflush(stderr);
      ++failed;
    }
    if (interp->quit_requested()) break;
  }
  return failed;
}

// --- the interactive loop -------------------------------------------------------------------------------

shell::Interpreter* g_interp = nullptr;  // for the completion callback
int g_sigint_pipe[2] = {-1, -1};         // SIGINT writes a byte here (self-pipe)
bool g_line_cancelled = false;           // set by ReadChar when Ctrl-C cancelled the line

void OnSigint(int) {
  const char c = 1;
  const int saved = errno;
  [[maybe_unused]] const auto n = write(g_sigint_pipe[1], &c, 1);
  errno = saved;
}

void DrainSigintPipe() {
  char buf[64];
  pollfd p{g_sigint_pipe[0], POLLIN, 0};
  while (poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0) {
    if (read(g_sigint_pipe[0], buf, sizeof buf) <= 0) break;
  }
}

// The interactive interrupt check (Interpreter::SetInterruptCheck): whether Ctrl-C was pressed (consumed).
bool TakeSigint() {
  pollfd p{g_sigint_pipe[0], POLLIN, 0};
  if (poll(&p, 1, 0) <= 0 || (p.revents & POLLIN) == 0) return false;
  DrainSigintPipe();
  return true;
}

// The interactive waiter (Interpreter::SetWaiter): the blocking call runs on a helper thread; this thread
// waits for it or for Ctrl-C. At Ctrl-C the statement fails and the shell is back; the helper (holding its
// own references) finishes in the background. Its completion goes through an eventfd both sides own, so a
// late write never hits a closed descriptor.
struct Completion {
  int fd = eventfd(0, EFD_CLOEXEC);
  std::exception_ptr error;
  ~Completion() {
    if (fd >= 0) close(fd);
  }
};

std::vector<std::shared_ptr<Completion>> g_abandoned;  // waits given up at Ctrl-C, still running

void InterruptibleWait(const std::function<void()>& block) {
  auto done = std::make_shared<Completion>();
  if (done->fd < 0) return block();  // no eventfd: wait here, uninterruptible
  std::thread([block, done] {
    try {
      block();
    } catch (...) {
      done->error = std::current_exception();
    }
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = write(done->fd, &one, sizeof one);
  }).detach();
  while (true) {
    pollfd fds[2] = {{done->fd, POLLIN, 0}, {g_sigint_pipe[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      throw Error("shell: poll failed while waiting");
    }
    if ((fds[0].revents & POLLIN) != 0) {
      std::uint64_t v = 0;
      [[maybe_unused]] const auto n = read(done->fd, &v, sizeof v);
      if (done->error) std::rethrow_exception(done->error);
      return;
    }
    if ((fds[1].revents & POLLIN) != 0) {
      DrainSigintPipe();
      g_abandoned.push_back(done);
      throw Error("interrupted: the shell is back; the engine finishes what was pushed in the background");
    }
  }
}

// libedit reads every key through this: it waits for a key or for Ctrl-C. Ctrl-C ends the line (the loop
// drops it), which is how the typed text is cancelled without leaving the shell.
int ReadChar(FILE* in) {
  const int fd = fileno(in);
  while (true) {
    pollfd fds[2] = {{fd, POLLIN, 0}, {g_sigint_pipe[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return EOF;
    }
    if ((fds[1].revents & POLLIN) != 0) {
      DrainSigintPipe();
      g_line_cancelled = true;
      std::fputs("^C", stdout);
      std::fflush(stdout);
      return '\n';
    }
    if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      unsigned char c = 0;
      const ssize_t n = read(fd, &c, 1);
      if (n == 1) return c;
      if (n < 0 && errno == EINTR) continue;
      return EOF;
    }
  }
}

char* CompletionGenerator(const char* text, int state) {
  static std::vector<std::string> matches;
  static std::size_t next = 0;
  if (state == 0) {
    matches = g_interp->Completions(text);
    next = 0;
  }
  return next < matches.size() ? strdup(matches[next++].c_str()) : nullptr;
}

char** Complete(const char* text, int, int) {
  rl_attempted_completion_over = 1;  // no file-name completion
  return rl_completion_matches(text, CompletionGenerator);
}

int RunInteractive(shell::Interpreter* interp, bool use_history) {
  g_interp = interp;
  if (pipe(g_sigint_pipe) != 0) throw std::runtime_error("shell: cannot create a pipe");
  struct sigaction sa {};
  sa.sa_handler = OnSigint;
  sigemptyset(&sa.sa_mask);
  struct sigaction old {};
  sigaction(SIGINT, &sa, &old);

  rl_readline_name = "troupe";
  rl_catch_signals = 0;  // our handler, not libedit's (which re-raises the signal)
  rl_getc_function = ReadChar;
  rl_attempted_completion_function = Complete;
  static char kBreaks[] = " \t\n=(),[]+-*/:;";
  rl_basic_word_break_characters = kBreaks;
  rl_completer_word_break_characters = kBreaks;

  std::string history;
  if (const char* home = std::getenv("HOME"); use_history && home != nullptr && *home != '\0') {
    history = std::string(home) + "/.troupe_history";
    read_history(history.c_str());
    stifle_history(1000);
  }
  interp->SetWaiter(InterruptibleWait);
  interp->SetInterruptCheck(TakeSigint);
  std::printf("troupe shell: 'help' for the language and the commands, Tab completes, Ctrl-D leaves\n");
  std::fflush(stdout);
  while (!interp->quit_requested()) {
    g_line_cancelled = false;
    char* raw = readline("troupe> ");
    if (raw == nullptr) {  // Ctrl-D
      std::printf("\n");
      break;
    }
    std::string line = raw;
    std::free(raw);
    if (g_line_cancelled) continue;
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    add_history(line.c_str());
    if (!history.empty()) write_history(history.c_str());
    RunText(interp, line);
    // Ctrl-C while a command ran that does not wait on the engine (pushing is quick): it is done; drop the key
    // instead of cancelling the next line.
    DrainSigintPipe();
  }
  interp->SetWaiter(nullptr);
  interp->SetInterruptCheck(nullptr);
  // The helpers of interrupted waits block in the engine: the process must not end (and destroy the engine)
  // under them.
  for (const auto& done : g_abandoned) {
    pollfd p{done->fd, POLLIN, 0};
    if (poll(&p, 1, 0) == 0) {
      std::printf("waiting for the engine to finish what was pushed...\n");
      std::fflush(stdout);
      while (poll(&p, 1, -1) < 0 && errno == EINTR) {
      }
    }
  }
  g_abandoned.clear();
  sigaction(SIGINT, &old, nullptr);
  close(g_sigint_pipe[0]);
  close(g_sigint_pipe[1]);
  g_interp = nullptr;
  return 0;
}

}  // namespace

ShellCommand::ShellCommand(CLI::App* root) {
  app_ = root->add_subcommand("shell", "An interactive shell: arrays, operators, the engine and the profiler");
  app_->add_option("-c,--command", command_,
                   "Run these statements (separated by ';' or newlines) and exit, instead of reading stdin");
  app_->add_flag("--no-history", no_history_, "Neither read nor write ~/.troupe_history");
  app_->add_option("--connect", connect_,
                   "HOST:PORT of a running cluster's scheduler: adds nodes, kv, checkpoint and barrier (the token "
                   "is TROUPE_CLUSTER_TOKEN, else --token-file, else the file troupe launch wrote for HOST:PORT; a "
                   "cluster still starting is waited for, up to --timeout-ms)");
  app_->add_option("--token-file", token_file_, "A file holding the cluster token (its first line)");
  app_->add_option("--timeout-ms", timeout_ms_,
                   "How long a cluster command (barrier too) waits for an answer before it fails")
      ->check(CLI::Range(1, 3600000))
      ->capture_default_str();
  app_->footer(
      "On a terminal: line editing, history in ~/.troupe_history, Tab completes operator, function, command "
      "and variable names; Ctrl-C cancels the line being typed or interrupts a wait on the engine (wait, printing "
      "an array; the engine finishes in the background) or barrier, Ctrl-D (or quit) leaves. With -c, or with a "
      "script on stdin, the statements run in order and every error is printed (error: ... on stderr) "
      "without stopping the rest. Type 'help' in the shell for the language and the commands, 'help OP' for "
      "an operator's inputs and parameters. With --connect the shell observes a running cluster (it takes no "
      "part in rounds and is not counted) and gains: nodes (role, rank, address, state, last heard), kv keys, "
      "kv pull KEY [NAME], kv stats (per server), checkpoint (to each server's own --checkpoint-dir) and barrier [ROUND] (waits until the "
      "workers complete that barrier round, by default their next; the shell neither joins nor delays it). Each "
      "cluster command fails after --timeout-ms without an answer, and at once once the cluster has ended.\n"
      "Exit status: 0 when every statement succeeded (an interactive session always exits 0), 1 when one "
      "failed, 2 on bad usage.\n\n"
      "Examples:\n"
      "  troupe shell\n"
      "      interactive\n"
      "  troupe shell -c 'a = ones(2,3); b = a * 2 + 1; print b'\n"
      "      prints [[3. 3. 3.] [3. 3. 3.]] as MXNet shows an NDArray\n"
      "  troupe shell -c 'x = uniform(4,8); w = ones(3,8); FullyConnected(x, w, num_hidden=3, no_bias=true)'\n"
      "      any registered operator: inputs by position or name, the rest are its parameters\n"
      "  troupe shell -c 'help FullyConnected'\n"
      "      an operator's inputs and parameters\n"
      "  troupe shell -c 'load model-0003.params; vars'\n"
      "      the arrays of a checkpoint as variables\n"
      "  troupe shell -c 'profile start; a = dot(uniform(512,512), uniform(512,512)); wait; profile stop'\n"
      "      the engine's functions and their times\n"
      "  troupe shell < script.txt\n"
      "      a script, one statement a line; exit status 1 if any failed\n"
      "  troupe shell --connect 127.0.0.1:9091 -c 'nodes; kv keys; kv pull 0 w'\n"
      "      a launched cluster's nodes, keys and a stored value (kept as w); the token comes from launch's file\n"
      "  TROUPE_CLUSTER_TOKEN=s3cret troupe shell --connect 10.0.0.1:9091\n"
      "      a cluster started by hand\n");
}

bool ShellCommand::chosen() const { return app_->parsed(); }

int ShellCommand::Run() {
  shell::Interpreter interp;
  if (!connect_.empty()) {
    const auto colon = connect_.rfind(':');
    char* end = nullptr;
    const long port = colon == std::string::npos ? 0 : std::strtol(connect_.c_str() + colon + 1, &end, 10);
    if (colon == std::string::npos || colon == 0 || *end != '\0' || port < 1 || port > 65535) {
      std::fprintf(stderr, "troupe shell: --connect wants HOST:PORT (the scheduler's), not '%s'\n", connect_.c_str());
      return 2;
    }
    // A cluster being launched right now (troupe launch ... & troupe shell --connect ...) has neither its
    // token file nor a listening scheduler for a moment: wait for both, up to --timeout-ms.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_);
    const auto wait_more = [&] {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      return true;
    };
    const std::string host = connect_.substr(0, colon);
    std::string token;
    if (const char* t = std::getenv("TROUPE_CLUSTER_TOKEN"); t != nullptr && *t != '\0') token = t;
    while (token.empty()) {
      const std::string path = !token_file_.empty() ? token_file_ : ClusterTokenPath(host, static_cast<int>(port));
      std::string error;
      token = ReadClusterToken(path, &error);
      if (token.empty() && !wait_more()) {
        std::fprintf(stderr,
                     "troupe shell: no cluster token after %d ms: %s; set TROUPE_CLUSTER_TOKEN or pass --token-file "
                     "(troupe launch writes the file for its cluster)\n",
                     timeout_ms_, error.c_str());
        return 2;
      }
    }
    for (;;) {
      try {
        shell::AddClusterCommands(&interp, ClusterObserver::Connect(host, static_cast<int>(port), token, timeout_ms_));
        break;
      } catch (const std::exception& e) {
        // Nobody listening yet: try again; any other answer (a wrong token, another version) is final.
        const bool refused = std::string(e.what()).find("cannot connect to") != std::string::npos;
        if (refused && wait_more()) continue;
        std::fprintf(stderr, "troupe shell: cannot connect to %s%s: %s\n", connect_.c_str(),
                     refused ? (" within " + std::to_string(timeout_ms_) + " ms").c_str() : "", e.what());
        return 1;
      }
    }
  }
  if (!app_->get_option("--command")->empty()) return RunText(&interp, command_) == 0 ? 0 : 1;
  if (isatty(STDIN_FILENO) == 0) {
    int failed = 0;
    for (std::string line; !interp.quit_requested() && std::getline(std::cin, line);) failed += RunText(&interp, line);
    return failed == 0 ? 0 : 1;
  }
  return RunInteractive(&interp, !no_history_);
}

}  // namespace troupe::tools
