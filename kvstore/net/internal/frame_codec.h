// The frame codec of the distributed KVStore: plain C++ mirrors of the messages in
// kvstore/net/frames.capnp, EncodeFrame (message -> length-prefixed Cap'n Proto bytes) and FrameDecoder
// (a byte stream -> messages, with every check a hostile peer needs). Internal to kvstore/: no Cap'n Proto
// type appears here, so the brokers (and tests) include this without capnp headers.
//
// Frame layout on the wire:
//   [8 bytes: N, little-endian uint64] [N bytes: Cap'n Proto flat message (segment table + segments)]
// N is a multiple of 8 (capnp messages are whole words) and 8 <= N <= the decoder's max_frame_bytes. The
// prefix is 8 bytes rather than 4 so that the body keeps the 8-byte alignment of the frame start (a sender
// can write frames back to back into one word buffer) and so that no 4 GiB ceiling is built into the format.
//
// Tensor bytes are never copied element by element: EncodeFrame copies them once into the output (the
// Cap'n Proto message references the caller's buffer when it is 8-byte aligned and a whole number of words,
// else one memcpy into the message and one into the output), and a decoded tensor's `data` points into
// the received frame buffer, which the message keeps alive (no copy).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "tensor/tensor.h"

namespace troupe::net {

// The version this build speaks (Frame.version, Hello.protocolVersion). Bump on any incompatible change.
// 2: the observer role; 3: authentication frames; 4: TensorBatch and ReplyBatch.
inline constexpr std::uint32_t kProtocolVersion = 4;

// Default cap on one frame's body (N above). A peer can make a decoder allocate up to this much (address
// space; pages are touched only as bytes arrive), so pick the smallest bound the traffic allows.
inline constexpr std::size_t kDefaultMaxFrameBytes = std::size_t{1} << 30;  // 1 GiB

// The largest tensor payload one frame can carry: Cap'n Proto limits a Data blob to 2^29 - 1 bytes. Bigger
// arrays are split into parts (TensorMsg::part_index / part_count).
inline constexpr std::size_t kMaxTensorBytes = (std::size_t{1} << 29) - 1;

// Bytes that may be borrowed (encoding: the caller's buffer, valid during EncodeFrame) or shared (decoding:
// a view into the frame buffer that `owner` keeps alive). Copying a Blob copies the view, not the bytes.
struct Blob {
  std::span<const std::byte> bytes;
  std::shared_ptr<const void> owner;  // keeps `bytes` valid; null for a borrowed view

  // A view of memory the caller keeps alive.
  static Blob View(std::span<const std::byte> bytes) { return Blob{bytes, nullptr}; }
  // An owning copy (tests, small payloads).
  static Blob Copy(std::span<const std::byte> bytes);

