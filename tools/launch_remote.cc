// The pure parts of the remote launchers: see tools/launch_remote.h.
#include "tools/launch_remote.h"

#include <cctype>
#include <charconv>
#include <sstream>

namespace troupe::tools {
namespace {

// A non-negative decimal int, the whole string; -1 otherwise.
int ParseCount(const std::string& s) {
  int v = -1;
  const char* end = s.data() + s.size();
  const auto [p, ec] = std::from_chars(s.data(), end, v);
  return !s.empty() && ec == std::errc() && p == end && v >= 0 ? v : -1;
}

std::string Trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

bool IsShellName(const std::string& k) {
  if (k.empty() || std::isdigit(static_cast<unsigned char>(k[0])) != 0) return false;
  for (const char c : k) {
    if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '_') return false;
  }
  return true;
}

}  // namespace

TaskRole MapTaskRank(const std::string& launcher, const std::map<std::string, std::string>& env, int servers,
                     int workers) {
  TaskRole r;
  std::vector<std::pair<std::string, std::string>> sources;  // (rank variable, size variable), in order
  if (launcher == "mpi") {
    sources = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, {"PMI_RANK", "PMI_SIZE"}};
  } else if (launcher == "slurm") {
    sources = {{"SLURM_PROCID", "SLURM_NTASKS"}};
  } else {
    r.error = "unknown launcher '" + launcher + "' (mpi or slurm)";
    return r;
  }
  for (const auto& [rank_var, size_var] : sources) {
    const auto rank_it = env.find(rank_var);
    if (rank_it == env.end()) continue;
    const auto size_it = env.find(size_var);
    if (size_it == env.end()) {
      r.error = rank_var + " is set but " + size_var + " is not";
      return r;
    }
    const int rank = ParseCount(rank_it->second);
    const int size = ParseCount(size_it->second);
    if (rank < 0 || size < 1) {
      r.error = rank_var + "='" + rank_it->second + "' / " + size_var + "='" + size_it->second +
                "' are not a rank and a size";
      return r;
    }
    if (size != servers + workers) {
      r.error = "the job has " + std::to_string(size) + " tasks (" + size_var + ") but launch needs " +
                std::to_string(servers) + " servers + " + std::to_string(workers) +
                " workers; start it with that many tasks (troupe launch does)";
      return r;
    }
    if (rank >= size) {
      r.error = rank_var + "=" + std::to_string(rank) + " is not below " + size_var + "=" + std::to_string(size);
      return r;
    }
    r.rank = rank;
    r.role = rank < servers ? "server" : "worker";
    r.index = rank < servers ? rank : rank - servers;
    return r;
  }
  std::string names;
  for (const auto& s : sources) names += (names.empty() ? "" : " or ") + s.first + "/" + s.second;
  r.error = "no task rank in the environment (" + names + "); run this only under " +
            (launcher == "mpi" ? std::string("mpirun") : std::string("srun")) + " (troupe launch --launcher " +
            launcher + " does)";
  return r;
}

std::string SshHost::Address() const {
  std::string a = host.substr(host.find('@') + 1);  // npos + 1 == 0
  if (a.size() >= 2 && a.front() == '[' && a.back() == ']') a = a.substr(1, a.size() - 2);
  return a;
}

std::vector<SshHost> ParseHostfile(const std::string& text, std::string* error) {
  std::vector<SshHost> hosts;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = Trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    const auto bad = [&](const std::string& why) {
      *error = "line " + std::to_string(number) + " '" + line + "': " + why;
      return std::vector<SshHost>{};
    };
    if (line.find_first_of(" \t") != std::string::npos) return bad("one host a line (host or host:port)");
    SshHost h{line, 0};
    // host:port, or [v6]:port; a bare IPv6 address (several colons, no brackets) has no port.
    const auto colon = line.rfind(':');
    const bool bracketed = line.find('[') != std::string::npos;
    if (colon != std::string::npos && (bracketed ? colon > line.rfind(']') : line.find(':') == colon)) {
      h.host = line.substr(0, colon);
      h.port = ParseCount(line.substr(colon + 1));
      if (h.port < 1 || h.port > 65535) return bad("the port must be 1..65535");
    }
    if (h.Address().empty()) return bad("no host name");
    hosts.push_back(h);
  }
  if (hosts.empty()) *error = "no hosts (one host or host:port a line)";
  return hosts;
}

std::string ShellQuote(const std::string& s) {
  std::string q = "'";
  for (const char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string RemoteShellCommand(const std::string& cwd, const std::vector<std::string>& argv, int kill_after_s) {
  // The watchdog reads the script's stdin (kept as fd 3: a background list's own stdin is /dev/null) and
  // stops the command's whole session when it ends; setsid gives the command that session (its pid is the
  // session's id, since a background child of a non-interactive shell is no group leader).
  std::string script = "while IFS= read -r kv && [ -n \"$kv\" ]; do export \"$kv\"; done\ncd ";
  script += ShellQuote(cwd);
  script += " || exit 127\nexec 3<&0\nsetsid \"$@\" </dev/null 3<&- &\npid=$!\n";
  script += "(while IFS= read -r _; do :; done; kill -TERM -$pid; sleep ";
  script += std::to_string(kill_after_s);
  script += "; kill -KILL -$pid) <&3 >/dev/null 2>&1 &\nwatchdog=$!\n";
  script += "wait $pid 2>/dev/null; status=$?\nkill $watchdog 2>/dev/null\nexit $status\n";  // no 'Terminated' line
  std::string cmd = "exec sh -c ";
  cmd += ShellQuote(script);
  cmd += " sh";
  for (const std::string& a : argv) {
    cmd += ' ';
    cmd += ShellQuote(a);
  }
  return cmd;
}

std::string RemoteEnvBlock(const std::map<std::string, std::string>& env, std::string* error) {
  std::string block;
  for (const auto& [k, v] : env) {
    if (!IsShellName(k)) {
      *error = "'" + k + "' is not a variable name a shell accepts (letters, digits, _)";
      return {};
    }
    if (v.find('\n') != std::string::npos) {
      *error = "the value of " + k + " has a newline, which the ssh launcher cannot pass";
      return {};
    }
    block += k + "=" + v + "\n";
  }
  return block + "\n";
}

}  // namespace troupe::tools
