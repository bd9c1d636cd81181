#!/usr/bin/env bash
# Regenerates every benchmark number and chart of the README, on an idle machine:
#   1. builds every bench/bench_*.cpp twice: plain -O2 (run-time ISA dispatch) and -march=native;
#   2. runs each with repetitions (medians), writing Google Benchmark JSON; with
#      MPG_BENCH_ROUNDS=n each binary runs in n separate processes (round 1 runs every binary of
#      every build, then round 2, ...: a slow spell hits one round of many rows, not every round
#      of one row), and scripts/merge_rounds.py keeps per row the median over rounds, since a
#      row's efficiency moves from one process to the next (where its buffers land);
#   3. draws one chart per bench binary (docs/<binary>.png) and writes the Markdown tables;
#   4. runs bench/compare_pytorch.py (PyTorch composites) on the -O2 build;
#   5. assembles docs/bench/results.md and puts it into README.md between the markers
#      <!-- bench-results:begin ... --> and <!-- bench-results:end -->.
# Results go to docs/bench/ (JSON, tables, machine summary), charts to docs/. Review the README
# diff (and the prose around the block, which cites no numbers) and commit.
#
#   bash scripts/bench.sh                  # everything, 5 repetitions
#   MPG_BENCH_REPETITIONS=9 MPG_BENCH_FILTER='threads:[12]' bash scripts/bench.sh
#   MPG_BENCH_ROUNDS=3 MPG_BENCH_REPETITIONS=3 bash scripts/bench.sh  # 3 processes per binary
#
#   MPG_BENCH_REPETITIONS  repetitions per row (default 5)
#   MPG_BENCH_ROUNDS       processes per bench binary and build, each round's JSON in <out>/rounds/,
#                          merged into <out>/<binary>-<build>.json (default 1: that JSON directly)
#   MPG_BENCH_FILTER       --benchmark_filter regex (default: all rows)
#   MPG_BENCH_BUILDS       builds to run, among "O2 native" (default: both)
#   MPG_BENCH_OUT          output directory (default: docs/bench)
#   MPG_BENCH_PYTORCH      0 to skip the PyTorch comparison (default 1)
#   MPG_BENCH_README       0 to leave README.md alone (default 1)
#   MPG_BENCH_NOTE         a line put first in the results block (e.g. a provisional warning)
#   MPG_BENCH_RUN          0: build and run nothing, redo charts, tables and README from the JSON
#   MPG_BENCH_HUGE_PAGES   1: 2 MiB pages for every buffer, yardstick and op (bench/bandwidth.hpp,
#                          PAGES; default: 4 KiB pages); the machine summary records it
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

repetitions=${MPG_BENCH_REPETITIONS:-5}
rounds=${MPG_BENCH_ROUNDS:-1}
if ! [[ $rounds =~ ^[1-9][0-9]*$ ]]; then echo "bench.sh: MPG_BENCH_ROUNDS=$rounds" >&2; exit 1; fi
filter=${MPG_BENCH_FILTER:-.}
builds=${MPG_BENCH_BUILDS:-O2 native}
out=${MPG_BENCH_OUT:-docs/bench}
python=/usr/bin/python3  # Debian's python: python3-matplotlib and python3-torch live there

bash scripts/install_deps.sh python3-matplotlib
mkdir -p "$out"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

build_flags() {
  case $1 in
    O2) echo "" ;;
    native) echo "-march=native" ;;
    *) echo "bench.sh: unknown build $1 (O2 or native)" >&2; exit 1 ;;
  esac
}

benches=()
for source in bench/bench_*.cpp; do benches+=("$(basename "$source" .cpp)"); done

run=${MPG_BENCH_RUN:-1}
for build in $builds; do
  if [[ $run == 0 ]]; then break; fi
  dir=build-bench-$build
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" \
    "-DCMAKE_CXX_FLAGS=$(build_flags "$build")" -DMPG_BUILD_TESTS=OFF -DMPG_BUILD_EXAMPLES=OFF \
    >/dev/null
  targets=()
  for bench in "${benches[@]}"; do targets+=(--target "$bench"); done
  cmake --build "$dir" -j"$(nproc)" "${targets[@]}"
done

if [[ $run != 0 ]]; then {
  echo "date: $(date -u '+%F %T UTC')"
  lscpu | grep -E '^(Model name|CPU family|Model:|CPU\(s\)|Thread|Core|Socket|L1d|L2|L3|NUMA node\(s\))'
  echo "SIMD: $(grep -m1 -o -E 'avx2|avx512(f|bw|vl|_bf16)' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "memory: $(free -g | awk '/^Mem:/ {print $2 " GiB"}')"
  echo "kernel: $(uname -r); compiler: $(c++ --version | head -1)"
  echo "pages: MPG_BENCH_HUGE_PAGES=${MPG_BENCH_HUGE_PAGES:-0}; transparent huge pages:" \
    "$(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo '?')"
  echo "google benchmark: $(dpkg-query -W -f='${Version}' libbenchmark-dev 2>/dev/null || echo '?')"
} >"$out/machine.txt"; fi
cat "$out/machine.txt"

