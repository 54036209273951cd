"""Generates spatial3d.json + spatial3d.params: 3-D (NCDHW) Convolution and Pooling through MXNet 1.9.1's
mx.autograd, read by tests/op/op_dense_test.cc.

Each case is one operator call, mx.nd.<op>(*inputs, **kwargs), in float32 and in float64 (the same values:
drawn in float64, uniform in [-1, 1], and rounded to float32 first, so both types see identical inputs). Every
input is a variable; backward runs with a random head gradient. spatial3d.json lists the cases (name,
operator, parameters as MXNet strings, element type, input names); spatial3d.params holds '<case>:in:<input>',
'<case>:out', '<case>:head' and '<case>:grad:<input>'.

The cases cover Convolution with stride, padding, dilation, groups (also one input channel per group), a
1x1x1 kernel, no bias, explicit layout and enough channels for oneDNN's blocked kernels; Pooling max, avg with
and without count_include_pad, sum, 'full' convention (max and avg), global max and avg, and a kernel of
depth 1.

Run with MXNet 1.9.1 (pip install mxnet==1.9.1 "numpy<1.24"):  python make_spatial3d.py
"""
import json
import os

import mxnet as mx
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.RandomState(31)


def conv(name, data, kernel, num_filter, no_bias=False, groups=1, **extra):
    kwargs = {'kernel': str(kernel), 'num_filter': str(num_filter), 'num_group': str(groups),
              'no_bias': str(no_bias)}
    kwargs.update({k: str(v) for k, v in extra.items()})
    weight = (num_filter, data[1] // groups) + tuple(kernel)
    inputs = [('data', data), ('weight', weight)] + ([] if no_bias else [('bias', (num_filter,))])
    return name, 'Convolution', kwargs, inputs


def pool(name, data, **kwargs):
    return name, 'Pooling', {k: str(v) for k, v in kwargs.items()}, [('data', data)]


CASES = [
    conv('conv_basic', (2, 3, 4, 5, 5), (2, 3, 3), 4),
    conv('conv_stride_pad', (1, 2, 5, 5, 6), (3, 3, 3), 3, stride=(2, 1, 2), pad=(1, 0, 1)),
    conv('conv_dilate_nobias', (1, 2, 5, 4, 5), (2, 2, 2), 2, no_bias=True, dilate=(2, 1, 2), pad=(1, 1, 0)),
    conv('conv_groups', (2, 4, 3, 4, 4), (3, 1, 2), 4, groups=2, stride=(1, 2, 1)),
    conv('conv_depthwise', (1, 4, 3, 4, 4), (2, 2, 2), 8, groups=4, pad=(1, 0, 1)),
    conv('conv_1x1x1', (2, 4, 2, 3, 3), (1, 1, 1), 3),
    conv('conv_layout', (1, 2, 4, 4, 4), (2, 2, 2), 3, no_bias=True, layout='NCDHW'),
    conv('conv_wide', (1, 16, 3, 4, 4), (2, 2, 2), 16, pad=(1, 0, 1)),
    pool('max_valid', (1, 3, 5, 6, 7), kernel=(2, 2, 2), stride=(2, 2, 2), pool_type='max'),
    pool('max_pad_stride', (1, 2, 6, 7, 5), kernel=(3, 3, 3), stride=(2, 2, 1), pad=(1, 1, 1), pool_type='max'),
    pool('avg_include_pad', (1, 2, 7, 6, 5), kernel=(3, 2, 3), stride=(2, 2, 2), pad=(1, 1, 1), pool_type='avg',
         count_include_pad=True),
    pool('avg_exclude_pad', (1, 2, 7, 6, 5), kernel=(3, 2, 3), stride=(2, 2, 2), pad=(1, 1, 1), pool_type='avg',
         count_include_pad=False),
    pool('sum', (1, 2, 4, 5, 4), kernel=(2, 2, 2), stride=(1, 2, 1), pool_type='sum'),
    pool('max_full', (1, 2, 5, 6, 7), kernel=(2, 3, 2), stride=(2, 2, 2), pool_type='max',
         pooling_convention='full'),
    pool('avg_full', (1, 2, 6, 7, 6), kernel=(3, 3, 3), stride=(2, 2, 2), pad=(1, 0, 1), pool_type='avg',
         pooling_convention='full'),
    pool('global_max', (2, 3, 3, 4, 5), kernel=(1, 1, 1), global_pool=True, pool_type='max'),
    pool('global_avg', (2, 3, 3, 4, 5), global_pool=True, pool_type='avg', layout='NCDHW'),
    pool('max_depth1', (1, 3, 3, 6, 8), kernel=(1, 2, 2), stride=(1, 2, 2), pool_type='max'),
]

saved, index = {}, []
for name, op, kwargs, inputs in CASES:
    values = [rng.uniform(-1, 1, shape).astype(np.float32) for _, shape in inputs]
    head = None
    for dtype in ('float32', 'float64'):
        case = '%s_%s' % (name, dtype)
        arrays = [mx.nd.array(v, dtype=dtype) for v in values]
        for a in arrays:
            a.attach_grad()
        with mx.autograd.record():
            out = getattr(mx.nd, op)(*arrays, **kwargs)
        if head is None:
            head = rng.uniform(-1, 1, out.shape).astype(np.float32)
        out.backward(mx.nd.array(head, dtype=dtype))
        for (arg, _), a in zip(inputs, arrays):
            saved['%s:in:%s' % (case, arg)] = a
            saved['%s:grad:%s' % (case, arg)] = a.grad
        saved['%s:out' % case] = out
        saved['%s:head' % case] = mx.nd.array(head, dtype=dtype)
        index.append({'name': case, 'op': op, 'kwargs': kwargs, 'dtype': dtype,
                      'inputs': [arg for arg, _ in inputs]})

mx.nd.save(os.path.join(HERE, 'spatial3d.params'), saved)
with open(os.path.join(HERE, 'spatial3d.json'), 'w') as f:
    json.dump({'cases': index}, f, indent=1, sort_keys=True)
    f.write('\n')
print('wrote', len(index), 'cases,', len(saved), 'arrays')
