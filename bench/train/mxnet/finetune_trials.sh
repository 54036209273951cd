#!/usr/bin/env bash
# The `troupe train --symbol` acceptance check over several trials: for each seed, symbol_finetune.py
# prepare (network initialisation and training order drawn with that seed), troupe im2rec, then troupe train
# and MXNet's Module.fit with the same settings, one thread each. Prints one line per trial and the means:
# one 2-epoch run's test accuracy moves by a few hundredths with float32 rounding alone (bench/train/README.md),
# so the comparison is of means over the same trials.
#   bench/train/mxnet/finetune_trials.sh TROUPE_BIN PYTHON OUT_DIR SEED...
set -euo pipefail
troupe=$1 py=$2 out=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
for seed in "$@"; do
  d=$out/seed$seed
  rm -rf "$d" && mkdir -p "$d/rec"
  "$py" "$here/symbol_finetune.py" prepare "$d" --train 6000 --test 1000 --seed "$seed" > "$d/prepare.log" 2>&1
  "$troupe" im2rec "$d/train.lst" "$d/images" "$d/rec/train" > /dev/null
  "$troupe" im2rec "$d/test.lst" "$d/images" "$d/rec/test" > /dev/null
  TROUPE_BLAS_THREADS=1 "$troupe" train --symbol "$d/resnet20-symbol.json" --params "$d/resnet20-0000.params" \
    --data rec:"$d/rec" --no-shuffle --lr 0.05 --batch-size 100 --epochs 2 --progress none > "$d/troupe.log" 2>&1
  OMP_NUM_THREADS=1 MXNET_CPU_WORKER_NTHREADS=1 "$py" "$here/symbol_finetune.py" fit "$d" --lr 0.05 --batch-size 100 \
    --epochs 2 > "$d/mxnet.log" 2>&1
  t=$(sed -n 's/^final test accuracy //p' "$d/troupe.log")
  m=$("$py" -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["final_test_accuracy"])' "$d/mxnet.log")
  echo "seed $seed troupe $t mxnet $m" | tee -a "$out/trials.txt"
done
awk '{t += $4; m += $6; n++} END {printf "trials %d: mean troupe %.4f, mean MXNet %.4f, difference %+.4f\n", n, t / n, m / n, t / n - m / n}' "$out/trials.txt"
