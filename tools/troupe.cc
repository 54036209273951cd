// The `troupe` command: one executable, one subcommand per job (DESIGN.md §2 "tools/").
//
// Today: `troupe bench <workload>` (tools/bench_command.h), `troupe im2rec` (tools/im2rec_command.h),
// `troupe scheduler|server` (tools/dist_command.h; with no command and DMLC_ROLE set, the role runs),
// `troupe launch` (tools/launch_command.h), `troupe ops` (tools/ops_command.h: the operator table),
// `troupe train` (tools/train_command.h), `troupe score` and `troupe predict` (tools/score_command.h) and
// `troupe shell`
// (tools/shell_command.h; its language is tools/shell/interpreter.h). Each subcommand lives in its own
// tools/<name>_command.{h,cc}.
//
// Exit status: 0 success (and --help/--version), 1 a failed run (e.g. a benchmark's in-run check),
// 2 bad usage (unknown subcommand, workload or option; missing or bad value).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "base/address_space.h"
#include "kvstore/dist.h"
#include "op/param.h"
#include "tools/bench_command.h"
#include "tools/dist_command.h"
#include "tools/im2rec_command.h"
#include "tools/launch_command.h"
#include "tools/ops_command.h"
#include "tools/score_command.h"
#include "tools/shell_command.h"
#include "tools/train_command.h"

#ifndef TROUPE_VERSION
#define TROUPE_VERSION "unknown"
#endif

namespace {

constexpr int kExitUsage = 2;

// The commands a user can name (hidden ones, in the group "", left out), in the order they were added.
std::vector<std::string> CommandNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (!sub->get_group().empty()) names.push_back(sub->get_name());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string Join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// The deepest (sub)command the parse reached, and its name as the user typed it ("troupe bench engine").
const CLI::App* ParsedCommand(const CLI::App& app, std::string* name) {
  const CLI::App* at = &app;
  *name = "troupe";
  for (;;) {
    const std::vector<const CLI::App*> subs = at->get_subcommands([](const CLI::App* a) { return a->parsed(); });
    if (subs.empty()) return at;
    at = subs.front();
    *name += " " + at->get_name();
  }
}

// A parse error in words a user acts on: the unknown option with the close ones, an option given twice;
// CLI11's own message otherwise. Returns the exit status (0 for --help and --version).
int ReportParseError(CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == 0) return app.exit(e);
  std::string name;
  const CLI::App* command = ParsedCommand(app, &name);
  std::string message = e.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    const std::vector<std::string> extras = command->remaining();
    const auto option = std::find_if(extras.begin(), extras.end(), [](const std::string& a) { return a.rfind('-', 0) == 0; });
    if (option != extras.end()) {
      const std::string given = option->substr(0, option->find('='));
      std::vector<std::string> known;  // long names, compared without their dashes
      for (const CLI::Option* o : command->get_options()) {
        for (const std::string& l : o->get_lnames()) known.push_back(l);
      }
      std::string similar;
      for (const std::string& n : troupe::SimilarNameList(given.substr(given.find_first_not_of('-')), known)) {
        similar += (similar.empty() ? "--" : ", --") + n;
      }
      message = "unknown option '" + given + "'" + (similar.empty() ? "" : "; did you mean " + similar + "?");
    } else if (!extras.empty()) {
      message = "unexpected argument '" + extras.front() + "'";
    }
  } else if (const auto at = message.find(": At Most 1 required but received "); at != std::string::npos) {
    message = message.substr(0, at) + " was given more than once; it takes one value";
  }
  std::fprintf(stderr, "%s: %s\nRun '%s --help' for more information.\n", name.c_str(), message.c_str(), name.c_str());
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  // MXNet's rule: a process started with DMLC_ROLE=scheduler or server (and no command) runs that role of
  // the distributed KVStore (kvstore/dist.h) until its cluster ends.
  if (argc == 1) {
    if (const int status = troupe::RunDistRoleFromEnv(); status >= 0) return status;
  }
  CLI::App app{"troupe: an actor-model runtime for machine learning (the successor of Apache MXNet's engine)",
               "troupe"};
  app.footer(
      "troupe runs MXNet-style dependency-engine workloads on actors. This command gathers the tools "
      "around it; every subcommand has its own --help with a description and examples.\n\n"
      "Examples:\n"
      "  troupe --version\n"
      "  troupe bench engine --json engine.json\n"
      "  troupe im2rec train.lst images/ train\n"
      "  troupe train --model lenet --epochs 5 --checkpoint lenet\n"
      "  troupe score --symbol lenet-symbol.json --params lenet-0005.params\n"
      "  troupe predict --symbol lenet-symbol.json --params lenet-0005.params --output pred.tsv\n"
      "  troupe shell -c 'a = ones(2,3); print a * 2 + 1'\n"
      "  troupe launch -n 2 -s 1 -- troupe train --kvstore dist_sync --batch-size 50\n"
      "  troupe launch -n 2 -s 1 -- ./my_worker\n"
      "  troupe scheduler --port 9091 --num-servers 1 --num-workers 2\n"
      "  troupe server --root 127.0.0.1:9091\n"
      "  troupe bench --help\n");
  app.set_version_flag("--version", std::string("troupe ") + TROUPE_VERSION);

  troupe::tools::BenchCommand bench(&app);
  troupe::tools::Im2RecCommand im2rec(&app);
  troupe::tools::DistCommand dist(&app);
  troupe::tools::LaunchCommand launch(&app);
  troupe::tools::OpsCommand ops(&app);
  troupe::tools::TrainCommand train(&app);
  troupe::tools::ScoreCommand score(&app, false);
  troupe::tools::ScoreCommand predict(&app, true);
  troupe::tools::ShellCommand shell(&app);
  // After the subcommands were added (they inherit it when created): an unknown command is collected and
  // reported below with the list of known ones, instead of CLI11's generic message.
  app.allow_extras();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Help and version exit 0; every other parse error is a usage error.
    return ReportParseError(app, e);
  }

  try {
    if (bench.chosen()) return bench.Run();
    if (im2rec.chosen()) return im2rec.Run();
    if (dist.chosen()) return dist.Run();
    if (launch.chosen()) return launch.Run();
    if (ops.chosen()) return ops.Run();
    if (train.chosen()) return train.Run();
    if (score.chosen()) return score.Run();
    if (predict.chosen()) return predict.Run();
    if (shell.chosen()) return shell.Run();
  } catch (const std::bad_alloc& e) {
    // An allocation outside troupe's own checks (which name the request): say at least what the limit was.
    const std::string note = troupe::AddressSpaceNote();
    std::fprintf(stderr, "troupe: out of memory (%s)%s%s\n", e.what(), note.empty() ? "" : ": ", note.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "troupe: %s\n", e.what());
    return 1;
  }
  const std::vector<std::string> rest = app.remaining();
  const std::vector<std::string> commands = CommandNames(app);
  if (rest.empty()) {
    std::fprintf(stderr, "troupe: name a command. Known commands: %s\n", Join(commands).c_str());
  } else if (rest.front().rfind('-', 0) == 0) {
    std::fprintf(stderr, "troupe: unknown option '%s'\n", rest.front().c_str());
  } else {
    const std::string similar = troupe::SimilarNames(rest.front(), commands);
    std::fprintf(stderr, "troupe: unknown command '%s'%s. Known commands: %s\n", rest.front().c_str(),
                 similar.empty() ? "" : (" (did you mean " + similar + "?)").c_str(), Join(commands).c_str());
  }
  std::fprintf(stderr, "Run 'troupe --help' for more information.\n");
  return kExitUsage;
}
