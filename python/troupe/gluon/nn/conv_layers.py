"""Convolution and pooling layers (NCW / NCHW / NCDHW)."""
from ..block import HybridBlock


def _tuple(v, n):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


class _Conv(HybridBlock):
    def __init__(self, channels, kernel_size, strides, padding, dilation, groups, layout, in_channels=0,
                 activation=None, use_bias=True, weight_initializer=None, bias_initializer="zeros", op_name="Convolution",
                 adj=None, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self._channels, self._in_channels = channels, in_channels
            n = len(kernel_size)
            self._op_name = op_name
            self._kwargs = {"kernel": kernel_size, "stride": _tuple(strides, n), "dilate": _tuple(dilation, n),
                            "pad": _tuple(padding, n), "num_filter": channels, "num_group": groups,
                            "no_bias": not use_bias, "layout": layout}
            if adj is not None:
                self._kwargs["adj"] = adj
            if op_name == "Convolution":
                wshape = (channels, in_channels // groups if in_channels else 0) + tuple(kernel_size)
            else:
                wshape = (in_channels, channels // groups) + tuple(kernel_size)
            self.weight = self.params.get("weight", shape=wshape, init=weight_initializer, allow_deferred_init=True)
            self.bias = self.params.get("bias", shape=(channels,), init=bias_initializer,
                                        allow_deferred_init=True) if use_bias else None
            if activation is not None:
                from .activations import Activation
                self.act = Activation(activation, prefix=activation + "_")
            else:
                self.act = None

    def _alias(self):
        return "conv"

    def hybrid_forward(self, F, x, weight, bias=None):
        op = getattr(F, self._op_name)
        out = op(x, weight, bias, name="fwd", **self._kwargs) if bias is not None else \
            op(x, weight, name="fwd", **self._kwargs)
        return self.act(out) if self.act is not None else out


def _conv(n, layout):
    class Conv(_Conv):
        def __init__(self, channels, kernel_size, strides=1, padding=0, dilation=1, groups=1, layout=layout,
                     activation=None, use_bias=True, weight_initializer=None, bias_initializer="zeros", in_channels=0,
                     **kwargs):
            super().__init__(channels, _tuple(kernel_size, n), strides, padding, dilation, groups, layout, in_channels,
                             activation, use_bias, weight_initializer, bias_initializer, **kwargs)
    Conv.__name__ = "Conv%dD" % n
    return Conv


Conv1D = _conv(1, "NCW")
Conv2D = _conv(2, "NCHW")
Conv3D = _conv(3, "NCDHW")


class Conv2DTranspose(_Conv):
    def __init__(self, channels, kernel_size, strides=(1, 1), padding=(0, 0), output_padding=(0, 0), dilation=(1, 1),
                 groups=1, layout="NCHW", activation=None, use_bias=True, weight_initializer=None,
                 bias_initializer="zeros", in_channels=0, **kwargs):
        super().__init__(channels, _tuple(kernel_size, 2), strides, padding, dilation, groups, layout, in_channels,
                         activation, use_bias, weight_initializer, bias_initializer, op_name="Deconvolution",
                         adj=_tuple(output_padding, 2), **kwargs)

    def _alias(self):
        return "conv"


class _Pooling(HybridBlock):
    def __init__(self, pool_size, strides, padding, ceil_mode, global_pool, pool_type, layout, count_include_pad=None,
                 **kwargs):
        super().__init__(**kwargs)
        n = len(pool_size)
        strides = pool_size if strides is None else strides
        self._kwargs = {"kernel": pool_size, "stride": _tuple(strides, n), "pad": _tuple(padding, n),
                        "global_pool": global_pool, "pool_type": pool_type, "layout": layout,
                        "pooling_convention": "full" if ceil_mode else "valid"}
        if count_include_pad is not None:
            self._kwargs["count_include_pad"] = count_include_pad

    def _alias(self):
        return "pool"

    def hybrid_forward(self, F, x):
        return F.Pooling(x, name="fwd", **self._kwargs)


def _pool(n, layout, pool_type, global_pool):
    if global_pool:
        class Pool(_Pooling):
            def __init__(self, layout=layout, **kwargs):
                super().__init__((1,) * n, None, 0, True, True, pool_type, layout, **kwargs)
    elif pool_type == "avg":
        class Pool(_Pooling):
            def __init__(self, pool_size=2, strides=None, padding=0, layout=layout, ceil_mode=False,
                         count_include_pad=True, **kwargs):
                super().__init__(_tuple(pool_size, n), None if strides is None else _tuple(strides, n), padding,
                                 ceil_mode, False, "avg", layout, count_include_pad, **kwargs)
    else:
        class Pool(_Pooling):
            def __init__(self, pool_size=2, strides=None, padding=0, layout=layout, ceil_mode=False, **kwargs):
                super().__init__(_tuple(pool_size, n), None if strides is None else _tuple(strides, n), padding,
                                 ceil_mode, False, "max", layout, **kwargs)
    Pool.__name__ = "%s%sPool%dD" % ("Global" if global_pool else "", pool_type.capitalize(), n)
    return Pool


MaxPool1D, MaxPool2D, MaxPool3D = (_pool(n, l, "max", False) for n, l in ((1, "NCW"), (2, "NCHW"), (3, "NCDHW")))
AvgPool1D, AvgPool2D, AvgPool3D = (_pool(n, l, "avg", False) for n, l in ((1, "NCW"), (2, "NCHW"), (3, "NCDHW")))
GlobalMaxPool1D, GlobalMaxPool2D, GlobalMaxPool3D = (_pool(n, l, "max", True)
                                                     for n, l in ((1, "NCW"), (2, "NCHW"), (3, "NCDHW")))
GlobalAvgPool1D, GlobalAvgPool2D, GlobalAvgPool3D = (_pool(n, l, "avg", True)
                                                     for n, l in ((1, "NCW"), (2, "NCHW"), (3, "NCDHW")))
