"""Parameter and ParameterDict: a block's weights, their gradients and how they start."""
from collections import OrderedDict
import re

import numpy as np

from .. import autograd, initializer, ndarray as nd
from ..context import Context, current_context


class DeferredInitializationError(RuntimeError):
    """A parameter's shape is not known yet: the first forward pass completes it."""


class Parameter:
    """A weight of a block (MXNet's gluon.Parameter). shape may have unknown (0) dimensions until the first forward
    pass; initialize() then waits for it (deferred initialization)."""

    def __init__(self, name, grad_req="write", shape=None, dtype=np.float32, lr_mult=1.0, wd_mult=1.0, init=None,
                 allow_deferred_init=False, differentiable=True, stype="default", grad_stype="default"):
        self.name = name
        self._shape = None if shape is None else tuple(int(d) for d in ((shape,) if isinstance(shape, int) else shape))
        self.dtype = dtype
        self.lr_mult, self.wd_mult = lr_mult, wd_mult
        self.init = init
        self.allow_deferred_init = allow_deferred_init
        self._grad_req = grad_req if differentiable else "null"
        self._data = None       # ctx -> NDArray
        self._deferred = None   # (init, ctxs, default_init) while waiting for the shape
        self._var = None

    def __repr__(self):
        return "Parameter %s (shape=%s, dtype=%s)" % (self.name, self.shape, np.dtype(self.dtype).name)

    @property
    def shape(self):
        return self._shape

    @shape.setter
    def shape(self, new_shape):
        new_shape = tuple(int(d) for d in ((new_shape,) if isinstance(new_shape, int) else new_shape))
        if self._shape is None:
            self._shape = new_shape
            return
        if len(self._shape) != len(new_shape) or any(o > 0 and n > 0 and o != n for o, n in zip(self._shape, new_shape)):
            raise AssertionError("Expected shape %s is incompatible with given shape %s for Parameter %s" %
                                 (self._shape, new_shape, self.name))
        self._shape = tuple(n if n > 0 else o for o, n in zip(self._shape, new_shape))

    def _shape_known(self):
        return self._shape is not None and all(d > 0 for d in self._shape)

    @property
    def grad_req(self):
        return self._grad_req

    @grad_req.setter
    def grad_req(self, req):
        if req not in ("write", "add", "null"):
            raise ValueError("grad_req must be one of 'write', 'add', or 'null', but got %r" % req)
        self._grad_req = req
        if self._data is not None:
            for arr in self._data.values():
                arr.attach_grad(req) if req != "null" else None

    def initialize(self, init=None, ctx=None, default_init=initializer.Uniform(), force_reinit=False):
        """Allocates the parameter on ctx (a context or a list) and fills it: its own init, else `init`, else
        default_init. With unknown dimensions, waits for the first forward pass when allowed."""
        if self._data is not None and not force_reinit:
            return
        ctxs = [current_context()] if ctx is None else (list(ctx) if isinstance(ctx, (list, tuple)) else [ctx])
        if not self._shape_known():
            if not self.allow_deferred_init:
                raise ValueError("Cannot initialize Parameter '%s' because it has invalid shape: %s." %
                                 (self.name, self._shape))
            self._deferred = (init, ctxs, default_init)
            return
        self._finish_init(init, ctxs, default_init)

    def _finish_init(self, init, ctxs, default_init):
        data = nd.zeros(self._shape, ctxs[0], self.dtype)
        with autograd.pause():
            if self.init is not None:
                initializer.create(self.init)._init_weight(self.name, data)
            elif init is not None:
                initializer.create(init)(self.name, data)
            else:
                initializer.create(default_init)(self.name, data)
        self._data = OrderedDict()
        for c in ctxs:
            arr = data if c == ctxs[0] else data.copyto(c)
            if self._grad_req != "null":
                arr.attach_grad(self._grad_req)
            self._data[c] = arr
        self._deferred = None

    def _finish_deferred_init(self):
        if self._deferred is not None:
            init, ctxs, default_init = self._deferred
            self._finish_init(init, ctxs, default_init)

    def _check(self, ctx):
        if self._data is None:
            if self._deferred is not None:
                raise DeferredInitializationError(
                    "Parameter '%s' has not been initialized yet because initialization was deferred. Actual "
                    "initialization happens during the first forward pass." % self.name)
            raise RuntimeError("Parameter '%s' has not been initialized. Note that you should initialize "
                               "parameters and create Trainer with Block.collect_params() instead of Block.params "
                               "because the later does not include Parameters of nested child Blocks" % self.name)
        if ctx is None:
            return next(iter(self._data))
        ctx = Context(ctx)
        if ctx not in self._data:
            raise RuntimeError("Parameter '%s' was not initialized on context %s. It was only initialized on %s." %
                               (self.name, ctx, list(self._data)))
        return ctx

    def data(self, ctx=None):
        return self._data[self._check(ctx)]

    def list_data(self):
        self._check(None)
        return list(self._data.values())

    def grad(self, ctx=None):
        g = self.data(ctx).grad
        if g is None:
            raise RuntimeError("Cannot get gradient array for Parameter '%s' because grad_req='null'" % self.name)
        return g

    def list_grad(self):
        return [self.grad(c) for c in self.list_ctx()]

    def list_ctx(self):
        if self._data is None:
            return list(self._deferred[1]) if self._deferred else []
        return list(self._data)

    def set_data(self, data):
        self.shape = data.shape
        if self._data is None:
            if self._deferred is None:
                raise RuntimeError("Parameter '%s' has not been initialized" % self.name)
            self._finish_deferred_init()
        for arr in self._data.values():
            data.copyto(arr) if isinstance(data, nd.NDArray) else arr.__setitem__(slice(None), data)

    def zero_grad(self):
        if self._data is None or self._grad_req == "null":
            return
        for arr in self._data.values():
            arr.grad[:] = 0

    def reset_ctx(self, ctx):
        ctxs = list(ctx) if isinstance(ctx, (list, tuple)) else [ctx]
        data = self.data()
        self._data = OrderedDict()
        for c in ctxs:
            arr = data.copyto(c)
            if self._grad_req != "null":
                arr.attach_grad(self._grad_req)
            self._data[c] = arr

    def var(self):
        """The parameter as a variable of a symbol (its name, shape, multipliers)."""
        if self._var is None:
            from .. import symbol
            self._var = symbol.var(self.name, shape=self._shape, dtype=self.dtype, lr_mult=self.lr_mult,
                                   wd_mult=self.wd_mult)
        return self._var

    def cast(self, dtype):
        self.dtype = dtype
        if self._data is not None:
            for c in list(self._data):
                arr = self._data[c].astype(dtype)
                if self._grad_req != "null":
                    arr.attach_grad(self._grad_req)
                self._data[c] = arr


