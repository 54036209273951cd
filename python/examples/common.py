"""Shared by the example scripts: Fashion-MNIST from Debian's dataset-fashion-mnist as NumPy arrays, and the
results line each script prints."""
import gzip
import json
import os

import numpy as np

DATA = os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")


def fashion_mnist(train, n=None, flat=False):
    prefix = "train" if train else "t10k"
    with gzip.open(os.path.join(DATA, prefix + "-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)
    with gzip.open(os.path.join(DATA, prefix + "-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    x, y = x[:n].astype(np.float32) / 255, y[:n].astype(np.float32)
    return (x.reshape(len(x), -1) if flat else x), y


def initial_values(shapes, seed=0):
    """The same starting values in every framework: weights uniform in +-sqrt(6 / (fan_in + fan_out)) from a
    NumPy generator, biases and BatchNorm's beta zero, gamma one."""
    rng = np.random.RandomState(seed)
    values = {}
    for name in sorted(shapes):
        shape = shapes[name]
        if name.endswith("weight"):
            fan_in = int(np.prod(shape[1:]))
            fan_out = shape[0] * int(np.prod(shape[2:]))
            scale = np.sqrt(6.0 / (fan_in + fan_out))
            values[name] = rng.uniform(-scale, scale, shape).astype(np.float32)
        elif name.endswith(("gamma", "running_var", "moving_var")):
            values[name] = np.ones(shape, np.float32)
        else:
            values[name] = np.zeros(shape, np.float32)
    return values


def report(args, results):
    line = json.dumps(results, sort_keys=True)
    print(line)
    if getattr(args, "json", None):
        with open(args.json, "w") as f:
            f.write(line + "\n")
