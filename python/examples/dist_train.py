"""A Gluon MLP trained data-parallel on a troupe cluster, written against MXNet 1.x's API:

    troupe launch -n 2 -s 1 -- python dist_train.py --kv-store dist_sync

Each worker trains on its share of Fashion-MNIST (every num_workers-th batch); the servers sum the workers'
gradients and run SGD, so every worker holds the same weights after each step. Each worker prints its rank, its
test accuracy and a checksum of its weights: in dist_sync they agree.
"""
import argparse

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from mxnet.gluon import nn

from common import fashion_mnist, report


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kv-store", default="dist_sync")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--train-samples", type=int, default=6000)
    p.add_argument("--json")
    args = p.parse_args()

    kv = mx.kv.create(args.kv_store)
    x, y = fashion_mnist(True, args.train_samples, flat=True)
    tx, ty = fashion_mnist(False, 1000, flat=True)
    net = nn.HybridSequential()
    with net.name_scope():
        net.add(nn.Dense(64, activation="relu"), nn.Dense(10))
    mx.random.seed(kv.rank)  # different starting weights per worker: the store's (the first init) wins
    net.initialize(mx.init.Xavier())
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1, "momentum": 0.9}, kvstore=kv)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    batch = 100
    for epoch in range(args.epochs):
        for start in range(kv.rank * batch, len(x), kv.num_workers * batch):
            data, label = mx.nd.array(x[start:start + batch]), mx.nd.array(y[start:start + batch])
            with autograd.record():
                loss = loss_fn(net(data), label)
            loss.backward()
            trainer.step(batch)
    acc = float((net(mx.nd.array(tx)).asnumpy().argmax(1) == ty).mean())
    checksum = float(sum(np.abs(p.data().asnumpy()).sum() for p in net.collect_params().values()))
    report(args, {"script": "dist_train", "rank": kv.rank, "num_workers": kv.num_workers, "test_accuracy": acc,
                  "weights_abs_sum": round(checksum, 3)})


if __name__ == "__main__":
    main()
