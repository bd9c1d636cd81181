#!/usr/bin/env python3
"""mpg vs the PyTorch composites of the MoE token family, side by side.

PyTorch is timed as a user would write each op on preallocated buffers, dropped copies pointing
at an appended zero row:
  PermuteGrad, InitRoutingV2Grad   index_select(G, S) -> [N*K, H]; sum over K -> out
  TokenUnpermute (probs)           index_select(X, S); mul_ by probs [N, K, 1]; sum over K
  TokenPermute                     sort(expert ids, stable); index_select(tokens, order // K);
                                   sorted_indices = inverse of order (index_copy_)
  TokenUnpermuteGrad (probs)       dX: mul(g [N,1,H], probs [N,K,1]) then index_copy_ to rows S;
                                   dP: index_select(X, S), mul by g, sum over H
mpg's numbers come from the bench/bench_<op> binaries (run here, or read from the JSON files
scripts/bench.sh wrote, --json-dir), matched by the naming convention of bench/bandwidth.hpp.
An op whose mpg benchmark does not exist yet is shown with PyTorch only. Both sides report
medians; GB/s uses mpg's byte model for both (the read_MB/write_MB counters of mpg's row when
it exists), so it is the useful bandwidth, not what the composite moves (it also writes and
re-reads its [N*K, H] intermediate). ratio = torch time / mpg time (> 1: mpg is faster).

Run with Debian's torch:
  /usr/bin/python3 bench/compare_pytorch.py --bench-dir build/bench
  /usr/bin/python3 bench/compare_pytorch.py --json-dir docs/bench --build O2 --ops TokenUnpermute
Exits 0 with a message when torch cannot be imported.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

TIME_SCALE = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
DTYPE_SIZE = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass
class Case:
    op: str          # vendor op without "Moe"
    binary: str      # bench/bench_<op>.cpp's binary
    family: str      # Google Benchmark family name (bench/bandwidth.hpp's convention)
    dtype: str
    mode: str        # dropless or padded
    n: int           # tokens
    k: int           # topk
    h: int           # hidden
    e: int           # experts
    x: int           # kept_pct (dropless) or capacity (padded)
    probs: str = ""  # probs dtype, "" without probs

    def fourth(self):
        return "kept_pct" if self.mode == "dropless" else "capacity"

    def label(self):
        p = f" P={self.probs}" if self.probs else ""
        tail = f"kept={self.x}%" if self.mode == "dropless" else f"E={self.e} C={self.x}"
        return f"{self.dtype}{p} {self.mode} {self.n}x{self.k}x{self.h} {tail}"


BF, F16, F32 = "bfloat16", "float16", "float32"
CASES = [
    Case("PermuteGrad", "bench_permute_grad", "BM_PermuteGrad_BF16_I32", BF, "dropless",
         4096, 8, 4096, 64, 100),
    Case("PermuteGrad", "bench_permute_grad", "BM_PermuteGrad_FP32_I32", F32, "dropless",
         8192, 2, 4096, 8, 100),
    Case("PermuteGrad", "bench_permute_grad", "BM_PermuteGrad_FP16_I32", F16, "dropless",
         2048, 8, 7168, 256, 90),
    Case("PermuteGrad", "bench_permute_grad", "BM_PermuteGradPadded_BF16_I32", BF, "padded",
         4096, 8, 4096, 64, 640),
    Case("PermuteGrad", "bench_permute_grad", "BM_PermuteGrad_BF16_I32", BF, "dropless",
         16, 8, 4096, 64, 100),
    Case("PermuteGrad", "bench_permute_grad", "BM_PermuteGrad_FP32_I32", F32, "dropless",
         1, 1, 64, 8, 100),
    Case("TokenUnpermute", "bench_token_unpermute", "BM_TokenUnpermute_BF16_I32_PBF16", BF,
         "dropless", 4096, 8, 4096, 64, 100, probs=BF),
    Case("TokenUnpermute", "bench_token_unpermute", "BM_TokenUnpermute_FP16_I32_PFP16", F16,
         "dropless", 2048, 8, 7168, 256, 90, probs=F16),
    Case("InitRoutingV2Grad", "bench_init_routing_v2_grad", "BM_InitRoutingV2Grad_BF16_I32", BF,
         "dropless", 4096, 8, 4096, 64, 100),
    Case("InitRoutingV2Grad", "bench_init_routing_v2_grad",
         "BM_InitRoutingV2GradPadded_BF16_I32", BF, "padded", 4096, 8, 4096, 64, 640),
    Case("TokenPermute", "bench_token_permute", "BM_TokenPermute_BF16_I32", BF, "dropless",
         4096, 8, 4096, 64, 100),
    Case("TokenUnpermuteGrad", "bench_token_unpermute_grad",
         "BM_TokenUnpermuteGrad_BF16_I32_PBF16", BF, "dropless", 4096, 8, 4096, 64, 100,
         probs=BF),
    Case("TokenUnpermuteGrad", "bench_token_unpermute_grad",
         "BM_TokenUnpermuteGrad_FP32_I32_PFP32", F32, "dropless", 8192, 2, 4096, 8, 100,
         probs=F32),
]


def parse_name(run_name):
    """BM_X[/isa:y]/a:1/.../threads:n[/manual_time] -> (family, {arg: int or str})."""
    parts = run_name.split("/")
    args = {}
    for part in parts[1:]:
        if ":" in part:
            key, value = part.split(":", 1)
            args[key] = int(value) if value.lstrip("-").isdigit() else value
    return parts[0], args


def medians_from_report(report):
    """(family, frozenset(args)) -> row dict, from median aggregates (or single runs)."""
    rows = {}
    for b in report.get("benchmarks", []):
        if b.get("error_occurred"):
            print(f"compare_pytorch: {b['run_name']}: {b.get('error_message')}", file=sys.stderr)
            continue
        aggregate = b.get("run_type") == "aggregate"
        if aggregate and b.get("aggregate_name") != "median":
            continue
        family, args = parse_name(b.get("run_name", b["name"]))
        if "isa" in args:
            continue  # forced-ISA rows: the comparison uses the run-time choice
        key = (family, frozenset(args.items()))
        if key in rows and not aggregate:
            continue  # repetitions without aggregates: keep the first
        rows[key] = {
            "seconds": b["real_time"] * TIME_SCALE[b["time_unit"]],
            "efficiency": b.get("efficiency"),
            "bytes": ((b["read_MB"] + b["write_MB"]) * 1e6) if "read_MB" in b else None,
        }
    return rows


def load_mpg(binaries, families, args):
    """Medians of every mpg row the cases need, per binary; missing binaries are skipped."""
    rows, notes = {}, []
    for binary in sorted(binaries):
        json_path = os.path.join(args.json_dir, f"{binary}-{args.build}.json") \
            if args.json_dir else None
        path = os.path.join(args.bench_dir, binary)
        if json_path and os.path.exists(json_path):
            with open(json_path) as f:
                report = json.load(f)
        elif os.access(path, os.X_OK):
            wanted = "|".join(sorted(f for f in families if binary_of(f) == binary))
            cmd = [path, f"--benchmark_filter=^({wanted})/tokens:.*/threads:[12]/",
                   f"--benchmark_repetitions={args.repetitions}",
                   "--benchmark_report_aggregates_only=true", "--benchmark_format=json"]
            print("running:", " ".join(cmd), flush=True)
            out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
            report = json.loads(out)
        else:
            notes.append(f"{binary}: not built (no {path}"
                         + (f" nor {json_path}" if json_path else "") + "): PyTorch only")
            continue
        rows.update(medians_from_report(report))
    return rows, notes


def binary_of(family):
    return next(c.binary for c in CASES if c.family == family)


def find_row(rows, case, threads):
    """mpg's row for the case: same family, tokens, topk, hidden, threads, and the other
    arguments where the row names them."""
    want = {"tokens": case.n, "topk": case.k, "hidden": case.h, "threads": threads,
            "experts": case.e, case.fourth(): case.x}
    for (family, frozen), row in rows.items():
        args = dict(frozen)
        if family != case.family:
            continue
        if all(args.get(key, value) == value for key, value in want.items()) and all(
                key in args for key in ("tokens", "topk", "hidden", "threads")):
            return row
    return None


def routing(torch, case, gen):
    """Random top-K routing; returns (expert ids [N*K], idx [N*K] into a G/X with one appended
    zero row at index `rows`, kept mask, rows), indices ordered like mpg's routing helpers."""
    n, k, e, x = case.n, case.k, case.e, case.x
    experts = torch.rand(n, e, generator=gen).argsort(dim=1)[:, :k].reshape(-1)
    order = torch.sort(experts, stable=True).indices  # copies sorted by (expert, t*K + k)
    position = torch.empty_like(order)
    position[order] = torch.arange(n * k)
    if case.mode == "dropless":
        rows = n * k * x // 100  # num_out_tokens: copies at positions >= rows were dropped
        kept = position < rows
        idx = torch.where(kept, position, torch.tensor(rows))
    else:
        rows = e * x  # experts x capacity
        counts = torch.bincount(experts, minlength=e)
        slot = position - (torch.cumsum(counts, 0) - counts)[experts]
        kept = slot < x
        idx = torch.where(kept, experts * x + slot, torch.tensor(rows))
    return experts, idx, kept, rows


