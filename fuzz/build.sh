#!/usr/bin/env bash
# Builds the libFuzzer target: fuzz/build.sh [output binary, default build-fuzz/fuzz_aclnn]
# Needs clang++ (14 or later) with the compiler-rt fuzzer and sanitizer runtimes.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/build-fuzz/fuzz_aclnn}"
mkdir -p "$(dirname "$out")"
eigen="$(pkg-config --cflags-only-I eigen3 2>/dev/null || echo -isystem/usr/include/eigen3)"
# -O1 -g: fast enough to fuzz, readable stack traces. No recovery: the first report is a finding.
"${CXX_FUZZ:-clang++}" -std=c++17 -O1 -g -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -Wall -Wextra -Wpedantic -Werror -I"$root/include" ${eigen/-I/-isystem } \
  "$root/fuzz/fuzz_aclnn.cpp" -o "$out"
echo "built $out"
