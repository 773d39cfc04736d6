#!/usr/bin/env python3
"""How fast this machine reads memory: the reference for "decode at N % of read bandwidth".

    python scripts/read_bandwidth.py [--mib 512] [--threads 1,2] [--runs 5]

A pool of T of the engine's own threads (edgeinfer._testing.read_seconds) reads an array far
larger than the caches, each thread its own part, every 64-byte line once and nothing done with
the data; the best of the runs, in GB/s (10^9 bytes). A decode step reads every weight once, so a
model file of B bytes decoded at R tok/s reads about B x R bytes a second.

(It once timed numpy's float32 sum, which adds as it reads and reaches well below this:
docs/PERFORMANCE.md, "How to reproduce".)
"""
from __future__ import annotations

import argparse

import numpy as np

from edgeinfer import _testing


def read_gb_s(a: np.ndarray, threads: int, runs: int) -> float:
    return a.nbytes / _testing.read_seconds(a, threads, runs) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=512, help="array size (default: %(default)s MiB)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=5, help="passes per thread count, the best kept (default: %(default)s)")
    args = ap.parse_args()
    try:
        thread_counts = [int(v) for v in args.threads.split(",")]
    except ValueError:
        ap.error(f"--threads takes counts separated by commas, got {args.threads!r}")
    if args.mib < 1 or args.runs < 1 or min(thread_counts) < 1:
        ap.error("--mib, --runs and every --threads count must be at least 1")
    a = np.ones(args.mib * 1024 * 1024, dtype=np.uint8)   # written: its pages are there before the runs
    for t in thread_counts:
        print(f"{t} thread(s): {read_gb_s(a, t, args.runs):.1f} GB/s")


if __name__ == "__main__":
    main()
