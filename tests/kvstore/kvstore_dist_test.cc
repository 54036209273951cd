// The distributed KVStore with the whole cluster in this process: a scheduler, 2 servers and 2 workers on
// loopback, each worker driven by its own thread. Runs the semantic scenarios of dist_scenarios.h, then
// the security cases: a wrong token, hostile bytes on the server's and the scheduler's port while a
// well-behaved worker keeps working, and authenticated peers that try what their role may not (claim a
// connected worker's rank, name a checkpoint path, set the optimizer as an observer).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <exception>
#include <filesystem>
#include <random>
#include <thread>

#include "base/error.h"
#include "kvstore/dist.h"
#include "kvstore/internal/dist_common.h"
#include "kvstore/net/internal/frame_codec.h"
#include "kvstore/net/internal/transport.h"
#include "proc/socket.h"
#include "tests/kvstore/dist_scenarios.h"

namespace troupe {
namespace {

DistConfig BaseConfig() {
  DistConfig c;
  c.num_servers = 2;
  c.num_workers = 2;
  c.token = "in-process-test-token";
  c.heartbeat_interval_ms = 200;
  c.heartbeat_timeout_ms = 30000;  // no test here waits for a timeout; slow runs (ThreadSanitizer) must not hit it
  c.connect_timeout_ms = 30000;
  c.bigarray_bound = 1000;
  return c;
}

// Starts the scheduler and the servers, runs `body` on every worker in its own thread, then checks that
// every node ended in order (status 0). *scheduler_port, when given, gets the scheduler's port first.
void RunCluster(const std::string& type, const std::function<void(KVStore&)>& body, DistConfig config = BaseConfig(),
                int* scheduler_port = nullptr) {
  auto scheduler = DistNode::StartScheduler(config);
  config.root_port = scheduler->port();
  if (scheduler_port != nullptr) *scheduler_port = scheduler->port();
  std::vector<std::unique_ptr<DistNode>> servers;
  for (int s = 0; s < config.num_servers; ++s) servers.push_back(DistNode::StartServer(config));
  std::vector<std::string> errors(static_cast<std::size_t>(config.num_workers));
  std::vector<std::thread> workers;
  for (int w = 0; w < config.num_workers; ++w) {
    workers.emplace_back([&, w] {
      try {
        auto kv = CreateDistKVStore(type, config);
        body(*kv);
        kv->Finalize();
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(w)] = e.what();
      }
    });
  }
  for (auto& t : workers) t.join();
  for (const std::string& e : errors) EXPECT_EQ(e, "");
  EXPECT_EQ(scheduler->Wait(), 0) << scheduler->message();
  for (auto& s : servers) EXPECT_EQ(s->Wait(), 0) << s->message();
}

class DistScenario : public ::testing::TestWithParam<std::string> {};

TEST_P(DistScenario, PassesInOneProcess) {
  const std::string name = GetParam();
  const auto dir = std::filesystem::temp_directory_path() / ("troupe_dist_test_" + std::to_string(::getpid()) + "_" + name);
  const auto& fn = dist_test::Scenarios().at(name);
  DistConfig config = BaseConfig();
  config.checkpoint_dir = dir.string();  // the servers' (big_array checkpoints)
  RunCluster(dist_test::ScenarioType(name), [&](KVStore& kv) { fn(kv, dir.string()); }, config);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(All, DistScenario,
                         ::testing::Values("sync_rounds", "sync_optimizer", "async_sgd", "barrier", "big_array",
                                           "compression", "string_keys", "uneven_batches"));

TEST(DistKVStore, DeviceSyncSumsTheWorkersDevicesFirst) {
  RunCluster("dist_device_sync", [](KVStore& kv) {
    const TShape shape{6};
    kv.Init({0}, {dist_test::Filled(shape, 0.f)});
    const int r = kv.rank();
    NDArray a = NDArray::Full(shape, 1.f + r, Context::CPU(0)), b = NDArray::Full(shape, 2.f, Context::CPU(1));
    NDArray o0(shape, Context::CPU(0)), o1(shape, Context::CPU(1));
    kv.PushPull({0, 0}, {a, b}, {o0, o1});
    // worker 0: 1 + 2, worker 1: 2 + 2 -> 7 everywhere.
    dist_test::ExpectValues("cpu(0) output", o0.ToVector<float>(), std::vector<float>(6, 7.f));
    dist_test::ExpectValues("cpu(1) output", o1.ToVector<float>(), std::vector<float>(6, 7.f));
  });
}

TEST(DistKVStore, ErrorsAreClearAndTheStoreStaysUsable) {
  RunCluster("dist_sync", [](KVStore& kv) {
    kv.Init({0}, {dist_test::Filled(TShape{2}, 1.f)});
    EXPECT_THROW(kv.Push({1}, {dist_test::Filled(TShape{2}, 1.f)}), Error);         // not initialised
    EXPECT_THROW(kv.Push({0}, {dist_test::Filled(TShape{3}, 1.f)}), Error);         // wrong shape
    EXPECT_THROW(kv.SetUpdater([](int, const NDArray&, NDArray*) {}), Error);       // code cannot travel
    EXPECT_THROW(kv.SetOptimizer(OptimizerConfig("no_such_optimizer")), Error);     // refused before sending
    NDArray out(TShape{2}, Context::CPU(0));
    kv.PushPull({0}, {dist_test::Filled(TShape{2}, 2.f)}, {out});
    dist_test::ExpectValues("after the errors", out.ToVector<float>(), {4.f, 4.f});
    // 2-bit compression takes float32 only: refused before anything is sent.
    kv.Init({7}, {NDArray::Zeros(TShape{2}, Context::CPU(0), DType::kFloat64)});
    kv.SetGradientCompression({{"type", "2bit"}, {"threshold", "0.5"}});
    EXPECT_THROW(kv.Push({7}, {NDArray::Zeros(TShape{2}, Context::CPU(0), DType::kFloat64)}), Error);
  });
}

// Keys of one PushPull call for one server travel in one frame (a batch), answered in one exchange, with
// exact sums; past the coalescing limit they go in several frames, and a key bigger than the limit alone.
// The server's counters (ClusterObserver::Stats) say how many frames carried tensors.
struct BatchCase {
  std::size_t coalesce_bytes;
  std::int64_t frames_per_step;   // per worker
  std::int64_t batches_per_step;  // per worker
};

void RunBatchCase(const BatchCase& c) {
  DistConfig config = BaseConfig();
  config.num_servers = 1;
  config.coalesce_bytes = c.coalesce_bytes;
  constexpr int kSteps = 4;
  // Six keys of 16 float32 (64 bytes) and one of 64 (256 bytes).
  const std::vector<int> keys{0, 1, 2, 3, 4, 5, 6};
  auto shape_of = [](int k) { return TShape{k == 6 ? 64 : 16}; };
  int port = 0;
  ClusterServerStats stats;
  RunCluster(
      "dist_sync",
      [&](KVStore& kv) {
        std::vector<NDArray> init, grads, outs;
        for (int k : keys) {
          init.push_back(dist_test::Filled(shape_of(k), static_cast<float>(k)));
          grads.push_back(dist_test::Filled(shape_of(k), static_cast<float>(kv.rank() + 1 + k)));
          outs.emplace_back(shape_of(k), Context::CPU(0));
        }
        kv.Init(keys, init);
        for (int step = 0; step < kSteps; ++step) {
          kv.PushPull(keys, grads, outs);
          for (int k : keys) {
            // No optimizer: the round's sum replaces the value, (1 + k) + (2 + k).
            dist_test::ExpectValues("key " + std::to_string(k) + " step " + std::to_string(step),
                                    outs[static_cast<std::size_t>(k)].ToVector<float>(),
                                    std::vector<float>(shape_of(k).Size(), static_cast<float>(3 + 2 * k)));
          }
        }
        kv.Barrier();
        if (kv.rank() == 0) {
          auto observer = ClusterObserver::Connect("127.0.0.1", port, config.token, 30000);
          stats = observer->Stats().at(0);
        }
        kv.Barrier();
      },
      config, &port);
  // Init: one frame per key from worker 0.
  EXPECT_EQ(stats.tensor_frames, static_cast<std::int64_t>(keys.size()) + 2 * kSteps * c.frames_per_step)
      << "coalesce_bytes " << c.coalesce_bytes;
  EXPECT_EQ(stats.batches, 2 * kSteps * c.batches_per_step) << "coalesce_bytes " << c.coalesce_bytes;
  EXPECT_EQ(stats.pushes, 2 * kSteps * static_cast<std::int64_t>(keys.size()));
  EXPECT_EQ(stats.updates, kSteps * static_cast<std::int64_t>(keys.size()));
}

TEST(DistKVStore, AStepsKeysForOneServerTravelInOneFrame) {
  RunBatchCase({1 << 20, 1, 1});  // all seven keys in one batch
}

TEST(DistKVStore, TheCoalescingLimitSplitsABatch) {
  RunBatchCase({128, 4, 3});  // keys 0-1, 2-3, 4-5 in three batches; key 6 (256 bytes) alone
  RunBatchCase({0, 7, 0});    // off: one frame per key
}

// A key of a batch that fails on the server (here its update: the optimizer takes float32 and float64
// only) fails the waiting caller with that key's error; the other keys were applied, and each key works on
// its own afterwards.
TEST(DistKVStore, AFailedKeyOfABatchIsAnErrorWhereTheCallerWaits) {
  DistConfig config = BaseConfig();
  config.num_servers = 1;
  RunCluster(
      "dist_sync",
      [](KVStore& kv) {
        const TShape shape{4};
        kv.Init({0, 1}, {dist_test::Filled(shape, 1.f), NDArray::Zeros(shape, Context::CPU(0), DType::kInt32)});
        kv.SetOptimizer(OptimizerConfig("sgd", {{"learning_rate", "0.5"}}));
        NDArray out0(shape, Context::CPU(0)), out1(shape, Context::CPU(0), DType::kInt32);
        kv.PushPull({0, 1}, {dist_test::Filled(shape, 1.f), NDArray::Zeros(shape, Context::CPU(0), DType::kInt32)},
                    {out0, out1});
        try {
          out0.WaitToRead();
          ADD_FAILURE() << "the batch's failed key did not reach the caller";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("update of key 1"), std::string::npos) << e.what();
        }
        EXPECT_THROW(out1.WaitToRead(), Error);
        // Key 0 was updated in that round (1 - 0.5 * (1 + 1) = 0) and goes on: 0 - 0.5 * 2 = -1.
        kv.PushPull({0}, {dist_test::Filled(shape, 1.f)}, {out0});
        dist_test::ExpectValues("key 0 after the failed batch", out0.ToVector<float>(), std::vector<float>(4, -1.f));
      },
      config);
}

TEST(DistKVStore, UnknownTypeAndBadConfigAreErrors) {
  EXPECT_THROW(CreateDistKVStore("dist_nothing", BaseConfig()), Error);
  DistConfig c = BaseConfig();
  c.num_workers = 0;
  EXPECT_THROW(c.Validate(), Error);
  c = BaseConfig();
  c.heartbeat_timeout_ms = c.heartbeat_interval_ms;
  EXPECT_THROW(c.Validate(), Error);
}

TEST(DistKVStore, WrongTokenIsRefused) {
  DistConfig config = BaseConfig();
  config.num_servers = 1;
  config.num_workers = 1;
  auto scheduler = DistNode::StartScheduler(config);
  config.root_port = scheduler->port();
  auto server = DistNode::StartServer(config);
  DistConfig intruder = config;
  intruder.token = "not-the-token";
  try {
    CreateDistKVStore("dist_sync", intruder);
    ADD_FAILURE() << "a worker with the wrong token joined";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("wrong cluster token"), std::string::npos) << e.what();
  }
  {
    auto kv = CreateDistKVStore("dist_sync", config);  // the right token still joins
    kv->Init({0}, {dist_test::Filled(TShape{2}, 3.f)});
    NDArray out(TShape{2}, Context::CPU(0));
    kv->Pull({0}, {out});
    dist_test::ExpectValues("token test", out.ToVector<float>(), {3.f, 3.f});
    kv->Finalize();
  }
  EXPECT_EQ(scheduler->Wait(), 0);
  EXPECT_EQ(server->Wait(), 0);
}