class Constant(Parameter):
    """A parameter that keeps its value (no gradient)."""

    def __init__(self, name, value):
        value = value if isinstance(value, nd.NDArray) else nd.array(value)
        super().__init__(name, grad_req="null", shape=value.shape, dtype=value.dtype, init=initializer.Zero())
        self.value = value

    def _finish_init(self, init, ctxs, default_init):
        self._data = OrderedDict((c, self.value.copyto(c)) for c in ctxs)
        self._deferred = None


class ParameterDict:
    """Parameters by full name, with a common prefix (MXNet's gluon.ParameterDict)."""

    def __init__(self, prefix="", shared=None):
        self._prefix = prefix
        self._params = OrderedDict()
        self._shared = shared

    @property
    def prefix(self):
        return self._prefix

    def __repr__(self):
        return "%s(\n%s\n)" % (self._prefix or "ParameterDict", "\n".join("  " + repr(p) for p in self.values()))

    def __getitem__(self, key):
        return self._params[key]

    def __iter__(self):
        return iter(self._params)

    def __len__(self):
        return len(self._params)

    def __contains__(self, key):
        return key in self._params

    def keys(self):
        return self._params.keys()

    def values(self):
        return self._params.values()

    def items(self):
        return self._params.items()

    def _get_impl(self, name):
        if name in self._params:
            return self._params[name]
        if self._shared is not None and name in self._shared._params:
            self._params[name] = self._shared._params[name]
            return self._params[name]
        return None

    def get(self, name, **kwargs):
        """The parameter prefix + name, created with kwargs when new (an existing one must agree with them)."""
        name = self._prefix + name
        param = self._get_impl(name)
        if param is None:
            param = Parameter(name, **kwargs)
            self._params[name] = param
        else:
            for k, v in kwargs.items():
                if k == "shape" and v is not None:
                    param.shape = v
                elif k == "init" and v is not None and param.init is None:
                    param.init = v
        return param

    def get_constant(self, name, value=None):
        name = self._prefix + name
        param = self._get_impl(name)
        if param is None:
            if value is None:
                raise KeyError("No constant named '%s'. Please specify value if you want to create a new constant."
                               % name)
            param = Constant(name, value)
            self._params[name] = param
        return param

    def update(self, other):
        for k, v in other.items():
            if k in self._params and self._params[k] is not v:
                raise ValueError("Cannot update self with other because they have different Parameters with the "
                                 "same name '%s'" % k)
            self._params[k] = v

    def initialize(self, init=initializer.Uniform(), ctx=None, verbose=False, force_reinit=False):
        for p in self.values():
            p.initialize(None, ctx, init, force_reinit=force_reinit)

    def zero_grad(self):
        for p in self.values():
            p.zero_grad()

    def reset_ctx(self, ctx):
        for p in self.values():
            p.reset_ctx(ctx)

    def setattr(self, name, value):
        for p in self.values():
            setattr(p, name, value)

    def list_ctx(self):
        ctxs = []
        for p in self.values():
            ctxs.extend(c for c in p.list_ctx() if c not in ctxs)
        return ctxs

    def save(self, filename, strip_prefix=""):
        arrays = {}
        for p in self.values():
            name = p.name[len(strip_prefix):] if strip_prefix and p.name.startswith(strip_prefix) else p.name
            arrays[name] = p.data().copyto(Context("cpu", 0))
        nd.save(filename, arrays)

    def load(self, filename, ctx=None, allow_missing=False, ignore_extra=False, restore_prefix="", cast_dtype=False,
             dtype_source="current"):
        loaded = nd.load(filename)
        loaded = {restore_prefix + k.split(":", 1)[-1]: v for k, v in loaded.items()}
        for name, p in self.items():
            if name not in loaded:
                if not allow_missing:
                    raise AssertionError("Parameter '%s' is missing in file '%s'" % (name, filename))
                continue
            if p._data is None:
                p.shape = loaded[name].shape
                p.initialize(ctx=ctx)
                if p._deferred:
                    p._finish_deferred_init()
            p.set_data(loaded[name])
        extra = set(loaded) - set(self.keys())
        if extra and not ignore_extra:
            raise AssertionError("Parameter '%s' loaded from file '%s' is not present in ParameterDict" %
                                 (sorted(extra)[0], filename))

