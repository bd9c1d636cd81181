#!/usr/bin/env python3
"""Bar chart of mpg benchmark rows against the same-run bandwidth yardstick.

Reads Google Benchmark JSON files (--benchmark_out=f.json --benchmark_out_format=json) and draws,
for every shape, the op's GB/s beside the yardstick's GB/s (ref_GBps) per build and thread
count, with the efficiency (yardstick time / op time) written on the op's bar. Only rows that
carry ref_GBps (the DRAM rows) are drawn. With --benchmark_repetitions the median aggregates
are used; without aggregates the median over the repeated rows is taken here.

    /usr/bin/python3 scripts/plot_bench.py -o docs/bench_permute_grad.png \\
        O2=bench-O2.json native=bench-native.json

Needs matplotlib (Debian: apt-get install python3-matplotlib; run with /usr/bin/python3).
Also prints the table the README shows (--markdown).
"""

import argparse
import json
import statistics
import sys
from collections import OrderedDict, defaultdict

TIME_SCALE = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def parse_name(run_name):
    """BM_Op_T[/isa:x]/a:1/.../threads:n[/manual_time] -> (family, isa, threads, args)."""
    parts = run_name.split("/")
    family, args = parts[0], OrderedDict()
    for part in parts[1:]:
        if ":" in part:
            key, value = part.split(":", 1)
            args[key] = value
    isa = args.pop("isa", "auto")
    threads = args.pop("threads", "?")
    return family, isa, threads, args


def medians(path):
    """run_name -> {time_s, GBps, ref_GBps, efficiency[, efficiency_min, efficiency_max]}
    (medians; min/max over rounds in scripts/merge_rounds.py's output), in file order."""
    with open(path) as f:
        report = json.load(f)
    aggregates, iterations = OrderedDict(), defaultdict(list)
    order = []
    for b in report.get("benchmarks", []):
        name = b.get("run_name", b["name"])
        if b.get("error_occurred"):
            print(f"plot_bench: {path}: {name}: {b.get('error_message')}", file=sys.stderr)
            continue
        if name not in order:
            order.append(name)
        row = {"time_s": b["real_time"] * TIME_SCALE[b.get("time_unit", "ns")]}
        for key in ("GBps", "ref_GBps", "efficiency", "efficiency_min", "efficiency_max",
                    "bytes_per_second"):
            if key in b:
                row[key] = b[key]
        if "GBps" not in row and "bytes_per_second" in row:
            row["GBps"] = row["bytes_per_second"] / 1e9
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                aggregates[name] = row
        else:
            iterations[name].append(row)
    result = OrderedDict()
    for name in order:
        if name in aggregates:
            result[name] = aggregates[name]
        elif iterations.get(name):
            rows = iterations[name]
            result[name] = {k: statistics.median(r[k] for r in rows)
                            for k in rows[0] if all(k in r for r in rows)}
    return report.get("context", {}), result


def shape_title(family, args):
    return family.removeprefix("BM_") + "\n" + " ".join(f"{k}={v}" for k, v in args.items())


def collect(inputs):
    """(shapes with a yardstick, shapes without): shape -> list of (build, isa, threads, row)."""
    shapes, others = OrderedDict(), OrderedDict()
    for label, path in inputs:
        _, rows = medians(path)
        for name, row in rows.items():
            family, isa, threads, args = parse_name(name)
            target = shapes if "ref_GBps" in row else others
            target.setdefault(shape_title(family, args), []).append((label, isa, threads, row))
    return shapes, others


def markdown_others(shapes):
    """Rows without a yardstick (in cache, tiny): per build, time and GB/s."""
    builds = list(OrderedDict.fromkeys(b for entries in shapes.values() for b, *_ in entries))
    lines = ["| shape (no yardstick) | threads |" + "".join(f" {b}: time | GB/s |" for b in builds),
             "|---|---:|" + "---:|---:|" * len(builds)]
    for title, entries in shapes.items():
        by_threads = OrderedDict()
        for build, isa, threads, row in entries:
            by_threads.setdefault((isa, threads), {})[build] = row
        first = True
        for (isa, threads), by_build in by_threads.items():
            cells = []
            for b in builds:
                row = by_build.get(b)
                if row is None:
                    cells.append(" - | - |")
                    continue
                t = row["time_s"]
                time_text = f"{t * 1e3:.2f} ms" if t >= 1e-3 else f"{t * 1e6:.3g} us"
                cells.append(f" {time_text} | {row['GBps']:.1f} |")
            shape = title.replace("\n", " ") if first else ""
            label = threads if isa == "auto" else f"{threads} ({isa})"
            lines.append(f"| {shape} | {label} |" + "".join(cells))
            first = False
    return "\n".join(lines)


