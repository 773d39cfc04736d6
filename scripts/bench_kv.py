"""Measures what prompt caching and the KV cache types buy (docs/PERFORMANCE.md, "KV cache and
prompt caching"): time to first token of a follow-up chat turn vs cold, restoring a saved state vs
recomputing it, KV bytes per token, and decode speed at a long context for each KV type.

    python scripts/bench_kv.py MODEL.gguf [--threads N] [--history 1000] [--decode-ctx 2048]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np

from edgeinfer.model import Model

EVAL = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "fixtures", "eval.txt")


def ttft(model: Model, prompt: list[int]) -> float:
    """Seconds from the call to the first generated token."""
    t0 = time.perf_counter()
    gen = model.generate(prompt, max_tokens=1, temperature=0)
    next(gen, None)
    dt = time.perf_counter() - t0
    gen.close()
    return dt


def best_of(n: int, fn) -> float:
    return min(fn() for _ in range(n))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--history", type=int, default=1000)
    ap.add_argument("--decode-ctx", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    text = open(EVAL, encoding="utf-8").read()

    m = Model.load(args.model, n_ctx=4096, n_threads=args.threads)
    ids = m.tokenize(text)
    history = ids[:args.history]
    follow_up = history + ids[args.history:args.history + 24]   # a new 24-token user message

    # 1. Follow-up turn: cold (empty cache) vs warm (history cached by the previous turn).
    def cold() -> float:
        m.prompt_cache.reset()
        m.prompt_cache.clear_snapshots()
        return ttft(m, follow_up)

    def warm() -> float:
        m.prompt_cache.reset()
        m.prompt_cache.decode(history)
        return ttft(m, follow_up)
    t_cold, t_warm = best_of(args.repeats, cold), best_of(args.repeats, warm)
    print(f"TTFT follow-up turn ({len(history)} tokens of history + 24 new): cold {t_cold * 1e3:.0f} ms, "
          f"warm {t_warm * 1e3:.1f} ms ({100 * t_warm / t_cold:.1f}% of cold)")

    # 2. Restoring a saved state vs recomputing it.
    m.prompt_cache.reset()
    m.prompt_cache.decode(history)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "history.eis")
        t_save = best_of(args.repeats, lambda: _timed(lambda: m.save_state(path)))
        size = os.path.getsize(path)

        def recompute() -> float:
            m.prompt_cache.reset()
            return _timed(lambda: m.prompt_cache.decode(history))
        t_recompute = best_of(args.repeats, recompute)
        t_restore = best_of(args.repeats, lambda: _timed(lambda: m.load_state(path)))
    print(f"state of {len(history)} tokens: {size / 1e6:.1f} MB; save {t_save * 1e3:.1f} ms, "
          f"restore {t_restore * 1e3:.1f} ms vs recompute {t_recompute * 1e3:.0f} ms "
          f"({t_recompute / t_restore:.0f}x)")
    # In-memory snapshot restore (the prompt cache's multi-prefix path).
    snap = m.context.kv_snapshot(len(history))
    t_snap = best_of(args.repeats, lambda: _timed(lambda: m.context.kv_restore(snap, len(history), len(history))))
    print(f"in-memory snapshot restore of {len(history)} tokens: {t_snap * 1e3:.2f} ms")

    # 3. KV bytes per token and decode speed with a long context, per type.
    for tk, tv in [("f16", "f16"), ("q8_0", "q8_0"), ("q4_0", "q4_0")]:
        mq = Model.load(args.model, n_ctx=args.decode_ctx + 64, n_threads=args.threads,
                        cache_type_k=tk, cache_type_v=tv)
        ctx = mq.context
        ctx.decode(np.asarray((ids * 4)[:args.decode_ctx], dtype=np.int32))
        speeds = []
        for _ in range(args.repeats):
            ctx.truncate(args.decode_ctx)
            t0 = time.perf_counter()
            for tok in ids[:32]:
                ctx.decode(np.asarray([tok], dtype=np.int32))
            speeds.append(32 / (time.perf_counter() - t0))
        total_mib = mq.kv_bytes_per_token * args.decode_ctx / 2**20
        print(f"KV {tk}/{tv}: {mq.kv_bytes_per_token:,} bytes/token ({total_mib:.1f} "
              f"MiB at {args.decode_ctx}); decode at {args.decode_ctx} context: best {max(speeds):.1f} tok/s, "
              f"median {statistics.median(speeds):.1f} tok/s")


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
