#!/usr/bin/env python3
"""MXNet 1.9.1's Convolution forward + backward (data, weight and bias gradients) on the layers of
`troupe bench ops --workloads conv`, as the anchor of issue 23's "Convolution at ResNet's sizes" item.

Each call: y = Convolution(x, w, b) under autograd.record(), y.backward(dy), then wait_to_read on the three
gradients (the same work as troupe's OperatorRunner call: forward in training mode, three gradients written).
NCHW float32 NDArrays on mx.cpu(), random inputs; MXNet's own layout handling (MKLDNN/oneDNN) inside.
Warm-up 2 calls, then calls for at least --min-time seconds, --repeat times; prints one JSON line per layer
with the median and best GFLOP/s (6 x batch x F x C x kh x kw x OH x OW per call, as troupe's benchmark).

    MXNET_CPU_WORKER_NTHREADS=1 OMP_NUM_THREADS=2 /work/mxnet-venv/bin/python bench/ops/mxnet/conv.py

MXNet is an anchor only: nothing builds or tests against it.
"""
import argparse
import json
import os
import time

import mxnet as mx

# name, batch, channels, height/width, filters, kernel, pad, stride: troupe's `bench ops` conv layers.
LAYERS = [
    ("lenet", 64, 1, 28, 20, 5, 0, 1),
    ("resnet", 32, 64, 56, 64, 3, 1, 1),
    ("resnet_128", 32, 128, 28, 128, 3, 1, 1),
    ("resnet_256", 32, 256, 14, 256, 3, 1, 1),
    ("resnet_512", 32, 512, 7, 512, 3, 1, 1),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.3)
    ap.add_argument("--layers", default=",".join(l[0] for l in LAYERS))
    args = ap.parse_args()
    wanted = args.layers.split(",")
    for name, n, c, hw, f, k, pad, stride in LAYERS:
        if name not in wanted:
            continue
        x = mx.nd.random.uniform(-1, 1, (n, c, hw, hw))
        w = mx.nd.random.uniform(-1, 1, (f, c, k, k))
        b = mx.nd.random.uniform(-1, 1, (f,))
        for a in (x, w, b):
            a.attach_grad()
        oh = (hw + 2 * pad - k) // stride + 1
        dy = mx.nd.random.uniform(-1, 1, (n, f, oh, oh))

        def call():
            with mx.autograd.record():
                y = mx.nd.Convolution(x, w, b, kernel=(k, k), pad=(pad, pad), stride=(stride, stride), num_filter=f)
            y.backward(dy)
            for a in (x, w, b):
                a.grad.wait_to_read()

        for _ in range(2):
            call()
        flops = 6.0 * n * f * c * k * k * oh * oh
        runs = []
        for _ in range(args.repeat):
            calls, t0 = 0, time.perf_counter()
            while calls < 3 or time.perf_counter() - t0 < args.min_time:
                call()
                calls += 1
            runs.append((time.perf_counter() - t0) / calls)
        runs.sort()
        print(json.dumps({"anchor": "mxnet-1.9.1 nd.Convolution fwd+bwd", "layer": name,
                          "shape": f"{n},{c}->{f},{hw}x{hw},k{k},p{pad}", "gflops_median": flops / runs[len(runs) // 2] / 1e9,
                          "gflops_best": flops / runs[0] / 1e9,
                          "MXNET_CPU_WORKER_NTHREADS": os.environ.get("MXNET_CPU_WORKER_NTHREADS"),
                          "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
                          "mkldnn": mx.runtime.Features().is_enabled("MKLDNN")}), flush=True)


if __name__ == "__main__":
    main()
