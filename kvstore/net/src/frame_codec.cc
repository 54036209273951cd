// Frame codec of the distributed KVStore: the only translation unit that touches the Cap'n Proto types of
// kvstore/net/frames.capnp (see kvstore/net/internal/frame_codec.h for the layout and the checks).
#include "kvstore/net/internal/frame_codec.h"

#include <capnp/message.h>
#include <capnp/orphan.h>
#include <capnp/serialize.h>
#include <kj/exception.h>
#include <kj/io.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <type_traits>

#include "base/error.h"
#include "frames.capnp.h"

namespace troupe::net {
namespace {

static_assert(sizeof(capnp::word) == sizeof(std::uint64_t) && alignof(capnp::word) <= alignof(std::uint64_t),
              "the frame buffer (uint64_t words) is read as capnp::word");
static_assert(static_cast<int>(wire::Role::SCHEDULER) == static_cast<int>(Role::kScheduler) &&
              static_cast<int>(wire::Role::SERVER) == static_cast<int>(Role::kServer) &&
              static_cast<int>(wire::Role::WORKER) == static_cast<int>(Role::kWorker) &&
              static_cast<int>(wire::Role::OBSERVER) == static_cast<int>(Role::kObserver));

constexpr std::size_t kPrefixBytes = 8;

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <class... F>
Overloaded(F...) -> Overloaded<F...>;

const char* OpName(TensorOp op) {
  switch (op) {
    case TensorOp::kInit:
      return "init";
    case TensorOp::kPush:
      return "push";
    case TensorOp::kPull:
      return "pull";
    case TensorOp::kPushPull:
      return "pushPull";
  }
  return "?";
}

// Element size of a dtype code, or a troupe::Error naming `where`.
std::size_t ElementBytes(int dtype, const std::string& where) {
  try {
    return DTypeSize(static_cast<DType>(dtype));
  } catch (const Error&) {
    throw Error(where + ": unknown dtype code " + std::to_string(dtype) + " (not a troupe::DType)");
  }
}

// The byte size `payload.data` must have: product(shape) * element size, or the 2-bit payload size
// (ceil(n / 16) float32 words, kvstore/gradient_compression.h) when compressed. Overflow and negative
// dimensions are errors, so a hostile shape cannot wrap the product into agreement with the data.
std::size_t ExpectedBytes(const TensorPayload& payload, bool compressed, const std::string& where) {
  const std::size_t element = ElementBytes(static_cast<int>(payload.dtype), where);
  std::size_t n = 1;
  for (std::size_t i = 0; i < payload.shape.size(); ++i) {
    const std::int64_t dim = payload.shape[i];
    if (dim < 0) {
      throw Error(where + ": dimension " + std::to_string(i) + " is negative (" + std::to_string(dim) + ")");
    }
    if (__builtin_mul_overflow(n, static_cast<std::size_t>(dim), &n)) {
      throw Error(where + ": the shape's element count overflows");
    }
  }
  if (compressed) {
    if (payload.dtype != DType::kFloat32) {
      throw Error(where + ": a compressed payload must have dtype float32 (the gradient's), got " +
                  DTypeName(payload.dtype));
    }
    return (n / 16 + (n % 16 != 0)) * 4;
  }
  std::size_t bytes = 0;
  if (__builtin_mul_overflow(n, element, &bytes)) throw Error(where + ": the shape's byte size overflows");
  return bytes;
}

void CheckPayload(const TensorPayload& payload, bool compressed, bool expect_data, const std::string& where) {
  const std::size_t expected = ExpectedBytes(payload, compressed, where);
  const std::size_t got = payload.data.size();
  if (!expect_data) {
    if (got != 0) throw Error(where + ": carries " + std::to_string(got) + " data bytes but must carry none");
    return;
  }
  if (got != expected) {
    throw Error(where + ": data has " + std::to_string(got) + " bytes but dtype " + DTypeName(payload.dtype) +
                " and shape of " + std::to_string(payload.shape.size()) + " dims need " + std::to_string(expected) +
                (compressed ? " (2-bit compressed)" : ""));
  }
  if (got > kMaxTensorBytes) {
    throw Error(where + ": " + std::to_string(got) + " data bytes exceed the " + std::to_string(kMaxTensorBytes) +
                "-byte limit of one frame; split the array into parts (part_index / part_count)");
  }
}

void CheckTensorMsg(const TensorMsg& m) {
  const std::string where =
      std::string(OpName(m.op)) + " request " + std::to_string(m.request_id) + " (key " + std::to_string(m.key) + ")";
  if (m.part_count == 0 || m.part_index >= m.part_count) {
    throw Error(where + ": part " + std::to_string(m.part_index) + " of " + std::to_string(m.part_count) +
                " (need part_index < part_count)");
  }
  if (m.compressed) {
    if (m.op != TensorOp::kPush && m.op != TensorOp::kPushPull) {
      throw Error(where + ": only push and pushPull carry compressed data");
    }
    if (!(m.compression_threshold > 0.0f) || !std::isfinite(m.compression_threshold)) {
      throw Error(where + ": compression threshold must be a finite value > 0");
    }
  }
  CheckPayload(m.value, m.compressed, m.op != TensorOp::kPull, where);
}

void CheckRank(std::int32_t rank, const std::string& where) {
  if (rank < -1) throw Error(where + ": rank " + std::to_string(rank) + " (expected -1 or a rank >= 0)");
}

void CheckRole(int role, const std::string& where) {
  if (role < 0 || role > static_cast<int>(Role::kObserver)) {
    throw Error(where + ": unknown role code " + std::to_string(role));
  }
}

void CheckBarrier(const Barrier& b) {
  if (b.group == 0 || b.group > (kSchedulerGroup | kServerGroup | kWorkerGroup)) {
    throw Error("barrier " + std::to_string(b.request_id) + ": group mask " + std::to_string(b.group) +
                " (expected a non-empty combination of 1 scheduler, 2 servers, 4 workers)");
  }
}

// Checks shared by encoder and decoder, so that whatever encodes also decodes.
void CheckMessage(const Message& message) {
  std::visit(Overloaded{
                 [](const Hello& h) {
                   CheckRole(static_cast<int>(h.role), "hello");
                   CheckRank(h.rank, "hello");
                   if (h.protocol_version != kProtocolVersion) {
                     throw Error("hello: protocol version " + std::to_string(h.protocol_version) +
                                 ", this node speaks " + std::to_string(kProtocolVersion) +
                                 "; run the same troupe version on every node");
                   }
                 },
                 [](const TensorMsg& m) { CheckTensorMsg(m); },
                 [](const Barrier& b) { CheckBarrier(b); },
                 [](const Heartbeat& h) { CheckRank(h.sender_rank, "heartbeat"); },
                 [](const Command&) {},
                 [](const Ack& a) {
                   if (a.value) CheckPayload(*a.value, false, true, "ack " + std::to_string(a.request_id));
                 },
                 [](const ErrorMsg& e) {
                   CheckRank(e.dead_node_rank, "error");
                   CheckRole(static_cast<int>(e.dead_node_role), "error");
                 },
                 [](const AuthChallenge& c) {
                   if (c.nonce.size() != kAuthNonceBytes) {
                     throw Error("auth challenge: a nonce of " + std::to_string(c.nonce.size()) + " bytes, not " +
                                 std::to_string(kAuthNonceBytes));
                   }
                 },
                 [](const AuthProof& p) {
                   if (p.mac.size() != kAuthMacBytes) {
                     throw Error("auth proof: a MAC of " + std::to_string(p.mac.size()) + " bytes, not " +
                                 std::to_string(kAuthMacBytes));
                   }
                 },
                 [](const TensorBatch& b) {
                   if (b.entries.empty()) throw Error("tensor batch: no entries");
                   for (const TensorMsg& m : b.entries) CheckTensorMsg(m);
                 },
                 [](const ReplyBatch& b) {
                   if (b.acks.empty() && b.errors.empty()) throw Error("reply batch: no answers");
                   for (const Ack& a : b.acks) {
                     if (a.value) CheckPayload(*a.value, false, true, "ack " + std::to_string(a.request_id));
                   }
                   for (const ErrorMsg& e : b.errors) {
                     CheckRank(e.dead_node_rank, "error");
                     CheckRole(static_cast<int>(e.dead_node_role), "error");
                   }
                 },
             },
             message);
}

// ---- encoding ----

capnp::Text::Reader TextOf(const std::string& s) { return capnp::Text::Reader(s.data(), s.size()); }

// Whether the payload can become its own segment without a copy: capnp reads whole words from the
// referenced memory, so the data must be word aligned and a whole number of words (else capnp would write
// the bytes past its end).
bool CanReference(const Blob& data) {
  return !data.bytes.empty() && reinterpret_cast<std::uintptr_t>(data.bytes.data()) % sizeof(capnp::word) == 0 &&
         data.size() % sizeof(capnp::word) == 0;
}

void SetTensor(wire::Tensor::Builder out, const TensorPayload& payload, capnp::Orphanage orphanage) {
  out.setDtype(static_cast<std::uint8_t>(payload.dtype));
  auto shape = out.initShape(static_cast<unsigned>(payload.shape.size()));
  for (unsigned i = 0; i < payload.shape.size(); ++i) shape.set(i, payload.shape[i]);  // metadata, not data
  const auto& bytes = payload.data.bytes;
  if (bytes.empty()) return;
  if (CanReference(payload.data)) {
    // Referenced, not copied: writeMessage copies it once, straight into the output.
    out.adoptData(orphanage.referenceExternalData(
        capnp::Data::Reader(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size())));
  } else {
    auto data = out.initData(static_cast<unsigned>(bytes.size()));
    std::memcpy(data.begin(), bytes.data(), bytes.size());
  }
}

void SetTensorRequest(wire::TensorRequest::Builder out, const TensorMsg& m, capnp::Orphanage orphanage) {
  out.setRequestId(m.request_id);
  out.setKey(m.key);
  out.setPartIndex(m.part_index);
  out.setPartCount(m.part_count);
  SetTensor(out.initValue(), m.value, orphanage);
  out.setPriority(m.priority);
  out.setCompressed(m.compressed);
  out.setCompressionThreshold(m.compression_threshold);
  out.setRound(m.round);
}

// A tensor request as the union member of its op: in a Frame, or in a TensorBatch's entry.
template <class Builder>
void SetRequestOfOp(Builder out, const TensorMsg& m, capnp::Orphanage orphanage) {
  switch (m.op) {
    case TensorOp::kInit:
      return SetTensorRequest(out.initInit(), m, orphanage);
    case TensorOp::kPush:
      return SetTensorRequest(out.initPush(), m, orphanage);
    case TensorOp::kPull:
      return SetTensorRequest(out.initPull(), m, orphanage);
    case TensorOp::kPushPull:
      return SetTensorRequest(out.initPushPull(), m, orphanage);
  }
}

void SetAck(wire::Ack::Builder out, const Ack& a, capnp::Orphanage orphanage) {
  out.setRequestId(a.request_id);
  if (a.value) {
    SetTensor(out.initValue(), *a.value, orphanage);
  } else {
    out.setDone();
  }
}

void SetError(wire::Error::Builder out, const ErrorMsg& e) {
  out.setRequestId(e.request_id);
  out.setMessage(TextOf(e.message));
  out.setDeadNodeRank(e.dead_node_rank);
  out.setDeadNodeRole(static_cast<wire::Role>(e.dead_node_role));
}

// Words the first segment needs so that the message stays one segment (plus referenced data segments).
std::size_t EstimateWords(const Message& message) {
  auto strings = [](std::size_t bytes) { return bytes / 8 + 2; };
  auto tensor = [](const TensorPayload& p) {
    return 8 + p.shape.size() + (CanReference(p.data) ? 0 : p.data.size() / 8 + 1);
  };
  return 32 + std::visit(Overloaded{
                             [&](const Hello& h) { return strings(h.host.size()); },
                             [&](const TensorMsg& m) { return tensor(m.value); },
                             [](const Barrier&) -> std::size_t { return 0; },
                             [](const Heartbeat&) -> std::size_t { return 0; },
                             [&](const Command& c) {
                               std::size_t n = strings(c.name.size());
                               for (const auto& [k, v] : c.args) n += 2 + strings(k.size()) + strings(v.size());
                               return n;
                             },
                             [&](const Ack& a) -> std::size_t { return a.value ? tensor(*a.value) : 0; },
                             [&](const ErrorMsg& e) { return strings(e.message.size()); },
                             [&](const AuthChallenge& c) { return strings(c.nonce.size()); },
                             [&](const AuthProof& p) { return strings(p.mac.size()); },
                             [&](const TensorBatch& b) {
                               std::size_t n = 0;
                               for (const TensorMsg& m : b.entries) n += 16 + tensor(m.value);
                               return n;
                             },
                             [&](const ReplyBatch& b) {
                               std::size_t n = 0;
                               for (const Ack& a : b.acks) n += 8 + (a.value ? tensor(*a.value) : 0);
                               for (const ErrorMsg& e : b.errors) n += 8 + strings(e.message.size());
                               return n;
                             },
                         },
                         message);
}

// ---- decoding ----

// Text -> std::string by size (a NUL inside the text is kept, not a terminator).
std::string StringOf(capnp::Text::Reader text) { return std::string(text.begin(), text.size()); }

Blob BlobOf(capnp::Data::Reader data, const std::shared_ptr<const void>& owner) {
  if (data.size() == 0) return Blob{};
  return Blob{std::span<const std::byte>(reinterpret_cast<const std::byte*>(data.begin()), data.size()), owner};
}

TensorPayload ReadTensor(wire::Tensor::Reader in, const std::shared_ptr<const void>& owner) {
  TensorPayload out;
  out.dtype = static_cast<DType>(in.getDtype());
  auto shape = in.getShape();
  out.shape.reserve(shape.size());  // bounded: capnp charged the list against the traversal limit
  for (std::int64_t dim : shape) out.shape.push_back(dim);
  out.data = BlobOf(in.getData(), owner);
  return out;
}

TensorMsg ReadTensorRequest(TensorOp op, wire::TensorRequest::Reader in, const std::shared_ptr<const void>& owner) {
  TensorMsg m;
  m.op = op;
  m.request_id = in.getRequestId();
  m.key = in.getKey();
  m.part_index = in.getPartIndex();
  m.part_count = in.getPartCount();
  m.value = ReadTensor(in.getValue(), owner);
  m.priority = in.getPriority();
  m.compressed = in.getCompressed();
  // Meaningful only for compressed data; normalised so that a decoded message re-encodes to itself.
  m.compression_threshold = m.compressed ? in.getCompressionThreshold() : 0.0f;
  m.round = in.getRound();
  return m;
}

// The tensor request of a union (a Frame's, or a TensorBatch entry's), or nullopt when the member is not one.
template <class Struct>
std::optional<TensorMsg> ReadRequestOfOp(typename Struct::Reader in, const std::shared_ptr<const void>& owner) {
  switch (in.which()) {
    case Struct::INIT:
      return ReadTensorRequest(TensorOp::kInit, in.getInit(), owner);
    case Struct::PUSH:
      return ReadTensorRequest(TensorOp::kPush, in.getPush(), owner);
    case Struct::PULL:
      return ReadTensorRequest(TensorOp::kPull, in.getPull(), owner);
    case Struct::PUSH_PULL:
      return ReadTensorRequest(TensorOp::kPushPull, in.getPushPull(), owner);
    default:
      return std::nullopt;
  }
}

Ack ReadAck(wire::Ack::Reader in, const std::shared_ptr<const void>& owner) {
  Ack a;
  a.request_id = in.getRequestId();
  switch (in.which()) {
    case wire::Ack::DONE:
      break;
    case wire::Ack::VALUE:
      a.value = ReadTensor(in.getValue(), owner);
      break;
    default:
      throw Error("ack: unknown result kind " + std::to_string(static_cast<int>(in.which())) + " (a newer protocol?)");
  }
  return a;
}

ErrorMsg ReadError(wire::Error::Reader in) {
  ErrorMsg e;
  e.request_id = in.getRequestId();
  e.message = StringOf(in.getMessage());
  e.dead_node_rank = in.getDeadNodeRank();
  e.dead_node_role = static_cast<Role>(in.getDeadNodeRole());
  return e;
}

// A list's element count checked against the frame before anything is reserved for it: a well-formed
// element takes at least `min_bytes` on the wire, and a list of empty structs claims elements without bytes.
void CheckListCount(std::size_t count, std::size_t min_bytes, std::size_t frame_bytes, const std::string& what) {
  if (count > frame_bytes / min_bytes) {
    throw Error(what + ": " + std::to_string(count) + " elements in a frame of " + std::to_string(frame_bytes) +
                " bytes");
  }
}

Message ReadFrame(wire::Frame::Reader frame, const std::shared_ptr<const void>& owner, std::size_t frame_bytes) {
  if (frame.getVersion() != kProtocolVersion) {
    throw Error("protocol version " + std::to_string(frame.getVersion()) + ", this node speaks " +
                std::to_string(kProtocolVersion) + "; run the same troupe version on every node");
  }
  switch (frame.which()) {
    case wire::Frame::HELLO: {
      auto in = frame.getHello();
      Hello h;
      h.role = static_cast<Role>(in.getRole());
      h.rank = in.getRank();
      h.protocol_version = in.getProtocolVersion();
      h.host = StringOf(in.getHost());
      h.port = in.getPort();
      return h;
    }
    case wire::Frame::INIT:
    case wire::Frame::PUSH:
    case wire::Frame::PULL:
    case wire::Frame::PUSH_PULL:
      return *ReadRequestOfOp<wire::Frame>(frame, owner);
    case wire::Frame::BARRIER: {
      auto in = frame.getBarrier();
      return Barrier{in.getRequestId(), in.getGroup()};
    }
    case wire::Frame::HEARTBEAT: {
      auto in = frame.getHeartbeat();
      return Heartbeat{in.getSenderRank(), in.getSequence()};
    }
    case wire::Frame::COMMAND: {
      auto in = frame.getCommand();
      Command c;
      c.request_id = in.getRequestId();
      c.name = StringOf(in.getName());
      auto args = in.getArgs();
      // A well-formed KeyValue takes two pointer words on the wire; a list of empty structs claims
      // elements without bytes, so a count the frame cannot hold is refused before anything is reserved.
      if (args.size() > frame_bytes / 16) {
        throw Error("command '" + c.name + "': " + std::to_string(args.size()) + " arguments in a frame of " +
                    std::to_string(frame_bytes) + " bytes");
      }
      c.args.reserve(args.size());
      for (auto kv : args) c.args.emplace_back(StringOf(kv.getKey()), StringOf(kv.getValue()));
      return c;
    }
    case wire::Frame::ACK:
      return ReadAck(frame.getAck(), owner);
    case wire::Frame::ERROR:
      return ReadError(frame.getError());
    case wire::Frame::AUTH_CHALLENGE: {
      auto nonce = frame.getAuthChallenge().getNonce();
      return AuthChallenge{std::string(reinterpret_cast<const char*>(nonce.begin()), nonce.size())};
    }
    case wire::Frame::AUTH_PROOF: {
      auto mac = frame.getAuthProof().getMac();
      return AuthProof{std::string(reinterpret_cast<const char*>(mac.begin()), mac.size())};
    }
    case wire::Frame::TENSOR_BATCH: {
      auto entries = frame.getTensorBatch().getEntries();
      // An entry is a union tag and a pointer to a request of several words.
      CheckListCount(entries.size(), 16, frame_bytes, "tensor batch");
      TensorBatch b;
      b.entries.reserve(entries.size());
      for (auto e : entries) {
        auto m = ReadRequestOfOp<wire::BatchEntry>(e, owner);
        if (!m) {
          throw Error("tensor batch: unknown request kind " + std::to_string(static_cast<int>(e.which())) +
                      " (a newer protocol?)");
        }
        b.entries.push_back(std::move(*m));
      }
      return b;
    }
    case wire::Frame::REPLY_BATCH: {
      auto in = frame.getReplyBatch();
      auto acks = in.getAcks();
      auto errors = in.getErrors();
      CheckListCount(acks.size(), 16, frame_bytes, "reply batch acks");
      CheckListCount(errors.size(), 16, frame_bytes, "reply batch errors");
      ReplyBatch b;
      b.acks.reserve(acks.size());
      for (auto a : acks) b.acks.push_back(ReadAck(a, owner));
      b.errors.reserve(errors.size());
      for (auto e : errors) b.errors.push_back(ReadError(e));
      return b;
    }
  }
  throw Error("unknown message kind " + std::to_string(static_cast<int>(frame.which())) + " (a newer protocol?)");
}

}  // namespace

Blob Blob::Copy(std::span<const std::byte> bytes) {
  auto copy = std::make_shared<const std::vector<std::byte>>(bytes.begin(), bytes.end());
  std::span<const std::byte> view(copy->data(), copy->size());
  return Blob{view, std::move(copy)};
}

bool operator==(const Blob& a, const Blob& b) {
  return a.size() == b.size() && (a.size() == 0 || std::memcmp(a.bytes.data(), b.bytes.data(), a.size()) == 0);
}

std::vector<std::byte> EncodeFrame(const Message& message) { return EncodeFrame(message, EncodeOptions{}); }

namespace {

// Fills `builder` with `message` (the tensor bytes referenced, not copied, where they are word-aligned).
void BuildFrame(const Message& message, const EncodeOptions& options, capnp::MessageBuilder& builder) {
  if (options.check) {
    try {
      CheckMessage(message);
    } catch (const Error& e) {
      throw Error(std::string("EncodeFrame: ") + e.what());
    }
  }
  auto frame = builder.initRoot<wire::Frame>();
  frame.setVersion(options.version);
  auto orphanage = builder.getOrphanage();
  std::visit(Overloaded{
                 [&](const Hello& h) {
                   auto out = frame.initHello();
                   out.setRole(static_cast<wire::Role>(h.role));
                   out.setRank(h.rank);
                   out.setProtocolVersion(h.protocol_version);
                   out.setHost(TextOf(h.host));
                   out.setPort(h.port);
                 },
                 [&](const TensorMsg& m) { SetRequestOfOp(frame, m, orphanage); },
                 [&](const Barrier& b) {
                   auto out = frame.initBarrier();
                   out.setRequestId(b.request_id);
                   out.setGroup(b.group);
                 },
                 [&](const Heartbeat& h) {
                   auto out = frame.initHeartbeat();
                   out.setSenderRank(h.sender_rank);
                   out.setSequence(h.sequence);
                 },
                 [&](const Command& c) {
                   auto out = frame.initCommand();
                   out.setRequestId(c.request_id);
                   out.setName(TextOf(c.name));
                   auto args = out.initArgs(static_cast<unsigned>(c.args.size()));
                   for (unsigned i = 0; i < c.args.size(); ++i) {
                     args[i].setKey(TextOf(c.args[i].first));
                     args[i].setValue(TextOf(c.args[i].second));
                   }
                 },
                 [&](const Ack& a) { SetAck(frame.initAck(), a, orphanage); },
                 [&](const ErrorMsg& e) { SetError(frame.initError(), e); },
                 [&](const AuthChallenge& c) {
                   frame.initAuthChallenge().setNonce(
                       capnp::Data::Reader(reinterpret_cast<const kj::byte*>(c.nonce.data()), c.nonce.size()));
                 },
                 [&](const AuthProof& p) {
                   frame.initAuthProof().setMac(
                       capnp::Data::Reader(reinterpret_cast<const kj::byte*>(p.mac.data()), p.mac.size()));
                 },
                 [&](const TensorBatch& b) {
                   auto entries = frame.initTensorBatch().initEntries(static_cast<unsigned>(b.entries.size()));
                   for (unsigned i = 0; i < b.entries.size(); ++i) SetRequestOfOp(entries[i], b.entries[i], orphanage);
                 },
                 [&](const ReplyBatch& b) {
                   auto out = frame.initReplyBatch();
                   auto acks = out.initAcks(static_cast<unsigned>(b.acks.size()));
                   for (unsigned i = 0; i < b.acks.size(); ++i) SetAck(acks[i], b.acks[i], orphanage);
                   auto errors = out.initErrors(static_cast<unsigned>(b.errors.size()));
                   for (unsigned i = 0; i < b.errors.size(); ++i) SetError(errors[i], b.errors[i]);
                 },
             },
             message);
}

unsigned FirstSegmentWords(const Message& message) {
  return static_cast<unsigned>(std::min<std::size_t>(EstimateWords(message), 1u << 28));
}

// Hands the frame's pieces to a callback in one call (kvstore/net/internal/frame_codec.h, EncodeFrameTo):
// capnp::writeMessage writes the segment table and the segments with one gathered write.
class SinkStream final : public kj::OutputStream {
 public:
  SinkStream(const FrameSink& sink, std::span<const std::byte> prefix) : sink_(sink), prefix_(prefix) {}
  void write(const void* buffer, size_t size) override {
    const kj::ArrayPtr<const kj::byte> piece(static_cast<const kj::byte*>(buffer), size);
    write(kj::arrayPtr(&piece, 1));
  }
  void write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override {
    std::vector<std::span<const std::byte>> all;
    all.reserve(pieces.size() + 1);
    all.push_back(prefix_);
    for (const auto& p : pieces) {
      all.emplace_back(reinterpret_cast<const std::byte*>(p.begin()), p.size());
      written_ += p.size();
    }
    ++calls_;
    sink_(FramePieces(all));
  }
  std::size_t written() const { return written_; }
  int calls() const { return calls_; }

