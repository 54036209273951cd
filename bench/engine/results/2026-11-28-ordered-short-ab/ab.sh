#!/bin/bash
# ab.sh N OUTDIR: alternates the engine library built with kOrderShortFunctions = true ("on", the commit's
# own) and = false ("off": CPU lanes with several workers order nothing, as before), same troupe binary,
# through LD_LIBRARY_PATH (/tmp/ab_on, /tmp/ab_off hold the two libtroupe_engine.so builds).
n=$1; out=$2; mkdir -p $out
for i in $(seq 1 $n); do
  for side in on off; do
    LD_LIBRARY_PATH=/tmp/ab_$side /work/main/build/tools/troupe bench engine --engines actor \
      --workloads chain,independent,reader_writer,random_mixed --workers 1,2 --seed $((1000+i)) \
      --json $out/run$i-$side.json >/dev/null 2>&1
    echo "$side $(python3 /tmp/ns.py $out/run$i-$side.json | cut -d' ' -f2-)"
  done
done
