// libFuzzer target for the kvstore/net frame decoder: any byte stream, split at a point the input
// chooses, must either decode or give troupe::Error; never crash, hang or allocate beyond the frame limit.
// Build with clang (the target exists when CMake finds -fsanitize=fuzzer), then e.g.
//   ./frame_decoder_fuzz -max_len=4096 -rss_limit_mb=512 corpus/
// Frames that decode are re-encoded and decoded again: the codec must accept what it produced.
#include <cstddef>
#include <cstdint>
#include <variant>

#include "base/error.h"
#include "kvstore/net/internal/frame_codec.h"

namespace {
// Small enough that the fuzzer's rss limit is never the finding; big enough for every message kind.
constexpr std::size_t kMaxFrameBytes = std::size_t{1} << 20;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  // The first byte picks where the stream is split into two Feed calls (exercises the prefix/body states).
  const std::size_t split = size == 0 ? 0 : static_cast<std::size_t>(data[0]) % (size + 1);
  troupe::net::FrameDecoder decoder(kMaxFrameBytes);
  try {
    decoder.Feed(bytes, split);
    decoder.Feed(bytes + split, size - split);
    decoder.Finish();
  } catch (const troupe::Error&) {
    // Expected for hostile input; frames decoded before the bad one are still checked below.
  }
  while (auto message = decoder.Next()) {
    const auto frame = troupe::net::EncodeFrame(*message);
    const auto again = troupe::net::DecodeFrame(frame, kMaxFrameBytes);
    if (!(again == *message)) __builtin_trap();  // the round trip must be exact
  }
  return 0;
}
