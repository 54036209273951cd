"""Block, HybridBlock and SymbolBlock: MXNet 1.x's Gluon blocks over troupe's NDArrays, Symbols and CachedOp."""
from collections import OrderedDict
import re
import threading

from .. import ndarray as nd, symbol, _core
from ..context import Context, current_context
from .parameter import Parameter, ParameterDict, DeferredInitializationError

_global_counters = {}
_global_lock = threading.Lock()


class _BlockScope:
    """Names blocks and their parameters as Gluon does: dense0_, and inside a parent's name_scope parent_dense0_."""

    _current = threading.local()

    def __init__(self, block):
        self._block = block
        self._counter = {}
        self._old = None

    @staticmethod
    def create(prefix, params, hint):
        current = getattr(_BlockScope._current, "value", None)
        if current is None:
            if prefix is None:
                with _global_lock:
                    count = _global_counters.get(hint, 0)
                    _global_counters[hint] = count + 1
                prefix = "%s%d_" % (hint, count)
            params = ParameterDict(prefix) if params is None else ParameterDict(params.prefix, params)
            return prefix, params
        if prefix is None:
            count = current._counter.get(hint, 0)
            current._counter[hint] = count + 1
            prefix = "%s%d_" % (hint, count)
        if params is None:
            parent = current._block.params
            params = ParameterDict(parent.prefix + prefix, parent._shared)
        else:
            params = ParameterDict(params.prefix, params)
        return current._block.prefix + prefix, params

    def __enter__(self):
        if self._block._empty_prefix:
            return self
        self._old = getattr(_BlockScope._current, "value", None)
        _BlockScope._current.value = self
        return self

    def __exit__(self, *exc):
        if self._block._empty_prefix:
            return
        _BlockScope._current.value = self._old


def _flatten(args):
    """Nested lists/tuples of arrays or symbols -> a flat list and the structure to rebuild them."""
    if isinstance(args, (nd.NDArray, symbol.Symbol)) or args is None:
        return [args], 0
    flat, fmt = [], []
    for a in args:
        f, s = _flatten(a)
        flat.extend(f)
        fmt.append(s)
    return flat, fmt


def _regroup(flat, fmt):
    if isinstance(fmt, int):
        return flat[0], flat[1:]
    out = []
    for f in fmt:
        r, flat = _regroup(flat, f)
        out.append(r)
    return out, flat


class Block:
    """A piece of a network: children blocks and parameters; forward() says what it computes (MXNet's
    gluon.Block)."""

    def __init__(self, prefix=None, params=None):
        self._empty_prefix = prefix == ""
        self._prefix, self._params = _BlockScope.create(prefix, params, self._alias())
        self._name = self._prefix[:-1] if self._prefix.endswith("_") else self._prefix
        self._scope = _BlockScope(self)
        self._children = OrderedDict()
        self._reg_params = {}

    def _alias(self):
        return self.__class__.__name__.lower()

    def __repr__(self):
        lines = ["%s(" % self.__class__.__name__]
        for key, child in self._children.items():
            lines.append("  (%s): %s" % (key, repr(child).replace("\n", "\n  ")))
        return "\n".join(lines) + "\n)" if self._children else self.__class__.__name__ + "()"

    def __setattr__(self, name, value):
        if hasattr(self, "_children"):
            existing = getattr(self, name, None)
            if isinstance(existing, (Parameter, Block)) and not isinstance(value, type(existing)):
                raise TypeError("Changing attribute type for %s from %s to %s is not allowed." %
                                (name, type(existing), type(value)))
            if isinstance(value, Block):
                self.register_child(value, name)
            elif isinstance(value, Parameter):
                self._reg_params[name] = value
        object.__setattr__(self, name, value)

    @property
    def prefix(self):
        return self._prefix

    @property
    def name(self):
        return self._name

    @property
    def params(self):
        return self._params

    def name_scope(self):
        return self._scope

    def register_child(self, block, name=None):
        self._children[name or str(len(self._children))] = block

    def collect_params(self, select=None):
        """This block's and its children's parameters (select: a regular expression on the names)."""
        ret = ParameterDict(self._params.prefix)
        pattern = re.compile(select) if select else None
        ret.update({k: v for k, v in self.params.items() if pattern is None or pattern.match(k)})
        for child in self._children.values():
            ret.update(child.collect_params(select))
        return ret

    def _collect_params_with_prefix(self, prefix=""):
        if prefix:
            prefix += "."
        ret = {prefix + k: v for k, v in self._reg_params.items()}
        for name, child in self._children.items():
            ret.update(child._collect_params_with_prefix(prefix + name))
        return ret

    def initialize(self, init=None, ctx=None, verbose=False, force_reinit=False):
        from .. import initializer
        self.collect_params().initialize(init if init is not None else initializer.Uniform(), ctx, verbose,
                                         force_reinit)

    def save_parameters(self, filename, deduplicate=False):
        """Saves the parameters by their place in the block tree ("features.0.weight"), as Gluon 1.x does."""
        arrays = {k: p.data().copyto(Context("cpu", 0)) for k, p in self._collect_params_with_prefix().items()}
        nd.save(filename, arrays)

    def load_parameters(self, filename, ctx=None, allow_missing=False, ignore_extra=False, cast_dtype=False,
                        dtype_source="current"):
        loaded = nd.load(filename)
        params = self._collect_params_with_prefix()
        if loaded and not any("." in k for k in loaded) and not any(k in params for k in loaded):
            # Saved by ParameterDict.save / export (full names): load by name.
            self.collect_params().load(filename, ctx, allow_missing, ignore_extra, self.prefix)
            return
        loaded = {k.split(":", 1)[-1]: v for k, v in loaded.items()}
        for name, p in params.items():
            if name not in loaded:
                if not allow_missing:
                    raise AssertionError("Parameter '%s' is missing in file '%s', which contains parameters: %s." %
                                         (name, filename, ", ".join(sorted(loaded))))
                continue
            if p._data is None:
                p.shape = loaded[name].shape
                p.initialize(ctx=ctx)
                p._finish_deferred_init()
            p.set_data(loaded[name])
        extra = set(loaded) - set(params)
        if extra and not ignore_extra:
            raise AssertionError("Parameter '%s' loaded from file '%s' is not present in the block" %
                                 (sorted(extra)[0], filename))

    save_params = save_parameters
    load_params = load_parameters

    def hybridize(self, active=True, **kwargs):
        for child in self._children.values():
            child.hybridize(active, **kwargs)

    def cast(self, dtype):
        for child in self._children.values():
            child.cast(dtype)
        for p in self._reg_params.values():
            p.cast(dtype)

    def apply(self, fn):
        for child in self._children.values():
            child.apply(fn)
        fn(self)
        return self

    def __call__(self, *args):
        return self.forward(*args)

    def forward(self, *args):
        raise NotImplementedError

    def summary(self, *inputs):
        raise NotImplementedError("Block.summary is not available yet")


