// The wire format of the distributed KVStore (kvstore/net): every message kind round-trips field by
// field, a stream may be cut anywhere, several frames may arrive in one read, and hostile input (oversized,
// truncated, random, inconsistent, another version) gives troupe::Error and never a crash.
#include "kvstore/net/internal/frame_codec.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "kvstore/internal/dist_common.h"
#include "tests/kvstore/pattern_bytes.h"

namespace troupe::net {
namespace {

using test::PatternBytes;

Blob BlobOf(const std::vector<std::byte>& bytes) { return Blob::Copy(bytes); }

TensorPayload Payload(DType dtype, std::vector<std::int64_t> shape, std::size_t bytes, unsigned seed) {
  return TensorPayload{dtype, std::move(shape), BlobOf(PatternBytes(bytes, seed))};
}

// One of each kind of message, with every field away from its default where it has one.
std::vector<Message> AllKinds() {
  std::vector<Message> all;
  all.push_back(Hello{Role::kServer, 3, kProtocolVersion, "10.0.0.7", 9091});
  all.push_back(Hello{Role::kWorker, -1, kProtocolVersion, "", 0});
  all.push_back(Hello{Role::kScheduler, -1, kProtocolVersion, std::string("with\0nul", 8), 65535});
  all.push_back(AuthChallenge{std::string(kAuthNonceBytes, '\xa5')});
  all.push_back(AuthProof{std::string(kAuthMacBytes - 1, '\0') + "\x7f"});
  // float32 [2, 3]: 24 bytes, word-multiple (referenced by the encoder when aligned).
  all.push_back(TensorMsg{TensorOp::kInit, 11, 7, 0, 1, Payload(DType::kFloat32, {2, 3}, 24, 1), 5, false, 0.0f});
  // uint8 [3]: 3 bytes (copied by the encoder), split part 2 of 4, negative priority.
  all.push_back(TensorMsg{TensorOp::kPush, 12, -4, 2, 4, Payload(DType::kUint8, {3}, 3, 2), -9, false, 0.0f,
                          (std::uint64_t{1} << 63) + 5});  // a push number far beyond 32 bits
  // pull: no data, expected shape.
  all.push_back(
      TensorMsg{TensorOp::kPull, 13, 2147483647, 0, 1, TensorPayload{DType::kFloat64, {5, 0}, {}}, 0, false, 0.0f});
  // pushPull, 2-bit compressed: 17 float32 values -> ceil(17 / 16) = 2 words of 4 bytes.
  all.push_back(TensorMsg{TensorOp::kPushPull, 14, 1, 0, 1, Payload(DType::kFloat32, {17}, 8, 3), 1, true, 0.5f, 42});
  // scalar int64 push, and a zero-size array.
  all.push_back(TensorMsg{TensorOp::kPush, 15, 0, 0, 1, Payload(DType::kInt64, {}, 8, 4), 0, false, 0.0f});
  all.push_back(
      TensorMsg{TensorOp::kPush, 16, 0, 0, 1, TensorPayload{DType::kBfloat16, {4, 0, 2}, {}}, 0, false, 0.0f});
  all.push_back(Barrier{21, kWorkerGroup});
  all.push_back(Barrier{22, kSchedulerGroup | kServerGroup | kWorkerGroup});
  all.push_back(Heartbeat{2, 123456789012345ull});
  all.push_back(Heartbeat{-1, 0});
  all.push_back(Command{31, "checkpoint", {{"dir", "/tmp/ckpt"}, {"every", "100"}, {"dir", "again"}}});
  all.push_back(Command{32, "leave", {}});
  all.push_back(Ack{41, std::nullopt});
  all.push_back(Ack{42, Payload(DType::kFloat16, {3, 3}, 18, 5)});
  all.push_back(ErrorMsg{43, "worker 1 died during push of key 7", 1, Role::kWorker});
  all.push_back(ErrorMsg{0, "wrong cluster token", -1, Role::kScheduler});
  // A step's keys for one server in one frame: every op, aligned and unaligned data, a pull among them.
  all.push_back(TensorBatch{{
      TensorMsg{TensorOp::kPushPull, 51, 0, 0, 1, Payload(DType::kFloat32, {4}, 16, 6), 0, false, 0.0f, 7},
      TensorMsg{TensorOp::kPushPull, 52, 1, 0, 1, Payload(DType::kUint8, {5}, 5, 7), -1, false, 0.0f, 7},
      TensorMsg{TensorOp::kPull, 53, 2, 0, 1, TensorPayload{DType::kFloat64, {2}, {}}, -2, false, 0.0f},
      TensorMsg{TensorOp::kPush, 54, 3, 1, 2, Payload(DType::kFloat32, {17}, 8, 8), 3, true, 0.25f, 9},
      TensorMsg{TensorOp::kInit, 55, 4, 0, 1, Payload(DType::kFloat32, {2, 2}, 16, 9), 0, false, 0.0f},
  }});
  all.push_back(TensorBatch{{TensorMsg{TensorOp::kPush, 56, 9, 0, 1, Payload(DType::kInt32, {1}, 4, 10), 0, false,
                                       0.0f, 1}}});
  // Answers ready together: values, a done and errors (about requests, and one that is not).
  all.push_back(ReplyBatch{{Ack{61, Payload(DType::kFloat32, {4}, 16, 11)}, Ack{62, std::nullopt},
                            Ack{63, Payload(DType::kUint8, {3}, 3, 12)}},
                           {ErrorMsg{64, "server 0: the update of key 2 failed", -1, Role::kWorker},
                            ErrorMsg{65, "worker 1 died", 1, Role::kWorker}}});
  all.push_back(ReplyBatch{{}, {ErrorMsg{66, "only errors", -1, Role::kServer}}});
  return all;
}

std::string KindOf(const Message& m) { return "variant index " + std::to_string(m.index()); }

TEST(FrameCodecTest, EveryKindRoundTripsFieldByField) {
  for (const Message& original : AllKinds()) {
    const std::vector<std::byte> frame = EncodeFrame(original);
    ASSERT_GE(frame.size(), 16u);
    std::uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(frame[i]) << (8 * i);
    EXPECT_EQ(n, frame.size() - 8) << "the prefix is the body's length, little endian";
    EXPECT_EQ(n % 8, 0u);
    const Message decoded = DecodeFrame(frame);
    ASSERT_EQ(decoded.index(), original.index());
    EXPECT_TRUE(decoded == original) << KindOf(original);
    if (const auto* t = std::get_if<TensorMsg>(&decoded); t && t->value.data.size() > 0) {
      const auto& o = std::get<TensorMsg>(original);
      EXPECT_EQ(t->op, o.op);
      EXPECT_EQ(t->request_id, o.request_id);
      EXPECT_EQ(t->key, o.key);
      EXPECT_EQ(t->part_index, o.part_index);
      EXPECT_EQ(t->part_count, o.part_count);
      EXPECT_EQ(t->value.dtype, o.value.dtype);
      EXPECT_EQ(t->value.shape, o.value.shape);
      EXPECT_EQ(t->priority, o.priority);
      EXPECT_EQ(t->compressed, o.compressed);
      EXPECT_EQ(t->compression_threshold, o.compression_threshold);
      EXPECT_NE(t->value.data.owner, nullptr) << "decoded data shares the frame buffer";
    }
  }
}

TEST(FrameCodecTest, BorrowedUnalignedDataIsCopiedCorrectly) {
  // A view at an odd address and of an odd size takes the memcpy path; an aligned one the reference path.
  std::vector<std::byte> storage = PatternBytes(4096 + 8, 9);
  for (std::size_t offset : {0u, 1u, 3u, 8u}) {
    for (std::size_t size : {8u, 13u, 4096u}) {
      TensorMsg m{TensorOp::kPush,
                  1,
                  1,
                  0,
                  1,
                  TensorPayload{DType::kUint8,
                                {static_cast<std::int64_t>(size)},
                                Blob::View(std::span<const std::byte>(storage.data() + offset, size))},
                  0,
                  false,
                  0.0f};
      const Message decoded = DecodeFrame(EncodeFrame(m));
      EXPECT_TRUE(std::get<TensorMsg>(decoded) == m) << "offset " << offset << " size " << size;
    }
  }
}

TEST(FrameCodecTest, SixtyFourMiBTensorRoundTrips) {
  const std::size_t bytes = std::size_t{64} << 20;
  const std::vector<std::byte> data = PatternBytes(bytes, 77);
  TensorMsg m{TensorOp::kPush, 99,  3, 0, 1, TensorPayload{DType::kFloat32, {4096, 4096}, Blob::View(data)}, 0,
              false,           0.0f};
  const std::vector<std::byte> frame = EncodeFrame(m);
  EXPECT_LT(frame.size(), bytes + 256) << "the tensor is one blob, not a list of elements";
  FrameDecoder decoder;
  // Fed in 1 MiB reads, as a socket would deliver it.
  for (std::size_t at = 0; at < frame.size(); at += std::size_t{1} << 20) {
    decoder.Feed(frame.data() + at, std::min(std::size_t{1} << 20, frame.size() - at));
  }
  decoder.Finish();
  auto decoded = decoder.Next();
  ASSERT_TRUE(decoded.has_value());
  const auto& t = std::get<TensorMsg>(*decoded);
  ASSERT_EQ(t.value.data.size(), bytes);
  EXPECT_EQ(std::memcmp(t.value.data.bytes.data(), data.data(), bytes), 0);
  EXPECT_EQ(t.value.shape, (std::vector<std::int64_t>{4096, 4096}));
  EXPECT_FALSE(decoder.Next().has_value());
}

// EncodeFrameTo hands out, in one call, pieces whose concatenation is EncodeFrame's frame, for every kind
// of message.
TEST(FrameCodecTest, EncodeFrameToPiecesMakeTheSameFrame) {
  for (const Message& m : AllKinds()) {
    std::vector<std::byte> joined;
    std::size_t pieces = 0;
    int calls = 0;
    EncodeFrameTo(m, [&](FramePieces ps) {
      for (const auto& p : ps) joined.insert(joined.end(), p.begin(), p.end());
      pieces += ps.size();
      ++calls;
    });
    EXPECT_EQ(joined, EncodeFrame(m)) << KindOf(m);
    EXPECT_EQ(calls, 1) << KindOf(m);
    EXPECT_GE(pieces, 2u) << "the prefix comes as a piece of its own";
  }
  // A tensor's bytes are not copied into the pieces: one piece points into the caller's buffer.
  {
    std::vector<std::byte> data(4096 * 4, std::byte{7});
    Message m = TensorMsg{TensorOp::kPush, 9, 3, 0, 1, TensorPayload{DType::kFloat32, {4096}, Blob::View(data)}, 0,
                          false, 0.0f};
    bool points_into_caller = false;
    EncodeFrameTo(m, [&](FramePieces ps) {
      for (const auto& p : ps) points_into_caller |= p.data() == data.data() && p.size() == data.size();
    });
    EXPECT_TRUE(points_into_caller);
  }
  // ValidateMessage refuses what EncodeFrame refuses.
  Message bad = TensorMsg{
      TensorOp::kPush, 1, 0, 0, 1, TensorPayload{DType::kFloat32, {3}, BlobOf(PatternBytes(8, 1))}, 0, false, 0.0f};
  EXPECT_THROW(ValidateMessage(bad), Error);
  EXPECT_THROW(EncodeFrame(bad), Error);
}

// A body read by the caller into a buffer of its own (as a connection does) is adopted, not copied: the
// decoded tensor points into that buffer and keeps it alive.
TEST(FrameCodecTest, AdoptedBodyIsDecodedWithoutACopy) {
  const std::vector<std::byte> data = PatternBytes(1 << 20, 5);
  const TensorMsg m{TensorOp::kPushPull, 7, 2, 0, 1, TensorPayload{DType::kFloat32, {1 << 18}, Blob::View(data)}, 0,
                    false, 0.0f};
  const std::vector<std::byte> frame = EncodeFrame(m);
  FrameDecoder decoder;
  EXPECT_EQ(decoder.awaiting_body(), 0u);
  decoder.Feed(frame.data(), 8);
  ASSERT_EQ(decoder.awaiting_body(), frame.size() - 8);
  auto body = std::make_shared<std::vector<char>>(frame.size() - 8);
  std::memcpy(body->data(), frame.data() + 8, body->size());
  const char* const begin = body->data();
  std::weak_ptr<std::vector<char>> watch = body;
  decoder.AdoptBody(std::move(body));
  auto decoded = decoder.Next();
  ASSERT_TRUE(decoded.has_value());
  const auto& t = std::get<TensorMsg>(*decoded);
  EXPECT_EQ(t, m);
  const auto* p = reinterpret_cast<const char*>(t.value.data.bytes.data());
  EXPECT_TRUE(p >= begin && p < begin + (frame.size() - 8)) << "the tensor views the adopted buffer";
  EXPECT_FALSE(watch.expired()) << "the decoded message owns the buffer";
  decoded.reset();
  EXPECT_TRUE(watch.expired());
  // A buffer of the wrong size is a caller's bug, reported as an error.
  decoder.Feed(frame.data(), 8);
  EXPECT_THROW(decoder.AdoptBody(std::make_shared<std::vector<char>>(16)), Error);
}

TEST(FrameCodecTest, TensorOverTheBlobLimitIsAClearError) {
  TensorMsg m{TensorOp::kPush,
              1,
              1,
              0,
              1,
              TensorPayload{DType::kUint8,
                            {static_cast<std::int64_t>(kMaxTensorBytes) + 1},
                            Blob::View(std::span<const std::byte>(static_cast<const std::byte*>(nullptr), 0))},
              0,
              false,
              0.0f};
  // The size check comes first (the data is empty, so this is the shape mismatch) ...
  EXPECT_THROW(EncodeFrame(m), Error);
  // ... and a consistent payload over the limit names the fix (split into parts).
  // Not initialised: the pages are never touched, the encoder refuses on the size alone.
  auto big = std::make_unique_for_overwrite<std::byte[]>(kMaxTensorBytes + 1);
  m.value.data = Blob::View(std::span<const std::byte>(big.get(), kMaxTensorBytes + 1));
  try {
    EncodeFrame(m);
    ADD_FAILURE() << "expected troupe::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("split the array into parts"), std::string::npos) << e.what();
  }
}

TEST(FrameCodecTest, SplitAtEveryByteBoundary) {
  const Message original = Command{7, "checkpoint", {{"dir", "/tmp/x"}}};
  const std::vector<std::byte> frame = EncodeFrame(original);
  for (std::size_t cut = 0; cut <= frame.size(); ++cut) {
    FrameDecoder decoder;
    decoder.Feed(frame.data(), cut);
    if (cut < frame.size()) {
      EXPECT_FALSE(decoder.Next().has_value()) << "cut " << cut;
    }
    if (cut > 0 && cut < frame.size()) {  // nothing fed is a clean end of stream
      EXPECT_THROW(decoder.Finish(), Error) << "cut " << cut;
    }
    decoder.Feed(frame.data() + cut, frame.size() - cut);
    decoder.Finish();
    auto decoded = decoder.Next();
    ASSERT_TRUE(decoded.has_value()) << "cut " << cut;
    EXPECT_TRUE(*decoded == original) << "cut " << cut;
    EXPECT_EQ(decoder.pending_bytes(), 0u);
  }
}

TEST(FrameCodecTest, ByteByByte) {
  const Message original = AllKinds()[3];
  const std::vector<std::byte> frame = EncodeFrame(original);
  FrameDecoder decoder;
  for (std::size_t i = 0; i < frame.size(); ++i) {
    EXPECT_FALSE(decoder.Next().has_value());
    decoder.Feed(&frame[i], 1);
  }
  decoder.Finish();
  auto decoded = decoder.Next();
  ASSERT_TRUE(decoded.has_value());
  EXPECT_TRUE(*decoded == original);
}

TEST(FrameCodecTest, SeveralFramesInOneFeed) {
  const std::vector<Message> all = AllKinds();
  std::vector<std::byte> stream;
  for (const auto& m : all) {
    const auto frame = EncodeFrame(m);
    stream.insert(stream.end(), frame.begin(), frame.end());
  }
  FrameDecoder decoder;
  decoder.Feed(stream.data(), stream.size());
  decoder.Finish();
  for (const auto& m : all) {
    auto decoded = decoder.Next();
    ASSERT_TRUE(decoded.has_value());
    EXPECT_TRUE(*decoded == m) << KindOf(m);
  }
  EXPECT_FALSE(decoder.Next().has_value());

  // Frames plus the start of another: the complete ones are out, Finish reports the rest.
  FrameDecoder partial;
  const auto extra = EncodeFrame(all[0]);
  std::vector<std::byte> more(stream);
  more.insert(more.end(), extra.begin(), extra.begin() + 11);
  partial.Feed(more.data(), more.size());
  EXPECT_EQ(partial.pending_bytes(), 11u);
  EXPECT_THROW(partial.Finish(), Error);
  std::size_t count = 0;
  while (partial.Next()) ++count;
  EXPECT_EQ(count, all.size());
}

std::vector<std::byte> Prefix(std::uint64_t n) {
  std::vector<std::byte> p(8);
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(n >> (8 * i));
  return p;
}

void ExpectError(FrameDecoder& decoder, const std::vector<std::byte>& bytes, const std::string& fragment) {
  try {
    decoder.Feed(bytes.data(), bytes.size());
    decoder.Finish();
    ADD_FAILURE() << "expected troupe::Error containing \"" << fragment << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(FrameCodecTest, OversizedLengthPrefixIsRefusedBeforeAllocating) {
  FrameDecoder decoder(1 << 20);
  ExpectError(decoder, Prefix((1 << 20) + 8), "exceeds the frame limit");
  EXPECT_TRUE(decoder.failed());
  EXPECT_EQ(decoder.pending_bytes(), 0u);
  // A failed stream stays failed.
  const auto good = EncodeFrame(Heartbeat{1, 1});
  EXPECT_THROW(decoder.Feed(good.data(), good.size()), Error);

  FrameDecoder huge;  // default 1 GiB limit, prefix near 2^64
  ExpectError(huge, Prefix(~std::uint64_t{0} - 7), "exceeds the frame limit");
  FrameDecoder zero;
  ExpectError(zero, Prefix(0), "is 0");
  FrameDecoder odd;
  ExpectError(odd, Prefix(12), "not a multiple of 8");
  // Exactly at the limit is fine.
  const auto frame = EncodeFrame(Heartbeat{1, 2});
  FrameDecoder exact(frame.size() - 8);
  exact.Feed(frame.data(), frame.size());
  EXPECT_TRUE(exact.Next().has_value());
  FrameDecoder below(frame.size() - 16);
  EXPECT_THROW(below.Feed(frame.data(), frame.size()), Error);
}

TEST(FrameCodecTest, GoodFramesBeforeABadOneAreKept) {
  std::vector<std::byte> stream = EncodeFrame(Heartbeat{1, 1});
  const auto second = EncodeFrame(Heartbeat{1, 2});
  stream.insert(stream.end(), second.begin(), second.end());
  const auto bad = Prefix(std::uint64_t{1} << 40);
  stream.insert(stream.end(), bad.begin(), bad.end());
  FrameDecoder decoder;
  EXPECT_THROW(decoder.Feed(stream.data(), stream.size()), Error);
  EXPECT_TRUE(*decoder.Next() == Message(Heartbeat{1, 1}));
  EXPECT_TRUE(*decoder.Next() == Message(Heartbeat{1, 2}));
  EXPECT_FALSE(decoder.Next().has_value());
}

TEST(FrameCodecTest, TruncatedFrameIsReportedAtFinish) {
  const auto frame = EncodeFrame(AllKinds()[0]);
  for (std::size_t keep : {std::size_t{3}, std::size_t{8}, frame.size() - 1}) {
    FrameDecoder decoder;
    decoder.Feed(frame.data(), keep);
    EXPECT_FALSE(decoder.Next().has_value());
    try {
      decoder.Finish();
      ADD_FAILURE() << "keep " << keep;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(keep < 8 ? "inside the length prefix" : "truncated"), std::string::npos)
          << e.what();
    }
  }
  // DecodeFrame (exactly one frame) refuses a short buffer and trailing bytes.
  EXPECT_THROW(DecodeFrame(std::span(frame).first(frame.size() - 8)), Error);
  std::vector<std::byte> longer(frame);
  longer.push_back(std::byte{0});
  EXPECT_THROW(DecodeFrame(longer), Error);
}

TEST(FrameCodecTest, DataSizeThatDisagreesWithShapeIsRefused) {
  TensorMsg m{TensorOp::kPush, 5, 1, 0, 1, Payload(DType::kFloat32, {2, 3}, 20, 1), 0, false, 0.0f};
  EXPECT_THROW(EncodeFrame(m), Error) << "the encoder checks too";
  FrameDecoder decoder;
  ExpectError(decoder, EncodeFrame(m, EncodeOptions{kProtocolVersion, false}), "data has 20 bytes");

  m.value = Payload(DType::kFloat32, {2, -3}, 24, 1);
  FrameDecoder negative;
  ExpectError(negative, EncodeFrame(m, EncodeOptions{kProtocolVersion, false}), "negative");

  // A shape whose product overflows cannot wrap around into agreement with the data.
  m.value = Payload(DType::kFloat32, {std::int64_t{1} << 62, 4}, 0, 1);
  FrameDecoder overflow;
  ExpectError(overflow, EncodeFrame(m, EncodeOptions{kProtocolVersion, false}), "overflows");

  // A pull carries no data; an unknown dtype is refused; a part index beyond the count is refused.
  TensorMsg pull{TensorOp::kPull, 6, 1, 0, 1, Payload(DType::kUint8, {4}, 4, 1), 0, false, 0.0f};
  FrameDecoder with_data;
  ExpectError(with_data, EncodeFrame(pull, EncodeOptions{kProtocolVersion, false}), "must carry none");
  TensorMsg odd_dtype{TensorOp::kPush, 7, 1, 0, 1, TensorPayload{static_cast<DType>(42), {1}, {}}, 0, false, 0.0f};
  FrameDecoder dtype;
  ExpectError(dtype, EncodeFrame(odd_dtype, EncodeOptions{kProtocolVersion, false}), "unknown dtype code 42");
  TensorMsg part{TensorOp::kPush, 8, 1, 4, 4, Payload(DType::kUint8, {1}, 1, 1), 0, false, 0.0f};
  FrameDecoder parts;
  ExpectError(parts, EncodeFrame(part, EncodeOptions{kProtocolVersion, false}), "part 4 of 4");
  // Compressed: the 2-bit size, float32 only.
  TensorMsg compressed{TensorOp::kPush, 9, 1, 0, 1, Payload(DType::kFloat32, {33}, 8, 1), 0, true, 0.5f};
  FrameDecoder two_bit;
  ExpectError(two_bit, EncodeFrame(compressed, EncodeOptions{kProtocolVersion, false}), "(2-bit compressed)");
}

TEST(FrameCodecTest, WrongProtocolVersionIsRefused) {
  FrameDecoder decoder;
  ExpectError(decoder, EncodeFrame(Heartbeat{1, 1}, EncodeOptions{kProtocolVersion + 1, true}),
              "protocol version " + std::to_string(kProtocolVersion + 1));
  // A hello announcing another version in a frame of ours.
  Hello hello{Role::kWorker, -1, kProtocolVersion + 1, "h", 1};
  EXPECT_THROW(EncodeFrame(hello), Error);
  FrameDecoder hello_decoder;
  ExpectError(hello_decoder, EncodeFrame(hello, EncodeOptions{kProtocolVersion, false}), "protocol version");
  // A zeroed message (version 0) is not a frame of ours either.
  FrameDecoder zeros;
  std::vector<std::byte> frame = Prefix(16);
  frame.resize(24);
  frame[12] = std::byte{1};  // segment table: one segment of one word (a null root pointer)
  ExpectError(zeros, frame, "protocol version 0");
}

// A batch holds something: an empty one is refused on both sides; an entry is checked as a lone request.
TEST(FrameCodecTest, EmptyOrBadBatchesAreRefused) {
  EXPECT_THROW(EncodeFrame(TensorBatch{}), Error);
  EXPECT_THROW(EncodeFrame(ReplyBatch{}), Error);
  EncodeOptions unchecked;
  unchecked.check = false;
  FrameDecoder decoder;
  ExpectError(decoder, EncodeFrame(TensorBatch{}, unchecked), "tensor batch: no entries");
  // The second entry's data disagrees with its shape.
  const TensorBatch bad{{TensorMsg{TensorOp::kPush, 1, 0, 0, 1, Payload(DType::kFloat32, {2}, 8, 1), 0, false, 0.0f},
                         TensorMsg{TensorOp::kPush, 2, 1, 0, 1, Payload(DType::kFloat32, {3}, 8, 2), 0, false, 0.0f}}};
  EXPECT_THROW(EncodeFrame(bad), Error);
  FrameDecoder second;
  ExpectError(second, EncodeFrame(bad, unchecked), "push request 2 (key 1)");
}

TEST(FrameCodecTest, UnknownMessageKindIsRefused) {
  std::vector<std::byte> frame = EncodeFrame(Heartbeat{1, 1});
  // Layout of a one-segment message: prefix (8), segment table (8), root pointer (8), then the Frame's data
  // section: version (UInt32) at bytes 24..27 and the union discriminant (UInt16) at 28..29.
  ASSERT_EQ(frame[24], std::byte{static_cast<unsigned char>(kProtocolVersion)});
  ASSERT_EQ(frame[28], std::byte{6}) << "heartbeat is the 7th union member (discriminant 6)";
  frame[28] = std::byte{0x63};
  FrameDecoder decoder;
  ExpectError(decoder, frame, "unknown message kind 99");
}

// set_optimizer's arguments (a Command's key/value list): the config with its per-index multipliers comes
// back whole; a malformed multiplier from a peer is a clear error, never a crash.
TEST(FrameCodecTest, OptimizerConfigTravelsWithItsMultipliers) {
  OptimizerConfig c("sgd", {{"learning_rate", "0.1"}, {"momentum", "0.9"}}, "multifactor",
                    {{"step", "(10,20)"}, {"factor", "0.5"}});
  c.multipliers[0] = {1.0f, 0.0f};
  c.multipliers[7] = {0.25f, 2.0f};
  const OptimizerConfig back = internal::OptimizerFromArgs(internal::OptimizerArgs(c));
  EXPECT_EQ(back.type, c.type);
  EXPECT_EQ(back.params, c.params);
  EXPECT_EQ(back.lr_scheduler, c.lr_scheduler);
  EXPECT_EQ(back.lr_scheduler_params, c.lr_scheduler_params);
  EXPECT_EQ(back.multipliers, c.multipliers);
  for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
           {"mult.x", "1,0"}, {"mult.3", "1"}, {"mult.-1", "1,0"}, {"mult.3", "a,b"}, {"mult.", "1,0"}}) {
    SCOPED_TRACE(k + " = " + v);
    EXPECT_THROW(internal::OptimizerFromArgs({{"type", "sgd"}, {k, v}}), Error);
  }
}

TEST(FrameCodecTest, RandomAndMutatedInputNeverCrashes) {
  unsigned seed = std::random_device{}();
  if (const char* env = std::getenv("TROUPE_TEST_SEED")) seed = static_cast<unsigned>(std::strtoul(env, nullptr, 10));
  std::printf("frame_codec_test: seed %u (TROUPE_TEST_SEED=%u reproduces)\n", seed, seed);
  std::mt19937_64 rng(seed);
  std::vector<std::vector<std::byte>> valid;
  for (const auto& m : AllKinds()) valid.push_back(EncodeFrame(m));
  int errors = 0, decoded = 0;
  for (int round = 0; round < 3000; ++round) {
    std::vector<std::byte> buf;
    switch (round % 3) {
      case 0: {  // pure noise
        buf.resize(rng() % 512);
        for (auto& b : buf) b = static_cast<std::byte>(rng());
        break;
      }
      case 1: {  // a valid length prefix followed by noise: reaches the Cap'n Proto parser
        const std::size_t words = 1 + rng() % 48;
        buf = Prefix(words * 8);
        for (std::size_t i = 0; i < words * 8; ++i) buf.push_back(static_cast<std::byte>(rng()));
        if (rng() % 2) {  // a plausible segment table
          buf[8] = buf[9] = buf[10] = buf[11] = std::byte{0};
          const std::uint32_t seg = static_cast<std::uint32_t>(words - 1);
          std::memcpy(&buf[12], &seg, 4);
        }
        break;
      }
      default: {  // a valid frame with a few bytes flipped after the prefix
        buf = valid[rng() % valid.size()];
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int f = 0; f < flips; ++f) buf[8 + rng() % (buf.size() - 8)] ^= static_cast<std::byte>(1 + rng() % 255);
        break;
      }
    }
    FrameDecoder decoder(1 << 16);
    try {
      const std::size_t cut = buf.empty() ? 0 : rng() % buf.size();
      decoder.Feed(buf.data(), cut);
      decoder.Feed(buf.data() + cut, buf.size() - cut);
      decoder.Finish();
    } catch (const Error&) {
      ++errors;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "round " << round << ": not a troupe::Error: " << e.what();
    }
    while (auto m = decoder.Next()) {
      ++decoded;
      // Whatever decodes re-encodes to the same message.
      EXPECT_TRUE(DecodeFrame(EncodeFrame(*m)) == *m) << "round " << round;
    }
  }
  std::printf("frame_codec_test: %d errors, %d frames decoded\n", errors, decoded);
  EXPECT_GT(errors, 0);
}

}  // namespace
}  // namespace troupe::net
