// `troupe bench <workload>`: the benchmark command group of the troupe tool.
//
// The workloads come from the bench registry (bench/benchmarks.h): each declares its name, summary, help
// text, options and run function next to its code in bench/<workload>/, and this command turns every entry
// into a subcommand with those options, with no code of its own per workload. To add a workload, see
// bench/benchmarks.h.
//
// Thread-safety: none needed; used from main() only.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace troupe::tools {

class BenchCommand {
 public:
  // Adds the `bench` subcommand and a subcommand for each registered workload to `root`.
  explicit BenchCommand(CLI::App* root);

  // True when the command line chose `troupe bench ...`.
  bool chosen() const;
  // Runs the chosen workload and returns the process exit status: the workload's own (0 ok, 1 a failed
  // in-run check), or 2 when no workload or an unknown one was named.
  int Run();

  // Names of the workloads, in help order.
  std::vector<std::string> WorkloadNames() const;

 private:
  struct Workload {
    std::string name;
    CLI::App* app = nullptr;
    std::function<int()> run;  // owns the workload's options struct, which the subcommand parses into
  };

  CLI::App* app_ = nullptr;
  std::vector<Workload> workloads_;
};

}  // namespace troupe::tools
