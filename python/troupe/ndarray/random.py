"""mx.nd.random: arrays drawn from the device's random generator."""
from .ndarray import empty


def uniform(low=0, high=1, shape=(1,), dtype=None, ctx=None, out=None):
    a = out if out is not None else empty(shape, ctx, dtype)
    a.handle.sample_uniform(float(low), float(high))
    return a


def normal(loc=0, scale=1, shape=(1,), dtype=None, ctx=None, out=None):
    a = out if out is not None else empty(shape, ctx, dtype)
    a.handle.sample_normal(float(loc), float(scale))
    return a
