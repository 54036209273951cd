"""Executor: a Symbol bound to arrays (MXNet's mx.executor.Executor)."""
from . import _core
from .context import _native


class Executor:
    """Made by Symbol.bind / simple_bind. forward() and backward() push the passes and return at once; reading an
    output waits."""

    def __init__(self, symbol, ctx, args, grads, reqs, aux):
        from .ndarray import _wrap
        self._symbol = symbol
        self._ctx = ctx
        self._reqs = reqs
        names = symbol.list_arguments()
        any_grad = any(r != "null" for r in reqs)
        grad_handles = [g.handle if g is not None else _core.none_array() for g in grads] if any_grad else []
        self.handle = _core.Executor.bind(symbol.handle, _native(ctx), [a.handle for a in args], grad_handles,
                                          list(reqs) if any_grad else [], [a.handle for a in aux])
        self.arg_arrays = list(args)
        self.grad_arrays = [g if r != "null" else None for g, r in zip(grads, reqs)]
        self.aux_arrays = list(aux)
        self.arg_dict = dict(zip(names, self.arg_arrays))
        self.grad_dict = {n: g for n, g in zip(names, self.grad_arrays) if g is not None}
        self.aux_dict = dict(zip(symbol.list_auxiliary_states(), self.aux_arrays))
        self._wrap = _wrap
        self.outputs = [_wrap(h) for h in self.handle.outputs]

    def forward(self, is_train=False, **kwargs):
        """Runs the forward pass; keyword arrays are copied into the arguments of those names first."""
        for k, v in kwargs.items():
            if k not in self.arg_dict:
                raise ValueError("forward: %r is not an argument" % k)
            v.copyto(self.arg_dict[k])
        self.handle.forward(bool(is_train))
        self.outputs = [self._wrap(h) for h in self.handle.outputs]
        return self.outputs

    def backward(self, out_grads=None, is_train=True):
        from .ndarray import NDArray
        if isinstance(out_grads, NDArray):
            out_grads = [out_grads]
        self.handle.backward([g.handle for g in (out_grads or [])])

    @property
    def output_dict(self):
        return dict(zip(self._symbol.list_outputs(), self.outputs))

    def copy_params_from(self, arg_params, aux_params=None, allow_extra_params=False):
        for name, arr in arg_params.items():
            if name in self.arg_dict:
                arr.copyto(self.arg_dict[name])
            elif not allow_extra_params:
                raise ValueError("copy_params_from: %r is not an argument" % name)
        for name, arr in (aux_params or {}).items():
            if name in self.aux_dict:
                arr.copyto(self.aux_dict[name])
            elif not allow_extra_params:
                raise ValueError("copy_params_from: %r is not an auxiliary state" % name)
