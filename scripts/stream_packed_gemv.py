#!/usr/bin/env python3
"""One packed GEMV kernel against the machine's plain read, apart from the rest of a decode step.

    python scripts/stream_packed_gemv.py TYPE [TYPE ...] [-k 576] [--rows 1536] [--cols 1] [-t 1]
                                         [--rounds 5] [--mib 144] [--isa avx2] [--exact] [--no-one-token-slot]

Each round reads the read reference (scripts/read_bandwidth.py's loop, 512 MiB) and then, for each
type, times its packed GEMV (the table's gemm_16row_groups; for one column on an AMD AVX-512 CPU the
one-token slot, cpu/dispatch.cpp) streaming ~--mib MiB of copies of one packed matrix, and the same
kernel over one ~256 KiB matrix a thread again and again (from L2: the rate it computes at). The figures are
the medians of the rounds; "share" is each round's stream over that round's reference.

Reading it: a kernel whose cached rate is far above its stream consumes faster than memory delivers;
on Zen 4 that filled the core's miss queues and got its prefetches dropped, until the packed
kernels requested each line twice (cpu/x86/request_ahead.h). A cached rate near or below the stream
is a kernel bound by its own work. docs/PERFORMANCE.md has what this found.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edgeinfer import _testing  # noqa: E402
from edgeinfer.machine import cpu_name  # noqa: E402

REFERENCE_MIB = 512
STREAM_MIB = 144.0
CACHED_BYTES = 256 * 1024   # a thread's share of the cached matrix: inside L2, a pass more than a call


def type_id(name: str) -> int:
    try:
        return int(GGMLQuantizationType[name.upper()])
    except KeyError:
        raise SystemExit(f"stream_packed_gemv.py: unknown type {name!r} (e.g. q4_0, q8_0, q4_k, q6_k)") from None


def cached_rows(tid: int, k: int, threads: int) -> int:
    block, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(tid)]
    return 16 * max(threads, threads * CACHED_BYTES // (16 * (k // block) * block_bytes))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("types", nargs="+", metavar="TYPE", help="a packed type: q4_0, q4_1, q5_0, q5_1, q8_0, iq4_nl, q2_k .. q6_k, iq4_xs")
    ap.add_argument("-k", type=int, default=576, help="row length (default: %(default)s; the k-quants need a multiple of 256)")
    ap.add_argument("--rows", type=int, default=1536, help="rows of the streamed matrix (default: %(default)s)")
    ap.add_argument("--cols", type=int, default=1, help="activation columns (default: %(default)s)")
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mib", type=float, default=STREAM_MIB, help="weights streamed a pass (default: %(default)s MiB)")
    ap.add_argument("--isa", default=None, help="a table other than the selected one (avx2, avx512, neon)")
    ap.add_argument("--exact", action="store_true", help="llama.cpp's float order's kernels")
    ap.add_argument("--no-one-token-slot", action="store_true", help="one column through gemm_16row_groups itself")
    args = ap.parse_args()
    if args.rounds < 1 or args.threads < 1 or args.cols < 1 or args.mib <= 0:
        ap.error("--rounds, --threads and --cols must be at least 1, --mib above 0")
    ids = [type_id(t) for t in args.types]
    reference = np.ones(REFERENCE_MIB * 1024 * 1024, dtype=np.uint8)  # written: its pages are there
    common = dict(cols=args.cols, isa=args.isa, exact=args.exact, one_token_slot=not args.no_one_token_slot,
                  threads=args.threads)
    refs: list[float] = []
    stream: dict[str, list[float]] = {t: [] for t in args.types}
    cached: dict[str, list[float]] = {t: [] for t in args.types}
    for _ in range(args.rounds):
        refs.append(reference.nbytes / _testing.read_seconds(reference, args.threads, 3) / 1e9)
        for name, tid in zip(args.types, ids):
            try:
                b, s = _testing.stream_packed_gemv(tid, args.k, args.rows, mib=args.mib, runs=3, **common)
                cb, cs = _testing.stream_packed_gemv(tid, args.k, cached_rows(tid, args.k, args.threads), mib=args.mib / 4, cached=True,
                                                     runs=3, **common)
            except RuntimeError as e:
                raise SystemExit(f"stream_packed_gemv.py: {e}") from None
            stream[name].append(b / s / 1e9)
            cached[name].append(cb / cs / 1e9)
    print(f"CPU: {cpu_name()}, {args.threads} thread(s), {args.cols} column(s), k = {args.k}, {args.rounds} rounds; "
          f"read reference median {statistics.median(refs):.1f} GB/s (range {min(refs):.1f}-{max(refs):.1f})")
    for name in args.types:
        shares = [s / r for s, r in zip(stream[name], refs)]
        print(f"{name}: streams {statistics.median(stream[name]):.1f} GB/s, share of the reference median "
              f"{100 * statistics.median(shares):.0f} % (rounds {100 * min(shares):.0f}-{100 * max(shares):.0f} %); "
              f"from L2 {statistics.median(cached[name]):.1f} GB/s")


if __name__ == "__main__":
    main()
