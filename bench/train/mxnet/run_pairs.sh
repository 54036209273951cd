#!/usr/bin/env bash
# troupe's training beside MXNet 1.9.1's Module (lenet_fit.py) on the same network and data, back to back,
# alternating which goes first; the same thread budget on both sides (one engine worker, OpenBLAS/OpenMP
# threads = cores / 1).
# Usage: bench/train/mxnet/run_pairs.sh TROUPE_BIN PAIRS [EPOCHS [MODEL [BATCH [TRAIN_IMAGES [TEST_IMAGES]]]]]
#   MODEL lenet (default, batch 100, every image) or resnet18 (e.g. batch 64, 1280 training images);
#   TRAIN_IMAGES / TEST_IMAGES 0 = all. MXNet in /work/mxnet-venv or $MXNET_PY.
set -euo pipefail
troupe="$1"; pairs="${2:-3}"; epochs="${3:-2}"; model="${4:-lenet}"; batch="${5:-100}"
train_images="${6:-0}"; test_images="${7:-0}"
common=(--model "$model" --epochs "$epochs" --batch-size "$batch" --train-images "$train_images" --test-images "$test_images")
py="${MXNET_PY:-/work/mxnet-venv/bin/python}"
here="$(cd "$(dirname "$0")" && pwd)"
cores="$(nproc)"
run_troupe() {
  local out rates acc
  out="$(TROUPE_CPU_WORKERS=1 TROUPE_BLAS_THREADS="$cores" "$troupe" train "${common[@]}" --progress none 2>&1)"
  rates="$(grep -o 'Epoch\[[0-9]*\] Speed: [0-9.]* samples/sec' <<<"$out" | cut -d' ' -f3 | paste -sd, -)"
  acc="$(grep -o 'final test accuracy [0-9.]*' <<<"$out" | cut -d' ' -f4)"
  echo "{\"side\": \"troupe\", \"images_per_s\": [$rates], \"test_accuracy\": $acc}"
}
run_mxnet() {
  MXNET_CPU_WORKER_NTHREADS=1 OMP_NUM_THREADS="$cores" "$py" "$here/lenet_fit.py" "${common[@]}" 2>/dev/null
}
for ((i = 1; i <= pairs; i++)); do
  if ((i % 2)); then run_troupe; run_mxnet; else run_mxnet; run_troupe; fi
done
