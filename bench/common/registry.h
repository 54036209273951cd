// How a benchmark workload declares itself to `troupe bench`: its name, a one-line summary, the text of
// its --help, its options (flags, help, default, checks, and the field of its options struct each one
// parses into) and its run function, in one place next to the workload (a `XxxBenchmark()` function in
// bench/<workload>/). bench/benchmarks.h lists them all; `troupe bench` (tools/bench_command.cc) loops over
// that list to build each `troupe bench <name>` subcommand and run the chosen one, with no code of its own
// per workload. The option table names no command-line library: the tool maps it onto CLI11.
//
// Thread-safety: none needed; the table is built and used on one thread (main) before any workload runs.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace troupe::bench {

// One command-line option of a workload, bound to a field of its options struct. A `bool` field is a flag
// (present: true); a vector field takes a list (repeated, or split at the delimiter); every other field
// takes one value, parsed as the field's type. The setters return *this, so a declaration reads as one
// expression: `options->Add("--repeat", &o->repeat, "Timed runs").Range(1, 1000).TypeName("R");`
class BenchOption {
 public:
  using Target = std::variant<bool*, int*, std::int64_t*, std::uint64_t*, double*, std::string*, std::vector<int>*,
                              std::vector<std::int64_t>*, std::vector<std::string>*>;
  // What the value must be, checked while parsing (a usage error names the option and the rule).
  enum class Check { kNone, kIntRange, kRange, kPositive, kNonNegative, kChoices };

  BenchOption(std::string flags, Target target, std::string help)
      : flags_(std::move(flags)), target_(target), help_(std::move(help)) {}

  // The option must be given.
  BenchOption& Required() {
    required_ = true;
    return *this;
  }
  // The value's name in --help ("FILE", "N", "LIST").
  BenchOption& TypeName(std::string name) {
    type_name_ = std::move(name);
    return *this;
  }
  // --help shows the field's value before parsing as the default.
  BenchOption& ShowDefault() {
    show_default_ = true;
    return *this;
  }
  // Left out of --help (roles of the processes a workload starts itself; not for people).
  BenchOption& Hidden() {
    hidden_ = true;
    return *this;
  }
  // A list option also splits a value at `delimiter` ("1,2,4").
  BenchOption& Delimiter(char delimiter) {
    delimiter_ = delimiter;
    return *this;
  }
  // Each value (each element of a list) lies in [lo, hi]; integers and reals read differently in --help.
  BenchOption& Range(int lo, int hi) { return SetCheck(Check::kIntRange, lo, hi); }
  BenchOption& Range(double lo, double hi) { return SetCheck(Check::kRange, lo, hi); }
  BenchOption& Positive() { return SetCheck(Check::kPositive, 0, 0); }
  BenchOption& NonNegative() { return SetCheck(Check::kNonNegative, 0, 0); }
  // Each value is one of `choices`.
  BenchOption& Choices(std::vector<std::string> choices) {
    choices_ = std::move(choices);
    return SetCheck(Check::kChoices, 0, 0);
  }
  // A byte count that may carry a unit ("64KiB", "1MiB"), read into an integer field.
  BenchOption& SizeUnits() {
    size_units_ = true;
    return *this;
  }

  const std::string& flags() const { return flags_; }
  const Target& target() const { return target_; }
  const std::string& help() const { return help_; }
  bool required() const { return required_; }
  const std::string& type_name() const { return type_name_; }
  bool show_default() const { return show_default_; }
  bool hidden() const { return hidden_; }
  char delimiter() const { return delimiter_; }
  Check check() const { return check_; }
  double lo() const { return lo_; }
  double hi() const { return hi_; }
  const std::vector<std::string>& choices() const { return choices_; }
  bool size_units() const { return size_units_; }

 private:
  BenchOption& SetCheck(Check check, double lo, double hi) {
    check_ = check;
    lo_ = lo;
    hi_ = hi;
    return *this;
  }

  std::string flags_;  // "--json", or short and long names: "-n,--num"
  Target target_;
  std::string help_;
  bool required_ = false;
  std::string type_name_;
  bool show_default_ = false;
  bool hidden_ = false;
  char delimiter_ = '\0';
  Check check_ = Check::kNone;
  double lo_ = 0, hi_ = 0;
  std::vector<std::string> choices_;
  bool size_units_ = false;
};

// A workload's options in the order --help shows them.
class BenchOptionList {
 public:
  // Declares an option bound to `*field` (which must outlive the list's use); see BenchOption.
  BenchOption& Add(std::string flags, BenchOption::Target field, std::string help) {
    return options_.emplace_back(std::move(flags), field, std::move(help));
  }
  const std::deque<BenchOption>& options() const { return options_; }

 private:
  std::deque<BenchOption> options_;  // a deque: Add's references stay valid as options are added
};

// One workload of `troupe bench`.
struct Benchmark {
  std::string name;         // `troupe bench <name>`
  std::string summary;      // its line in `troupe bench --help`
  std::string description;  // the footer of `troupe bench <name> --help` (what it measures, examples)
  // Makes a fresh options struct, declares its options (bound to that struct) into *options, and returns
  // the function that runs the workload with the parsed options and returns the process exit status. The
  // returned function owns the struct: the options' fields stay valid as long as it (or a copy) lives.
  std::function<std::function<int()>(BenchOptionList* options)> bind;
};

// A Benchmark for a workload with options struct `Options`: `declare` adds its options bound to the
// struct's fields, `run` runs it (0 ok, 1 a failed in-run check, other codes as the workload documents).
template <class Options>
Benchmark MakeBenchmark(std::string name, std::string summary, std::string description,
                        void (*declare)(Options*, BenchOptionList*), int (*run)(const Options&)) {
  Benchmark b{std::move(name), std::move(summary), std::move(description), nullptr};
  b.bind = [declare, run](BenchOptionList* list) {
    auto options = std::make_shared<Options>();
    declare(options.get(), list);
    return std::function<int()>([options, run] { return run(*options); });
  };
  return b;
}

// A number as a person writes it, for help texts: 0.2, not 0.200000.
inline std::string FormatNumber(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace troupe::bench
