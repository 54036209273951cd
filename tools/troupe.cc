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
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "base/address_space.h"
#include "kvstore/dist.h"
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
constexpr const char* kCommands = "bench, im2rec, launch, ops, predict, scheduler, score, server, shell, train";

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
    return app.exit(e) == 0 ? 0 : kExitUsage;
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
  if (rest.empty()) {
    std::fprintf(stderr, "troupe: name a command. Known commands: %s\n", kCommands);
  } else if (rest.front().rfind('-', 0) == 0) {
    std::fprintf(stderr, "troupe: unknown option '%s'\n", rest.front().c_str());
  } else {
    std::fprintf(stderr, "troupe: unknown command '%s'. Known commands: %s\n", rest.front().c_str(), kCommands);
  }
  std::fprintf(stderr, "Run 'troupe --help' for more information.\n");
  return kExitUsage;
}
