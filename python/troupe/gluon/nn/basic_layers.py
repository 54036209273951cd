"""Dense, Dropout, BatchNorm, Embedding, Flatten, LayerNorm and the sequential containers."""
from ..block import Block, HybridBlock
from ..parameter import Parameter


class Sequential(Block):
    """Runs its children one after another."""

    def __init__(self, prefix=None, params=None):
        super().__init__(prefix, params)

    def add(self, *blocks):
        for b in blocks:
            self.register_child(b)

    def forward(self, x):
        for b in self._children.values():
            x = b(x)
        return x

    def __getitem__(self, key):
        layers = list(self._children.values())[key]
        if isinstance(layers, list):
            net = type(self)(prefix=self._prefix)
            with net.name_scope():
                net.add(*layers)
            return net
        return layers

    def __len__(self):
        return len(self._children)


class HybridSequential(HybridBlock):
    """Runs its children one after another; hybridizable."""

    def __init__(self, prefix=None, params=None):
        super().__init__(prefix, params)

    def add(self, *blocks):
        for b in blocks:
            self.register_child(b)

    def hybrid_forward(self, F, x):
        for b in self._children.values():
            x = b(x)
        return x

    __getitem__ = Sequential.__getitem__
    __len__ = Sequential.__len__


class Dense(HybridBlock):
    """y = activation(x W^T + b); in_units 0 is completed by the first forward pass."""

    def __init__(self, units, activation=None, use_bias=True, flatten=True, dtype="float32", weight_initializer=None,
                 bias_initializer="zeros", in_units=0, **kwargs):
        super().__init__(**kwargs)
        self._units, self._flatten_in = units, flatten
        with self.name_scope():
            self.weight = self.params.get("weight", shape=(units, in_units), init=weight_initializer, dtype=dtype,
                                          allow_deferred_init=True)
            self.bias = self.params.get("bias", shape=(units,), init=bias_initializer, dtype=dtype,
                                        allow_deferred_init=True) if use_bias else None
            self.act = _activation(activation, self.prefix)

    def hybrid_forward(self, F, x, weight, bias=None):
        out = F.FullyConnected(x, weight, bias, no_bias=bias is None, num_hidden=self._units,
                               flatten=self._flatten_in, name="fwd")
        return self.act(out) if self.act is not None else out

    def __repr__(self):
        shape = self.weight.shape
        return "Dense(%s -> %s, %s)" % (shape[1] if shape[1] else None, shape[0],
                                        "linear" if self.act is None else self.act._act_type)


def _activation(activation, prefix):
    if activation is None:
        return None
    from .activations import Activation
    return Activation(activation, prefix=activation + "_")


class Dropout(HybridBlock):
    def __init__(self, rate, axes=(), **kwargs):
        super().__init__(**kwargs)
        self._rate, self._axes = rate, tuple(axes)

    def hybrid_forward(self, F, x):
        if self._rate > 0:
            return F.Dropout(x, p=self._rate, axes=self._axes, name="fwd", cudnn_off=False)
        return F.identity(x) if hasattr(F, "identity") else x

    def __repr__(self):
        return "Dropout(p = %s, axes=%s)" % (self._rate, self._axes)


class BatchNorm(HybridBlock):
    """Batch normalization over axis (channels); running statistics updated in training mode."""

    def __init__(self, axis=1, momentum=0.9, epsilon=1e-5, center=True, scale=True, use_global_stats=False,
                 beta_initializer="zeros", gamma_initializer="ones", running_mean_initializer="zeros",
                 running_variance_initializer="ones", in_channels=0, **kwargs):
        super().__init__(**kwargs)
        self._kwargs = {"axis": axis, "eps": epsilon, "momentum": momentum, "fix_gamma": not scale,
                        "use_global_stats": use_global_stats}
        with self.name_scope():
            self.gamma = self.params.get("gamma", grad_req="write" if scale else "null", shape=(in_channels,),
                                         init=gamma_initializer, allow_deferred_init=True, differentiable=scale)
            self.beta = self.params.get("beta", grad_req="write" if center else "null", shape=(in_channels,),
                                        init=beta_initializer, allow_deferred_init=True, differentiable=center)
            self.running_mean = self.params.get("running_mean", grad_req="null", shape=(in_channels,),
                                                init=running_mean_initializer, allow_deferred_init=True,
                                                differentiable=False)
            self.running_var = self.params.get("running_var", grad_req="null", shape=(in_channels,),
                                               init=running_variance_initializer, allow_deferred_init=True,
                                               differentiable=False)

    def hybrid_forward(self, F, x, gamma, beta, running_mean, running_var):
        return F.BatchNorm(x, gamma, beta, running_mean, running_var, name="fwd", **self._kwargs)


class Embedding(HybridBlock):
    def __init__(self, input_dim, output_dim, dtype="float32", weight_initializer=None, sparse_grad=False, **kwargs):
        super().__init__(**kwargs)
        self._kwargs = {"input_dim": input_dim, "output_dim": output_dim, "dtype": dtype}
        with self.name_scope():
            self.weight = self.params.get("weight", shape=(input_dim, output_dim), init=weight_initializer,
                                          dtype=dtype, allow_deferred_init=True)

    def hybrid_forward(self, F, x, weight):
        return F.Embedding(x, weight, name="fwd", **self._kwargs)


class Flatten(HybridBlock):
    def hybrid_forward(self, F, x):
        return F.Flatten(x)

    def __repr__(self):
        return "Flatten"


class LayerNorm(HybridBlock):
    def __init__(self, axis=-1, epsilon=1e-5, center=True, scale=True, beta_initializer="zeros",
                 gamma_initializer="ones", in_channels=0, **kwargs):
        super().__init__(**kwargs)
        self._kwargs = {"axis": axis, "eps": epsilon}
        with self.name_scope():
            self.gamma = self.params.get("gamma", grad_req="write" if scale else "null", shape=(in_channels,),
                                         init=gamma_initializer, allow_deferred_init=True)
            self.beta = self.params.get("beta", grad_req="write" if center else "null", shape=(in_channels,),
                                        init=beta_initializer, allow_deferred_init=True)

    def hybrid_forward(self, F, x, gamma, beta):
        return F.LayerNorm(x, gamma, beta, **self._kwargs)


class InstanceNorm(HybridBlock):
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("InstanceNorm is not available yet")


class Lambda(Block):
    """A block from a function of NDArrays (or the name of an nd function)."""

    def __init__(self, function, prefix=None):
        super().__init__(prefix=prefix)
        if isinstance(function, str):
            from ... import ndarray
            function = getattr(ndarray, function)
        self._func = function

    def forward(self, *args):
        return self._func(*args)


class HybridLambda(HybridBlock):
    """A hybridizable block from a function (F, x, ...) or an operator's name."""

    def __init__(self, function, prefix=None):
        super().__init__(prefix=prefix)
        if isinstance(function, str):
            name = function
            function = lambda F, *a: getattr(F, name)(*a)
        self._func = function

    def hybrid_forward(self, F, x, *args):
        return self._func(F, x, *args)
