#!/usr/bin/env python3
"""Merges the Google Benchmark JSON of several runs ("rounds") of one bench binary into one file.

Why: on a noisy VM a row's efficiency moves by up to 0.2 from one process to the next (where the
process's buffers land), and repetitions inside one process do not see that; scripts/bench.sh
(MPG_BENCH_ROUNDS) runs every binary in several processes and this keeps, per row, the median
over rounds of each round's median, so that plot_bench.py and compare_pytorch.py read it as the
one median aggregate of a single run.

    python3 scripts/merge_rounds.py -o merged.json r1.json r2.json r3.json

Per run_name (first file's order): one "median" aggregate copied from the first round that has
the row, every numeric field (real_time, cpu_time, counters) replaced by its median over rounds;
with an efficiency counter also efficiency_min, efficiency_max (over the rounds' medians) and
rounds. A round without aggregates (repetitions=1) counts with its iteration row(s). Rows missing
or failed in some round take the other rounds, with a warning on stderr.
"""

import argparse
import json
import statistics
import sys
from collections import OrderedDict

# Identify the row rather than measure it: copied from the first round, not merged.
IDENTITY = {"family_index", "per_family_instance_index", "repetitions", "repetition_index",
            "threads"}


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def round_rows(report, path):
    """run_name -> the round's median aggregate (or median of its iteration rows), or error row."""
    medians, iterations, errors, order = {}, {}, {}, OrderedDict()
    for b in report.get("benchmarks", []):
        name = b.get("run_name", b["name"])
        order[name] = None
        if b.get("error_occurred"):
            errors.setdefault(name, b)
        elif b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                medians[name] = b
        else:
            iterations.setdefault(name, []).append(b)
    rows = OrderedDict()
    for name in order:
        if name in medians:
            rows[name] = medians[name]
        elif name in iterations:  # repetitions without aggregates: usually a single row
            runs = iterations[name]
            row = dict(runs[0])
            for key, value in runs[0].items():
                if is_number(value) and key not in IDENTITY:
                    row[key] = statistics.median(r[key] for r in runs if is_number(r.get(key)))
            rows[name] = row
        else:  # kept as is: merge() takes the other rounds, or reports the error
            print(f"merge_rounds: {path}: {name}: {errors[name].get('error_message')}",
                  file=sys.stderr)
            rows[name] = errors[name]
    return rows


def merge(paths):
    reports = []
    for path in paths:
        with open(path) as f:
            reports.append(json.load(f))
    rounds = [round_rows(report, path) for report, path in zip(reports, paths)]
    order = OrderedDict.fromkeys(name for rows in rounds for name in rows)
    benchmarks = []
    for name in order:
        found = [rows[name] for rows in rounds
                 if name in rows and not rows[name].get("error_occurred")]
        if len(found) < len(rounds):
            print(f"merge_rounds: {name}: in {len(found)} of {len(rounds)} rounds", file=sys.stderr)
        if not found:  # failed in every round: keep the first error for the readers to report
            benchmarks.append(next(rows[name] for rows in rounds if name in rows))
            continue
        row = dict(found[0])
        row.update(name=f"{name}_median", run_type="aggregate", aggregate_name="median")
        for key, value in found[0].items():
            if is_number(value) and key not in IDENTITY:
                row[key] = statistics.median(r[key] for r in found if is_number(r.get(key)))
        if "efficiency" in row:
            efficiencies = [r["efficiency"] for r in found if is_number(r.get("efficiency"))]
            row.update(efficiency_min=min(efficiencies), efficiency_max=max(efficiencies),
                       rounds=len(found))
        benchmarks.append(row)
    context = dict(reports[0].get("context", {}))
    context["mpg_rounds"] = len(paths)
    return {"context": context, "benchmarks": benchmarks}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("rounds", nargs="+", metavar="ROUND.json", help="one file per round")
    parser.add_argument("-o", "--output", required=True, help="merged JSON to write")
    args = parser.parse_args()
    merged = merge(args.rounds)
    with open(args.output, "w") as f:
        json.dump(merged, f, indent=2)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
