#!/usr/bin/env python3
"""How fast this machine reads memory: the reference for "decode at N % of read bandwidth".

    python scripts/read_bandwidth.py [--mib 512] [--threads 1,2]

Sums a float32 array far larger than the caches (numpy's vectorized sum, which the memory keeps
waiting, not the adds), split across T threads (numpy releases the GIL inside the sum); the best
of 5 runs, in GB/s (10^9 bytes). A decode step reads every weight once, so a model file of B bytes
decoded at R tok/s reads about B x R bytes a second.
"""
from __future__ import annotations

import argparse
import threading
import time

import numpy as np


def read_gb_s(a: np.ndarray, threads: int, runs: int = 5) -> float:
    parts = np.array_split(a, threads)
    best = float("inf")
    for _ in range(runs):
        workers = [threading.Thread(target=part.sum) for part in parts]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        best = min(best, time.perf_counter() - start)
    return a.nbytes / best / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=512, help="array size (default: %(default)s MiB)")
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()
    a = np.ones(args.mib * 1024 * 1024 // 4, dtype=np.float32)
    for t in (int(v) for v in args.threads.split(",")):
        print(f"{t} thread(s): {read_gb_s(a, t):.1f} GB/s")


if __name__ == "__main__":
    main()