def randn(torch, shape, dtype, gen):
    return torch.randn(*shape, generator=gen).to(getattr(torch, dtype))


def make_call(torch, case, gen):
    """(call, model_bytes) for the case's PyTorch composite; model_bytes is mpg's byte model."""
    n, k, h = case.n, case.k, case.h
    elem = DTYPE_SIZE[case.dtype]
    psize = DTYPE_SIZE[case.probs] if case.probs else 0
    experts, idx, kept, rows = routing(torch, case, gen)
    kept_rows = int(kept.sum())
    dt = getattr(torch, case.dtype)

    if case.op in ("PermuteGrad", "InitRoutingV2Grad", "TokenUnpermute"):
        src = randn(torch, (rows + 1, h), case.dtype, gen)
        src[rows].zero_()  # the zero row every dropped copy reads
        gathered = torch.empty(n * k, h, dtype=dt)
        out = torch.empty(n, h, dtype=dt)
        model = kept_rows * h * elem + n * k * 4 + n * h * elem + n * k * psize
        if case.op == "TokenUnpermute":
            probs = torch.rand(n, k, 1, generator=gen).to(getattr(torch, case.probs))

            def call():
                torch.index_select(src, 0, idx, out=gathered)
                g3 = gathered.view(n, k, h)
                g3.mul_(probs)
                torch.sum(g3, dim=1, out=out)
        else:
            def call():
                torch.index_select(src, 0, idx, out=gathered)
                torch.sum(gathered.view(n, k, h), dim=1, out=out)
        return call, model

    if case.op == "TokenPermute":
        tokens = randn(torch, (n, h), case.dtype, gen)
        ids = experts.to(torch.int32)
        num_out = rows
        permuted = torch.empty(num_out, h, dtype=dt)
        sorted_indices = torch.empty(n * k, dtype=torch.int64)
        ranks = torch.arange(n * k)
        model = n * h * elem + n * k * 4 + num_out * h * elem + n * k * 4

        def call():
            order = torch.sort(ids, stable=True).indices
            torch.index_select(tokens, 0, torch.div(order[:num_out], k, rounding_mode="floor"),
                               out=permuted)
            sorted_indices.index_copy_(0, order, ranks)
        return call, model

    if case.op == "TokenUnpermuteGrad":
        x = randn(torch, (rows + 1, h), case.dtype, gen)
        x[rows].zero_()
        g = randn(torch, (n, h), case.dtype, gen)
        probs = torch.rand(n, k, generator=gen).to(getattr(torch, case.probs))
        weighted = torch.empty(n, k, h, dtype=dt)
        dx = torch.empty(n * k, h, dtype=dt)
        gathered = torch.empty(n * k, h, dtype=dt)
        products = torch.empty(n, k, h, dtype=dt)
        dp = torch.empty(n, k, dtype=probs.dtype)
        # dX's rows are S itself; with every copy kept no row needs the +0 fill
        assert bool(kept.all()), "the TokenUnpermuteGrad cases keep every copy"
        model = (kept_rows * h * elem + n * h * elem + n * k * 4 + n * k * psize  # read
                 + n * k * h * elem + n * k * psize)  # write

        def call():
            torch.mul(g.view(n, 1, h), probs.view(n, k, 1).to(dt), out=weighted)
            dx.index_copy_(0, idx, weighted.view(n * k, h))
            torch.index_select(x, 0, idx, out=gathered)
            torch.mul(gathered.view(n, k, h), g.view(n, 1, h), out=products)
            torch.sum(products, dim=2, out=dp)
        return call, model

    raise ValueError(case.op)


