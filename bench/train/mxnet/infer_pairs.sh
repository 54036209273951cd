#!/usr/bin/env bash
# ResNet-18 inference (one 3 x 224 x 224 image) of troupe, with and without the executor's inference fusion
# (TROUPE_EXEC_FUSE), beside MXNet 1.9.1 (resnet_infer.py), in alternating triples; one JSON line per run.
# The same thread budget on both sides: one engine worker, OpenMP threads = cores.
# Usage: bench/train/mxnet/infer_pairs.sh TROUPE_BIN OUT.jsonl [TRIPLES]   (MXNet in /work/mxnet-venv or $MXNET_PY)
set -euo pipefail
troupe="$1"; out="$2"; triples="${3:-4}"
py="${MXNET_PY:-/work/mxnet-venv/bin/python}"
here="$(cd "$(dirname "$0")" && pwd)"
cores="$(nproc)"
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
run_troupe() {
  TROUPE_CPU_WORKERS=1 TROUPE_EXEC_FUSE="$1" "$troupe" bench train --workloads resnet18-infer --repeat 5 \
    --json "$tmp" >/dev/null 2>&1
  python3 -c "
import json, statistics, sys
r = json.load(open(sys.argv[1]))['resnet18-infer']['step']['images_per_s']['runs']
print(json.dumps({'side': 'troupe bench train --workloads resnet18-infer --repeat 5', 'TROUPE_EXEC_FUSE': int(sys.argv[2]),
                  'latency_ms_median': 1000 / statistics.median(r), 'latency_ms_best': 1000 / max(r)}))" "$tmp" "$1"
}
run_mxnet() { MXNET_CPU_WORKER_NTHREADS=1 OMP_NUM_THREADS="$cores" "$py" "$here/resnet_infer.py" 2>/dev/null; }
for ((i = 1; i <= triples; i++)); do
  if ((i % 2)); then run_troupe 1; run_troupe 0; run_mxnet; else run_mxnet; run_troupe 0; run_troupe 1; fi
done >"$out"
