// The transport of the distributed KVStore (kvstore/net/internal/transport.h) on its own: a connection
// broker writing to a peer that reads concurrently on a real loopback TCP connection. Send writes frames
// straight from the senders' memory (on the sender's thread) while nothing waits before them, and the
// broker queues the rest and hands CAF what the socket does not take; these tests send bursts far larger
// than the socket's buffers, mixing big tensors, small ones, borrowed views and frames encoded beforehand,
// from one thread and from several at once, and check that every frame arrives whole, byte for byte, in
// the order it was sent, and that a close comes after everything queued.
#include "kvstore/net/internal/transport.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "base/error.h"
#include "caf/all.hpp"
#include "kvstore/net/internal/auth.h"
#include "tests/kvstore/pattern_bytes.h"

namespace troupe::net {
namespace {

constexpr std::size_t kMaxFrame = std::size_t{64} << 20;
const std::string kToken = "transport-test-token";

void SendAll(int fd, const std::vector<std::byte>& bytes) {
  for (std::size_t off = 0; off < bytes.size();) {
    const ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<std::size_t>(n);
  }
}

using test::PatternBytes;

// A float32 push of `bytes` bytes (a multiple of 4) whose memory an owner keeps alive.
Message OwnedTensor(std::uint64_t id, std::size_t bytes) {
  auto data = std::make_shared<const std::vector<std::byte>>(PatternBytes(bytes, static_cast<unsigned>(id)));
  TensorMsg t;
  t.op = TensorOp::kPush;
  t.request_id = id;
  t.key = static_cast<std::int32_t>(id);
  t.value.dtype = DType::kFloat32;
  t.value.shape = {static_cast<std::int64_t>(bytes / 4)};
  t.value.data = Blob{std::span<const std::byte>(*data), data};
  return t;
}

std::uint64_t IdOf(const Message& m) {
  if (const auto* t = std::get_if<TensorMsg>(&m)) return t->request_id;
  if (const auto* h = std::get_if<Heartbeat>(&m)) return h->sequence;
  if (const auto* a = std::get_if<Ack>(&m)) return a->request_id;
  return 0;
}

// The peer: a plain thread on a POSIX socket (not CAF), reading while the sender writes, in reads of
// changing sizes, and decoding with FrameDecoder until the connection ends. It authenticates as a node
// with `token` would (its challenge, then its proof for the sender's challenge) and checks the sender's
// proof; the authentication frames are not counted among the frames read.
class RawPeer {
 public:
  // `send`: bytes the peer writes once the sender authenticated, in writes of the sizes `chunks` (in turn).
  explicit RawPeer(std::string token = kToken, std::vector<std::byte> send = {}, std::vector<std::size_t> chunks = {})
      : token_(std::move(token)), send_(std::move(send)), chunks_(std::move(chunks)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        ::listen(listen_fd_, 1) != 0 || ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      ADD_FAILURE() << "cannot listen on 127.0.0.1";
      return;
    }
    port_ = ntohs(a.sin_port);
    reader_ = std::thread([this] { Read(); });
  }
  ~RawPeer() {
    if (reader_.joinable()) reader_.join();
    if (listen_fd_ >= 0) ::close(listen_fd_);
  }
  std::uint16_t port() const { return port_; }
  // Waits until n frames were read; false after `limit` (a stalled connection) or when the reader ended.
  bool WaitFrames(std::size_t n, std::chrono::seconds limit) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return frames_.size() >= n || ended_; }) && frames_.size() >= n;
  }
  // Waits until the sender closed the connection; the frames read, and what went wrong, if anything.
  std::vector<Message> Finish(std::string* error) {
    if (reader_.joinable()) reader_.join();
    *error = error_;
    return std::move(frames_);
  }

 private:
  void Read() {
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) {
      error_ = "accept failed";
      return;
    }
    FrameDecoder decoder(kMaxFrame);
    const std::string nonce = RandomBytes(kAuthNonceBytes);
    std::string sender_nonce;
    SendAll(fd, EncodeFrame(AuthChallenge{nonce}));
    std::vector<std::byte> buf(std::size_t{1} << 20);
    const std::size_t sizes[] = {1, 7, 4096, 65536, std::size_t{1} << 20, 100000};
    try {
      for (std::size_t i = 0;; ++i) {
        const ssize_t n = ::recv(fd, buf.data(), sizes[i % std::size(sizes)], 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        decoder.Feed(buf.data(), static_cast<std::size_t>(n));
        while (auto m = decoder.Next()) {
          if (const auto* c = std::get_if<AuthChallenge>(&*m)) {
            sender_nonce = c->nonce;
            SendAll(fd, EncodeFrame(AuthProof{AuthProofFor(token_, false, sender_nonce, nonce)}));
            continue;
          }
          if (const auto* p = std::get_if<AuthProof>(&*m)) {
            if (!VerifyAuthProof(token_, false, nonce, sender_nonce, p->mac)) error_ = "the sender's proof is wrong";
            // Authenticated: the frames to send, cut into writes of the given sizes with a pause now and
            // then, so that the sender's reads end anywhere in them. The pause is not synchronisation: the
            // test waits for the frames themselves and holds whatever the timing.
            for (std::size_t off = 0, c = 0; off < send_.size(); ++c) {
              const std::size_t n = std::min(send_.size() - off, chunks_.empty() ? send_.size() : chunks_[c % chunks_.size()]);
              SendAll(fd, std::vector<std::byte>(send_.begin() + static_cast<std::ptrdiff_t>(off),
                                                 send_.begin() + static_cast<std::ptrdiff_t>(off + n)));
              off += n;
              if (c % 5 == 4) std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
            continue;
          }
          std::lock_guard<std::mutex> lock(mu_);
          frames_.push_back(std::move(*m));
          cv_.notify_all();
        }
      }
      decoder.Finish();
    } catch (const std::exception& e) {
      error_ = e.what();
    }
    ::close(fd);
    std::lock_guard<std::mutex> lock(mu_);
    ended_ = true;
    cv_.notify_all();
  }

  std::string token_;
  std::vector<std::byte> send_;
  std::vector<std::size_t> chunks_;
  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Message> frames_;  // guarded by mu_ until the reader ended
  bool ended_ = false;           // guarded by mu_
  std::string error_;
};

class TransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    net_ = NetSystem::Acquire();
    sender_ = std::make_unique<caf::scoped_actor>(net_->system());
    ConnOptions options;
    options.max_frame_bytes = kMaxFrame;
    options.token = kToken;
    conn_ = Connect(net_->system(), "127.0.0.1", peer_.port(), caf::actor_cast<caf::actor>(*sender_), options);
  }

  // Checks that the peer reads every frame of `want` while the connection stays open (nothing waits for
  // a later event to go out), then closes it and checks them, in order.
  void ExpectPeerRead(const std::vector<Message>& want) {
    EXPECT_TRUE(peer_.WaitFrames(want.size(), std::chrono::seconds(120))) << "frames stalled in the sender";
    caf::anon_send(conn_, close_atom::value);
    std::string error;
    const std::vector<Message> got = peer_.Finish(&error);
    EXPECT_EQ(error, "");
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(IdOf(got[i]), IdOf(want[i])) << "frame " << i << " out of order";
      EXPECT_TRUE(got[i] == want[i]) << "frame " << i << " (id " << IdOf(want[i]) << ") differs";
    }
  }

  RawPeer peer_;
  std::shared_ptr<NetSystem> net_;
  std::unique_ptr<caf::scoped_actor> sender_;
  caf::actor conn_;
};

// Big frames (several times any socket buffer) between small ones, sent as one burst: the socket fills in
// the middle of a frame, later frames wait behind it, and each part goes out directly or through CAF.
TEST_F(TransportTest, BurstArrivesWholeAndInOrder) {
  std::vector<Message> sent;
  std::vector<std::vector<std::byte>> borrowed;  // alive until the end: the broker reads them when it runs
  borrowed.reserve(64);
  for (std::uint64_t i = 1; i <= 60; ++i) {
    if (i % 4 == 1) {
      sent.push_back(OwnedTensor(i, (std::size_t{3} << 20) + 8 * i));  // 3 MiB and some words
    } else if (i % 4 == 2) {
      sent.push_back(OwnedTensor(i, 64));
    } else if (i % 4 == 3) {
      // A borrowed view (no owner): the broker copies what the socket does not take at once.
      borrowed.push_back(PatternBytes((std::size_t{1} << 20) + 4 * i, static_cast<unsigned>(i)));
      TensorMsg t;
      t.request_id = i;
      t.value.dtype = DType::kUint8;
      t.value.shape = {static_cast<std::int64_t>(borrowed.back().size())};
      t.value.data = Blob::View(borrowed.back());
      sent.push_back(t);
    } else {
      sent.push_back(Heartbeat{3, i});
    }
  }
  for (const Message& m : sent) {
    if (std::holds_alternative<Heartbeat>(m)) {
      Send(conn_, EncodeShared(m));  // encoded beforehand, as for many peers
    } else {
      Send(conn_, m);
    }
  }
  ExpectPeerRead(sent);
}

// Big frames only, sent one at a time as the sender's actor would (each after the previous one was sent
// on, not all at once), then a close: nothing queued is lost.
TEST_F(TransportTest, BigFramesOneByOneThenClose) {
  std::vector<Message> sent;
  for (std::uint64_t i = 1; i <= 12; ++i) {
    sent.push_back(OwnedTensor(i, (std::size_t{4} << 20) + 8 * i));
    Send(conn_, sent.back());
  }
  ExpectPeerRead(sent);
}

