"""Measures what prompt caching and the KV cache types buy (docs/PERFORMANCE.md, "KV cache and
prompt caching"): time to first token of a follow-up chat turn vs cold, restoring a saved state vs
recomputing it, KV bytes per token, and decode speed at a long context for each KV type.

    python scripts/bench_kv.py MODEL.gguf [--threads N] [--history 1000] [--decode-ctx 2048]
    python scripts/bench_kv.py MODEL.gguf --speed-only --threads 1,2 --repeats 9

Decode speed: for each thread count, one context per KV type is filled with `--decode-ctx`
tokens once; then each round times 32 single-token decodes after them in every context in
turn (interleaved, so a burst of load from other processes hits all types alike), and the
median over the rounds is reported.
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
    ap.add_argument("--threads", default="0", help="thread count(s), comma-separated (0 = physical cores)")
    ap.add_argument("--speed-only", action="store_true", help="only the decode speed per KV type")
    ap.add_argument("--history", type=int, default=1000)
    ap.add_argument("--decode-ctx", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    text = open(EVAL, encoding="utf-8").read()
    threads = [int(t) for t in args.threads.split(",")]
    if args.speed_only:
        decode_speed(args.model, Model.load(args.model, n_ctx=64).tokenize(text), threads, args.decode_ctx,
                     args.repeats)
        return

    m = Model.load(args.model, n_ctx=4096, n_threads=threads[0] or None)
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
    decode_speed(args.model, ids, threads, args.decode_ctx, args.repeats)


KV_TYPES = [("f16", "f16"), ("q8_0", "q8_0"), ("q4_0", "q4_0")]


def decode_speed(path: str, ids: list[int], threads: list[int], depth: int, repeats: int) -> None:
    """tok/s of 32 single-token decodes after `depth` cached tokens, per KV type and thread count."""
    steps = [np.asarray([t], dtype=np.int32) for t in ids[:32]]
    for n_threads in threads:
        models = {}
        for tk, tv in KV_TYPES:
            mq = Model.load(path, n_ctx=depth + 64, n_threads=n_threads or None, cache_type_k=tk, cache_type_v=tv)
            mq.context.decode(np.asarray((ids * (depth // len(ids) + 1))[:depth], dtype=np.int32))
            models[tk, tv] = mq
        speeds: dict[tuple[str, str], list[float]] = {kv: [] for kv in models}
        for _ in range(repeats):
            for kv, mq in models.items():
                ctx = mq.context
                ctx.truncate(depth)
                t0 = time.perf_counter()
                for step in steps:
                    ctx.decode(step)
                speeds[kv].append(len(steps) / (time.perf_counter() - t0))
        for (tk, tv), mq in models.items():
            s = speeds[tk, tv]
            rot = " (K rotated)" if mq.cache_rotate_k else ""
            print(f"threads {mq.n_threads}, KV {tk}/{tv}{rot}: {mq.kv_bytes_per_token:,} bytes/token "
                  f"({mq.kv_bytes_per_token * depth / 2**20:.1f} MiB at {depth}); decode at {depth} context: "
                  f"median {statistics.median(s):.1f} tok/s, best {max(s):.1f} ({len(s)} rounds)", flush=True)


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
