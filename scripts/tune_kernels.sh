#!/usr/bin/env bash
# Times kernel variants side by side, for the constants of the kernel sets (prefetch distance,
# block width, streaming-store threshold): builds bench_permute_grad once per variant with the
# MPG_TUNE_* overrides (detail/gather_sum.hpp, detail/fast.hpp), runs the variants in turn, in
# rounds, so that a load change on this shared machine hits all of them alike, and prints
# the median efficiency (DRAM rows, against the same-run yardstick) or GB/s (in-cache rows) of
# each row under each variant. Run it on an idle machine; the results back the comments next to
# the constants.
#
#   bash scripts/tune_kernels.sh                          # all variants, 2 rounds x 3 repetitions
#   MPG_TUNE_VARIANTS="default prefetch=0" MPG_TUNE_ROUNDS=3 bash scripts/tune_kernels.sh
#
#   MPG_TUNE_VARIANTS  among default, prefetch=<bytes>, block=<vectors>, stream=<bytes>,
#                      group=<copies> (MoeTokenUnpermuteGrad's fused group, 1-8),
#                      l2=<0|1> (in-row prefetches into L1 or L2 only, on every CPU),
#                      pages=huge (the same build, run with MPG_BENCH_HUGE_PAGES=1), or
#                      settings joined by +, e.g. prefetch=0+block=4
#   MPG_TUNE_ROUNDS    rounds (default 2); MPG_TUNE_REPETITIONS per round (default 3)
#   MPG_TUNE_BENCH     the bench binary (default bench_permute_grad)
#   MPG_TUNE_FILTER    --benchmark_filter (default: bench_permute_grad's default-ISA rows)
#   MPG_TUNE_FLAGS     extra CMAKE_CXX_FLAGS for every variant (e.g. -march=native)
#   MPG_TUNE_RUN       1 build and run (default), 0 build only, 2 run only
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

variants=${MPG_TUNE_VARIANTS:-default prefetch=0 prefetch=1024 prefetch=4096 block=4 block=16 \
stream=0 stream=1099511627776}
rounds=${MPG_TUNE_ROUNDS:-2}
repetitions=${MPG_TUNE_REPETITIONS:-3}
bench=${MPG_TUNE_BENCH:-bench_permute_grad}
filter=${MPG_TUNE_FILTER:-^BM_PermuteGrad[A-Za-z]*_[A-Z0-9]+_I32/tokens}
out=build-tune
python=/usr/bin/python3

# A variant is default or settings joined by '+', e.g. prefetch=0+block=4.
define_of() {
  local setting
  for setting in ${1//+/ }; do
    case $setting in
      default) ;;
      prefetch=*) echo -n " -DMPG_TUNE_PREFETCH_BYTES=${setting#*=}" ;;
      block=*) echo -n " -DMPG_TUNE_BLOCK_VECTORS=${setting#*=}" ;;
      group=*) echo -n " -DMPG_TUNE_FUSED_GROUP_COPIES=${setting#*=}" ;;
      l2=*) echo -n " -DMPG_TUNE_PREFETCH_TO_L2=${setting#*=}" ;;
      stream=*) echo -n " -DMPG_TUNE_STREAMING_STORE_BYTES=int64_t{${setting#*=}}" ;;
      pages=huge) ;;
      *) echo "tune_kernels.sh: unknown setting $setting" >&2; exit 1 ;;
    esac
  done
}

run=${MPG_TUNE_RUN:-1}  # 0: build only (e.g. while the machine is busy), 2: run only
for variant in $variants; do
  if [[ $run == 2 ]]; then break; fi
  dir=$out/${variant//=/-}
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" \
    "-DCMAKE_CXX_FLAGS=${MPG_TUNE_FLAGS:-} $(define_of "$variant")" -DMPG_BUILD_TESTS=OFF \
    -DMPG_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build "$dir" -j"$(nproc)" --target "$bench" >/dev/null
done

if [[ $run == 0 ]]; then exit 0; fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((round = 1; round <= rounds; ++round)); do
  for variant in $variants; do
    dir=$out/${variant//=/-}
    echo "round $round: $variant"
    huge_pages=0
    if [[ +$variant+ == *+pages=huge+* ]]; then huge_pages=1; fi
    MPG_BENCH_HUGE_PAGES=$huge_pages "$dir/bench/$bench" --benchmark_filter="$filter" \
      --benchmark_repetitions="$repetitions" --benchmark_out="$dir/round$round.json" \
      --benchmark_out_format=json >/dev/null
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

"$python" - "$out" $variants <<'PY'
import glob, json, statistics, sys
out, variants = sys.argv[1], sys.argv[2:]
table = {}  # row -> variant -> values
gbps_rows = set()  # rows without a yardstick (in-cache): GB/s instead of efficiency
for v in variants:
    for path in sorted(glob.glob(f"{out}/{v.replace('=', '-')}/round*.json")):
        for b in json.load(open(path))["benchmarks"]:
            if b.get("run_type") != "iteration":
                continue
            row = b["run_name"]
            value = b.get("efficiency")
            if value is None:
                value = b["GBps"]
                gbps_rows.add(row)
            table.setdefault(row, {}).setdefault(v, []).append(value)
print("median efficiency (DRAM rows) or GB/s (in-cache rows, marked *), all rounds")
print("| row | " + " | ".join(variants) + " |")
print("|---|" + "---:|" * len(variants))
for row, per in table.items():
    cells = [f"{statistics.median(per[v]):.2f}" if v in per else "-" for v in variants]
    print(f"| {row}{' *' if row in gbps_rows else ''} | " + " | ".join(cells) + " |")
PY
