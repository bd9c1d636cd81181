#!/usr/bin/env bash
# CI: build the libFuzzer target over the two-phase API, replay the committed seeds, then fuzz
# for a bounded time. Any crash, sanitizer report or failed check fails the job; the input that
# triggered it is left in build-fuzz/ (artifact_prefix) to reproduce with
#   build-fuzz/fuzz_aclnn build-fuzz/crash-<sha1>
# Longer runs: MPG_FUZZ_SECONDS=3600 bash .ci/fuzz.sh   (see README, Hardening).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${MPG_FUZZ_SECONDS:-60}"

# clang 14 (Debian bookworm) and its libFuzzer/sanitizer runtimes, installed only when missing.
if ! command -v clang++ >/dev/null || ! dpkg -s libclang-rt-14-dev >/dev/null 2>&1; then
  apt-get update && apt-get install -y --no-install-recommends clang libclang-rt-14-dev
fi
start=$(date +%s)
bash fuzz/build.sh build-fuzz/fuzz_aclnn
echo "fuzz: built in $(( $(date +%s) - start ))s"

# Replay first: a seed that fails is a regression, whatever the random run finds.
build-fuzz/fuzz_aclnn -runs=0 fuzz/corpus

# New inputs go to a scratch corpus (ignored by git); the committed seeds stay read-only.
work=fuzz/corpus-work
mkdir -p "$work"
build-fuzz/fuzz_aclnn -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix=build-fuzz/ "$work" fuzz/corpus
echo "fuzz: ok, $(ls "$work" | wc -l) inputs in $work, $(( $(date +%s) - start ))s in total"
