#include "tools/ops_command.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "op/operator.h"

namespace troupe::tools {

namespace {

constexpr const char* kBegin = "<!-- troupe ops: begin -->";
constexpr const char* kEnd = "<!-- troupe ops: end -->";

// Markdown table cells may not hold '|' or line breaks.
std::string Cell(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

bool ReadFile(const std::string& path, std::string* text) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  *text = ss.str();
  return true;
}

// Splits text around the markers: before (through the begin line), the table, after (from the end line).
bool Split(const std::string& text, std::string* before, std::string* table, std::string* after) {
  const auto b = text.find(kBegin);
  const auto e = text.find(kEnd);
  if (b == std::string::npos || e == std::string::npos || e < b) return false;
  const auto table_start = text.find('\n', b);
  if (table_start == std::string::npos || table_start > e) return false;
  *before = text.substr(0, table_start + 1);
  *table = text.substr(table_start + 1, e - table_start - 1);
  *after = text.substr(e);
  return true;
}

}  // namespace

std::string OperatorTableMarkdown() {
  std::ostringstream out;
  out << "| operator | aliases | parameters (default) | GPU | backward |\n|---|---|---|---|---|\n";
  const OperatorRegistry& reg = OperatorRegistry::Get();
  for (const std::string& name : reg.ListNames()) {
    const OperatorInfo* info = reg.Find(name);
    std::vector<std::string> params;
    for (const ParamDoc& p : info->params) {
      if (p.name == "ctx") continue;  // accepted for MXNet's files, never used
      params.push_back(p.name + (p.required ? " (required)" : p.default_value.empty() ? "" : "=" + p.default_value));
    }
    if (info->simple_op) {
      // A SimpleOp with a scalar lists it among its parameters already; say what kind it is.
      params.insert(params.begin(), "SimpleOp");
    }
    bool backward = true;
    try {
      backward = info->factory()->HasBackward();
    } catch (const std::exception&) {
    }
    out << "| " << Cell(name) << " | " << Cell(Join(info->aliases)) << " | " << Cell(Join(params)) << " | "
        << (HasGpuImplementation(name) ? "yes" : "—") << " | " << (backward ? "yes" : "—") << " |\n";
  }
  return out.str();
}

OpsCommand::OpsCommand(CLI::App* root) {
  app_ = root->add_subcommand("ops", "The operator table (from the registry), or check/update it in a file");
  app_->add_option("--update", update_path_, "Rewrite the table between the markers of FILE (docs/operators.md)")
      ->option_text("FILE");
  app_->add_option("--check", check_path_, "Exit 1 when the table between the markers of FILE is not current")
      ->option_text("FILE");
  app_->footer(std::string("The table lists every registered operator: aliases, parameters with their defaults, "
                           "whether this build runs it on the GPU and whether it has a backward pass. A file "
                           "holds it between the lines\n  ") +
               kBegin + "\n  " + kEnd +
               "\n\nExamples:\n  troupe ops\n  troupe ops --update docs/operators.md\n  troupe ops --check "
               "docs/operators.md");
}

bool OpsCommand::chosen() const { return app_->parsed(); }

int OpsCommand::Run() {
  const std::string table = OperatorTableMarkdown();
  const std::string& path = !check_path_.empty() ? check_path_ : update_path_;
  if (path.empty()) {
    std::fputs(table.c_str(), stdout);
    return 0;
  }
  std::string text, before, old_table, after;
  if (!ReadFile(path, &text)) {
    std::fprintf(stderr, "troupe ops: cannot read %s\n", path.c_str());
    return 1;
  }
  if (!Split(text, &before, &old_table, &after)) {
    std::fprintf(stderr, "troupe ops: %s has no table markers (the lines %s and %s)\n", path.c_str(), kBegin, kEnd);
    return 1;
  }
  if (!check_path_.empty()) {
    if (old_table == table) {
      std::printf("%s: the operator table is current\n", path.c_str());
      return 0;
    }
    std::fprintf(stderr, "troupe ops: the operator table in %s is stale; run: troupe ops --update %s\n",
                 path.c_str(), path.c_str());
    return 1;
  }
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << before << table << after;
  if (!f) {
    std::fprintf(stderr, "troupe ops: cannot write %s\n", path.c_str());
    return 1;
  }
  std::printf("%s: operator table updated\n", path.c_str());
  return 0;
}

}  // namespace troupe::tools
