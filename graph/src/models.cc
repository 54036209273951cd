#include "graph/models.h"

#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "op/param.h"
#include "tensor/tensor.h"

namespace troupe {
namespace models {

Symbol MLP(int num_classes, const std::vector<int>& hidden) {
  Symbol x = Symbol::Create("Flatten", {}, {Symbol::Variable("data")}, "flatten");
  int layer = 1;
  for (int h : hidden) {
    const std::string n = std::to_string(layer++);
    x = Symbol::Create("FullyConnected", {{"num_hidden", std::to_string(h)}}, {x}, "fc" + n);
    x = Symbol::Create("Activation", {{"act_type", "relu"}}, {x}, "relu" + n);
  }
  x = Symbol::Create("FullyConnected", {{"num_hidden", std::to_string(num_classes)}}, {x},
                     "fc" + std::to_string(layer));
  return Symbol::Create("SoftmaxOutput", {}, std::vector<Symbol>{x, Symbol::Variable("softmax_label")}, "softmax");
}

Symbol LeNet(int num_classes, const std::string& act, double dropout) {
  Symbol x = Symbol::Variable("data");
  x = Symbol::Create("Convolution", {{"kernel", "(5, 5)"}, {"num_filter", "20"}}, {x}, "conv1");
  x = Symbol::Create("Activation", {{"act_type", act}}, {x}, act + "1");
  x = Symbol::Create("Pooling", {{"pool_type", "max"}, {"kernel", "(2, 2)"}, {"stride", "(2, 2)"}}, {x}, "pool1");
  x = Symbol::Create("Convolution", {{"kernel", "(5, 5)"}, {"num_filter", "50"}}, {x}, "conv2");
  x = Symbol::Create("Activation", {{"act_type", act}}, {x}, act + "2");
  x = Symbol::Create("Pooling", {{"pool_type", "max"}, {"kernel", "(2, 2)"}, {"stride", "(2, 2)"}}, {x}, "pool2");
  x = Symbol::Create("Flatten", {}, {x}, "flatten");
  x = Symbol::Create("FullyConnected", {{"num_hidden", "500"}}, {x}, "fc1");
  x = Symbol::Create("Activation", {{"act_type", act}}, {x}, act + "3");
  if (dropout > 0) x = Symbol::Create("Dropout", {{"p", param_detail::PrintReal(dropout)}}, {x}, "drop1");
  x = Symbol::Create("FullyConnected", {{"num_hidden", std::to_string(num_classes)}}, {x}, "fc2");
  return Symbol::Create("SoftmaxOutput", {}, std::vector<Symbol>{x, Symbol::Variable("softmax_label")}, "softmax");
}

namespace {

Symbol Conv(const Symbol& x, int filters, int kernel, int stride, int pad, const std::string& name,
            bool bias = false) {
  return Symbol::Create("Convolution",
                        {{"kernel", TShape{kernel, kernel}.ToString()}, {"stride", TShape{stride, stride}.ToString()},
                         {"pad", TShape{pad, pad}.ToString()}, {"num_filter", std::to_string(filters)},
                         {"no_bias", bias ? "False" : "True"}},
                        {x}, name);
}

Symbol BatchNorm(const Symbol& x, const std::string& name) {
  return Symbol::Create("BatchNorm", {{"fix_gamma", "False"}, {"eps", "1e-05"}, {"momentum", "0.9"}}, {x}, name);
}

Symbol Relu(const Symbol& x, const std::string& name) {
  return Symbol::Create("Activation", {{"act_type", "relu"}}, {x}, name);
}

// BasicBlockV1 of Gluon's model zoo.
Symbol BasicBlock(const Symbol& x, int filters, int stride, bool project, const std::string& name) {
  Symbol body = Conv(x, filters, 3, stride, 1, name + "_conv1");
  body = Relu(BatchNorm(body, name + "_bn1"), name + "_relu1");
  body = BatchNorm(Conv(body, filters, 3, 1, 1, name + "_conv2"), name + "_bn2");
  Symbol shortcut = x;
  if (project) shortcut = BatchNorm(Conv(x, filters, 1, stride, 0, name + "_sc_conv"), name + "_sc_bn");
  return Relu(Symbol::Create("elemwise_add", {}, {body, shortcut}, name + "_add"), name + "_relu");
}

// BottleneckV1 of Gluon's model zoo: the stride is on the first 1x1 convolution, and the two 1x1
// convolutions of the body have a bias (Gluon's nn.Conv2D default there), the 3x3 one and the shortcut's not.
Symbol Bottleneck(const Symbol& x, int filters, int stride, bool project, const std::string& name) {
  const int inner = filters / 4;
  Symbol body = Conv(x, inner, 1, stride, 0, name + "_conv1", true);
  body = Relu(BatchNorm(body, name + "_bn1"), name + "_relu1");
  body = Relu(BatchNorm(Conv(body, inner, 3, 1, 1, name + "_conv2"), name + "_bn2"), name + "_relu2");
  body = BatchNorm(Conv(body, filters, 1, 1, 0, name + "_conv3", true), name + "_bn3");
  Symbol shortcut = x;
  if (project) shortcut = BatchNorm(Conv(x, filters, 1, stride, 0, name + "_sc_conv"), name + "_sc_bn");
  return Relu(Symbol::Create("elemwise_add", {}, {body, shortcut}, name + "_add"), name + "_relu");
}

}  // namespace

Symbol ResNet(int depth, int num_classes, bool thumbnail) {
  // Gluon's resnet_spec: blocks per stage; 50 and deeper use bottleneck blocks, whose stages are 4x wider.
  static const std::map<int, std::vector<int>> kUnits = {
      {18, {2, 2, 2, 2}}, {34, {3, 4, 6, 3}}, {50, {3, 4, 6, 3}}, {101, {3, 4, 23, 3}}, {152, {3, 8, 36, 3}}};
  const auto spec = kUnits.find(depth);
  if (spec == kUnits.end()) {
    throw Error("ResNet: depth " + std::to_string(depth) + " is not built here; use 18, 34, 50, 101 or 152");
  }
  const std::vector<int>& units = spec->second;
  const bool bottleneck = depth >= 50;
  const int expansion = bottleneck ? 4 : 1;
  const int widths[] = {64 * expansion, 128 * expansion, 256 * expansion, 512 * expansion};
  Symbol x = Symbol::Variable("data");
  if (thumbnail) {
    x = Conv(x, 64, 3, 1, 1, "conv0");
  } else {
    x = Relu(BatchNorm(Conv(x, 64, 7, 2, 3, "conv0"), "bn0"), "relu0");
    x = Symbol::Create("Pooling", {{"pool_type", "max"}, {"kernel", "(3, 3)"}, {"stride", "(2, 2)"}, {"pad", "(1, 1)"}},
                       {x}, "pool0");
  }
  int in_width = 64;
  for (std::size_t s = 0; s < units.size(); ++s) {
    for (int u = 0; u < units[s]; ++u) {
      const int stride = (u == 0 && s > 0) ? 2 : 1;
      // Gluon projects the shortcut in a stage's first block when the width changes; that is also where the
      // stride is, except in the bottleneck's first stage (64 -> 256 at stride 1).
      const bool project = stride != 1 || in_width != widths[s];
      const std::string name = "stage" + std::to_string(s + 1) + "_unit" + std::to_string(u + 1);
      x = bottleneck ? Bottleneck(x, widths[s], stride, project, name)
                     : BasicBlock(x, widths[s], stride, project, name);
      in_width = widths[s];
    }
  }
  x = Symbol::Create("Pooling", {{"pool_type", "avg"}, {"global_pool", "True"}, {"kernel", "(1, 1)"}}, {x}, "pool1");
  x = Symbol::Create("Flatten", {}, {x}, "flatten");
  x = Symbol::Create("FullyConnected", {{"num_hidden", std::to_string(num_classes)}}, {x}, "fc");
  return Symbol::Create("SoftmaxOutput", {}, std::vector<Symbol>{x, Symbol::Variable("softmax_label")}, "softmax");
}

}  // namespace models
}  // namespace troupe
