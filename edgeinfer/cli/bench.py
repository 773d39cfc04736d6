"""``edgeinfer bench``: prompt-processing and token-generation throughput (see edgeinfer.bench)."""
from __future__ import annotations

import argparse
import json

from rich.table import Table

from edgeinfer.bench import BenchResult, run_bench
from edgeinfer.cli.output import human_bytes, stderr, stdout, warnings_on_stderr
from edgeinfer.cli.pull import RichReporter
from edgeinfer.cli.run import gpu_options
from edgeinfer.pull import resolve_model


def make_table(results: list[BenchResult]) -> Table:
    """One row per (KV types, threads, test), as llama-bench's markdown table."""
    table = Table(box=None, pad_edge=False)
    for name, justify in (("model", "left"), ("size", "right"), ("isa", "left"), ("threads", "right"),
                          ("n_batch", "right"), ("ngl", "right"), ("type_k", "left"), ("type_v", "left"),
                          ("test", "right"), ("t/s", "right")):
        table.add_column(name, justify=justify)
    for r in results:
        table.add_row(r.model, human_bytes(r.model_size), r.isa, str(r.n_threads), str(r.n_batch),
                      str(r.n_gpu_layers), r.type_k, r.type_v, r.test, f"{r.avg_ts:.2f} ± {r.stddev_ts:.2f}")
    orders = sorted({r.float_order for r in results})
    if orders:  # one model, one order: said once, not in a column of its own
        table.caption = "float order: " + ", ".join(orders) + ("" if orders != ["fast"] else " (EDGEINFER_EXACT=1: llama.cpp's)")
    return table


def main(args: argparse.Namespace) -> int:
    path = resolve_model(args.model, reporter=RichReporter(stderr))
    progress = None if args.json else (lambda r: stderr.print(
        f"{r.test} t={r.n_threads} kv={r.type_k}/{r.type_v}: {r.avg_ts:.2f} tok/s"))
    # A --gpu-layers request without a device runs on the CPU, -t above the CPUs is capped: say so.
    with warnings_on_stderr():
        results = run_bench(path, n_prompt=args.n_prompt, n_gen=args.n_gen, threads=args.threads,
                            repetitions=args.repetitions, n_ctx=args.ctx_size, n_batch=args.batch_size,
                            on_result=progress, type_k=args.cache_type_k, type_v=args.cache_type_v,
                            n_depth=args.n_depth, gpu=gpu_options(args), n_parallel=args.parallel)
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=2))
    else:
        stdout.print(make_table(results))
    return 0
