"""A small CNN trained with Gluon (autograd, Trainer) on Fashion-MNIST, hybridized, then exported: written against
MXNet 1.x's API (runs in MXNet 1.9.1, and in troupe through the mxnet alias). Starting weights from NumPy and
batches in file order make both frameworks follow the same path up to float rounding.

    python gluon_cnn.py [--epochs 2] [--export prefix] [--json results.json]

--export writes prefix-symbol.json and prefix-0000.params (gluon's export) and prefix-inputs.params (the test
batch it predicts on); reimport.py loads them in the other framework.
"""
import argparse

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from mxnet.gluon import nn

from common import fashion_mnist, initial_values, report


def build():
    net = nn.HybridSequential(prefix="cnn_")
    with net.name_scope():
        net.add(nn.Conv2D(8, 3, padding=1), nn.BatchNorm(), nn.Activation("relu"), nn.MaxPool2D(2),
                nn.Conv2D(16, 3), nn.Activation("relu"), nn.MaxPool2D(2), nn.Flatten(),
                nn.Dense(64, activation="relu"), nn.Dense(10))
    return net


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--train-samples", type=int, default=6000)
    p.add_argument("--export")
    p.add_argument("--json")
    args = p.parse_args()

    x, y = fashion_mnist(True, args.train_samples)
    tx, ty = fashion_mnist(False, 1000)
    net = build()
    net.initialize(ctx=mx.cpu())
    net(mx.nd.array(x[:2]))  # deferred shapes
    params = net.collect_params()
    start = initial_values({name: p.shape for name, p in params.items()})
    for name, p in params.items():
        p.set_data(mx.nd.array(start[name]))
    net.hybridize()
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = gluon.Trainer(params, "sgd", {"learning_rate": 0.05, "momentum": 0.9, "wd": 1e-4})
    first_loss = None
    for epoch in range(args.epochs):
        total = 0.0
        for i in range(0, len(x), 100):
            data, label = mx.nd.array(x[i:i + 100]), mx.nd.array(y[i:i + 100])
            with autograd.record():
                loss = loss_fn(net(data), label)
            loss.backward()
            trainer.step(data.shape[0])
            value = float(loss.mean().asscalar())
            first_loss = value if first_loss is None else first_loss
            total += value
        print("epoch %d: mean loss %.4f" % (epoch, total / (len(x) // 100)))
    out = net(mx.nd.array(tx)).asnumpy()
    acc = float((out.argmax(axis=1) == ty).mean())
    if args.export:
        net.export(args.export)
        mx.nd.save(args.export + "-inputs.params", {"data": mx.nd.array(tx[:16]), "out": mx.nd.array(out[:16])})
    report(args, {"script": "gluon_cnn", "test_accuracy": round(acc, 6), "first_batch_loss": round(first_loss, 6),
                  "first_logits": [round(float(v), 4) for v in out[0]]})


if __name__ == "__main__":
    main()
