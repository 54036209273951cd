// 2-bit gradient compression with error feedback, as MXNet defines it (src/kvstore/gradient_compression*):
// each value of (gradient + residual) becomes +threshold, -threshold or 0, coded in 2 bits, 16 values per
// 32-bit word; what was not sent stays in the residual (kept per key and device by the caller) and is added
// to the next gradient. Used by the KVStore's device mode and the dist modes.
//
// Layout, bit for bit MXNet 1.9.1's quantize_2bit / dequantize_2bit: the compressed array is read as bytes
// in memory order; byte j holds values 4j .. 4j+3, value 4j in the two most significant bits. Codes: 11 =
// +threshold, 10 = -threshold, 00 = 0 (a 01 decodes to 0); bits past the last value are 0. A value is sent
// when (gradient + residual) >= threshold or <= -threshold.
//
// Devices: CPU arrays (cpu, cpu_pinned). GPU arrays throw troupe::Error naming the device (there are no GPU
// kernels for the 2-bit codes yet).
//
// Thread-safety: the object is immutable after construction; the work is pushed to the engine (ordered by
// the arrays' variables), so calls from one thread are enough.
#pragma once

#include <cstdint>

#include "tensor/ndarray.h"
#include "op/param.h"

namespace troupe {

class GradientCompression {
 public:
  // params: {"type": "2bit", "threshold": "0.5"} (threshold > 0; MXNet's default 0.5). Throws troupe::Error
  // for another type, a bad threshold or an unknown key (MXNet ignores unknown keys; a typo here is an error).
  explicit GradientCompression(const Kwargs& params);
  float threshold() const { return threshold_; }

  // float32 words that hold n compressed values: ceil(n / 16). Throws troupe::Error for n < 0.
  static std::int64_t CompressedSize(std::int64_t n);

  // Pushes: r = grad + residual; compressed = code(r); residual = r - decode(compressed). grad and residual
  // are float32 arrays of the same shape on one device; compressed is a float32 array of CompressedSize
  // elements on the same device and engine, not sharing memory with grad or residual. Throws troupe::Error
  // (and pushes nothing) for a none array, a dtype other than float32, mismatched shapes, devices or sizes.
  void Quantize(const NDArray& grad, const NDArray& residual, const NDArray& compressed, int priority = 0) const;
  // Pushes: out = decode(compressed) (out's size n gives the number of values; compressed must have
  // CompressedSize(n) elements). Same checks as Quantize.
  void Dequantize(const NDArray& compressed, const NDArray& out, int priority = 0) const;

 private:
  float threshold_ = 0.5f;
};

}  // namespace troupe
