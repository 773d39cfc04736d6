"""Centered K (native/src/kv/centered_k.h): the first positions kept in F16 as sink rows, later keys
stored as R((k - mu) / s) and values as v - nu, with mu, s and nu from the sink rows; q . mu and
l * nu added back to the kernels' partial results.

Attention over such a cache must equal softmax attention over the keys as stored (on every ISA,
with the AVX-512 span kernel bit for bit the scalar one), and because mu and s come from the
first positions only, a prompt decoded in chunks, or after a reused prefix, must see the same
cache as one decoded in one batch."""
from __future__ import annotations

import numpy as np
import pytest

from edgeinfer import _testing
from edgeinfer.model import Model
from support.isas import isas_under_test
from support.numpy_reference import LlamaReference, last_position_attention
from support.tiny_llama import HD32

ISAS = isas_under_test()
N_SINK = 64   # kv/centered_k.h, kSinkRows


def offset_keys(rng, n, n_head_kv, d):
    """Keys like a real model's: a large direction common to every position, a few outlier channels."""
    k = rng.standard_normal((n, n_head_kv, d)).astype(np.float32)
    k += 6.0 * rng.standard_normal((1, n_head_kv, d)).astype(np.float32)
    k[..., [3, 17]] *= 8.0
    return k


@pytest.mark.parametrize("type_k", ["q8_0", "q4_0"])
@pytest.mark.parametrize("type_v", ["f16", "q8_0", "q4_0"])
@pytest.mark.parametrize("n_kv,window", [(40, 0), (70, 0), (70, 9), (600, 0), (600, 300)])
def test_centered_attention_matches_the_oracle_on_every_isa(type_k, type_v, n_kv, window):
    """Queries over sink rows only (n_kv 40), over both (70: window 9 straddles position 64),
    and over split spans (600) whose partial results are merged with the sink rows'."""
    rng = np.random.default_rng(7)
    q = rng.standard_normal((6, 64)).astype(np.float32)
    k = offset_keys(rng, n_kv, 2, 64)
    v = rng.standard_normal((n_kv, 2, 64)).astype(np.float32)
    for isa in ISAS:
        out, k_deq, v_deq = _testing.attention_kv(q, k, v, type_k, type_v, window, rotate_k=True, center_k=True, isa=isa)
        want = last_position_attention(q, k_deq, v_deq, window)
        assert np.max(np.abs(out - want)) < 2e-2 * np.max(np.abs(want)), isa
        # The sink rows are the keys and values rounded to F16.
        sink = min(n_kv, N_SINK)
        assert np.max(np.abs(k_deq[:sink] - k[:sink])) <= 1e-3 * np.max(np.abs(k))
        assert np.max(np.abs(v_deq[:sink] - v[:sink])) <= 1e-3 * np.max(np.abs(v))


@pytest.mark.skipif("avx512" not in ISAS, reason="no AVX-512 table under test on this machine")
@pytest.mark.parametrize("type_k", ["q8_0", "q4_0"])
@pytest.mark.parametrize("type_v", ["f16", "q8_0", "q4_0"])
def test_avx512_equals_the_scalar_reference_bit_for_bit_with_a_centered_k(type_k, type_v):
    rng = np.random.default_rng(8)
    q = rng.standard_normal((8, 256)).astype(np.float32)
    k = offset_keys(rng, 301, 2, 256)
    v = rng.standard_normal((301, 2, 256)).astype(np.float32)
    for window in (0, 50, 280):
        ref, _, _ = _testing.attention_kv(q, k, v, type_k, type_v, window, rotate_k=True, center_k=True, isa="scalar")
        out, _, _ = _testing.attention_kv(q, k, v, type_k, type_v, window, rotate_k=True, center_k=True, isa="avx512")
        assert np.array_equal(out, ref), window


def test_centering_shrinks_the_q4_0_key_error_of_keys_with_a_common_direction():
    rng = np.random.default_rng(9)
    k = offset_keys(rng, 200, 2, 64)
    q = rng.standard_normal((4, 64)).astype(np.float32)
    errs = {}
    for center in (False, True):
        _, k_deq, _ = _testing.attention_kv(q, k, k, "q4_0", "f16", rotate_k=True, center_k=center)
        errs[center] = np.sqrt(np.mean((k_deq[N_SINK:] - k[N_SINK:]) ** 2))
    assert errs[True] < 0.5 * errs[False], errs


