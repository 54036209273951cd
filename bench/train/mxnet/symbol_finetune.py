#!/usr/bin/env python3
"""The MXNet side of the `troupe train --symbol` acceptance check: fine-tune an exported GluonCV ResNet on a
RecordIO file of Fashion-MNIST JPEGs with MXNet 1.9.1's Module, and compare with troupe's accuracy.

Steps (bench/train/README.md has the whole sequence with troupe's command lines):

    prepare DIR   writes DIR/images/{train,test}/N.jpg (the first --train / --test Fashion-MNIST images,
                  28x28 gray JPEG, quality 95), DIR/train.lst and DIR/test.lst (the training list in a
                  fixed random order, so that neither side shuffles), and the network: GluonCV's
                  cifar_resnet20_v1(classes=10) initialised with seed 1 (Xavier as Gluon's default),
                  hybridised, run once on (1, 1, 28, 28) and exported as DIR/resnet20-symbol.json and
                  DIR/resnet20-0000.params. The symbol ends in the logits (no loss head).
    (troupe im2rec DIR/train.lst DIR/images DIR/rec/train, the same for test)
    idx DIR       writes DIR/idx/: the same first --train / --test images as uncompressed idx files (no JPEG
                  step; troupe train --data idx:DIR/idx and MXNet's MNISTIter read the same bytes, pixel/256)
    fit-idx DIR   MXNet's Module as `fit` does, on DIR/idx through MNISTIter (shuffle off)
    fit DIR       MXNet's Module on DIR/rec/{train,test}.rec: SoftmaxOutput put on the logits (what
                  troupe train --symbol does), every parameter from resnet20-0000.params, ImageRecordIter
                  (data_shape (1,28,28), scale 1/255, no shuffle), SGD with momentum 0.9, wd 0.0001, the
                  given lr / batch / epochs; prints the test accuracy of every epoch and one JSON line.

MXNet is an anchor only: nothing builds or tests against it.
"""
import argparse
import gzip
import json
import logging
import os
import random
import time

import numpy as np

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(name):
    with gzip.open(os.path.join(DATA, name), "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def prepare(args):
    from PIL import Image
    import mxnet as mx
    from gluoncv.model_zoo import get_model

    for split, prefix, n in (("train", "train", args.train), ("test", "t10k", args.test)):
        images = read_idx(prefix + "-images-idx3-ubyte.gz")[:n]
        labels = read_idx(prefix + "-labels-idx1-ubyte.gz")[:n]
        os.makedirs(os.path.join(args.dir, "images", split), exist_ok=True)
        order = list(range(n))
        if split == "train":
            random.Random(args.seed).shuffle(order)
        with open(os.path.join(args.dir, split + ".lst"), "w") as lst:
            for i in order:
                rel = "%s/%d.jpg" % (split, i)
                Image.fromarray(images[i], mode="L").save(os.path.join(args.dir, "images", rel), quality=95)
                lst.write("%d\t%d\t%s\n" % (i, labels[i], rel))
    mx.random.seed(args.seed)
    np.random.seed(args.seed)
    net = get_model("cifar_resnet20_v1", classes=10)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    net(mx.nd.zeros((1, 1, 28, 28)))
    net.export(os.path.join(args.dir, "resnet20"), epoch=0)
    print("wrote", os.path.join(args.dir, "resnet20-symbol.json"), "and resnet20-0000.params")


def idx(args):
    out = os.path.join(args.dir, "idx")
    os.makedirs(out, exist_ok=True)
    for prefix, n in (("train", args.train), ("t10k", args.test)):
        for kind in ("images-idx3-ubyte", "labels-idx1-ubyte"):
            name = prefix + "-" + kind
            with gzip.open(os.path.join(DATA, name + ".gz"), "rb") as f:
                raw = f.read()
            dims = raw[3]
            per = 1
            for i in range(1, dims):
                per *= int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big")
            head = raw[:4] + n.to_bytes(4, "big") + raw[8:4 + 4 * dims]
            with open(os.path.join(out, name), "wb") as f:
                f.write(head + raw[4 + 4 * dims:4 + 4 * dims + n * per])
    print("wrote", out)


def fit(args):
    import mxnet as mx

    logging.basicConfig(level=logging.INFO)  # Module.fit's per-epoch Train-accuracy / Validation-accuracy lines

    sym, arg_params, aux_params = mx.model.load_checkpoint(os.path.join(args.dir, "resnet20"), 0)
    sym = mx.sym.SoftmaxOutput(sym, name="softmax")

    def rec(split):
        if args.step == "fit-idx":
            prefix = os.path.join(args.dir, "idx", "train" if split == "train" else "t10k")
            return mx.io.MNISTIter(image=prefix + "-images-idx3-ubyte", label=prefix + "-labels-idx1-ubyte",
                                   batch_size=args.batch_size, shuffle=False, flat=False, silent=True)
        return mx.io.ImageRecordIter(path_imgrec=os.path.join(args.dir, "rec", split + ".rec"),
                                     path_imgidx=os.path.join(args.dir, "rec", split + ".idx"),
                                     data_shape=(1, 28, 28), scale=1.0 / 255, batch_size=args.batch_size,
                                     shuffle=False, preprocess_threads=2)

    train, test = rec("train"), rec("test")
    mod = mx.mod.Module(sym, data_names=["data"], label_names=["softmax_label"], context=mx.cpu())
    accs = []
    tic = time.time()
    mod.fit(train, eval_data=test, eval_metric="acc", optimizer="sgd",
            optimizer_params={"learning_rate": args.lr, "momentum": 0.9, "wd": 0.0001},
            arg_params=arg_params, aux_params=aux_params, allow_missing=False, num_epoch=args.epochs,
            eval_end_callback=lambda p: accs.append(p.eval_metric.get()[1]),
            batch_end_callback=mx.callback.Speedometer(args.batch_size, 20, auto_reset=False))
    seconds = time.time() - tic
    score = mod.score(test, "acc")[0][1]
    print(json.dumps({"framework": "mxnet", "mxnet": mx.__version__, "model": "cifar_resnet20_v1",
                      "lr": args.lr, "batch_size": args.batch_size, "epochs": args.epochs,
                      "test_accuracy_per_epoch": accs, "final_test_accuracy": score, "seconds": seconds}))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("step", choices=["prepare", "idx", "fit", "fit-idx"])
    p.add_argument("dir")
    p.add_argument("--train", type=int, default=6000)
    p.add_argument("--test", type=int, default=1000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--epochs", type=int, default=2)
    args = p.parse_args()
    {"prepare": prepare, "idx": idx}.get(args.step, fit)(args)


if __name__ == "__main__":
    main()
