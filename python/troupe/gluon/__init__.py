"""mx.gluon: blocks written once and run imperatively or hybridized (MXNet 1.x's Gluon)."""
from .parameter import Parameter, ParameterDict, Constant, DeferredInitializationError
from .block import Block, HybridBlock, SymbolBlock
from .trainer import Trainer
from . import nn, loss, data, utils

__all__ = ["Parameter", "ParameterDict", "Constant", "Block", "HybridBlock", "SymbolBlock", "Trainer", "nn", "loss",
           "data", "utils"]