def test_centering_shrinks_the_q4_0_value_error_of_values_with_a_common_offset():
    rng = np.random.default_rng(11)
    k = rng.standard_normal((200, 2, 64)).astype(np.float32)
    v = rng.standard_normal((200, 2, 64)).astype(np.float32) + 5.0 * rng.standard_normal((1, 2, 64)).astype(np.float32)
    q = rng.standard_normal((4, 64)).astype(np.float32)
    errs = {}
    for center in (False, True):
        _, _, v_deq = _testing.attention_kv(q, k, v, "q4_0", "q4_0", rotate_k=True, center_k=center)
        errs[center] = np.sqrt(np.mean((v_deq[N_SINK:] - v[N_SINK:]) ** 2))
    assert errs[True] < 0.5 * errs[False], errs


def test_centering_needs_a_quantized_k():
    q = np.ones((2, 32), np.float32)
    k = np.ones((3, 1, 32), np.float32)
    with pytest.raises(Exception, match="quantized K"):
        _testing.attention_kv(q, k, k, "f16", "f16", center_k=True)


# --- the forward pass and the prompt cache over a centered q4_0 cache ---------------------------

@pytest.fixture(scope="module")
def hd32(tiny_llama_file):
    path, weights = tiny_llama_file(HD32)
    return HD32, weights, path


PROMPT = [int(t) for t in np.random.default_rng(10).integers(3, 250, 100)]


def q4(path, **kw) -> Model:
    kw.setdefault("n_threads", 2)
    return Model.load(path, n_ctx=128, cache_type_k="q4_0", cache_type_v="q4_0", **kw)


def test_centering_is_the_default_for_a_q4_0_k_only(hd32):
    _, _, path = hd32
    assert q4(path).cache_center_k and "centered" in q4(path).kv_summary()
    for tk in ("f16", "q8_0"):
        assert not Model.load(path, n_ctx=16, n_threads=1, cache_type_k=tk).cache_center_k
    assert not q4(path, cache_center_k=False).cache_center_k


def test_forward_with_a_centered_k_tracks_the_reference(hd32):
    cfg, weights, path = hd32
    got = q4(path).eval_logits(PROMPT)
    want = LlamaReference(cfg, weights).forward(PROMPT)
    assert np.max(np.abs(got - want)) / np.max(np.abs(want)) < 1.5e-1


@pytest.mark.parametrize("n_batch", [1, 7, 64, 65])
def test_a_prompt_decoded_in_chunks_sees_the_cache_of_one_batch(hd32, n_batch):
    """mu and s come from the first 64 positions whatever the chunks; a mean taken from a batch
    would make these logits differ by quantization error, not rounding."""
    _, _, path = hd32
    whole = q4(path, n_batch=512)
    whole.context.decode(np.asarray(PROMPT, dtype=np.int32), all_logits=True)
    chunked = q4(path, n_batch=n_batch)
    chunked.context.decode(np.asarray(PROMPT, dtype=np.int32), all_logits=True)
    a, b = np.array(whole.context.logits), np.array(chunked.context.logits)
    assert np.max(np.abs(a - b)) < 1e-4 * np.max(np.abs(a))
    assert np.argmax(a, axis=1).tolist() == np.argmax(b, axis=1).tolist()


@pytest.mark.parametrize("n_prefix", [10, 64, 80])
def test_a_reused_prefix_generates_the_tokens_of_a_cold_run(hd32, n_prefix):
    """A cached prefix shorter than the sink rows, exactly them, and longer."""
    _, _, path = hd32
    warm = q4(path)
    warm.complete(PROMPT[:n_prefix] + [7, 8, 9], max_tokens=4, temperature=0)
    r = warm.complete(PROMPT, max_tokens=12, temperature=0)
    assert r.cached_tokens == n_prefix
    assert r.tokens == q4(path).complete(PROMPT, max_tokens=12, temperature=0).tokens


def test_a_snapshot_restored_below_the_sink_rows_sets_mu_again(hd32):
    """A snapshot of 100 positions restored to 20 leaves mu to be set again at position 63, from the
    new tokens: the result equals a cold run of the new prompt."""
    _, _, path = hd32
    m = q4(path)
    ctx = m.context
    ctx.decode(np.asarray(PROMPT, dtype=np.int32))
    blob = ctx.kv_snapshot(len(PROMPT))
    other = PROMPT[:20] + [11] * 60
    ctx.kv_restore(blob, len(PROMPT), 20)
    ctx.decode(np.asarray(other[20:], dtype=np.int32))
    cold = q4(path)
    cold.context.decode(np.asarray(other, dtype=np.int32))
    assert np.array_equal(ctx.kv_snapshot(len(other)), cold.context.kv_snapshot(len(other)))
