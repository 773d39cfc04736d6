"""Throughput benchmark in the spirit of llama-bench: prompt processing and token generation,
measured separately, on fixed token ids (no tokenizer, no sampler).

- ``pp<N>``: one decode of N tokens from an empty context (split into n_batch chunks by the
  context, as any prompt is). tok/s = N / time.
- ``tg<N>``: N single-token decodes from an empty context, each feeding a fixed id; only the
  last row's logits are computed (the same work as greedy generation minus the argmax).
- ``tg<N> x<S>`` (``-np S``, as llama-batched-bench's ``-npl``): S sequences generating at once,
  N steps of one decode call carrying a token of each (parallel requests, edgeinfer.parallel).
  tok/s = S x N / time: the aggregate; how it grows with S is what a step of S rows costs.
- ``@ d<D>`` (llama-bench's ``-d``): the test starts with D tokens already in the context (decoded
  once, untimed; each run truncates back to them), which is where the KV cache and attention
  cost show: e.g. ``tg32 @ d2048`` is generation speed at 2,048 tokens of context.

Every test runs for each KV cache type pair (K type x V type, ``--ctk/--ctv``) and thread count.

Each test runs once untimed (warm-up: page faults, caches, pool spin-up), then ``repetitions``
timed runs. The ids are drawn from a seeded generator, like llama-bench's random prompt; the
model sees the same ids on every run.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from edgeinfer import _core
from edgeinfer.model import resolve_n_ctx
from edgeinfer.threads import resolve_n_threads
from edgeinfer.wording import Ref, Wording


@dataclass
class BenchResult:
    """One test (pp or tg) at one thread count: the samples and their summary."""

    model: str
    model_size: int      # file bytes
    n_params: int
    isa: str
    n_threads: int
    n_batch: int
    n_ctx: int
    n_prompt: int        # tokens of one prompt-processing run (0 for tg)
    n_gen: int           # single-token decodes of one generation run (0 for pp)
    n_depth: int = 0     # tokens already in the context when a run starts
    type_k: str = "f16"  # KV cache types
    type_v: str = "f16"
    n_gpu_layers: int = 0  # layers offloaded to the OpenCL device (--gpu-layers)
    n_parallel: int = 1  # sequences generating at once (tg only)
    float_order: str = "llama.cpp"  # the matmuls' float order (Model.load's exact)
    samples_ns: list[int] = field(default_factory=list)

    @property
    def test(self) -> str:
        name = f"pp{self.n_prompt}" if self.n_prompt else f"tg{self.n_gen}"
        if self.n_parallel > 1:
            name += f" x{self.n_parallel}"
        return f"{name} @ d{self.n_depth}" if self.n_depth else name

    @property
    def n_tokens(self) -> int:
        return self.n_prompt or self.n_gen * self.n_parallel

    @property
    def samples_ts(self) -> list[float]:
        return [self.n_tokens * 1e9 / ns for ns in self.samples_ns]

    @property
    def avg_ts(self) -> float:
        return statistics.fmean(self.samples_ts)

    @property
    def stddev_ts(self) -> float:
        ts = self.samples_ts
        return statistics.stdev(ts) if len(ts) > 1 else 0.0

    def to_dict(self) -> dict:
        """Plain data (the ``--json`` record), with llama-bench's field names where they exist."""
        d = asdict(self)
        d.update(test=self.test, samples_ts=self.samples_ts, avg_ts=self.avg_ts, stddev_ts=self.stddev_ts,
                 avg_ns=int(statistics.fmean(self.samples_ns)) if self.samples_ns else 0)
        return d


def make_token_ids(n: int, n_vocab: int, seed: int = 42) -> np.ndarray:
    """n fixed pseudo-random ids in [0, n_vocab), as int32."""
    return np.random.default_rng(seed).integers(0, n_vocab, size=n, dtype=np.int32)


def rewind(ctx: _core.Context, depth: int, at_depth: np.ndarray | None = None) -> None:
    """Back to the first `depth` cached positions: truncated, or for a model with a recurrent
    state (LFM2), which cannot be cut back, restored from `at_depth` (its kv_snapshot(depth))."""
    if depth and ctx.recurrent:
        ctx.kv_restore(at_depth, depth, depth)
    else:
        ctx.truncate(depth)


def time_prompt(ctx: _core.Context, ids: np.ndarray, depth: int = 0, at_depth: np.ndarray | None = None) -> int:
    """ns for one decode of `ids` after the first `depth` cached positions."""
    rewind(ctx, depth, at_depth)
    start = time.perf_counter_ns()
    ctx.decode(ids)
    return time.perf_counter_ns() - start


def time_generation(ctx: _core.Context, ids: np.ndarray, depth: int = 0, at_depth: np.ndarray | None = None) -> int:
    """ns for len(ids) single-token decodes after the first `depth` cached positions."""
    rewind(ctx, depth, at_depth)
    steps = [ids[i:i + 1] for i in range(len(ids))]  # sliced before the clock starts
    start = time.perf_counter_ns()
    for step in steps:
        ctx.decode(step)
    return time.perf_counter_ns() - start