class HybridBlock(Block):
    """A block whose hybrid_forward(F, x, ...) works on NDArrays (F = mx.nd) and on Symbols (F = mx.sym): run
    operator by operator, or hybridized into one CachedOp (MXNet's gluon.HybridBlock)."""

    def __init__(self, prefix=None, params=None):
        super().__init__(prefix, params)
        self._active = False
        self._flags = {}
        self._cached_graph = None
        self._cached_op = None
        self._cached_inputs = None

    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        if isinstance(value, HybridBlock):
            self._clear_cached_op()

    def register_child(self, block, name=None):
        if not isinstance(block, HybridBlock):
            raise ValueError("Children of HybridBlock must also be HybridBlock, but %s has type %s. If you are "
                             "using Sequential, please try HybridSequential instead." % (str(block), str(type(block))))
        super().register_child(block, name)
        self._clear_cached_op()

    def hybridize(self, active=True, static_alloc=False, static_shape=False, **kwargs):
        self._active = active
        self._flags = {"static_alloc": static_alloc, "static_shape": static_shape}
        self._clear_cached_op()
        super().hybridize(active, static_alloc=static_alloc, static_shape=static_shape, **kwargs)

    def _clear_cached_op(self):
        self._cached_graph = None
        self._cached_op = None

    def cast(self, dtype):
        self._clear_cached_op()
        super().cast(dtype)

    def _get_graph(self, *args):
        if self._cached_graph is None:
            flat, fmt = _flatten(args)
            names = ["data"] if len(flat) == 1 else ["data%d" % i for i in range(len(flat))]
            inputs = [symbol.var(n) if a is not None else None for n, a in zip(names, flat)]
            grouped, _ = _regroup(inputs, fmt)
            params = {k: v.var() for k, v in self._reg_params.items()}
            with self.name_scope():
                out = self.hybrid_forward(symbol, *grouped, **params)
            out_flat, out_fmt = _flatten(out)
            self._cached_graph = ([n for n, a in zip(names, flat) if a is not None],
                                  symbol.Group(out_flat) if len(out_flat) > 1 else out_flat[0], out_fmt)
        return self._cached_graph

    def infer_shape(self, *args):
        """Completes the parameters' unknown dimensions from the inputs' shapes."""
        names, sym, _ = self._get_graph(*args)
        flat = [a for a in _flatten(args)[0] if a is not None]
        arg_shapes, _, aux_shapes = sym.infer_shape_partial(**{n: a.shape for n, a in zip(names, flat)})
        shapes = dict(zip(sym.list_arguments(), arg_shapes))
        shapes.update(zip(sym.list_auxiliary_states(), aux_shapes))
        for p in self.collect_params().values():
            if p.name in shapes and shapes[p.name] is not None:
                p.shape = shapes[p.name]

    def _deferred_init(self, *args):
        self.infer_shape(*args)
        for p in self.collect_params().values():
            p._finish_deferred_init()

    def _build_cache(self, *args):
        names, sym, _ = self._get_graph(*args)
        op = _core.CachedOp(sym.handle, bool(self._flags.get("static_alloc")), bool(self._flags.get("static_shape")))
        params = self.collect_params()
        sources = []
        for n in op.inputs():
            if n in names:
                sources.append((True, names.index(n)))
            elif n in params:
                sources.append((False, params[n]))
            else:
                raise RuntimeError("%s: the hybridized graph reads '%s', which is neither an input nor a parameter of "
                                   "the block" % (self.name, n))
        self._cached_op = op
        self._cached_inputs = sources

    def _call_cached_op(self, *args):
        if self._cached_op is None:
            self._build_cache(*args)
        flat = [a for a in _flatten(args)[0] if a is not None]
        ctx = flat[0].context
        try:
            handles = [flat[i].handle if is_data else i.data(ctx).handle for is_data, i in self._cached_inputs]
        except DeferredInitializationError:
            self._deferred_init(*args)
            handles = [flat[i].handle if is_data else i.data(ctx).handle for is_data, i in self._cached_inputs]
        outs = [nd._wrap(h) for h in self._cached_op(handles)]
        return _regroup(outs, self._cached_graph[2])[0]

    def forward(self, x, *args):
        if isinstance(x, nd.NDArray):
            if self._active:
                return self._call_cached_op(x, *args)
            ctx = x.context
            try:
                params = {k: v.data(ctx) for k, v in self._reg_params.items()}
            except DeferredInitializationError:
                self._deferred_init(x, *args)
                params = {k: v.data(ctx) for k, v in self._reg_params.items()}
            return self.hybrid_forward(nd, x, *args, **params)
        if not isinstance(x, symbol.Symbol):
            raise ValueError("HybridBlock takes NDArrays or Symbols, got %s" % type(x).__name__)
        params = {k: v.var() for k, v in self._reg_params.items()}
        with self.name_scope():
            return self.hybrid_forward(symbol, x, *args, **params)

    def hybrid_forward(self, F, x, *args, **kwargs):
        raise NotImplementedError

    def export(self, path, epoch=0, remove_amp_cast=True):
        """Writes path-symbol.json and path-%04d.params (arg:/aux: names) as MXNet's export, for
        SymbolBlock.imports in MXNet or troupe. Call after a forward pass of the hybridized block."""
        if self._cached_graph is None:
            raise RuntimeError("Please first call block.hybridize() and then run forward with this block at least "
                               "once before calling export.")
        sym = self._cached_graph[1]
        sym.save("%s-symbol.json" % path)
        params = self.collect_params()
        arrays = {}
        for name in sym.list_arguments():
            if name in params:
                arrays["arg:" + name] = params[name].data().copyto(Context("cpu", 0))
        for name in sym.list_auxiliary_states():
            if name in params:
                arrays["aux:" + name] = params[name].data().copyto(Context("cpu", 0))
        nd.save("%s-%04d.params" % (path, epoch), arrays)
        return "%s-symbol.json" % path, "%s-%04d.params" % (path, epoch)


