#!/bin/bash
# ab3.sh N workers OUTDIR : alternates the current engine and stop 35's (LD_LIBRARY_PATH=/tmp/stop35)
n=$1; w=$2; out=$3; mkdir -p $out
for i in $(seq 1 $n); do
  for side in new stop35; do
    if [ $side = stop35 ]; then lib=/tmp/stop35; else lib=; fi
    LD_LIBRARY_PATH=$lib /work/main/build/tools/troupe bench engine --engines actor --workloads chain,independent,reader_writer,random_mixed --workers $w --seed $((1000+i)) --json $out/run$i-w$w-$side.json >/dev/null 2>&1
    echo "$side $(python3 /tmp/ns.py $out/run$i-w$w-$side.json | cut -d' ' -f2- | sed 's/chain_operator[^ ]* //')"
  done
done
