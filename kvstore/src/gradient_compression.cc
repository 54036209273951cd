// 2-bit gradient compression with error feedback: the CPU kernels of MXNet 1.9.1's quantize_2bit and
// dequantize_2bit (src/kvstore/gradient_compression-inl.h), bit for bit.
//
// Layout (MXNet's): the compressed array is read as bytes in memory order; byte j holds values 4j .. 4j+3,
// value 4j in the two most significant bits (masks 0xc0, 0x30, 0x0c, 0x03). So a float32 word holds 16
// values, its first byte in memory the first four. Codes: 11 = +threshold, 10 = -threshold, 00 = 0; a 01
// (never written) decodes to 0. Bytes past the last value are 0.
#include "kvstore/gradient_compression.h"
#include "kvstore/internal/store_checks.h"

#include <cmath>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"

namespace troupe {
namespace {

struct GradientCompressionParam : Params<GradientCompressionParam> {
  std::string type;
  float threshold = 0.5f;
  static void Declare(ParamSchema<GradientCompressionParam>& s) {
    s.Field("type", &GradientCompressionParam::type).Describe("Compression type; only '2bit' is implemented.");
    s.Field("threshold", &GradientCompressionParam::threshold)
        .Default(0.5f)
        .Describe("Values of (gradient + residual) at or beyond +-threshold are sent as +-threshold (> 0).");
  }
};

// Masks of value (i & 3) in its byte: both bits for +threshold, the high bit alone for -threshold.
constexpr std::uint8_t kPosBits[4] = {0xc0, 0x30, 0x0c, 0x03};
constexpr std::uint8_t kNegBits[4] = {0x80, 0x20, 0x08, 0x02};

// MXNet's quantize_2bit over every byte of the compressed array (`bytes` of them; values past n leave
// their bits 0). The residual update is MXNet's too: residual += grad, then residual -= the sent value.
void Quantize2BitCpu(const float* grad, float* residual, std::uint8_t* out, std::int64_t n, std::int64_t bytes,
                     float threshold) {
  const float neg_threshold = -threshold;
  for (std::int64_t b = 0; b < bytes; ++b) {
    std::uint8_t byte = 0;
    const std::int64_t start = b * 4;
    const std::int64_t end = start + 4 <= n ? start + 4 : n;
    for (std::int64_t i = start; i < end; ++i) {
      residual[i] += grad[i];
      if (residual[i] >= threshold) {
        byte |= kPosBits[i & 3];
        residual[i] -= threshold;
      } else if (residual[i] <= neg_threshold) {
        byte |= kNegBits[i & 3];
        residual[i] -= neg_threshold;
      }
    }
    out[b] = byte;
  }
}


void CheckArray(const char* op, const char* role, const NDArray& a) {
  if (a.is_none()) throw Error(std::string(op) + ": the " + role + " array is none (give an allocated array)");
  if (a.dtype() != DType::kFloat32) {
    throw Error(std::string(op) + ": the " + role + " array has dtype " + DTypeName(a.dtype()) +
                "; 2-bit compression works on float32 only (convert the array to float32 first)");
  }
  if (a.ctx().is_gpu()) {
    // There are no GPU kernels for the 2-bit codes yet: say so rather than run on the wrong device.
    throw Error(std::string(op) + ": the " + role + " array is on " + a.ctx().ToString() +
                "; 2-bit compression is implemented for CPU arrays only (copy the arrays to the CPU)");
  }
}

void CheckSameDevice(const char* op, const char* role_a, const NDArray& a, const char* role_b, const NDArray& b) {
  if (!(a.ctx() == b.ctx())) {
    throw Error(std::string(op) + ": the " + role_a + " array is on " + a.ctx().ToString() + " and the " + role_b +
                " array on " + b.ctx().ToString() + "; put them on one device");
  }
  if (a.engine() != b.engine()) {
    throw Error(std::string(op) + ": the " + role_a + " and " + role_b + " arrays belong to different engines");
  }
}

void CheckDisjoint(const char* op, const char* role_a, const NDArray& a, const char* role_b, const NDArray& b) {
  if (a.SharesChunkWith(b)) {
    throw Error(std::string(op) + ": the " + role_a + " and " + role_b +
                " arrays share memory; give the compressed values an array of their own");
  }
}

std::string SizeText(std::int64_t n) { return std::to_string(n); }

}  // namespace

namespace internal {

// MXNet's dequantize_2bit: value i is in byte i / 4 (memory order), bits by i & 3.
void Dequantize2BitCpu(const std::uint8_t* in, float* out, std::int64_t n, float threshold) {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint8_t masked = in[i >> 2] & kPosBits[i & 3];
    if (masked == kPosBits[i & 3]) {
      out[i] = threshold;
    } else if (masked == kNegBits[i & 3]) {
      out[i] = -threshold;
    } else {
      out[i] = 0.f;
    }
  }
}

}  // namespace internal

