"""mx.nd: NDArray and one function per registered operator (MXNet 1.x's mxnet.ndarray)."""
from .ndarray import (NDArray, array, empty, zeros, ones, full, arange, waitall, save, load, concatenate,
                      to_dlpack_for_read, to_dlpack_for_write, from_dlpack, _wrap)
from .register import _make_operators
from . import random

_make_operators(globals())
# nd.contrib: the operators registered as _contrib_<name>, by <name> (as MXNet's mx.nd.contrib).
import types as _types
contrib = _types.ModuleType(__name__ + ".contrib", "The _contrib_ operators by their short names.")
for _name, _fn in list(globals().items()):
    if _name.startswith("_contrib_"):
        setattr(contrib, _name[len("_contrib_"):], _fn)
# The old names of the samplers (MXNet's nd.uniform, nd.random_uniform, ...).
uniform = random_uniform = random.uniform
normal = random_normal = random.normal

__all__ = ["NDArray", "array", "empty", "zeros", "ones", "full", "arange", "waitall", "save", "load", "random"]
