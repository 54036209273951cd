"""Loads a model another framework exported (gluon_cnn.py --export PREFIX) with SymbolBlock.imports and checks
that it predicts what the exporter predicted on the same batch. Written against MXNet 1.x's API.

    python reimport.py PREFIX
"""
import sys

import mxnet as mx
import numpy as np
from mxnet import gluon


def main():
    prefix = sys.argv[1]
    block = gluon.SymbolBlock.imports(prefix + "-symbol.json", ["data"], prefix + "-0000.params")
    saved = mx.nd.load(prefix + "-inputs.params")
    out = block(saved["data"]).asnumpy()
    diff = float(np.abs(out - saved["out"].asnumpy()).max())
    scale = float(np.abs(saved["out"].asnumpy()).max())
    print("reimport: largest difference %.3g (outputs up to %.3g)" % (diff, scale))
    sys.exit(0 if diff <= 1e-4 * max(1.0, scale) else 1)


if __name__ == "__main__":
    main()
