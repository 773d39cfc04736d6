"""``--prompt-cache-dir``: the KV states of long shared prompt prefixes, kept across restarts.

Within one run the prompt cache (edgeinfer.prompt_cache) already reuses prefixes. What a restart
loses is the prefill of the prefixes many requests share: a long system prompt, a tool preamble.
This store saves such a prefix when it sees one, i.e. when a request shares at least
`min_tokens` leading tokens with what the cache held but goes on differently (a continuing
conversation, which shares everything, is not saved every turn). At start-up every saved state
that fits the model is loaded and kept as a snapshot of the prompt cache.

Files live in a subfolder per model fingerprint and KV types, named by a hash of their tokens;
at most `max_files` are kept, the least recently used removed first. The state file itself
(format version, model fingerprint, checksum, atomic write) is the core's.
"""
from __future__ import annotations

import hashlib
import logging
import os
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from edgeinfer.errors import EdgeInferError, StateFileError
from edgeinfer.model import Model

log = logging.getLogger("edgeinfer.server")

SUFFIX = ".eistate"
DEFAULT_MAX_FILES = 8


def state_name(tokens: Sequence[int]) -> str:
    """The file name of the state holding exactly `tokens`."""
    digest = hashlib.sha256(np.asarray(tokens, dtype=np.int32).tobytes()).hexdigest()
    return f"{len(tokens)}-{digest[:24]}{SUFFIX}"


def _touch(path: Path) -> None:
    """Marks `path` most recently used. The clock is read here because file systems stamp
    writes with a coarse clock, which would tie files saved within a few milliseconds."""
    now = time.time_ns()
    os.utime(path, ns=(now, now))


class PromptStateStore:
    def __init__(self, model: Model, root: Path, min_tokens: int, max_files: int = DEFAULT_MAX_FILES):
        self.model = model
        self.folder = Path(root) / f"{model.fingerprint:016x}-{model.cache_type_k}-{model.cache_type_v}"
        self.min_tokens = max(1, min_tokens)
        self.max_files = max_files
        self.folder.mkdir(parents=True, exist_ok=True)

    def files(self) -> list[Path]:
        """Saved states, least recently used first."""
        return sorted(self.folder.glob(f"*{SUFFIX}"), key=lambda p: p.stat().st_mtime_ns)

    def load_all(self) -> int:
        """Loads every saved state into the prompt cache's snapshots; returns how many loaded.
        A file that does not fit (corrupt, another context size...) is skipped with a warning."""
        loaded = 0
        for path in self.files():
            try:
                n = self.model.load_state(path)
            except StateFileError as exc:
                log.warning("prompt cache: skipping %s: %s", path, exc)
                continue
            self.model.prompt_cache.snapshot()
            loaded += 1
            log.info("prompt cache: loaded %d tokens from %s", n, path.name)
        return loaded

    def before_generate(self, prompt: Sequence[int]) -> Path | None:
        """Prepares the cache for `prompt`; when the prompt shares a long prefix with what was
        cached and then diverges, saves that prefix (returns its file)."""
        cache = self.model.prompt_cache
        held = cache.reusable_tokens
        shared = cache.prepare(prompt)   # the cache now holds exactly prompt[:shared]
        prefix = tuple(prompt[:shared])
        # Diverged: the prefix came from a longer cached sequence that goes on differently.
        diverged = shared < held or (cache.restored_from_snapshot and prefix not in cache.snapshots)
        if shared < self.min_tokens or not diverged:
            return None
        path = self.folder / state_name(prefix)
        if path.exists():
            _touch(path)   # most recently used
            return path
        try:
            self.model.save_state(path)
        except (OSError, EdgeInferError) as exc:   # a full disk must not fail the request
            log.warning("prompt cache: could not save %s: %s", path, exc)
            return None
        _touch(path)
        log.info("prompt cache: saved a shared prefix of %d tokens to %s", shared, path.name)
        for old in self.files()[:-self.max_files]:
            old.unlink(missing_ok=True)
        return path
