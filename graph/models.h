// Model definitions usable from C++ and from the command line: the networks of the Fashion-MNIST examples and
// ResNet. Each ends in SoftmaxOutput named "softmax" (label "softmax_label") and reads "data" of shape
// (batch, 1, 28, 28) or (batch, 784) (ResNet: (batch, channels, height, width)).
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

// ResNet v1 (He et al. 2015) as MXNet's Gluon model zoo builds it (resnet18_v1 / resnet34_v1): BasicBlocks
// conv3x3 -> BatchNorm -> relu -> conv3x3 -> BatchNorm, plus the input (through conv1x1 + BatchNorm where the
// stride or the width changes), then relu; stages of 64, 128, 256 and 512 channels with [2, 2, 2, 2] (depth
// 18) or [3, 4, 6, 3] (depth 34) blocks; global average pooling -> FullyConnected(num_classes) ->
// SoftmaxOutput. Convolutions have no bias; BatchNorm is Gluon's (fix_gamma false, eps 1e-5, momentum 0.9).
// thumbnail (Gluon's name for the CIFAR variant, for inputs of about 32x32): the stem is one conv3x3 with
// stride 1; otherwise the ImageNet stem conv7x7 / 2 -> BatchNorm -> relu -> max pool 3x3 / 2. Any input
// channel count and size the strides allow (Fashion-MNIST's 1x28x28 works with thumbnail). Names:
// stage<s>_unit<u>_{conv1,bn1,relu1,conv2,bn2,sc_conv,sc_bn,add,relu}, stem conv0/bn0/relu0/pool0, pool1,
// flatten, fc, softmax. Throws troupe::Error for a depth other than 18 or 34.
Symbol ResNet(int depth, int num_classes = 10, bool thumbnail = true);

}  // namespace models
}  // namespace troupe
