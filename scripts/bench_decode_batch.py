#!/usr/bin/env python3
"""What a decode step of n tokens costs against a step of one: the small-batch path that parallel
requests and speculative verification stand on (issue 22 asks n=4 <= 1.3x and n=8 <= 1.6x).

For each model and n: the context holds `--depth` tokens; one `decode` call of n new tokens with
logits for every row (a verifier and a batch of sequences both need them all), each token computed
as it would be decoded alone (as_single_steps, what decode batches use), is timed, then the cache is
cut back to the depth. Rounds alternate the n values so that drift on a shared host
touches each alike; the report is the median time per call and its ratio to n=1's.

    python scripts/bench_decode_batch.py [MODEL ...] [-n 1,2,4,8] [-t 2] [--depth 200] [--llamacpp] [--json]

--llamacpp measures llama.cpp's llama_decode of the same ids the same way, side by side (the
llama-cpp-python build of scripts/bench_compare.py, in its venv; llama.cpp computes a batch in its
own order for that size, which is what it gives its parallel slots and draft verification).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edgeinfer import _core  # noqa: E402
from edgeinfer.machine import cpu_name  # noqa: E402
from edgeinfer.pull import resolve_model  # noqa: E402


def measure(path: str, sizes: list[int], n_threads: int, depth: int, rounds: int, reps: int,
            single_steps: bool) -> dict:
    model = _core.Model(path)
    ctx = _core.Context(model, n_ctx=depth + max(sizes) + 8, n_threads=n_threads)
    rng = np.random.default_rng(0)
    # Fixed ids from the lower vocabulary (no tokenizer involved, as `edgeinfer bench`).
    prompt = rng.integers(100, min(model.n_vocab, 20000), depth).astype(np.int32)
    new = rng.integers(100, min(model.n_vocab, 20000), max(sizes)).astype(np.int32)
    ctx.decode(prompt)
    for n in sizes:  # warm-up: first touches of scratch and weights
        ctx.decode(new[:n], all_logits=True, as_single_steps=single_steps)
        ctx.truncate(depth)
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for r in range(rounds):
        order = sizes if r % 2 == 0 else sizes[::-1]
        for n in order:
            best = float("inf")
            for _ in range(reps):
                t0 = time.perf_counter()
                ctx.decode(new[:n], all_logits=True, as_single_steps=single_steps)
                best = min(best, time.perf_counter() - t0)
                ctx.truncate(depth)
            times[n].append(best)
    median = {n: statistics.median(v) for n, v in times.items()}
    base = median[sizes[0]] if sizes[0] == 1 else None
    return {
        "model": Path(path).name, "isa": _core.isa(), "n_threads": n_threads, "depth": depth,
        "order": "single steps" if single_steps else "prompt",
        "ms": {n: median[n] * 1e3 for n in sizes},
        "ratio_to_one": {n: median[n] / base for n in sizes} if base else None,
    }


def measure_llamacpp(worker, path: str, sizes: list[int], n_threads: int, depth: int, rounds: int, reps: int) -> dict:
    """The same calls through llama.cpp (scripts/bench_llamacpp_worker.py): the same ids, the
    fastest of `reps` calls a round, the median over rounds."""
    n_vocab = _core.Model(path).n_vocab
    rng = np.random.default_rng(0)
    prompt = [int(i) for i in rng.integers(100, min(n_vocab, 20000), depth)]
    new = [int(i) for i in rng.integers(100, min(n_vocab, 20000), max(sizes))]
    info = worker.call(cmd="load", model=path, n_threads=n_threads, n_ctx=depth + max(sizes) + 8, n_batch=512)
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for r in range(rounds):
        for n in (sizes if r % 2 == 0 else sizes[::-1]):
            times[n].append(worker.call(cmd="batch", prompt=prompt, ids=new[:n], reps=reps)["ns"] / 1e9)
    median = {n: statistics.median(v) for n, v in times.items()}
    base = median[sizes[0]] if sizes[0] == 1 else None
    return {"model": Path(path).name, "llamacpp": info.get("version", "?"), "ms": {n: median[n] * 1e3 for n in sizes},
            "ratio_to_one": {n: median[n] / base for n in sizes} if base else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=["smollm2-135m-instruct", "gemma3-270m"])
    ap.add_argument("-n", default="1,2,4,8", help="tokens per decode call (default: 1,2,4,8)")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--depth", type=int, default=200, help="tokens cached before each call (default: 200)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=5, help="calls per round; the fastest counts (default: 5)")
    ap.add_argument("--prompt-order", action="store_true",
                    help="llama.cpp's order for the batch (as a prompt chunk), not each token's as decoded alone")
    ap.add_argument("--llamacpp", action="store_true", help="measure llama.cpp side by side (see above)")
    ap.add_argument("--llamacpp-python", metavar="PATH",
                    help="the Python of another llama-cpp-python build to measure (default: bench_compare's venv)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    sizes = sorted({int(s) for s in args.n.split(",")})
    paths = [str(resolve_model(m)) for m in args.models]
    results = [measure(p, sizes, args.threads, args.depth, args.rounds, args.reps, not args.prompt_order) for p in paths]
    theirs = []
    if args.llamacpp:
        from bench_compare import LlamaCppWorker, default_venv, ensure_llamacpp
        python = Path(args.llamacpp_python) if args.llamacpp_python else \
            ensure_llamacpp(default_venv(), "llama-cpp-python==0.3.36")
        worker = LlamaCppWorker(python)
        try:
            theirs = [measure_llamacpp(worker, p, sizes, args.threads, args.depth, args.rounds, args.reps)
                      for p in paths]
        finally:
            worker.close()
    if args.json:
        print(json.dumps({"cpu": cpu_name(), "results": results, "llamacpp": theirs}, indent=2))
        return 0
    print(f"CPU: {cpu_name()}, {args.threads} threads, depth {args.depth}")
    for i, r in enumerate(results):
        print(f"{r['model']} ({r['isa']}, {r['order']} order)" + ("   | llama.cpp" if theirs else ""))
        for n in sizes:
            ratio = f"  {r['ratio_to_one'][n]:.2f}x one token" if r["ratio_to_one"] else ""
            other = ""
            if theirs:
                t = theirs[i]
                other = f"   | {t['ms'][n]:8.2f} ms" + (f"  {t['ratio_to_one'][n]:.2f}x" if t["ratio_to_one"] else "")
            print(f"  n={n:<3} {r['ms'][n]:8.2f} ms{ratio}{other}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
