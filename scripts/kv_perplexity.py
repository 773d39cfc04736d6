"""Perplexity per KV cache type, with and without the Hadamard rotation and the centering of K
(docs/PERFORMANCE.md, "KV cache"): one table row per (K type, V type, rotation, centering), and
the change against f16 (paired: the same chunks for every row).

    python scripts/kv_perplexity.py MODEL.gguf [--n-ctx 512] [--chunks 30] [--threads N]
"""
from __future__ import annotations

import argparse
import os
import time

from edgeinfer.model import Model
from edgeinfer.perplexity import perplexity

EVAL = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "fixtures", "eval.txt")

# (K type, V type, rotate K, center K)
CONFIGS = [("f16", "f16", False, False), ("q8_0", "q8_0", False, False), ("q8_0", "q8_0", True, False),
           ("q4_0", "q4_0", False, False), ("q4_0", "q4_0", True, False), ("q8_0", "q4_0", False, False),
           ("q8_0", "q4_0", True, False), ("q4_0", "q4_0", False, True), ("q4_0", "q4_0", True, True),
           ("q4_0", "q8_0", True, True)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--n-ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=30)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--only", default=None, help="comma-separated config indices to run")
    ap.add_argument("--base", type=float, default=None, help="f16/f16 PPL of an earlier run (same chunks)")
    args = ap.parse_args()
    text = open(EVAL, encoding="utf-8").read()
    configs = CONFIGS if args.only is None else [CONFIGS[int(i)] for i in args.only.split(",")]
    base = args.base
    print(f"{os.path.basename(args.model)}, n_ctx {args.n_ctx}, {args.chunks} chunks")
    print("| K / V cache | K rotated | K centered | PPL | vs f16 |\n|---|---|---|---|---|")
    for tk, tv, rot, center in configs:
        m = Model.load(args.model, n_ctx=args.n_ctx, n_threads=args.threads, cache_type_k=tk, cache_type_v=tv,
                       cache_rotate_k=rot, cache_center_k=center)
        t0 = time.perf_counter()
        r = perplexity(m, text, n_ctx=args.n_ctx, n_chunks=args.chunks)
        if (tk, tv, rot, center) == ("f16", "f16", False, False):
            base = r.ppl
        rel = f"{100 * (r.ppl / base - 1):+.2f} %" if base else "?"
        yes = {True: "yes", False: "no"}
        print(f"| {tk} / {tv} | {yes[rot]} | {yes[center]} | {r.ppl:.4f} ± {r.stderr:.3f} | {rel} |"
              f"  ({time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
