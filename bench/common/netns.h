// A wire that behaves like one, for the multi-process benchmarks (`--net netns`): each process of a KVStore
// cluster (scheduler, servers, workers) in a network namespace of its own, joined by veth pairs to a bridge,
// with the links shaped by tc. On loopback every send pays for the receiver's processing at once and the
// "link" has no rate; here each node has a NIC of its own with a rate (and a latency where the kernel can).
//
// The layout (made with iproute2's `ip` and `tc`, as root; names carry this process's pid so that two runs
// never meet):
//   troupe-<pid>-hub   a namespace holding the bridge br0 and one port p<i> per node;
//   troupe-<pid>-n<i>  node i's namespace: lo and veth0 (the other end of p<i>) with 10.88.<i/250>.<i%250+1>/16.
// Nothing is made in this process's own namespace: deleting the namespaces deletes every link with them.
// Shaping, per node, on both ends of its link (veth0 = what the node sends, p<i> = what it receives), as a
// full-duplex NIC: tbf at the rate (burst = 1 ms at the rate, at least 64 KiB), and with a latency a netem
// qdisc (delay D on what a node sends, so a round trip between two nodes carries 2 D) above the tbf. Kernels
// without netem (sch_netem not built, no module to load) answer "Specified qdisc kind is unknown": the wire
// then goes on with rate shaping only and Applied() says so.
//
// Teardown: the destructor (and TearDown) kills what still runs inside the namespaces and deletes them. A
// guard process (a shell in its own process group, so a Ctrl-C to the benchmark does not reach it) holds a
// pipe from this process and does the same once the pipe closes: when this process dies by a signal, even
// SIGKILL, nothing is left behind either.
//
// Thread-safety: a NetnsWire is used by one thread at a time; RunIn changes only the calling thread's
// namespace, and only while `fn` runs.
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "proc/process.h"

namespace troupe::bench {

// How the links of a NetnsWire are shaped. Zero turns a shaping off.
struct NetShaping {
  double rate_gbit = 10;   // per node and direction, Gbit/s (tbf)
  double latency_us = 25;  // one-way, added to what each node sends (netem, where the kernel has it)
};

class NetnsWire {
 public:
  // Makes `nodes` namespaces (1..250) on a bridge, shaped as asked. Throws troupe::Error with what is
  // missing and what to do (not root, no `ip`, namespaces not permitted, tbf refused) after undoing what it
  // made; latency without netem is not an error (see Applied()).
  NetnsWire(int nodes, const NetShaping& shaping);
  ~NetnsWire();  // TearDown()
  NetnsWire(const NetnsWire&) = delete;
  NetnsWire& operator=(const NetnsWire&) = delete;

  int nodes() const { return nodes_; }
  const std::string& Namespace(int node) const { return names_.at(static_cast<std::size_t>(node)); }
  const std::string& hub() const { return hub_; }
  // Node i's IPv4 address (10.88.x.y), reachable from every other node.
  std::string Address(int node) const;
  // `argv` run inside node i's namespace: {ip, netns, exec, <namespace>, argv...} (ip execs the program, so
  // the pid is the program's own).
  std::vector<std::string> Wrap(int node, const std::vector<std::string>& argv) const;
  // Runs fn with the calling thread in node i's namespace (sockets made there stay there), then puts the
  // thread back. Throws troupe::Error when it cannot enter or return.
  void RunIn(int node, const std::function<void()>& fn) const;
  // What was applied: {"mode": "netns", "nodes", "rate_gbit" (0 = none), "latency_us_requested",
  // "latency_us_applied", "latency_note", "qdiscs" (what tc shows on node 0's veth0)}.
  nlohmann::ordered_json Applied() const;
  // One line for the benchmark's table: "netns, 10 Gbit/s, no latency (the kernel has no netem)".
  std::string Summary() const;
  // Kills what runs in the namespaces and deletes them; idempotent. Returns what could not be undone
  // (empty when all went).
  std::vector<std::string> TearDown();

  // The guard's pid (-1 after TearDown): tests wait on it (a pidfd) to see the teardown of a dead owner end.
  int guard_pid() const { return guard_ ? guard_->pid() : -1; }

  // Whether namespaces can be made here: empty when they can, else why not (for tests to skip with).
  static std::string Unavailable();

 private:
  int nodes_ = 0;
  NetShaping shaping_;
  double latency_applied_us_ = 0;
  std::string latency_note_;
  std::string hub_;
  std::vector<std::string> names_;  // node namespaces made so far
  bool hub_made_ = false;
  std::unique_ptr<proc::Process> guard_;
};

}  // namespace troupe::bench
