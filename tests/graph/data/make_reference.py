#!/usr/bin/env python
"""Writes the symbol reference files of tests/graph (symbol_json_test) with real MXNet 1.9.1.

For each network NAME: NAME-symbol.json (saved by MXNet) and NAME-ref.txt with what MXNet lists and infers,
one item per line, "<key> <value> <value> ...", values separated by single spaces:
  arguments / outputs / aux_states / internals: names;
  known: "<arg>=<shape>" pairs given to infer_shape; arg_shapes / out_shapes / aux_shapes: shapes,
  a shape written as comma-separated dimensions ("32,784").
Run: /tmp/mxvenv/bin/python tests/graph/data/make_reference.py  (from the repository root or anywhere).

One-off check that MXNet loads troupe's output (not part of CTest):
  TROUPE_SYMBOL_JSON_DUMP=/tmp/dump build/tests/graph/symbol_json_test --gtest_filter=*BuiltInCpp*
  /tmp/mxvenv/bin/python tests/graph/data/make_reference.py --check-troupe /tmp/dump
loads every troupe_*-symbol.json there with mx.sym.load, infers shapes and, where a reference of the same
network exists, compares the lists and shapes with it.
"""
import glob
import os
import sys

import mxnet as mx

HERE = os.path.dirname(os.path.abspath(__file__))


def mlp():
    data = mx.sym.var('data')
    x = mx.sym.FullyConnected(data, num_hidden=128, name='fc1')
    x = mx.sym.Activation(x, act_type='relu', name='relu1')
    x = mx.sym.FullyConnected(x, num_hidden=64, name='fc2')
    x = mx.sym.Activation(x, act_type='relu', name='relu2')
    x = mx.sym.FullyConnected(x, num_hidden=10, name='fc3')
    return mx.sym.SoftmaxOutput(x, name='softmax'), {'data': (32, 784)}


def lenet():
    data = mx.sym.var('data')
    x = mx.sym.Convolution(data, kernel=(5, 5), num_filter=20, name='conv1')
    x = mx.sym.Activation(x, act_type='tanh', name='tanh1')
    x = mx.sym.Pooling(x, pool_type='max', kernel=(2, 2), stride=(2, 2), name='pool1')
    x = mx.sym.Convolution(x, kernel=(5, 5), num_filter=50, name='conv2')
    x = mx.sym.Activation(x, act_type='tanh', name='tanh2')
    x = mx.sym.Pooling(x, pool_type='max', kernel=(2, 2), stride=(2, 2), name='pool2')
    x = mx.sym.Flatten(x, name='flatten')
    x = mx.sym.FullyConnected(x, num_hidden=500, name='fc1')
    x = mx.sym.Activation(x, act_type='tanh', name='tanh3')
    x = mx.sym.FullyConnected(x, num_hidden=10, name='fc2')
    return mx.sym.SoftmaxOutput(x, name='softmax'), {'data': (8, 1, 28, 28)}


def bn_net():
    data = mx.sym.var('data')
    x = mx.sym.Convolution(data, kernel=(3, 3), pad=(1, 1), num_filter=8, no_bias=True, name='conv1')
    x = mx.sym.BatchNorm(x, fix_gamma=False, eps=2e-5, momentum=0.9, name='bn1')
    x = mx.sym.Activation(x, act_type='relu', name='relu1')
    x = mx.sym.Pooling(x, pool_type='avg', kernel=(2, 2), stride=(2, 2), name='pool1')
    x = mx.sym.BatchNorm(x, name='bn2')
    x = mx.sym.Flatten(x, name='flatten')
    x = mx.sym.Dropout(x, p=0.25, name='drop')
    x = mx.sym.FullyConnected(x, num_hidden=10, name='fc')
    return mx.sym.SoftmaxOutput(x, name='softmax'), {'data': (4, 3, 16, 16)}


