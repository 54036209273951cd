// Convolution and pooling layers (Gluon's gluon.nn conv_layers), NCW / NCHW / NCDHW layouts: Conv1D/2D/3D,
// Conv2DTranspose, MaxPool / AvgPool / GlobalMaxPool / GlobalAvgPool in 1, 2 and 3 dimensions. Each is a
// HybridBlock (nn/block.h) over the Convolution, Deconvolution and Pooling operators, with Gluon's parameter
// names (weight, bias) and defaults. in_channels 0 is completed by the first forward pass.
//
//   auto conv = std::make_shared<nn::Conv2D>(32, std::vector<int>{3, 3}, std::vector<int>{1, 1},
//                                            std::vector<int>{1, 1}); // 32 filters 3x3, stride 1, pad 1
//   auto pool = std::make_shared<nn::MaxPool2D>();                     // 2x2, stride 2
//
// Thread-safety: as any block.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "nn/block.h"

namespace troupe::nn {

// A convolution over `dims` spatial dimensions (Conv1D/2D/3D below). kernel, strides, padding, dilation: one
// entry per spatial dimension (strides and dilation empty: 1; padding empty: 0). weight (channels,
// in_channels / groups, kernel...), bias (channels). activation: an Activation act_type, or empty.
class Convolution : public HybridBlock {
 public:
  Convolution(int dims, int channels, std::vector<int> kernel, std::vector<int> strides = {},
              std::vector<int> padding = {}, std::vector<int> dilation = {}, int groups = 1,
              const std::string& activation = {}, bool use_bias = true, int in_channels = 0,
              const std::string& weight_init = {}, const std::string& bias_init = "zeros",
              const std::string& prefix = {});
  std::vector<Symbol> HybridForward(const std::vector<Symbol>& inputs) override;
  const std::shared_ptr<Parameter>& weight() const { return weight_; }
  const std::shared_ptr<Parameter>& bias() const { return bias_; }

 private:
  int channels_, groups_;
  std::vector<int> kernel_, strides_, padding_, dilation_;
  std::string activation_;
  std::shared_ptr<Parameter> weight_, bias_;
};

template <int D>
class ConvND : public Convolution {
 public:
  ConvND(int channels, std::vector<int> kernel, std::vector<int> strides = {}, std::vector<int> padding = {},
         std::vector<int> dilation = {}, int groups = 1, const std::string& activation = {}, bool use_bias = true,
         int in_channels = 0, const std::string& weight_init = {}, const std::string& bias_init = "zeros",
         const std::string& prefix = {})
      : Convolution(D, channels, std::move(kernel), std::move(strides), std::move(padding), std::move(dilation), groups,
                    activation, use_bias, in_channels, weight_init, bias_init, prefix) {}
};
using Conv1D = ConvND<1>;
using Conv2D = ConvND<2>;
using Conv3D = ConvND<3>;

// The transposed 2-D convolution (Deconvolution): weight (in_channels, channels / groups, kh, kw).
// output_padding: extra rows / columns on one side of the output (MXNet's adj).
class Conv2DTranspose : public HybridBlock {
 public:
  Conv2DTranspose(int channels, std::vector<int> kernel, std::vector<int> strides = {}, std::vector<int> padding = {},
                  std::vector<int> output_padding = {}, std::vector<int> dilation = {}, int groups = 1,
                  const std::string& activation = {}, bool use_bias = true, int in_channels = 0,
                  const std::string& weight_init = {}, const std::string& bias_init = "zeros",
                  const std::string& prefix = {});
  std::vector<Symbol> HybridForward(const std::vector<Symbol>& inputs) override;

 private:
  int channels_, groups_;
  std::vector<int> kernel_, strides_, padding_, output_padding_, dilation_;
  std::string activation_;
  std::shared_ptr<Parameter> weight_, bias_;
};

// Pooling over `dims` spatial dimensions: pool_type "max" or "avg"; strides empty: pool_size; padding empty:
// 0; ceil_mode: the output size rounds up (MXNet's pooling_convention "full"); global: over the whole
// spatial extent (pool_size ignored). count_include_pad (avg): the padding counts in the average.
class Pooling : public HybridBlock {
 public:
  Pooling(int dims, std::string pool_type, std::vector<int> pool_size, std::vector<int> strides = {},
          std::vector<int> padding = {}, bool ceil_mode = false, bool global = false, bool count_include_pad = true,
          const std::string& prefix = {});
  std::vector<Symbol> HybridForward(const std::vector<Symbol>& inputs) override;

 private:
  std::string pool_type_;
  std::vector<int> pool_size_, strides_, padding_;
  bool ceil_mode_, global_, count_include_pad_;
};

template <int D>
class MaxPoolND : public Pooling {
 public:
  explicit MaxPoolND(std::vector<int> pool_size = std::vector<int>(D, 2), std::vector<int> strides = {},
                     std::vector<int> padding = {}, bool ceil_mode = false, const std::string& prefix = {})
      : Pooling(D, "max", std::move(pool_size), std::move(strides), std::move(padding), ceil_mode, false, true,
                prefix) {}
};
template <int D>
class AvgPoolND : public Pooling {
 public:
  explicit AvgPoolND(std::vector<int> pool_size = std::vector<int>(D, 2), std::vector<int> strides = {},
                     std::vector<int> padding = {}, bool ceil_mode = false, bool count_include_pad = true,
                     const std::string& prefix = {})
      : Pooling(D, "avg", std::move(pool_size), std::move(strides), std::move(padding), ceil_mode, false,
                count_include_pad, prefix) {}
};
template <int D>
class GlobalMaxPoolND : public Pooling {
 public:
  explicit GlobalMaxPoolND(const std::string& prefix = {})
      : Pooling(D, "max", std::vector<int>(D, 1), {}, {}, false, true, true, prefix) {}
};
template <int D>
class GlobalAvgPoolND : public Pooling {
 public:
  explicit GlobalAvgPoolND(const std::string& prefix = {})
      : Pooling(D, "avg", std::vector<int>(D, 1), {}, {}, false, true, true, prefix) {}
};
using MaxPool1D = MaxPoolND<1>;
using MaxPool2D = MaxPoolND<2>;
using MaxPool3D = MaxPoolND<3>;
using AvgPool1D = AvgPoolND<1>;
using AvgPool2D = AvgPoolND<2>;
using AvgPool3D = AvgPoolND<3>;
using GlobalMaxPool1D = GlobalMaxPoolND<1>;
using GlobalMaxPool2D = GlobalMaxPoolND<2>;
using GlobalMaxPool3D = GlobalMaxPoolND<3>;
using GlobalAvgPool1D = GlobalAvgPoolND<1>;
using GlobalAvgPool2D = GlobalAvgPoolND<2>;
using GlobalAvgPool3D = GlobalAvgPoolND<3>;

}  // namespace troupe::nn
