// Convolution and pooling layers (nn/conv_layers.h).
#include "nn/conv_layers.h"

#include "base/error.h"
#include "nn/src/layer_util.h"

namespace troupe::nn {

namespace {

// One entry per spatial dimension: `v`, or `fill` repeated when v is empty.
std::vector<int> PerDim(std::vector<int> v, int dims, int fill, const char* layer, const char* what) {
  if (v.empty()) return std::vector<int>(static_cast<std::size_t>(dims), fill);
  if (static_cast<int>(v.size()) != dims) {
    throw Error(std::string(layer) + ": " + what + " has " + std::to_string(v.size()) + " entries; give " +
                std::to_string(dims) + " (one per spatial dimension)");
  }
  return v;
}

void CheckDims(int dims, const char* layer) {
  if (dims < 1 || dims > 3) throw Error(std::string(layer) + ": 1, 2 or 3 spatial dimensions, got " + std::to_string(dims));
}

Symbol WithActivation(Symbol y, const std::string& activation, const std::string& prefix) {
  if (activation.empty()) return y;
  return Symbol::Create("Activation", {{"act_type", activation}}, {y}, prefix + activation);
}

}  // namespace

Convolution::Convolution(int dims, int channels, std::vector<int> kernel, std::vector<int> strides,
                         std::vector<int> padding, std::vector<int> dilation, int groups, const std::string& activation,
                         bool use_bias, int in_channels, const std::string& weight_init, const std::string& bias_init,
                         const std::string& prefix)
    : HybridBlock(prefix, "conv"), channels_(channels), groups_(groups), activation_(activation) {
  CheckDims(dims, "Convolution");
  RequirePositive(channels, "Convolution", "channels");
  RequirePositive(groups, "Convolution", "groups");
  if (kernel.empty()) throw Error("Convolution: the kernel size is empty");
  kernel_ = PerDim(std::move(kernel), dims, 1, "Convolution", "kernel");
  strides_ = PerDim(std::move(strides), dims, 1, "Convolution", "strides");
  padding_ = PerDim(std::move(padding), dims, 0, "Convolution", "padding");
  dilation_ = PerDim(std::move(dilation), dims, 1, "Convolution", "dilation");
  std::vector<std::int64_t> w{channels, in_channels > 0 ? in_channels / groups : 0};
  for (int k : kernel_) w.push_back(k);
  weight_ = AddParameter("weight", TShape(w), weight_init);
  if (use_bias) bias_ = AddParameter("bias", TShape{channels}, bias_init);
}

std::vector<Symbol> Convolution::HybridForward(const std::vector<Symbol>& x) {
  std::vector<Symbol> in{One(x, "Convolution"), weight_->Var()};
  if (bias_) in.push_back(bias_->Var());
  Symbol y = Symbol::Create("Convolution",
                            {{"kernel", Tuple(kernel_)},
                             {"stride", Tuple(strides_)},
                             {"pad", Tuple(padding_)},
                             {"dilate", Tuple(dilation_)},
                             {"num_filter", std::to_string(channels_)},
                             {"num_group", std::to_string(groups_)},
                             {"no_bias", bias_ ? "false" : "true"}},
                            in, prefix() + "fwd");
  return {WithActivation(y, activation_, prefix())};
}

Conv2DTranspose::Conv2DTranspose(int channels, std::vector<int> kernel, std::vector<int> strides,
                                 std::vector<int> padding, std::vector<int> output_padding, std::vector<int> dilation,
                                 int groups, const std::string& activation, bool use_bias, int in_channels,
                                 const std::string& weight_init, const std::string& bias_init,
                                 const std::string& prefix)
    : HybridBlock(prefix, "conv"), channels_(channels), groups_(groups), activation_(activation) {
  RequirePositive(channels, "Conv2DTranspose", "channels");
  RequirePositive(groups, "Conv2DTranspose", "groups");
  kernel_ = PerDim(std::move(kernel), 2, 1, "Conv2DTranspose", "kernel");
  strides_ = PerDim(std::move(strides), 2, 1, "Conv2DTranspose", "strides");
  padding_ = PerDim(std::move(padding), 2, 0, "Conv2DTranspose", "padding");
  output_padding_ = PerDim(std::move(output_padding), 2, 0, "Conv2DTranspose", "output_padding");
  dilation_ = PerDim(std::move(dilation), 2, 1, "Conv2DTranspose", "dilation");
  weight_ = AddParameter("weight", TShape{in_channels, channels / groups, kernel_[0], kernel_[1]}, weight_init);
  if (use_bias) bias_ = AddParameter("bias", TShape{channels}, bias_init);
}

std::vector<Symbol> Conv2DTranspose::HybridForward(const std::vector<Symbol>& x) {
  std::vector<Symbol> in{One(x, "Conv2DTranspose"), weight_->Var()};
  if (bias_) in.push_back(bias_->Var());
  Symbol y = Symbol::Create("Deconvolution",
                            {{"kernel", Tuple(kernel_)},
                             {"stride", Tuple(strides_)},
                             {"pad", Tuple(padding_)},
                             {"adj", Tuple(output_padding_)},
                             {"dilate", Tuple(dilation_)},
                             {"num_filter", std::to_string(channels_)},
                             {"num_group", std::to_string(groups_)},
                             {"no_bias", bias_ ? "false" : "true"}},
                            in, prefix() + "fwd");
  return {WithActivation(y, activation_, prefix())};
}

Pooling::Pooling(int dims, std::string pool_type, std::vector<int> pool_size, std::vector<int> strides,
                 std::vector<int> padding, bool ceil_mode, bool global, bool count_include_pad,
                 const std::string& prefix)
    : HybridBlock(prefix, "pool"),
      pool_type_(std::move(pool_type)),
      ceil_mode_(ceil_mode),
      global_(global),
      count_include_pad_(count_include_pad) {
  CheckDims(dims, "Pooling");
  if (pool_type_ != "max" && pool_type_ != "avg") {
    throw Error("Pooling: pool_type must be \"max\" or \"avg\", got \"" + pool_type_ + "\"");
  }
  pool_size_ = PerDim(std::move(pool_size), dims, 1, "Pooling", "pool_size");
  strides_ = PerDim(std::move(strides), dims, 0, "Pooling", "strides");
  if (strides_[0] == 0) strides_ = pool_size_;
  padding_ = PerDim(std::move(padding), dims, 0, "Pooling", "padding");
}

std::vector<Symbol> Pooling::HybridForward(const std::vector<Symbol>& x) {
  Kwargs kw{{"kernel", Tuple(pool_size_)},
            {"pool_type", pool_type_},
            {"global_pool", global_ ? "true" : "false"},
            {"stride", Tuple(strides_)},
            {"pad", Tuple(padding_)},
            {"pooling_convention", ceil_mode_ ? "full" : "valid"}};
  if (pool_type_ == "avg") kw.emplace_back("count_include_pad", count_include_pad_ ? "true" : "false");
  return {Symbol::Create("Pooling", kw, {One(x, "Pooling")}, prefix() + "fwd")};
}

}  // namespace troupe::nn
