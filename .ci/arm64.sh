#!/usr/bin/env bash
# CI: the whole GoogleTest suite for arm64 (AArch64), cross-built with Debian's
# g++-aarch64-linux-gnu and run under user-mode emulation (qemu-aarch64 -L <arm64 sysroot>,
# no binfmt registration needed) through ctest, which ends the log with its summary.
# GoogleTest is built for arm64 from Debian's libgtest-dev sources (/usr/src/googletest) once
# and cached in the build dir. The table-driven tests cover both kernel sets built for arm64,
# NEON (chosen at run time) and portable. Emulation says nothing about speed: README, Platforms.
#   MPG_ARM64_BUILD_DIR  build dir (default build-arm64)
#   MPG_CI_JOBS          parallel compile and test jobs (default 2)
# Left out: the packaging tests, acl_host.compile_line and the acl_host.<op> output comparisons
# (one per MPG_ACL_HOST_PROGRAMS entry in tests/acl_host/CMakeLists.txt): they build or run
# programs from a host-side cmake -P or shell, not through the emulator; nothing arm64-specific. Everything else runs, the huge-tensor tests included (about 40 s in all).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${MPG_ARM64_BUILD_DIR:-build-arm64}"
jobs="${MPG_CI_JOBS:-2}"
toolchain="$PWD/cmake/toolchain-aarch64-linux-gnu.cmake"
start=$(date +%s)

bash scripts/install_deps.sh g++-aarch64-linux-gnu qemu-user

gtest_prefix="$PWD/$dir/googletest"
if [[ ! -f $gtest_prefix/lib/libgtest.a ]]; then
  cmake -S /usr/src/googletest -B "$dir/googletest-build" -DCMAKE_TOOLCHAIN_FILE="$toolchain" \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_GMOCK=OFF -DCMAKE_INSTALL_PREFIX="$gtest_prefix" >/dev/null
  cmake --build "$dir/googletest-build" -j "$jobs" >/dev/null
  cmake --install "$dir/googletest-build" >/dev/null
  echo "arm64: GoogleTest built for arm64 in $(( $(date +%s) - start ))s"
fi

cmake -S . -B "$dir" -DCMAKE_TOOLCHAIN_FILE="$toolchain" -DCMAKE_BUILD_TYPE=Release \
  -DMPG_WERROR=ON -DGTest_DIR="$gtest_prefix/lib/cmake/GTest" -DMPG_BUILD_BENCHMARKS=OFF \
  -DMPG_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$dir" -j "$jobs"  # the test binaries (benchmarks and examples are off)
echo "arm64: built in $(( $(date +%s) - start ))s"

test_start=$(date +%s)
status=0
(cd "$dir" && ctest -j "$jobs" --output-on-failure --timeout 900 -LE packaging \
  -E '^acl_host\.(compile_line|permute_grad|token_permute|init_routing_v2_grad|unpermute|unpermute_grad)$') || status=$?
echo "arm64: tests took $(( $(date +%s) - test_start ))s, $(( $(date +%s) - start ))s in total"
exit "$status"
