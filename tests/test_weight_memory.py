"""Repacked weights live in chunks advised for transparent huge pages (native/src/common/
weight_arena.h): a model's packed tensors end up in huge pages where the OS offers them, and a
chunk is unmapped with the last model that holds it, so loading and dropping models does not pile
up memory."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from support.cli import child_env

_THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")

# Prints, per line: anonymous resident bytes with no model, then with the model loaded (and its
# anonymous huge-page bytes), then after five loads and drops.
_LOAD_AND_DROP = """
import gc, sys
from edgeinfer import Model

def mem():
    fields = {}
    for line in open("/proc/self/smaps_rollup"):
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "kB":
            fields[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return fields["Anonymous"], fields.get("AnonHugePages", 0)

base = mem()[0]
m = Model.load(sys.argv[1], n_ctx=64, n_threads=1)
loaded, huge = mem()
del m
gc.collect()
for _ in range(5):
    m = Model.load(sys.argv[1], n_ctx=64, n_threads=1)
    del m
    gc.collect()
print(base, loaded, huge, mem()[0])
"""


def test_packed_weights_are_in_huge_pages_and_released_with_the_model(smollm2_path):
    out = subprocess.run([sys.executable, "-c", _LOAD_AND_DROP, str(smollm2_path)], check=True,
                         capture_output=True, text=True, env=child_env()).stdout
    base, loaded, huge, after = (int(v) for v in out.split())
    # SmolLM2 Q4_1: 66 MB of Q4_1 matrices repacked (and on AVX-512 the 30 MB Q8_0 output).
    assert loaded - base > 50e6
    # Five more loads and drops leave no chunk behind (each would be tens of MB).
    assert after - base < 20e6, (base, loaded, after)
    mode = _THP.read_text() if _THP.exists() else "[never]"
    if "[never]" in mode:
        pytest.skip(f"transparent huge pages are off here ({mode.strip()})")
    # Most of the repacked bytes in 2 MiB pages: every full 2 MiB of the chunks can be one.
    assert huge > 40e6, (huge, mode)


# Prints the resident bytes of the model file's mapping after loading, then after a prompt and a
# few decode steps.
_MAPPING_AFTER_DECODE = """
import sys
import numpy as np
from edgeinfer import _core

def mapping_rss():
    in_file = False
    for line in open("/proc/self/smaps"):
        if line[:1] in "0123456789abcdef" and "-" in line.split()[0]:
            in_file = line.rstrip().endswith(sys.argv[1].rsplit("/", 1)[-1])
        elif in_file and line.startswith("Rss:"):
            return int(line.split()[1]) * 1024
    return 0

ctx = _core.Context(_core.Model(sys.argv[1]), n_ctx=256, n_threads=2)
loaded = mapping_rss()
ctx.decode(np.arange(100, 164, dtype=np.int32))
for t in range(5):
    ctx.decode(np.array([200 + 37 * t], dtype=np.int32))
print(loaded, mapping_rss())
"""


def test_decoding_brings_no_released_weight_pages_back(smollm2_path):
    # SmolLM2's matrices are repacked and their mapped pages released at load; its output is the
    # tied token_embd. A page fault in the mapping maps a whole large folio of the page cache, so
    # reading a norm vector or an embedding row there used to bring back tens of MB of released
    # weights (the norms are copied at load now; a lookup releases what it read). In the fast
    # order (the default), where every table repacks the Q8_0 output too; llama.cpp's order on
    # AVX2 multiplies it from the mapping, which then rightly stays resident.
    out = subprocess.run([sys.executable, "-c", _MAPPING_AFTER_DECODE, str(smollm2_path)], check=True,
                         capture_output=True, text=True, env=child_env(EDGEINFER_EXACT="0")).stdout
    loaded, decoded = (int(v) for v in out.split())
    assert loaded < 8e6 and decoded < 8e6, (loaded, decoded)
