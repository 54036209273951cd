#!/usr/bin/env bash
# Packs the CUDA build's GPU executables, troupe's libraries, CTest files and the non-system libraries they
# need into .devrun/bundle.tar.xz (paths relative to the repo root), and Fashion-MNIST into .devrun/fashion.
set -euo pipefail
cd "$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
bins="build/tools/troupe $(ls build/tests/gpu/*_test build/tests/base/gpu_module*_test) build/tests/kvstore/kvstore_nccl_test"
rm -rf build/devlibs; mkdir -p build/devlibs
for b in $bins $(find build -path build/tests/install -prune -o -name 'libtroupe*.so*' -print); do
  ldd $b | awk '/=> \//{print $3}'
done | sort -u | while read -r lib; do
  case "$(basename $lib)" in
    libc.so*|libm.so*|libpthread*|libdl.so*|librt.so*|ld-linux*|libstdc++*|libgcc_s*|libcuda*|libcudnn*|libnccl*|libcublas*|libcurand*|libnvrtc*|libtroupe*) ;;
    *) cp -L "$lib" build/devlibs/$(basename $lib) ;;
  esac
done
ls build/devlibs
files="$bins $(find build -path build/tests/install -prune -o -name 'libtroupe*.so*' -print) $(find build -name CTestTestfile.cmake) build/devlibs"
XZ_OPT=-9 tar cJf .devrun/bundle.tar.xz $files
mkdir -p .devrun/fashion; cp /usr/share/datasets/fashion-mnist/*.gz .devrun/fashion/
du -sh .devrun/*