// A hello frame as a worker of rank 0 would send it once authenticated (sent here without authenticating).
std::vector<std::byte> HelloFrame() {
  return net::EncodeFrame(net::Hello{net::Role::kWorker, 0, net::kProtocolVersion, "127.0.0.1", 0});
}

void SendRaw(int fd, const std::vector<std::byte>& bytes) {
  std::size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;  // the peer closed on us: that is the point
    off += static_cast<std::size_t>(n);
  }
}

// Waits for the peer to close the connection (read returns 0 or an error): it refused the bytes.
bool PeerCloses(int fd) {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return true;
  }
}

TEST(DistKVStore, HostileClientsLeaveTheServerServing) {
  DistConfig config = BaseConfig();
  config.num_servers = 1;
  config.num_workers = 1;
  config.max_frame_bytes = 1 << 20;
  auto scheduler = DistNode::StartScheduler(config);
  config.root_port = scheduler->port();
  auto server = DistNode::StartServer(config);
  auto kv = CreateDistKVStore("dist_sync", config);
  kv->Init({0}, {dist_test::Filled(TShape{4}, 0.f)});
  std::mt19937 rng(20261123);
  std::printf("hostile-client seed 20261123\n");
  NDArray out(TShape{4}, Context::CPU(0));
  float want = 0.f;
  for (int port : {server->port(), scheduler->port()}) {
    for (int kind = 0; kind < 4; ++kind) {
      const int fd = proc::ConnectLoopback(port);
      ASSERT_GE(fd, 0);
      std::vector<std::byte> bytes;
      if (kind == 0) {  // random bytes
        bytes.resize(4096);
        for (auto& b : bytes) b = static_cast<std::byte>(rng() & 0xff);
      } else if (kind == 1) {  // a length prefix over the limit
        const std::uint64_t n = std::uint64_t{1} << 40;
        bytes.resize(8);
        std::memcpy(bytes.data(), &n, 8);
      } else if (kind == 2) {  // a well-formed hello that skips authentication
        bytes = HelloFrame();
      } else {  // a truncated frame, then the client goes away
        bytes = HelloFrame();
        bytes.resize(bytes.size() / 2);
        SendRaw(fd, bytes);
        ::close(fd);
        continue;
      }
      SendRaw(fd, bytes);
      EXPECT_TRUE(PeerCloses(fd)) << "port " << port << " kind " << kind;
      ::close(fd);
      // The worker is still served.
      kv->PushPull({0}, {dist_test::Filled(TShape{4}, 1.f)}, {out});
      want = 1.f;  // dist_sync without optimizer: the one worker's push replaces the value
      dist_test::ExpectValues("served after a hostile client", out.ToVector<float>(), std::vector<float>(4, want));
    }
  }
  kv->Finalize();
  EXPECT_EQ(scheduler->Wait(), 0);
  EXPECT_EQ(server->Wait(), 0);
}

