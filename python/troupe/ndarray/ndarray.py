"""NDArray: an asynchronous array of troupe's engine, with MXNet 1.x's Python methods.

Operations return at once; reading values (asnumpy, asscalar, printing) waits for them and raises the error of
what computed them. Arithmetic between arrays broadcasts (broadcast_add, ...); with a Python number it uses the
scalar operators (_plus_scalar, ...), as MXNet's NDArray does.
"""
import numbers

import numpy as np

from .. import _core
from ..base import MXNetError
from ..context import _native, _from_native, current_context


py_slice = slice  # MXNet's module keeps Python's slice under this name (its own `slice` is the operator)
# MXNet's storage-type ids; troupe has the default (dense) one only.
_STORAGE_TYPE_STR_TO_ID = {"undefined": -1, "default": 0, "row_sparse": 1, "csr": 2}
_STORAGE_TYPE_ID_TO_STR = {v: k for k, v in _STORAGE_TYPE_STR_TO_ID.items()}


def _wrap(handle):
    a = NDArray.__new__(NDArray)
    a.handle = handle
    return a


def _invoke(op, args, params=None, out=None):
    """Calls operator `op` on NDArrays with parameters given as strings; returns one NDArray or a list."""
    handles = [a.handle for a in args]
    outs = _core.invoke(op, handles, {}, list((params or {}).items()), [o.handle for o in (out or [])])
    res = [_wrap(h) for h in outs]
    return res[0] if len(res) == 1 else res


def _scalar(v):
    return repr(float(v)) if isinstance(v, float) else str(v)


