"""mx.optimizer: SGD, NAG, Adam, RMSProp over troupe's update operators (MXNet 1.x's optimizers)."""
import math

from . import ndarray as nd

_registry = {}


def register(klass):
    _registry[klass.__name__.lower()] = klass
    return klass


class Optimizer:
    """Updates weights from gradients. learning_rate, wd, rescale_grad (the gradient's factor, 1/batch size in a
    Trainer), clip_gradient, lr_scheduler; per-parameter lr_mult / wd_mult through set_lr_mult / set_wd_mult."""

    def __init__(self, learning_rate=0.01, wd=0.0, rescale_grad=1.0, clip_gradient=None, lr_scheduler=None,
                 begin_num_update=0, multi_precision=False, param_idx2name=None, **kwargs):
        self.lr = learning_rate
        self.wd = wd
        self.rescale_grad = rescale_grad
        self.clip_gradient = clip_gradient
        self.lr_scheduler = lr_scheduler
        if lr_scheduler is not None:
            lr_scheduler.base_lr = learning_rate
        self.num_update = begin_num_update
        self._index_update_count = {}
        self.lr_mult, self.wd_mult = {}, {}
        self.idx2name = dict(param_idx2name or {})
        self.multi_precision = multi_precision

    @property
    def learning_rate(self):
        return self.lr_scheduler(self.num_update) if self.lr_scheduler is not None else self.lr

    def set_learning_rate(self, lr):
        if self.lr_scheduler is not None:
            raise UserWarning("LRScheduler of the optimizer has already been defined.")
        self.lr = lr

    def set_lr_mult(self, args_lr_mult):
        self.lr_mult = dict(args_lr_mult)

    def set_wd_mult(self, args_wd_mult):
        self.wd_mult = dict(args_wd_mult)

    def _update_count(self, index):
        self._index_update_count[index] = self._index_update_count.get(index, 0) + 1
        self.num_update = max(self._index_update_count[index], self.num_update)

    def _get_lr(self, index):
        return self.learning_rate * self.lr_mult.get(self.idx2name.get(index, index), 1.0)

    def _get_wd(self, index):
        name = self.idx2name.get(index, index)
        # Biases and BatchNorm's gamma/beta decay as the multiplier says (1 unless set), as in MXNet's Gluon.
        return self.wd * self.wd_mult.get(name, 1.0)

    def _common(self, index):
        kw = {"lr": self._get_lr(index), "wd": self._get_wd(index), "rescale_grad": self.rescale_grad}
        if self.clip_gradient is not None:
            kw["clip_gradient"] = self.clip_gradient
        return kw

    def create_state(self, index, weight):
        return None

    def create_state_multi_precision(self, index, weight):
        return self.create_state(index, weight)

    def update(self, index, weight, grad, state):
        raise NotImplementedError

    def update_multi_precision(self, index, weight, grad, state):
        self.update(index, weight, grad, state)


@register
class SGD(Optimizer):
    def __init__(self, momentum=0.0, lazy_update=True, **kwargs):
        super().__init__(**kwargs)
        self.momentum = momentum

    def create_state(self, index, weight):
        return nd.zeros(weight.shape, weight.context, weight.dtype) if self.momentum != 0.0 else None

    def update(self, index, weight, grad, state):
        self._update_count(index)
        kw = self._common(index)
        if state is not None:
            nd.sgd_mom_update(weight, grad, state, out=weight, momentum=self.momentum, **kw)
        else:
            nd.sgd_update(weight, grad, out=weight, **kw)


@register
class NAG(SGD):
    def update(self, index, weight, grad, state):
        self._update_count(index)
        kw = self._common(index)
        if state is not None:
            nd.nag_mom_update(weight, grad, state, out=weight, momentum=self.momentum, **kw)
        else:
            nd.sgd_update(weight, grad, out=weight, **kw)


@register
class Adam(Optimizer):
    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, lazy_update=True, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon

    def create_state(self, index, weight):
        return (nd.zeros(weight.shape, weight.context, weight.dtype), nd.zeros(weight.shape, weight.context, weight.dtype))

    def update(self, index, weight, grad, state):
        self._update_count(index)
        kw = self._common(index)
        t = self._index_update_count[index]
        kw["lr"] *= math.sqrt(1.0 - self.beta2 ** t) / (1.0 - self.beta1 ** t)
        mean, var = state
        nd.adam_update(weight, grad, mean, var, out=weight, beta1=self.beta1, beta2=self.beta2, epsilon=self.epsilon,
                       **kw)


@register
class RMSProp(Optimizer):
    def __init__(self, learning_rate=0.001, gamma1=0.9, gamma2=0.9, epsilon=1e-8, centered=False,
                 clip_weights=None, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.gamma1, self.gamma2, self.epsilon, self.centered = gamma1, gamma2, epsilon, centered
        self.clip_weights = clip_weights

    def create_state(self, index, weight):
        z = lambda: nd.zeros(weight.shape, weight.context, weight.dtype)
        return (z(), z(), z()) if self.centered else (z(),)

    def update(self, index, weight, grad, state):
        self._update_count(index)
        kw = self._common(index)
        if self.clip_weights:
            kw["clip_weights"] = self.clip_weights
        if self.centered:
            n, g, delta = state
            nd.rmspropalex_update(weight, grad, n, g, delta, out=weight, gamma1=self.gamma1, gamma2=self.gamma2,
                                  epsilon=self.epsilon, **kw)
        else:
            nd.rmsprop_update(weight, grad, state[0], out=weight, gamma1=self.gamma1, epsilon=self.epsilon, **kw)


def create(name, **kwargs):
    if isinstance(name, Optimizer):
        return name
    key = name.lower()
    if key not in _registry:
        raise ValueError("Cannot find optimizer %s (known: %s)" % (name, ", ".join(sorted(_registry))))
    return _registry[key](**kwargs)


class Updater:
    """Applies an optimizer to (index, grad, weight), keeping a state per index (MXNet's get_updater)."""

    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.states = {}

    def __call__(self, index, grad, weight):
        if index not in self.states:
            self.states[index] = self.optimizer.create_state_multi_precision(index, weight)
        self.optimizer.update_multi_precision(index, weight, grad, self.states[index])


def get_updater(optimizer):
    return Updater(optimizer)


__all__ = ["Optimizer", "SGD", "NAG", "Adam", "RMSProp", "create", "register", "Updater", "get_updater"]
