"""mx.nd: NDArray and one function per registered operator (MXNet 1.x's mxnet.ndarray)."""
from .ndarray import (NDArray, array, empty, zeros, ones, full, arange, waitall, save, load, concatenate,
                      to_dlpack_for_read, to_dlpack_for_write, from_dlpack, _wrap)
from .register import _make_operators
from . import random

_make_operators(globals())

__all__ = ["NDArray", "array", "empty", "zeros", "ones", "full", "arange", "waitall", "save", "load", "random"]
