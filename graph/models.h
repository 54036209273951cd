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

// ResNet v1 (He et al. 2015) as MXNet's Gluon model zoo builds it (resnet18_v1 ... resnet152_v1, Gluon 1.9.1's
// resnet_spec). Depth 18 and 34: BasicBlocks conv3x3 -> BatchNorm -> relu -> conv3x3 -> BatchNorm, stages of 64,
// 128, 256 and 512 channels with [2, 2, 2, 2] (18) or [3, 4, 6, 3] (34) blocks. Depth 50, 101 and 152: Gluon's
// BottleneckV1 blocks conv1x1 (the block's stride) -> BatchNorm -> relu -> conv3x3 -> BatchNorm -> relu ->
// conv1x1 (4x the channels) -> BatchNorm, stages of 256, 512, 1024 and 2048 channels (the 3x3 convolutions a
// quarter of that) with [3, 4, 6, 3] (50), [3, 4, 23, 3] (101) or [3, 8, 36, 3] (152) blocks; as in Gluon the two
// 1x1 convolutions of the body have a bias, every other convolution has none. Each block adds its input
// (through conv1x1 with the block's stride + BatchNorm where the stride or the width changes), then relu. Then
// global average pooling -> FullyConnected(num_classes) -> SoftmaxOutput. BatchNorm is Gluon's (fix_gamma
// false, eps 1e-5, momentum 0.9).
// thumbnail (Gluon's name for the CIFAR variant, for inputs of about 32x32): the stem is one conv3x3 with
// stride 1; otherwise the ImageNet stem conv7x7 / 2 -> BatchNorm -> relu -> max pool 3x3 / 2. Any input
// channel count and size the strides allow (Fashion-MNIST's 1x28x28 works with thumbnail). Names: stem
// conv0/bn0/relu0/pool0; blocks stage<s>_unit<u>_{conv1,bn1,relu1,conv2,bn2,sc_conv,sc_bn,add,relu}, bottleneck
// blocks also _relu2, _conv3 and _bn3; then pool1, flatten, fc, softmax. The parameters, in ListArguments
// order, are Gluon's in its collect_params order (a block's body, then its shortcut). Throws troupe::Error for
// another depth.
Symbol ResNet(int depth, int num_classes = 10, bool thumbnail = true);

}  // namespace models
}  // namespace troupe
