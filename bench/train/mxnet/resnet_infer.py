#!/usr/bin/env python3
"""MXNet 1.9.1's ResNet-18 inference latency, one 3 x 224 x 224 image, the anchor of
`troupe bench train --workloads resnet18-infer`.

Gluon's resnet18_v1 (the ImageNet variant, 1000 classes, pretrained=False: Xavier weights), hybridized into a
symbol with a SoftmaxOutput, bound in a Module with for_training=False (the way MXNet's users served it with
MKLDNN), random pixels. A call is Module.forward(is_train=False) and wait_to_read on the output. Warm-up 5
calls, then --repeat runs of at least --min-time seconds; prints one JSON line with the median and best
latency in ms.

    MXNET_CPU_WORKER_NTHREADS=1 OMP_NUM_THREADS=2 /work/mxnet-venv/bin/python bench/train/mxnet/resnet_infer.py

MXNet is an anchor only: nothing builds or tests against it.
"""
import argparse
import json
import os
import time

import mxnet as mx
import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.5)
    args = ap.parse_args()
    from mxnet.gluon.model_zoo import vision
    net = vision.resnet18_v1(classes=1000)
    net.hybridize()
    sym = mx.sym.SoftmaxOutput(net(mx.sym.Variable("data")), name="softmax")
    mod = mx.mod.Module(sym, data_names=["data"], label_names=["softmax_label"], context=mx.cpu())
    mod.bind(data_shapes=[("data", (1, 3, 224, 224))], label_shapes=[("softmax_label", (1,))], for_training=False)
    mod.init_params(mx.init.Xavier())
    rng = np.random.RandomState(3)
    batch = mx.io.DataBatch(data=[mx.nd.array(rng.uniform(0, 1, (1, 3, 224, 224)).astype(np.float32))],
                            label=[mx.nd.zeros((1,))])

    def call():
        mod.forward(batch, is_train=False)
        mod.get_outputs()[0].wait_to_read()

    for _ in range(5):
        call()
    runs = []
    for _ in range(args.repeat):
        calls, t0 = 0, time.perf_counter()
        while calls < 3 or time.perf_counter() - t0 < args.min_time:
            call()
            calls += 1
        runs.append((time.perf_counter() - t0) / calls)
    runs.sort()
    probs = mod.get_outputs()[0].asnumpy()
    print(json.dumps({"anchor": "mxnet-1.9.1 Module resnet18_v1 inference, batch 1, 3x224x224",
                      "latency_ms_median": runs[len(runs) // 2] * 1e3, "latency_ms_best": runs[0] * 1e3,
                      "probabilities_sum": float(probs.sum()),
                      "MXNET_CPU_WORKER_NTHREADS": os.environ.get("MXNET_CPU_WORKER_NTHREADS"),
                      "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                      "mkldnn": mx.runtime.Features().is_enabled("MKLDNN")}), flush=True)


if __name__ == "__main__":
    main()
