#!/usr/bin/env python3
"""MXNet 1.9.1's dist_sync on the workload of `troupe bench train-dist --models mlp`, as a benchmark anchor.

Same network (flatten, fc 128, relu, fc 64, relu, fc 10, softmax), same data (Debian's dataset-fashion-mnist,
pixels / 255), total batch 100 split over the workers, each worker cycling through 20 preloaded batches of its
own, SGD lr 0.05 momentum 0.9 (rescale 1 / total batch), Xavier init, 5 warm-up steps, then REPEAT timed runs
of STEPS steps. A step is Module.forward_backward + Module.update, as troupe's Forward/Backward/Update; the
timed run ends with mx.nd.waitall(). Images/s = total batch / the slowest worker's median step time.

One command runs the single process, then a cluster (scheduler, servers, workers on 127.0.0.1 through the
DMLC_* variables, ps-lite's own launcher protocol) for each worker count, and prints one JSON document:

    /work/mxnet-venv/bin/python bench/train/mxnet/dist_sync_mlp.py --workers 1,2 --repeat 5 --steps 200

Thread budget, as troupe's `bench train-dist`: one engine worker per process (MXNET_CPU_WORKER_NTHREADS=1) and
OpenMP/BLAS threads = cores / (servers + workers) for each cluster process (cores for the single process).

MXNet is an anchor only: nothing builds or tests against it.
"""
import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "common"))
import mxnet_cluster  # noqa: E402

DATA = "/usr/share/datasets/fashion-mnist"
WARMUP = 5
BATCHES_PER_WORKER = 20


def read_idx(name):
    import numpy as np
    with gzip.open(os.path.join(DATA, name), "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def train(a, kv):
    """Trains in this process (kv None: alone); returns the median step seconds of each timed run."""
    import mxnet as mx
    workers = kv.num_workers if kv is not None else 1
    rank = kv.rank if kv is not None else 0
    batch = a.batch_size // workers
    n = BATCHES_PER_WORKER * batch
    x = read_idx("train-images-idx3-ubyte.gz")[rank * n:(rank + 1) * n].reshape(-1, 1, 28, 28).astype("float32") / 255
    y = read_idx("train-labels-idx1-ubyte.gz")[rank * n:(rank + 1) * n].astype("float32")
    batches = [mx.io.DataBatch([mx.nd.array(x[i * batch:(i + 1) * batch])], [mx.nd.array(y[i * batch:(i + 1) * batch])])
               for i in range(BATCHES_PER_WORKER)]
    net = mx.sym.Flatten(mx.sym.Variable("data"))
    for i, h in enumerate([128, 64], 1):
        net = mx.sym.Activation(mx.sym.FullyConnected(net, num_hidden=h, name="fc%d" % i), act_type="relu")
    net = mx.sym.SoftmaxOutput(mx.sym.FullyConnected(net, num_hidden=10, name="fc3"), name="softmax")
    mod = mx.mod.Module(net, context=mx.cpu())
    mod.bind([("data", (batch, 1, 28, 28))], [("softmax_label", (batch,))])
    mx.random.seed(1)
    mod.init_params(mx.init.Xavier())
    mod.init_optimizer(kvstore=kv if kv is not None else "local", optimizer="sgd",
                       optimizer_params={"learning_rate": 0.05, "momentum": 0.9, "rescale_grad": 1.0 / a.batch_size})
    nxt = 0

    def step():
        nonlocal nxt
        mod.forward_backward(batches[nxt])
        mod.update()
        nxt = (nxt + 1) % len(batches)

    for _ in range(WARMUP):
        step()
    mx.nd.waitall()
    runs = []
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        mx.nd.waitall()
        runs.append((time.perf_counter() - t0) / a.steps)
    return runs


def node_command(a, role):
    return [sys.executable, os.path.abspath(__file__), "--role", role, "--repeat", str(a.repeat), "--steps",
            str(a.steps), "--batch-size", str(a.batch_size)]


def cluster(a, workers):
    threads = max(1, os.cpu_count() // (a.servers + workers))
    results = mxnet_cluster.run(node_command(a, "node"), a.servers, workers, threads)
    step = max(statistics.median(r["step_seconds"]) for r in results)
    return {"workers": workers, "servers": a.servers, "omp_threads": threads, "step_seconds_median": step,
            "images_per_s": a.batch_size / step, "worker_results": results}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    ap.add_argument("--servers", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=100, help="total batch of a step, split over the workers")
    ap.add_argument("--role", default="coordinator", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role == "node":
        import mxnet as mx
        kv = mx.kv.create("dist_sync")  # servers and the scheduler serve inside this call and exit
        runs = train(a, kv)
        print("RESULT " + json.dumps({"rank": kv.rank, "step_seconds": runs}), flush=True)
        return
    if a.role == "single":
        print("RESULT " + json.dumps({"step_seconds": train(a, None)}), flush=True)
        return
    env = dict(os.environ, MXNET_CPU_WORKER_NTHREADS="1", OMP_NUM_THREADS=str(os.cpu_count()))
    single = subprocess.run(node_command(a, "single"), env=env, capture_output=True, text=True, check=True)
    runs = json.loads([l for l in single.stdout.splitlines() if l.startswith("RESULT ")][-1][7:])["step_seconds"]
    single_ips = a.batch_size / statistics.median(runs)
    dist = []
    for w in (int(v) for v in a.workers.split(",")):
        r = cluster(a, w)
        r["ratio_vs_single_process"] = r["images_per_s"] / single_ips
        dist.append(r)
        print("mxnet dist_sync, %d worker(s): %.0f images/s, %.2fx the single process" %
              (w, r["images_per_s"], r["ratio_vs_single_process"]), file=sys.stderr)
    print(json.dumps({"anchor": "mxnet " + __import__("mxnet").__version__, "model": "mlp",
                      "batch": a.batch_size, "single_process": {"images_per_s": single_ips, "step_seconds": runs},
                      "dist_sync": dist}, indent=1))


if __name__ == "__main__":
    main()
