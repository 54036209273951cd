"""gluon.nn: the common layers (MXNet 1.x's gluon.nn)."""
from .basic_layers import (Sequential, HybridSequential, Dense, Dropout, BatchNorm, Embedding, Flatten, Lambda,
                           HybridLambda, LayerNorm, InstanceNorm)
from .activations import Activation, LeakyReLU, PReLU, ELU, SELU, Swish, GELU
from .conv_layers import (Conv1D, Conv2D, Conv3D, Conv2DTranspose, MaxPool1D, MaxPool2D, MaxPool3D, AvgPool1D,
                          AvgPool2D, AvgPool3D, GlobalMaxPool1D, GlobalMaxPool2D, GlobalMaxPool3D, GlobalAvgPool1D,
                          GlobalAvgPool2D, GlobalAvgPool3D)