class NDArray:
    """An n-dimensional array on a device (MXNet's mx.nd.NDArray)."""

    __slots__ = ("handle", "__weakref__")
    # NumPy defers binary operators with an NDArray on either side to NDArray's.
    __array_priority__ = 1000.0

    def __init__(self, handle):
        self.handle = handle

    # ---- properties
    @property
    def shape(self):
        return tuple(self.handle.shape)

    @property
    def ndim(self):
        return len(self.handle.shape)

    @property
    def size(self):
        return int(self.handle.size)

    @property
    def dtype(self):
        return np.dtype(self.handle.dtype) if self.handle.dtype != "bfloat16" else self.handle.dtype

    @property
    def context(self):
        return _from_native(self.handle.context)

    ctx = context

    @property
    def stype(self):
        return "default"

    @property
    def T(self):
        return _invoke("transpose", [self])

    # ---- values
    def asnumpy(self):
        """A NumPy copy of the values (waits for them)."""
        return self.handle.asnumpy()

    def asscalar(self):
        if self.size != 1:
            raise ValueError("The current array is not a scalar")
        return self.asnumpy().reshape(()).item() if self.ndim else self.asnumpy().item()

    def wait_to_read(self):
        self.handle.wait_to_read()

    def __array__(self, dtype=None, copy=None):
        a = self.asnumpy()
        return a if dtype is None else a.astype(dtype)

    def __repr__(self):
        shape = "x".join(str(d) for d in self.shape)
        return "\n%s\n<NDArray %s @%s>" % (str(self.asnumpy()), shape, self.context)

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d NDArray")
        return self.shape[0]

    def __bool__(self):
        if self.size != 1:
            raise ValueError("The truth value of an NDArray with multiple elements is ambiguous.")
        return bool(self.asscalar())

    def __float__(self):
        return float(self.asscalar())

    def __int__(self):
        return int(self.asscalar())

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    # ---- DLPack: the array's memory without a copy, once its writers (or, for writing, its readers too) have run
    def to_dlpack_for_read(self):
        return self.handle.to_dlpack(False)

    def to_dlpack_for_write(self):
        return self.handle.to_dlpack(True)

    def __dlpack__(self, stream=None, **kwargs):
        return self.handle.to_dlpack(False)

    def __dlpack_device__(self):
        ctx = self.context
        return (2, ctx.device_id) if ctx.device_type == "gpu" else (1, 0)

    # ---- copies and views
    def copy(self):
        return self.copyto(self.context)

    def copyto(self, other):
        """A copy on a context, or into another NDArray (returned)."""
        if isinstance(other, NDArray):
            if other.handle.same_chunk(self.handle) and other.shape == self.shape:
                return other
            self.handle.copy_into(other.handle)
            return other
        return _wrap(self.handle.copyto(_native(other)))

    def as_in_context(self, context):
        return self if self.context == context else self.copyto(context)

    def astype(self, dtype, copy=True):
        name = np.dtype(dtype).name if dtype != "bfloat16" else "bfloat16"
        if not copy and name == self.handle.dtype:
            return self
        return _wrap(self.handle.astype(name))

    def reshape(self, *shape, **kwargs):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        shape = kwargs.get("shape", shape)
        return _wrap(self.handle.reshape([int(d) for d in shape]))

    def tostype(self, stype):
        """The array in storage type `stype`: 'default' only (troupe has no sparse storage)."""
        if stype != "default":
            raise MXNetError("storage type %r: troupe has dense arrays only" % (stype,))
        return self

    def detach(self):
        """The same values outside any autograd graph."""
        return _invoke("BlockGrad", [self])

    # ---- indexing: an integer or a step-1 slice on the first axis is a view (writes go through); anything else
    # is a copy through the slice / take operators.
    def __getitem__(self, key):
        if isinstance(key, numbers.Integral):
            n = self.shape[0]
            if not -n <= key < n:
                raise IndexError("index %d is out of bounds for axis 0 with size %d" % (key, n))
            return _wrap(self.handle.at(key % n))
        if isinstance(key, slice) and key.step in (None, 1):
            begin, end, _ = key.indices(self.shape[0])
            return _wrap(self.handle.slice(begin, max(begin, end)))
        if isinstance(key, tuple) and all(isinstance(k, (slice, numbers.Integral)) for k in key):
            begin, end, step, drop = [], [], [], []
            for axis, k in enumerate(key):
                if isinstance(k, numbers.Integral):
                    k = k % self.shape[axis]
                    begin.append(k), end.append(k + 1), step.append(1), drop.append(axis)
                else:
                    b, e, s = k.indices(self.shape[axis])
                    begin.append(b), end.append(e), step.append(s)
            out = _invoke("slice", [self], {"begin": _tuple(begin), "end": _tuple(end), "step": _tuple(step)})
            if drop:
                out = out.reshape([d for i, d in enumerate(out.shape) if i not in drop])
            return out
        if isinstance(key, (NDArray, np.ndarray, list)):
            idx = key if isinstance(key, NDArray) else array(np.asarray(key), ctx=self.context, dtype="int64")
            return _invoke("take", [self, idx])
        raise IndexError("NDArray does not support index %r" % (key,))

    def __setitem__(self, key, value):
        target = self if key == slice(None) or key is Ellipsis else self[key]
        if isinstance(key, tuple):
            raise NotImplementedError("assignment to a multi-axis index; assign to rows (a[i] or a[i:j]) instead")
        if isinstance(value, numbers.Number):
            target.handle.fill(float(value))
        elif isinstance(value, NDArray):
            if value.shape != target.shape:
                value = _invoke("broadcast_to", [value], {"shape": _tuple(target.shape)})
            value.copyto(target)
        else:
            array(np.broadcast_to(np.asarray(value, dtype=target.dtype), target.shape), ctx=target.context,
                  dtype=target.dtype).copyto(target)

    # ---- autograd
    def attach_grad(self, grad_req="write", stype=None):
        """Gives the array a gradient buffer of zeros; backward passes recorded from now on fill it."""
        self.handle.attach_grad(grad_req)

    @property
    def grad(self):
        g = self.handle.grad
        return None if g is None else _wrap(g)

    def backward(self, out_grad=None, retain_graph=False, train_mode=True):
        from .. import autograd
        autograd.backward([self], None if out_grad is None else [out_grad], retain_graph, train_mode)

    # ---- arithmetic
    def _binary(self, other, op, scalar_op, reverse=False):
        if isinstance(other, NDArray):
            return _invoke(op, [other, self] if reverse else [self, other])
        if isinstance(other, numbers.Number):
            return _invoke(scalar_op, [self], {"scalar": _scalar(other)})
        if isinstance(other, np.ndarray):
            return self._binary(array(other, ctx=self.context, dtype=self.dtype), op, scalar_op, reverse)
        return NotImplemented

    def __add__(self, o): return self._binary(o, "broadcast_add", "_plus_scalar")
    def __radd__(self, o): return self._binary(o, "broadcast_add", "_plus_scalar", True)
    def __sub__(self, o): return self._binary(o, "broadcast_sub", "_minus_scalar")
    def __rsub__(self, o): return self._binary(o, "broadcast_sub", "_rminus_scalar", True)
    def __mul__(self, o): return self._binary(o, "broadcast_mul", "_mul_scalar")
    def __rmul__(self, o): return self._binary(o, "broadcast_mul", "_mul_scalar", True)
    def __truediv__(self, o): return self._binary(o, "broadcast_div", "_div_scalar")
    def __rtruediv__(self, o): return self._binary(o, "broadcast_div", "_rdiv_scalar", True)
    def __mod__(self, o): return self._binary(o, "broadcast_mod", "_mod_scalar")
    def __pow__(self, o): return self._binary(o, "broadcast_power", "_power_scalar")
    def __rpow__(self, o): return self._binary(o, "broadcast_power", "_rpower_scalar", True)
    def __eq__(self, o): return self._binary(o, "broadcast_equal", "_equal_scalar")
    def __ne__(self, o): return self._binary(o, "broadcast_not_equal", "_not_equal_scalar")
    def __gt__(self, o): return self._binary(o, "broadcast_greater", "_greater_scalar")
    def __ge__(self, o): return self._binary(o, "broadcast_greater_equal", "_greater_equal_scalar")
    def __lt__(self, o): return self._binary(o, "broadcast_lesser", "_lesser_scalar")
    def __le__(self, o): return self._binary(o, "broadcast_lesser_equal", "_lesser_equal_scalar")
    __hash__ = object.__hash__

    def __neg__(self):
        return _invoke("negative", [self])

    def __abs__(self):
        return _invoke("abs", [self])

    def _inplace(self, o, op, scalar_op):
        res = self._binary(o, op, scalar_op)
        if res is NotImplemented:
            return res
        res.copyto(self)
        return self

    def __iadd__(self, o): return self._inplace(o, "broadcast_add", "_plus_scalar")
    def __isub__(self, o): return self._inplace(o, "broadcast_sub", "_minus_scalar")
    def __imul__(self, o): return self._inplace(o, "broadcast_mul", "_mul_scalar")
    def __itruediv__(self, o): return self._inplace(o, "broadcast_div", "_div_scalar")


