"""The weight quantizers of the core (`_core.quantize_rows`): bit-identical blocks with the `gguf`
package's reference quantizers and with ggml's own (libggml-base of a llama.cpp build: the bench
venv's or scripts/llamacpp_bin.py's, when present), on random data and edge cases (zeros, ties,
one-signed blocks, large and tiny magnitudes)."""
from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf.quants import quantize as gguf_quantize

from edgeinfer import _core
from support.ggml_quants import ggml_quantize, load_ggml_base

T = gguf.GGMLQuantizationType
LEGACY = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]
KQUANTS = [T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]
IQUANTS = [T.IQ4_NL, T.IQ4_XS]
MX = [T.MXFP4]
TERNARY = [T.TQ1_0, T.TQ2_0]  # gguf-py quantizes these too
PLAIN = [T.F32, T.F16, T.BF16]


def _cases(n_per_row: int) -> list[np.ndarray]:
    rng = np.random.default_rng(1234)
    normal = rng.standard_normal((48, n_per_row)).astype(np.float32)
    edge = rng.standard_normal((12, n_per_row)).astype(np.float32)
    edge[0] = 0.0                                    # an all-zero row
    edge[1, ::7] = 0.0                               # scattered zeros
    edge[2] = 1.0                                    # constant row
    edge[3, : n_per_row // 2], edge[3, n_per_row // 2:] = -2.0, 2.0  # equal magnitudes, both signs
    edge[4] = np.abs(edge[4])                        # one-signed rows
    edge[5] = -np.abs(edge[5])
    edge[6, 5] = 1e3                                 # one outlier
    edge[7] = 0.0
    edge[7, 3] = 1e-20                               # below the k-quants' all-zero threshold
    ties = rng.integers(-8, 9, (16, n_per_row)).astype(np.float32) / 4  # values on the grid: ties
    heavy = (rng.standard_t(3, (16, n_per_row)) * 0.02).astype(np.float32)  # weight-like tails
    scales = [(normal * 1e-3).astype(np.float32), (normal * 1e4).astype(np.float32)]
    return [normal, edge, ties, heavy, *scales]


@pytest.mark.parametrize("qtype", LEGACY + TERNARY + PLAIN, ids=lambda t: t.name)
def test_matches_gguf_reference_bit_for_bit(qtype):
    for x in _cases(256):
        ours = _core.quantize_rows(int(qtype), x, 2)
        ref = gguf_quantize(x, qtype).view(np.uint8).reshape(ours.shape)
        mismatched = np.flatnonzero((ours != ref).any(axis=1))
        assert mismatched.size == 0, f"{qtype.name}: rows {mismatched[:8]} differ"


@pytest.fixture(scope="module")
def libggml():
    return load_ggml_base()


@pytest.mark.parametrize("qtype", LEGACY + KQUANTS + IQUANTS + MX + TERNARY + [T.F16, T.BF16], ids=lambda t: t.name)
def test_matches_ggml_quantize_chunk_bit_for_bit(libggml, qtype):
    for x in _cases(512):
        ours = _core.quantize_rows(int(qtype), x, 2)
        ref = ggml_quantize(libggml, int(qtype), x)
        mismatched = np.flatnonzero((ours != ref).any(axis=1))
        assert mismatched.size == 0, f"{qtype.name}: rows {mismatched[:8]} differ"


# Relative RMS round-trip error on Gaussian rows. Measured with these quantizers (identical to
# ggml's, see above): q4_0 0.086, q4_1 0.078, q5_0 0.043, q5_1 0.038, q8_0 0.0054, q2_K 0.297,
# q3_K 0.151, q4_K 0.072, q5_K 0.036, q6_K 0.018, iq4_nl 0.0761, iq4_xs 0.0767, mxfp4 0.1146
# (a power-of-two scale puts a block's largest value anywhere in [4, 8) of its units, E2M1's
# largest being 6), tq1_0 = tq2_0 0.802 (-1, 0, 1 times the largest of 256 Gaussian values: the
# ternary types are for weights trained ternary), f16 0.0002, bf16 0.0017; bounds ~15% above.
ROUND_TRIP_BOUND = {T.Q4_0: 0.1, T.Q4_1: 0.09, T.Q5_0: 0.05, T.Q5_1: 0.044, T.Q8_0: 0.0063,
                    T.Q2_K: 0.34, T.Q3_K: 0.175, T.Q4_K: 0.083, T.Q5_K: 0.042, T.Q6_K: 0.021,
                    T.IQ4_NL: 0.0875, T.IQ4_XS: 0.088, T.MXFP4: 0.132, T.TQ1_0: 0.92, T.TQ2_0: 0.92,
                    T.F16: 3e-4, T.BF16: 2e-3, T.F32: 0.0}


@pytest.mark.parametrize("qtype", list(ROUND_TRIP_BOUND), ids=lambda t: t.name)
def test_round_trip_error_is_what_the_type_gives(qtype):
    x = np.random.default_rng(7).standard_normal((32, 1024)).astype(np.float32)
    q = _core.quantize_rows(int(qtype), x, 2)
    back = _core.dequantize(int(qtype), q.reshape(-1), x.size).reshape(x.shape)
    rel = float(np.sqrt(np.mean((back - x) ** 2) / np.mean(x ** 2)))
    assert rel <= ROUND_TRIP_BOUND[qtype], (qtype.name, rel)


def test_thread_count_does_not_change_the_bytes():
    x = np.random.default_rng(3).standard_normal((97, 512)).astype(np.float32)
    for qtype in (T.Q4_K, T.Q8_0):
        one = _core.quantize_rows(int(qtype), x, 1)
        assert np.array_equal(one, _core.quantize_rows(int(qtype), x, 2))
        assert np.array_equal(one, _core.quantize_rows(int(qtype), x, 5))


def test_rejects_rows_that_are_not_whole_blocks_and_types_without_a_quantizer():
    x = np.zeros((2, 96), dtype=np.float32)
    with pytest.raises(_core.EdgeInferError, match="multiple of the q4_K block size 256"):
        _core.quantize_rows(int(T.Q4_K), x)
    with pytest.raises(_core.EdgeInferError, match="no quantizer"):
        _core.quantize_rows(int(T.Q8_K), np.zeros((1, 256), dtype=np.float32))
    assert _core.has_quantizer(int(T.Q6_K)) and not _core.has_quantizer(int(T.Q8_K))
