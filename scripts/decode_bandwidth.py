#!/usr/bin/env python3
"""Decode against the machine's read bandwidth, measured side by side on a noisy host.

    python scripts/decode_bandwidth.py MODEL.gguf [MODEL.gguf ...] [-t 2] [--rounds 30] [-n 16]

Each round decodes N single tokens of every model, each burst between two read references
(scripts/read_bandwidth.py's: the engine's own pool reading a 512 MiB array, one pass). A burst
whose two references agree within 15 % ran in the same memory phase as they did; its share of the
bandwidth is its bytes a token x tokens a second over their mean. Bursts whose references disagree
(the phase changed during them) are left out and counted.

Why brackets: on a shared VM the machine's read rate moves by tens of per cent, and some hosts
switch between two memory phases within seconds. A share computed across two moments says more
about the host than about the engine: a reference taken seconds before a burst can belong to the
other phase (docs/PERFORMANCE.md has what that hid). Where the agreeing references fall into two
groups (the largest gap between them over 20 % of the lower), each group is reported apart.

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
AGREE = 0.15      # the most two bracketing references may differ, relative to the larger
PHASE_GAP = 1.2   # the largest ratio between neighbouring sorted references that still makes one phase


def bytes_a_token(path: str) -> int:
    tensors = {t.name: int(t.n_bytes) for t in GGUFReader(path).tensors}
    if "output.weight" in tensors:
        tensors.pop("token_embd.weight", None)
    return sum(tensors.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", metavar="MODEL.gguf")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("-n", type=int, default=16,
                    help="decode steps a burst (default: %(default)s; short, to stay in one memory phase)")
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

    def reference() -> float:
        return array.nbytes / _testing.read_seconds(array, args.threads, 1)

    bursts: dict[str, list[tuple[float, float]]] = {r[0]: [] for r in runs}  # (reference, tok/s), agreeing
    dropped = {r[0]: 0 for r in runs}
    for name, _, ctx, ids in runs:  # a warm-up burst each
        time_generation(ctx, ids)
    for _ in range(args.rounds):
        for name, nbytes, ctx, ids in runs:
            before = reference()
            tok_s = args.n * 1e9 / time_generation(ctx, ids)
            after = reference()
            if abs(before - after) <= AGREE * max(before, after):
                bursts[name].append(((before + after) / 2, tok_s))
            else:
                dropped[name] += 1

    print(f"CPU: {cpu_name()} ({_core.isa()}), {args.threads} thread(s), {args.rounds} rounds of {args.n} steps, "
          f"each burst between two read references")
    for name, nbytes, _, _ in runs:
        kept = sorted(bursts[name])
        print(f"{name}: {nbytes / 1e6:.1f} MB a token; {len(kept)} bursts kept, "
              f"{dropped[name]} dropped (the phase moved)")
        for label, group in phases(kept):
            refs = [r for r, _ in group]
            shares = [nbytes * t / r for r, t in group]
            tok_s = statistics.median([t for _, t in group])
            print(f"  {label}: {len(group)} bursts, reference median {statistics.median(refs) / 1e9:.1f} GB/s, "
                  f"{tok_s:.1f} tok/s = {nbytes * tok_s / 1e9:.1f} GB/s; share of the reference: median "
                  f"{100 * statistics.median(shares):.0f} % (bursts {100 * min(shares):.0f}-{100 * max(shares):.0f} %)")


def phases(kept: list[tuple[float, float]]) -> list[tuple[str, list[tuple[float, float]]]]:
    """The bursts (sorted by reference) as one group, or as a slow and a fast phase split at the
    largest gap between neighbouring references when that gap is a ratio over PHASE_GAP."""
    if len(kept) < 2:
        return [("all", kept)] if kept else []
    gap, at = max((kept[i + 1][0] / kept[i][0], i + 1) for i in range(len(kept) - 1))
    if gap <= PHASE_GAP:
        return [("all", kept)]
    return [("slow phase", kept[:at]), ("fast phase", kept[at:])]


if __name__ == "__main__":
    main()
