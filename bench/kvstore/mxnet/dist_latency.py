#!/usr/bin/env python3
"""MXNet 1.9.1's dist_sync small-key round (ps-lite), as the anchor of `troupe bench kvstore-dist`'s latency.

The same measurement as troupe's: a scheduler, 1 server and 2 workers on 127.0.0.1 (ps-lite's own launcher
protocol through the DMLC_* variables); each worker inits a key of 16 floats, then times CALLS PushPull calls
of it (`KVStore.pushpull` into an output array, then `wait_to_read`), after 10 untimed ones whose pulled
values are checked against the sums the workers pushed. Prints one JSON document with each worker's median
and 90th percentile in microseconds and the slower worker's median.

    /work/mxnet-venv/bin/python bench/kvstore/mxnet/dist_latency.py --calls 3000

Thread budget as troupe's benchmark: one engine worker per process (MXNET_CPU_WORKER_NTHREADS=1), OpenMP
threads = cores / (servers + workers). The raw TCP lock-step round to divide by comes from a
`troupe bench kvstore-dist` run next to it (its `raw_tcp.lockstep_us_median`): run them alternately.

MXNet is an anchor only: nothing builds or tests against it.
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "common"))
import mxnet_cluster  # noqa: E402

WARMUP = 10
ELEMS = 16


def node(calls):
    import mxnet as mx
    kv = mx.kv.create("dist_sync")  # the scheduler and the server serve inside this call and exit
    rank, workers = kv.rank, kv.num_workers
    kv.init(3, mx.nd.zeros((ELEMS,)))
    value = mx.nd.full((ELEMS,), rank + 1.0)
    out = mx.nd.zeros((ELEMS,))
    # MXNet's pushpull of one array sums in place: the pushed array receives the pulled sum too, so each
    # worker pushes the previous round's sum, and round i pulls 2^i times the first round's sum (exact in
    # float32 for the untimed first rounds, where it is checked; the values overflow later, which costs the
    # sum nothing). Setting the array again before each call would add an engine function to each round.
    want = workers * (workers + 1) / 2.0
    lat, wrong = [], 0
    for i in range(WARMUP + calls):
        t0 = time.perf_counter()
        kv.pushpull(3, value, out=out)
        out.wait_to_read()
        if i >= WARMUP:
            lat.append((time.perf_counter() - t0) * 1e6)
        else:
            got = out.asnumpy()
            wrong += int(got[0] != want * 2 ** i or got[-1] != want * 2 ** i)
    lat.sort()
    print("RESULT " + json.dumps({"rank": rank, "latency_us_median": statistics.median(lat),
                                  "latency_us_p90": lat[len(lat) * 9 // 10], "wrong_sums": wrong}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--role", default="coordinator", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role == "node":
        return node(a.calls)
    servers, workers = 1, 2
    me = [sys.executable, os.path.abspath(__file__), "--role", "node", "--calls", str(a.calls)]
    results = mxnet_cluster.run(me, servers, workers, max(1, os.cpu_count() // (servers + workers)), timeout=600)
    if any(r["wrong_sums"] for r in results):
        raise SystemExit("a pulled value was not the sum of the pushes: %s" % results)
    print(json.dumps({"anchor": "mxnet " + __import__("mxnet").__version__, "calls": a.calls, "servers": servers,
                      "workers": workers, "small_key_latency_us_median": max(r["latency_us_median"] for r in results),
                      "worker_results": results}, indent=1))


if __name__ == "__main__":
    main()
