"""mx.util: MXNet's switches for its NumPy-compatible mode, which troupe does not have (always off)."""
import functools


def is_np_array():
    return False


def is_np_shape():
    return False


class _NumpyOff:
    """np_shape() / np_array(): MXNet's scopes for its NumPy mode; entering one that turns it on is an error."""

    def __init__(self, active=True):
        self._active = active

    def __enter__(self):
        if self._active:
            raise NotImplementedError("MXNet's NumPy mode (mx.np) is not available in troupe")
        return self

    def __exit__(self, *exc):
        return False


def np_shape(active=True):
    return _NumpyOff(active)


np_array = np_shape


def set_np_shape(active):
    if active:
        raise NotImplementedError("MXNet's NumPy shape semantics (mx.np) are not available in troupe")
    return False


def use_np(func):
    """MXNet's decorator for mx.np code; troupe runs the function as it is (without mx.np)."""
    return func


use_np_array = use_np_shape = use_np


def makedirs(d):
    import os
    os.makedirs(d, exist_ok=True)


def get_gpu_count():
    return 0