// An authenticated peer of this cluster (it holds the token) talking raw frames to a node.
class RawPeer {
 public:
  RawPeer(int port, const DistConfig& config)
      : net_(net::NetSystem::Acquire()), self_(std::make_unique<caf::scoped_actor>(net_->system())) {
    conn_ = net::Connect(net_->system(), "127.0.0.1", static_cast<std::uint16_t>(port),
                         caf::actor_cast<caf::actor>(*self_), internal::ConnOptionsOf(config));
  }
  ~RawPeer() { caf::anon_send(conn_, net::close_atom::value); }
  void Send(const net::Message& m) { net::Send(conn_, m); }
  // The next frame (or the close, as an ErrorMsg "closed: <why>"), within 10 s.
  net::Message Next() {
    net::Message got = net::ErrorMsg{0, "no frame within 10 s", -1, net::Role::kScheduler};
    (*self_)->receive([&](net::recv_atom, const caf::actor&, const net::Message& m) { got = m; },
                      [&](net::closed_atom, const caf::actor&, const std::string& why) {
                        got = net::ErrorMsg{0, "closed: " + why, -1, net::Role::kScheduler};
                      },
                      caf::after(std::chrono::seconds(10)) >> [] {});
    return got;
  }
  // The message of the next frame when it is an error, else "".
  std::string NextError() {
    const net::Message m = Next();
    const auto* e = std::get_if<net::ErrorMsg>(&m);
    return e != nullptr ? e->message : std::string();
  }

