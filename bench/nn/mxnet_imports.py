"""Loads a block troupe exported (gluon_style_cnn --export PREFIX, or HybridBlock::Export) into MXNet 1.9.1
with SymbolBlock.imports and compares MXNet's outputs with troupe's on the same batch (PREFIX-check.params:
"data" and troupe's "output").

Usage (MXNet 1.9.1 in a venv: pip install mxnet==1.9.1 "numpy<1.24"):
    python mxnet_imports.py PREFIX EPOCH
Prints the largest absolute and relative difference and whether the argmax agrees; exits 1 above 1e-4.
"""
import sys

import mxnet as mx
import numpy as np


def main():
    prefix, epoch = sys.argv[1], int(sys.argv[2])
    net = mx.gluon.SymbolBlock.imports(prefix + '-symbol.json', ['data'], '%s-%04d.params' % (prefix, epoch))
    check = mx.nd.load(prefix + '-check.params')
    ours = check['output'].asnumpy()
    theirs = net(check['data']).asnumpy()
    diff = np.abs(ours - theirs).max()
    rel = diff / max(1e-12, np.abs(theirs).max())
    same = (ours.argmax(axis=1) == theirs.argmax(axis=1)).mean()
    print('MXNet %s SymbolBlock.imports: outputs %s, max |troupe - mxnet| %.3g (relative %.3g), argmax agrees on '
          '%.1f%% of the batch' % (mx.__version__, theirs.shape, diff, rel, 100 * same))
    return 0 if rel <= 1e-4 else 1


if __name__ == '__main__':
    sys.exit(main())