 private:
  const FrameSink& sink_;
  std::span<const std::byte> prefix_;
  std::size_t written_ = 0;
  int calls_ = 0;
};

}  // namespace

std::vector<std::byte> EncodeFrame(const Message& message, const EncodeOptions& options) {
  std::vector<std::byte> out;
  out.reserve(kPrefixBytes + 8 * FirstSegmentWords(message));
  EncodeFrameTo(
      message,
      [&out](FramePieces pieces) {
        for (const auto& p : pieces) out.insert(out.end(), p.begin(), p.end());
      },
      options);
  return out;
}

void ValidateMessage(const Message& message) {
  try {
    CheckMessage(message);
  } catch (const Error& e) {
    throw Error(std::string("EncodeFrame: ") + e.what());
  }
}

void EncodeFrameTo(const Message& message, const FrameSink& sink, const EncodeOptions& options) {
  try {
    capnp::MallocMessageBuilder builder(FirstSegmentWords(message), capnp::AllocationStrategy::FIXED_SIZE);
    BuildFrame(message, options, builder);
    const std::size_t body = capnp::computeSerializedSizeInWords(builder) * sizeof(capnp::word);
    std::byte prefix[kPrefixBytes];
    for (std::size_t i = 0; i < kPrefixBytes; ++i) prefix[i] = static_cast<std::byte>((body >> (8 * i)) & 0xff);
    SinkStream stream(sink, std::span<const std::byte>(prefix, kPrefixBytes));
    capnp::writeMessage(stream, builder);
    if (stream.written() != body || stream.calls() != 1) {
      throw Error("EncodeFrame: Cap'n Proto wrote " + std::to_string(stream.written()) + " bytes in " +
                  std::to_string(stream.calls()) + " writes, expected " + std::to_string(body) +
                  " in one (a bug in the codec)");
    }
  } catch (const kj::Exception& e) {
    // Reachable only with options.check off (e.g. a blob over Cap'n Proto's limit).
    throw Error("EncodeFrame: Cap'n Proto refused the message: " + std::string(e.getDescription().cStr()));
  }
}

FrameDecoder::FrameDecoder(std::size_t max_frame_bytes) : max_frame_bytes_(max_frame_bytes) {
  if (max_frame_bytes_ < sizeof(capnp::word)) {
    throw Error("FrameDecoder: max_frame_bytes " + std::to_string(max_frame_bytes_) + " is below one word (8)");
  }
}

void FrameDecoder::Fail(const std::string& why) {
  error_ = "kvstore/net: frame " + std::to_string(frames_) + ": " + why;
  prefix_filled_ = 0;
  body_ = nullptr;
  body_owner_.reset();
  body_size_ = 0;
  body_filled_ = 0;
  throw Error(error_);
}

void FrameDecoder::StartBody() {
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < kPrefixBytes; ++i) n |= static_cast<std::uint64_t>(prefix_[i]) << (8 * i);
  if (n == 0) Fail("length prefix is 0 (a frame holds at least one word)");
  if (n % sizeof(capnp::word) != 0) {
    Fail("length prefix " + std::to_string(n) + " is not a multiple of 8 (Cap'n Proto messages are whole words)");
  }
  if (n > max_frame_bytes_) {
    Fail("length prefix " + std::to_string(n) + " exceeds the frame limit of " + std::to_string(max_frame_bytes_) +
         " bytes (a corrupt stream, or raise the limit)");
  }
  // The body's memory is allocated when its first byte arrives (Feed), or adopted whole (AdoptBody).
  body_size_ = n;
  body_filled_ = 0;
}

