"""mx.sym: Symbol and one function per registered operator (MXNet 1.x's mxnet.symbol)."""
from .symbol import Symbol, Variable, var, Group, load, load_json, zeros, ones
from .register import _make_operators
from . import contrib

_make_operators(globals())

__all__ = ["Symbol", "Variable", "var", "Group", "load", "load_json"]