// Several threads send at once, as a worker's engine threads and its actor do: a sender writes straight to
// the socket only when nothing waits before its frame, so each thread's frames arrive in its order, whole,
// and none is lost — big ones (the socket fills mid-frame, and the rest waits in the broker) among small.
TEST_F(TransportTest, ConcurrentSendersKeepEachThreadsOrder) {
  constexpr int kThreads = 4;
  constexpr std::uint64_t kPerThread = 1000;
  std::vector<std::vector<Message>> sent(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (std::uint64_t i = 0; i < kPerThread; ++i) {
      const std::uint64_t id = static_cast<std::uint64_t>(t) * 1000000 + i + 1;
      // A big frame fills the socket, and the small ones behind it wait in the broker's mailbox and queue.
      const std::size_t bytes = i % 100 == 0 ? (std::size_t{4} << 20) + 8 * i : 16 + 8 * (i % 7);
      sent[t].push_back(OwnedTensor(id, bytes));
    }
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (const Message& m : sent[t]) Send(conn_, m);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_TRUE(peer_.WaitFrames(kThreads * kPerThread, std::chrono::seconds(120))) << "frames stalled in the sender";
  caf::anon_send(conn_, close_atom::value);
  std::string error;
  const std::vector<Message> got = peer_.Finish(&error);
  EXPECT_EQ(error, "");
  ASSERT_EQ(got.size(), kThreads * kPerThread);
  std::vector<std::uint64_t> next(kThreads, 0);  // per thread: the index of the frame expected next
  for (const Message& m : got) {
    const std::uint64_t id = IdOf(m);
    const int t = static_cast<int>(id / 1000000);
    ASSERT_GE(t, 0);
    ASSERT_LT(t, kThreads);
    ASSERT_LT(next[t], kPerThread) << "thread " << t << " sent no more frames";
    EXPECT_TRUE(m == sent[t][next[t]]) << "thread " << t << ": frame " << next[t] << " out of order or changed";
    ++next[t];
  }
}

// The read side: a connection reads ahead at frame boundaries (several small frames, or a small frame's
// prefix and body, in one read) and reads a big body whole. Frames of every size, back to back (small ones
// in runs, a big one after a small one and after a big one), in writes that end anywhere, reach the owner
// whole and in order, for several ways of cutting the stream.
TEST(TransportReadTest, FramesOfEverySizeArriveWholeAndInOrder) {
  std::vector<Message> want;
  const std::size_t sizes[] = {16,   16,        4,  64, 4096, 4080, 4088, std::size_t{1} << 20, 16, (std::size_t{1} << 20) + 8,
                               3 << 20, 64 << 10, 32, 8,  (64 << 10) - 8, 100000, 16, 16, 16};
  std::uint64_t id = 0;
  for (int round = 0; round < 3; ++round) {
    for (std::size_t b : sizes) want.push_back(OwnedTensor(++id, b));
    for (int i = 0; i < 20; ++i) want.push_back(Heartbeat{1, ++id});
  }
  std::vector<std::byte> stream;
  for (const Message& m : want) {
    const auto f = EncodeFrame(m);
    stream.insert(stream.end(), f.begin(), f.end());
  }
  const std::vector<std::vector<std::size_t>> cuts = {{}, {1, 7, 4095, 4097, 65536, 100000}, {3, 8, 9, 4104, 5000}};
  for (const auto& chunks : cuts) {
    RawPeer peer(kToken, stream, chunks);
    auto net = NetSystem::Acquire();
    caf::scoped_actor owner(net->system());
    ConnOptions options;
    options.max_frame_bytes = kMaxFrame;
    options.token = kToken;
    caf::actor conn = Connect(net->system(), "127.0.0.1", peer.port(), caf::actor_cast<caf::actor>(owner), options);
    std::vector<Message> got;
    bool timed_out = false;
    while (got.size() < want.size() && !timed_out) {
      owner->receive([&](recv_atom, const caf::actor&, const Message& m) { got.push_back(m); },
                     [&](closed_atom, const caf::actor&, const std::string& why) {
                       ADD_FAILURE() << "closed: " << why;
                       timed_out = true;
                     },
                     caf::after(std::chrono::seconds(60)) >> [&] { timed_out = true; });
    }
    EXPECT_FALSE(timed_out) << got.size() << " of " << want.size() << " frames arrived (cut " << chunks.size() << ")";
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(IdOf(got[i]), IdOf(want[i])) << "frame " << i << " out of order";
      EXPECT_TRUE(got[i] == want[i]) << "frame " << i << " (id " << IdOf(want[i]) << ") differs";
    }
    caf::anon_send(conn, close_atom::value);
    std::string error;
    peer.Finish(&error);
    EXPECT_EQ(error, "");
  }
}

