"""Prompt caching: which tokens' K/V the context holds, and snapshots of other prefixes.

A chat re-sends the whole conversation every turn, so a new prompt usually starts with tokens
whose K/V are already cached. `PromptCache.prepare` finds the longest common prefix between the
prompt and what is cached, truncates the cache to it and leaves only the rest to decode.

Besides the live context, the cache keeps snapshots of the KV rows of other prefixes (copies
made by the core, LRU, bounded by a byte budget), so alternating conversations or system prompts
stay warm: when a prompt shares more with a snapshot than with the live context, the snapshot's
rows are copied back in (a memcpy, far cheaper than recomputing them). The live context is
snapshotted when a prompt is about to throw away a sizeable part of it.

After a context shift the cached K/V no longer equal what a fresh decode of the remaining tokens
would give (they saw the dropped tokens), so only the kept head (`n_keep`) stays reusable.

A model with a recurrent state (LFM2's convolutions: `ctx.recurrent`) can only continue a cached
sequence from its end: its state cannot be cut back to a shorter prefix. A prompt that does not
extend the cached tokens is then decoded again from the start (as llama.cpp's server re-processes
the prompt of a recurrent model), taking back tokens re-decodes the ones kept, and only whole
snapshots are restored.

The snapshots live in a `SnapshotStore`, which several caches may share: the server's slots
(edgeinfer.parallel) each have a cache over their own sequence of one context, and a snapshot
made by one restores into any other (every sequence's cache has the same format).
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from edgeinfer import _core

DEFAULT_SNAPSHOT_BUDGET = 256 * 1024 * 1024   # bytes of KV snapshots kept in memory
DEFAULT_MIN_SNAPSHOT_TOKENS = 32              # smaller prefixes are cheap to recompute


def common_prefix(a: Sequence[int], b: Sequence[int], limit: int | None = None) -> int:
    """Length of the longest common prefix of a and b (at most `limit`)."""
    n = min(len(a), len(b)) if limit is None else min(len(a), len(b), limit)
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass
class Snapshot:
    tokens: tuple[int, ...]
    kv: np.ndarray            # the core's blob of KV rows for positions [0, len(tokens))

    @property
    def nbytes(self) -> int:
        return int(self.kv.nbytes)


class SnapshotStore:
    """KV snapshots of token prefixes, least recently used first, within `budget` bytes (0 = none).
    Safe to share between threads: the server's slots look up and add from their own threads."""

    def __init__(self, budget: int = DEFAULT_SNAPSHOT_BUDGET):
        self.budget = budget
        self._items: OrderedDict[tuple[int, ...], Snapshot] = OrderedDict()
        self._lock = threading.RLock()

    def best_match(self, prompt: Sequence[int], limit: int, better_than: int,
                   whole: bool = False) -> tuple[Snapshot | None, int]:
        """The snapshot sharing the longest prefix (more than `better_than` tokens, at most `limit`)
        with `prompt`, marked most recently used, and that length; (None, better_than) if none.
        whole: only a snapshot the prompt extends entirely (a recurrent model's)."""
        with self._lock:
            best, best_len = None, better_than
            for snap in self._items.values():
                n = common_prefix(snap.tokens, prompt, limit)
                if whole and n != len(snap.tokens):
                    continue
                if n > best_len:
                    best, best_len = snap, n
            if best is not None:
                self._items.move_to_end(best.tokens)   # most recently used (evicted last)
            return best, best_len

    def covers(self, key: tuple[int, ...]) -> bool:
        """Whether a snapshot holds `key` or a longer prefix starting with it (marked used)."""
        n = len(key)
        with self._lock:
            for other in self._items:
                if len(other) >= n and other[:n] == key:
                    self._items.move_to_end(other)
                    return True
            return False

    def add(self, key: tuple[int, ...], kv: np.ndarray) -> None:
        with self._lock:
            # Snapshots that are prefixes of this one serve no prompt better: drop them.
            for other in [t for t in self._items if len(t) < len(key) and key[:len(t)] == t]:
                del self._items[other]
            self._items[key] = Snapshot(key, kv)
            while self._items and self.nbytes > self.budget:
                self._items.popitem(last=False)

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(s.nbytes for s in self._items.values())

    @property
    def keys(self) -> list[tuple[int, ...]]:
        with self._lock:
            return list(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


class PromptCache:
    """What a context's KV cache holds (`tokens`: ids at positions 0..n_past-1), plus snapshots of
    other prefixes: a store of its own within `snapshot_budget` bytes (0 = no snapshots), or
    `snapshots`, a store shared with other caches over the same context's sequences.
    `ctx` is a _core.Context (its sequence 0), a _core.Sequence, or anything with their
    single-sequence API (edgeinfer.parallel.BatchedSequence)."""

    def __init__(self, ctx: _core.Context, snapshot_budget: int = DEFAULT_SNAPSHOT_BUDGET,
                 min_snapshot_tokens: int = DEFAULT_MIN_SNAPSHOT_TOKENS, snapshots: SnapshotStore | None = None):
        self.ctx = ctx
        self.tokens: list[int] = []
        self.store = snapshots if snapshots is not None else SnapshotStore(snapshot_budget)
        self.min_snapshot_tokens = min_snapshot_tokens
        self._exact = 0       # tokens[:_exact] hold the K/V a fresh decode would give
        self.restored_from_snapshot = False  # whether the last prepare() restored a snapshot
        # Seconds of a decode call by its rows, as the drafters of this context's generations
        # measured them (edgeinfer.speculative.Drafter.costs), kept from one generation to the next.
        self.call_costs: dict[int, float] = {}

    # --- the live context ------------------------------------------------------------------------
    def prepare(self, prompt: Sequence[int]) -> int:
        """Makes the cache hold the longest available prefix of `prompt` (from the live context or
        a snapshot) and returns its length. At least one prompt token is left to decode, so that
        there are logits to sample from."""
        limit = len(prompt) - 1
        live = common_prefix(self.tokens[:self._exact], prompt, limit)
        if self.recurrent and live < len(self.tokens):
            live = 0   # the state cannot go back to the common prefix: start afresh
        best, best_len = self.store.best_match(prompt, limit, live, whole=self.recurrent)
        self.restored_from_snapshot = False
        if self._exact - live >= self.min_snapshot_tokens:
            self.snapshot()   # the prompt would throw away a sizeable part of the live context
        if best is not None:
            self.ctx.kv_restore(best.kv, len(best.tokens), best_len)
            self.tokens = list(best.tokens[:best_len])
            self.restored_from_snapshot = True
        else:
            self.ctx.truncate(best_len)
            del self.tokens[best_len:]
        self._exact = best_len
        return best_len

    def decode(self, ids: Sequence[int], all_logits: bool = False, logits_from: int | None = None,
               as_single_steps: bool = False) -> None:
        """Decodes ids after the cached tokens; logits for the last id, every id (all_logits) or
        ids[logits_from:]; as_single_steps: each id as decoding it alone would give it (see
        _core.Context.decode)."""
        self.ctx.decode(np.asarray(ids, dtype=np.int32), all_logits, logits_from, as_single_steps)
        exact = self._exact == len(self.tokens)
        self.tokens.extend(int(i) for i in ids)
        if exact:
            self._exact = len(self.tokens)

    @property
    def recurrent(self) -> bool:
        """Whether the model keeps a recurrent state (only the cached sequence's end is reusable)."""
        return bool(getattr(self.ctx, "recurrent", False))

    def _decode_again(self, keep: int) -> None:
        """A recurrent model's way back to tokens[:keep]: decoded again from the start."""
        ids = self.tokens[:keep]
        self.reset()
        if ids:
            self.decode(ids)

    def generating(self) -> AbstractContextManager:
        """Entered around a generation's decoding. Over a BatchedSequence (parallel generations,
        edgeinfer.parallel) the other sequences' steps wait for this one's decodes inside it;
        over a plain context it does nothing."""
        engaged = getattr(self.ctx, "engaged", None)
        return engaged() if engaged is not None else nullcontext()

    def take_back(self, n: int) -> None:
        """Forgets the last n cached tokens; the logits become those after the token before them
        (decoded again, since the context keeps only the last position's)."""
        keep = len(self.tokens) - n
        if n < 1 or keep < 1:
            raise ValueError(f"cannot take back {n} of {len(self.tokens)} cached tokens")
        if self.recurrent:
            return self._decode_again(keep)
        last = self.tokens[keep - 1]
        self.ctx.truncate(keep - 1)
        del self.tokens[keep - 1:]
        self._exact = min(self._exact, keep - 1)
        self.decode([last])

    def drop(self, n: int) -> None:
        """Forgets the last n cached tokens (guesses that were wrong); unlike take_back, the logits
        are left as they are: the caller has the rows it needs."""
        if n < 0 or n > len(self.tokens):
            raise ValueError(f"cannot drop {n} of {len(self.tokens)} cached tokens")
        if n == 0:
            return
        keep = len(self.tokens) - n
        if self.recurrent:   # a view of the old logits stays valid (the core writes a new buffer)
            return self._decode_again(keep)
        self.ctx.truncate(keep)
        del self.tokens[keep:]
        self._exact = min(self._exact, keep)

    def shift(self, n_keep: int, n_discard: int) -> None:
        """Context shift: drops cached positions [n_keep, n_keep + n_discard) (see Context.shift)."""
        self.ctx.shift(n_keep, n_discard)
        del self.tokens[n_keep:n_keep + n_discard]
        self._exact = min(self._exact, n_keep)

    def reset(self) -> None:
        self.ctx.truncate(0)
        self.tokens.clear()
        self._exact = 0

    @property
    def reusable_tokens(self) -> int:
        """How many leading cached tokens a later prompt can reuse."""
        return self._exact

    # --- snapshots -------------------------------------------------------------------------------
    def snapshot(self) -> bool:
        """Keeps a copy of the live context's reusable prefix; False if it is too small, too big
        for the budget, or already covered by a snapshot."""
        n = self._exact
        if n < self.min_snapshot_tokens or self.ctx.kv_bytes_for(n) > self.store.budget:
            return False
        if self.recurrent and n != len(self.tokens):
            return False   # a recurrent state is the sequence end's only
        key = tuple(self.tokens[:n])
        # A longer snapshot covers this prefix, except for a recurrent model, which restores whole ones only.
        if key in self.store.keys if self.recurrent else self.store.covers(key):
            return False
        self.store.add(key, self.ctx.kv_snapshot(n))
        return True

    @property
    def snapshot_budget(self) -> int:
        return self.store.budget

    @snapshot_budget.setter
    def snapshot_budget(self, budget: int) -> None:
        self.store.budget = budget

    @property
    def snapshot_bytes(self) -> int:
        return self.store.nbytes

    @property
    def snapshots(self) -> list[tuple[int, ...]]:
        """Token prefixes held as snapshots, least recently used first."""
        return self.store.keys

    def clear_snapshots(self) -> None:
        self.store.clear()

    # --- saved states on disk --------------------------------------------------------------------
    def save(self, path: str | os.PathLike, n: int | None = None) -> int:
        """Writes the reusable prefix, or its first `n` tokens, (tokens + KV rows) to `path`
        atomically; returns how many tokens were written."""
        n = self._exact if n is None else min(n, self._exact)
        self.ctx.save_state(os.fspath(path), np.asarray(self.tokens[:n], dtype=np.int32))
        return n

    def load(self, path: str | os.PathLike) -> int:
        """Restores a state saved by `save` (StateFileError, nothing changed, if it does not fit
        this model and context); returns its token count."""
        tokens = self.ctx.load_state(os.fspath(path))
        self.tokens = [int(t) for t in tokens]
        self._exact = len(self.tokens)
        return self._exact
