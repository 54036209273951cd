#!/usr/bin/env python3
"""Per-shape oneDNN bfloat16 convolution times of troupe's and MXNet's ResNet-18 training steps, side by side,
from two oneDNN verbose logs (DNNL_VERBOSE=1), and each side's convolution time per training step.

    DNNL_VERBOSE=1 TROUPE_CPU_WORKERS=1 TROUPE_BLAS_THREADS=2 build/tools/troupe bench train \\
        --workloads resnet18 --batch-size 64 --repeat 1 --dtype bfloat16 --json /tmp/r.json > troupe.log
    DNNL_VERBOSE=1 MXNET_CPU_WORKER_NTHREADS=1 OMP_NUM_THREADS=2 python bench/train/mxnet/resnet18_amp_step.py \\
        --repeat 1 --steps 5 --warmup 1 > mxnet.log
    python3 bench/train/mxnet/dnnl_conv_times.py troupe.log mxnet.log [--layouts]

Only convolutions with a bfloat16 operand count (MXNet's script also runs float32 steps). For each (pass,
shape): the median time of its calls and the call count on each side. A side's training steps are counted
from its weight-gradient calls (every convolution has one per step; forward-only passes, such as the
benchmarks' accuracy checks, have none), and its time per step is the sum over shapes of median time x calls
per step. --layouts also prints each side's implementation and memory layouts.
"""
import collections
import statistics
import sys


def load(path):
    calls = collections.defaultdict(list)
    for line in open(path, errors='replace'):
        if ',exec,' not in line or ',convolution,' not in line:
            continue
        f = line.strip().split(',')
        i = f.index('exec')
        prop, descs = f[i + 4], f[i + 5]
        if '_bf16' not in descs:
            continue
        shape = next(x for x in f if x.startswith('mb'))
        calls[(prop, shape)].append((float(f[-1]), f[i + 3], descs))
    return calls


def per_step(calls):
    shapes = {shape for _, shape in calls}
    steps = min(len(calls.get(('backward_weights', s), [])) for s in shapes) if shapes else 0
    # Each shape's weight-gradient calls per step: how many layers have it.
    total = collections.Counter()
    for (prop, shape), v in calls.items():
        layers = len(calls.get(('backward_weights', shape), [])) / steps if steps else 0
        total[prop] += statistics.median(t for t, _, _ in v) * layers
    return steps, total


def main():
    args = [a for a in sys.argv[1:] if not a.startswith('--')]
    if len(args) != 2:
        sys.exit(__doc__)
    troupe, mxnet = load(args[0]), load(args[1])
    for key in sorted(set(troupe) | set(mxnet)):
        med = lambda d: statistics.median(t for t, _, _ in d[key]) if key in d else float('nan')
        print('%-17s %-58s troupe %7.3f ms (%3d)  mxnet %7.3f ms (%3d)' %
              (key[0], key[1], med(troupe), len(troupe.get(key, [])), med(mxnet), len(mxnet.get(key, []))))
        if '--layouts' in sys.argv:
            for side, d in (('troupe', troupe), ('mxnet', mxnet)):
                if key in d:
                    print('    %-6s %s %s' % (side, d[key][0][1], d[key][0][2]))
    for side, d in (('troupe', troupe), ('mxnet', mxnet)):
        steps, total = per_step(d)
        print('%s: %d training steps; ms per step: %s; convolutions %.1f' %
              (side, steps, ', '.join('%s %.1f' % kv for kv in sorted(total.items())), sum(total.values())))


if __name__ == '__main__':
    main()
