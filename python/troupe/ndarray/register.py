"""One Python function per registered operator, generated from the registry (mx.nd.<operator>)."""
import keyword
import numbers

from .. import _core
from .ndarray import NDArray, _wrap


def _param_text(v):
    """MXNet's text for a parameter value: tuples "(3, 3)", booleans "True", the rest str()."""
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, (tuple, list)):
        return "(" + ", ".join(_param_text(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, float):
        return repr(v)
    if hasattr(v, "name") and not isinstance(v, (str, numbers.Number)):  # a NumPy dtype
        return v.name
    if isinstance(v, type):  # np.float32
        import numpy as np
        return np.dtype(v).name
    return str(v)


def _make(name, description, arguments, params, has_num_args):
    param_names = {p[0] for p in params}

    def op(*args, out=None, name=None, **kwargs):
        inputs = []
        for a in args:
            if a is None:  # an optional input left out (bias=None with no_bias)
                continue
            if isinstance(a, NDArray):
                inputs.append(a.handle)
            elif isinstance(a, (list, tuple)) and all(isinstance(x, NDArray) for x in a):
                inputs.extend(x.handle for x in a)
            else:
                raise TypeError("%s: positional arguments must be NDArrays, got %s" % (op.__name__, type(a).__name__))
        named, values = {}, []
        for k, v in kwargs.items():
            if isinstance(v, NDArray):
                named[k] = v.handle
            elif v is not None:
                values.append((k, _param_text(v)))
        if has_num_args and "num_args" not in kwargs:
            values.append(("num_args", str(len(inputs) + len(named))))
        outs = out if isinstance(out, (list, tuple)) else ([out] if out is not None else [])
        res = _core.invoke(op.__name__, inputs, named, values, [o.handle for o in outs])
        if out is not None:
            return out
        res = [_wrap(h) for h in res]
        return res[0] if len(res) == 1 else res

    op.__name__ = name
    lines = [description, "", "Parameters", "----------"]
    for a in arguments:
        lines.append("%s : %s\n    %s" % a)
    for p in params:
        kind = p[1] + (", required" if p[3] else ", optional, default=%s" % p[2])
        lines.append("%s : %s\n    %s" % (p[0], kind, p[4]))
    lines.append("out : NDArray, optional\n    The output array.")
    op.__doc__ = "\n".join(lines)
    return op


def _make_operators(namespace):
    """Adds every registered operator (and alias) to `namespace`; names starting with '_' too (MXNet keeps them
    in mx.nd._internal), without replacing what the module defines."""
    for name, description, arguments, params, aliases in _core.operators():
        has_num_args = any(p[0] == "num_args" for p in params)
        fn = _make(name, description, arguments, params, has_num_args)
        for n in [name] + list(aliases):
            if n not in namespace and not keyword.iskeyword(n):
                namespace[n] = fn
    _attach_fluent(namespace, NDArray)


# NDArray's fluent methods (a.sum(axis=1) is nd.sum(a, axis=1)), as MXNet's NDArray has them.
_FLUENT = ["sum", "mean", "max", "min", "prod", "nansum", "nanprod", "argmax", "argmin", "argsort", "sort", "topk",
           "exp", "expm1", "log", "log1p", "log2", "log10", "sqrt", "rsqrt", "cbrt", "square", "reciprocal", "abs",
           "sign", "round", "rint", "floor", "ceil", "trunc", "fix", "sin", "cos", "tan", "arcsin", "arccos", "arctan",
           "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh", "degrees", "radians", "relu", "sigmoid", "softmax",
           "log_softmax", "softmin", "transpose", "flatten", "expand_dims", "squeeze", "tile", "repeat", "clip", "norm",
           "one_hot", "pick", "split", "slice", "slice_axis", "slice_like", "take", "flip", "swapaxes", "pad",
           "broadcast_to", "broadcast_like", "reshape_like", "zeros_like", "ones_like", "diag", "depth_to_space",
           "space_to_depth", "shape_array", "size_array"]


def _attach_fluent(namespace, cls):
    for name in _FLUENT:
        fn = namespace.get(name)
        if fn is None or hasattr(cls, name):
            continue

        def method(self, *args, __fn=fn, **kwargs):
            return __fn(self, *args, **kwargs)
        method.__name__ = name
        method.__doc__ = "The same as nd.%s(self, ...)." % name
        setattr(cls, name, method)