class SymbolBlock(HybridBlock):
    """A block around a symbol: its inputs are the given variables, every other argument and auxiliary state a
    parameter (MXNet's gluon.SymbolBlock)."""

    def __init__(self, outputs, inputs, params=None):
        super().__init__(prefix="", params=None)
        if isinstance(inputs, symbol.Symbol):
            inputs = [inputs]
        if isinstance(outputs, (list, tuple)):
            outputs = symbol.Group(list(outputs)) if len(outputs) > 1 else outputs[0]
        input_names = [i.name for i in inputs]
        self._sym = outputs
        self._input_names = input_names
        aux = set(outputs.list_auxiliary_states())
        for name in outputs.list_arguments() + outputs.list_auxiliary_states():
            if name in input_names:
                continue
            p = params[name] if params is not None and name in params else None
            if p is None:
                p = Parameter(name, grad_req="null" if name in aux else "write", allow_deferred_init=True)
            self._params._params[name] = p
            self._reg_params[name] = p
        self._cached_graph = (input_names, outputs, list(range(len(outputs))) if len(outputs) > 1 else 0)
        self._active = True

    def _get_graph(self, *args):
        return self._cached_graph

    def _clear_cached_op(self):
        self._cached_op = None

    def hybridize(self, active=True, **kwargs):
        self._flags = {k: v for k, v in kwargs.items() if k in ("static_alloc", "static_shape")}
        self._cached_op = None

    def forward(self, x, *args):
        if isinstance(x, nd.NDArray):
            return self._call_cached_op(x, *args)
        return self._sym(**dict(zip(self._input_names, (x,) + args)))

    @staticmethod
    def imports(symbol_file, input_names, param_file=None, ctx=None):
        """A SymbolBlock of an exported model (path-symbol.json and path-NNNN.params)."""
        sym = symbol.load(symbol_file)
        if isinstance(input_names, str):
            input_names = [input_names]
        block = SymbolBlock(sym, [symbol.var(n) for n in input_names])
        if param_file is not None:
            loaded = {k.split(":", 1)[-1]: v for k, v in nd.load(param_file).items()}
            for name, p in block._reg_params.items():
                if name not in loaded:
                    raise AssertionError("Parameter '%s' is missing in file '%s'" % (name, param_file))
                p.shape = loaded[name].shape
                p.initialize(ctx=ctx)
                p.set_data(loaded[name])
        return block
