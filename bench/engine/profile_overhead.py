#!/usr/bin/env python3
"""The profiler's overhead on the engine benchmark: runs `troupe bench engine` in pairs, plain
then with --profile, and reports per workload the median of the paired slowdowns (profiled / plain, each
pair measured back to back, so that a slow minute of a shared machine hits both) with a bootstrap 90%
interval. Usage: profile_overhead.py TROUPE_BINARY OUT_DIR [PAIRS] [WORKERS]"""
import json, os, random, statistics, subprocess, sys


def run(troupe, out, workers, profile):
    cmd = [troupe, 'bench', 'engine', '--engines', 'actor', '--workers', str(workers), '--repeat', '9',
           '--json', out] + (['--profile'] if profile else [])
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    figures = {}
    for w in json.load(open(out))['workloads']:
        for r in w['results']:
            if r['engine'] == 'actor':
                figures[w['name']] = (r['value'], w.get('lower_is_better', True))
    return figures


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    troupe, out_dir = sys.argv[1], sys.argv[2]
    pairs = int(sys.argv[3]) if len(sys.argv) > 3 else 11
    workers = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    os.makedirs(out_dir, exist_ok=True)
    ratios = {}
    for i in range(pairs):
        plain = run(troupe, os.path.join(out_dir, f'w{workers}-off{i + 1}.json'), workers, False)
        profiled = run(troupe, os.path.join(out_dir, f'w{workers}-on{i + 1}.json'), workers, True)
        for name, (v, lower) in plain.items():
            p = profiled[name][0]
            ratios.setdefault(name, []).append(p / v if lower else v / p)
        print(f'pair {i + 1}/{pairs} done', file=sys.stderr)
    random.seed(1)
    print(f'workers={workers}, {pairs} pairs: slowdown = profiled / plain (median of the pairs, bootstrap 90% interval)')
    for name, rs in ratios.items():
        boot = sorted(statistics.median(random.choices(rs, k=len(rs))) for _ in range(2000))
        print(f'  {name:20s} {statistics.median(rs):.3f}  [{boot[100]:.3f}, {boot[1900]:.3f}]')


if __name__ == '__main__':
    main()
