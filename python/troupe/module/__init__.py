"""mx.mod: the Module, a symbol trained with fit() (MXNet 1.x's mxnet.module)."""
from .module import BaseModule, Module