// A hook that takes a connection's small frames on the broker's thread only while the owner's backlog is
// empty (as a server does): every frame is handled once, and in the order it was sent, whether the hook or
// the owner handled it, although the owner handles the big frames later, on another thread. The backlog
// counts each mailed frame until the owner is done with it.
TEST(TransportReadTest, AHookTakingFramesOnlyWhileTheOwnerHasNoBacklogKeepsTheirOrder) {
  constexpr std::size_t kSmall = 64, kBig = std::size_t{256} << 10, kTakeUpTo = std::size_t{64} << 10;
  std::vector<Message> want;
  std::uint64_t id = 0;
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < 3; ++i) want.push_back(OwnedTensor(++id, kSmall));
    want.push_back(OwnedTensor(++id, kBig));
  }
  for (int i = 0; i < 3; ++i) want.push_back(OwnedTensor(++id, kSmall));
  std::vector<std::byte> stream;
  for (const Message& m : want) {
    const auto f = EncodeFrame(m);
    stream.insert(stream.end(), f.begin(), f.end());
  }
  RawPeer peer(kToken, stream, {4096, 100000, 7});
  auto net = NetSystem::Acquire();
  caf::scoped_actor owner(net->system());
  ConnOptions options;
  options.max_frame_bytes = kMaxFrame;
  options.token = kToken;
  options.owner_backlog = std::make_shared<std::atomic<std::int64_t>>(0);
  std::mutex mu;
  std::vector<std::uint64_t> handled;  // ids, in the order they were handled; guarded by mu
  std::size_t in_hook = 0;             // guarded by mu
  const caf::actor wake = caf::actor_cast<caf::actor>(owner);
  FrameHook hook = [&, backlog = options.owner_backlog](const caf::actor&, Message& m) {
    const auto* t = std::get_if<TensorMsg>(&m);
    if (backlog->load(std::memory_order_acquire) != 0 || t == nullptr || t->value.data.size() > kTakeUpTo) return false;
    {
      std::lock_guard<std::mutex> lock(mu);
      handled.push_back(t->request_id);
      ++in_hook;
    }
    caf::anon_send(wake, tick_atom::value);  // the test's thread waits in the owner's mailbox
    return true;
  };
  caf::actor conn =
      Connect(net->system(), "127.0.0.1", peer.port(), caf::actor_cast<caf::actor>(owner), options, 0, hook);
  std::size_t in_owner = 0;
  bool timed_out = false;
  auto count = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return handled.size();
  };
  while (count() < want.size() && !timed_out) {
    owner->receive(
        [&](recv_atom, const caf::actor&, const Message& m) {
          {
            std::lock_guard<std::mutex> lock(mu);
            handled.push_back(IdOf(m));
          }
          ++in_owner;
          options.owner_backlog->fetch_sub(1, std::memory_order_acq_rel);
        },
        [&](tick_atom) {},
        [&](closed_atom, const caf::actor&, const std::string& why) {
          ADD_FAILURE() << "closed: " << why;
          timed_out = true;
        },
        caf::after(std::chrono::seconds(60)) >> [&] { timed_out = true; });
  }
  EXPECT_FALSE(timed_out) << count() << " of " << want.size() << " frames handled";
  caf::anon_send(conn, close_atom::value);
  std::string error;
  peer.Finish(&error);
  EXPECT_EQ(error, "");
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(handled.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(handled[i], IdOf(want[i])) << "frame " << i << " out of order";
  EXPECT_EQ(options.owner_backlog->load(), 0);
  EXPECT_GE(in_hook, 3u) << "the first small frames, with nothing mailed before them, are the hook's";
  EXPECT_GE(in_owner, 20u) << "every big frame is the owner's";
}

// A peer with another token: Connect fails naming it, and nothing of the owner's reaches the peer (it
// reads the refusal only, then the close).
TEST(TransportAuthTest, ConnectToAPeerWithAnotherTokenFails) {
  RawPeer peer("another-token");
  auto net = NetSystem::Acquire();
  caf::scoped_actor owner(net->system());
  ConnOptions options;
  options.token = kToken;
  try {
    Connect(net->system(), "127.0.0.1", peer.port(), caf::actor_cast<caf::actor>(owner), options);
    ADD_FAILURE() << "connected to a peer with another token";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("wrong cluster token"), std::string::npos) << e.what();
  }
  std::string error;
  const std::vector<Message> got = peer.Finish(&error);
  EXPECT_EQ(error, "the sender's proof is wrong");
  ASSERT_EQ(got.size(), 1u);  // the refusal
  ASSERT_TRUE(std::holds_alternative<ErrorMsg>(got[0]));
  EXPECT_NE(std::get<ErrorMsg>(got[0]).message.find("wrong cluster token"), std::string::npos);
}

}  // namespace
}  // namespace troupe::net
