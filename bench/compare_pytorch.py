#!/usr/bin/env python3
"""mpg vs the PyTorch composite, side by side, in one run.

PyTorch is timed as a user would write the backward on preallocated buffers:
    torch.index_select(grad_with_zero_row, 0, idx, out=gathered)
    torch.sum(gathered.view(N, K, H), dim=1, out=out)
with dropped copies pointing at an appended zero row. mpg's numbers come from
bench_permute_grad (same shapes, run here through --benchmark_format=json). Both report
medians; GB/s uses mpg's byte model for both (kept rows read + out written + indices), so it
is the useful bandwidth, not what the composite actually moves (it also writes and re-reads
`gathered`). ratio = torch time / mpg time (> 1: mpg is faster).

Run with Debian's torch:  /usr/bin/python3 bench/compare_pytorch.py --bench build/bench/bench_permute_grad
Exits 0 with a message when torch cannot be imported.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# (family, dtype, mode, tokens, topk, hidden, experts, kept_pct (dropless) or capacity (padded));
# the same rows as register_all() in bench_permute_grad.cpp.
CASES = [
    ("BM_PermuteGrad_BF16_I32", "bfloat16", "dropless", 4096, 8, 4096, 64, 100),
    ("BM_PermuteGrad_FP32_I32", "float32", "dropless", 8192, 2, 4096, 8, 100),
    ("BM_PermuteGrad_FP16_I32", "float16", "dropless", 2048, 8, 7168, 256, 90),
    ("BM_PermuteGradPadded_BF16_I32", "bfloat16", "padded", 4096, 8, 4096, 64, 640),
    ("BM_PermuteGrad_BF16_I32", "bfloat16", "dropless", 16, 8, 4096, 64, 100),
    ("BM_PermuteGrad_FP32_I32", "float32", "dropless", 1, 1, 64, 8, 100),
]
THREADS = (1, 2)


def row_name(case, threads):
    family, _, mode, n, k, h, e, x = case
    fourth = "kept_pct" if mode == "dropless" else "capacity"
    return (f"{family}/tokens:{n}/topk:{k}/hidden:{h}/experts:{e}/{fourth}:{x}"
            f"/threads:{threads}/real_time")


def run_mpg(bench, repetitions):
    """Median seconds per call of every explicit-thread row, by benchmark name."""
    cmd = [bench, "--benchmark_filter=/threads:[12]/", "--benchmark_format=json",
           f"--benchmark_repetitions={repetitions}", "--benchmark_report_aggregates_only=true"]
    print("running:", " ".join(cmd), flush=True)
    report = json.loads(subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout)
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    medians = {}
    for b in report["benchmarks"]:
        if b.get("error_occurred"):
            sys.exit(f"{b['run_name']}: {b.get('error_message')}")
        # One repetition gives no aggregates: its single row is the median.
        if b.get("aggregate_name") == "median" or (repetitions == 1 and
                                                   b.get("run_type") == "iteration"):
            medians[b["run_name"]] = (b["real_time"] * scale[b["time_unit"]], b.get("efficiency"))
    return report.get("context", {}), medians


def make_inputs(torch, case, gen):
    """Random top-K routing, indices ordered like mpg::route_dropless / route_padded."""
    _, dtype, mode, n, k, h, e, x = case
    experts = torch.rand(n, e, generator=gen).argsort(dim=1)[:, :k].reshape(-1)
    order = torch.sort(experts, stable=True).indices  # copies sorted by (expert, t*K + k)
    position = torch.empty_like(order)
    position[order] = torch.arange(n * k)
    if mode == "dropless":
        rows = n * k * x // 100  # num_out_tokens: copies at positions >= rows were dropped
        kept = position < rows
        idx = torch.where(kept, position, torch.tensor(rows))
    else:
        rows = e * x  # experts x capacity
        start = torch.cumsum(torch.bincount(experts, minlength=e), 0) - torch.bincount(
            experts, minlength=e)
        slot = position - start[experts]
        kept = slot < x
        idx = torch.where(kept, experts * x + slot, torch.tensor(rows))
    elem = getattr(torch, dtype)
    grad = torch.randn(rows + 1, h, generator=gen).to(elem)
    grad[rows].zero_()  # the zero row every dropped copy reads
    model_bytes = (int(kept.sum()) * h * grad.element_size() + n * h * grad.element_size()
                   + n * k * 4)  # mpg's byte model, with mpg's int32 indices
    return grad, idx, model_bytes


def time_torch(torch, grad, idx, n, k, h, threads):
    """Median seconds per call over 5 batches of >= 0.2 s (at least one call each)."""
    torch.set_num_threads(threads)
    gathered = torch.empty(n * k, h, dtype=grad.dtype)
    out = torch.empty(n, h, dtype=grad.dtype)

    def call():
        torch.index_select(grad, 0, idx, out=gathered)
        torch.sum(gathered.view(n, k, h), dim=1, out=out)

    for _ in range(3):  # warm-up, and first touch of gathered and out
        call()
    start = time.perf_counter()
    call()
    once = time.perf_counter() - start
    calls = max(1, int(0.2 / max(once, 1e-9)))
    per_call = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        per_call.append((time.perf_counter() - start) / calls)
    return statistics.median(per_call)


def fmt_time(seconds):
    return f"{seconds * 1e6:12.2f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bench", default=os.path.join("build", "bench", "bench_permute_grad"),
                        help="path to the bench_permute_grad binary")
    parser.add_argument("--repetitions", type=int, default=5)
    args = parser.parse_args()
    try:
        import torch
    except ImportError as e:
        print(f"compare_pytorch: skipped, torch is not importable ({e}); "
              "on Debian: apt-get install python3-torch, then run with /usr/bin/python3")
        return 0
    if not os.access(args.bench, os.X_OK):
        sys.exit(f"compare_pytorch: {args.bench} is not an executable; build bench_permute_grad "
                 "or pass --bench")

    context, ours = run_mpg(args.bench, args.repetitions)
    print(f"mpg: {args.bench} ({context.get('num_cpus')} CPUs, {time.strftime('%F %T %Z')}); "
          f"torch {torch.__version__}; medians of {args.repetitions} (mpg) and 5 (torch)")
    header = (f"{'case':<44} {'thr':>3} {'mpg us':>12} {'mpg GB/s':>9} {'eff':>5} "
              f"{'torch us':>12} {'torch GB/s':>10} {'ratio':>6}")
    print(header)
    print("-" * len(header))
    gen = torch.Generator().manual_seed(20261202)
    for case in CASES:
        _, dtype, mode, n, k, h, e, x = case
        grad, idx, model_bytes = make_inputs(torch, case, gen)
        label = f"{dtype} {mode} N={n} K={k} H={h} " + (
            f"kept={x}%" if mode == "dropless" else f"E={e} C={x}")
        for threads in THREADS:
            name = row_name(case, threads)
            if name not in ours:
                sys.exit(f"compare_pytorch: no median for {name} in the benchmark output")
            mpg_s, eff = ours[name]
            torch_s = time_torch(torch, grad, idx, n, k, h, threads)
            eff_text = f"{eff:5.2f}" if eff is not None else "    -"
            print(f"{label:<44} {threads:>3} {fmt_time(mpg_s)} {model_bytes / mpg_s / 1e9:9.2f} "
                  f"{eff_text} {fmt_time(torch_s)} {model_bytes / torch_s / 1e9:10.2f} "
                  f"{torch_s / mpg_s:6.2f}", flush=True)
        del grad, idx
    return 0


if __name__ == "__main__":
    sys.exit(main())