def time_call(call):
    """Median seconds per call over 5 batches of >= 0.2 s (at least one call each)."""
    for _ in range(3):  # warm-up, and first touch of the outputs
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
    parser.add_argument("--bench-dir", default=os.path.join("build", "bench"),
                        help="directory of the bench_<op> binaries")
    parser.add_argument("--json-dir", help="read mpg's rows from <dir>/<binary>-<build>.json "
                        "(scripts/bench.sh's output) instead of running the binaries")
    parser.add_argument("--build", default="O2", help="build label of the JSON files")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--ops", nargs="*", help="only these ops (e.g. TokenUnpermute)")
    parser.add_argument("--threads", type=int, nargs="*", default=[1, 2])
    args = parser.parse_args()
    try:
        import torch
    except ImportError as e:
        print(f"compare_pytorch: skipped, torch is not importable ({e}); "
              "on Debian: apt-get install python3-torch, then run with /usr/bin/python3")
        return 0

    cases = [c for c in CASES if not args.ops or c.op in args.ops]
    rows, notes = load_mpg({c.binary for c in cases}, {c.family for c in cases}, args)
    print(f"torch {torch.__version__}, {time.strftime('%F %T %Z')}; medians of "
          f"{args.repetitions} (mpg) and 5 batches (torch)")
    for note in notes:
        print("note:", note)
    header = (f"{'op':<18} {'case':<52} {'thr':>3} {'mpg us':>12} {'mpg GB/s':>9} {'eff':>5} "
              f"{'torch us':>12} {'torch GB/s':>10} {'ratio':>6}")
    print(header)
    print("-" * len(header))
    gen = torch.Generator().manual_seed(20261202)
    for case in cases:
        call, model_bytes = make_call(torch, case, gen)
        for threads in args.threads:
            torch.set_num_threads(threads)
            torch_s = time_call(call)
            row = find_row(rows, case, threads)
            if row is not None:
                mpg_bytes = row["bytes"] or model_bytes
                eff = row["efficiency"]
                mpg_text = (f"{fmt_time(row['seconds'])} {mpg_bytes / row['seconds'] / 1e9:9.2f} "
                            + (f"{eff:5.2f}" if eff is not None else "    -"))
                ratio = f"{torch_s / row['seconds']:6.2f}"
            else:
                mpg_bytes = model_bytes
                mpg_text = f"{'-':>12} {'-':>9} {'-':>5}"
                ratio = f"{'-':>6}"
            print(f"{case.op:<18} {case.label():<52} {threads:>3} {mpg_text} "
                  f"{fmt_time(torch_s)} {mpg_bytes / torch_s / 1e9:10.2f} {ratio}", flush=True)
        del call
    return 0


if __name__ == "__main__":
    sys.exit(main())
