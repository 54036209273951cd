#!/usr/bin/env bash
# ResNet-50 training throughput on the lent GPU, troupe against PyTorch, in one JSON ($OUT/perf.json; the log
# beside it, $OUT/perf.log):
#   - troupe: `troupe bench train --workloads resnet50 --synthetic --ctx gpu:0 --batch-size 128 --repeat 3`
#     with --dtype float32, bfloat16 and float16;
#   - PyTorch (torch_resnet50.py beside this): torchvision's resnet50 at the same batch, SGD with momentum,
#     eager float32 with TF32 on and eager bf16 autocast in channels_last; then torch.compile of the bf16 step,
#     for information, in whatever time is left.
# Every step runs under a timeout taken from what is left of PERF_BUDGET_S (default 280 s), so the script ends
# within about 5 minutes however a step behaves; a step that fails or times out is recorded in the JSON with its
# exit status, and the others still run.
#
# On the device (the CUDA build packed by bundle.sh, .devrun carried; see README.md):
#     bash bench/gpu/perf.sh
# Here, a dry run on the CPU: this tree's build/tools/troupe (or $TROUPE) with --ctx cpu --batch-size 2 --quick,
# PyTorch on the CPU at batch 2, one warm-up step and one timed step a mode; OUT defaults to /tmp/perf-dry-run:
#     TORCH_PY=torch-venv/bin/python bench/gpu/perf.sh --dry-run
# TORCH_PY: the Python that has torch and torchvision (default python3, which has them on the device).
set -u
R=$(cd "$(dirname "$0")/../.." && pwd)
DRY=0
case "${1:-}" in
  --dry-run) DRY=1 ;;
  "") ;;
  *) echo "usage: bench/gpu/perf.sh [--dry-run]" >&2; exit 2 ;;
esac
BUDGET=${PERF_BUDGET_S:-280}
PY=${TORCH_PY:-python3}
if ((DRY)); then OUT=${OUT:-/tmp/perf-dry-run}; fi
: "${OUT:?OUT must name the folder for the results}"
mkdir -p "$OUT"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
exec > >(tee "$OUT/perf.log") 2>&1

# left RESERVE CAP: the seconds left of the budget less RESERVE, at most CAP and at least 1.
left() {
  local l=$((BUDGET - SECONDS - $1))
  ((l > $2)) && l=$2
  ((l < 1)) && l=1
  echo "$l"
}
# run NAME SECONDS CMD...: the command under `timeout`, its exit status in $WORK/NAME.rc
run() {
  local name=$1 limit=$2
  shift 2
  echo "== $name (timeout ${limit} s): $*"; date
  timeout "$limit" "$@"
  local rc=$?
  echo "$rc" > "$WORK/$name.rc"
  echo "== $name: exit status $rc ($SECONDS s into the script)"
}

echo "== perf.sh: dry run $DRY, budget $BUDGET s, root $R, OUT $OUT"
if ((DRY)); then
  cd "$R" || exit 1
  TROUPE=${TROUPE:-build/tools/troupe}
  CTX=cpu; BATCH=2; TROUPE_RUN=(--quick); DEVICE=cpu; TORCH_STEPS=(--warmup 1 --steps 1 --runs 1)
  grep -m1 "model name" /proc/cpuinfo | sed 's/.*: //' > "$WORK/machine.txt"
else
  cd "$R" || exit 1
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$WORK/machine.txt"
  source "$R/bench/gpu/devrun_env.sh"
  devrun_setup || exit 1
  TROUPE=build/tools/troupe
  ldd "$TROUPE" | grep "not found"
  CTX=gpu:0; BATCH=128; TROUPE_RUN=(--repeat 3); DEVICE=cuda; TORCH_STEPS=(--warmup 5 --steps 10 --runs 3)
fi
[ -x "$TROUPE" ] || { echo "no troupe executable at $TROUPE"; exit 1; }

