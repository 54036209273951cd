// `troupe bench kvstore-dist`: the distributed KVStore across processes on loopback against raw TCP
// between two processes, measured in the same run.
//
// The cluster: a scheduler, S servers (each S in --servers, default 1) and --workers W workers (default 2),
// each a separate process (copies of this executable:
// the roles through DMLC_ROLE, the workers through the hidden --role worker). Each worker runs dist_sync
// rounds over a model of --model-mib MiB in keys of --key-mib MiB (float32): a round is PushPull of every
// key (gradients (rank + 1) x (round + 1)) and ends when every pulled key has arrived. Then --latency-calls
// PushPull calls of a 16-float key, each waited for.
//
// Figures:
//   throughput  = bytes through the server per second: workers x model x 2 (each pushes and pulls the
//                 model) / round time (the slower worker's median);
//   per worker  = model x 2 / round time;
//   latency     = median time of one PushPull of the small key, waited for (a sync round of both workers).
// Anchors (raw TCP, this process and a child process, TCP_NODELAY, measured in the same run):
//   stream      = one-way throughput of 256 MiB written in --key-mib chunks (the bound of one connection);
//   echo        = request/response of the model in --key-mib chunks (what push+pull of one key at a time
//                 costs over bare sockets), per direction summed;
//   rtt         = median round trip of a 64-byte message.
// Ratios: throughput / stream (target >= 0.7), latency / rtt (target <= 3), and throughput / echo.
//
// Wires (--net): loopback (127.0.0.1), netns (each process, the anchors' peers included, in a network
// namespace of its own on a shaped bridge: bench/common/netns.h), or both in one command; the JSON's "runs"
// holds one entry per wire and server count (the top-level "kvstore", "raw_tcp" and "ratios" repeat the first).
//
// In-run checks: every pulled key equals the sum of the workers' gradients of that round (first and last
// element of every key each round; every element of the first and last key in the last round); the small
// key likewise; the anchors' peers echo the bytes they were sent (checked on the first and last byte of
// every chunk) and every process exits 0.
#pragma once

#include <string>
#include <vector>

#include "bench/common/multi_process.h"
#include "bench/common/registry.h"

namespace troupe::bench {

struct KVStoreDistBenchOptions {
  std::string json_path;  // required for the coordinator
  bool quick = false;     // small model, few rounds: a smoke run for CTest
  int repeat = 0;         // timed rounds; 0: kDistDefaultRepeat (2 with quick)
  double model_mib = 0;   // 0: 64 (4 with quick)
  double key_mib = 4;
  int latency_calls = 0;  // 0: 2000 (200 with quick)
  int workers = 2;
  std::vector<int> servers = {1};  // server counts to measure
  NetOptions net;                  // loopback, netns or both; the shaping of netns
  // Hidden: the role of a process the coordinator started ("worker", "tcp-peer"), and the tcp peer's address.
  std::string role;
  std::string peer_host = "127.0.0.1";
  int peer_port = 0;
};

inline constexpr int kDistDefaultRepeat = 10;

int RunKVStoreDistBench(const KVStoreDistBenchOptions& options);

// `troupe bench kvstore-dist`: the name, options, help and run function above, for the bench registry
// (bench/benchmarks.h).
Benchmark KVStoreDistBenchmark();

}  // namespace troupe::bench
