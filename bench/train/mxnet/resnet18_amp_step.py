#!/usr/bin/env python3
"""MXNet 1.9.1's training step of ResNet-18 in float32 and in bfloat16 mixed precision (AMP), the anchor of
`troupe bench train --workloads resnet18` and of its bf16 variant.

The network of `troupe train --model resnet18`: Gluon's resnet18_v1(thumbnail=True, classes=10) (the CIFAR
stem: 3x3 convolution, no max-pooling) hybridized, exported and reloaded as a symbol, with a SoftmaxOutput.
Two modes, in the same run:
  - float32: that symbol;
  - bf16: the exported network converted by mx.contrib.amp.convert_symbol(sym, target_dtype='bfloat16')
    (default lists, cast_optional_params False: amp_cast to bfloat16 of the data and of every Convolution /
    FullyConnected weight, one amp_cast back to float32 of the logits; parameters, gradients and optimizer
    state stay float32), then the same SoftmaxOutput. MXNet runs it with its oneDNN bf16 kernels.
Same data as troupe's benchmark: --batches (16) batches of --batch-size (64) Fashion-MNIST images of
Debian's t10k files (1x28x28, pixels / 255, in file order), preloaded; the steps cycle through them. Each mode
is a Module bound for training, with Xavier weights (the same initial values in both modes) and SGD
(learning rate 0.05, momentum 0.9, rescale_grad 1/batch). A step: copy a batch in, forward_backward, update;
a timed run of --steps steps ends with mx.nd.waitall().

Warm-up --warmup steps per mode, then --repeat rounds; each round times one run of each mode, float32 first
in even rounds and bf16 first in odd ones. Prints one JSON document: per mode the ms per step of every run
(run time / steps) and their median, images/s, the ratio bf16 / float32 of the median images/s (and per
round), the thread settings, the CPU's bf16 flags (avx512_bf16, amx_*) and the load average before and after.
In-run check: after the timed runs, the training accuracy over the preloaded batches, with each batch's own
BatchNorm statistics (forward is_train=True; the moving statistics are young after a few dozen steps, as in
troupe's resnet18 check), must be above 0.2 (twice chance) in both modes; a mode below it trains up to
--extra-steps more steps first; the script exits 1 if one stays below.

    MXNET_CPU_WORKER_NTHREADS=1 OMP_NUM_THREADS=2 python \\
        bench/train/mxnet/resnet18_amp_step.py --repeat 3
    # thread budget: MXNET_CPU_WORKER_NTHREADS (engine workers) and OMP_NUM_THREADS (oneDNN/OpenMP), the same
    # as troupe's (1 worker, 2 BLAS threads on 2 cores)

MXNet is an anchor only: nothing builds or tests against it.
"""
import argparse
import json
import os
import sys
import tempfile
import time

import mxnet as mx
import numpy as np

from lenet_fit import DATA, read_idx  # the LeNet anchor beside this file: the same data and idx reader
FLOOR = 0.2  # training accuracy (batch statistics) must beat twice the chance of guessing


def resnet18_exported():
    """resnet18_v1(thumbnail=True, classes=10), hybridized, run once, exported and reloaded (the symbol as MXNet
    saves it)."""
    from mxnet.gluon.model_zoo import vision
    net = vision.resnet18_v1(thumbnail=True, classes=10)
    net.initialize()
    net.hybridize()
    net(mx.nd.zeros((1, 1, 28, 28)))
    with tempfile.TemporaryDirectory() as d:
        net.export(os.path.join(d, "resnet18"))
        return mx.sym.load(os.path.join(d, "resnet18-symbol.json"))


