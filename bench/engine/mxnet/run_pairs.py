#!/usr/bin/env python3
"""troupe's actor engine against MXNet 1.9.1's engine, measured in back-to-back pairs.

    bench/engine/mxnet/run_pairs.py TROUPE_BIN [PAIRS] [options]

For each pair and each worker count W (default 1 and 2) it runs, back to back,
  TROUPE_BIN bench engine --engines actor --workers W --seed S --json ...
  mxnet_engine_bench            --workers W --seed S --json ...
with the same seed S (so random_mixed is the same list of functions on both), alternating which of the two
goes first from pair to pair (so a slow drift of this shared machine does not favour one side). It prints,
per workload and W, the troupe/MXNet ratio of ns per function for every pair and the median ratio
(< 1: troupe takes less time per function). Every raw JSON file and a summary.json go to --out.

Only the standard library is needed. MXNet is an anchor: see README.md in this folder.
"""
import argparse
import datetime
import hashlib
import json
import os
import random
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# The workloads both programs run (troupe's chain_operator has no counterpart in MXNet's C API).
WORKLOADS = ["chain", "independent", "independent_novars", "reader_writer", "random_mixed"]


def ns_per_function(workload):
    """Yields (workers, shards, ns/function median) for every ok result of a workload entry of either JSON."""
    for r in workload.get("results", []):
        if not r.get("ok") or r.get("value") is None:
            continue
        if r.get("engine") not in ("actor", "mxnet"):
            continue
        ns = r.get("ns_per_function")
        if isinstance(ns, dict):
            v = ns["median"]
        elif workload["unit"] == "ns/function":
            v = r["value"]
        else:  # functions/s: the median of N/t is N/median(t) for an odd number of repetitions
            v = 1e9 / r["value"]
        yield r.get("workers"), r.get("shards"), v


def figures(path, workers):
    with open(path) as f:
        data = json.load(f)
    out = {}
    for w in data.get("workloads", []):
        best = None
        for wk, _shards, v in ns_per_function(w):
            if wk == workers and (best is None or v < best):
                best = v  # troupe: best over the --shards values (one by default)
        if best is not None:
            out[w["name"]] = best
    return out, data.get("ok", False)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[0]
    except OSError:
        return "?"


def run(cmd, log):
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log.write("$ " + " ".join(cmd) + "\n" + p.stdout + "\n")
    log.flush()
    if p.returncode != 0:
        print(p.stdout[-3000:], file=sys.stderr)
        print(f"run_pairs: exit status {p.returncode}: {' '.join(cmd)}", file=sys.stderr)
    return p.returncode


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("troupe", help="the troupe binary, e.g. build/tools/troupe")
    ap.add_argument("pairs", nargs="?", type=int, default=3, help="pairs per worker count (default 3)")
    ap.add_argument("--workers", default="1,2", help="worker counts (default 1,2)")
    ap.add_argument("--mxnet-bench", default=os.path.join(HERE, "mxnet_engine_bench"),
                    help="the MXNet program (build.sh builds it; default: next to this script)")
    ap.add_argument("--out", default=None, help="folder for the raw JSON files (default: a new folder in /tmp)")
    ap.add_argument("--functions", type=int, default=None, help="functions per run (both; default theirs: 200000)")
    ap.add_argument("--repeat", type=int, default=None, help="timed repetitions (both; default theirs: 5)")
    ap.add_argument("--workloads", default="chain,independent,reader_writer,random_mixed")
    ap.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run of this script)")
    args = ap.parse_args()

    for exe in (args.troupe, args.mxnet_bench):
        if not os.access(exe, os.X_OK):
            sys.exit(f"run_pairs: {exe} is not an executable (build the MXNet program with build.sh)")
    workers = [int(w) for w in args.workers.split(",")]
    out = args.out or "/tmp/mxnet-pairs-" + datetime.datetime.utcnow().strftime("%Y%m%dT%H%M%SZ")
    os.makedirs(out, exist_ok=True)
    common = ["--workloads", args.workloads]
    if args.functions:
        common += ["--functions", str(args.functions)]
    if args.repeat:
        common += ["--repeat", str(args.repeat)]
    if args.quick:
        common += ["--quick"]

    log = open(os.path.join(out, "run_pairs.log"), "a")
    pairs = []
    failed = False
    for p in range(1, args.pairs + 1):
        for w in workers:
            seed = random.getrandbits(63) or 1
            tj = os.path.join(out, f"pair{p}-w{w}-troupe.json")
            mj = os.path.join(out, f"pair{p}-w{w}-mxnet.json")
            troupe_cmd = [args.troupe, "bench", "engine", "--engines", "actor", "--workers", str(w),
                          "--seed", str(seed), "--json", tj] + common
            mxnet_cmd = [args.mxnet_bench, "--workers", str(w), "--seed", str(seed), "--json", mj] + common
            order = [("troupe", troupe_cmd), ("mxnet", mxnet_cmd)]
            if p % 2 == 0:
                order.reverse()
            load = {}
            for name, cmd in order:
                load[name] = loadavg()
                if run(cmd, log) != 0:
                    failed = True
            try:
                t, t_ok = figures(tj, w)
                m, m_ok = figures(mj, w)
            except (OSError, ValueError) as e:
                print(f"run_pairs: pair {p} w={w}: unreadable results: {e}", file=sys.stderr)
                failed = True
                continue
            pairs.append({"pair": p, "workers": w, "seed": seed, "first": order[0][0], "loadavg_before": load,
                          "troupe_ok": t_ok, "mxnet_ok": m_ok, "troupe_ns": t, "mxnet_ns": m,
                          "ratio": {k: t[k] / m[k] for k in WORKLOADS if k in t and k in m and m[k] > 0},
                          "troupe_json": os.path.basename(tj), "mxnet_json": os.path.basename(mj)})

    summary = {"created": datetime.datetime.utcnow().strftime("%Y-%m-%dT%H:%M:%SZ"),
               "troupe": {"path": os.path.abspath(args.troupe), "sha256": sha256(args.troupe),
                          "mtime": datetime.datetime.utcfromtimestamp(os.path.getmtime(args.troupe))
                          .strftime("%Y-%m-%dT%H:%M:%SZ")},
               "mxnet_bench": os.path.abspath(args.mxnet_bench),
               "ratio_meaning": "troupe actor engine ns/function divided by MXNet's, same worker count, same seed, "
                                "back to back; < 1: troupe is faster",
               "pairs": pairs, "median_ratio": {}, "median_ns": {}}
    print(f"\ntroupe/MXNet ns-per-function ratio, {args.pairs} pairs (< 1: troupe faster); out: {out}")
    for w in workers:
        print(f"\nworkers={w}")
        print(f"  {'workload':20s} {'median':>7s}  {'per pair':30s} {'troupe ns':>10s} {'mxnet ns':>10s}")
        for k in WORKLOADS:
            ps = [x for x in pairs if x["workers"] == w and k in x["ratio"]]
            if not ps:
                continue
            ratios = [x["ratio"][k] for x in ps]
            med = statistics.median(ratios)
            tn = statistics.median(x["troupe_ns"][k] for x in ps)
            mn = statistics.median(x["mxnet_ns"][k] for x in ps)
            summary["median_ratio"].setdefault(f"w{w}", {})[k] = med
            summary["median_ns"].setdefault(f"w{w}", {})[k] = {"troupe": tn, "mxnet": mn}
            per = " ".join(f"{r:.2f}" for r in ratios)
            print(f"  {k:20s} {med:7.2f}  {per:30s} {tn:10.1f} {mn:10.1f}")
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    print(f"\nwrote {os.path.join(out, 'summary.json')}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