# Rounds outermost: a slow spell of the machine hits one round of many rows, not all of one row.
if [[ $run != 0 ]]; then
  if ((rounds > 1)); then rm -rf "$out/rounds" && mkdir -p "$out/rounds"; fi
  for ((r = 1; r <= rounds; r++)); do
    for bench in "${benches[@]}"; do
      for build in $builds; do
        json=$out/$bench-$build.json round_text=""
        if ((rounds > 1)); then
          json=$out/rounds/$bench-$build.r$r.json round_text=", round $r of $rounds"
        fi
        echo "=== $bench ($build): $repetitions repetitions$round_text, filter '$filter'"
        "build-bench-$build/bench/$bench" --benchmark_filter="$filter" \
          --benchmark_repetitions="$repetitions" --benchmark_report_aggregates_only=true \
          --benchmark_out="$json" --benchmark_out_format=json
      done
    done
  done
  if ((rounds > 1)); then
    for bench in "${benches[@]}"; do
      for build in $builds; do
        round_files=()
        for ((r = 1; r <= rounds; r++)); do
          round_files+=("$out/rounds/$bench-$build.r$r.json")
        done
        "$python" scripts/merge_rounds.py -o "$out/$bench-$build.json" "${round_files[@]}"
      done
    done
  fi
fi

for bench in "${benches[@]}"; do
  inputs=()
  for build in $builds; do inputs+=("$build=$out/$bench-$build.json"); done
  if [[ $bench == bench_bandwidth ]]; then continue; fi  # the yardstick alone: no ref column
  "$python" scripts/plot_bench.py --markdown -o "docs/$bench.png" "${inputs[@]}" \
    >"$out/$bench.md" || echo "bench.sh: no chart for $bench"
  cat "$out/$bench.md"
done

if [[ ${MPG_BENCH_PYTORCH:-1} != 0 && $run != 0 ]]; then
  first_build=${builds%% *}
  # mpg's side from the JSON just written; PyTorch timed now (torch: apt-get install python3-torch)
  "$python" bench/compare_pytorch.py --repetitions "$repetitions" --json-dir "$out" \
    --build "$first_build" --bench-dir "build-bench-$first_build/bench" |
    tee "$out/compare_pytorch.txt"
fi
if [[ $run != 0 ]]; then
  how="$repetitions repetitions, medians"
  if ((rounds > 1)); then
    how="$rounds rounds of $repetitions repetitions, medians over rounds of each round's median"
  fi
  echo "Measured $(date -u '+%F %H:%M UTC') by \`bash scripts/bench.sh\` ($how;" \
    "load average $load_before before the builds, $(cut -d' ' -f1-3 /proc/loadavg) after)." \
    >"$out/run.txt"
fi
results=$out/results.md
{
  if [[ -n ${MPG_BENCH_NOTE:-} ]]; then printf '%s\n\n' "$MPG_BENCH_NOTE"; fi
  cat "$out/run.txt"
  echo "Builds: \`O2\` = Release \`-O2\` with run-time ISA dispatch, \`native\` = the same plus"
  echo "\`-march=native\`. Machine:"
  echo
  echo '```'
  cat "$out/machine.txt"
  echo '```'
  for bench in "${benches[@]}"; do
    echo
    echo "**$bench**"
    if [[ -f docs/$bench.png ]]; then printf '\n![%s](docs/%s.png)\n' "$bench" "$bench"; fi
    echo
    if [[ -f $out/$bench.md ]]; then
      cat "$out/$bench.md"
    else
      inputs=()
      for build in $builds; do inputs+=("$build=$out/$bench-$build.json"); done
      "$python" scripts/plot_bench.py --markdown "${inputs[@]}" 2>/dev/null || true
    fi
  done
  if [[ -f $out/compare_pytorch.txt ]]; then
    echo
    echo "**PyTorch composites** (\`bench/compare_pytorch.py\`, \`O2\` build; ratio = PyTorch time / mpg time):"
    echo
    echo '```'
    cat "$out/compare_pytorch.txt"
    echo '```'
  fi
} >"$results"

if [[ ${MPG_BENCH_README:-1} != 0 ]]; then
  "$python" - "$results" README.md <<'PY'
import re, sys
results, readme = sys.argv[1], sys.argv[2]
text = open(readme).read()
block = open(results).read().strip()
pattern = re.compile(r"(<!-- bench-results:begin[^>]*-->\n).*?(\n<!-- bench-results:end -->)", re.S)
if not pattern.search(text):
    sys.exit("bench.sh: README.md has no bench-results markers; results are in " + results)
open(readme, "w").write(pattern.sub(lambda m: m.group(1) + block + m.group(2), text))
print("bench.sh: README.md's results block replaced by " + results)
PY
fi
echo "bench.sh: results in $out/ (results.md, JSON, tables), charts in docs/bench_*.png"
