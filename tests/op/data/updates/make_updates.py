"""Generates updates.params / updates.json: MXNet 1.9.1's optimizer update operators on fixed inputs.

Each case calls one operator (mx.nd.<op>) on seeded random inputs and records the inputs before the call,
the output and every input the operator mutates (momentum, means, float32 weights) after it. Most cases
write the output into the weight (out=weight, as MXNet's optimizers call them); the *_out cases write into
a fresh array. updates.json lists the cases: operator, keyword arguments, input names, whether the output
is the weight, and which inputs are mutated.

Run with MXNet 1.9.1 (pip install mxnet==1.9.1 "numpy<1.24"):  python make_updates.py
"""
import json
import os

import mxnet as mx
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
N = 96  # elements per array

COMMON = {"lr": 0.1, "wd": 0.01, "rescale_grad": 0.5, "clip_gradient": 0.3}
CASES = [
    # name, op, kwargs, inputs, mutated inputs, weight dtype, in place
    ("sgd", "sgd_update", dict(COMMON), ["weight", "grad"], [], "float32", True),
    ("sgd_noclip", "sgd_update", {"lr": 0.05}, ["weight", "grad"], [], "float32", True),
    ("sgd_mom", "sgd_mom_update", dict(COMMON, momentum=0.9), ["weight", "grad", "mom"], ["mom"], "float32", True),
    ("sgd_mom_f64", "sgd_mom_update", dict(COMMON, momentum=0.9), ["weight", "grad", "mom"], ["mom"], "float64",
     True),
    ("sgd_mom_out", "sgd_mom_update", dict(COMMON, momentum=0.9), ["weight", "grad", "mom"], ["mom"], "float32",
     False),
    ("nag", "nag_mom_update", dict(COMMON, momentum=0.9), ["weight", "grad", "mom"], ["mom"], "float32", True),
    ("nag_out", "nag_mom_update", dict(COMMON, momentum=0.9), ["weight", "grad", "mom"], ["mom"], "float32", False),
    ("adam", "adam_update", dict(COMMON, beta1=0.8, beta2=0.99, epsilon=1e-6), ["weight", "grad", "mean", "var"],
     ["mean", "var"], "float32", True),
    ("rmsprop", "rmsprop_update", dict(COMMON, gamma1=0.9, epsilon=1e-6, clip_weights=0.6),
     ["weight", "grad", "n"], ["n"], "float32", True),
    ("rmspropalex", "rmspropalex_update", dict(COMMON, gamma1=0.9, gamma2=0.8, epsilon=1e-6),
     ["weight", "grad", "n", "g", "delta"], ["n", "g", "delta"], "float32", True),
    ("mp_sgd", "mp_sgd_update", dict(COMMON), ["weight", "grad", "weight32"], ["weight32"], "float16", True),
    ("mp_sgd_mom", "mp_sgd_mom_update", dict(COMMON, momentum=0.9), ["weight", "grad", "mom", "weight32"],
     ["mom", "weight32"], "float16", True),
    ("mp_sgd_mom_out", "mp_sgd_mom_update", dict(COMMON, momentum=0.9), ["weight", "grad", "mom", "weight32"],
     ["mom", "weight32"], "float16", False),
    ("mp_nag", "mp_nag_mom_update", dict(COMMON, momentum=0.9), ["weight", "grad", "mom", "weight32"],
     ["mom", "weight32"], "float16", True),
]


def inputs_for(names, dtype, rng):
    w32 = rng.uniform(-1, 1, N).astype(np.float32)
    g = rng.uniform(-2, 2, N).astype(np.float32)
    arrays = {}
    for name in names:
        if name == "weight":
            arrays[name] = w32.astype(dtype)
        elif name == "grad":
            arrays[name] = g.astype(dtype)
        elif name == "weight32":
            arrays[name] = w32  # the float32 weight the half weight was rounded from
        elif name in ("n", "var"):
            arrays[name] = rng.uniform(0.5, 1.5, N).astype(np.float32)  # positive: under a root
        elif name == "g":
            arrays[name] = rng.uniform(-0.5, 0.5, N).astype(np.float32)  # n - g*g stays positive
        else:
            arrays[name] = rng.uniform(-0.2, 0.2, N).astype(np.float32)
        if name != "weight32" and name not in ("weight", "grad") and dtype == "float64":
            arrays[name] = arrays[name].astype(np.float64)
    return arrays


def main():
    rng = np.random.RandomState(7)
    saved = {}
    listing = []
    for name, op, kwargs, names, mutated, dtype, in_place in CASES:
        arrays = inputs_for(names, dtype, rng)
        nd = [mx.nd.array(arrays[n], dtype=arrays[n].dtype) for n in names]
        for n, a in zip(names, nd):
            saved[name + ":in:" + n] = a.copy()
        out = nd[0] if in_place else mx.nd.zeros(N, dtype=dtype)
        getattr(mx.nd, op)(*nd, out=out, **kwargs)
        saved[name + ":out"] = out
        for n in mutated:
            saved[name + ":after:" + n] = nd[names.index(n)]
        listing.append({"case": name, "op": op, "kwargs": {k: str(v) for k, v in kwargs.items()}, "inputs": names,
                        "in_place": in_place, "mutated": mutated})
    mx.nd.save(os.path.join(HERE, "updates.params"), saved)
    with open(os.path.join(HERE, "updates.json"), "w") as f:
        json.dump(listing, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
