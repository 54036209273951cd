"""One Python function per registered operator that builds a node (mx.sym.<operator>)."""
import keyword
import sys

from .. import _core
from ..ndarray.register import _param_text
from .symbol import Symbol, _wrap, _attrs


def _scoped(name):
    """A node name inside a Gluon block's name_scope gets the block's prefix (dense0_fwd), as in MXNet."""
    block = sys.modules.get("troupe.gluon.block")
    scope = getattr(block._BlockScope._current, "value", None) if block is not None else None
    if name and scope is not None:
        return scope._block.prefix + name
    return name


def _call(op, inputs, params, named=None, name=None, attr=None):
    name = _scoped(name)
    return _wrap(_core.Symbol.create(op, [s.handle for s in inputs], {k: v.handle for k, v in (named or {}).items()},
                                     list(params.items()), name or "", attr or {}))


def _make(op_name, doc):
    def op(*args, name=None, attr=None, **kwargs):
        inputs = []
        for a in args:
            if a is None:
                continue
            if isinstance(a, Symbol):
                inputs.append(a)
            elif isinstance(a, (list, tuple)) and all(isinstance(x, Symbol) for x in a):
                inputs.extend(a)
            else:
                raise TypeError("%s: positional arguments must be Symbols, got %s" % (op_name, type(a).__name__))
        named, params = {}, {}
        for k, v in kwargs.items():
            if isinstance(v, Symbol):
                named[k] = v
            elif v is not None:
                params[k] = _param_text(v)
        return _call(op_name, inputs, params, named, name, attr)

    op.__name__ = op_name
    op.__doc__ = doc
    return op


def _make_operators(namespace):
    from .. import ndarray
    for name, description, arguments, params, aliases in _core.operators():
        fn = _make(name, getattr(ndarray, name).__doc__ if hasattr(ndarray, name) else description)
        for n in [name] + list(aliases):
            if n not in namespace and not keyword.iskeyword(n):
                namespace[n] = fn
