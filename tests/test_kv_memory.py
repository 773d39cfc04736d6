"""The KV cache is sized for the whole context but costs resident memory only for the positions
written (kv/kv_cache.h over common/zero_pages.h): a long context that is not used yet must not
show in the process's RSS (issue 23: peak RSS no worse than llama.cpp's)."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from edgeinfer import _core

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")


def rss_mib() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_long_context_costs_memory_only_as_it_fills(smollm2_path):
    model = _core.Model(str(smollm2_path))
    n_ctx = 32768   # SmolLM2's F16 cache: 30 layers x 2 x 192 x 2 bytes = 23 KiB a position, 720 MiB in all
    before = rss_mib()
    ctx = _core.Context(model, n_ctx=n_ctx, n_threads=1)
    created = rss_mib()
    assert created - before < 64, (before, created)
    prompt = np.arange(100, 100 + 1024, dtype=np.int32)   # 1,024 positions: ~23 MiB of cache
    ctx.decode(prompt)
    filled = rss_mib()
    assert filled - before < 160, (before, filled)
    # What was stored reads back: the next token's logits are those of a context of the prompt's size.
    ctx.decode(np.array([5], np.int32))
    small = _core.Context(model, n_ctx=1100, n_threads=1)
    small.decode(prompt)
    small.decode(np.array([5], np.int32))
    assert np.array_equal(ctx.logits, small.logits)
