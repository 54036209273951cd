"""The native core, MXNet's error types and the small helpers MXNet's modules share (mxnet.base)."""
import numpy as _np

from . import _core

# troupe::Error raised by the native core, as MXNet's MXNetError (a RuntimeError).
MXNetError = _core.TroupeError

integer_types = (int, _np.int32, _np.int64)
numeric_types = (float, int, _np.generic)
string_types = (str,)


def py_str(x):
    return x.decode("utf-8") if isinstance(x, bytes) else x


class _NullType:
    """A placeholder for "not given" (MXNet's _Null)."""

    def __repr__(self):
        return "_Null"


_Null = _NullType()


class NotImplementedForSymbol(MXNetError):
    """An NDArray operation that has no Symbol counterpart."""

    def __init__(self, function, alias, *args):
        super().__init__("Function %s (namely operator %s) is not implemented for Symbol and only available in "
                         "NDArray." % (getattr(function, "__name__", function), alias))


__all__ = ["MXNetError", "NotImplementedForSymbol", "py_str", "string_types", "numeric_types", "integer_types"]
