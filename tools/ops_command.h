// `troupe ops`: the operator table, generated from the registry so that docs/operators.md cannot drift from
// the code: every registered operator with its aliases, parameters (default, or "required"), whether this
// build runs it on the GPU and whether it has a backward pass.
//
//   troupe ops                          the table (Markdown) to stdout
//   troupe ops --update docs/operators.md   rewrite the table between the file's markers
//   troupe ops --check docs/operators.md    exit 1 (and say what differs) when the file's table is stale
//
// The markers are the lines "<!-- troupe ops: begin -->" and "<!-- troupe ops: end -->".
// Thread-safety: none needed; used from main() only.
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace troupe::tools {

// The table as Markdown, one row per registered operator, sorted by name.
std::string OperatorTableMarkdown();

class OpsCommand {
 public:
  explicit OpsCommand(CLI::App* root);
  bool chosen() const;
  // 0 done (or the table is current), 1 the table in --check's file is stale or an I/O error (printed).
  int Run();

 private:
  CLI::App* app_ = nullptr;
  std::string update_path_;
  std::string check_path_;
};

}  // namespace troupe::tools
