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
# The build's RPATHs and test-data paths are absolute: the device must see the tree at this same path.
pwd > .devrun/build_root
# The carried tree must stay under 64 MiB: the test set whole, the first 30,000 training images (a valid idx
# file with its count rewritten).
mkdir -p .devrun/fashion; cp /usr/share/datasets/fashion-mnist/t10k-*.gz .devrun/fashion/
python3 - <<'PY'
import gzip, struct
n = 30000
for name, item in (("train-images-idx3-ubyte.gz", 784), ("train-labels-idx1-ubyte.gz", 1)):
    raw = gzip.open("/usr/share/datasets/fashion-mnist/" + name).read()
    head = 4 + 4 * raw[3]
    out = raw[:4] + struct.pack(">I", n) + raw[8:head] + raw[head:head + n * item]
    with gzip.open(".devrun/fashion/" + name, "wb", compresslevel=9) as f:
        f.write(out)
PY
du -sh .devrun/*
