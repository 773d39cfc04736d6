"""Counters for ``GET /metrics``, in Prometheus' text exposition format.

The slots' threads record each finished generation (in all and per slot); the HTTP side records
rejections, and `StatusCountMiddleware` (outermost) the status of every answer, 401 and 413
included. Gauges that describe the present (queue depth, requests in flight, which slots are
busy, the tokens each slot's context holds) and the decode-step counters are read from the engine
when the metrics are rendered, so they cannot drift.
"""
from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

PREFIX = "edgeinfer_"


@dataclass
class _Totals:
    requests_ok: int = 0
    requests_cancelled: int = 0
    requests_failed: int = 0
    requests_rejected: int = 0           # refused before reaching the engine (queue full, loading)
    prompt_tokens: int = 0               # prompt tokens of finished requests, cached or not
    prompt_tokens_decoded: int = 0
    prompt_cache_hit_tokens: int = 0
    generated_tokens: int = 0
    drafted_tokens: int = 0              # tokens guessed by speculative decoding (edgeinfer.speculative)
    accepted_tokens: int = 0             # of those, the ones the model confirmed
    prompt_seconds: float = 0.0
    generation_seconds: float = 0.0
    last_prompt_tok_s: float = 0.0
    last_generation_tok_s: float = 0.0


class Metrics:
    """Thread-safe counters."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._t = _Totals()
        self._responses: Counter[int] = Counter()   # HTTP status -> answers sent
        self._slot_requests: Counter[int] = Counter()   # slot -> requests it finished
        self._slot_tokens: Counter[int] = Counter()     # slot -> tokens it generated

    def record_response(self, status: int) -> None:
        with self._lock:
            self._responses[status] += 1

    def responses(self) -> dict[int, int]:
        with self._lock:
            return dict(self._responses)

    def record_generation(self, prompt_tokens: int, cached_tokens: int, generated: int, prompt_s: float,
                          gen_s: float, prompt_tok_s: float, gen_tok_s: float, drafted: int = 0,
                          accepted: int = 0, slot: int = 0) -> None:
        with self._lock:
            self._slot_requests[slot] += 1
            self._slot_tokens[slot] += generated
            t = self._t
            t.requests_ok += 1
            t.drafted_tokens += drafted
            t.accepted_tokens += accepted
            t.prompt_tokens += prompt_tokens
            t.prompt_tokens_decoded += prompt_tokens - cached_tokens
            t.prompt_cache_hit_tokens += cached_tokens
            t.generated_tokens += generated
            t.prompt_seconds += prompt_s
            t.generation_seconds += gen_s
            if prompt_tok_s > 0:
                t.last_prompt_tok_s = prompt_tok_s
            if gen_tok_s > 0:
                t.last_generation_tok_s = gen_tok_s

    def record_cancelled(self) -> None:
        with self._lock:
            self._t.requests_cancelled += 1

    def record_failed(self) -> None:
        with self._lock:
            self._t.requests_failed += 1

    def record_rejected(self) -> None:
        with self._lock:
            self._t.requests_rejected += 1

    def snapshot(self) -> _Totals:
        with self._lock:
            return _Totals(**vars(self._t))

    def render(self, in_flight: int, queue_depth: int, model_loaded: bool,
               slots: Sequence[tuple[int, bool, int]] = (), steps: Any = None) -> str:
        """The Prometheus text for these counters and the engine's present state: `slots` as
        (index, busy, tokens held) per slot, `steps` the batcher's StepStats (None: one slot)."""
        t = self.snapshot()
        with self._lock:
            slot_requests, slot_tokens = dict(self._slot_requests), dict(self._slot_tokens)
        lines: list[str] = []

        def metric(name: str, kind: str, help_text: str, samples: list[tuple[str, float]]) -> None:
            lines.append(f"# HELP {PREFIX}{name} {help_text}")
            lines.append(f"# TYPE {PREFIX}{name} {kind}")
            for labels, value in samples:
                lines.append(f"{PREFIX}{name}{labels} {value:g}" if isinstance(value, float)
                             else f"{PREFIX}{name}{labels} {value}")

        metric("requests_total", "counter", "Generation requests by outcome.", [
            ('{outcome="ok"}', t.requests_ok), ('{outcome="cancelled"}', t.requests_cancelled),
            ('{outcome="error"}', t.requests_failed), ('{outcome="rejected"}', t.requests_rejected)])
        metric("http_responses_total", "counter", "HTTP answers by status code (every endpoint, errors included).",
               [(f'{{status="{status}"}}', n) for status, n in sorted(self.responses().items())])
        metric("prompt_tokens_total", "counter", "Prompt tokens of finished requests (cached or not).",
               [("", t.prompt_tokens)])
        metric("prompt_tokens_decoded_total", "counter", "Prompt tokens that needed a prefill.",
               [("", t.prompt_tokens_decoded)])
        metric("prompt_cache_hit_tokens_total", "counter", "Prompt tokens reused from the prompt cache.",
               [("", t.prompt_cache_hit_tokens)])
        metric("generated_tokens_total", "counter", "Generated tokens.", [("", t.generated_tokens)])
        metric("draft_tokens_total", "counter", "Tokens guessed by speculative decoding (prompt lookup or --draft).",
               [("", t.drafted_tokens)])
        metric("draft_tokens_accepted_total", "counter", "Guessed tokens the model confirmed.",
               [("", t.accepted_tokens)])
        metric("prompt_seconds_total", "counter", "Time spent in prefill.", [("", float(t.prompt_seconds))])
        metric("generation_seconds_total", "counter", "Time spent generating.",
               [("", float(t.generation_seconds))])
        metric("prompt_tokens_per_second", "gauge", "Prefill speed of the last request.",
               [("", float(t.last_prompt_tok_s))])
        metric("generation_tokens_per_second", "gauge", "Generation speed of the last request.",
               [("", float(t.last_generation_tok_s))])
        metric("requests_in_flight", "gauge", "Requests queued or running in the engine.", [("", in_flight)])
        metric("queue_depth", "gauge", "Requests waiting for the engine.", [("", queue_depth)])
        metric("model_loaded", "gauge", "1 once the model is loaded.", [("", int(model_loaded))])
        metric("slots", "gauge", "Requests the engine runs at once (--parallel).", [("", len(slots))])
        metric("slot_busy", "gauge", "1 while a slot runs a request.",
               [(f'{{slot="{i}"}}', int(busy)) for i, busy, _ in slots])
        metric("slot_context_tokens", "gauge", "Tokens a slot's context holds (its conversation, reusable by the next).",
               [(f'{{slot="{i}"}}', held) for i, _, held in slots])
        metric("slot_requests_total", "counter", "Requests a slot finished.",
               [(f'{{slot="{i}"}}', slot_requests.get(i, 0)) for i, _, _ in slots])
        metric("slot_generated_tokens_total", "counter", "Tokens a slot generated.",
               [(f'{{slot="{i}"}}', slot_tokens.get(i, 0)) for i, _, _ in slots])
        if steps is not None:
            metric("decode_steps_total", "counter", "Decode steps shared by the slots' generations.",
                   [("", steps.steps)])
            metric("decode_step_rows_total", "counter",
                   "Tokens those steps carried (over decode_steps_total: the mean batch).", [("", steps.rows)])
            metric("prompt_chunks_total", "counter", "Prompt chunks decoded between the steps.",
                   [("", steps.prompt_chunks)])
        return "\n".join(lines) + "\n"