def cpu_flags():
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    return {k: k in flags for k in ("avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "amx_int8")}


def make_module(sym, batch, init_args=None, init_aux=None):
    mod = mx.mod.Module(sym, data_names=["data"], label_names=["softmax_label"], context=mx.cpu())
    mod.bind(data_shapes=[("data", (batch, 1, 28, 28))], label_shapes=[("softmax_label", (batch,))],
             for_training=True)
    if init_args is None:
        mx.random.seed(1)
        mod.init_params(mx.init.Xavier())
    else:
        mod.init_params(arg_params=init_args, aux_params=init_aux)
    mod.init_optimizer(optimizer="sgd", optimizer_params={"learning_rate": 0.05, "momentum": 0.9,
                                                          "rescale_grad": 1.0 / batch})
    return mod


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="rounds; each times one run of each mode")
    ap.add_argument("--steps", type=int, default=20, help="steps per timed run")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per mode before the rounds")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--batches", type=int, default=16, help="preloaded batches the steps cycle through")
    ap.add_argument("--extra-steps", type=int, default=16,
                    help="most steps a mode may train more if its accuracy is not above the floor yet")
    a = ap.parse_args()
    load_before = os.getloadavg()
    batch = a.batch_size

    n = batch * a.batches
    x = read_idx("t10k-images-idx3-ubyte.gz")[:n].reshape(-1, 1, 28, 28).astype(np.float32) / 255
    y = read_idx("t10k-labels-idx1-ubyte.gz")[:n].astype(np.float32)
    if len(x) < n:
        sys.exit("%s holds fewer than %d images" % (DATA, n))
    batches = [mx.io.DataBatch(data=[mx.nd.array(x[i * batch:(i + 1) * batch])],
                               label=[mx.nd.array(y[i * batch:(i + 1) * batch])]) for i in range(a.batches)]
    mx.nd.waitall()

    net = resnet18_exported()
    from mxnet.contrib import amp
    net_bf16 = amp.convert_symbol(net, target_dtype="bfloat16")
    symbols = {"float32": mx.sym.SoftmaxOutput(net, name="softmax"),
               "bf16": mx.sym.SoftmaxOutput(net_bf16, name="softmax")}
    modules = {"float32": make_module(symbols["float32"], batch)}
    args, aux = modules["float32"].get_params()  # both modes start from the same weights
    modules["bf16"] = make_module(symbols["bf16"], batch, args, aux)
    position = {m: 0 for m in modules}

    def steps(mode, count):
        mod = modules[mode]
        for _ in range(count):
            mod.forward_backward(batches[position[mode]])
            mod.update()
            position[mode] = (position[mode] + 1) % len(batches)

    def timed(mode):
        mx.nd.waitall()
        t0 = time.perf_counter()
        steps(mode, a.steps)
        mx.nd.waitall()
        return (time.perf_counter() - t0) / a.steps

    for mode in modules:
        steps(mode, a.warmup)
    mx.nd.waitall()
    seconds = {m: [] for m in modules}
    orders = []
    for r in range(a.repeat):
        order = ["float32", "bf16"] if r % 2 == 0 else ["bf16", "float32"]
        orders.append(order)
        for mode in order:
            seconds[mode].append(timed(mode))
            print("round %d %s: %.1f ms/step" % (r, mode, seconds[mode][-1] * 1e3), file=sys.stderr, flush=True)

    def accuracy(mode):
        mod, right = modules[mode], 0
        for b in batches:
            mod.forward(b, is_train=True)
            right += int((mod.get_outputs()[0].asnumpy().argmax(axis=1) == b.label[0].asnumpy()).sum())
        return right / float(n)

    report, failed = {}, []
    for mode in modules:
        acc, extra = accuracy(mode), 0
        while acc <= FLOOR and extra < a.extra_steps:
            steps(mode, 4)
            extra += 4
            acc = accuracy(mode)
        if acc <= FLOOR:
            failed.append("%s: training accuracy %.3f after %d extra steps (must be above %.1f)" % (mode, acc, extra, FLOOR))
        ms = [s * 1e3 for s in seconds[mode]]
        report[mode] = {"step_ms_median": float(np.median(ms)), "step_ms": ms,
                        "images_per_s_median": batch / float(np.median(seconds[mode])),
                        "images_per_s": [batch / s for s in seconds[mode]],
                        "train_accuracy_after": acc, "extra_steps_for_accuracy": extra}
    probs = modules["bf16"].get_outputs()[0].asnumpy()
    doc = {
        "anchor": "mxnet-1.9.1 Module resnet18_v1(thumbnail) training step, float32 vs AMP bfloat16",
        "batch_size": batch, "steps_per_run": a.steps, "warmup_steps": a.warmup, "rounds": a.repeat,
        "round_orders": orders,
        "data": "Fashion-MNIST t10k, %d preloaded batches, pixels / 255" % a.batches,
        "optimizer": "sgd, learning_rate 0.05, momentum 0.9, rescale_grad 1/batch",
        "step": "copy a batch in, forward_backward, update; a run of steps ends with mx.nd.waitall()",
        "bf16": "mx.contrib.amp.convert_symbol(net, target_dtype='bfloat16'), parameters float32, SoftmaxOutput "
                "on the float32 logits",
        "modes": report,
        "images_per_s_ratio_bf16_over_float32": report["bf16"]["images_per_s_median"] / report["float32"]["images_per_s_median"],
        "images_per_s_ratio_per_round": [seconds["float32"][i] / seconds["bf16"][i] for i in range(a.repeat)],
        "train_accuracy_meaning": "forward(is_train=True) (batch statistics) over the preloaded batches after the "
                                  "timed steps; must be > %.1f" % FLOOR,
        "bf16_probabilities_row_sum_max_error": float(np.abs(probs.sum(axis=1) - 1).max()),
        "MXNET_CPU_WORKER_NTHREADS": os.environ.get("MXNET_CPU_WORKER_NTHREADS"),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "MXNET_SUBGRAPH_BACKEND": os.environ.get("MXNET_SUBGRAPH_BACKEND"),
        "mkldnn": mx.runtime.Features().is_enabled("MKLDNN"),
        "cpu_count": os.cpu_count(), "cpu_flags": cpu_flags(),
        "loadavg_before": list(load_before), "loadavg_after": list(os.getloadavg()),
        "errors": failed,
    }
    print(json.dumps(doc, indent=1), flush=True)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
