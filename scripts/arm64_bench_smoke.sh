#!/usr/bin/env bash
# Smoke run of the benchmarks for arm64: cross-builds bench_permute_grad with
# cmake/toolchain-aarch64-linux-gnu.cmake and runs a tiny in-cache filter under qemu-aarch64. It
# shows that bench/ builds and runs on AArch64 (the NEON set included: the rows check their
# result against the reference path first); the times it prints mean nothing, emulation says
# nothing about speed. On ARM hardware, build natively instead (README, Platforms).
# Google Benchmark for arm64: Debian's libbenchmark-dev:arm64 and libbenchmark1debian:arm64,
# fetched by apt-get with a private state dir in the build dir (the system's apt lists and dpkg
# architectures are left alone) and unpacked there with dpkg-deb -x; both kept for later runs.
#   MPG_ARM64_BENCH_DIR   build dir (default build-arm64-bench)
#   MPG_CI_JOBS           parallel compile jobs (default 2)
#   MPG_BENCH_FILTER      --benchmark_filter (default: the 16-token bf16 row at one thread)
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${MPG_ARM64_BENCH_DIR:-build-arm64-bench}"
jobs="${MPG_CI_JOBS:-2}"
filter="${MPG_BENCH_FILTER:-^BM_PermuteGrad_BF16_I32/tokens:16/.*/threads:1/}"
toolchain="$PWD/cmake/toolchain-aarch64-linux-gnu.cmake"
sysroot=/usr/aarch64-linux-gnu
start=$(date +%s)

bash scripts/install_deps.sh g++-aarch64-linux-gnu qemu-user

root="$PWD/$dir/benchmark-arm64"  # the unpacked .debs: usr/include, usr/lib/aarch64-linux-gnu
if [[ ! -f $root/usr/include/benchmark/benchmark.h ]]; then
  apt_dir="$PWD/$dir/apt"
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs"
  touch "$apt_dir/status"
  apt_options=(-o APT::Architecture=arm64 -o "APT::Architectures::=arm64"
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
    -o "Dir::State::status=$apt_dir/status" -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
  apt-get "${apt_options[@]}" -qq update
  (cd "$apt_dir/debs" &&
    apt-get "${apt_options[@]}" -qq download libbenchmark-dev:arm64 libbenchmark1debian:arm64)
  for deb in "$apt_dir"/debs/*.deb; do dpkg-deb -x "$deb" "$root"; done
  echo "arm64 bench: Google Benchmark for arm64 unpacked in $(($(date +%s) - start))s"
fi

cmake -S . -B "$dir" -DCMAKE_TOOLCHAIN_FILE="$toolchain" -DCMAKE_BUILD_TYPE=Release \
  -DMPG_WERROR=ON -DMPG_BUILD_TESTS=OFF -DMPG_BUILD_EXAMPLES=OFF -DMPG_BUILD_BENCHMARKS=ON \
  -Dbenchmark_DIR="$root/usr/lib/aarch64-linux-gnu/cmake/benchmark" >/dev/null
cmake --build "$dir" --target bench_permute_grad -j "$jobs"
echo "arm64 bench: built in $(($(date +%s) - start))s"

# A row whose result differs from the reference path is skipped with an error, which leaves the
# exit code 0: the output is checked for that and for at least one row.
out=$(qemu-aarch64 -L "$sysroot" -E "LD_LIBRARY_PATH=$root/usr/lib/aarch64-linux-gnu" \
  "$dir/bench/bench_permute_grad" --benchmark_filter="$filter" --benchmark_min_time=0.01)
echo "$out"
if grep -q "ERROR OCCURRED" <<<"$out" || ! grep -q "^BM_" <<<"$out"; then
  echo "arm64 bench: FAILED (an error above, or no row matched $filter)" >&2
  exit 1
fi
echo "arm64 bench: done in $(($(date +%s) - start))s"
