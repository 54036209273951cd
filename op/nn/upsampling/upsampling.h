// UpSampling's parameters and the walk over its inputs, shared by the property and CPU operator
// (upsampling.cc) and the GPU operator (upsampling.cu). Pure data and functions: thread-safe. Compiles under
// nvcc (host code).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "op/param.h"
#include "tensor/tensor.h"

namespace troupe {

struct UpSamplingParam : Params<UpSamplingParam> {
  int scale = 1;
  int num_filter = 0;
  std::string sample_type;
  std::string multi_input_mode = "concat";
  int num_args = 1;
  std::int64_t workspace = 512;
  static void Declare(ParamSchema<UpSamplingParam>& s) {
    s.Field("scale", &UpSamplingParam::scale).LowerBound(1).Describe("Up sampling scale.");
    s.Field("num_filter", &UpSamplingParam::num_filter)
        .Default(0)
        .Describe("Input filter; only used by the bilinear sample_type (not supported by troupe).");
    s.Field("sample_type", &UpSamplingParam::sample_type)
        .Choices({"bilinear", "nearest"})
        .Describe("Upsampling method; troupe implements 'nearest'.");
    s.Field("multi_input_mode", &UpSamplingParam::multi_input_mode)
        .Default("concat")
        .Choices({"concat", "sum"})
        .Describe("How to combine several inputs: concatenate the upsampled images along the channels, or add them.");
    s.Field("num_args", &UpSamplingParam::num_args)
        .LowerBound(1)
        .Describe("Number of inputs to be upsampled; all are brought to the first's upsampled size.");
    s.Field("workspace", &UpSamplingParam::workspace)
        .Default(512)
        .LowerBound(0)
        .Describe("Temporary workspace for the bilinear deconvolution in MB (unused).");
  }
};

namespace upsampling {

// Calls f(input i, its scale, its first output channel) for every input; shapes are the arguments'.
template <typename F>
void ForEachInput(const std::vector<TShape>& in, const TShape& out, bool sum, F&& f) {
  std::int64_t channel = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    f(i, out[2] / in[i][2], sum ? 0 : channel);
    channel += in[i][1];
  }
}

}  // namespace upsampling

}  // namespace troupe
