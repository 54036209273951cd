#!/usr/bin/env python3
"""The step-time model of docs/scaling.md, calibrated and checked from benchmark JSON (no timing of its own).

Calibration (netns runs of `troupe bench kvstore-dist`, one per worker count W and server count S):
  T_round(W, S)  the small-key latency: one dist_sync PushPull of a 16-float key, waited for;
  Theta(W, S)    the bytes through the servers per second (W x model x 2 / round time) of the 64 MiB model;
  t_key(W, S)    what each further key of a round adds: (round of 16 keys of 16 KiB - T_round - bytes / Theta) / 15.
Prediction of a dist_sync step of `troupe bench train-dist` (the same wire, W workers, S servers, a model of
M bytes in K arrays, the single process's step time T_1 measured in the same run):
  T_step = T_1 + T_round + max((K - 1) t_key, 2 W M / Theta)      (--additive: the sum of the two)
(the keys are in flight together, so their fixed costs overlap the bytes of the others; on this machine every process shares the same 2 cores, so the workers' compute together takes about the single
process's time, and the bytes cost CPU at the rate the kvstore-dist run measured, not link time).

Usage: scaling_model.py --kv KV.json [...] --keys TINY.json [...] [--check KV2.json ...] [--train TRAIN.json ...]
Prints the calibration and Markdown tables, predicted vs measured, error %: the rounds of the --check
kvstore-dist runs (other key counts and sizes than the calibration's) and the steps of the --train runs.
"""
import argparse
import json
import statistics


def runs_of(paths, mode="netns", with_config=False):
    """(workers, servers) -> list of run dicts of that wire (with the file's config), over every file."""
    out = {}
    for p in paths:
        d = json.load(open(p))
        for r in d.get("runs", []):
            if r["net"]["mode"] != mode:
                continue
            out.setdefault((r["workers"], r["servers"]), []).append((r, d["config"]) if with_config else r)
    return out


def sync(t_round, t_key, theta, keys, workers, nbytes, additive):
    """A dist_sync round of `keys` keys of `nbytes` bytes in all, W = `workers`."""
    fixed = (keys - 1) * t_key
    moved = 2 * workers * nbytes / theta
    return t_round + (fixed + moved if additive else max(fixed, moved))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kv", nargs="+", required=True)
    ap.add_argument("--keys", nargs="+", required=True)
    ap.add_argument("--train", nargs="*", default=[])
    ap.add_argument("--check", nargs="*", default=[],
                    help="kvstore-dist JSON whose rounds to predict (n keys of their size, same wire)")
    ap.add_argument("--mode", default="netns")
    ap.add_argument("--additive", action="store_true",
                    help="the first form: T_round + (n - 1) t_key + bytes / Theta (default: the per-key costs "
                         "overlap the bytes of the other keys in flight: T_round + max((n - 1) t_key, bytes / Theta))")
    a = ap.parse_args()

    kv = runs_of(a.kv, a.mode)
    keys = runs_of(a.keys, a.mode, with_config=True)
    cal = {}
    print("calibration (%s): W S | T_round us | Theta GiB/s | t_key us" % a.mode)
    for ws in sorted(kv):
        t_round = statistics.median(r["kvstore"]["small_key_latency_us_median"] for r in kv[ws]) * 1e-6
        theta = statistics.median(r["kvstore"]["throughput_gibs"] for r in kv[ws]) * 2**30
        t_key = None
        if ws in keys:
            k, cfg = keys[ws][0]
            d = k["kvstore"]
            n = cfg["keys"]
            model_bytes = n * int(cfg["key_mib"] * 2**20 / 4) * 4
            rnd = d["round_seconds_median"]
            lat = d["small_key_latency_us_median"] * 1e-6
            t_key = max(0.0, (rnd - lat - 2 * ws[0] * model_bytes / theta) / (n - 1))
        cal[ws] = (t_round, theta, t_key)
        print("  %d %d | %8.1f | %6.3f | %s" % (ws[0], ws[1], t_round * 1e6, theta / 2**30,
                                              "%.1f" % (t_key * 1e6) if t_key is not None else "-"))

    if a.check:
        print()
        print("| kvstore-dist round | W | S | measured ms | predicted ms | error % |")
        print("|---|---|---|---|---|---|")
        for ws, lst in sorted(runs_of(a.check, a.mode, with_config=True).items()):
            if ws not in cal or cal[ws][2] is None:
                continue
            t_round, theta, t_key = cal[ws]
            for r, cfg in lst:
                n = cfg["keys"]
                nbytes = n * int(cfg["key_mib"] * 2**20 / 4) * 4
                meas = r["kvstore"]["round_seconds_median"]
                pred = sync(t_round, t_key, theta, n, ws[0], nbytes, a.additive)
                err = (pred - meas) / meas * 100
                print("| %d keys x %g KiB | %d | %d | %.3f | %.3f | %+.0f |" % (
                    n, cfg["key_mib"] * 1024, ws[0], ws[1], meas * 1e3, pred * 1e3, err))

    print()
    print("| model | W | S | single ms | measured ms | predicted ms | error % | dist / single |")
    print("|---|---|---|---|---|---|---|---|")
    errors = []
    for p in a.train:
        d = json.load(open(p))
        for m in d["models"]:
            t1 = m["single_process"]["step_seconds_median"]
            K = m["parameter_arrays"]
            M = m["parameters"] * 4
            rows = {}
            for e in m["dist_sync"]:
                if e["net"]["mode"] != a.mode:
                    continue
                rows.setdefault((e["workers"], e["servers"]), []).append(e["step_seconds_median"])
            for (w, s), steps in sorted(rows.items()):
                meas = statistics.median(steps)
                if (w, s) not in cal or cal[(w, s)][2] is None:
                    continue
                t_round, theta, t_key = cal[(w, s)]
                pred = t1 + sync(t_round, t_key, theta, K, w, M, a.additive)
                err = (pred - meas) / meas * 100
                errors.append(abs(err))
                print("| %s | %d | %d | %.2f | %.2f | %.2f | %+.0f | %.2f |" % (
                    m["model"], w, s, t1 * 1e3, meas * 1e3, pred * 1e3, err, t1 / meas))
    if errors:
        print("\nmedian |error| %.0f%%, worst %.0f%%" % (statistics.median(errors), max(errors)))


if __name__ == "__main__":
    main()
