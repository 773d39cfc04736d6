"""KV cache types: attention over quantized K/V blocks against a numpy oracle and across ISAs,
and the forward pass with q8_0 / q4_0 caches against the reference model."""
from __future__ import annotations

import numpy as np
import pytest

from edgeinfer import _testing
from edgeinfer.model import Model
from support.isas import isas_under_test
from support.numpy_reference import LlamaReference, last_position_attention
from support.tiny_llama import HD32

ISAS = isas_under_test()
TYPES = ["f16", "q8_0", "q4_0"]


@pytest.mark.parametrize("type_k", TYPES)
@pytest.mark.parametrize("type_v", TYPES)
@pytest.mark.parametrize("window", [0, 7])
def test_attention_over_each_kv_type_matches_the_oracle_on_every_isa(type_k, type_v, window):
    rng = np.random.default_rng(1)
    q = rng.standard_normal((4, 64)).astype(np.float32)
    k = rng.standard_normal((37, 2, 64)).astype(np.float32)
    v = rng.standard_normal((37, 2, 64)).astype(np.float32)
    ref_out, k_deq, v_deq = _testing.attention_kv(q, k, v, type_k, type_v, window, isa="scalar")
    want = last_position_attention(q, k_deq, v_deq, window)
    # Q is rounded to K's vec_dot type (F16 or Q8_0) for the scores; the rest is float32.
    tol = 2e-3 if type_k == "f16" else 2e-2
    assert np.max(np.abs(ref_out - want)) < tol * np.max(np.abs(want))
    # The ISAs store the same blocks; their results differ from the scalar one by FMA roundings
    # (an F16 pair goes through ggml's F16 accumulator, which rounds to half precision).
    isa_tol = 1e-3 if (type_k, type_v) == ("f16", "f16") else 1e-5
    for isa in ISAS:
        out, k2, v2 = _testing.attention_kv(q, k, v, type_k, type_v, window, isa=isa)
        assert np.array_equal(k2, k_deq) and np.array_equal(v2, v_deq), isa
        assert np.max(np.abs(out - ref_out)) < isa_tol * np.max(np.abs(ref_out)), isa


def test_quantized_cache_stores_smaller_rows():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 32)).astype(np.float32)
    k = rng.standard_normal((3, 1, 32)).astype(np.float32)
    _, kd, _ = _testing.attention_kv(q, k, k, "q4_0", "q8_0")
    # Q4_0 keeps 16 levels per block: each row has at most 16 distinct values.
    assert all(len(np.unique(kd[i, 0])) <= 16 for i in range(3))


@pytest.fixture(scope="module")
def hd32(tiny_llama_file):
    path, weights = tiny_llama_file(HD32)
    return HD32, weights, path


PROMPT = [5, 77, 230, 12, 150, 9, 200, 41, 33, 260, 17, 88, 101, 64, 3, 250, 19, 42]


@pytest.mark.parametrize("types,tol", [(("q8_0", "q8_0"), 2e-2), (("q4_0", "q4_0"), 1.5e-1),
                                       (("q8_0", "q4_0"), 1e-1), (("f16", "q8_0"), 2e-2)])
def test_forward_with_quantized_cache_tracks_the_reference(hd32, types, tol):
    cfg, weights, path = hd32
    m = Model.load(path, n_ctx=64, n_threads=2, cache_type_k=types[0], cache_type_v=types[1])
    assert (m.cache_type_k, m.cache_type_v) == types
    got = m.eval_logits(PROMPT)
    want = LlamaReference(cfg, weights).forward(PROMPT)
    assert np.max(np.abs(got - want)) / np.max(np.abs(want)) < tol
    f16 = Model.load(path, n_ctx=64, n_threads=2)
    assert m.kv_bytes_per_token < f16.kv_bytes_per_token or types[0] == "f16"


def test_quantized_cache_needs_block_aligned_heads(tiny_llama_path):
    path = tiny_llama_path   # head_dim 16, K/V rows of 32 values
    with pytest.raises(Exception, match="multiple of"):
        Model.load(path, n_ctx=16, n_threads=2, cache_type_k="q8_0").complete([5, 6], max_tokens=2)
    with pytest.raises(ValueError, match="cache_type_k"):
        Model.load(path, n_ctx=16, n_threads=2, cache_type_k="q5_0")


# --- Hadamard rotation of K (kv/hadamard.h) ------------------------------------------------------

@pytest.mark.parametrize("type_k", TYPES)
@pytest.mark.parametrize("type_v", ["f16", "q4_0"])
def test_rotated_k_gives_the_same_attention(type_k, type_v):
    """Q is rotated like K, so the scores are those of the un-rotated keys as stored."""
    rng = np.random.default_rng(2)
    q = rng.standard_normal((4, 64)).astype(np.float32)
    k = rng.standard_normal((37, 2, 64)).astype(np.float32)
    v = rng.standard_normal((37, 2, 64)).astype(np.float32)
    for isa in ISAS:
        out, k_deq, v_deq = _testing.attention_kv(q, k, v, type_k, type_v, 7, rotate_k=True, isa=isa)
        want = last_position_attention(q, k_deq, v_deq, 7)
        tol = 2e-3 if type_k == "f16" else 2e-2
        assert np.max(np.abs(out - want)) < tol * np.max(np.abs(want)), isa
        if type_k == "f16":   # an F16 K only rounds: the stored keys are the keys
            assert np.max(np.abs(k_deq - k)) < 5e-3 * np.max(np.abs(k))


def outlier_keys(rng, n, n_head_kv, d):
    """Keys like a real model's: most channels small, a few 20x larger."""
    k = rng.standard_normal((n, n_head_kv, d)).astype(np.float32)
    k[..., [3, 17, 40]] *= 20.0
    return k


