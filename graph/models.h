// Model definitions usable from C++ and from the command line: the networks of the Fashion-MNIST examples.
// Both end in SoftmaxOutput named "softmax" (label "softmax_label") and read "data" of shape
// (batch, 1, 28, 28) or (batch, 784).
#pragma once

#include <string>
#include <vector>

#include "graph/symbol.h"

namespace troupe {
namespace models {

// data -> Flatten -> [FullyConnected(h) -> Activation(relu)] for each h in hidden -> FullyConnected(classes)
// -> SoftmaxOutput. Layer names fc1, relu1, fc2, relu2, ..., the last FullyConnected "fc<n+1>".
Symbol MLP(int num_classes = 10, const std::vector<int>& hidden = {128, 64});

// LeNet-style: conv1 (5x5, 20 filters) -> tanh -> max pool 2x2 -> conv2 (5x5, 50) -> tanh -> max pool 2x2
// -> Flatten -> fc1 (500) -> tanh -> fc2 (num_classes) -> SoftmaxOutput, as MXNet's example/image-
// classification/symbols/lenet.py. act: "tanh" (as there) or "relu". dropout > 0 adds Dropout(p = dropout)
// between fc1's activation and fc2 (named drop1).
Symbol LeNet(int num_classes = 10, const std::string& act = "tanh", double dropout = 0);

}  // namespace models
}  // namespace troupe
