#!/usr/bin/env bash
# Builds the MXNet engine anchor (bench/engine/mxnet/mxnet_engine_bench.cc) with g++ alone; CMake never sees it.
#
#   bench/engine/mxnet/build.sh [MXNET_LIB_DIR] [OUT]
#
# MXNET_LIB_DIR (argument or environment variable): the folder holding MXNet 1.9.1's libmxnet.so, by default
# the pip wheel's in /work/mxnet-venv. The program dlopen()s that library at run time (no MXNet header or
# link-time dependency); its path is baked in as the default of --lib. OUT (the binary) defaults to
# bench/engine/mxnet/mxnet_engine_bench, which this folder's .gitignore keeps out of commits.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
lib_dir="${1:-${MXNET_LIB_DIR:-}}"
if [[ -z "$lib_dir" ]]; then
  lib_dir="$(ls -d /work/mxnet-venv/lib/python3*/site-packages/mxnet 2>/dev/null | head -n1 || true)"
fi
out="${2:-${here}/mxnet_engine_bench}"
if [[ -z "$lib_dir" || ! -f "$lib_dir/libmxnet.so" ]]; then
  echo "build.sh: no libmxnet.so in '${lib_dir}'. Install MXNet 1.9.1 outside the repo:" >&2
  echo "  python3 -m venv /work/mxnet-venv && /work/mxnet-venv/bin/pip install mxnet==1.9.1 \"numpy<1.24\"" >&2
  echo "or pass the folder holding libmxnet.so (argument or MXNET_LIB_DIR)." >&2
  exit 2
fi
lib="$(cd "$lib_dir" && pwd)/libmxnet.so"
set -x
g++ -std=c++20 -O2 -g -Wall -Wextra -pthread -DMXNET_BENCH_DEFAULT_LIB="\"${lib}\"" \
  "${here}/mxnet_engine_bench.cc" -o "$out" -ldl
