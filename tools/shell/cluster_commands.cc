// The shell's cluster commands: see tools/shell/cluster_commands.h.
#include "tools/shell/cluster_commands.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "kvstore/dist.h"
#include "tools/shell/interpreter.h"

namespace troupe::shell {
namespace {

std::string Row(const std::vector<std::pair<std::string, int>>& cells) {
  std::string out;
  for (const auto& [text, width] : cells) {
    out += text;
    if (static_cast<int>(text.size()) < width) out.append(static_cast<std::size_t>(width) - text.size(), ' ');
    out += ' ';
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

std::string Shape(const std::vector<std::int64_t>& dims) {
  std::string s = "(";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + (dims.size() == 1 ? ",)" : ")");
}

std::string Bytes(std::int64_t n) {
  char buf[32];
  if (n >= (std::int64_t{1} << 20)) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(n) / (1 << 20));
  } else if (n >= 1024) {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", static_cast<double>(n) / 1024);
  } else {
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(n));
  }
  return buf;
}

int ParseKey(const std::string& text) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < INT32_MIN || v > INT32_MAX) {
    throw Error("kv pull: '" + text + "' is not a key (an integer)");
  }
  return static_cast<int>(v);
}

}  // namespace

void AddClusterCommands(Interpreter* interp, std::shared_ptr<ClusterObserver> observer) {
  interp->AddCommand("nodes", "nodes", "the cluster's nodes: role, rank, address, state, last heard",
                     [observer](const std::vector<std::string>&) {
                       std::string cluster, broken;
                       std::int64_t barriers = 0;
                       const auto nodes = observer->Nodes(&cluster, &broken, &barriers);
                       std::string out = "cluster " + cluster + "; barrier rounds completed: " +
                                         std::to_string(barriers) + "\n" +
                                         Row({{"role", 10}, {"rank", 5}, {"address", 22}, {"state", 8}, {"last heard", 0}});
                       for (const ClusterNodeInfo& n : nodes) {
                         const bool scheduler = n.role == "scheduler";
                         out += "\n" + Row({{n.role, 10},
                                            {n.rank < 0 ? "-" : std::to_string(n.rank), 5},
                                            {n.address, 22},
                                            {n.state, 8},
                                            {scheduler ? "-" : std::to_string(n.last_heartbeat_ms) + " ms ago", 0}});
                       }
                       if (!broken.empty()) out += "\nrounds fail: " + broken;
                       return out;
                     });
  interp->AddCommand(
      "kv", "kv keys | kv pull KEY [NAME] | kv stats", "the servers' keys, a stored value, the servers' counters",
      [observer, interp](const std::vector<std::string>& args) -> std::string {
        const std::string what = args.empty() ? "" : args[0];
        if (what == "keys" && args.size() == 1) {
          const auto keys = observer->Keys();
          if (keys.empty()) return "no keys";
          std::string out = Row({{"key", 6}, {"dtype", 8}, {"shape", 14}, {"server", 7}, {"part", 0}});
          for (const ClusterKeyInfo& k : keys) {
            out += "\n" + Row({{std::to_string(k.key), 6},
                               {k.dtype, 8},
                               {Shape(k.shape), 14},
                               {std::to_string(k.server), 7},
                               {std::to_string(k.part + 1) + "/" + std::to_string(k.parts), 0}});
          }
          return out;
        }
        if (what == "pull" && (args.size() == 2 || args.size() == 3)) {
          NDArray value = observer->Pull(ParseKey(args[1]));
          const std::string text = Interpreter::Format(value);
          if (args.size() == 3) interp->Set(args[2], value);
          return text;
        }
        if (what == "stats" && args.size() == 1) {
          std::string out;
          for (const ClusterServerStats& s : observer->Stats()) {
            if (!out.empty()) out += "\n";
            out += "server " + std::to_string(s.rank) + ": " + std::to_string(s.keys) + " keys, " +
                   std::to_string(s.pushes) + " pushes (" + Bytes(s.bytes_in) + " in), " + std::to_string(s.pulls) +
                   " pulls (" + Bytes(s.bytes_out) + " out), " + std::to_string(s.updates) + " updates, " +
                   std::to_string(s.workers) + " workers, " + s.mode;
          }
          return out.empty() ? "no live server" : out;
        }
        throw Error("kv: want 'kv keys', 'kv pull KEY [NAME]' or 'kv stats'");
      });
  interp->AddCommand("checkpoint", "checkpoint",
                     "every live server writes its checkpoint (to its own --checkpoint-dir)",
                     [observer](const std::vector<std::string>& args) -> std::string {
                       if (!args.empty()) {
                         throw Error("checkpoint: takes no directory; each server writes to its own --checkpoint-dir");
                       }
                       observer->Checkpoint();
                       return "checkpoint written by every live server";
                     });
  interp->AddCommand(
      "barrier", "barrier [ROUND]",
      "wait until the workers complete barrier ROUND (default: their next); the shell does not take part",
      [observer, interp](const std::vector<std::string>& args) -> std::string {
        if (args.size() > 1) throw Error("barrier: at most one round number");
        std::int64_t round = 0;
        if (!args.empty()) {
          char* end = nullptr;
          round = std::strtoll(args[0].c_str(), &end, 10);
          if (args[0].empty() || *end != '\0' || round < 1) {
            throw Error("barrier: '" + args[0] + "' is not a round number (1, 2, ...)");
          }
        }
        const std::int64_t done = observer->Barrier(round, [interp] { return interp->Interrupted(); });
        return "the workers completed barrier round " + std::to_string(done);
      });
}

}  // namespace troupe::shell
