"""Times a Gluon LeNet training loop (Fashion-MNIST, SGD with momentum) in troupe's Python package or in MXNet
1.9.1, the same script for both:

    PYTHONPATH=build/python build/python-env/bin/python bench/python/gluon_lenet.py --framework troupe
    /path/to/mxnet-venv/bin/python bench/python/gluon_lenet.py --framework mxnet

The batches are NDArrays made before the clock starts, so the figure is the training step's: forward, softmax
cross-entropy, backward and the Trainer's update, recorded with autograd (hybridized unless --imperative). It
prints one JSON line: images per second over the timed batches, and the loss at the end.
"""
import argparse
import gzip
import importlib
import json
import os
import time

import numpy as np

DATA = "/usr/share/datasets/fashion-mnist"


def load(n):
    with gzip.open(os.path.join(DATA, "train-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)[:n].astype(np.float32) / 255
    with gzip.open(os.path.join(DATA, "train-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)[:n].astype(np.float32)
    return x, y


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--framework", choices=["troupe", "mxnet"], required=True)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--batches", type=int, default=60, help="timed batches")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3, help="timed repetitions; the best is reported with all")
    p.add_argument("--imperative", action="store_true", help="do not hybridize")
    args = p.parse_args()
    mx = importlib.import_module(args.framework)
    from_gluon = importlib.import_module(args.framework + ".gluon")
    nn = from_gluon.nn
    mx.random.seed(1)
    np.random.seed(1)

    n = args.batch_size * (args.batches + args.warmup)
    x, y = load(n)
    batches = [(mx.nd.array(x[i:i + args.batch_size]), mx.nd.array(y[i:i + args.batch_size]))
               for i in range(0, n, args.batch_size)]
    net = nn.HybridSequential()
    with net.name_scope():
        net.add(nn.Conv2D(20, 5, activation="relu"), nn.MaxPool2D(2, 2), nn.Conv2D(50, 5, activation="relu"),
                nn.MaxPool2D(2, 2), nn.Flatten(), nn.Dense(500, activation="relu"), nn.Dense(10))
    net.initialize(mx.init.Xavier())
    if not args.imperative:
        net.hybridize(static_alloc=True, static_shape=True)
    loss_fn = from_gluon.loss.SoftmaxCrossEntropyLoss()
    trainer = from_gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.05, "momentum": 0.9})

    def step(data, label):
        with mx.autograd.record():
            loss = loss_fn(net(data), label)
        loss.backward()
        trainer.step(data.shape[0])
        return loss

    for data, label in batches[:args.warmup]:
        step(data, label)
    mx.nd.waitall()
    rates = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        for data, label in batches[args.warmup:]:
            loss = step(data, label)
        mx.nd.waitall()
        rates.append(args.batches * args.batch_size / (time.perf_counter() - start))
    print(json.dumps({"framework": args.framework, "hybridized": not args.imperative, "batch_size": args.batch_size,
                      "images_per_sec": round(max(rates), 1), "rounds": [round(r, 1) for r in rates],
                      "final_loss": float(loss.mean().asscalar())}))


if __name__ == "__main__":
    main()