 private:
  std::shared_ptr<net::NetSystem> net_;
  std::unique_ptr<caf::scoped_actor> self_;
  caf::actor conn_;
};

TEST(DistKVStore, PeersCanOnlyDoWhatTheirRoleMay) {
  const auto dir = std::filesystem::temp_directory_path() / ("troupe_dist_roles_" + std::to_string(::getpid()));
  const auto elsewhere = dir / "elsewhere";
  std::filesystem::remove_all(dir);
  DistConfig config = BaseConfig();
  config.num_servers = 1;
  config.num_workers = 1;
  config.checkpoint_dir = (dir / "own").string();
  auto scheduler = DistNode::StartScheduler(config);
  config.root_port = scheduler->port();
  auto server = DistNode::StartServer(config);
  auto kv = CreateDistKVStore("dist_sync", config);
  kv->Init({0}, {dist_test::Filled(TShape{4}, 1.f)});
  {
    // A second connection claiming worker 0's rank is refused (closing it must not end the job).
    RawPeer thief(server->port(), config);
    thief.Send(net::Hello{net::Role::kWorker, 0, net::kProtocolVersion, "127.0.0.1", 0});
    const std::string why = thief.NextError();
    EXPECT_NE(why.find("worker rank 0 is already connected"), std::string::npos) << why;
  }
  {
    // An observer may read, not name paths or set the optimizer.
    RawPeer observer(server->port(), config);
    observer.Send(net::Hello{net::Role::kObserver, -1, net::kProtocolVersion, "", 0});
    ASSERT_TRUE(std::holds_alternative<net::Hello>(observer.Next()));
    observer.Send(net::Command{1, "checkpoint", {{"dir", elsewhere.string()}}});
    std::string why = observer.NextError();
    EXPECT_NE(why.find("no peer can name one"), std::string::npos) << why;
    EXPECT_FALSE(std::filesystem::exists(elsewhere));
    observer.Send(net::Command{2, "set_optimizer", {{"type", "sgd"}, {"param.learning_rate", "100"}}});
    why = observer.NextError();
    EXPECT_NE(why.find("no observer command 'set_optimizer'"), std::string::npos) << why;
  }
  // The public calls refuse a path too, and checkpoint into the server's own directory.
  EXPECT_THROW(kv->Checkpoint(elsewhere.string()), Error);
  auto obs = ClusterObserver::Connect("127.0.0.1", scheduler->port(), config.token);
  EXPECT_THROW(obs->Checkpoint(elsewhere.string()), Error);
  obs->Checkpoint();
  EXPECT_TRUE(std::filesystem::exists(dir / "own" / "server-0.params"));
  EXPECT_FALSE(std::filesystem::exists(elsewhere));
  obs.reset();
  // The worker was never disturbed: its rounds go on, and the job ends in order.
  NDArray out(TShape{4}, Context::CPU(0));
  kv->PushPull({0}, {dist_test::Filled(TShape{4}, 2.f)}, {out});
  dist_test::ExpectValues("after the intruders", out.ToVector<float>(), std::vector<float>(4, 2.f));
  kv->Finalize();
  EXPECT_EQ(scheduler->Wait(), 0) << scheduler->message();
  EXPECT_EQ(server->Wait(), 0) << server->message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace troupe
