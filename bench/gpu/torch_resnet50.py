#!/usr/bin/env python3
"""PyTorch's ResNet-50 training step: the anchor of `troupe bench train --workloads resnet50 --synthetic`.

torchvision's resnet50 (the v1.5 layout: the stride on the 3x3 convolution; 25,557,032 parameters, troupe's
Gluon-style ResNet-50 v1 has 25,575,912), 1000 classes, on two random batches of 3 x 224 x 224 images (uniform in
[0, 1)) with random labels made once on the device, as troupe's --synthetic. A step: zero the gradients,
forward, cross-entropy (mean over the batch), backward, SGD with momentum 0.9 and learning rate 0.05 (troupe's
bench optimizer: its rescale_grad 1/batch is the mean). images/s = batch x steps / seconds, timed with the
device synchronised at both ends of a run; median and best over the runs.

Modes (--modes, in order):
  float32            eager float32; on a GPU with TF32 on for matrix products and convolutions (PyTorch's
                     usual training setting on Hopper) and cudnn.benchmark
  bf16_channels_last eager, autocast to bfloat16, model and data in channels_last
  compile            the bf16_channels_last step with the model through torch.compile (information only;
                     the optimizer stays eager), in a child process limited to --compile-budget seconds (its
                     compile time is reported); a timeout or an error is recorded, not raised

Writes one JSON document to --json (and prints it). Exit status 0 unless the arguments are wrong.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

MODES = ['float32', 'bf16_channels_last', 'compile']


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--device', default='cuda', help='cuda, cuda:N or cpu (default cuda)')
    p.add_argument('--batch-size', type=int, default=128)
    p.add_argument('--warmup', type=int, default=5, help='untimed steps before the timed runs (default 5)')
    p.add_argument('--steps', type=int, default=10, help='steps per timed run (default 10)')
    p.add_argument('--runs', type=int, default=3, help='timed runs (default 3)')
    p.add_argument('--modes', default=','.join(MODES), help='comma-separated, of ' + ', '.join(MODES))
    p.add_argument('--compile-budget', type=float, default=120,
                   help='seconds the compile mode may take in all, compiling included (default 120)')
    p.add_argument('--json', help='write the result here too')
    p.add_argument('--child', action='store_true', help=argparse.SUPPRESS)  # the compile mode's own process
    a = p.parse_args(argv)
    modes = [m for m in a.modes.split(',') if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        p.error('--modes: unknown %s (known: %s)' % (', '.join(unknown) or 'none given', ', '.join(MODES)))
    if min(a.batch_size, a.steps, a.runs) < 1 or a.warmup < 0:
        p.error('--batch-size, --steps and --runs must be at least 1, --warmup at least 0')
    a.modes = modes
    return a


def sync(torch, device):
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def measure(a, mode):
    """One mode's images/s: builds the model, warms up, times the runs."""
    import torch
    import torchvision

    device = torch.device(a.device)
    torch.manual_seed(1)
    if device.type == 'cuda':
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cudnn.benchmark = True
    half = mode in ('bf16_channels_last', 'compile')
    layout = torch.channels_last if half else torch.contiguous_format
    model = torchvision.models.resnet50(num_classes=1000).to(device=device, memory_format=layout)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator(device='cpu').manual_seed(11)
    batches = []
    for _ in range(2):
        x = torch.rand(a.batch_size, 3, 224, 224, generator=gen).to(device=device, memory_format=layout)
        y = torch.randint(0, 1000, (a.batch_size,), generator=gen).to(device)
        batches.append((x, y))

    # compile: the model's forward and backward through torch.compile (the optimizer stays eager)
    net = torch.compile(model) if mode == 'compile' else model

    def run(x, y):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=half):
            loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        return loss

    compile_s = None
    if mode == 'compile':
        t0 = time.perf_counter()
        run(*batches[0])  # compiles
        sync(torch, device)
        compile_s = time.perf_counter() - t0
    for i in range(a.warmup):
        run(*batches[i % 2])
    sync(torch, device)
    per_run = []
    last = None
    for _ in range(a.runs):
        t0 = time.perf_counter()
        for i in range(a.steps):
            last = run(*batches[i % 2])
        sync(torch, device)
        per_run.append(a.batch_size * a.steps / (time.perf_counter() - t0))
    out = {'mode': mode, 'images_per_s': {'median': statistics.median(per_run), 'best': max(per_run), 'runs': per_run},
           'loss_after': float(last.detach().float().cpu()), 'finite': bool(torch.isfinite(last).item())}
    if compile_s is not None:
        out['compile_s'] = compile_s
    if device.type == 'cuda':
        out['max_memory_gib'] = torch.cuda.max_memory_allocated(device) / 2 ** 30
    return out


def compile_in_child(a):
    """The compile mode in a child process, limited to --compile-budget seconds."""
    argv = [sys.executable, os.path.abspath(__file__), '--child', '--modes', 'compile', '--device', a.device,
            '--batch-size', str(a.batch_size), '--warmup', str(a.warmup), '--steps', str(a.steps),
            '--runs', str(a.runs)]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=a.compile_budget)
    except subprocess.TimeoutExpired:
        return {'mode': 'compile', 'skipped': 'over its budget of %g s (compiling included)' % a.compile_budget}
    elapsed = time.perf_counter() - t0
    try:
        result = json.loads(p.stdout)['results'][0]
        result['process_s'] = elapsed
        return result
    except (ValueError, KeyError, IndexError):
        tail = (p.stderr or p.stdout or '').strip().splitlines()[-3:]
        return {'mode': 'compile', 'error': 'exit status %d: %s' % (p.returncode, ' | '.join(tail))}


def main(argv):
    a = parse_args(argv)
    import torch
    import torchvision

    doc = {'benchmark': 'torch resnet50 training step', 'torch': torch.__version__,
           'torchvision': torchvision.__version__, 'python': platform.python_version(), 'device': a.device,
           'batch_size': a.batch_size, 'warmup_steps': a.warmup, 'steps_per_run': a.steps, 'runs': a.runs,
           'model': 'torchvision.models.resnet50(num_classes=1000) (v1.5: stride on the 3x3 convolution), '
                    '25,557,032 parameters',
           'step': 'zero_grad, forward, CrossEntropyLoss (mean), backward, SGD lr 0.05 momentum 0.9',
           'data': 'two random batches of 3 x 224 x 224 in [0, 1) and random labels, made on the device',
           'results': []}
    if torch.device(a.device).type == 'cuda':
        doc['gpu'] = torch.cuda.get_device_name(torch.device(a.device))
        doc['settings'] = 'TF32 on for matmul and cuDNN, cudnn.benchmark'
    else:
        doc['cpu_threads'] = torch.get_num_threads()
    for mode in a.modes:
        t0 = time.perf_counter()
        if mode == 'compile' and not a.child:
            r = compile_in_child(a)
        else:
            try:
                r = measure(a, mode)
            except Exception as e:  # reported in the document: the other modes still run
                first = str(e).strip().splitlines()[0] if str(e).strip() else ''
                r = {'mode': mode, 'error': '%s: %s' % (type(e).__name__, first)}
        r['wall_s'] = time.perf_counter() - t0
        doc['results'].append(r)
        print('%s: %s' % (mode, r.get('images_per_s', {}).get('median', r.get('error') or r.get('skipped'))),
              file=sys.stderr, flush=True)
    text = json.dumps(doc, indent=1)
    if a.json:
        with open(a.json, 'w') as f:
            f.write(text + '\n')
    print(text)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