def attrs_net():
    # Variable attributes (__shape__, lr_mult, wd_mult, init), element-wise arithmetic (operators with
    # aliases), Concat and Reshape.
    data = mx.sym.var('data', shape=(5, 12), lr_mult=0.0)
    w = mx.sym.var('shared_weight', lr_mult=2.0, wd_mult=0.5, init=mx.init.Xavier())
    a = mx.sym.FullyConnected(data, weight=w, num_hidden=6, no_bias=True, name='fa')
    b = mx.sym.FullyConnected(data, weight=w, num_hidden=6, no_bias=True, name='fb')
    s = (a + b) * 2.0
    c = mx.sym.Concat(s, a, dim=1, name='cat')
    r = mx.sym.Reshape(c, shape=(0, 3, -1), name='reshape')
    return mx.sym.sum(r, axis=2, name='total'), {}


def group_net():
    data = mx.sym.var('data')
    fc1 = mx.sym.FullyConnected(data, num_hidden=7, name='fc1')
    act = mx.sym.Activation(fc1, act_type='sigmoid', name='sig')
    fc2 = mx.sym.FullyConnected(act, num_hidden=3, name='fc2')
    loss = mx.sym.SoftmaxOutput(fc2, name='softmax')
    return mx.sym.Group([loss, fc1, act]), {'data': (6, 4)}


def shape_text(s):
    return ','.join(str(d) for d in s)


def main():
    nets = {'mlp': mlp, 'lenet': lenet, 'bn': bn_net, 'attrs': attrs_net, 'group': group_net}
    for name, fn in nets.items():
        sym, known = fn()
        sym.save(os.path.join(HERE, name + '-symbol.json'))
        arg, out, aux = sym.infer_shape(**known)
        lines = [
            ['arguments'] + sym.list_arguments(),
            ['outputs'] + sym.list_outputs(),
            ['aux_states'] + sym.list_auxiliary_states(),
            ['internals'] + sym.get_internals().list_outputs(),
            ['known'] + ['%s=%s' % (k, shape_text(v)) for k, v in sorted(known.items())],
            ['arg_shapes'] + [shape_text(x) for x in arg],
            ['out_shapes'] + [shape_text(x) for x in out],
            ['aux_shapes'] + [shape_text(x) for x in aux],
        ]
        with open(os.path.join(HERE, name + '-ref.txt'), 'w') as f:
            for line in lines:
                f.write(' '.join(line) + '\n')
        print(name, 'ok')


def check_troupe(folder):
    known = {'mlp': {'data': (32, 784)}, 'lenet': {'data': (8, 1, 28, 28)}, 'bn': {'data': (4, 3, 16, 16)},
             'attrs': {}, 'group': {'data': (6, 4)}}
    nets = {'mlp': mlp, 'lenet': lenet, 'bn': bn_net, 'attrs': attrs_net, 'group': group_net}
    files = sorted(glob.glob(os.path.join(folder, 'troupe_*-symbol.json')))
    assert files, 'no troupe_*-symbol.json in ' + folder
    for path in files:
        name = os.path.basename(path)[len('troupe_'):-len('-symbol.json')]
        sym = mx.sym.load(path)
        arg, out, aux = sym.infer_shape(**known[name])
        ref, _ = nets[name]()
        rarg, rout, raux = ref.infer_shape(**known[name])
        same = (sym.list_arguments() == ref.list_arguments() and sym.list_outputs() == ref.list_outputs() and
                sym.list_auxiliary_states() == ref.list_auxiliary_states() and
                (arg, out, aux) == (rarg, rout, raux))
        print(name, 'loaded by MXNet', mx.__version__, '; outputs', out, '; same as reference:', same)
        if name != 'mlp':  # models::MLP has a Flatten node and other layer sizes than make_reference's mlp
            assert same, name


if __name__ == '__main__':
    if len(sys.argv) == 3 and sys.argv[1] == '--check-troupe':
        check_troupe(sys.argv[2])
    else:
        main()
