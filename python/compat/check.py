"""Compares an example script's results in troupe with MXNet 1.9.1's (compat/reference/<script>.json, written by
running the same script in MXNet 1.9.1: python <script>.py --json reference/<script>.json).

    python check.py troupe_results.json

Both frameworks start from the same NumPy weights and take batches in the same order; what may differ is float
rounding, which grows over training steps (MXNet's own MKLDNN and native backends differ by that much). So:
accuracies within 0.01, losses and cross-entropies within 2%, a first-step loss within 1e-4 relative, exact
values (KVStore sums) equal, other numbers within 1e-3 relative + 1e-3 (checked for the first training step's
outputs only)."""
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOLERANCES = {
    "test_accuracy": ("abs", 0.01),
    "test_cross_entropy": ("rel", 0.02),
    "first_batch_loss": ("rel", 1e-4),
    "sum": ("exact", 0), "multi": ("exact", 0), "rank": ("exact", 0), "num_workers": ("exact", 0),
    "after_sgd": ("rel", 1e-5),
}


def flat(v):
    if isinstance(v, list):
        return [x for item in v for x in flat(item)]
    return [v]


def compare(got, want):
    problems = []
    for key, w in want.items():
        if key == "script" or key not in TOLERANCES:
            continue
        if key not in got:
            problems.append("%s: missing" % key)
            continue
        kind, tol = TOLERANCES[key]
        gs, ws = flat(got[key]), flat(w)
        if len(gs) != len(ws):
            problems.append("%s: %d values, MXNet has %d" % (key, len(gs), len(ws)))
            continue
        for g, x in zip(gs, ws):
            ok = (g == x if kind == "exact" else
                  abs(g - x) <= tol if kind == "abs" else abs(g - x) <= tol * max(abs(x), 1e-12))
            if not ok or (isinstance(g, float) and math.isnan(g)):
                problems.append("%s: troupe %r, MXNet %r (tolerance %s %g)" % (key, g, x, kind, tol))
                break
    return problems


def main():
    got = json.load(open(sys.argv[1]))
    want = json.load(open(os.path.join(HERE, "reference", got["script"] + ".json")))
    problems = compare(got, want)
    for p in problems:
        print("check: " + p)
    print("check: %s %s" % (got["script"], "agrees with MXNet 1.9.1" if not problems else "DIFFERS"))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
