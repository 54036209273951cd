#!/usr/bin/env bash
# troupe's ResNet-18 training step in float32 and with --dtype bfloat16 beside MXNet 1.9.1's in float32 and with its
# AMP bf16 conversion (resnet18_amp_step.py), back to back, alternating which side goes first; the same thread
# budget on both sides (one engine worker, OpenMP/BLAS threads = cores). One JSON line per measurement:
#   {"side": "troupe", "mode": "float32"|"bf16", "images_per_s": median, "runs": [...]}
#   {"side": "mxnet", ...resnet18_amp_step.py's document...}
# Usage: bench/train/mxnet/amp_pairs.sh TROUPE_BIN PAIRS [BATCH [REPEAT]]
# MXNET_PY: the Python interpreter that has MXNet 1.9.1 (default: python3).
set -euo pipefail
troupe="$1"; pairs="${2:-3}"; batch="${3:-64}"; repeat="${4:-3}"
py="${MXNET_PY:-python3}"
here="$(cd "$(dirname "$0")" && pwd)"
cores="$(nproc)"
json="$(mktemp)"
trap 'rm -f "$json"' EXIT
run_troupe() {
  local mode="$1" amp=()
  [[ "$mode" == bf16 ]] && amp=(--dtype bfloat16)
  TROUPE_CPU_WORKERS=1 TROUPE_BLAS_THREADS="$cores" "$troupe" bench train --workloads resnet18 \
    --batch-size "$batch" --repeat "$repeat" "${amp[@]}" --json "$json" > /dev/null
  python3 - "$json" "$mode" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))['resnet18']
ips = d['step']['images_per_s']
print(json.dumps({'side': 'troupe', 'mode': sys.argv[2], 'ok': d['ok'], 'images_per_s': ips['median'],
                  'runs': ips['runs']}))
PY
}
run_mxnet() {
  MXNET_CPU_WORKER_NTHREADS=1 OMP_NUM_THREADS="$cores" "$py" "$here/resnet18_amp_step.py" --repeat "$repeat" \
    --batch-size "$batch" 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); d["side"]="mxnet"; print(json.dumps(d))'
}
for ((i = 1; i <= pairs; i++)); do
  if ((i % 2)); then run_troupe float32; run_troupe bf16; run_mxnet; else run_mxnet; run_troupe bf16; run_troupe float32; fi
done
