"""The tiled prompt attention (kernels.h AttnF16Tile; used by attention_f16 for batches of 64+
tokens on tables that have it) against a float64 oracle and against the one-row kernel that
shorter batches keep: causal rows, grouped-query heads, a sliding window, a cache that already
holds earlier positions, head sizes of SmolLM2 (64) and Gemma 3 (256), 1 and 2 threads."""
from __future__ import annotations

import numpy as np
import pytest

from edgeinfer import _testing
from support.isas import avx512_against_avx2, isas_under_test
from support.numpy_reference import causal_attention

TILED_ISAS = isas_under_test(("avx2", "avx512"))
pytestmark = pytest.mark.skipif(not TILED_ISAS, reason="no table with the tiled prompt attention here")

# (n queries, n_kv positions, n_head, n_head_kv, head_dim, window)
CASES = [(64, 64, 9, 3, 64, 0), (100, 130, 9, 3, 64, 0), (70, 70, 4, 1, 256, 0), (80, 200, 4, 1, 256, 48),
         (65, 65, 2, 2, 72, 0)]


def make(case, seed):
    n, n_kv, n_head, n_head_kv, d, window = case
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal((n, n_head, d)) * 2).astype(np.float32)
    k = (rng.standard_normal((n_kv, n_head_kv, d))).astype(np.float16)
    v = (rng.standard_normal((n_kv, n_head_kv, d))).astype(np.float16)
    return q, k, v, window


@pytest.mark.parametrize("isa", TILED_ISAS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("n_threads", [1, 2])
def test_tiled_attention_matches_the_oracle_and_the_one_row_kernel(isa, case, n_threads):
    q, k, v, window = make(case, list(case))
    want = causal_attention(q, k, v, len(k) - len(q), window)   # the last n positions, K/V as stored
    kb, vb = k.view(np.uint16), v.view(np.uint16)
    tiled = _testing.attention_f16(q, kb, vb, window, True, n_threads, isa)
    rows = _testing.attention_f16(q, kb, vb, window, False, n_threads, isa)
    # F32 throughout: a few ulps of the values' scale (|v| <= ~5).
    assert np.abs(tiled - want).max() < 2e-5, np.abs(tiled - want).max()
    # The one-row kernel rounds Q and its accumulator to F16 (ggml): within F16 precision.
    assert np.abs(rows - want).max() < 2e-2
    assert np.abs(tiled - rows).max() < 2e-2
    assert not np.array_equal(tiled, rows)  # the tiled kernel did run


@pytest.mark.parametrize("isa", TILED_ISAS)
def test_short_batches_keep_the_one_row_kernel(isa):
    """Below 64 tokens the tiled kernel is not used: the result is bit-identical to tiled=False
    (the fixture prompts stay on llama.cpp's exact path)."""
    q, k, v, window = make((63, 80, 9, 3, 64, 0), 7)
    kb, vb = k.view(np.uint16), v.view(np.uint16)
    a = _testing.attention_f16(q, kb, vb, window, True, 1, isa)
    b = _testing.attention_f16(q, kb, vb, window, False, 1, isa)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))


# Decode steps and batches in the fast float order (n queries, n_kv, n_head, n_head_kv, head_dim,
# window): one span, several (the last partial), a window cutting through spans, Gemma 3's heads.
FAST_CASES = [(1, 40, 9, 3, 64, 0), (1, 200, 9, 3, 64, 0), (9, 300, 9, 3, 64, 0), (4, 700, 4, 1, 256, 512),
              (8, 130, 4, 1, 256, 48), (2, 64, 2, 2, 72, 0)]


@pytest.mark.parametrize("isa", TILED_ISAS)
@pytest.mark.parametrize("case", FAST_CASES, ids=lambda c: "x".join(map(str, c)))
def test_the_fast_orders_decode_attention_is_f32_and_each_rows_own(isa, case):
    """Fixed 64-position spans merged in order: within F32 rounding of the oracle, the same bits
    with 1 or 2 threads, and each row's bits whatever rows share its batch."""
    q, k, v, window = make(case, list(case))
    kb, vb = k.view(np.uint16), v.view(np.uint16)
    want = causal_attention(q, k, v, len(k) - len(q), window)
    got = _testing.attention_f16(q, kb, vb, window, True, 1, isa, fast=True)
    assert np.abs(got - want).max() < 2e-5, np.abs(got - want).max()
    assert np.array_equal(_testing.attention_f16(q, kb, vb, window, True, 2, isa, fast=True).view(np.uint32),
                          got.view(np.uint32))
    n = len(q)
    for t in range(n):   # row t alone: the cache up to its own position
        end = len(k) - n + t + 1
        alone = _testing.attention_f16(q[t:t + 1], kb[:end], vb[:end], window, True, 1, isa, fast=True)
        assert np.array_equal(alone[0].view(np.uint32), got[t].view(np.uint32)), t


@pytest.mark.skipif(not avx512_against_avx2(), reason="needs the AVX2 and AVX-512 tables")
@pytest.mark.parametrize("case", CASES + FAST_CASES + [(16, 16, 8, 8, 64, 0), (5, 70, 1, 1, 8, 3)],
                         ids=lambda c: "x".join(map(str, c)))
def test_the_avx512_tile_gives_the_avx2_tiles_bits(case):
    """The AVX-512 kernel runs rows of the same key range through a block together and skips the
    scores past a row's last key; neither may change a bit of the AVX2 kernel's results on prompt
    chunks of 64+ tokens (either order takes the tiles). Decode steps and batches (the fast
    order's spans; llama.cpp's order keeps the one-row kernel there) take one span kernel in both
    tables: the AVX-512 table must not lose it."""
    q, k, v, window = make(case, [*case, 1])
    kb, vb = k.view(np.uint16), v.view(np.uint16)
    fast = len(q) < 64
    wide = _testing.attention_f16(q, kb, vb, window, True, 2, "avx512", fast=fast)
    narrow = _testing.attention_f16(q, kb, vb, window, True, 2, "avx2", fast=fast)
    assert np.array_equal(wide.view(np.uint32), narrow.view(np.uint32))


def test_bad_shapes_are_refused():
    q = np.zeros((4, 2, 8), np.float32)
    k = np.zeros((3, 1, 8), np.uint16)
    with pytest.raises(Exception, match="inconsistent shapes"):
        _testing.attention_f16(q, k, k, 0, True, 1)