def test_rotation_shrinks_the_q4_0_key_error_on_outlier_channels():
    rng = np.random.default_rng(3)
    k = outlier_keys(rng, 64, 2, 64)
    q = rng.standard_normal((4, 64)).astype(np.float32)
    errs = {}
    for rotate in (False, True):
        _, k_deq, _ = _testing.attention_kv(q, k, k, "q4_0", "f16", rotate_k=rotate)
        errs[rotate] = np.sqrt(np.mean((k_deq - k) ** 2))
    assert errs[True] < 0.5 * errs[False], errs


@pytest.mark.parametrize("type_k,type_v", [("q8_0", "q8_0"), ("q4_0", "q4_0"), ("q8_0", "f16"), ("q4_0", "q8_0")])
def test_split_kv_spans_match_the_oracle(type_k, type_v):
    """600 positions: the span kernel splits them into spans and merges the partial results."""
    rng = np.random.default_rng(4)
    q = rng.standard_normal((6, 64)).astype(np.float32)
    k = rng.standard_normal((600, 2, 64)).astype(np.float32)
    v = rng.standard_normal((600, 2, 64)).astype(np.float32)
    ref, k_deq, v_deq = _testing.attention_kv(q, k, v, type_k, type_v, isa="scalar")
    for window in (0, 300):
        want = last_position_attention(q, k_deq, v_deq, window)
        for isa in ISAS:
            out, _, _ = _testing.attention_kv(q, k, v, type_k, type_v, window, isa=isa)
            assert np.max(np.abs(out - want)) < 2e-2 * np.max(np.abs(want)), (isa, window)
            if window == 0:
                assert np.max(np.abs(out - ref)) < 1e-5 * np.max(np.abs(ref)), isa


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
@pytest.mark.parametrize("type_k", ["q8_0", "q4_0"])
@pytest.mark.parametrize("type_v", TYPES)
@pytest.mark.parametrize("n_head,n_head_kv,head_dim", [(8, 2, 256), (9, 3, 64), (18, 2, 32)])
def test_span_kernel_equals_the_scalar_reference_bit_for_bit(isa, type_k, type_v, n_head, n_head_kv, head_dim):
    """Both halves of the score reduction (head_dim > 128 and <= 128), groups of more than the 8
    heads scored together, and blocks at the ends of the int8 range (a saturating 16-bit pair sum
    in the AVX2 kernel would show there)."""
    if isa not in ISAS:
        pytest.skip(f"no {isa} table under test on this machine")
    rng = np.random.default_rng(5)
    q = rng.standard_normal((n_head, head_dim)).astype(np.float32)
    k = rng.standard_normal((301, n_head_kv, head_dim)).astype(np.float32)
    v = rng.standard_normal((301, n_head_kv, head_dim)).astype(np.float32)
    q[0] = -1.0  # every Q block quantizes to -127 ...
    k[::7] = 1.0  # ... against K blocks of +127 (q8_0) / the top nibble (q4_0) everywhere
    k[3::7] = -1.0
    for window in (0, 50):
        ref, _, _ = _testing.attention_kv(q, k, v, type_k, type_v, window, isa="scalar")
        out, _, _ = _testing.attention_kv(q, k, v, type_k, type_v, window, isa=isa)
        assert np.array_equal(out, ref), window


def test_rotation_needs_a_power_of_two_head(tmp_path):
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 96)).astype(np.float32)
    k = rng.standard_normal((3, 1, 96)).astype(np.float32)
    with pytest.raises(Exception, match="power of two"):
        _testing.attention_kv(q, k, k, "q4_0", "q4_0", rotate_k=True)


def test_rotation_default_is_on_for_a_q4_0_k_only(hd32):
    _, _, path = hd32
    for tk, want in [("f16", False), ("q8_0", False), ("q4_0", True)]:
        m = Model.load(path, n_ctx=16, n_threads=1, cache_type_k=tk, cache_type_v="q8_0" if tk != "f16" else "f16")
        assert m.cache_rotate_k is want
        assert ("K rotated" in m.kv_summary()) is want
    assert Model.load(path, n_ctx=16, n_threads=1, cache_type_k="q4_0", cache_rotate_k=False).cache_rotate_k is False


@pytest.mark.parametrize("types", [("q4_0", "q4_0"), ("q8_0", "q8_0")])
def test_forward_with_a_rotated_k_tracks_the_reference(hd32, types):
    cfg, weights, path = hd32
    m = Model.load(path, n_ctx=64, n_threads=2, cache_type_k=types[0], cache_type_v=types[1], cache_rotate_k=True)
    got = m.eval_logits(PROMPT)
    want = LlamaReference(cfg, weights).forward(PROMPT)
    assert np.max(np.abs(got - want)) / np.max(np.abs(want)) < 1.5e-1


def test_context_shift_with_a_rotated_k_equals_the_unrotated_shift(hd32):
    """An F16 K rotated or not holds the same keys up to rounding; a shift must un-rotate, re-rope
    and rotate again, so the logits after it agree (re-roping rotated values would not)."""
    _, _, path = hd32
    logits = {}
    for rotate in (False, True):
        m = Model.load(path, n_ctx=24, n_threads=1, cache_rotate_k=rotate)
        ctx = m.context
        ctx.decode(np.asarray(PROMPT, dtype=np.int32))
        ctx.shift(1, 8)
        ctx.decode(np.asarray([7, 99, 140, 3], dtype=np.int32), all_logits=True)
        logits[rotate] = np.array(ctx.logits)
    scale = np.max(np.abs(logits[False]))
    assert np.max(np.abs(logits[True] - logits[False])) < 2e-3 * scale
