// NetnsWire: see bench/common/netns.h.
#include "bench/common/netns.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"

namespace troupe::bench {
namespace {

constexpr int kMaxNodes = 250;
constexpr int kCommandTimeoutMs = 30000;

struct Ran {
  int status = -1;
  std::string output;  // stdout and stderr
};

// Runs a command (ip, tc) to its end; its output merged. Never throws (a program that cannot start is
// status 127, as proc::Process reports it).
Ran Run(const std::vector<std::string>& argv) {
  Ran r;
  try {
    proc::Process p(argv.front(), argv, {}, /*merge_stderr=*/true);
    p.CloseInput();
    std::vector<std::string> lines;
    while (p.ReadSome(&lines)) {
    }
    for (const std::string& l : lines) r.output += l + "\n";
    r.status = p.Wait(kCommandTimeoutMs);
  } catch (const std::exception& e) {
    r.output = e.what();
  }
  return r;
}

std::string Joined(const std::vector<std::string>& argv) {
  std::string s;
  for (const std::string& a : argv) {
    if (!s.empty()) s += ' ';
    s += a;
  }
  return s;
}

std::string Trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// tbf at `gbit` Gbit/s: burst 1 ms at the rate (at least 64 KiB: a GSO segment must fit), a queue of 20 ms.
std::vector<std::string> Tbf(double gbit) {
  const double bytes_per_s = gbit * 1e9 / 8;
  const long burst = std::max(65536L, std::lround(bytes_per_s * 1e-3));
  const long limit = std::max(4L << 20, std::lround(bytes_per_s * 20e-3));
  char rate[32];
  std::snprintf(rate, sizeof rate, "%.0fkbit", gbit * 1e6);
  return {"tbf", "rate", rate, "burst", std::to_string(burst), "limit", std::to_string(limit)};
}

std::vector<std::string> Cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

std::string NetnsWire::Unavailable() {
  if (::geteuid() != 0) return "network namespaces need root (run the benchmark as root, or use --net loopback)";
  if (proc::FindProgram("ip").empty() || proc::FindProgram("tc").empty()) {
    return "iproute2's `ip` and `tc` are not on PATH (Debian: apt-get install iproute2)";
  }
  const std::string probe = "troupe-" + std::to_string(::getpid()) + "-probe";
  const Ran add = Run({"ip", "netns", "add", probe});
  if (add.status != 0) return "cannot make a network namespace (`ip netns add`: " + Trimmed(add.output) + ")";
  Run({"ip", "netns", "del", probe});
  return {};
}

NetnsWire::NetnsWire(int nodes, const NetShaping& shaping) : nodes_(nodes), shaping_(shaping) {
  if (nodes < 1 || nodes > kMaxNodes) {
    throw Error("netns wire: " + std::to_string(nodes) + " nodes; 1 to " + std::to_string(kMaxNodes) + " fit");
  }
  if (const std::string why = Unavailable(); !why.empty()) throw Error("--net netns: " + why);
  const std::string prefix = "troupe-" + std::to_string(::getpid());
  hub_ = prefix + "-hub";
  std::vector<std::string> all{hub_};
  for (int i = 0; i < nodes; ++i) all.push_back(prefix + "-n" + std::to_string(i));
  // The guard first, so that whatever is made below goes when this process goes.
  std::string script =
      "trap '' INT TERM HUP; cat >/dev/null; for n in " + Joined(all) +
      "; do for p in $(ip netns pids $n 2>/dev/null); do kill -9 $p 2>/dev/null; done; ip netns del $n "
      "2>/dev/null; done; exit 0";
  proc::SpawnOptions guard;
  guard.argv = {"sh", "-c", script};
  guard.stdout_to = proc::Stream::kNull;
  guard.stderr_to = proc::Stream::kNull;
  guard.new_process_group = true;
  guard_ = std::make_unique<proc::Process>("netns guard", guard);

  auto must = [&](const std::vector<std::string>& argv) {
    const Ran r = Run(argv);
    if (r.status != 0) {
      const std::string what = "netns wire: `" + Joined(argv) + "` failed: " + Trimmed(r.output);
      TearDown();
      throw Error(what);
    }
  };
  must({"ip", "netns", "add", hub_});
  hub_made_ = true;
  must({"ip", "-n", hub_, "link", "add", "br0", "type", "bridge"});
  must({"ip", "-n", hub_, "link", "set", "br0", "up"});
  for (int i = 0; i < nodes; ++i) {
    const std::string& ns = all[static_cast<std::size_t>(i) + 1];
    std::string port = std::to_string(i);
    port.insert(0, 1, 'p');
    must({"ip", "netns", "add", ns});
    names_.push_back(ns);
    must({"ip", "link", "add", "name", "veth0", "netns", ns, "type", "veth", "peer", "name", port, "netns", hub_});
    must({"ip", "-n", ns, "addr", "add", Address(i) + "/16", "dev", "veth0"});
    must({"ip", "-n", ns, "link", "set", "lo", "up"});
    must({"ip", "-n", ns, "link", "set", "veth0", "up"});
    must({"ip", "-n", hub_, "link", "set", port, "master", "br0"});
    must({"ip", "-n", hub_, "link", "set", port, "up"});
    // What node i sends: latency (netem, where the kernel has it: tried on node 0) above the rate.
    bool netem = false;
    if (shaping_.latency_us > 0 && (i == 0 || latency_applied_us_ > 0)) {
      const std::string delay = std::to_string(std::lround(shaping_.latency_us)) + "us";
      const std::vector<std::string> add = {"tc", "-n", ns, "qdisc", "add", "dev", "veth0", "root", "handle", "1:",
                                            "netem", "delay", delay};
      if (i > 0) {
        must(add);
      } else if (const Ran r = Run(add); r.status == 0) {
        latency_applied_us_ = static_cast<double>(std::lround(shaping_.latency_us));
      } else {
        latency_note_ = "latency not shaped: this kernel has no netem qdisc (`tc qdisc add ... netem`: " +
                        Trimmed(r.output) + "); the run goes on with rate shaping only";
      }
      netem = latency_applied_us_ > 0;
    }
    if (shaping_.rate_gbit > 0) {
      std::vector<std::string> at = {"tc", "-n", ns, "qdisc", "add", "dev", "veth0"};
      if (netem) {
        at.insert(at.end(), {"parent", "1:", "handle", "2:"});
      } else {
        at.push_back("root");
      }
      must(Cat(at, Tbf(shaping_.rate_gbit)));
      // What node i receives: its port's egress on the bridge.
      must(Cat({"tc", "-n", hub_, "qdisc", "add", "dev", port, "root"}, Tbf(shaping_.rate_gbit)));
    }
  }
}

NetnsWire::~NetnsWire() {
  for (const std::string& p : TearDown()) std::fprintf(stderr, "troupe bench: %s\n", p.c_str());
}

std::string NetnsWire::Address(int node) const {
  return "10.88." + std::to_string(node / 250) + "." + std::to_string(node % 250 + 1);
}

std::vector<std::string> NetnsWire::Wrap(int node, const std::vector<std::string>& argv) const {
  return Cat({"ip", "netns", "exec", Namespace(node)}, argv);
}

void NetnsWire::RunIn(int node, const std::function<void()>& fn) const {
  const int self = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  const int there = ::open(("/run/netns/" + Namespace(node)).c_str(), O_RDONLY | O_CLOEXEC);
  if (self < 0 || there < 0 || ::setns(there, CLONE_NEWNET) != 0) {
    if (self >= 0) ::close(self);
    if (there >= 0) ::close(there);
    throw Error("netns wire: cannot enter " + Namespace(node));
  }
  ::close(there);
  auto back = [&] {
    const bool ok = ::setns(self, CLONE_NEWNET) == 0;
    ::close(self);
    if (!ok) throw Error("netns wire: cannot return from " + Namespace(node) + " to this process's namespace");
  };
  try {
    fn();
  } catch (...) {
    back();
    throw;
  }
  back();
}

nlohmann::ordered_json NetnsWire::Applied() const {
  nlohmann::ordered_json j;
  j["mode"] = "netns";
  j["nodes"] = nodes_;
  j["rate_gbit"] = shaping_.rate_gbit;
  j["latency_us_requested"] = shaping_.latency_us;
  j["latency_us_applied"] = latency_applied_us_;
  if (!latency_note_.empty()) j["latency_note"] = latency_note_;
  if (!names_.empty()) j["qdiscs_node0"] = Trimmed(Run({"tc", "-n", names_.front(), "qdisc", "show", "dev", "veth0"}).output);
  return j;
}

std::string NetnsWire::Summary() const {
  char buf[64];
  std::string s = "netns, ";
  if (shaping_.rate_gbit > 0) {
    std::snprintf(buf, sizeof buf, "%g Gbit/s", shaping_.rate_gbit);
    s += buf;
  } else {
    s += "no rate";
  }
  if (latency_applied_us_ > 0) {
    std::snprintf(buf, sizeof buf, ", %g us one-way", latency_applied_us_);
    s += buf;
  } else if (shaping_.latency_us > 0) {
    s += ", no latency (the kernel has no netem)";
  }
  return s;
}

std::vector<std::string> NetnsWire::TearDown() {
  std::vector<std::string> problems;
  if (!guard_) return problems;
  // The guard does the work (one way out for every ending): it kills what runs inside and deletes them.
  guard_->CloseInput();
  if (guard_->Wait(kCommandTimeoutMs) != 0) problems.push_back("the netns guard did not finish its teardown");
  guard_.reset();
  const Ran list = Run({"ip", "netns", "list"});
  std::vector<std::string> all = names_;
  if (hub_made_) all.push_back(hub_);
  for (const std::string& n : all) {
    if (list.output.find(n + " ") != std::string::npos || list.output.find(n + "\n") != std::string::npos) {
      problems.push_back("namespace " + n + " is still there; remove it with `ip netns del " + n + "`");
    }
  }
  names_.clear();
  hub_made_ = false;
  return problems;
}

}  // namespace troupe::bench