void FrameDecoder::AllocateBody() {
  try {
    // Not initialised: pages are touched only as bytes arrive.
    auto words = std::make_shared_for_overwrite<std::uint64_t[]>(body_size_ / sizeof(std::uint64_t));
    body_ = reinterpret_cast<std::byte*>(words.get());
    body_owner_ = std::move(words);
  } catch (const std::bad_alloc&) {
    Fail("cannot allocate " + std::to_string(body_size_) + " bytes for the frame");
  }
}

std::size_t FrameDecoder::awaiting_body() const {
  return prefix_filled_ == kPrefixBytes && body_filled_ == 0 ? body_size_ : 0;
}

void FrameDecoder::AdoptBody(std::shared_ptr<std::vector<char>> body) {
  if (failed()) throw Error(error_ + " (the stream is unusable after that; close the connection)");
  if (body == nullptr || awaiting_body() == 0 || body->size() != body_size_) {
    throw Error("FrameDecoder::AdoptBody: the decoder awaits a body of " + std::to_string(awaiting_body()) +
                " bytes, not " + std::to_string(body == nullptr ? 0 : body->size()) + " (a bug in the caller)");
  }
  if (reinterpret_cast<std::uintptr_t>(body->data()) % sizeof(capnp::word) != 0) {
    // Cap'n Proto reads words: an unaligned buffer is copied (operator new's memory never is).
    Feed(reinterpret_cast<const std::byte*>(body->data()), body->size());
    return;
  }
  body_ = reinterpret_cast<std::byte*>(body->data());
  body_owner_ = std::move(body);
  body_filled_ = body_size_;
  FinishBody();
}

