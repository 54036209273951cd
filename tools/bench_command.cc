// `troupe bench <workload>` (see bench_command.h).
#include "tools/bench_command.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "bench/benchmarks.h"

namespace troupe::tools {
namespace {

// Adds one declared option to a workload's subcommand as CLI11 option or flag, with its checks.
void AddOption(CLI::App* app, const bench::BenchOption& option) {
  CLI::Option* added = std::visit(
      [&](auto* field) -> CLI::Option* {
        using Field = std::remove_pointer_t<decltype(field)>;
        if constexpr (std::is_same_v<Field, bool>) {
          return app->add_flag(option.flags(), *field, option.help());
        } else {
          return app->add_option(option.flags(), *field, option.help());
        }
      },
      option.target());
  if (option.required()) added->required();
  if (option.delimiter() != '\0') added->delimiter(option.delimiter());
  switch (option.check()) {
    case bench::BenchOption::Check::kNone:
      break;
    case bench::BenchOption::Check::kIntRange:
      added->check(CLI::Range(static_cast<int>(option.lo()), static_cast<int>(option.hi())));
      break;
    case bench::BenchOption::Check::kRange:
      added->check(CLI::Range(option.lo(), option.hi()));
      break;
    case bench::BenchOption::Check::kPositive:
      added->check(CLI::PositiveNumber);
      break;
    case bench::BenchOption::Check::kNonNegative:
      added->check(CLI::NonNegativeNumber);
      break;
    case bench::BenchOption::Check::kChoices:
      added->check(CLI::IsMember(option.choices()));
      break;
  }
  if (option.size_units()) added->transform(CLI::AsSizeValue(false));
  if (!option.type_name().empty()) added->type_name(option.type_name());
  if (option.show_default()) added->capture_default_str();
  if (option.hidden()) added->group("");
}

}  // namespace

BenchCommand::BenchCommand(CLI::App* root) {
  app_ = root->add_subcommand("bench", "Run a benchmark workload and write its results as JSON");
  app_->footer(
      "Runs one benchmark workload: a warm-up, timed repetitions with an in-run correctness check, a derived "
      "figure, and the anchor (the same work on an established runtime) measured in the same run, written to "
      "one JSON file. Timings are never asserted; the exit status only says whether the checks passed.\n\n"
      "Examples:\n"
      "  troupe bench engine --json engine.json\n"
      "  troupe bench ndarray --json ndarray.json\n"
      "  troupe bench ops --json ops.json\n"
      "  troupe bench io --json io.json\n"
      "  troupe bench kvstore-local --json kvstore.json\n"
      "  troupe bench kvstore-dist --json dist.json\n"
      "  troupe bench ops --help\n");

  for (const bench::Benchmark& b : bench::AllBenchmarks()) {
    CLI::App* sub = app_->add_subcommand(b.name, b.summary);
    sub->footer(b.description);
    bench::BenchOptionList options;
    std::function<int()> run = b.bind(&options);
    for (const bench::BenchOption& option : options.options()) AddOption(sub, option);
    sub->allow_extras(false);
    workloads_.push_back({b.name, sub, std::move(run)});
  }

  // Set after the workloads were added (subcommands inherit it when created): an unknown workload name
  // is collected here and reported by Run() with the list of known ones.
  app_->allow_extras();
}

bool BenchCommand::chosen() const { return app_->parsed(); }

std::vector<std::string> BenchCommand::WorkloadNames() const {
  std::vector<std::string> names;
  for (const Workload& w : workloads_) names.push_back(w.name);
  return names;
}

int BenchCommand::Run() {
  for (const Workload& w : workloads_) {
    if (w.app->parsed()) return w.run();
  }
  std::string known;
  for (const Workload& w : workloads_) {
    if (!known.empty()) known += ", ";
    known += w.name;
  }
  const std::vector<std::string> rest = app_->remaining();
  if (rest.empty()) {
    std::fprintf(stderr, "troupe bench: name a workload. Known workloads: %s\n", known.c_str());
  } else if (rest.front().rfind('-', 0) == 0) {
    std::fprintf(stderr, "troupe bench: unknown option '%s' (options go after the workload). Known workloads: %s\n",
                 rest.front().c_str(), known.c_str());
  } else {
    std::fprintf(stderr, "troupe bench: unknown workload '%s'. Known workloads: %s\n", rest.front().c_str(),
                 known.c_str());
  }
  std::fprintf(stderr, "Run 'troupe bench --help' for more information.\n");
  return 2;
}

}  // namespace troupe::tools
