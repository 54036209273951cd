"""Symbol: a graph described once (MXNet's mx.sym.Symbol), with binding into executors."""
import numbers

import numpy as np

from .. import _core
from ..context import _native, current_context


def _wrap(handle):
    s = Symbol.__new__(Symbol)
    s.handle = handle
    return s


def _attrs(attr=None, shape=None, dtype=None, lr_mult=None, wd_mult=None, init=None, **kwargs):
    a = dict(attr or {})
    if shape is not None:
        a["__shape__"] = "(" + ", ".join(str(int(d)) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    if dtype is not None:
        a["__dtype__"] = str(_dtype_flag(dtype))
    if lr_mult is not None:
        a["__lr_mult__"] = str(lr_mult)
    if wd_mult is not None:
        a["__wd_mult__"] = str(wd_mult)
    if init is not None:
        a["__init__"] = init if isinstance(init, str) else init.dumps()
    for k, v in kwargs.items():
        a["__%s__" % k] = str(v)
    return a


# MXNet's type flags (mshadow's): what "__dtype__" holds.
_FLAGS = {"float32": 0, "float64": 1, "float16": 2, "uint8": 3, "int32": 4, "int8": 5, "int64": 6, "bool": 7,
          "bfloat16": 12}
_NAMES = {v: k for k, v in _FLAGS.items()}


def _dtype_flag(dtype):
    name = dtype if dtype == "bfloat16" else np.dtype(dtype).name
    return _FLAGS[name]


def _shape(s):
    return None if s is None else tuple(s)


class Symbol:
    """A symbolic graph: a list of outputs of nodes (MXNet's mx.sym.Symbol)."""

    __slots__ = ("handle", "__weakref__")

    # ---- structure
    @property
    def name(self):
        return self.handle.name()

    def __len__(self):
        return self.handle.num_outputs()

    def __getitem__(self, index):
        if isinstance(index, str):
            names = self.list_outputs()
            if index not in names:
                raise ValueError("no output named %r (outputs: %s)" % (index, ", ".join(names)))
            index = names.index(index)
        if not 0 <= index < len(self):
            raise IndexError("output %d of %d" % (index, len(self)))
        return _wrap(self.handle.output(index))

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def list_arguments(self):
        return self.handle.list_arguments()

    def list_outputs(self):
        return self.handle.list_outputs()

    def list_auxiliary_states(self):
        return self.handle.list_auxiliary_states()

    def list_inputs(self):
        return self.list_arguments() + self.list_auxiliary_states()

    def get_internals(self):
        return _wrap(self.handle.get_internals())

    def attr(self, key):
        return self.handle.attr(key)

    def list_attr(self):
        return dict(self.handle.list_attr().get(self.name, {}))

    def attr_dict(self):
        return {k: dict(v) for k, v in self.handle.list_attr().items()}

    def _set_attr(self, **kwargs):
        for k, v in kwargs.items():
            self.handle.set_attr(k, str(v))

    def __call__(self, *args, **kwargs):
        """Composition: variables replaced by symbols, by name (net(data=x))."""
        if args:
            names = self.list_arguments()
            kwargs.update(zip(names, args))
        return _wrap(self.handle.substitute({k: v.handle for k, v in kwargs.items()}))

    def __repr__(self):
        return "<Symbol %s>" % (self.name if len(self) == 1 else "group [%s]" % ", ".join(self.list_outputs()))

    # ---- inference
    def infer_shape(self, *args, **kwargs):
        """(arg_shapes, out_shapes, aux_shapes) from the shapes of some arguments; (None, None, None) when some stay
        unknown, as MXNet's."""
        res = self.infer_shape_partial(*args, **kwargs)
        if any(s is None or 0 in s for part in res for s in part):
            return None, None, None
        return res

    def infer_shape_partial(self, *args, **kwargs):
        if args:
            kwargs.update(zip(self.list_arguments(), args))
        known = {k: [int(d) for d in v] for k, v in kwargs.items() if v is not None}
        _, a, o, x = self.handle.infer_shape(known)
        return [_shape(s) for s in a], [_shape(s) for s in o], [_shape(s) for s in x]

    def infer_type(self, *args, **kwargs):
        if args:
            kwargs.update(zip(self.list_arguments(), args))
        known = {k: _dtype_flag(v) for k, v in kwargs.items() if v is not None}
        complete, a, o, x = self.handle.infer_type(known)
        if not complete:
            return None, None, None
        to = lambda flags: [np.dtype(_NAMES[f]) if _NAMES[f] != "bfloat16" else "bfloat16" for f in flags]
        return to(a), to(o), to(x)

    # ---- files
    def tojson(self):
        return self.handle.to_json()

    def save(self, fname, remove_amp_cast=True):
        self.handle.save(str(fname))

    # ---- arithmetic (element-wise between symbols, scalar forms with numbers), as MXNet's Symbol
    def _binary(self, other, op, scalar_op, reverse=False):
        from . import register
        if isinstance(other, Symbol):
            return register._call(op, [other, self] if reverse else [self, other], {})
        if isinstance(other, numbers.Number):
            return register._call(scalar_op, [self], {"scalar": repr(float(other))})
        return NotImplemented

    def __add__(self, o): return self._binary(o, "elemwise_add", "_plus_scalar")
    def __radd__(self, o): return self._binary(o, "elemwise_add", "_plus_scalar", True)
    def __sub__(self, o): return self._binary(o, "elemwise_sub", "_minus_scalar")
    def __rsub__(self, o): return self._binary(o, "elemwise_sub", "_rminus_scalar", True)
    def __mul__(self, o): return self._binary(o, "elemwise_mul", "_mul_scalar")
    def __rmul__(self, o): return self._binary(o, "elemwise_mul", "_mul_scalar", True)
    def __truediv__(self, o): return self._binary(o, "elemwise_div", "_div_scalar")
    def __rtruediv__(self, o): return self._binary(o, "elemwise_div", "_rdiv_scalar", True)
    def __pow__(self, o): return self._binary(o, "_power", "_power_scalar")
    def __gt__(self, o): return self._binary(o, "_greater", "_greater_scalar")
    def __ge__(self, o): return self._binary(o, "_greater_equal", "_greater_equal_scalar")
    def __lt__(self, o): return self._binary(o, "_lesser", "_lesser_scalar")
    def __le__(self, o): return self._binary(o, "_lesser_equal", "_lesser_equal_scalar")
    __hash__ = object.__hash__

    def __neg__(self):
        return self * -1.0

    # ---- binding
    def simple_bind(self, ctx=None, grad_req="write", type_dict=None, group2ctx=None, shared_arg_names=None,
                    shared_exec=None, shared_buffer=None, **kwargs):
        """An executor with every argument, gradient and auxiliary state allocated (zeros) from the shapes of some
        arguments (the others inferred)."""
        from ..executor import Executor
        from .. import ndarray as nd
        arg_shapes, _, aux_shapes = self.infer_shape(**kwargs)
        if arg_shapes is None:
            missing = [n for n, s in zip(self.list_arguments(), self.infer_shape_partial(**kwargs)[0])
                       if s is None or 0 in s]
            raise ValueError("simple_bind: cannot infer the shapes of %s; give more shapes" % ", ".join(missing))
        type_dict = dict(type_dict or {})
        arg_types, _, aux_types = self.infer_type(**type_dict)
        names = self.list_arguments()
        if arg_types is None:
            arg_types = [type_dict.get(n, np.float32) for n in names]
            aux_types = [np.float32] * len(aux_shapes)
        args = [nd.zeros(s, ctx, t) for s, t in zip(arg_shapes, arg_types)]
        reqs = _reqs(grad_req, names)
        grads = [nd.zeros(s, ctx, t) if r != "null" else None for s, t, r in zip(arg_shapes, arg_types, reqs)]
        aux = [nd.zeros(s, ctx, t) for s, t in zip(aux_shapes, aux_types)]
        return Executor(self, ctx, args, grads, reqs, aux)

    def bind(self, ctx, args, args_grad=None, grad_req="write", aux_states=None, group2ctx=None, shared_exec=None):
        """An executor on given arrays (lists in list_arguments order, or dicts by name)."""
        from ..executor import Executor
        names = self.list_arguments()
        args = _by_name(args, names, "args")
        reqs = _reqs(grad_req, names)
        if args_grad is None:
            grads, reqs = [None] * len(names), ["null"] * len(names)
        else:
            grads = _by_name(args_grad, names, "args_grad", allow_missing=True)
            reqs = [r if g is not None else "null" for r, g in zip(reqs, grads)]
        aux = _by_name(aux_states or [], self.list_auxiliary_states(), "aux_states")
        return Executor(self, ctx, args, grads, reqs, aux)


def _reqs(grad_req, names):
    if isinstance(grad_req, str):
        return [grad_req] * len(names)
    if isinstance(grad_req, dict):
        return [grad_req.get(n, "null") for n in names]
    return list(grad_req)


def _by_name(arrays, names, what, allow_missing=False):
    if isinstance(arrays, dict):
        missing = [n for n in names if n not in arrays]
        if missing and not allow_missing:
            raise ValueError("%s: missing %s" % (what, ", ".join(missing)))
        return [arrays.get(n) for n in names]
    arrays = list(arrays)
    if len(arrays) != len(names):
        raise ValueError("%s: %d arrays for %d names (%s)" % (what, len(arrays), len(names), ", ".join(names)))
    return arrays


def Variable(name, attr=None, shape=None, lr_mult=None, wd_mult=None, dtype=None, init=None, stype=None, **kwargs):
    """A named input of a graph."""
    return _wrap(_core.Symbol.variable(name, _attrs(attr, shape, dtype, lr_mult, wd_mult, init, **kwargs)))


var = Variable


def Group(symbols):
    return _wrap(_core.Symbol.group([s.handle for s in symbols]))


def load(fname):
    return _wrap(_core.Symbol.load(str(fname)))


def load_json(json_str):
    return _wrap(_core.Symbol.from_json(json_str))


def zeros(shape, dtype=None, **kwargs):
    from . import register
    return register._call("_zeros", [], {"shape": str(tuple(shape)), "dtype": np.dtype(dtype or np.float32).name})


def ones(shape, dtype=None, **kwargs):
    from . import register
    return register._call("_ones", [], {"shape": str(tuple(shape)), "dtype": np.dtype(dtype or np.float32).name})
