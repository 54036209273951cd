#!/usr/bin/env python
"""Writes the whole-model reference cases of tests/graph/mxnet_model_cases_test.cc with real MXNet 1.9.1.

For every model: <name>-symbol.json (the network as MXNet exports it: hybridize(), a forward, export()) and
<name>-io.params (the inputs as "in:<name>", MXNet's outputs as "out:<k>"), and an entry in models.json
(name, outputs, optional rtol and sorted_rows: outputs compared as sets of rows). Parameters and auxiliary
states are not stored: both sides fill them with param_value() (the test's ModelParamValue must stay the
same formula), so a large model costs only its symbol file.

Run (MXNet 1.9.1, and GluonCV 0.10.5 / GluonNLP 0.10.0 for their families, in a virtual environment; the
files are committed, tests never need MXNet):
  /work/mxnet-venv/bin/python tests/graph/data/models/make_model_cases.py [name ...]
"""
import json
import math
import os
import sys
import tempfile

import mxnet as mx
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def param_value(name, shape):
    """Element values of parameter `name` (float64), the formula of the test's ModelParamValue: a
    well-spread u in [-1, 1) from integer arithmetic (exact on both sides), scaled by the kind of array."""
    h = 0
    for k, b in enumerate(name.encode()):
        h = (h + (k + 1) * b) % 997
    n = int(np.prod(shape)) if len(shape) else 1
    bits = (np.arange(n, dtype=np.uint64) * np.uint64(2654435761) + np.uint64(h * 40503 + 12345)) % np.uint64(2 ** 32)
    u = bits.astype(np.float64) / 4294967296.0 * 2.0 - 1.0
    if name.endswith('var'):
        v = 0.75 + 0.25 * u
    elif name.endswith('gamma'):
        v = 1.0 + 0.1 * u
    elif name.endswith('beta') or name.endswith('bias') or name.endswith('mean'):
        v = 0.01 * u
    elif len(shape) >= 2 and shape[0] > 0:
        fan_in = n // shape[0]
        v = u * math.sqrt(3.0 / max(1.0, fan_in))
    else:
        v = 0.1 * u
    return v.reshape(shape)


def export_block(block, inputs):
    """Hybridizes and exports a Gluon block; returns the symbol (as MXNet reloads it)."""
    block.hybridize()
    block(*[mx.nd.array(v, dtype=v.dtype) for v in inputs.values()])
    with tempfile.TemporaryDirectory() as d:
        prefix = os.path.join(d, 'net')
        block.export(prefix)
        return mx.sym.load(prefix + '-symbol.json')


def run_symbol(sym, inputs):
    """Forward in inference mode with every parameter filled by param_value; returns the outputs."""
    arg_shapes, _, aux_shapes = sym.infer_shape(**{k: v.shape for k, v in inputs.items()})
    arg_types, _, aux_types = sym.infer_type(**{k: v.dtype for k, v in inputs.items()})
    args = {}
    for n, s, t in zip(sym.list_arguments(), arg_shapes, arg_types):
        args[n] = mx.nd.array(inputs[n], dtype=inputs[n].dtype) if n in inputs else \
            mx.nd.array(param_value(n, s), dtype=t)
    aux = {n: mx.nd.array(param_value(n, s), dtype=t) for n, s, t in zip(sym.list_auxiliary_states(), aux_shapes, aux_types)}
    exe = sym.bind(mx.cpu(), args=args, aux_states=aux, grad_req='null')
    return [o.copy() for o in exe.forward(is_train=False)]


def model_zoo(name, size=32, classes=10, **kw):
    def build():
        net = mx.gluon.model_zoo.vision.get_model(name, classes=classes, **kw)
        net.initialize()
        return net, {'data': np.random.RandomState(1).uniform(-1, 1, size=(1, 3, size, size)).astype('float32')}
    return build


# name -> (builder returning (block, inputs)), options for models.json
MODELS = {
    'resnet18_v1': (model_zoo('resnet18_v1'), {}),
}


def main():
    names = sys.argv[1:] or sorted(MODELS)
    index_path = os.path.join(HERE, 'models.json')
    index = json.load(open(index_path)) if os.path.exists(index_path) else {'cases': []}
    entries = {c['name']: c for c in index['cases']}
    for name in names:
        build, options = MODELS[name]
        block, inputs = build()
        sym = export_block(block, inputs)
        outs = run_symbol(sym, inputs)
        sym.save(os.path.join(HERE, name + '-symbol.json'))
        arrays = {'in:' + k: mx.nd.array(v, dtype=v.dtype) for k, v in inputs.items()}
        arrays.update({'out:%d' % k: o for k, o in enumerate(outs)})
        mx.nd.save(os.path.join(HERE, name + '-io.params'), arrays)
        entries[name] = dict(name=name, outputs=len(outs), **options)
        print('%s: %d outputs, symbol %d bytes' % (name, len(outs), os.path.getsize(os.path.join(HERE, name + '-symbol.json'))))
    with open(index_path, 'w') as f:
        json.dump(dict(mxnet=mx.__version__, cases=[entries[k] for k in sorted(entries)]), f, indent=1, sort_keys=True)
        f.write('\n')


if __name__ == '__main__':
    main()