void FrameDecoder::FinishBody() {
  const std::size_t words = body_size_ / sizeof(capnp::word);
  kj::ArrayPtr<const capnp::word> array(reinterpret_cast<const capnp::word*>(body_), words);
  capnp::ReaderOptions options;
  // Every word of a well-formed frame is read about once; twice that (plus slack for the root and small
  // lists) bounds a hostile message's amplification to a small multiple of its size.
  options.traversalLimitInWords = 2 * words + 64;
  options.nestingLimit = 16;  // Frame -> batch -> entries -> entry -> request -> tensor -> list: 7 levels
  std::shared_ptr<const void> owner = body_owner_;
  std::optional<Message> message;
  try {
    capnp::FlatArrayMessageReader reader(array, options);
    if (reader.getEnd() != array.end()) {
      Fail("the Cap'n Proto message ends " + std::to_string((array.end() - reader.getEnd()) * 8) +
           " bytes before the frame does");
    }
    message = ReadFrame(reader.getRoot<wire::Frame>(), owner, body_size_);
    CheckMessage(*message);
  } catch (const kj::Exception& e) {
    Fail("malformed Cap'n Proto message: " + std::string(e.getDescription().cStr()));
  } catch (const Error& e) {
    if (failed()) throw;  // from Fail above
    Fail(e.what());
  }
  ready_.push_back(std::move(*message));
  ++frames_;
  prefix_filled_ = 0;
  body_ = nullptr;
  body_owner_.reset();
  body_size_ = 0;
  body_filled_ = 0;
}

