"""troupe: MXNet 1.x's Python API over troupe's engine, operators and autograd.

    import troupe as mx
    a = mx.nd.array([[1, 2], [3, 4]])
    with mx.autograd.record():
        b = (a * a).sum()
    b.backward()

What is here: mx.nd (NDArray, every registered operator, creation, save/load, waitall, nd.random), mx.autograd
(record, pause, backward, grad), contexts and MXNetError. python/README.md lists what is not here yet.
"""
from . import base
from .base import MXNetError
from .context import Context, cpu, gpu, current_context
from . import ndarray
from . import ndarray as nd
from . import autograd
from . import random
from . import symbol
from . import symbol as sym
from .executor import Executor
from . import initializer
from . import initializer as init
from . import optimizer
from . import gluon
from . import metric, lr_scheduler, io, model, callback, kvstore, test_utils
from . import kvstore as kv
from . import module
from . import module as mod
from . import runtime, util

__version__ = "0.3.0"
__all__ = ["MXNetError", "Context", "cpu", "gpu", "current_context", "nd", "ndarray", "autograd", "random", "sym",
           "symbol", "Executor", "init", "initializer", "optimizer", "gluon", "metric",
           "lr_scheduler", "io", "model", "callback", "kvstore", "kv", "mod", "module", "test_utils",
           "runtime", "util"]
