"""KVStore push/pull with an optimizer on the store, written against MXNet 1.x's API.

    python kvstore_push_pull.py [--json results.json]
"""
import argparse

import mxnet as mx
import numpy as np

from common import report


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--json")
    args = p.parse_args()
    kv = mx.kv.create("local")
    shape = (2, 3)
    kv.init(3, mx.nd.ones(shape))
    kv.init([5, 7], [mx.nd.ones(shape) * 2, mx.nd.ones(shape) * 3])
    # Values pushed together are summed.
    kv.push(3, [mx.nd.ones(shape) * 4, mx.nd.ones(shape) * 5])
    a = mx.nd.zeros(shape)
    kv.pull(3, out=a)
    kv.push([5, 7], [mx.nd.ones(shape), mx.nd.ones(shape) * 10])
    b, c = mx.nd.zeros(shape), mx.nd.zeros(shape)
    kv.pull([5, 7], out=[b, c])
    # With an optimizer the pushed sum is a gradient.
    kv.set_optimizer(mx.optimizer.SGD(learning_rate=0.1, momentum=0.9, wd=0.01))
    for step in range(3):
        kv.push(3, mx.nd.array(np.arange(6).reshape(shape) * (step + 1)))
    d = mx.nd.zeros(shape)
    kv.pull(3, out=d)
    report(args, {"script": "kvstore_push_pull", "rank": kv.rank, "num_workers": kv.num_workers,
                  "sum": a.asnumpy().tolist(), "multi": [b.asnumpy().tolist(), c.asnumpy().tolist()],
                  "after_sgd": [[round(v, 5) for v in row] for row in d.asnumpy().tolist()]})


if __name__ == "__main__":
    main()
