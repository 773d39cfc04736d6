"""``--prompt-cache-dir``: KV states of prompt prefixes, kept across restarts.

Within one run the prompt cache (edgeinfer.prompt_cache) already reuses prefixes; what a restart
loses is their prefill. This store keeps, on disk:

- **the system prefix of a chat request** (the tokens its leading system / developer messages
  render to, with the template's turn header), saved right after the first request that has it;
- **a prefix two requests share** when the second diverges from what the cache held (a system
  prompt sent with another template, a shared document, a few-shot preamble);
- **the last conversation**, saved when the server shuts down cleanly, so that a client that
  re-sends it (with a new message) after a restart reuses all of it.

Prefixes shorter than `min_tokens` are not saved. Files live in a subfolder per model
fingerprint and KV types, named by their token count and a hash of their tokens; their total
size stays within `max_bytes`, the least recently used removed first. At start-up every saved
state that fits the context is loaded as a snapshot of the prompt cache. A file that fails its
checks (corrupt, truncated) is moved aside as ``NAME.corrupt`` with a warning, so its prefix is
saved afresh the next time it is used. The state file itself (format version, model
fingerprint, checksum, atomic write) is the core's.
"""
from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from edgeinfer.errors import EdgeInferError, StateFileError
from edgeinfer.model import Model
from edgeinfer.prompt_cache import PromptCache

log = logging.getLogger("edgeinfer.server")

SUFFIX = ".eistate"
CORRUPT_SUFFIX = ".corrupt"


def state_name(tokens: Sequence[int]) -> str:
    """The file name of the state holding exactly `tokens`."""
    digest = hashlib.sha256(np.asarray(tokens, dtype=np.int32).tobytes()).hexdigest()
    return f"{len(tokens)}-{digest[:24]}{SUFFIX}"


def tokens_in_name(path: Path) -> int | None:
    """The token count a state file's name states (None for a name `state_name` did not make)."""
    head = path.name.split("-", 1)[0]
    return int(head) if head.isdigit() else None


def _touch(path: Path) -> None:
    """Marks `path` most recently used. The clock is read here because file systems stamp
    writes with a coarse clock, which would tie files saved within a few milliseconds."""
    now = time.time_ns()
    os.utime(path, ns=(now, now))


class PromptStateStore:
    def __init__(self, model: Model, root: Path, min_tokens: int, max_bytes: int):
        self.model = model
        self.folder = Path(root) / f"{model.fingerprint:016x}-{model.cache_type_k}-{model.cache_type_v}"
        self.min_tokens = max(1, min_tokens)
        self.max_bytes = max_bytes
        self.folder.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()   # the server's slots save from their own threads

    def files(self) -> list[Path]:
        """Saved states, least recently used first."""
        return sorted(self.folder.glob(f"*{SUFFIX}"), key=lambda p: p.stat().st_mtime_ns)

    def load_all(self) -> int:
        """Loads every saved state that fits the context into the prompt cache's snapshots;
        returns how many loaded. One too long for this context is left for a larger one; one that
        fails its checks is moved aside (see the module doc)."""
        loaded = 0
        for path in self.files():
            n = tokens_in_name(path)
            if n is not None and n >= self.model.n_ctx:
                log.info("prompt cache: %s holds %d tokens, more than this context's %d; not loaded",
                         path.name, n, self.model.n_ctx)
                continue
            try:
                n = self.model.load_state(path)
            except StateFileError as exc:
                self._move_aside(path, exc)
                continue
            self.model.prompt_cache.snapshot()
            loaded += 1
            log.info("prompt cache: loaded %d tokens from %s", n, path.name)
        return loaded

    def _move_aside(self, path: Path, why: Exception) -> None:
        aside = path.with_name(path.name + CORRUPT_SUFFIX)
        try:
            os.replace(path, aside)
        except OSError as exc:
            log.warning("prompt cache: %s failed its checks (%s) and cannot be moved aside: %s", path, why, exc)
            return
        log.warning("prompt cache: %s failed its checks (%s); moved it to %s, and its prefix will be saved "
                    "again when next used", path, why, aside.name)

    # --- the slots' hooks (each on the prompt cache of the slot that serves the request) ----------
    def before_generate(self, cache: PromptCache, prompt: Sequence[int]) -> Path | None:
        """Prepares the cache for `prompt`; when the prompt shares a long prefix with what was
        cached and then diverges, saves that prefix (returns its file)."""
        held = cache.reusable_tokens
        shared = cache.prepare(prompt)   # the cache now holds exactly prompt[:shared]
        prefix = tuple(prompt[:shared])
        # Diverged: the prefix came from a longer cached sequence that goes on differently.
        diverged = shared < held or (cache.restored_from_snapshot and prefix not in cache.snapshots)
        if not diverged:
            return None
        return self._save(cache, prefix)

    def after_generate(self, cache: PromptCache, prompt: Sequence[int], keep: int) -> Path | None:
        """Saves the first `keep` tokens of the prompt just served (its system prefix) unless
        already saved. The cache still holds them: generation only appended."""
        if keep <= 0 or cache.tokens[:keep] != list(prompt[:keep]):
            return None
        return self._save(cache, tuple(prompt[:keep]))

    def save_live(self, cache: PromptCache) -> Path | None:
        """Saves what a slot's context holds (its last conversation); called at a clean shutdown."""
        return self._save(cache, tuple(cache.tokens[:cache.reusable_tokens]))

    def _save(self, cache: PromptCache, tokens: tuple[int, ...]) -> Path | None:
        """Writes the cached KV rows of `tokens` (a prefix of what the cache holds), unless too
        short or already on disk; then trims the folder to its byte budget."""
        if len(tokens) < self.min_tokens:
            return None
        if cache.recurrent and len(tokens) != len(cache.tokens):
            return None   # a recurrent state (LFM2) holds the cached sequence's end only
        with self._lock:
            return self._write(cache, tokens)

    def _write(self, cache: PromptCache, tokens: tuple[int, ...]) -> Path | None:
        path = self.folder / state_name(tokens)
        if path.exists():
            _touch(path)   # most recently used
            return path
        try:
            cache.save(path, len(tokens))
        except (OSError, EdgeInferError) as exc:   # a full disk must not fail the request
            log.warning("prompt cache: could not save %s: %s", path, exc)
            return None
        _touch(path)
        log.info("prompt cache: saved a prefix of %d tokens to %s", len(tokens), path.name)
        self._trim(keep=path)
        return path

    def _trim(self, keep: Path) -> None:
        files = self.files()
        total = sum(p.stat().st_size for p in files)
        for old in files:
            if total <= self.max_bytes:
                break
            if old != keep:
                total -= old.stat().st_size
                old.unlink(missing_ok=True)