# PyTorch eager first: the anchor, whatever happens to troupe's runs
run torch_eager "$(left 150 90)" "$PY" "$R/bench/gpu/torch_resnet50.py" --device "$DEVICE" --batch-size "$BATCH" \
  "${TORCH_STEPS[@]}" --modes float32,bf16_channels_last --json "$WORK/torch_eager.json"
for dtype in float32 bfloat16 float16; do
  run "troupe_$dtype" "$(left 40 60)" "$TROUPE" bench train --workloads resnet50 --synthetic --ctx "$CTX" \
    --batch-size "$BATCH" --dtype "$dtype" "${TROUPE_RUN[@]}" --json "$WORK/troupe_$dtype.json"
done
# torch.compile gets what is left (its own budget a little under the timeout)
compile_s=$(left 20 150)
run torch_compile $((compile_s + 10)) "$PY" "$R/bench/gpu/torch_resnet50.py" --device "$DEVICE" \
  --batch-size "$BATCH" "${TORCH_STEPS[@]}" --modes compile --compile-budget "$compile_s" \
  --json "$WORK/torch_compile.json"

python3 - "$WORK" "$OUT/perf.json" "$DRY" "$BATCH" "$CTX" <<'PY'
import json, os, sys, time
work, path, dry, batch, ctx = sys.argv[1], sys.argv[2], sys.argv[3] == '1', int(sys.argv[4]), sys.argv[5]

def load(name):
    try:
        with open(os.path.join(work, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

def rc(name):
    try:
        return int(open(os.path.join(work, name + '.rc')).read())
    except (OSError, ValueError):
        return None

doc = {'benchmark': 'bench/gpu/perf.sh: ResNet-50 training step, troupe against PyTorch',
       'dry_run': dry, 'finished': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()),
       'machine': open(os.path.join(work, 'machine.txt')).read().strip(), 'batch_size': batch, 'ctx': ctx,
       'troupe': {}, 'torch': {}, 'summary': {}}
if dry:
    doc['note'] = ('dry run on the CPU: tiny batch, --quick and one timed PyTorch step; the figures say '
                   'nothing about speed, only that every part runs and reports')
for dtype in ('float32', 'bfloat16', 'float16'):
    j = load('troupe_%s.json' % dtype)
    w = (j or {}).get('resnet50', {})
    step = w.get('step', {})
    entry = {'exit_status': rc('troupe_' + dtype), 'ok': w.get('ok'),
             'images_per_s': (step.get('images_per_s') or {}).get('median'),
             'images_per_s_best': (step.get('images_per_s') or {}).get('best'),
             'errors': w.get('errors', []) + step.get('errors', []) + (j or {}).get('failures', []),
             'gemm_tflop_per_s': w.get('config', {}).get('gemm_tflop_per_s'),
             'result': j}
    doc['troupe'][dtype] = entry
    doc['summary']['troupe ' + dtype] = entry['images_per_s']
for name in ('torch_eager', 'torch_compile'):
    j = load(name + '.json')
    doc['torch'][name] = {'exit_status': rc(name), 'result': j}
    for r in (j or {}).get('results', []):
        doc['summary']['torch ' + r['mode']] = (r.get('images_per_s') or {}).get('median')

def ratio(a, b):
    a, b = doc['summary'].get(a), doc['summary'].get(b)
    return a / b if a and b else None

doc['summary']['troupe float32 / torch float32 (TF32)'] = ratio('troupe float32', 'torch float32')
doc['summary']['troupe bfloat16 / torch bf16_channels_last'] = ratio('troupe bfloat16', 'torch bf16_channels_last')
doc['summary']['troupe float16 / torch bf16_channels_last'] = ratio('troupe float16', 'torch bf16_channels_last')
with open(path, 'w') as f:
    json.dump(doc, f, indent=1)
    f.write('\n')
print(json.dumps(doc['summary'], indent=1))
PY
echo "== wrote $OUT/perf.json after $SECONDS s"
