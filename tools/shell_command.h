// `troupe shell`: an interactive shell over NDArrays, the operator registry, the engine and the profiler
// (the language is tools/shell/interpreter.h). Three ways in:
//   - a terminal on stdin: line editing, history (~/.troupe_history) and Tab completion of operator,
//     function, command and variable names through libedit's readline API; Ctrl-C cancels the line being
//     typed, or interrupts a command waiting on the engine (`wait`, printing an array): the shell is back
//     and the engine finishes what was pushed in the background (pushed functions cannot be abandoned; the
//     shell waits for them before it exits); Ctrl-D exits;
//   - `-c TEXT`: runs the statements in TEXT (separated by ';' or newlines) and exits;
//   - a script on stdin (not a terminal): runs it line by line, with no prompt.
// Errors print "error: ..." on stderr and the shell goes on with the next statement.
// With --connect HOST:PORT (the cluster's scheduler; the token from TROUPE_CLUSTER_TOKEN) the shell is an
// observer of a running cluster and has its commands too: nodes, kv keys|pull|stats, checkpoint.
//
// Exit status: 0 when every statement succeeded (always 0 interactively), 1 when one failed (-c and
// scripts still run the rest), 2 on bad usage.
//
// Thread-safety: none needed; used from main() only. The interactive loop installs a SIGINT handler while
// it runs.
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace troupe::tools {

class ShellCommand {
 public:
  // Adds the `shell` subcommand to `root`.
  explicit ShellCommand(CLI::App* root);
  bool chosen() const;
  int Run();

 private:
  CLI::App* app_ = nullptr;
  std::string command_;  // -c
  bool no_history_ = false;
  std::string connect_;  // --connect HOST:PORT: cluster mode (tools/shell/cluster_commands.h)
  std::string token_file_;  // --token-file
  int timeout_ms_ = 5000;
};

}  // namespace troupe::tools
