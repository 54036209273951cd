"""The anchor of `troupe bench nn`: MXNet 1.9.1's Gluon on the same network, not hybridized and hybridized.

A HybridSequential of LAYERS Dense(WIDTH, relu) then Dense(10), softmax cross-entropy, on a (BATCH, WIDTH) batch;
one step records the forward pass and the loss, calls backward and waits (mx.nd.waitall()). Prints the median
step time over REPEAT runs of at least 0.2 s each, and microseconds per recorded operator of the imperative step
(2 * LAYERS + 1 operators for the Dense blocks, 4 for the loss: log_softmax, pick, negative, mean).

Usage (MXNet 1.9.1 in a venv: pip install mxnet==1.9.1 "numpy<1.24"):
    python imperative_overhead.py [--layers 20] [--width 16] [--batch 4] [--repeat 5] [--threads N]
"""
import argparse
import os
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--layers', type=int, default=20)
    ap.add_argument('--width', type=int, default=16)
    ap.add_argument('--batch', type=int, default=4)
    ap.add_argument('--repeat', type=int, default=5)
    ap.add_argument('--threads', type=int, default=0, help='OMP_NUM_THREADS / MXNET_CPU_WORKER_NTHREADS (0: as set)')
    a = ap.parse_args()
    if a.threads:
        os.environ['OMP_NUM_THREADS'] = str(a.threads)
    import mxnet as mx
    from mxnet import autograd, gluon
    from mxnet.gluon import nn

    def make():
        net = nn.HybridSequential()
        for _ in range(a.layers):
            net.add(nn.Dense(a.width, activation='relu', in_units=a.width))
        net.add(nn.Dense(10, in_units=a.width))
        net.initialize(mx.init.Xavier())
        return net

    x = mx.nd.random.uniform(-1, 1, (a.batch, a.width))
    y = mx.nd.array([i % 10 for i in range(a.batch)])
    ops = 2 * a.layers + 1 + 4
    results = {}
    for mode in ('imperative', 'hybridized'):
        net, loss_fn = make(), gluon.loss.SoftmaxCrossEntropyLoss()
        if mode == 'hybridized':
            net.hybridize()
            loss_fn.hybridize()

        def step():
            with autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
            mx.nd.waitall()

        for _ in range(20):
            step()
        times = []
        for _ in range(a.repeat):
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < 0.2:
                step()
                n += 1
            times.append((time.perf_counter() - t0) / n)
        times.sort()
        results[mode] = times[len(times) // 2]
    print('MXNet %s Gluon, %d Dense(%d) layers, batch %d, %d runs (medians)' %
          (mx.__version__, a.layers, a.width, a.batch, a.repeat))
    print('  imperative step  %9.1f us  (%d recorded operators: %.2f us each)' %
          (results['imperative'] * 1e6, ops, results['imperative'] * 1e6 / ops))
    print('  hybridized step  %9.1f us' % (results['hybridized'] * 1e6))


if __name__ == '__main__':
    main()
