"""Generates families.json + families.params: first-order gradients through MXNet 1.9.1's mx.autograd, one small
case per operator family that the other autograd fixtures do not cover (reductions, broadcasting, layout,
joining and splitting, batch_dot, take, clip, the regression and softmax outputs, tiling, slicing,
normalisation, padding, upsampling).

Each case records one operator call, mx.nd.<op>(*inputs, **kwargs), on random inputs that are all variables
(except integer inputs, which are constants), and calls backward with a random head gradient per output (loss
outputs such as SoftmaxOutput ignore it). families.json lists the cases (operator, parameters as MXNet strings,
input shapes and which are integer); families.params holds '<case>:in:<i>', '<case>:head:<k>' and
'<case>:grad:<i>'. autograd_test.cc runs each case through troupe's Invoke under autograd and compares.

Run with MXNet 1.9.1 (pip install mxnet==1.9.1 "numpy<1.24"):  python make_families.py
"""
import json
import os

import mxnet as mx
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
rng = np.random.RandomState(23)

# name -> (operator, kwargs, [(shape, kind)]) with kind 'x' (a variable, uniform in [-1, 1]), 'pos' (a
# variable in [0.5, 1.5]) or 'int:<n>' (integer constant in [0, n)).
CASES = [
    ('sum_keepdims', 'sum', {'axis': '1', 'keepdims': 'True'}, [((3, 4, 2), 'x')]),
    ('max_axis0', 'max', {'axis': '0'}, [((3, 4), 'x')]),
    ('mean_two_axes', 'mean', {'axis': '(0, 2)'}, [((2, 3, 4), 'x')]),
    ('prod_axis1', 'prod', {'axis': '1'}, [((3, 4), 'pos')]),
    ('broadcast_add', 'broadcast_add', {}, [((3, 1, 4), 'x'), ((1, 5, 4), 'x')]),
    ('broadcast_sub', 'broadcast_sub', {}, [((3, 4), 'x'), ((1, 4), 'x')]),
    ('broadcast_mul', 'broadcast_mul', {}, [((2, 3, 1), 'x'), ((2, 1, 4), 'x')]),
    ('broadcast_div', 'broadcast_div', {}, [((3, 4), 'x'), ((3, 1), 'pos')]),
    ('transpose', 'transpose', {'axes': '(1, 0, 2)'}, [((2, 3, 4), 'x')]),
    ('swapaxis', 'SwapAxis', {'dim1': '0', 'dim2': '2'}, [((2, 3, 4), 'x')]),
    ('expand_dims', 'expand_dims', {'axis': '1'}, [((3, 4), 'x')]),
    ('concat', 'Concat', {'dim': '1', 'num_args': '2'}, [((2, 3), 'x'), ((2, 5), 'x')]),
    ('split', 'SliceChannel', {'num_outputs': '2', 'axis': '1'}, [((2, 6), 'x')]),
    ('stack', 'stack', {'axis': '1', 'num_args': '2'}, [((2, 3), 'x'), ((2, 3), 'x')]),
    ('batch_dot', 'batch_dot', {}, [((2, 3, 4), 'x'), ((2, 4, 5), 'x')]),
    ('batch_dot_tb', 'batch_dot', {'transpose_b': 'True'}, [((2, 3, 4), 'x'), ((2, 5, 4), 'x')]),
    ('take', 'take', {'axis': '0'}, [((5, 3), 'x'), ((4,), 'int:5')]),
    ('clip', 'clip', {'a_min': '-0.5', 'a_max': '0.5'}, [((4, 5), 'x')]),
    ('softmax_output', 'SoftmaxOutput', {}, [((4, 5), 'x'), ((4,), 'int:5')]),
    ('linear_regression', 'LinearRegressionOutput', {}, [((4, 3), 'x'), ((4, 3), 'x')]),
    ('tile', 'tile', {'reps': '(2, 1)'}, [((2, 3), 'x')]),
    ('repeat', 'repeat', {'repeats': '2', 'axis': '1'}, [((2, 3), 'x')]),
    ('slice', 'slice', {'begin': '(0, 1)', 'end': '(2, 3)'}, [((3, 4), 'x')]),
    ('l2_normalization', 'L2Normalization', {}, [((3, 4), 'x')]),
    ('smooth_l1', 'smooth_l1', {'scalar': '1.0'}, [((4, 5), 'x')]),
    ('pad', 'Pad', {'mode': 'constant', 'pad_width': '(0, 0, 0, 0, 1, 2, 2, 1)', 'constant_value': '0.5'},
     [((1, 2, 3, 3), 'x')]),
    ('upsampling', 'UpSampling', {'scale': '2', 'sample_type': 'nearest', 'num_args': '1'}, [((1, 2, 3, 3), 'x')]),
    ('softmax_temperature', 'softmax', {'axis': '0', 'temperature': '2.0'}, [((3, 4), 'x')]),
    ('where', 'where', {}, [((3, 4), 'int:2'), ((3, 4), 'x'), ((3, 4), 'x')]),
]

saved, index = {}, []
for name, op, kwargs, inputs in CASES:
    arrays, variables = [], []
    for i, (shape, kind) in enumerate(inputs):
        if kind.startswith('int:'):
            a = mx.nd.array(rng.randint(0, int(kind[4:]), shape).astype(np.float32))
        else:
            lo, hi = (0.5, 1.5) if kind == 'pos' else (-1.0, 1.0)
            a = mx.nd.array(rng.uniform(lo, hi, shape).astype(np.float32))
            a.attach_grad()
            variables.append(i)
        saved['%s:in:%d' % (name, i)] = a.copy()
        arrays.append(a)
    with mx.autograd.record():
        out = getattr(mx.nd, op)(*arrays, **kwargs)
    outs = out if isinstance(out, (list, tuple)) else [out]
    heads = [mx.nd.array(rng.uniform(-1, 1, o.shape).astype(np.float32)) for o in outs]
    mx.autograd.backward(outs, heads)
    for k, h in enumerate(heads):
        saved['%s:head:%d' % (name, k)] = h
    for k, o in enumerate(outs):
        saved['%s:out:%d' % (name, k)] = o
    for i in variables:
        saved['%s:grad:%d' % (name, i)] = arrays[i].grad.copy()
    index.append({'name': name, 'op': op, 'kwargs': kwargs, 'outputs': len(outs),
                  'inputs': [{'shape': list(s), 'integer': k.startswith('int:')} for s, k in inputs]})

mx.nd.save(os.path.join(HERE, 'families.params'), saved)
with open(os.path.join(HERE, 'families.json'), 'w') as f:
    json.dump({'cases': index}, f, indent=1)
print('wrote', len(index), 'cases,', len(saved), 'arrays')
