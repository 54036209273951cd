// Deconvolution (2-D, NCHW; MXNet 1.9's name, parameters and defaults): the parameter struct and the geometry
// the CPU operator (deconvolution.cc) and the GPU one (deconvolution.cu) share. Both run the deconvolution as
// the data gradient of a Convolution (op/nn/convolution) on the same device: the CPU operator on the CPU
// convolution, the GPU one on the cuDNN convolution.
//
// The parameter struct and the functions are thread-safe; an operator (DeconvolutionOpBase) is entered by one
// thread at a time (the engine's rule). Kept free of CAF and Cap'n Proto: nvcc compiles it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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

// The operator both devices share: Forward is the convolution's data gradient, the data gradient is the
// convolution's Forward, the weight gradient is the convolution's weight gradient with the roles of input and
// output exchanged. A device supplies the convolution (MakeConv, cached for the last data shape) and the bias
// (AddBias, BiasGrad); Begin runs first in every call (the GPU makes its device current).
class DeconvolutionOpBase : public Operator {
 public:
  explicit DeconvolutionOpBase(DeconvolutionParam p) : p_(std::move(p)) {}

  void Forward(const OpContext& ctx, const std::vector<TBlob>& in, const std::vector<OpReqType>& req,
               const std::vector<TBlob>& out, const std::vector<TBlob>&) override {
    if (req[0] == kNullOp) return;
    Begin(ctx);
    Conv(in[0].shape);
    // y = conv's data gradient for "output gradient" x; y also stands in for conv's data (only its shape is
    // read: the weight gradient is not asked for).
    conv_->Backward(ctx, {in[0]}, {out[0], in[1]}, {}, {req[0], kNullOp}, {out[0], in[1]}, {});
    if (!p_.no_bias) AddBias(ctx, in[2], out[0]);
  }

  void Backward(const OpContext& ctx, const std::vector<TBlob>& out_grad, const std::vector<TBlob>& in,
                const std::vector<TBlob>&, const std::vector<OpReqType>& req, const std::vector<TBlob>& in_grad,
                const std::vector<TBlob>&) override {
    Begin(ctx);
    Conv(in[0].shape);
    if (req[0] != kNullOp) {
      OpContext fwd = ctx;
      fwd.in_states.clear();  // conv's "data" here is the output gradient: nothing to keep across calls
      conv_->Forward(fwd, {out_grad[0], in[1]}, {req[0]}, {in_grad[0]}, {});
    }
    if (req[1] != kNullOp) {
      conv_->Backward(ctx, {in[0]}, {out_grad[0], in[1]}, {}, {kNullOp, req[1]}, {out_grad[0], in_grad[1]}, {});
    }
    if (!p_.no_bias && req[2] != kNullOp) BiasGrad(ctx, out_grad[0], in_grad[2], req[2]);
  }

 protected:
  virtual void Begin(const OpContext&) {}
  // The convolution whose data gradient this deconvolution is, for data of shape `data` with the padding and
  // adj DeconvolutionPadAdj chose (throws troupe::Error for a case the device cannot run).
  virtual std::unique_ptr<Operator> MakeConv(const TShape& data, const std::int64_t pad[2],
                                             const std::int64_t adj[2]) = 0;
  // out += bias per output channel.
  virtual void AddBias(const OpContext& ctx, const TBlob& bias, const TBlob& out) = 0;
  // The bias gradient (sums of the output gradient per channel) into `gb` by `req`.
  virtual void BiasGrad(const OpContext& ctx, const TBlob& og, const TBlob& gb, OpReqType req) = 0;

  const DeconvolutionParam p_;

 private:
  void Conv(const TShape& data) {
    if (conv_ != nullptr && data == conv_for_) return;
    const std::int64_t size[2] = {data[2], data[3]};
    std::int64_t pad[2], adj[2];
    DeconvolutionPadAdj(p_, size, pad, adj);
    conv_ = MakeConv(data, pad, adj);
    conv_for_ = data;
  }

  std::unique_ptr<Operator> conv_;
  TShape conv_for_;
};

}  // namespace troupe
