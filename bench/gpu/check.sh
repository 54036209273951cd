#!/usr/bin/env bash
# GPU checks on the lent device: unpack the prebuilt CUDA build (same relative paths), run the GPU suites,
# the nccl store, troupe train on gpu:0 and the GPU benchmark. Logs under $OUT.
set -u
R=$(pwd)
LOG=$OUT/gpu.log
exec > >(tee -a $LOG) 2>&1
echo "== root $R"; date
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
# unpack at the build's own path (.devrun/build_root), CUDA libraries on LD_LIBRARY_PATH
source "$R/bench/gpu/devrun_env.sh"
devrun_setup || exit 1
mkdir -p /usr/share/datasets/fashion-mnist && cp .devrun/fashion/* /usr/share/datasets/fashion-mnist/
for b in build/tools/troupe build/tests/gpu/*_test build/tests/kvstore/kvstore_nccl_test; do
  ldd $b | grep "not found" | sed "s|^|$b: |"
done
cd build
echo "== ctest -L gpu"; date
timeout 150 ctest -L gpu --output-on-failure --timeout 120 -j 4 2>&1 | tee $OUT/ctest_gpu.log | tail -40
cp Testing/Temporary/LastTest.log $OUT/LastTest.log 2>/dev/null
echo "== ctest -R gpu_module (the dlopen'd CUDA backend)"; date
timeout 60 ctest -R gpu_module --output-on-failure --timeout 50 2>&1 | tail -8
echo "== train mlp gpu:0"; date
timeout 60 tools/troupe train --model mlp --devices gpu:0 --epochs 3 --progress lines --min-accuracy 0.8
echo "rc=$?"
echo "== train lenet gpu:0"; date
timeout 80 tools/troupe train --model lenet --devices gpu:0 --epochs 2 --progress lines --min-accuracy 0.8
echo "rc=$?"
echo "== train mlp gpu:0 kvstore nccl"; date
timeout 50 tools/troupe train --model mlp --devices gpu:0 --kvstore nccl --epochs 2 --progress lines --min-accuracy 0.8
echo "rc=$?"
echo "== launch dist_sync, both workers on gpu:0"; date
timeout 90 tools/troupe launch -n 2 -s 1 -- tools/troupe train --model lenet --devices gpu:0 --kvstore dist_sync --epochs 1 --progress none --min-accuracy 0.8
echo "rc=$?"
echo "== bench ops gpu"; date
timeout 90 tools/troupe bench ops --ctx gpu --repeat 3 --json $OUT/ops_gpu.json
echo "rc=$?"
echo "== compute-sanitizer memcheck"; date
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$CS" ]; then
  for t in engine_gpu_test ndarray_gpu_test op_dense_gpu_test op_act_norm_gpu_test op_tensor_gpu_test optimizer_gpu_test op_math_gpu_test op_matrix_gpu_test op_nn_gpu_test; do
    timeout 60 $CS --tool memcheck --print-limit 5 tests/gpu/$t --gtest_brief=1 > /tmp/mc_$t.log 2>&1
    echo "$t rc=$? $(grep -E "ERROR SUMMARY" /tmp/mc_$t.log)"; { echo "=== $t"; cat /tmp/mc_$t.log; } >> $OUT/memcheck.log
  done
else echo "no compute-sanitizer"; fi
date
