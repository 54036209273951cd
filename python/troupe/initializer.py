"""mx.init: how parameters start (MXNet 1.x's initializers, by class or by name)."""
import json
import re

import numpy as np

_registry = {}


def register(klass):
    """Registers an Initializer class under its lower-case name (mx.init.create, and Parameter init strings)."""
    _registry[klass.__name__.lower()] = klass
    return klass


class Initializer:
    """Fills an array given its name: weights by the initializer's rule; biases, betas and moving means zeros;
    gammas and moving variances ones (MXNet's dispatch by name)."""

    def __init__(self, **kwargs):
        self._kwargs = kwargs

    def dumps(self):
        return json.dumps([self.__class__.__name__.lower(), self._kwargs])

    def __call__(self, desc, arr):
        name = str(desc)
        if name.endswith("weight"):
            self._init_weight(name, arr)
        elif name.endswith(("bias", "beta", "moving_mean", "running_mean")):
            arr[:] = 0.0
        elif name.endswith(("gamma", "moving_var", "running_var", "moving_inv_var")):
            arr[:] = 1.0
        elif name.endswith(("min", "max")):
            arr[:] = 0.0
        else:
            self._init_default(name, arr)

    def _init_weight(self, name, arr):
        raise NotImplementedError("%s has no rule for weights" % type(self).__name__)

    def _init_default(self, name, arr):
        raise ValueError("Unknown initialization pattern for %s. Default initialization is now limited to "
                         "\"weight\", \"bias\", \"gamma\" (1.0), and \"beta\" (0.0)." % name)

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join("%s=%r" % kv for kv in self._kwargs.items()))


def _fill(arr, values):
    from .ndarray import array
    array(values.astype(arr.dtype), ctx=arr.context).copyto(arr)


@register
class Zero(Initializer):
    def _init_weight(self, name, arr):
        arr[:] = 0.0


@register
class One(Initializer):
    def _init_weight(self, name, arr):
        arr[:] = 1.0


@register
class Constant(Initializer):
    def __init__(self, value):
        super().__init__(value=value)
        self.value = value

    def _init_weight(self, name, arr):
        arr[:] = self.value


@register
class Uniform(Initializer):
    def __init__(self, scale=0.07):
        super().__init__(scale=scale)
        self.scale = scale

    def _init_weight(self, name, arr):
        from .ndarray import random
        random.uniform(-self.scale, self.scale, shape=arr.shape, out=arr)


@register
class Normal(Initializer):
    def __init__(self, sigma=0.01):
        super().__init__(sigma=sigma)
        self.sigma = sigma

    def _init_weight(self, name, arr):
        from .ndarray import random
        random.normal(0, self.sigma, shape=arr.shape, out=arr)


@register
class Xavier(Initializer):
    def __init__(self, rnd_type="uniform", factor_type="avg", magnitude=3):
        super().__init__(rnd_type=rnd_type, factor_type=factor_type, magnitude=magnitude)
        self.rnd_type, self.factor_type, self.magnitude = rnd_type, factor_type, float(magnitude)

    def _init_weight(self, name, arr):
        from .ndarray import random
        shape = arr.shape
        if len(shape) < 2:
            raise ValueError("Xavier initializer cannot be applied to vector %s. It requires at least 2D." % name)
        hw = int(np.prod(shape[2:])) if len(shape) > 2 else 1
        fan_in, fan_out = shape[1] * hw, shape[0] * hw
        factor = {"avg": (fan_in + fan_out) / 2.0, "in": fan_in, "out": fan_out}.get(self.factor_type)
        if factor is None:
            raise ValueError("Incorrect factor type %r" % self.factor_type)
        scale = np.sqrt(self.magnitude / factor)
        if self.rnd_type == "uniform":
            random.uniform(-scale, scale, shape=shape, out=arr)
        elif self.rnd_type == "gaussian":
            random.normal(0, scale, shape=shape, out=arr)
        else:
            raise ValueError("Unknown random type %r" % self.rnd_type)


@register
class MSRAPrelu(Xavier):
    def __init__(self, factor_type="avg", slope=0.25):
        super().__init__("gaussian", factor_type, 2.0 / (1 + slope ** 2))


def create(init, **kwargs):
    """An initializer from an instance, a name ("xavier", "zeros", ...) or its JSON (Initializer.dumps)."""
    if isinstance(init, Initializer):
        return init
    if init is None:
        return Uniform()
    if isinstance(init, str):
        if init.startswith("["):
            name, args = json.loads(init)
            return create(name, **args)
        key = {"zeros": "zero", "ones": "one"}.get(init.lower(), init.lower())
        if key not in _registry:
            raise ValueError("unknown initializer %r (known: %s)" % (init, ", ".join(sorted(_registry))))
        return _registry[key](**kwargs)
    raise TypeError("an initializer, its name or its JSON, got %r" % (init,))


__all__ = ["Initializer", "Zero", "One", "Constant", "Uniform", "Normal", "Xavier", "MSRAPrelu", "create", "register"]
