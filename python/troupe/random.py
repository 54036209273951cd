"""mx.random: the random generators' seed."""
from . import _core


def seed(seed_state, ctx="all"):
    """Seeds every device's random generator (ctx 'all'), as mx.random.seed."""
    _core.seed(int(seed_state))
