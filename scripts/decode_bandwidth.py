#!/usr/bin/env python3
"""Decode against the machine's read bandwidth, measured side by side on a noisy host.

    python scripts/decode_bandwidth.py MODEL.gguf [MODEL.gguf ...] [-t 2] [--rounds 10] [-n 64]

Each round times the read reference (scripts/read_bandwidth.py's: the engine's own pool reading a
512 MiB array once a pass, the best of 3 passes) and then N single-token decodes of every model,
so each decode figure is set against a reference taken seconds before it. A model's share of the
bandwidth in a round is its bytes a token x tokens a second over that round's reference; the
figure is the median of the rounds' shares (medians of the references and speeds beside it).

Why not read_bandwidth.py and `edgeinfer bench` one after the other: on a shared VM the machine's
read rate moves by tens of per cent within minutes, in the reference as much as in the decode, and a
share computed across two such moments says more about the host than about the engine.

Bytes a token: every tensor of the file, since a decode step reads each weight once, except a
token_embd that a separate output.weight leaves to row lookups (a tied one is the output matrix
and is read whole).
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFReader

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edgeinfer import _core, _testing  # noqa: E402
from edgeinfer.bench import make_token_ids, time_generation  # noqa: E402
from edgeinfer.machine import cpu_name  # noqa: E402

REFERENCE_MIB = 512
REFERENCE_PASSES = 3


def bytes_a_token(path: str) -> int:
    tensors = {t.name: int(t.n_bytes) for t in GGUFReader(path).tensors}
    if "output.weight" in tensors:
        tensors.pop("token_embd.weight", None)
    return sum(tensors.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", metavar="MODEL.gguf")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("-n", type=int, default=64, help="decode steps a model a round (default: %(default)s)")
    args = ap.parse_args()
    if args.threads < 1 or args.rounds < 1 or args.n < 1:
        ap.error("-t, --rounds and -n must be at least 1")

    runs = []
    for path in args.models:
        try:
            model = _core.Model(path)
            ctx = _core.Context(model, n_ctx=args.n, n_threads=args.threads, n_batch=512)
        except (_core.EdgeInferError, OSError) as e:
            sys.exit(f"decode_bandwidth.py: {path}: {e}")
        runs.append((Path(path).name, bytes_a_token(path), ctx, make_token_ids(args.n, model.n_vocab)))
    array = np.ones(REFERENCE_MIB * 2**20, dtype=np.uint8)  # written: its pages exist before the runs

    refs, speeds, shares = [], {r[0]: [] for r in runs}, {r[0]: [] for r in runs}
    for name, _, ctx, ids in runs:  # a warm-up burst each
        time_generation(ctx, ids)
    for _ in range(args.rounds):
        ref = array.nbytes / _testing.read_seconds(array, args.threads, REFERENCE_PASSES)
        refs.append(ref / 1e9)
        for name, nbytes, ctx, ids in runs:
            tok_s = args.n * 1e9 / time_generation(ctx, ids)
            speeds[name].append(tok_s)
            shares[name].append(nbytes * tok_s / ref)

    print(f"CPU: {cpu_name()} ({_core.isa()}), {args.threads} thread(s), {args.rounds} rounds of {args.n} steps; "
          f"read reference median {statistics.median(refs):.1f} GB/s (range {min(refs):.1f}-{max(refs):.1f})")
    for name, nbytes, _, _ in runs:
        tok_s = statistics.median(speeds[name])
        print(f"{name}: {nbytes / 1e6:.1f} MB a token, {tok_s:.1f} tok/s = {nbytes * tok_s / 1e9:.1f} GB/s; "
              f"share of the read reference: median {100 * statistics.median(shares[name]):.0f} % "
              f"(rounds {100 * min(shares[name]):.0f}-{100 * max(shares[name]):.0f} %)")


if __name__ == "__main__":
    main()
