# shellcheck shell=bash
# Sourced by check.sh and perf.sh on the lent device: devrun_setup unpacks the prebuilt CUDA build that
# bundle.sh packed into .devrun/ (same relative paths) and points the dynamic linker at the libraries it carries
# and at the image's CUDA libraries. The build's RPATHs and test-data paths are absolute, so the tree is made
# reachable at the path it was built in (.devrun/build_root, written by bundle.sh) with a link. Run it from the
# repo root; it leaves the shell in the build's path with LD_LIBRARY_PATH exported, and returns 1 (with a
# message) when it cannot.
devrun_setup() {
  local root built
  root=$(pwd)
  built=$(cat .devrun/build_root 2>/dev/null) || { echo ".devrun/build_root missing: run bench/gpu/bundle.sh"; return 1; }
  if [ "$root" != "$built" ]; then
    mkdir -p "$(dirname "$built")"
    [ -L "$built" ] && rm -f "$built"
    [ -e "$built" ] && { echo "$built exists and is not this tree"; return 1; }
    ln -s "$root" "$built"
  fi
  cd "$built" || return 1
  tar xJf .devrun/bundle.tar.xz || { echo "unpack failed"; return 1; }
  # CUDA libraries on the image: the toolkit's and PyTorch's wheels (cuDNN, NCCL)
  local dirs="" lib p
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2 libcurand.so.10; do
    p=$(find /usr/local/cuda*/ /usr/lib/x86_64-linux-gnu /opt -name "$lib" 2>/dev/null | head -1)
    echo "lib $lib -> ${p:-MISSING}"
    [ -n "$p" ] && dirs="$dirs:$(dirname "$p")"
  done
  export LD_LIBRARY_PATH=$built/build/devlibs$dirs
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
}
