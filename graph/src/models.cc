#include "graph/models.h"

#include <string>

#include "op/param.h"

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

}  // namespace models
}  // namespace troupe