def markdown(shapes):
    """One line per shape, ISA and thread count; per build: time, GB/s, yardstick, efficiency."""
    builds = list(OrderedDict.fromkeys(b for entries in shapes.values() for b, *_ in entries))
    # merged rounds (scripts/merge_rounds.py): the efficiency's range over rounds beside it
    ranges = any("efficiency_min" in row for entries in shapes.values() for *_, row in entries)
    eff_head = "eff. (rounds)" if ranges else "eff."
    head = "| shape | ISA | threads |" + "".join(
        f" {b}: time | GB/s | yardstick GB/s | {eff_head} |" for b in builds)
    lines = [head, "|---|---|---:|" + "---:|---:|---:|---:|" * len(builds)]
    for title, entries in shapes.items():
        lines_of_shape = OrderedDict()
        for build, isa, threads, row in entries:
            lines_of_shape.setdefault((isa, threads), {})[build] = row
        first = True
        for (isa, threads), by_build in lines_of_shape.items():
            cells = []
            for b in builds:
                row = by_build.get(b)
                if row is None:
                    cells.append(" - | - | - | - |")
                    continue
                t = row["time_s"]
                time_text = f"{t * 1e3:.2f} ms" if t >= 1e-3 else f"{t * 1e6:.1f} us"
                eff_text = f"{row['efficiency']:.2f}"
                if "efficiency_min" in row and "efficiency_max" in row:
                    eff_text += f" ({row['efficiency_min']:.2f}-{row['efficiency_max']:.2f})"
                cells.append(f" {time_text} | {row['GBps']:.1f} | {row['ref_GBps']:.1f} | "
                             f"{eff_text} |")
            shape = title.replace("\n", " ") if first else ""
            lines.append(f"| {shape} | {isa} | {threads} |" + "".join(cells))
            first = False
    return "\n".join(lines)


def plot(shapes, output, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        sys.exit(f"plot_bench: matplotlib is not importable ({e}); on Debian: "
                 "apt-get install python3-matplotlib, then run with /usr/bin/python3")
    n = len(shapes)
    cols = 2 if n > 1 else 1
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(7.5 * cols, 4.2 * rows), squeeze=False)
    width = 0.38
    for ax, (shape, entries) in zip(axes.flat, shapes.items()):
        labels = [f"{b}\n{t} thr" + ("" if isa == "auto" else f"\n{isa}")
                  for b, isa, t, _ in entries]
        xs = range(len(entries))
        op = [row["GBps"] for *_, row in entries]
        ref = [row["ref_GBps"] for *_, row in entries]
        bars = ax.bar([x - width / 2 for x in xs], op, width, label="mpg", color="#1f77b4")
        ax.bar([x + width / 2 for x in xs], ref, width, label="yardstick", color="#bbbbbb")
        for bar, (*_, row) in zip(bars, entries):
            ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(),
                    f"{row['efficiency']:.2f}", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(list(xs))
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_ylabel("GB/s")
        ax.set_title(shape, fontsize=9)
        ax.set_ylim(0, max(op + ref) * 1.18)
        ax.legend(fontsize=8, loc="upper left")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(output, dpi=110)
    print(f"plot_bench: wrote {output}", file=sys.stderr)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("inputs", nargs="+", metavar="LABEL=FILE.json",
                        help="benchmark JSON files, each with the label of its build")
    parser.add_argument("-o", "--output", help="PNG to write (no chart without it)")
    parser.add_argument("--title", default="mpg vs the same-run yardstick "
                        "(numbers on bars: efficiency = yardstick time / op time)")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args()
    inputs = []
    for item in args.inputs:
        label, sep, path = item.partition("=")
        inputs.append((label, path) if sep else (item.rsplit("/", 1)[-1], item))
    shapes, others = collect(inputs)
    if args.markdown:
        if shapes:
            print(markdown(shapes))
        if others:
            if shapes:
                print()
            print(markdown_others(others))
    if not shapes:
        sys.exit("plot_bench: no rows with ref_GBps in the input: no chart")
    if args.output:
        plot(shapes, args.output, args.title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
