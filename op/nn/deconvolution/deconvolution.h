// Deconvolution (2-D, NCHW; MXNet 1.9's name, parameters and defaults): the parameter struct and the geometry
// the CPU operator (deconvolution.cc) and the GPU one (deconvolution.cu) share. Both run the deconvolution as
// the data gradient of a Convolution (op/nn/convolution) on the same device: the CPU operator on the CPU
// convolution, the GPU one on the cuDNN convolution.
//
// Pure data and functions: thread-safe. Kept free of CAF and Cap'n Proto: nvcc compiles it.
#pragma once

#include <cstdint>
#include <string>

#include "op/nn/convolution/convolution.h"
#include "op/param.h"
#include "tensor/tensor.h"

namespace troupe {

struct DeconvolutionParam : Params<DeconvolutionParam> {
  TShape kernel;
  TShape stride;
  TShape dilate;
  TShape pad;
  TShape adj;
  TShape target_shape;
  int num_filter = 0;
  int num_group = 1;
  std::int64_t workspace = 512;
  bool no_bias = true;
  std::string cudnn_tune = "None";
  bool cudnn_off = false;
  std::string layout = "None";
  static void Declare(ParamSchema<DeconvolutionParam>& s) {
    s.Field("kernel", &DeconvolutionParam::kernel).Describe("Deconvolution kernel size: (h, w).");
    s.Field("stride", &DeconvolutionParam::stride)
        .Default(TShape::Scalar())
        .Describe("The stride: (h, w); 1 by default.");
    s.Field("dilate", &DeconvolutionParam::dilate)
        .Default(TShape::Scalar())
        .Describe("Dilation: (h, w); 1 by default.");
    s.Field("pad", &DeconvolutionParam::pad)
        .Default(TShape::Scalar())
        .Describe("Padding taken off the output: (h, w); 0 by default.");
    s.Field("adj", &DeconvolutionParam::adj)
        .Default(TShape::Scalar())
        .Describe("Extra rows and columns of the output: (h, w).");
    s.Field("target_shape", &DeconvolutionParam::target_shape)
        .Default(TShape::Scalar())
        .Describe("Output shape (h, w); when given, pad and adj are inferred.");
    s.Field("num_filter", &DeconvolutionParam::num_filter).Range(1, 100000).Describe("Number of output channels.");
    s.Field("num_group", &DeconvolutionParam::num_group)
        .Default(1)
        .LowerBound(1)
        .Describe("Number of groups partition.");
    s.Field("workspace", &DeconvolutionParam::workspace)
        .Default(512)
        .LowerBound(0)
        .Describe("Maximum temporary workspace (MB).");
    s.Field("no_bias", &DeconvolutionParam::no_bias).Default(true).Describe("Whether to disable bias parameter.");
    s.Field("cudnn_tune", &DeconvolutionParam::cudnn_tune)
        .Default("None")
        .Choices({"None", "fastest", "limited_workspace", "off"})
        .Describe("cuDNN algorithm choice (no effect on the CPU).");
    s.Field("cudnn_off", &DeconvolutionParam::cudnn_off).Default(false).Describe("Turn off cudnn for this layer.");
    s.Field("layout", &DeconvolutionParam::layout)
        .Default("None")
        .Choices({"None", "NCDHW", "NCHW", "NCW", "NDHWC", "NHWC"})
        .Describe("Layout; only NCHW (the default) is supported.");
  }
};

// pad and adj per spatial dimension for data of spatial size `in` (target_shape applied, as MXNet's InferPad);
// throws troupe::Error when target_shape cannot be reached.
void DeconvolutionPadAdj(const DeconvolutionParam& p, const std::int64_t in[2], std::int64_t pad[2],
                         std::int64_t adj[2]);

// The convolution (from num_filter to `channels_in` channels, weight (channels_in, num_filter / num_group, kh,
// kw), no bias) whose data gradient the deconvolution of data with `channels_in` channels and padding `pad`
// is.
ConvolutionParam DeconvolutionConvParam(const DeconvolutionParam& p, std::int64_t channels_in,
                                        const std::int64_t pad[2]);

}  // namespace troupe
