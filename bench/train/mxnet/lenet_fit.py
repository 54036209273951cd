#!/usr/bin/env python3
"""MXNet 1.9.1's Module.fit on the LeNet that `troupe train --model lenet` trains, as a benchmark anchor
(--model resnet18: Gluon's resnet18_v1 with thumbnail=True, the network of `troupe train --model resnet18`).

Same network (conv 5x5x20, tanh, max-pool 2, conv 5x5x50, tanh, max-pool 2, fc 500, tanh, fc 10, softmax),
same data (Debian's dataset-fashion-mnist, pixels / 255, no shuffle), batch 100, SGD lr 0.05 momentum 0.9,
Xavier-like uniform init. Prints one JSON line: images/s of each epoch (wall time of the epoch's fit loop,
without evaluation) and the final test accuracy.

    /work/mxnet-venv/bin/python bench/train/mxnet/lenet_fit.py --epochs 2
    # thread budget: MXNET_CPU_WORKER_NTHREADS (engine workers) and OMP_NUM_THREADS (MKLDNN/OpenMP), set by
    # bench/train/mxnet/run_pairs.sh to the same as troupe's (1 worker, 2 BLAS threads on 2 cores)

MXNet is an anchor only: nothing builds or tests against it.
"""
import argparse
import gzip
import json
import os
import time

import mxnet as mx
import numpy as np

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(name):
    with gzip.open(os.path.join(DATA, name), "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def lenet():
    x = mx.sym.Variable("data")
    x = mx.sym.Convolution(x, kernel=(5, 5), num_filter=20, name="conv1")
    x = mx.sym.Activation(x, act_type="tanh")
    x = mx.sym.Pooling(x, pool_type="max", kernel=(2, 2), stride=(2, 2))
    x = mx.sym.Convolution(x, kernel=(5, 5), num_filter=50, name="conv2")
    x = mx.sym.Activation(x, act_type="tanh")
    x = mx.sym.Pooling(x, pool_type="max", kernel=(2, 2), stride=(2, 2))
    x = mx.sym.Flatten(x)
    x = mx.sym.FullyConnected(x, num_hidden=500, name="fc1")
    x = mx.sym.Activation(x, act_type="tanh")
    x = mx.sym.FullyConnected(x, num_hidden=10, name="fc2")
    return mx.sym.SoftmaxOutput(x, name="softmax")


def resnet18():
    from mxnet.gluon.model_zoo import vision
    net = vision.resnet18_v1(thumbnail=True, classes=10)
    net.hybridize()
    out = net(mx.sym.Variable("data"))
    return mx.sym.SoftmaxOutput(out, name="softmax")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=100)
    ap.add_argument("--model", choices=["lenet", "resnet18"], default="lenet")
    ap.add_argument("--train-images", type=int, default=0, help="train on the first N images (0: all)")
    ap.add_argument("--test-images", type=int, default=0, help="test on the first N images (0: all)")
    a = ap.parse_args()
    xtr = read_idx("train-images-idx3-ubyte.gz").reshape(-1, 1, 28, 28).astype(np.float32) / 255
    ytr = read_idx("train-labels-idx1-ubyte.gz").astype(np.float32)
    if a.train_images:
        xtr, ytr = xtr[:a.train_images], ytr[:a.train_images]
    xte = read_idx("t10k-images-idx3-ubyte.gz").reshape(-1, 1, 28, 28).astype(np.float32) / 255
    yte = read_idx("t10k-labels-idx1-ubyte.gz").astype(np.float32)
    if a.test_images:
        xte, yte = xte[:a.test_images], yte[:a.test_images]
    train = mx.io.NDArrayIter(xtr, ytr, a.batch_size, shuffle=False)
    test = mx.io.NDArrayIter(xte, yte, a.batch_size)
    mod = mx.mod.Module(lenet() if a.model == "lenet" else resnet18(), context=mx.cpu())
    mod.bind(train.provide_data, train.provide_label)
    mx.random.seed(1)
    mod.init_params(mx.init.Xavier(magnitude=2.0))
    mod.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": 0.05, "momentum": 0.9})
    metric = mx.metric.Accuracy()
    rates = []
    for epoch in range(a.epochs):
        train.reset()
        metric.reset()
        start = time.perf_counter()
        n = 0
        for batch in train:
            mod.forward_backward(batch)
            mod.update()
            mod.update_metric(metric, batch.label)
            n += batch.data[0].shape[0]
        mx.nd.waitall()
        rates.append(n / (time.perf_counter() - start))
    acc = mod.score(test, mx.metric.Accuracy())[0][1]
    print(json.dumps({"anchor": "mxnet-1.9.1 Module " + a.model, "images_per_s": rates, "test_accuracy": acc,
                      "MXNET_CPU_WORKER_NTHREADS": os.environ.get("MXNET_CPU_WORKER_NTHREADS"),
                      "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "mkldnn": mx.runtime.Features().is_enabled("MKLDNN")}))


if __name__ == "__main__":
    main()
