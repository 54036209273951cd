"""An MLP trained with the Module on Fashion-MNIST, written against MXNet 1.x's API (runs in MXNet 1.9.1, and in
troupe through the mxnet alias). The starting weights come from NumPy and the batches are in file order, so both
frameworks follow the same path up to float rounding.

    python module_mlp.py [--epochs 3] [--json results.json]
"""
import argparse
import logging

import mxnet as mx
import numpy as np

from common import fashion_mnist, initial_values, report


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--train-samples", type=int, default=10000)
    p.add_argument("--json")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    x, y = fashion_mnist(True, args.train_samples, flat=True)
    tx, ty = fashion_mnist(False, 2000, flat=True)
    train = mx.io.NDArrayIter(x, y, batch_size=100)
    test = mx.io.NDArrayIter(tx, ty, batch_size=100)

    data = mx.sym.var("data")
    net = mx.sym.FullyConnected(data, num_hidden=128, name="fc1")
    net = mx.sym.Activation(net, act_type="relu", name="relu1")
    net = mx.sym.FullyConnected(net, num_hidden=10, name="fc2")
    net = mx.sym.SoftmaxOutput(net, name="softmax")

    shapes, _, _ = net.infer_shape(data=(100, 784))
    params = {n: s for n, s in zip(net.list_arguments(), shapes) if n not in ("data", "softmax_label")}
    arg_params = {k: mx.nd.array(v) for k, v in initial_values(params).items()}

    mod = mx.mod.Module(net, context=mx.cpu())
    train_acc = []
    mod.fit(train, eval_data=test, num_epoch=args.epochs, optimizer="sgd",
            optimizer_params={"learning_rate": 0.1, "momentum": 0.9}, arg_params=arg_params,
            eval_metric="acc", epoch_end_callback=lambda epoch, *a: train_acc.append(epoch),
            batch_end_callback=mx.callback.Speedometer(100, 50))
    acc = dict(mod.score(test, "acc"))["accuracy"]
    ce = dict(mod.score(test, "ce"))["cross-entropy"]
    probs = mod.predict(test).asnumpy()
    report(args, {"script": "module_mlp", "test_accuracy": round(acc, 6), "test_cross_entropy": round(ce, 6),
                  "first_probabilities": [round(float(v), 5) for v in probs[0]],
                  "fc2_bias": [round(float(v), 5) for v in mod.get_params()[0]["fc2_bias"].asnumpy()]})


if __name__ == "__main__":
    main()
