#!/usr/bin/env python
"""Writes the training-mode reference cases of tests/graph/mxnet_model_cases_test.cc (TrainStep) with real
MXNet 1.9.1: a forward with is_train=True (BatchNorm on the batch's statistics, updating its moving ones) and a
backward through SoftmaxOutput, for networks of models.json (their <name>-symbol.json) and a few more.

For every case: <name>-train.params holds the labels ("in:softmax_label"), the probabilities ("out:0"), every
auxiliary state after the forward ("aux:<name>") and, for every parameter, a digest of its gradient
("grad:<name>": its largest magnitude, its L2 norm, then up to 61 elements at evenly spread positions), so that a network of millions of weights costs a few kilobytes. Parameters, auxiliary states and
the image input are filled by make_model_cases.py's formulas (param_value, input_value), as the inference
cases are; train.json indexes the cases.

  /work/mxnet-venv/bin/python tests/graph/data/models/make_train_cases.py
"""
import json
import os
import sys

import mxnet as mx
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_model_cases import HERE, export_block, input_value, param_value  # noqa: E402

SAMPLES = 61


def cifar_resnet20():
    from gluoncv.model_zoo import get_model
    net = get_model('cifar_resnet20_v1', classes=10)
    net.initialize()
    with mx.name.NameManager():
        return export_block(net, {'data': np.zeros((1, 1, 28, 28), 'float32')})


# name -> (symbol loader, data shape, classes, dtype)
CASES = {
    'cifar_resnet20_v1': (cifar_resnet20, (4, 1, 28, 28), 10, 'float32'),
    'resnet18_v1': (lambda: mx.sym.load(os.path.join(HERE, 'resnet18_v1-symbol.json')), (4, 3, 32, 32), 10, 'float32'),
    'mobilenet0.25': (lambda: mx.sym.load(os.path.join(HERE, 'mobilenet0.25-symbol.json')), (8, 3, 64, 64), 10, 'float64'),
}


def digest(g):
    flat = g.reshape(-1).astype(np.float64)
    pos = np.unique(np.linspace(0, flat.size - 1, min(SAMPLES, flat.size)).astype(np.int64))
    return np.concatenate([[np.abs(flat).max(), np.sqrt((flat * flat).sum())], flat[pos]])


def main():
    index = {}
    for name in sys.argv[1:] or sorted(CASES):
        load, shape, classes, dtype = CASES[name]
        sym = load()
        if name == 'cifar_resnet20_v1':
            sym.save(os.path.join(HERE, name + '-symbol.json'))
        net = mx.sym.SoftmaxOutput(sym, name='softmax')
        labels = (np.arange(shape[0]) * 3 % classes).astype('float32')
        data = input_value('data', shape)
        arg_shapes, _, aux_shapes = net.infer_shape(data=shape, softmax_label=(shape[0],))
        args, grads = {}, {}
        for n, s in zip(net.list_arguments(), arg_shapes):
            if n == 'data':
                args[n] = mx.nd.array(data, dtype=dtype)
            elif n == 'softmax_label':
                args[n] = mx.nd.array(labels, dtype=dtype)
            else:
                args[n] = mx.nd.array(param_value(n, s), dtype=dtype)
                grads[n] = mx.nd.zeros(s, dtype=dtype)
        aux = {n: mx.nd.array(param_value(n, s), dtype=dtype) for n, s in zip(net.list_auxiliary_states(), aux_shapes)}
        exe = net.bind(mx.cpu(), args=args, args_grad=grads, aux_states=aux,
                       grad_req={n: ('write' if n in grads else 'null') for n in args})
        out = exe.forward(is_train=True)[0].copy()
        exe.backward()
        arrays = {'in:softmax_label': mx.nd.array(labels), 'out:0': out}
        arrays.update({'aux:' + n: a for n, a in exe.aux_dict.items()})
        arrays.update({'grad:' + n: mx.nd.array(digest(g.asnumpy()), dtype='float64') for n, g in grads.items()})
        path = os.path.join(HERE, name + '-train.params')
        mx.nd.save(path, arrays)
        index[name] = dict(name=name, data=list(shape), dtype=dtype)
        print('%s: %d parameters, %d auxiliary states, %d bytes' % (name, len(grads), len(aux), os.path.getsize(path)))
    path = os.path.join(HERE, 'train.json')
    old = json.load(open(path))['cases'] if os.path.exists(path) else []
    merged = {c['name']: c for c in old}
    merged.update(index)
    with open(path, 'w') as f:
        json.dump(dict(mxnet=mx.__version__, cases=[merged[k] for k in sorted(merged)]), f, indent=1, sort_keys=True)
        f.write('\n')


if __name__ == '__main__':
    main()
