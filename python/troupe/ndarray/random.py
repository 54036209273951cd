"""mx.nd.random: arrays drawn from the device's random generator."""
import numpy as np

from .ndarray import empty, array


def uniform(low=0, high=1, shape=(1,), dtype=None, ctx=None, out=None):
    a = out if out is not None else empty(shape, ctx, dtype)
    a.handle.sample_uniform(float(low), float(high))
    return a


def normal(loc=0, scale=1, shape=(1,), dtype=None, ctx=None, out=None):
    a = out if out is not None else empty(shape, ctx, dtype)
    a.handle.sample_normal(float(loc), float(scale))
    return a


def randint(low, high, shape=(1,), dtype="int32", ctx=None, out=None):
    a = array(np.random.randint(low, high, size=shape), ctx=ctx, dtype=dtype)
    return a.copyto(out) if out is not None else a


def randn(*shape, **kwargs):
    return normal(0, 1, shape=shape or (1,), **kwargs)


def shuffle(data, **kwargs):
    idx = np.random.permutation(data.shape[0])
    return array(data.asnumpy()[idx], ctx=data.context, dtype=data.dtype)
