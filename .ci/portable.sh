#!/usr/bin/env bash
# CI: the code paths no x86 or arm64 build of the default configuration compiles.
#   1. x86-64 with -DMPG_PORTABLE_ONLY=ON (no SIMD kernel set at all): builds the tests and runs
#      the suite through ctest.
#   2. A target that is neither x86 nor ARM (riscv64, Debian's g++-riscv64-linux-gnu): every
#      public header alone and every test, bench and example translation unit, compiled with
#      -fsyntax-only and mpg's warnings as errors. Nothing is linked or run.
#   bash .ci/portable.sh [all|portable|riscv64]
# Build dir: build-portable (MPG_PORTABLE_BUILD_DIR). MPG_CI_JOBS as in the other CI scripts.
set -euo pipefail
cd "$(dirname "$0")/.."
which="${1:-all}"
jobs="${MPG_CI_JOBS:-2}"
dir="${MPG_PORTABLE_BUILD_DIR:-build-portable}"
status=0

if [[ $which == all || $which == portable ]]; then
  start=$(date +%s)
  bash scripts/install_deps.sh
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DMPG_WERROR=ON -DMPG_PORTABLE_ONLY=ON \
    -DMPG_BUILD_BENCHMARKS=OFF -DMPG_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$dir" -j "$jobs"  # the test binaries (benchmarks and examples are off)
  echo "portable: built in $(( $(date +%s) - start ))s"
  (cd "$dir" && ctest -j "$jobs" --output-on-failure -LE packaging) || status=1
  echo "portable: x86-64 portable-only build and tests took $(( $(date +%s) - start ))s"
fi

if [[ $which == all || $which == riscv64 ]]; then
  start=$(date +%s)
  bash scripts/install_deps.sh g++-riscv64-linux-gnu
  cxx=riscv64-linux-gnu-g++
  # Only architecture-independent headers from the host: Eigen, GoogleTest's sources and Google
  # Benchmark's one header (through a directory of its own, not all of /usr/include).
  mkdir -p "$dir/riscv64-include"
  ln -sfn /usr/include/benchmark "$dir/riscv64-include/benchmark"
  flags=(-std=c++17 -fsyntax-only -Wall -Wextra -Wpedantic -Werror -pthread -Iinclude -Itests
    -isystem /usr/include/eigen3 -isystem /usr/src/googletest/googletest/include
    -isystem "$dir/riscv64-include")
  checked=0
  for header in include/mpg/*.hpp; do
    echo "#include \"mpg/$(basename "$header")\"" |
      "$cxx" "${flags[@]}" -x c++ - || { echo "riscv64: FAILED: $header"; status=1; }
    checked=$((checked + 1))
  done
  for source in tests/test_*.cpp bench/*.cpp examples/*.cpp; do
    "$cxx" "${flags[@]}" "$source" || { echo "riscv64: FAILED: $source"; status=1; }
    checked=$((checked + 1))
  done
  echo "riscv64: $checked files checked with -fsyntax-only in $(( $(date +%s) - start ))s"
fi
exit "$status"
