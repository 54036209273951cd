#!/usr/bin/env python
"""Writes the per-operator reference cases of tests/graph/mxnet_op_cases_test.cc with real MXNet 1.9.1.

Each family of operators has a module cases_<family>.py here that defines CASES, a list of case(...) entries.
For every family this script writes:
  <family>.json    the cases: name, the symbol as MXNet's tojson() writes it, the arguments (name, dtype,
                   whether a gradient is asked for), the number of outputs, whether backward is compared;
  <family>.params  the arrays, as mx.nd.save writes them, named "<case>/arg:<name>", "<case>/out:<i>",
                   "<case>/ograd:<i>" (the head gradient given to backward) and "<case>/grad:<name>".
Forward runs with is_train=True. Backward runs with grad_req 'write' on every floating-point argument the
case asks a gradient for, 'null' on the rest.

Run (MXNet 1.9.1 in a virtual environment; the files are committed, tests never need MXNet):
  /work/mxnet-venv/bin/python tests/graph/data/ops/make_op_cases.py [family ...]
"""
import glob
import importlib
import json
import os
import sys

import mxnet as mx
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

FLOATS = ('float16', 'float32', 'float64')


def case(name, build, inputs, backward=True, no_grad=(), rtol=None, grad_rtol=None):
    """name: unique within the family. build: a function of the input variables (in `inputs` order)
    returning a symbol. inputs: list of (name, array) or (name, shape, dtype[, (lo, hi)]) with random
    values. no_grad: argument names that get no gradient (besides the integer ones)."""
    return dict(name=name, build=build, inputs=inputs, backward=backward, no_grad=set(no_grad),
                rtol=rtol, grad_rtol=grad_rtol)


def make_input(spec, rng):
    if len(spec) == 2:
        return spec[0], np.asarray(spec[1])
    name, shape, dtype = spec[0], spec[1], spec[2]
    lo, hi = spec[3] if len(spec) > 3 else ((-1.0, 1.0) if dtype in FLOATS else (0, 10))
    if dtype in FLOATS:
        return name, rng.uniform(lo, hi, size=shape).astype(dtype)
    return name, rng.randint(lo, hi, size=shape).astype(dtype)


def run_family(family):
    module = importlib.import_module('cases_' + family)
    rng = np.random.RandomState(20261127)
    entries, arrays = [], {}
    names = set()
    for c in module.CASES:
        assert c['name'] not in names, 'duplicate case ' + c['name']
        names.add(c['name'])
        values = [make_input(spec, rng) for spec in c['inputs']]
        variables = [mx.sym.var(n) for n, _ in values]
        sym = c['build'](*variables)
        arg_names = sym.list_arguments()
        given = dict(values)
        assert set(arg_names) == set(given), '%s: arguments %s, inputs %s' % (c['name'], arg_names, list(given))
        args = {n: mx.nd.array(given[n], dtype=given[n].dtype) for n in arg_names}
        wants_grad = {n: c['backward'] and str(given[n].dtype) in FLOATS and n not in c['no_grad'] for n in arg_names}
        grads = {n: mx.nd.zeros(given[n].shape, dtype=given[n].dtype) for n in arg_names if wants_grad[n]}
        req = {n: 'write' if wants_grad[n] else 'null' for n in arg_names}
        exe = sym.bind(mx.cpu(), args=args, args_grad=grads, grad_req=req)
        outs = exe.forward(is_train=True)
        for n in arg_names:
            arrays['%s/arg:%s' % (c['name'], n)] = args[n]
        for i, o in enumerate(outs):
            arrays['%s/out:%d' % (c['name'], i)] = o.copy()
        backward = c['backward'] and any(wants_grad.values())
        if backward:
            ograds = []
            for i, o in enumerate(outs):
                g = mx.nd.array(rng.uniform(-1, 1, size=o.shape).astype(o.dtype) if np.dtype(o.dtype).name in FLOATS
                                else np.zeros(o.shape, dtype=o.dtype), dtype=o.dtype)
                ograds.append(g)
                arrays['%s/ograd:%d' % (c['name'], i)] = g
            exe.backward(ograds)
            for n in arg_names:
                if wants_grad[n]:
                    arrays['%s/grad:%s' % (c['name'], n)] = grads[n].copy()
        entry = dict(name=c['name'], symbol=sym.tojson(),
                     args=[dict(name=n, dtype=str(given[n].dtype), grad=bool(wants_grad[n]) and backward)
                           for n in arg_names],
                     outputs=len(outs), backward=bool(backward))
        if c['rtol'] is not None:
            entry['rtol'] = c['rtol']
        if c['grad_rtol'] is not None:
            entry['grad_rtol'] = c['grad_rtol']
        entries.append(entry)
    with open(os.path.join(HERE, family + '.json'), 'w') as f:
        json.dump(dict(family=family, mxnet=mx.__version__, cases=entries), f, indent=1, sort_keys=True)
        f.write('\n')
    mx.nd.save(os.path.join(HERE, family + '.params'), arrays)
    print('%s: %d cases, %d arrays' % (family, len(entries), len(arrays)))


def main():
    families = sys.argv[1:] or sorted(os.path.basename(p)[len('cases_'):-3]
                                      for p in glob.glob(os.path.join(HERE, 'cases_*.py')))
    for family in families:
        run_family(family)


if __name__ == '__main__':
    main()