  std::size_t size() const { return bytes.size(); }
  // Equal bytes (not equal owners).
  friend bool operator==(const Blob& a, const Blob& b);
};

enum class Role : std::uint8_t { kScheduler = 0, kServer = 1, kWorker = 2, kObserver = 3 };

// Bits of Barrier::group (ps-lite's groups).
inline constexpr std::uint8_t kSchedulerGroup = 1;
inline constexpr std::uint8_t kServerGroup = 2;
inline constexpr std::uint8_t kWorkerGroup = 4;

// The bytes of an authentication nonce and of a proof (HMAC-SHA256).
inline constexpr std::size_t kAuthNonceBytes = 32;
inline constexpr std::size_t kAuthMacBytes = 32;

// First frame on a connection, both ways: a fresh nonce (kvstore/net/internal/auth.h).
struct AuthChallenge {
  std::string nonce;  // kAuthNonceBytes bytes
  friend bool operator==(const AuthChallenge&, const AuthChallenge&) = default;
};
// The answer to the peer's challenge: proves the sender holds the cluster token.
struct AuthProof {
  std::string mac;  // kAuthMacBytes bytes
  friend bool operator==(const AuthProof&, const AuthProof&) = default;
};

// First frame of a role on an authenticated connection: who the sender is.
struct Hello {
  Role role = Role::kWorker;
  std::int32_t rank = -1;  // -1 = not assigned yet
  std::uint32_t protocol_version = kProtocolVersion;
  std::string host;
  std::uint16_t port = 0;
  friend bool operator==(const Hello&, const Hello&) = default;
};

// A dense tensor: dtype, shape and row-major bytes (or the 2-bit payload when TensorMsg::compressed).
struct TensorPayload {
  DType dtype = DType::kFloat32;
  std::vector<std::int64_t> shape;  // empty = scalar
  Blob data;
  friend bool operator==(const TensorPayload&, const TensorPayload&) = default;
};

enum class TensorOp : std::uint8_t { kInit, kPush, kPull, kPushPull };

// init / push / pull / pushPull of one key or one part of a split key. For kPull, value.data is empty
// and value.shape may be empty ("whatever is stored").
struct TensorMsg {
  TensorOp op = TensorOp::kPush;
  std::uint64_t request_id = 0;
  std::int32_t key = 0;
  std::uint32_t part_index = 0;
  std::uint32_t part_count = 1;  // 1 = not split
  TensorPayload value;
  std::int32_t priority = 0;
  bool compressed = false;             // value.data is 2-bit compressed; value.dtype is float32
  float compression_threshold = 0.0f;  // > 0 when compressed; decoded as 0 when not
  std::uint64_t round = 0;             // push/pushPull: the worker's push number of this key; 0 = unnumbered
  friend bool operator==(const TensorMsg&, const TensorMsg&) = default;
};

struct Barrier {
  std::uint64_t request_id = 0;
  std::uint8_t group = kWorkerGroup;  // bit mask of k*Group, not 0
  friend bool operator==(const Barrier&, const Barrier&) = default;
};

struct Heartbeat {
  std::int32_t sender_rank = -1;
  std::uint64_t sequence = 0;
  friend bool operator==(const Heartbeat&, const Heartbeat&) = default;
};

// A named control operation ("checkpoint", "leave", ...) with ordered text arguments.
struct Command {
  std::uint64_t request_id = 0;
  std::string name;
  std::vector<std::pair<std::string, std::string>> args;
  friend bool operator==(const Command&, const Command&) = default;
};

// Success of a request; pull and pushPull carry the value.
struct Ack {
  std::uint64_t request_id = 0;
  std::optional<TensorPayload> value;
  friend bool operator==(const Ack&, const Ack&) = default;
};

// Failure of a request (request_id 0 = not about one request).
struct ErrorMsg {
  std::uint64_t request_id = 0;
  std::string message;
  std::int32_t dead_node_rank = -1;        // -1 = no node died
  Role dead_node_role = Role::kScheduler;  // meaningful when dead_node_rank >= 0
  friend bool operator==(const ErrorMsg&, const ErrorMsg&) = default;
};

// Several tensor requests of one worker to one server in one frame (a step's small keys: one write, one
// read, one wake-up of the server instead of one per key). At least two entries; each keeps its own
// request id and is answered on its own (an Ack or an ErrorMsg, possibly inside a ReplyBatch), exactly as
// if it had come alone, in entry order.
struct TensorBatch {
  std::vector<TensorMsg> entries;
  friend bool operator==(const TensorBatch&, const TensorBatch&) = default;
};

// Answers a node had ready at the same time for one connection, in one frame (the values of a sync round's
// keys for a worker). Each answers its own request, as if it had come alone. At least two in all.
struct ReplyBatch {
  std::vector<Ack> acks;
  std::vector<ErrorMsg> errors;
  friend bool operator==(const ReplyBatch&, const ReplyBatch&) = default;
};

using Message = std::variant<Hello, TensorMsg, Barrier, Heartbeat, Command, Ack, ErrorMsg, AuthChallenge, AuthProof,
                             TensorBatch, ReplyBatch>;

// The 8-byte prefix followed by the Cap'n Proto message. Throws troupe::Error for a message that cannot be
// sent: tensor data over kMaxTensorBytes, a payload whose size disagrees with dtype and shape, a negative
// dimension, a pull with data, an empty barrier group. The same checks as the decoder's, so a frame that
// encodes also decodes.
std::vector<std::byte> EncodeFrame(const Message& message);

// For tests and diagnostics: frames a correct node never sends (another protocol version, a message that
// fails the checks), to see that receivers refuse them.
struct EncodeOptions {
  std::uint32_t version = kProtocolVersion;  // Frame.version written
  bool check = true;                         // false: skip the checks (data size may disagree with shape)
};
std::vector<std::byte> EncodeFrame(const Message& message, const EncodeOptions& options);

// The same bytes as pieces (the prefix, the segment table, each segment), handed to `sink` in one call
// instead of one buffer: a tensor's bytes stay in the caller's memory (the piece points there), so a
// connection can hand them to the socket in one gathered write with no frame-sized copy in between. The
// pieces are valid only during the call; the tensors' memory must stay valid and unchanged until
// EncodeFrameTo returns.
using FramePieces = std::span<const std::span<const std::byte>>;
using FrameSink = std::function<void(FramePieces pieces)>;
// EncodeFrame's checks alone (troupe::Error as EncodeFrame throws it): a sender that hands a message to
// another thread for encoding checks it first, where its error can still reach the caller.
void ValidateMessage(const Message& message);
void EncodeFrameTo(const Message& message, const FrameSink& sink, const EncodeOptions& options = {});

// Splits a byte stream into frames and decodes them.
//
// Feed() appends bytes and decodes every frame they complete; the messages wait in a queue for Next().
// Checks (each a troupe::Error naming the problem): a length prefix of 0, not a multiple of 8 or over
// max_frame_bytes (thrown as soon as the 8 prefix bytes are in, before any allocation); a Cap'n Proto
// message that does not parse or validate (segment table, pointers out of bounds, traversal limit = twice
// the frame's words, nesting limit, trailing bytes); a list longer than the frame's bytes can hold (so no
// count is ever reserved beyond what arrived); an unknown union member; a protocol version other
// than kProtocolVersion; an unknown dtype or role; a negative dimension; data whose size disagrees with
// dtype and shape; a part index not below the part count. After an error the decoder is failed: the
// messages decoded before the bad frame stay available through Next(), and Feed() throws again.
// Finish() throws when the stream ended inside a frame.
//
// Memory: the prefix is read into a small array; the body goes straight into an 8-byte aligned buffer
// of exactly N bytes (Cap'n Proto readers need alignment, DESIGN.md §6), allocated without
// initialisation, so a hostile prefix costs address space, not touched pages. Decoded tensors share
// that buffer.
//
// Thread-safety: none; one decoder per connection, used by one actor at a time.
class FrameDecoder {
 public:
  explicit FrameDecoder(std::size_t max_frame_bytes = kDefaultMaxFrameBytes);

