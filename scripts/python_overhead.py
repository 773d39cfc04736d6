#!/usr/bin/env python3
"""How much of a generation step is spent outside the native decode call (issue 4's "< 3% of a
decode step with greedy sampling"): runs Model.complete(..., temperature=0) and times every
ctx.decode through a thin proxy; the rest of the generation loop (argmax over the logits view,
detokenizing the piece, stop-string checks, the generator machinery) is the Python overhead.

    python scripts/python_overhead.py MODEL.gguf [-t THREADS] [-n TOKENS] [-r REPS]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from edgeinfer.model import Model  # noqa: E402


class TimedContext:
    """Forwards everything to the native context and adds up the time spent in decode."""

    def __init__(self, ctx):
        self._ctx = ctx
        self.decode_s = 0.0
        self.calls = 0

    def decode(self, *args, **kwargs):
        start = time.perf_counter()
        self._ctx.decode(*args, **kwargs)
        self.decode_s += time.perf_counter() - start
        self.calls += 1

    def __getattr__(self, name):
        return getattr(self._ctx, name)


def measure(model: Model, prompt: str, n: int) -> tuple[float, float, int]:
    """(generation-loop seconds, of which in decode, tokens) for one greedy run of n tokens."""
    timed = TimedContext(model.context)
    model._cache.ctx = timed
    try:
        result = model.complete(prompt, max_tokens=n, temperature=0, stop=["\n\n\n\n"])
    finally:
        model._cache.ctx = timed._ctx
    prompt_s = result.timings.prompt_ms / 1000.0
    gen_s = result.timings.gen_ms / 1000.0
    # decode time of the generated tokens: all decode calls minus the first (the prompt)
    return gen_s, timed.decode_s - prompt_s, len(result.tokens)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("-t", "--threads", type=int, default=None)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("-r", "--repetitions", type=int, default=5)
    args = ap.parse_args()
    model = Model.load(args.model, n_ctx=1024, n_threads=args.threads)
    prompt = "Once upon a time,"
    measure(model, prompt, 8)  # warm-up
    shares = []
    for _ in range(args.repetitions):
        model._cache.reset()
        gen_s, decode_s, n = measure(model, prompt, args.n_gen)
        share = 100.0 * (gen_s - decode_s) / gen_s
        shares.append(share)
        print(f"{n} tokens: step {1000 * gen_s / n:.2f} ms, of which outside decode "
              f"{1000 * (gen_s - decode_s) / n:.3f} ms ({share:.2f} %)")
    print(f"median share outside decode: {statistics.median(shares):.2f} % (threads={model.n_threads})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
