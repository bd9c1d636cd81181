#!/usr/bin/env bash
# CI: the whole mpg_tests binary under AddressSanitizer + UndefinedBehaviorSanitizer, and the
# threaded tests under ThreadSanitizer. Any report fails the job (no recovery, halt on error).
#   bash .ci/sanitizers.sh            both
#   bash .ci/sanitizers.sh asan|tsan  one of them
# Build dirs: build-asan, build-tsan (g++; runtimes libasan/libubsan/libtsan are installed when
# missing). Budget on 2 cores: about 25 minutes including both builds.
set -euo pipefail
cd "$(dirname "$0")/.."
which="${1:-all}"
jobs="${MPG_CI_JOBS:-2}"
# Tests that start threads: the TSan run. Keep in step with the test names.
tsan_filter="${MPG_TSAN_FILTER:-*Concurrency*:ExecutorLifetime.*:*ParallelFor*:*PathsMatchReference*:*Thread*}"

need_packages=()
for package in libasan8 libubsan1 libtsan2; do  # g++ 12's sanitizer runtimes
  if ! dpkg -s "$package" >/dev/null 2>&1; then need_packages+=("$package"); fi
done
if ((${#need_packages[@]})); then
  apt-get update && apt-get install -y --no-install-recommends "${need_packages[@]}"
fi

# configure_and_build <dir> <sanitizer flags>
configure_and_build() {
  local dir="$1" flags="$2" start
  start=$(date +%s)
  cmake -S . -B "$dir" -DCMAKE_CXX_COMPILER=g++ -DCMAKE_BUILD_TYPE= \
    -DCMAKE_CXX_FLAGS="-O1 -g -fno-omit-frame-pointer $flags" \
    -DCMAKE_EXE_LINKER_FLAGS="$flags" -DMPG_BUILD_BENCHMARKS=OFF -DMPG_BUILD_EXAMPLES=OFF \
    -DMPG_WERROR=ON -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST >/dev/null
  cmake --build "$dir" --target mpg_tests -j "$jobs"
  echo "sanitizers: $dir built in $(( $(date +%s) - start ))s"
}

if [[ "$which" == all || "$which" == asan ]]; then
  configure_and_build build-asan "-fsanitize=address,undefined -fno-sanitize-recover=all"
  start=$(date +%s)
  ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    build-asan/tests/mpg_tests --gtest_brief=1
  echo "sanitizers: ASan+UBSan run took $(( $(date +%s) - start ))s"
fi

if [[ "$which" == all || "$which" == tsan ]]; then
  # g++ 12 with -fsanitize=thread reports a false -Wuse-after-free inside Eigen's aligned_free.
  configure_and_build build-tsan "-fsanitize=thread -Wno-use-after-free"
  start=$(date +%s)
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    build-tsan/tests/mpg_tests --gtest_filter="$tsan_filter" --gtest_brief=1
  echo "sanitizers: TSan run took $(( $(date +%s) - start ))s"
fi