def time_parallel_generation(ctx: _core.Context, ids: np.ndarray, depth: int, n_seq: int,
                             at_depth: np.ndarray | None = None) -> int:
    """ns for len(ids) decode calls of one token for each of the first n_seq sequences of ctx
    (each decodes the same ids after the same first `depth` positions, copied from sequence 0's)."""
    rewind(ctx, depth, at_depth)
    for s in range(1, n_seq):
        ctx.seq_copy(0, s, depth)
    seq_ids = np.arange(n_seq, dtype=np.int32)
    steps = [np.full(n_seq, t, dtype=np.int32) for t in ids]  # made before the clock starts
    start = time.perf_counter_ns()
    for step in steps:
        ctx.decode_sequences(step, seq_ids)
    return time.perf_counter_ns() - start


def run_bench(
    path: str | Path,
    n_prompt: Sequence[int] = (512,),
    n_gen: Sequence[int] = (128,),
    threads: Sequence[int] = (0,),
    repetitions: int = 5,
    n_ctx: int | None = None,
    n_batch: int = 512,
    on_result: Callable[[BenchResult], None] | None = None,
    type_k: Sequence[str] = ("f16",),
    type_v: Sequence[str] = ("f16",),
    n_depth: Sequence[int] = (0,),
    gpu: dict | None = None,
    n_parallel: Sequence[int] = (1,),
) -> list[BenchResult]:
    """Runs every pp test (n_prompt > 0) and tg test (n_gen > 0) at every depth, for every KV
    cache type pair (each of type_k with each of type_v) and thread count (0 = physical cores; more
    than the usable CPUs: capped, with a warning; counts that come out equal run once).
    n_ctx None = just enough for the longest test; like Model.load's, at most the model's trained
    context (a larger one is clamped, with a warning), and a test that does not fit is refused before
    anything is allocated. gpu: Model.load's gpu_layers / device / require_gpu, planned for each KV
    type pair (without a device: a warning, and the CPU).
    n_parallel: for each S > 1, the tg tests again with S sequences at once (not with gpu).
    Returns the results in run order, also passing each to on_result as it completes."""
    if repetitions < 1:
        raise ValueError("repetitions must be at least 1")
    if any(s < 1 for s in n_parallel):
        raise ValueError(Wording("", Ref("n_parallel"), " values must be at least 1"))
    tests = [(p, 0, 1) for p in n_prompt if p > 0] + [(0, g, s) for g in n_gen if g > 0 for s in n_parallel]
    if not tests:
        raise ValueError("nothing to run: give a positive -p or -n")
    if not n_depth or any(d < 0 for d in n_depth):
        raise ValueError("depths must be 0 or more")
    path = Path(path)
    model = _core.Model(str(path))
    need = max(n_depth) + max(p + g for p, g, _ in tests)
    # As Model.load sizes every other command's context: at most the trained one, with a note.
    n_ctx = resolve_n_ctx(n_ctx or need, model.n_ctx_train)
    if n_ctx < need:
        raise ValueError(f"context size {n_ctx} is smaller than the longest test ({need} tokens)")

    thread_counts: list[int] = []
    for t in threads:
        n = resolve_n_threads(t, stacklevel=2)
        if n not in thread_counts:
            thread_counts.append(n)

    ids: np.ndarray | None = None
    results = []
    for tk in type_k:
        for tv in type_v:
            offload = {}
            if gpu and gpu.get("gpu_layers") is not None:
                from edgeinfer.gpu.model_plan import plan_offload
                _, offload = plan_offload(model.gguf, str(gpu["gpu_layers"]), gpu.get("device", 0), n_ctx,
                                          (tk, tv), gpu.get("require_gpu", False))
            for t in thread_counts:
                n_seq = max(n_parallel) if not offload else 1
                ctx = _core.Context(model, n_ctx=n_ctx, n_threads=t, n_batch=n_batch, type_k=tk, type_v=tv,
                                    n_seq=n_seq, **offload)
                # Only now: a model that names no trained context is not capped above, and the core
                # refuses a size past its limit before `need` ids are allocated.
                if ids is None:
                    ids = make_token_ids(need, model.n_vocab)
                for d in n_depth:
                    ctx.truncate(0)
                    if d:
                        ctx.decode(ids[:d])  # the context the tests start from, decoded once
                    at_depth = ctx.kv_snapshot(d) if d and ctx.recurrent else None
                    for p, g, s in tests:
                        if s > n_seq:
                            continue
                        r = BenchResult(model=path.name, model_size=path.stat().st_size, n_params=model.n_params,
                                        isa=_core.isa(), n_threads=ctx.n_threads, n_batch=n_batch, n_ctx=n_ctx,
                                        n_prompt=p, n_gen=g, n_depth=d, type_k=tk, type_v=tv,
                                        n_gpu_layers=len(offload.get("gpu_layers", ())), n_parallel=s,
                                        float_order=model.float_order)
                        new = ids[d:d + p + g]
                        run = ((lambda: time_prompt(ctx, new, d, at_depth)) if p else
                               (lambda: time_generation(ctx, new, d, at_depth)) if s == 1 else
                               (lambda: time_parallel_generation(ctx, new, d, s, at_depth)))
                        run()  # warm-up
                        r.samples_ns = [run() for _ in range(repetitions)]
                        results.append(r)
                        if on_result:
                            on_result(r)
                del ctx
    return results