using internal::Dequantize2BitCpu;

GradientCompression::GradientCompression(const Kwargs& params) {
  GradientCompressionParam p;
  p.Init(params, "gradient compression");
  if (p.type != "2bit") {
    throw Error("gradient compression: type '" + p.type + "' is not supported; use {\"type\": \"2bit\"}" +
                (p.type == "none" ? " (or turn compression off in the KVStore)" : ""));
  }
  if (!(p.threshold > 0.f) || !std::isfinite(p.threshold)) {
    throw Error(
        "gradient compression: threshold must be a finite number greater than 0 for 2-bit compression, "
        "got " +
        param_detail::PrintFloat(p.threshold));
  }
  threshold_ = p.threshold;
}

std::int64_t GradientCompression::CompressedSize(std::int64_t n) {
  if (n < 0) throw Error("GradientCompression::CompressedSize: negative number of values " + SizeText(n));
  return n / 16 + (n % 16 != 0 ? 1 : 0);
}

void GradientCompression::Quantize(const NDArray& grad, const NDArray& residual, const NDArray& compressed,
                                   int priority) const {
  constexpr const char* kOp = "GradientCompression::Quantize";
  CheckArray(kOp, "gradient", grad);
  CheckArray(kOp, "residual", residual);
  CheckArray(kOp, "compressed", compressed);
  CheckSameDevice(kOp, "gradient", grad, "residual", residual);
  CheckSameDevice(kOp, "gradient", grad, "compressed", compressed);
  if (grad.shape() != residual.shape()) {
    throw Error(std::string(kOp) + ": the residual's shape " + residual.shape().ToString() +
                " differs from the gradient's " + grad.shape().ToString() + " (keep one residual per gradient)");
  }
  const std::int64_t n = grad.Size();
  const std::int64_t words = CompressedSize(n);
  if (compressed.Size() != words) {
    throw Error(std::string(kOp) + ": the compressed array has " + SizeText(compressed.Size()) + " elements; " +
                SizeText(n) + " values need CompressedSize(" + SizeText(n) + ") = " + SizeText(words));
  }
  CheckDisjoint(kOp, "gradient", grad, "compressed", compressed);
  CheckDisjoint(kOp, "residual", residual, "compressed", compressed);
  const TBlob g = grad.data(), r = residual.data(), c = compressed.data();
  const float threshold = threshold_;
  std::vector<VarHandle> reads;
  if (grad.var() != residual.var()) reads.push_back(grad.var());
  grad.engine()->PushSync(
      [g, r, c, n, words, threshold](RunContext) {
        Quantize2BitCpu(static_cast<const float*>(g.dptr), static_cast<float*>(r.dptr),
                        static_cast<std::uint8_t*>(c.dptr), n, words * 4, threshold);
      },
      grad.ctx(), reads, {residual.var(), compressed.var()}, FnProperty::kNormal, priority, "quantize_2bit");
}

void GradientCompression::Dequantize(const NDArray& compressed, const NDArray& out, int priority) const {
  constexpr const char* kOp = "GradientCompression::Dequantize";
  CheckArray(kOp, "compressed", compressed);
  CheckArray(kOp, "output", out);
  CheckSameDevice(kOp, "compressed", compressed, "output", out);
  const std::int64_t n = out.Size();
  const std::int64_t words = CompressedSize(n);
  if (compressed.Size() != words) {
    throw Error(std::string(kOp) + ": the compressed array has " + SizeText(compressed.Size()) +
                " elements; an output of " + SizeText(n) + " values needs CompressedSize(" + SizeText(n) +
                ") = " + SizeText(words));
  }
  CheckDisjoint(kOp, "compressed", compressed, "output", out);
  const TBlob c = compressed.data(), o = out.data();
  const float threshold = threshold_;
  compressed.engine()->PushSync(
      [c, o, n, threshold](RunContext) {
        Dequantize2BitCpu(static_cast<const std::uint8_t*>(c.dptr), static_cast<float*>(o.dptr), n, threshold);
      },
      compressed.ctx(), {compressed.var()}, {out.var()}, FnProperty::kNormal, priority, "dequantize_2bit");
}

}  // namespace troupe
