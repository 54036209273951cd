"""mx.random: the random generators' seed."""
from . import _core


def seed(seed_state, ctx="all"):
    """Seeds every device's random generator (ctx 'all'), as mx.random.seed."""
    _core.seed(int(seed_state))


def uniform(low=0, high=1, shape=(1,), dtype=None, ctx=None, out=None, **kwargs):
    from .ndarray import random as _r
    return _r.uniform(low, high, shape, dtype, ctx, out)


def normal(loc=0, scale=1, shape=(1,), dtype=None, ctx=None, out=None, **kwargs):
    from .ndarray import random as _r
    return _r.normal(loc, scale, shape, dtype, ctx, out)


def randint(low, high, shape=(1,), dtype="int32", ctx=None, out=None, **kwargs):
    from .ndarray import random as _r
    return _r.randint(low, high, shape, dtype, ctx, out)