void FrameDecoder::Feed(const std::byte* data, std::size_t size) {
  if (failed()) throw Error(error_ + " (the stream is unusable after that; close the connection)");
  while (size > 0) {
    if (prefix_filled_ < kPrefixBytes) {
      const std::size_t take = std::min(kPrefixBytes - prefix_filled_, size);
      std::memcpy(prefix_ + prefix_filled_, data, take);
      prefix_filled_ += take;
      data += take;
      size -= take;
      if (prefix_filled_ == kPrefixBytes) StartBody();
      continue;
    }
    if (body_ == nullptr) AllocateBody();
    const std::size_t take = std::min(body_size_ - body_filled_, size);
    std::memcpy(body_ + body_filled_, data, take);
    body_filled_ += take;
    data += take;
    size -= take;
    if (body_filled_ == body_size_) FinishBody();
  }
}

std::optional<Message> FrameDecoder::Next() {
  if (ready_.empty()) return std::nullopt;
  Message m = std::move(ready_.front());
  ready_.pop_front();
  return m;
}

void FrameDecoder::Finish() const {
  if (failed()) throw Error(error_);
  if (prefix_filled_ < kPrefixBytes && prefix_filled_ > 0) {
    throw Error("kvstore/net: frame " + std::to_string(frames_) + ": the stream ended inside the length prefix (" +
                std::to_string(prefix_filled_) + " of 8 bytes)");
  }
  if (prefix_filled_ == kPrefixBytes) {
    throw Error("kvstore/net: frame " + std::to_string(frames_) + ": truncated, the stream ended after " +
                std::to_string(body_filled_) + " of " + std::to_string(body_size_) + " bytes");
  }
}

Message DecodeFrame(std::span<const std::byte> frame, std::size_t max_frame_bytes) {
  FrameDecoder decoder(max_frame_bytes);
  if (frame.size() >= kPrefixBytes) {
    std::uint64_t n = 0;
    for (std::size_t i = 0; i < kPrefixBytes; ++i) n |= static_cast<std::uint64_t>(frame[i]) << (8 * i);
    if (n <= max_frame_bytes && frame.size() - kPrefixBytes > n) {
      throw Error("DecodeFrame: " + std::to_string(frame.size() - kPrefixBytes - n) +
                  " bytes follow the frame (pass exactly one frame)");
    }
  }
  decoder.Feed(frame.data(), frame.size());
  decoder.Finish();
  auto message = decoder.Next();
  if (!message) throw Error("DecodeFrame: no frame in " + std::to_string(frame.size()) + " bytes");
  return std::move(*message);
}

}  // namespace troupe::net
