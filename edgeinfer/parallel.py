"""Parallel generations over one context: one decode call per step for all of them.

The server runs several requests at once (`--parallel N`), each generation in its own thread with
the ordinary decoding loop (edgeinfer.generate) over its own sequence of one native context
(`_core.Context(n_seq=N)`). What makes them share the passes over the weights is where their
decode calls go: each sequence is a `BatchedSequence`, whose `decode` hands its tokens to the
`StepBatcher` and waits. The batcher runs a step once every generation in progress is waiting in
a decode (so a step carries a row from each, or a checked draft's rows) and answers them all:

- one `decode_sequences` call for every waiting generation's tokens. Each row is computed as
  decoding it alone computes it, so a generation's tokens never depend on who shares its steps;
- then one chunk of one waiting prompt, the prompts taking turns. A chunk is n_batch tokens cut
  where the core cuts a prompt decoded in one call, so the floats are the same as one call's; a
  long prompt stalls the others' streams for one chunk at a time, never for all of it.

A generation is waited for only while it is in progress (`BatchedSequence.engaged`, which
edgeinfer.generate enters around its decoding): a new request joins at the next step, a
finished one stops holding the others up. Any other decode call is answered by the next step.
There is no batcher thread: the thread that completes the set of waiting generations runs the
step, with the GIL released inside the core, so the others sample their tokens meanwhile.

Every other call on a sequence (truncate, snapshots, shift, saved states) runs directly on the
core's `Sequence` under the batcher's core lock, so it never overlaps a step.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from edgeinfer import _core


@dataclass(eq=False)
class _Request:
    """One decode call waiting for a step."""
    seq: int
    ids: np.ndarray
    all_logits: bool
    logits_from: int | None
    single_steps: bool
    decoded: int = 0                  # tokens of a prompt decoded so far (it goes in chunks)
    logits: np.ndarray | None = None
    error: BaseException | None = None
    finished: bool = False

    @property
    def is_prompt(self) -> bool:
        """A prompt (llama.cpp's batch order) goes alone, in chunks; the rest join one batch."""
        return len(self.ids) > 1 and not self.single_steps

    @property
    def chunked(self) -> bool:
        """Chunks can only keep the last row's logits (a generation's prompt wants no more)."""
        return self.is_prompt and not self.all_logits and self.logits_from is None

    def wanted_rows(self) -> np.ndarray:
        want = np.zeros(len(self.ids), dtype=bool)
        if self.all_logits:
            want[:] = True
        elif self.logits_from is not None:
            want[self.logits_from:] = True
        else:
            want[-1] = True
        return want


@dataclass
class StepStats:
    steps: int = 0            # decode_sequences calls (and lone decodes) for generating rows
    rows: int = 0             # rows they carried
    prompt_chunks: int = 0


class StepBatcher:
    """Runs the decode calls of the sequences of `ctx` in shared steps (see the module doc)."""

    def __init__(self, ctx: _core.Context):
        self.ctx = ctx
        self.core_lock = threading.Lock()     # held by every core call: steps and sequence ops
        self.stats = StepStats()
        self._cond = threading.Condition()
        self._engaged: set[int] = set()       # sequences whose generation is in progress
        self._waiting: dict[int, _Request] = {}
        self._running = False
        self._turn = 0                        # the sequence whose prompt chunk goes next (round robin)

    def sequence(self, seq: int) -> BatchedSequence:
        return BatchedSequence(self, seq)

    # --- the generations' side -------------------------------------------------------------------
    def decode(self, request: _Request) -> np.ndarray:
        """Waits for the step that answers `request`; returns its logits rows (a view)."""
        with self._cond:
            if request.seq in self._waiting:
                raise RuntimeError(f"sequence {request.seq} already has a decode call waiting")
            self._waiting[request.seq] = request
            while not request.finished:
                if not self._running and self._engaged <= self._waiting.keys():
                    self._run_step()
                else:
                    self._cond.wait()
        if request.error is not None:
            raise request.error
        return request.logits

    def engage(self, seq: int) -> None:
        with self._cond:
            self._engaged.add(seq)

    def release(self, seq: int) -> None:
        with self._cond:
            self._engaged.discard(seq)
            self._cond.notify_all()   # the others may all be waiting for this one

    @property
    def engaged(self) -> int:
        with self._cond:
            return len(self._engaged)

    # --- a step (run by the thread that made it ready, holding self._cond on entry and exit) -----
    def _run_step(self) -> None:
        rows = [r for r in self._waiting.values() if not r.is_prompt]
        prompts = sorted((r for r in self._waiting.values() if r.is_prompt), key=lambda r: r.seq)
        prompt = next((r for r in prompts if r.seq >= self._turn), prompts[0]) if prompts else None
        if prompt is not None:
            self._turn = prompt.seq + 1
        self._running = True
        self._cond.release()
        try:
            if rows:
                with self.core_lock:
                    self._decode_rows(rows)
                with self._cond:   # answered: they sample while the prompt chunk runs
                    self._finish(rows)
            if prompt is not None:
                with self.core_lock:
                    self._decode_prompt_chunk(prompt)
        finally:
            self._cond.acquire()
            self._running = False
            if prompt is not None and prompt.finished:
                self._finish([prompt])
            self._cond.notify_all()

    def _finish(self, requests: Sequence[_Request]) -> None:
        for r in requests:
            r.finished = True
            self._waiting.pop(r.seq, None)
        self._cond.notify_all()

    def _decode_rows(self, rows: list[_Request]) -> None:
        self.stats.steps += 1
        self.stats.rows += sum(len(r.ids) for r in rows)
        if len(rows) == 1:
            return self._decode_alone(rows[0])
        wanted = [r.wanted_rows() for r in rows]
        try:
            self.ctx.decode_sequences(np.concatenate([r.ids for r in rows]),
                                      np.concatenate([np.full(len(r.ids), r.seq, np.int32) for r in rows]),
                                      logits=np.concatenate(wanted))
        except Exception:  # noqa: BLE001 - one bad request must not fail the others: each on its own
            for r in rows:
                self._decode_alone(r)
            return
        logits = self.ctx.logits
        at = 0
        for r, want in zip(rows, wanted):
            n = int(want.sum())
            r.logits = logits[at:at + n]
            at += n

    def _decode_alone(self, r: _Request) -> None:
        try:
            self.ctx.sequence(r.seq).decode(r.ids, r.all_logits, r.logits_from, r.single_steps)
            r.logits = self.ctx.logits
        except Exception as exc:  # noqa: BLE001 - raised in the caller's thread
            r.error = exc

    def _decode_prompt_chunk(self, r: _Request) -> None:
        self.stats.prompt_chunks += 1
        if not r.chunked:
            self._decode_alone(r)
            r.finished = True
            return
        start = r.decoded
        end = min(len(r.ids), start + self.ctx.n_batch)
        last = end == len(r.ids)
        try:
            # Rows before the last are not computed past the last layer's K/V, as in one call.
            self.ctx.sequence(r.seq).decode(r.ids[start:end], logits_from=None if last else end - start)
            r.decoded = end
            if last:
                r.logits = self.ctx.logits
                r.finished = True
        except Exception as exc:  # noqa: BLE001 - raised in the caller's thread
            r.error = exc
            r.finished = True


class BatchedSequence:
    """Sequence `seq` of the batcher's context with the single-sequence API of _core.Context
    (what edgeinfer.prompt_cache.PromptCache works on); its decodes go through the batcher."""

    def __init__(self, batcher: StepBatcher, seq: int):
        self.batcher = batcher
        self.seq = seq
        self._core = batcher.ctx.sequence(seq)
        self._logits: np.ndarray | None = None

    @contextmanager
    def engaged(self) -> Iterator[None]:
        """While inside, steps wait for this sequence's next decode (a generation in progress)."""
        self.batcher.engage(self.seq)
        try:
            yield
        finally:
            self.batcher.release(self.seq)

    def decode(self, ids: Sequence[int] | np.ndarray, all_logits: bool = False, logits_from: int | None = None,
               as_single_steps: bool = False) -> None:
        ids = np.asarray(ids, dtype=np.int32)
        if ids.ndim != 1:
            raise _core.EdgeInferError("tokens must be a 1-D sequence of ids")
        if len(ids) == 0:
            raise _core.EdgeInferError("decode needs at least one token")
        if all_logits and logits_from is not None:
            raise _core.EdgeInferError("give all_logits or logits_from, not both")
        self._logits = self.batcher.decode(_Request(self.seq, ids, all_logits, logits_from, as_single_steps))

    @property
    def logits(self) -> np.ndarray:
        """The rows of this sequence's last decode (a read-only view)."""
        return self._core.logits[:0] if self._logits is None else self._logits

    # Its own count is read without the core lock: a step writes only the counts of the
    # sequences in it, and this one is not in a step while its owner reads.
    n_past = property(lambda self: self._core.n_past)
    n_ctx = property(lambda self: self._core.n_ctx)
    n_batch = property(lambda self: self._core.n_batch)
    recurrent = property(lambda self: self._core.recurrent)

    def kv_bytes_for(self, n: int) -> int:
        return self._core.kv_bytes_for(n)

    def truncate(self, n: int) -> None:
        with self.batcher.core_lock:
            self._core.truncate(n)

    def shift(self, n_keep: int, n_discard: int) -> None:
        with self.batcher.core_lock:
            self._core.shift(n_keep, n_discard)

    def kv_snapshot(self, n: int) -> np.ndarray:
        with self.batcher.core_lock:
            return self._core.kv_snapshot(n)

    def kv_restore(self, blob: np.ndarray, n_stored: int, n_use: int) -> None:
        with self.batcher.core_lock:
            self._core.kv_restore(blob, n_stored, n_use)

    def save_state(self, path: str, tokens: np.ndarray) -> None:
        with self.batcher.core_lock:
            self._core.save_state(path, tokens)

    def load_state(self, path: str) -> list[int]:
        with self.batcher.core_lock:
            return self._core.load_state(path)