  void Feed(const std::byte* data, std::size_t size);
  // When the prefix of a frame is in and none of its body: the body's size N (else 0). A caller that reads
  // the body into a buffer of its own (a connection reading exactly N bytes) hands it over with AdoptBody,
  // and the decoded message keeps that buffer alive instead of copying it.
  std::size_t awaiting_body() const;
  // Bytes of the current frame's prefix not in yet (8 between frames; 0 once the prefix is whole), and of
  // its body once the prefix is whole (0 before): a reader that reads ahead feeds at most these, so that it
  // sees each frame end (and each prefix, to reserve its body) before it feeds the next.
  std::size_t prefix_missing() const { return 8 - prefix_filled_; }
  std::size_t body_missing() const { return prefix_filled_ == 8 ? body_size_ - body_filled_ : 0; }
  void AdoptBody(std::shared_ptr<std::vector<char>> body);
  // The next decoded message, or nullopt when none is complete.
  std::optional<Message> Next();
  // Throws troupe::Error if the stream ended inside a frame (prefix or body).
  void Finish() const;

  std::size_t max_frame_bytes() const { return max_frame_bytes_; }
  // Changes the cap for the frames whose prefix is not in yet (a connection raises it once the peer
  // authenticated).
  void set_max_frame_bytes(std::size_t n) { max_frame_bytes_ = n; }
  bool failed() const { return !error_.empty(); }
  // Bytes of the current incomplete frame (prefix included); 0 between frames.
  std::size_t pending_bytes() const { return prefix_filled_ + body_filled_; }

 private:
  void Fail(const std::string& why);
  void StartBody();
  void AllocateBody();
  void FinishBody();

  std::size_t max_frame_bytes_;
  std::byte prefix_[8] = {};
  std::size_t prefix_filled_ = 0;
  std::byte* body_ = nullptr;              // 8-byte aligned bytes of the current frame (null until needed)
  std::shared_ptr<const void> body_owner_;  // keeps body_ alive (words allocated here, or an adopted buffer)
  std::size_t body_size_ = 0;              // N of the current frame, once the prefix is in
  std::size_t body_filled_ = 0;
  std::uint64_t frames_ = 0;  // frames decoded, for error messages
  std::deque<Message> ready_;
  std::string error_;
};

// Decodes exactly one frame (prefix included, nothing after it). Throws troupe::Error as FrameDecoder does.
Message DecodeFrame(std::span<const std::byte> frame, std::size_t max_frame_bytes = kDefaultMaxFrameBytes);

}  // namespace troupe::net
