#!/usr/bin/env bash
# The layout rules of DESIGN.md §2, checked (CTest entry `layout_check`):
#   1. No module includes another module's internal/ headers. White-box tests (tests/) may.
#   2. A module's detail/ headers are a declared surface for named modules only: actors/detail/ (lanes, the
#      doorbell actor) for engine/, tensor/detail/ (the NDArray kernels) for op/, op/detail/ (the fused
#      operators the executor builds) for graph/.
#   3. Only bench/, tests/ and the `troupe bench` command (tools/bench_command.cc) include bench/ headers.
#   4. No product target (a library outside bench/, tests/ and examples/) links a bench or test target:
#      checked on the link lists CMake generated (build/layout/links.txt, see the top-level CMakeLists.txt).
# Usage: check_layout.sh SOURCE_DIR LINKS_FILE. Prints every violation; exits 1 when there is one.
set -uo pipefail

src="$1"
links="$2"
cd "$src" || exit 2

# Pairs "includer_module:included_module" allowed to use the included module's detail/ headers.
allowed_detail=" engine:actors op:tensor graph:op "

failures=0
fail() {
  echo "layout: $*"
  failures=$((failures + 1))
}

mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.h' '*.cc' '*.cu' '*.cuh' 2>/dev/null ||
                     find . -path ./build -prune -o -type f \( -name '*.h' -o -name '*.cc' -o -name '*.cu' \) -print)
for f in "${files[@]}"; do
  f="${f#./}"
  top="${f%%/*}"
  [[ "$f" == */* ]] || continue
  while IFS= read -r line; do
    inc="${line#*\"}"
    inc="${inc%%\"*}"
    mod="${inc%%/*}"
    [[ "$mod" == "$top" ]] && continue
    if [[ "$inc" == */internal/* && "$top" != "tests" ]]; then
      fail "$f includes $inc: another module's internal/ header"
    elif [[ "$inc" == */detail/* && "$top" != "tests" && "$allowed_detail" != *" $top:$mod "* ]]; then
      fail "$f includes $inc: $mod/detail/ is declared for [${allowed_detail}] only"
    elif [[ "$mod" == "bench" && "$top" != "tests" && "$f" != "tools/bench_command.cc" ]]; then
      fail "$f includes $inc: product code does not depend on benchmarks"
    fi
  done < <(grep -E '^[[:space:]]*#[[:space:]]*include[[:space:]]+"[a-z_]+/' "$f" || true)
done

if [[ ! -s "$links" ]]; then
  fail "no link list at $links (configure with CMake first)"
else
  while IFS= read -r line; do
    target="${line%%:*}"
    for lib in ${line#*:}; do
      case "$lib" in
        troupe_bench* | troupe::bench* | *_test | GTest::*)
          fail "product target $target links $lib" ;;
      esac
    done
  done < "$links"
fi

if ((failures > 0)); then
  echo "layout: $failures violation(s)"
  exit 1
fi
echo "layout: ${#files[@]} files and $(wc -l < "$links") product targets checked, no violation"
