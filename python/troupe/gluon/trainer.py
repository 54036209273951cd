"""gluon.Trainer: applies an optimizer to a block's parameters (MXNet 1.x's gluon.Trainer), in this process or,
with a dist kvstore, on the servers of a `troupe launch` cluster."""
from .. import optimizer as opt
from .parameter import Parameter, ParameterDict


class Trainer:
    """step(batch_size) updates every parameter with a gradient from its gradient scaled by 1/batch_size.
    Parameters on several contexts have their gradients summed first and every copy gets the same update."""

    def __init__(self, params, optimizer, optimizer_params=None, kvstore="device", compression_params=None,
                 update_on_kvstore=None):
        if isinstance(params, (dict, ParameterDict)):
            params = list(params.values())
        if not isinstance(params, (list, tuple)) or not all(isinstance(p, Parameter) for p in params):
            raise ValueError("First argument must be a list or dict of Parameters, got %s." % type(params))
        self._params = list(params)
        # A dist store (a cluster from `troupe launch`): the servers sum the workers' gradients and run the
        # optimizer; the workers push gradients and pull weights. Joined at the first step, as MXNet does.
        self._kvstore_type = kvstore if isinstance(kvstore, str) and kvstore.startswith("dist") else None
        self._kvstore = kvstore if hasattr(kvstore, "push") and hasattr(kvstore, "set_optimizer") else None
        if self._kvstore is not None and not getattr(self._kvstore, "type", "").startswith("dist"):
            self._kvstore = None
        self._scale = (optimizer_params or {}).get("rescale_grad", 1.0)
        idx2name = {i: p.name for i, p in enumerate(self._params)}
        if isinstance(optimizer, opt.Optimizer):
            if optimizer_params:
                raise ValueError("optimizer_params must be None if optimizer is an instance of Optimizer")
            self._optimizer = optimizer
            self._optimizer.idx2name = idx2name
        else:
            self._optimizer = opt.create(optimizer, param_idx2name=idx2name, **(optimizer_params or {}))
        self._optimizer.set_lr_mult({p.name: p.lr_mult for p in self._params})
        self._optimizer.set_wd_mult({p.name: p.wd_mult for p in self._params})
        self._updaters = None

    @property
    def learning_rate(self):
        return self._optimizer.learning_rate

    @property
    def optimizer(self):
        return self._optimizer

    def set_learning_rate(self, lr):
        self._optimizer.set_learning_rate(lr)

    def _init(self):
        ctxs = max((len(p.list_ctx()) for p in self._params), default=1)
        self._updaters = [opt.get_updater(self._optimizer) for _ in range(max(1, ctxs))]

    def allreduce_grads(self):
        for p in self._params:
            if p.grad_req == "null":
                continue
            grads = p.list_grad()
            if len(grads) > 1:
                total = grads[0].copy()
                for g in grads[1:]:
                    total += g.as_in_context(total.context)
                for g in grads:
                    total.copyto(g)

    def _init_dist(self):
        from .. import kvstore as kv
        if self._kvstore is None:
            self._kvstore = kv.create(self._kvstore_type)
        for i, p in enumerate(self._params):
            self._kvstore.init(i, p.data())
            # Every worker starts from the store's value (the first worker's).
            self._kvstore.pull(i, p.list_data(), priority=-i)
        self._kvstore.set_optimizer(self._optimizer)

    def step(self, batch_size, ignore_stale_grad=False):
        self._optimizer.rescale_grad = self._scale / batch_size
        if self._kvstore_type is not None or self._kvstore is not None:
            if not getattr(self, "_dist_ready", False):
                self._init_dist()
                self._dist_ready = True
            live = [(i, p) for i, p in enumerate(self._params) if p.grad_req != "null"]
            for i, p in live:
                self._kvstore.push(i, p.list_grad(), priority=-i)
            for i, p in live:
                self._kvstore.pull(i, p.list_data(), priority=-i)
            return
        self.allreduce_grads()
        self.update(batch_size, ignore_stale_grad)

    def update(self, batch_size, ignore_stale_grad=False):
        if self._updaters is None:
            self._init()
        self._optimizer.rescale_grad = self._scale / batch_size
        for i, p in enumerate(self._params):
            if p.grad_req == "null":
                continue
            for upd, data, grad in zip(self._updaters, p.list_data(), p.list_grad()):
                upd(i, grad, data)

    def save_states(self, fname):
        raise NotImplementedError("Trainer.save_states is not available yet")
