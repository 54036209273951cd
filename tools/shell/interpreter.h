// The language of `troupe shell` (tools/shell_command.h is its front end: line editing, history, `-c`).
//
// A statement is one of
//   name = expr          assigns (prints nothing); a variable holds an array or a data iterator
//   print expr | expr    prints the value: a number, or an NDArray as MXNet shows it
//   COMMAND words...     help [OP], vars, del NAME..., wait, engine stats, profile start|stop|table|dump FILE,
//                        load FILE, save FILE NAME..., quit (see Interpreter::HelpText)
// Expressions: numbers, variables, + - * / with the usual precedence (arrays of different shapes broadcast
// as in NumPy, through the broadcast_* operators), unary minus, parentheses, slices on the
// first axis (a[1], a[-1], a[0:2], a[:2]), built-in constructors (ones(2,3), zeros(2,3), full(2,3, 7),
// arange(5), arange(1, 7, 2), uniform(2,3), normal(2,3), dot(a, b), reshape(a, 3, 2), astype(a, int32)), nan
// and inf, data iterators (it = mnist(batch_size=10), or any registered iterator by name with its keyword
// arguments, e.g. CSVIter(data_csv='x.csv', data_shape=(3,), batch_size=2); next(it) gives the next batch's
// data, label(it) its label, reset(it) rewinds) and every registered
// operator: Op(expr, ..., input=expr, key=value, ...). Positional arguments and keywords whose value is an
// array are the operator's inputs (ListArguments, then ListAuxiliaryStates); other keywords are parameters,
// passed as text (quotes are removed: act_type=relu and act_type='relu' are the same; quote a value that is
// also a variable's name). An operator with several outputs gives its first. Variables hold arrays: `x = 3`
// stores a 1-element array.
//
// Several statements may share a line, separated by ';'. `#` starts a comment.
//
// Errors (a parse error names the column; an unknown name suggests close ones; operator and engine errors
// keep their troupe::Error message) are returned as a failed Outcome: a failed statement changes no
// variable, and the interpreter stays usable. Run never throws for user input.
//
// Commands are a table: cluster mode (--connect, tools/shell/cluster_commands.h) adds its own (AddCommand)
// without touching the language.
//
// Thread-safety: none; one interpreter is used from one thread. Arrays live on cpu(0) of Engine::Get().
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tensor/ndarray.h"

namespace troupe::shell {

// What one statement did: `text` is its output (without a final newline; may be empty) when ok, the error
// message otherwise.
struct Outcome {
  bool ok = true;
  std::string text;
};

class Interpreter {
 public:
  // A command: `args` are the words after the command name (split on blanks). Returns the text to print;
  // throws troupe::Error (or any std::exception) to fail.
  using CommandFn = std::function<std::string(const std::vector<std::string>& args)>;

  Interpreter();
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Runs one statement (no ';' splitting). An empty statement or a comment is ok and prints nothing.
  Outcome Run(const std::string& statement);
  // Splits text into statements at ';' and newlines outside quotes, brackets and comments; blank ones are
  // dropped.
  static std::vector<std::string> SplitStatements(const std::string& text);

  // Adds (or replaces) a command. `usage` ("profile start|stop|table|dump FILE") and `summary` (one line)
  // are what `help` shows.
  void AddCommand(const std::string& name, const std::string& usage, const std::string& summary, CommandFn fn);

  // Names that start with `prefix`: commands, built-in functions, registered operators (and aliases) and
  // variables, sorted and without duplicates. For tab completion.
  std::vector<std::string> Completions(const std::string& prefix) const;

  // The text of `help` (no argument): the language, the commands, the built-ins.
  std::string HelpText() const;
  // The text of `help NAME`: a registered operator's description, inputs and parameters, or a command's
  // or built-in's usage. Throws troupe::Error (suggesting close names) when NAME is none of those.
  std::string HelpFor(const std::string& name) const;

  // Set by `quit` / `exit`.
  bool quit_requested() const { return quit_; }

  // How the interpreter blocks on the engine (`wait`, printing an array): `waiter(block)` runs `block`
  // (which holds its own copies of what it waits for, so it may outlive the statement). The default runs it
  // here. The interactive front end runs it on a helper thread and gives up at Ctrl-C by throwing
  // troupe::Error: the statement fails ("interrupted"), the shell is back, and the engine finishes what was
  // pushed in the background.
  using Waiter = std::function<void(const std::function<void()>& block)>;
  void SetWaiter(Waiter waiter) { waiter_ = std::move(waiter); }
  void Block(const std::function<void()>& block) const {
    if (waiter_) {
      waiter_(block);
    } else {
      block();
    }
  }

  // Whether the user asked to interrupt the command that runs (Ctrl-C in the interactive front end): a
  // command that waits on something other than the engine (the cluster's `barrier`) asks now and then. The
  // default check says never.
  using InterruptCheck = std::function<bool()>;
  void SetInterruptCheck(InterruptCheck check) { interrupt_check_ = std::move(check); }
  bool Interrupted() const { return interrupt_check_ && interrupt_check_(); }

  // The variables.
  std::vector<std::string> VariableNames() const;
  // Null when `name` is not a variable.
  const NDArray* Find(const std::string& name) const;
  // The variable; throws troupe::Error (suggesting close names) when there is none.
  const NDArray& Require(const std::string& name) const;
  void Set(const std::string& name, NDArray value);

  // MXNet's NDArray text: the values as NumPy prints them (str(a.asnumpy()): each float in its shortest
  // round-trip digits, at most 8 after the point, or in scientific notation when the magnitudes call for it;
  // rows wrapped between elements at 75 columns; summarised with "..." beyond 1000 elements, 3 at each end of
  // an axis) and "<NDArray 2x3 @cpu(0)>". Waits for the array (rethrows its producer's error).
  static std::string Format(const NDArray& array);

  struct Value;
  struct Iterator;

 private:
  struct Command {
    std::string usage, summary;
    CommandFn fn;
  };
  void AddBuiltinCommands();
  std::string RunCommand(const Command& command, const std::string& rest);

  std::map<std::string, NDArray> vars_;
  std::map<std::string, std::shared_ptr<Iterator>> iters_;  // variables that hold a data iterator
  std::map<std::string, Command> commands_;
  bool quit_ = false;
  Waiter waiter_;
  InterruptCheck interrupt_check_;
};

}  // namespace troupe::shell
