// `troupe bench kvstore-dist`: see kvstore_dist_bench.h.
#include "bench/kvstore/kvstore_dist_bench.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "actors/config.h"
#include "bench/common/bench_util.h"
#include "bench/common/measure.h"
#include "bench/common/multi_process.h"
#include "kvstore/kvstore.h"
#include "tensor/ndarray.h"
#include "proc/process.h"
#include "proc/socket.h"

#ifndef TROUPE_VERSION
#define TROUPE_VERSION "unknown"
#endif

namespace troupe::bench {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = kMiB * 1024.0;
constexpr std::int64_t kSmallKeyElems = 16;
constexpr int kChildTimeoutMs = 600000;

struct Resolved {
  int workers;
  int repeat;
  double model_mib;
  double key_mib;
  int latency_calls;
  int num_keys;
  std::int64_t key_elems;
};

Resolved Resolve(const KVStoreDistBenchOptions& o) {
  Resolved r;
  r.workers = o.workers;
  r.repeat = o.repeat > 0 ? o.repeat : (o.quick ? 2 : kDistDefaultRepeat);
  r.model_mib = o.model_mib > 0 ? o.model_mib : (o.quick ? 4.0 : 64.0);
  r.key_mib = o.key_mib > 0 ? std::min(o.key_mib, r.model_mib) : 4.0;
  r.latency_calls = o.latency_calls > 0 ? o.latency_calls : (o.quick ? 200 : 2000);
  r.num_keys = std::max(1, static_cast<int>(std::lround(r.model_mib / r.key_mib)));
  r.key_elems = static_cast<std::int64_t>(r.key_mib * kMiB / 4.0);
  return r;
}

// --- raw TCP -----------------------------------------------------------------------------------------

void NoDelay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

bool SendAll(int fd, const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

bool RecvAll(int fd, void* data, std::size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

// The peer's protocol: a header {op, n}; op 1 = read n bytes then answer one byte, op 2 = read n bytes and
// send them back, op 3 = n + 10 lock-step rounds as a client (send 64 bytes, wait for 64 back; the first 10
// a warm-up), then send the median round time in microseconds (a double), op 0 = quit.
struct Header {
  std::uint64_t op;
  std::uint64_t n;
};

int RunTcpPeer(const std::string& host, int port) {
  const int fd = proc::ConnectTcp(host, port);
  if (fd < 0) {
    std::fprintf(stderr, "troupe bench kvstore-dist (tcp peer): cannot connect to %s:%d\n", host.c_str(), port);
    return 1;
  }
  NoDelay(fd);
  std::vector<char> buf;
  for (;;) {
    Header h{};
    if (!RecvAll(fd, &h, sizeof h)) return 1;
    if (h.op == 0) break;
    if (h.op == 3) {
      char msg[64] = {};
      std::vector<double> us;
      for (std::uint64_t i = 0; i < h.n + 10; ++i) {
        const auto t0 = Clock::now();
        if (!SendAll(fd, msg, sizeof msg) || !RecvAll(fd, msg, sizeof msg)) return 1;
        if (i >= 10) us.push_back(Seconds(t0, Clock::now()) * 1e6);
      }
      const double median = MedianOf(us);
      if (!SendAll(fd, &median, sizeof median)) return 1;
      continue;
    }
    buf.resize(h.n);
    if (!RecvAll(fd, buf.data(), h.n)) return 1;
    if (h.op == 1) {
      const char ack = 1;
      if (!SendAll(fd, &ack, 1)) return 1;
    } else if (!SendAll(fd, buf.data(), h.n)) {
      return 1;
    }
  }
  ::close(fd);
  return 0;
}

struct TcpAnchor {
  std::vector<double> stream_gibs, echo_gibs, rtt_us;
  double lockstep_us = 0;  // the slower of two clients' median lock-step round
  std::vector<std::string> failures;
};

// Measures the anchors against a child process (this executable in the tcp-peer role). On a wire this
// process listens in node 0's namespace (its socket stays there) and the peers run in nodes 1 and 2.
void MeasureTcp(const Resolved& r, const KVStoreDistBenchOptions& o, const NetnsWire* wire, TcpAnchor* out) {
  const std::string host = wire != nullptr ? wire->Address(0) : "127.0.0.1";
  int lfd = -1;
  auto listen = [&] { lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0); };
  if (wire != nullptr) {
    wire->RunIn(0, listen);
  } else {
    listen();
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  socklen_t len = sizeof addr;
  if (lfd < 0 || ::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(lfd, 1) != 0 ||
      ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    out->failures.push_back("raw TCP anchor: cannot listen on " + host);
    if (lfd >= 0) ::close(lfd);
    return;
  }
  const int port = ntohs(addr.sin_port);
  const std::vector<std::string> peer_argv = {proc::SelfExe(), "bench", "kvstore-dist", "--role", "tcp-peer",
                                              "--peer-host", host, "--peer-port", std::to_string(port)};
  auto peer_at = [&](int node) { return wire != nullptr ? wire->Wrap(node, peer_argv) : peer_argv; };
  proc::Process peer("tcp peer", peer_at(1), {});
  const int fd = ::accept(lfd, nullptr, nullptr);
  if (fd < 0) {
    ::close(lfd);
    out->failures.push_back("raw TCP anchor: the peer did not connect");
    return;
  }
  NoDelay(fd);
  const std::size_t chunk = static_cast<std::size_t>(r.key_elems) * 4;
  std::vector<char> send_buf(chunk), recv_buf(chunk);
  for (std::size_t i = 0; i < chunk; ++i) send_buf[i] = static_cast<char>(i * 131 + 7);
  bool ok = true;
  // stream: 256 MiB one way (the model size with --quick), one warm-up.
  const std::size_t stream_bytes = o.quick ? static_cast<std::size_t>(r.model_mib * kMiB) : std::size_t{256} << 20;
  for (int rep = 0; rep <= r.repeat && ok; ++rep) {
    const auto t0 = Clock::now();
    const Header h{1, stream_bytes};
    ok = SendAll(fd, &h, sizeof h);
    for (std::size_t sent = 0; ok && sent < stream_bytes; sent += chunk) {
      ok = SendAll(fd, send_buf.data(), std::min(chunk, stream_bytes - sent));
    }
    char ack = 0;
    ok = ok && RecvAll(fd, &ack, 1) && ack == 1;
    if (rep > 0) out->stream_gibs.push_back(static_cast<double>(stream_bytes) / kGiB / Seconds(t0, Clock::now()));
  }
  // echo: the model in chunks, each sent and received back.
  for (int rep = 0; rep <= r.repeat && ok; ++rep) {
    const auto t0 = Clock::now();
    for (int k = 0; ok && k < r.num_keys; ++k) {
      send_buf[0] = static_cast<char>(k);
      const Header h{2, chunk};
      ok = SendAll(fd, &h, sizeof h) && SendAll(fd, send_buf.data(), chunk) && RecvAll(fd, recv_buf.data(), chunk);
      if (ok && (recv_buf[0] != send_buf[0] || recv_buf[chunk - 1] != send_buf[chunk - 1])) {
        out->failures.push_back("raw TCP anchor: the echo differs from what was sent");
        ok = false;
      }
    }
    const double bytes = 2.0 * static_cast<double>(chunk) * r.num_keys;
    if (rep > 0 && ok) out->echo_gibs.push_back(bytes / kGiB / Seconds(t0, Clock::now()));
  }
  // rtt: 64-byte messages.
  for (int i = 0; ok && i < r.latency_calls + 10; ++i) {
    const auto t0 = Clock::now();
    const Header h{2, 64};
    ok = SendAll(fd, &h, sizeof h) && SendAll(fd, send_buf.data(), 64) && RecvAll(fd, recv_buf.data(), 64);
    if (i >= 10) out->rtt_us.push_back(Seconds(t0, Clock::now()) * 1e6);
  }
  // lock-step: this process as the server of two client peers (a second peer joins), as a dist_sync round
  // with 2 workers and 1 server: both clients' 64 bytes in, then 64 bytes back to each.
  proc::Process peer2("tcp peer 2", peer_at(2), {});
  const int fd2 = ok ? ::accept(lfd, nullptr, nullptr) : -1;
  if (fd2 >= 0) {
    NoDelay(fd2);
    const Header h{3, static_cast<std::uint64_t>(r.latency_calls)};
    ok = SendAll(fd, &h, sizeof h) && SendAll(fd2, &h, sizeof h);
    char msg[64];
    for (int i = 0; ok && i < r.latency_calls + 10; ++i) {
      ok = RecvAll(fd, msg, sizeof msg) && RecvAll(fd2, msg, sizeof msg) && SendAll(fd, msg, sizeof msg) &&
           SendAll(fd2, msg, sizeof msg);
    }
    double a = 0, b = 0;
    ok = ok && RecvAll(fd, &a, sizeof a) && RecvAll(fd2, &b, sizeof b);
    if (ok) out->lockstep_us = std::max(a, b);
  } else if (ok) {
    out->failures.push_back("raw TCP anchor: the second peer did not connect");
  }
  ::close(lfd);
  if (!ok && out->failures.empty()) out->failures.push_back("raw TCP anchor: the connection to a peer failed");
  const Header quit{0, 0};
  for (const int f : {fd, fd2}) {
    if (f < 0) continue;
    SendAll(f, &quit, sizeof quit);
    ::close(f);
  }
  for (proc::Process* p : {&peer, &peer2}) {
    if (const int status = p->Wait(kChildTimeoutMs); status != 0) {
      out->failures.push_back("raw TCP anchor: " + p->name() + " exited " + std::to_string(status));
    }
  }
}

// --- the worker role ---------------------------------------------------------------------------------

int RunWorker(const Resolved& r) {
  Json result;
  std::vector<std::string> failures;
  try {
    auto kv = KVStore::Create("dist_sync");
    const int rank = kv->rank();
    const double ranks_sum = kv->num_workers() * (kv->num_workers() + 1) / 2.0;
    const TShape shape{r.key_elems};
    std::vector<int> keys;
    std::vector<NDArray> zeros, grads, outs;
    for (int k = 0; k < r.num_keys; ++k) {
      keys.push_back(k);
      zeros.push_back(NDArray::Zeros(shape, Context::CPU(0)));
      grads.emplace_back(shape, Context::CPU(0));
      outs.emplace_back(shape, Context::CPU(0));
    }
    kv->Init(keys, zeros);
    std::vector<double> rounds;
    for (int round = 0; round <= r.repeat; ++round) {
      const double g = (rank + 1.0) * (round + 1.0);
      for (NDArray& a : grads) a = g;
      for (const NDArray& a : grads) a.WaitToRead();
      const auto t0 = Clock::now();
      for (int k = 0; k < r.num_keys; ++k) kv->PushPull({k}, {grads[static_cast<std::size_t>(k)]}, {outs[static_cast<std::size_t>(k)]}, -k);
      for (const NDArray& a : outs) a.WaitToRead();
      const double s = Seconds(t0, Clock::now());
      if (round > 0) rounds.push_back(s);  // round 0 is the warm-up
      // The sum of the workers' gradients: (1 + 2 + ... + W) x (round + 1).
      const float want = static_cast<float>(ranks_sum * (round + 1.0));
      for (int k = 0; k < r.num_keys; ++k) {
        const NDArray& o = outs[static_cast<std::size_t>(k)];
        const TBlob b = o.data();
        const float* p = static_cast<const float*>(b.dptr);
        const bool whole = round == r.repeat && (k == 0 || k == r.num_keys - 1);
        const std::int64_t step = whole ? 1 : r.key_elems - 1;
        for (std::int64_t i = 0; i < r.key_elems; i += std::max<std::int64_t>(step, 1)) {
          if (p[i] != want) {
            failures.push_back("round " + std::to_string(round) + " key " + std::to_string(k) + " element " +
                               std::to_string(i) + " is " + std::to_string(p[i]) + ", expected " + std::to_string(want));
            break;
          }
        }
      }
    }
    const int small = r.num_keys;
    kv->Init({small}, {NDArray::Zeros(TShape{kSmallKeyElems}, Context::CPU(0))});
    NDArray sg = NDArray::Full(TShape{kSmallKeyElems}, rank + 1.0, Context::CPU(0)), so(TShape{kSmallKeyElems}, Context::CPU(0));
    std::vector<double> lat;
    for (int i = 0; i < r.latency_calls + 10; ++i) {
      const auto t0 = Clock::now();
      kv->PushPull({small}, {sg}, {so});
      so.WaitToRead();
      if (i >= 10) lat.push_back(Seconds(t0, Clock::now()) * 1e6);
      if (i == 0 || i + 1 == r.latency_calls + 10) {
        const std::vector<float> v = so.ToVector<float>();
        if (v.front() != ranks_sum || v.back() != ranks_sum) {
          failures.push_back("small key: pulled " + std::to_string(v.front()) + ", expected " + std::to_string(ranks_sum));
        }
      }
    }
    result = {{"rank", rank}, {"round_seconds", rounds}, {"latency_us_median", MedianOf(lat)},
              {"latency_us_p90", [&] { std::sort(lat.begin(), lat.end()); return lat[lat.size() * 9 / 10]; }()}};
    kv->Finalize();
  } catch (const std::exception& e) {
    failures.push_back(std::string("worker: ") + e.what());
  }
  return PrintWorkerResult(std::move(result), failures);
}

// --- the coordinator ---------------------------------------------------------------------------------

// One cluster of `servers` servers and r.workers workers on the wire (loopback when null), against the
// anchors measured on the same wire: the figures and ratios of one entry of "runs".
Json MeasureCluster(const Resolved& r, const NetnsWire* wire, int servers, const TcpAnchor& tcp,
                    std::vector<std::string>* failures) {
  const int nw = r.workers;
  std::fprintf(stderr,
               "troupe bench kvstore-dist: %s: 1 scheduler, %d server(s), %d workers; %d keys x %g MiB, %d rounds...\n",
               wire != nullptr ? wire->Summary().c_str() : "loopback", servers, nw, r.num_keys, r.key_mib, r.repeat);
  std::vector<Json> workers;
  {
    ChildCluster cluster(servers, nw, kChildTimeoutMs, wire);
    std::vector<std::unique_ptr<proc::Process>> ws;
    for (int w = 0; cluster.started() && w < nw; ++w) {
      ws.push_back(cluster.StartWorker(
          w, {proc::SelfExe(), "bench", "kvstore-dist", "--role", "worker", "--repeat", std::to_string(r.repeat),
              "--model-mib", Fmt("%g", r.model_mib), "--key-mib", Fmt("%g", r.key_mib), "--latency-calls",
              std::to_string(r.latency_calls)}));
    }
    workers = CollectWorkerResults(ws, kChildTimeoutMs, failures);
    cluster.Wait(kChildTimeoutMs, failures);
  }
  // The slowest worker sets the pace of a sync round.
  double round_s = 0, latency_us = 0;
  for (const Json& w : workers) {
    if (!w.contains("round_seconds")) continue;
    round_s = std::max(round_s, MedianOf(w["round_seconds"].get<std::vector<double>>()));
    latency_us = std::max(latency_us, w["latency_us_median"].get<double>());
  }
  const double model_bytes = static_cast<double>(r.num_keys) * static_cast<double>(r.key_elems) * 4.0;
  const double through = round_s > 0 ? nw * 2.0 * model_bytes / kGiB / round_s : 0;
  const double per_worker = through / nw;
  const double stream = MedianOf(tcp.stream_gibs), echo = MedianOf(tcp.echo_gibs), rtt = MedianOf(tcp.rtt_us);
  Json run;
  run["net"] = wire != nullptr ? wire->Applied() : Json{{"mode", "loopback"}};
  run["servers"] = servers;
  run["workers"] = nw;
  run["kvstore"] = {{"round_seconds_median", round_s},
                    {"throughput_gibs", through},
                    {"per_worker_gibs", per_worker},
                    {"small_key_latency_us_median", latency_us},
                    {"workers", workers}};
  run["raw_tcp"] = {{"stream_gibs_median", stream}, {"stream_gibs", tcp.stream_gibs},
                    {"echo_gibs_median", echo},     {"echo_gibs", tcp.echo_gibs},
                    {"rtt_us_median", rtt},         {"lockstep_us_median", tcp.lockstep_us}};
  run["ratios"] = {{"throughput_vs_raw_stream", stream > 0 ? through / stream : 0},
                   {"per_worker_vs_raw_stream", stream > 0 ? per_worker / stream : 0},
                   {"throughput_vs_raw_echo", echo > 0 ? through / echo : 0},
                   {"latency_vs_raw_rtt", rtt > 0 ? latency_us / rtt : 0},
                   {"latency_vs_raw_lockstep", tcp.lockstep_us > 0 ? latency_us / tcp.lockstep_us : 0}};
  return run;
}

int RunCoordinator(const KVStoreDistBenchOptions& o) {
  const Resolved r = Resolve(o);
  if (const std::string why = NetUnavailable(o.net); !why.empty()) {
    std::fprintf(stderr, "troupe bench kvstore-dist: --net netns: %s\n", why.c_str());
    return 2;
  }
  const std::string started = UtcNow();
  std::vector<std::string> failures;
  Json runs = Json::array();
  const int max_servers = *std::max_element(o.servers.begin(), o.servers.end());
  for (const std::string& mode : o.net.modes) {
    std::unique_ptr<NetnsWire> wire;
    if (mode == "netns") {
      try {
        wire = std::make_unique<NetnsWire>(ClusterNodes(max_servers, std::max(r.workers, 2)), o.net.shaping);
      } catch (const std::exception& e) {
        failures.push_back(e.what());
        continue;
      }
      std::fprintf(stderr, "troupe bench kvstore-dist: %s\n", wire->Summary().c_str());
      if (const Json a = wire->Applied(); a.contains("latency_note")) {
        std::fprintf(stderr, "troupe bench kvstore-dist: %s\n", a["latency_note"].get<std::string>().c_str());
      }
    }
    std::fprintf(stderr, "troupe bench kvstore-dist: %s: raw TCP anchors (%d runs)...\n", mode.c_str(), r.repeat);
    TcpAnchor tcp;
    try {
      MeasureTcp(r, o, wire.get(), &tcp);
    } catch (const std::exception& e) {
      tcp.failures.push_back(std::string("raw TCP anchor: ") + e.what());
    }
    for (const std::string& f : tcp.failures) failures.push_back(mode + ": " + f);
    for (const int servers : o.servers) runs.push_back(MeasureCluster(r, wire.get(), servers, tcp, &failures));
    if (wire) {
      for (const std::string& p : wire->TearDown()) failures.push_back("netns teardown: " + p);
    }
  }

  Json root;
  root["benchmark"] = "kvstore-dist";
  root["troupe_version"] = TROUPE_VERSION;
  root["started"] = started;
  root["finished"] = UtcNow();
  root["machine"] = {{"cores", AvailableCores()}, {"cpu", CpuModel()}};
  root["config"] = {{"quick", o.quick},          {"repeat", r.repeat},   {"model_mib", r.model_mib},
                    {"key_mib", r.key_mib},      {"keys", r.num_keys},   {"latency_calls", r.latency_calls},
                    {"servers", o.servers},      {"workers", r.workers}, {"type", "dist_sync"},
                    {"net", o.net.modes},        {"net_rate_gbit", o.net.shaping.rate_gbit},
                    {"net_latency_us", o.net.shaping.latency_us}};
  if (!runs.empty()) {
    // The first run at the top level too, where the results before --net and --servers had it.
    for (const char* k : {"kvstore", "raw_tcp", "ratios"}) root[k] = runs.front()[k];
  }
  root["runs"] = runs;
  root["targets"] = {{"throughput_vs_raw_stream", ">= 0.7"}, {"latency_vs_raw_rtt", "<= 3"}};
  root["notes"] = {
      "throughput = bytes through the servers per second: workers x model x 2 (push and pull) / the slowest "
      "worker's median round time; per_worker = throughput / workers",
      "raw stream = one-way TCP throughput between this process and a child (TCP_NODELAY), 256 MiB in key-sized "
      "writes; raw echo = the model sent and received back in key-sized chunks; rtt = a 64-byte echo; lockstep = "
      "a round of 2 client processes and this process as server (both clients' 64 bytes in, 64 bytes back to "
      "each), the slower client's median: the floor of a dist_sync round on raw TCP (informational)",
      "latency = one PushPull of a 16-float key waited for, in dist_sync (every worker in lock step)",
      "net: loopback = every process on 127.0.0.1; netns = each process (and each anchor peer) in a network "
      "namespace of its own on a bridge, links shaped as runs[].net says (latency_us_applied 0 where the kernel "
      "has no netem)"};
  root["failures"] = failures;
  root["ok"] = failures.empty();

  std::printf("kvstore-dist: %d keys x %g MiB, %d workers (%d cores)\n", r.num_keys, r.key_mib, r.workers,
              AvailableCores());
  for (const Json& run : runs) {
    const Json& k = run["kvstore"];
    const Json& t = run["raw_tcp"];
    const Json& q = run["ratios"];
    std::printf(" %s, %d server(s)\n", run["net"]["mode"].get<std::string>().c_str(), run["servers"].get<int>());
    std::printf("  push+pull through the servers %8.3f GiB/s  (per worker %.3f)\n",
                k["throughput_gibs"].get<double>(), k["per_worker_gibs"].get<double>());
    std::printf("  raw TCP stream                %8.3f GiB/s   ratio %.2f (target >= 0.7)\n",
                t["stream_gibs_median"].get<double>(), q["throughput_vs_raw_stream"].get<double>());
    std::printf("  raw TCP echo                  %8.3f GiB/s   ratio %.2f\n", t["echo_gibs_median"].get<double>(),
                q["throughput_vs_raw_echo"].get<double>());
    std::printf("  small-key PushPull latency    %8.1f us\n", k["small_key_latency_us_median"].get<double>());
    std::printf("  raw TCP round trip            %8.1f us      ratio %.2f (target <= 3)\n",
                t["rtt_us_median"].get<double>(), q["latency_vs_raw_rtt"].get<double>());
    std::printf("  raw TCP lock-step round       %8.1f us      ratio %.2f (2 clients, 1 server)\n",
                t["lockstep_us_median"].get<double>(), q["latency_vs_raw_lockstep"].get<double>());
  }
  for (const std::string& f : failures) std::printf("  FAILED: %s\n", f.c_str());
  const bool written = WriteJsonFile(o.json_path, root, "troupe bench kvstore-dist");
  return failures.empty() && written ? 0 : 1;
}

}  // namespace

int RunKVStoreDistBench(const KVStoreDistBenchOptions& options) {
  if (options.role == "worker") return RunWorker(Resolve(options));
  if (options.role == "tcp-peer") return RunTcpPeer(options.peer_host, options.peer_port);
  if (options.json_path.empty()) {
    std::fprintf(stderr, "troupe bench kvstore-dist: --json FILE is required\n");
    return 2;
  }
  return RunCoordinator(options);
}

// --- `troupe bench kvstore-dist`: its declaration (bench/common/registry.h) ---------------------------------
namespace {

constexpr const char* kKVStoreDistBenchmarkDescription =
    "The distributed KVStore across processes against raw TCP between two processes on the same wire, measured "
    "in the same run. A scheduler, S servers (each S in --servers) and --workers workers run as separate "
    "processes (copies of this executable). "
    "Each worker runs dist_sync rounds over a model of --model-mib MiB in keys of --key-mib MiB (float32): a "
    "round is PushPull of every key, ended when every pulled key has arrived; round 0 is a warm-up, then "
    "--repeat timed rounds; then --latency-calls PushPull calls of a 16-float key, each waited for. Figures: "
    "throughput = bytes through the servers per second (workers x model x 2 / the slowest worker's median "
    "round time), per-worker throughput, and the small key's median latency. Anchors, against a child "
    "process over TCP with TCP_NODELAY: the one-way stream throughput (256 MiB in key-sized writes), the echo "
    "of the model in key-sized chunks, the round trip of a 64-byte message, and (for reference) a lock-step "
    "round of two child clients with this process as their server, as a dist_sync round on raw TCP. Ratios: "
    "throughput / stream (target >= 0.7), latency / round trip (target <= 3); reported, not enforced. "
    "Wires (--net): loopback (127.0.0.1), netns (each process, anchors' peers included, in a network "
    "namespace of its own, veth pairs to a bridge, 10.88.x.x addresses, links shaped with tc: tbf at "
    "--net-rate-gbit, netem delay of --net-latency-us where the kernel has netem, else rate only and the JSON "
    "says so; made by the run as root and removed at its end, also when it fails or is killed), or "
    "loopback,netns for both in one command. Checks: every pulled key "
    "equals the sum of the workers' gradients of its round, the echoes equal what was sent, every process "
    "exits 0. Progress goes to stderr, a table to stdout. Exit status: 0 when every check passed, 1 when one "
    "failed (the JSON says which), 2 on bad usage or when netns was asked for and namespaces cannot be made.";

constexpr const char* kKVStoreDistBenchmarkExamples =
    "Examples:\n"
    "  troupe bench kvstore-dist --json dist.json\n"
    "      64 MiB in 4 MiB keys, 10 rounds, 2000 latency calls (about half a minute on 2 cores)\n"
    "  troupe bench kvstore-dist --quick --json /tmp/smoke.json\n"
    "      a 4 MiB model, 2 rounds: checks that the processes, anchors and checks work\n"
    "  troupe bench kvstore-dist --net loopback,netns --servers 1,2 --json wire.json\n"
    "      both wires, 1 and 2 servers (netns: as root; 10 Gbit/s links, 25 us where netem exists)";

void DeclareKVStoreDistBenchmarkOptions(KVStoreDistBenchOptions* o, BenchOptionList* options) {
  options->Add("--json", &o->json_path, "Write the results to FILE (pretty-printed JSON)").TypeName("FILE");
  options->Add("--quick", &o->quick, "A 4 MiB model, 2 rounds, 200 latency calls: a smoke run for CTest");
  options
      ->Add("--repeat", &o->repeat,
            "Timed rounds (and anchor runs); default " + std::to_string(kDistDefaultRepeat) + ", 2 with --quick")
      .Range(1, 10000)
      .TypeName("R");
  options->Add("--model-mib", &o->model_mib, "Model size in MiB (default 64, 4 with --quick)")
      .Range(0.001, 4096.0)
      .TypeName("MIB");
  options->Add("--key-mib", &o->key_mib, "Size of one key in MiB").Range(0.0001, 256.0).TypeName("MIB").ShowDefault();
  options->Add("--latency-calls", &o->latency_calls, "Small-key PushPull calls timed (default 2000, 200 with --quick)")
      .Range(1, 10000000)
      .TypeName("N");
  options->Add("--workers", &o->workers, "Worker processes").Range(1, 64).TypeName("W").ShowDefault();
  options->Add("--servers", &o->servers, "Server counts to measure (each a cluster of its own)")
      .Delimiter(',')
      .Range(1, 64)
      .TypeName("LIST")
      .ShowDefault();
  DeclareNetOptions(&o->net, options);
  // The roles of the processes the benchmark starts itself (not for users; hidden from --help).
  options->Add("--role", &o->role, "").Choices({"worker", "tcp-peer"}).Hidden();
  options->Add("--peer-host", &o->peer_host, "").Hidden();
  options->Add("--peer-port", &o->peer_port, "").Hidden();
}

}  // namespace

Benchmark KVStoreDistBenchmark() {
  return MakeBenchmark<KVStoreDistBenchOptions>(
      "kvstore-dist", "Distributed KVStore (scheduler, servers, workers as processes; loopback or netns) against raw TCP",
      std::string(kKVStoreDistBenchmarkDescription) + "\n\n" + kKVStoreDistBenchmarkExamples + "\n",
      &DeclareKVStoreDistBenchmarkOptions, &RunKVStoreDistBench);
}

}  // namespace troupe::bench
