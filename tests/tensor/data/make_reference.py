#!/usr/bin/env python3
"""Regenerates the MXNet reference files that tests/tensor/params_test.cc reads.

Run with MXNet 1.9.1 (the files in this folder were made with mxnet 1.9.1 and numpy 1.23.5):

    python tests/tensor/data/make_reference.py            # writes next to this script

For every <name>.params written here, <name>.expected.txt holds its content in a plain text form the C++
test parses (so the test needs neither Python nor MXNet at run time):

    # comment lines
    dict | list                       (whether the file stores names)
    name<TAB>dtype<TAB>shape<TAB>values   one line per array, in file order
      name    empty for a list
      dtype   float32 float64 float16 uint8 int32 int8 int64 bool bfloat16
      shape   comma-separated dims; empty for a 0-d (scalar) array
      values  space-separated, C order: integers in decimal, floating point as Python's repr of the value
              converted exactly to float64 (inf, -inf, nan allowed); bfloat16 as its float value

Files:
  mxnet_dict.params     mx.nd.save of a dict: every dtype troupe supports, ndim 1..6, a UTF-8 name (V2)
  mxnet_list.params     mx.nd.save of a list (no names) (V2)
  tiny-0003.params      mx.model.save_checkpoint of FullyConnected + BatchNorm: arg:/aux: names (V2)
  tiny-symbol.json      the checkpoint's symbol (not read by the test; shows where the names come from)
  mxnet_np.params       npx.save under mx.npx.set_np(): V3 records, with a 0-d array and a (0, 3) array
"""
import os
import sys

import mxnet as mx
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
BF16 = np.dtype([('bfloat16', np.uint16)])


def fmt_value(dtype, v):
    if dtype in ('float32', 'float64', 'float16'):
        return repr(float(v))
    if dtype == 'bfloat16':
        bits = int(v[0]) if not np.isscalar(v) else int(v)
        return repr(float(np.array([bits << 16], dtype=np.uint32).view(np.float32)[0]))
    if dtype == 'bool':
        return '1' if v else '0'
    return str(int(v))


def describe(arr):
    """(dtype name, shape, flat host values) of an mx.nd or mx.np array."""
    host = arr.asnumpy()
    if host.dtype == BF16:
        dtype = 'bfloat16'
        flat = host.reshape(-1)['bfloat16']
    else:
        dtype = 'bool' if host.dtype == np.bool_ else str(host.dtype)
        flat = host.reshape(-1)
    return dtype, tuple(arr.shape), flat


def write_expected(name, arrays, names):
    path = os.path.join(HERE, name.replace('.params', '.expected.txt'))
    with open(path, 'w', encoding='utf-8', newline='\n') as f:
        f.write('# expected content of %s, written by make_reference.py with mxnet %s; do not edit\n'
                % (name, mx.__version__))
        f.write('dict\n' if names else 'list\n')
        for i, arr in enumerate(arrays):
            dtype, shape, flat = describe(arr)
            f.write('%s\t%s\t%s\t%s\n' % (names[i] if names else '', dtype, ','.join(str(d) for d in shape),
                                          ' '.join(fmt_value(dtype, v) for v in flat)))


def save_nd(name, arrays, names=None):
    path = os.path.join(HERE, name)
    mx.nd.save(path, dict(zip(names, arrays)) if names else arrays)
    # Check the file reads back as written before recording what it holds.
    back = mx.nd.load(path)
    back_list = [back[n] for n in names] if names else back
    for a, b in zip(arrays, back_list):
        assert a.shape == b.shape and a.asnumpy().tobytes() == b.asnumpy().tobytes()
    write_expected(name, arrays, names)


def main():
    mx.random.seed(7)
    arr = lambda values, dtype, shape: mx.nd.array(np.array(values, dtype=dtype).reshape(shape), dtype=dtype)
    bf16 = mx.nd.array(np.array([1.5, -2.0, 3.25, 0.0078125], dtype=np.float32), dtype='float32').astype(BF16)
    dict_items = [
        ('f32', arr([-1.5, -0.25, 0.0, 0.1, 3.4028234663852886e38, np.inf], np.float32, (2, 3))),
        ('f64', arr([1.0 / 3.0, -2.5e-300, 1e100], np.float64, (3,))),
        ('f16', arr([1.0, -0.5, 65504.0, 2.0 ** -24], np.float16, (2, 2))),
        ('u8', arr([0, 1, 128, 255], np.uint8, (4,))),
        ('i32', arr([-2 ** 31, -1, 0, 2 ** 31 - 1], np.int32, (2, 1, 2))),
        ('i8', arr([-128, 0, 127], np.int8, (3,))),
        ('i64', arr([-2 ** 63, 2 ** 62 + 1], np.int64, (2,))),
        ('bool', arr([True, False, True], np.bool_, (3,))),
        ('bf16', bf16),
        ('deep', arr([1, 2, 3, 4], np.float32, (1, 2, 1, 2, 1, 1))),
        ('arg:emb.weight \u00fc', arr([0.5, 0.25], np.float32, (1, 2))),
    ]
    save_nd('mxnet_dict.params', [a for _, a in dict_items], [n for n, _ in dict_items])
    save_nd('mxnet_list.params', [arr([1, 2, 3], np.float32, (3,)), arr([7, -8, 9, 10], np.int32, (2, 2))])

    # A checkpoint of a tiny net: arg:fc_weight, arg:fc_bias, arg:bn_gamma, arg:bn_beta, aux:bn_moving_*.
    data = mx.sym.Variable('data')
    net = mx.sym.FullyConnected(data, num_hidden=2, name='fc')
    net = mx.sym.BatchNorm(net, name='bn')
    net = mx.sym.SoftmaxOutput(net, name='softmax')
    arg_shapes, _, aux_shapes = net.infer_shape(data=(1, 3))
    args, auxs = {}, {}
    for k, (n, s) in enumerate(zip(net.list_arguments(), arg_shapes)):
        if n in ('data', 'softmax_label'):
            continue
        args[n] = mx.nd.array(np.arange(np.prod(s), dtype=np.float32).reshape(s) * 0.5 - 1.0 + 10 * k)
    for n, s in zip(net.list_auxiliary_states(), aux_shapes):
        auxs[n] = mx.nd.array(np.full(s, 0.75 if 'var' in n else -0.125, dtype=np.float32))
    mx.model.save_checkpoint(os.path.join(HERE, 'tiny'), 3, net, args, auxs)
    loaded = mx.nd.load(os.path.join(HERE, 'tiny-0003.params'))
    names = list(loaded.keys())  # file order
    write_expected('tiny-0003.params', [loaded[n] for n in names], names)

    # NumPy semantics: npx.save writes V3 records (a 0-d array, a zero-size array).
    from mxnet import npx
    npx.set_np()
    np_items = [('scalar', mx.np.array(2.5, dtype=np.float32)),
                ('empty', mx.np.zeros((0, 3), dtype=np.float32)),
                ('m', mx.np.array([[1, -2], [3, -4]], dtype=np.int64))]
    path = os.path.join(HERE, 'mxnet_np.params')
    npx.save(path, dict(np_items))
    back = npx.load(path)
    assert [back[n].shape for n, _ in np_items] == [a.shape for _, a in np_items]
    write_expected('mxnet_np.params', [a for _, a in np_items], [n for n, _ in np_items])
    npx.reset_np()


if __name__ == '__main__':
    sys.exit(main())