def _tuple(v):
    return "(" + ", ".join("None" if d is None else str(int(d)) for d in v) + ("," if len(v) == 1 else "") + ")"


def _dtype_name(dtype, default="float32"):
    if dtype is None:
        return default
    if isinstance(dtype, str) and dtype == "bfloat16":
        return dtype
    return np.dtype(dtype).name


def array(source_array, ctx=None, dtype=None):
    """A new NDArray holding a copy of `source_array` (an NDArray, a NumPy array or nested lists). dtype: the
    source's for an NDArray, float32 for anything else (a NumPy array of integers too), as in MXNet."""
    if isinstance(source_array, NDArray):
        out = source_array.as_in_context(ctx or source_array.context).copy()
        return out if dtype is None else out.astype(dtype)
    src = np.ascontiguousarray(np.asarray(source_array, dtype=_dtype_name(dtype)))
    return _wrap(_core.from_numpy(src, _native(ctx)))


def empty(shape, ctx=None, dtype=None):
    shape = (shape,) if isinstance(shape, numbers.Integral) else tuple(shape)
    return _wrap(_core.empty([int(d) for d in shape], _native(ctx), _dtype_name(dtype)))


def full(shape, val, ctx=None, dtype=None, out=None):
    a = out if out is not None else empty(shape, ctx, dtype)
    a.handle.fill(float(val))
    return a


def zeros(shape, ctx=None, dtype=None, **kwargs):
    return full(shape, 0, ctx, dtype)


def ones(shape, ctx=None, dtype=None, **kwargs):
    return full(shape, 1, ctx, dtype)


def arange(start, stop=None, step=1.0, repeat=1, ctx=None, dtype=None):
    if stop is None:
        start, stop = 0, start
    values = np.repeat(np.arange(start, stop, step), repeat)
    return array(values, ctx=ctx, dtype=_dtype_name(dtype))


def concatenate(arrays, axis=0, always_copy=True):
    return _invoke("Concat", list(arrays), {"dim": str(axis), "num_args": str(len(arrays))})


def waitall():
    """Waits for every pushed operation; raises the first error since the previous waitall."""
    _core.waitall()


def save(fname, data):
    """Saves an NDArray, a list or a dict of them in MXNet's .params format."""
    if isinstance(data, NDArray):
        data = [data]
    if isinstance(data, dict):
        names, arrays = list(data.keys()), list(data.values())
    else:
        names, arrays = [], list(data)
    if not all(isinstance(a, NDArray) for a in arrays):
        raise TypeError("save takes NDArrays (one, a list or a dict)")
    _core.save(str(fname), [a.handle for a in arrays], names)


def load(fname):
    """An MXNet .params file's arrays: a dict when it holds names, else a list."""
    handles, names = _core.load(str(fname))
    arrays = [_wrap(h) for h in handles]
    return dict(zip(names, arrays)) if names else arrays


def to_dlpack_for_read(data):
    return data.to_dlpack_for_read()


def to_dlpack_for_write(data):
    return data.to_dlpack_for_write()


def from_dlpack(dlpack, ctx=None):
    """A new NDArray from a DLPack capsule or an object with __dlpack__ (NumPy, PyTorch): the values are copied
    (troupe's arrays live in its own memory pool)."""
    return _wrap(_core.from_numpy(dlpack, _native(ctx)))
