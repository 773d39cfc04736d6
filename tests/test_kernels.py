"""Kernel tables: dequantization, activation quantization and dot products, on every ISA this
machine runs, against the gguf package, an independent numpy model of ggml's quantizer, and a
float reference with derived error bounds.

Bounds used below (n = row length, blocks of 32):
- ISA vs scalar: same integer sums per block, only the float summation order differs, so
  |dot_isa - dot_scalar| <= 1e-5 * sum_i |w_i * y_i| (fp32 accumulation over at most n/32 + 8
  terms per lane: (n/32 + 8) * 2^-24 < 2e-6 for n <= 2048; 1e-5 leaves room).
- Quantized dot vs float reference np.dot(dequant(w), x): activations are quantized to q8 with
  d = amax/127 stored as fp16, so each activation moves by at most
  e_b = d_b * (1/2 + 127 * 2^-11)  (rounding to the grid + fp16 rounding of d),
  giving |err| <= sum_b e_b * sum_{i in b} |w_i - m_b|   (m_b = 0 for q4_0/q5_0/q8_0)
  plus, for q4_1/q5_1, the minimum times the error of the precomputed block sum s = fp16(d*sum q):
  |m_b| * (32 * d_b / 2 + |d_b * sum q_b| * 2^-11),
  plus fp32 accumulation 1e-5 * sum_i |w_i * x_i|.
- F16/BF16 activations are rounded to half/bfloat16: relative 2^-11 / 2^-8 of sum |w_i x_i|.
"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T  # noqa: E402

from edgeinfer import _core  # noqa: E402
from edgeinfer import _testing  # noqa: E402
from support.cli import child_env  # noqa: E402
from support.isas import avx512_against_avx2, isas_under_test  # noqa: E402
from support.quant_rows import HAS_MIN, bits, gguf_dequantize, random_blocks, rng_for  # noqa: E402

ISAS = isas_under_test()
WEIGHT_TYPES = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]
QUANT_WEIGHT_TYPES = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]
ACT_TYPES = [T.F32, T.F16, T.BF16, T.Q8_0, T.Q8_1]
ROW_LENGTHS = [32, 64, 160, 576, 1536, 2048]  # 576 and 1536: SmolLM2's hidden and FFN sizes


def random_row(qtype: T, n: int, rng: np.random.Generator) -> np.ndarray:
    """Random bytes of a row of n elements, with finite fp16/bf16 values where they are floats."""
    if qtype == T.F32:
        return (rng.standard_normal(n).astype(np.float32) * 3).view(np.uint8)
    if qtype == T.F16:
        return (rng.standard_normal(n) * 3).astype(np.float16).view(np.uint8)
    if qtype == T.BF16:
        return gguf.quants.quantize(rng.standard_normal(n).astype(np.float32) * 3, T.BF16).reshape(-1)
    return random_blocks(qtype, n, rng)


def activations(n: int, rng: np.random.Generator) -> np.ndarray:
    # Heavy-ish tails per block, like real hidden states, plus one all-zero block (d = 0 path).
    x = rng.standard_normal(n).astype(np.float32) * rng.uniform(0.1, 4.0, size=n // 32).repeat(32).astype(np.float32)
    if n >= 64:
        x[32:64] = 0.0
    return x


# ---- type table --------------------------------------------------------------------------


@pytest.mark.parametrize("qtype", WEIGHT_TYPES + [T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.Q8_K])
def test_type_info_matches_gguf_package(qtype):
    info = _core.type_info(int(qtype))
    assert (info["block_size"], info["type_size"]) == GGML_QUANT_SIZES[qtype]
    assert info["name"].lower() == qtype.name.lower()


def test_q8_1_is_current_ggmls_36_byte_block():
    # gguf-py still lists q8_1's old float d/s layout (40 bytes); ggml-common.h has used two
    # fp16 halves (36 bytes) for years. Q8_1 never appears in files, only in dot products.
    info = _core.type_info(int(T.Q8_1))
    assert (info["block_size"], info["type_size"]) == (32, 36)


def test_vec_dot_types_are_ggmls():
    expected = {T.F32: T.F32, T.F16: T.F16, T.BF16: T.BF16, T.Q4_0: T.Q8_0, T.Q4_1: T.Q8_1,
                T.Q5_0: T.Q8_0, T.Q5_1: T.Q8_1, T.Q8_0: T.Q8_0}
    for w, act in expected.items():
        assert _testing.vec_dot_type(int(w)) == int(act), w.name


def test_scalar_and_best_isa_are_available():
    assert _core.available_isas()[0] == "scalar"
    assert _core.isa() in _core.available_isas()


# ---- dequantization ----------------------------------------------------------------------


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype", WEIGHT_TYPES)
def test_dequantize_random_blocks_bit_identical_to_gguf(qtype, isa):
    n = 1536
    raw = random_row(qtype, n, rng_for(qtype, 1))
    got = _core.dequantize(int(qtype), raw, n, isa=isa)
    np.testing.assert_array_equal(bits(got), bits(gguf_dequantize(qtype, raw)))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype", QUANT_WEIGHT_TYPES + [T.BF16])
def test_dequantize_gguf_quantized_blocks_bit_identical(qtype, isa):
    n = 576
    x = rng_for(qtype, 2).standard_normal(n).astype(np.float32)
    raw = gguf.quants.quantize(x.reshape(1, n), qtype).reshape(-1)
    got = _core.dequantize(int(qtype), raw, n, isa=isa)
    np.testing.assert_array_equal(bits(got), bits(gguf_dequantize(qtype, raw)))


def test_dequantize_rejects_wrong_sizes():
    with pytest.raises(_core.EdgeInferError, match="multiple"):
        _core.dequantize(int(T.Q4_0), np.zeros(18, np.uint8), 31)
    with pytest.raises(_core.EdgeInferError, match="bytes"):
        _core.dequantize(int(T.Q4_0), np.zeros(17, np.uint8), 32)
    with pytest.raises(_core.EdgeInferError, match="unknown instruction set"):
        _core.dequantize(int(T.Q4_0), np.zeros(18, np.uint8), 32, isa="sse9")


# ---- activation quantization -------------------------------------------------------------


def numpy_quantize_q8(x: np.ndarray, with_sum: bool) -> np.ndarray:
    """ggml-cpu's x86 quantize_row_q8_0 / q8_1 (AVX2 path), in numpy float32 arithmetic."""
    blocks = x.reshape(-1, 32).astype(np.float32)
    amax = np.abs(blocks).max(axis=1, keepdims=True)
    d = amax / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.rint(blocks * inv).astype(np.int32)  # np.rint: round half to even
    head = [d.astype(np.float16).view(np.uint8)]
    if with_sum:
        s = (d * q.sum(axis=1, keepdims=True).astype(np.float32)).astype(np.float32)
        head.append(s.astype(np.float16).view(np.uint8))
    return np.concatenate(head + [q.astype(np.int8).view(np.uint8)], axis=1).reshape(-1)


TIES = np.array([127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5] + [0.0] * 24, dtype=np.float32)


@pytest.mark.parametrize("isa", ISAS)
def test_q8_quantizer_rounds_half_to_even(isa):
    # amax = 127 makes the scale exactly 1, so x * id hits the .5 ties exactly.
    q = _testing.quantize(int(T.Q8_0), TIES, isa=isa)[2:].view(np.int8)
    assert list(q[:8]) == [127, 0, 2, 2, 0, -2, -2, 4]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype", [T.Q8_0, T.Q8_1])
@pytest.mark.parametrize("n", ROW_LENGTHS)
def test_q8_quantizer_matches_ggml_formula(qtype, n, isa):
    x = activations(n, rng_for(qtype, n, 3))
    got = _testing.quantize(int(qtype), x, isa=isa)
    np.testing.assert_array_equal(got, numpy_quantize_q8(x, with_sum=qtype == T.Q8_1))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype", ACT_TYPES)
def test_activation_quantization_bit_identical_across_isas(qtype, isa):
    n = 2048 + 32 if qtype in (T.Q8_0, T.Q8_1) else 2048 + 7  # include a non-multiple-of-8 tail
    x = activations(2048 + 32, rng_for(qtype, 4))[:n]
    np.testing.assert_array_equal(_testing.quantize(int(qtype), x, isa=isa), _testing.quantize(int(qtype), x, isa="scalar"))


@pytest.mark.parametrize("qtype", [T.F16, T.BF16])
def test_float_activation_conversion_matches_numpy_and_gguf(qtype):
    x = activations(576, rng_for(qtype, 5))
    expected = x.astype(np.float16).view(np.uint8) if qtype == T.F16 else gguf.quants.quantize(x, T.BF16).reshape(-1)
    np.testing.assert_array_equal(_testing.quantize(int(qtype), x), expected)


def test_quantize_rejects_weight_only_types():
    with pytest.raises(_core.EdgeInferError, match="from_float"):
        _testing.quantize(int(T.Q4_0), np.zeros(32, np.float32))


# ---- dot products ------------------------------------------------------------------------


def dequantized_activations(qtype: T, raw: np.ndarray) -> np.ndarray:
    if qtype == T.Q8_1:  # not in the gguf package: d, s, then 32 int8
        blocks = raw.reshape(-1, 36)
        d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
        return (blocks[:, 4:].copy().view(np.int8).astype(np.float32) * d).reshape(-1)
    return gguf_dequantize(qtype, raw)


def block_params(qtype: T, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-block (d, m) of a weight row, as float64 (m = 0 for types without a minimum)."""
    blocks = raw.reshape(-1, GGML_QUANT_SIZES[qtype][1])
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float64).reshape(-1)
    m = blocks[:, 2:4].copy().view(np.float16).astype(np.float64).reshape(-1) if qtype in HAS_MIN else 0 * d
    return d, m


@pytest.mark.parametrize("n", ROW_LENGTHS)
@pytest.mark.parametrize("qtype", WEIGHT_TYPES)
def test_vec_dot_every_isa_matches_scalar(qtype, n):
    rng = rng_for(qtype, n, 6)
    w, x = random_row(qtype, n, rng), activations(n, rng)
    scale = np.abs(gguf_dequantize(qtype, w).astype(np.float64) * x).sum() + 1e-30
    ref = _testing.vec_dot(int(qtype), w, x, isa="scalar")
    results = {isa: _testing.vec_dot(int(qtype), w, x, isa=isa) for isa in ISAS}
    for isa, got in results.items():
        assert abs(got - ref) <= 1e-5 * scale, (isa, got, ref)
    if qtype in QUANT_WEIGHT_TYPES and avx512_against_avx2():
        # Same kernel source, VNNI or not: the same integers and the same float operations.
        assert results["avx512"] == _testing.vec_dot(int(qtype), w, x, isa="avx2")


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("n", ROW_LENGTHS)
@pytest.mark.parametrize("qtype", QUANT_WEIGHT_TYPES)
def test_vec_dot_is_ggml_block_formula(qtype, n, isa):
    """sum_b d_x d_y sum_i(qx qy) + m_x s_y over the stored blocks, in float64."""
    rng = rng_for(qtype, n, 7)
    w, x = random_row(qtype, n, rng), activations(n, rng)
    act_type = T(_testing.vec_dot_type(int(qtype)))
    y = _testing.quantize(int(act_type), x, isa="scalar")
    wq, yq = gguf_dequantize(qtype, w).astype(np.float64), dequantized_activations(act_type, y).astype(np.float64)
    _, m = block_params(qtype, w)
    # dequant(w) * dequant(y) summed gives d_x d_y sum(qx qy) + m_x * d_y * sum(qy); swap in s_y.
    expected = (wq * yq).sum()
    terms = np.abs(wq * yq).sum()
    if qtype in HAS_MIN:
        yb = y.reshape(-1, 36)
        s = yb[:, 2:4].copy().view(np.float16).astype(np.float64).reshape(-1)
        sum_dq = yq.reshape(-1, 32).sum(axis=1)
        expected += (m * (s - sum_dq)).sum()
        terms += np.abs(m * s).sum()
    got = _testing.vec_dot_raw(int(qtype), w, y, n, isa=isa)
    assert abs(got - expected) <= 1e-5 * terms + 1e-30, (got, expected)


@pytest.mark.parametrize("n", ROW_LENGTHS)
@pytest.mark.parametrize("qtype", WEIGHT_TYPES)
def test_vec_dot_within_derived_bound_of_float_reference(qtype, n):
    rng = rng_for(qtype, n, 8)
    w, x = random_row(qtype, n, rng), activations(n, rng)
    wf = gguf_dequantize(qtype, w).astype(np.float64)
    exact = float(np.dot(wf, x.astype(np.float64)))
    abs_terms = np.abs(wf * x).sum()
    if qtype == T.F32:
        bound = 1e-5 * abs_terms
    elif qtype == T.F16:
        bound = (2.0**-11 + 1e-5) * abs_terms
    elif qtype == T.BF16:
        bound = (2.0**-8 + 1e-5) * abs_terms
    else:
        xb = x.reshape(-1, 32).astype(np.float64)
        d_y = np.abs(xb).max(axis=1) / 127
        e_y = d_y * (0.5 + 127 * 2.0**-11)
        _, m = block_params(qtype, w)
        bound = (e_y * np.abs(wf.reshape(-1, 32) - m[:, None]).sum(axis=1)).sum() + 1e-5 * abs_terms
        if qtype in HAS_MIN:
            bound += (np.abs(m) * (32 * d_y / 2 + 32 * 127 * d_y * 2.0**-11)).sum()
    for isa in ISAS:
        got = _testing.vec_dot(int(qtype), w, x, isa=isa)
        assert abs(got - exact) <= bound, (isa, got, exact, bound)


@pytest.mark.parametrize("isa", ISAS)
def test_vec_dot_of_zero_activations_is_zero(isa):
    w = random_row(T.Q4_1, 64, rng_for(9))
    assert _testing.vec_dot(int(T.Q4_0), random_row(T.Q4_0, 64, rng_for(10)), np.zeros(64, np.float32), isa=isa) == 0.0
    assert _testing.vec_dot(int(T.Q4_1), w, np.zeros(64, np.float32), isa=isa) == 0.0


# ---- ISA selection -----------------------------------------------------------------------


def run_isa_probe(value: str) -> subprocess.CompletedProcess:
    code = (
        "from edgeinfer import _core\n"
        "try:\n    print(_core.isa())\n"
        "except _core.EdgeInferError as e:\n    print('ERROR', e)\n"
    )
    return subprocess.run([sys.executable, "-c", code], env=child_env(EDGEINFER_ISA=value), capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("isa", ISAS)
def test_edgeinfer_isa_forces_a_kernel_set(isa):
    out = run_isa_probe(isa)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == isa


@pytest.mark.parametrize("value", ["avx9", "neon" if "neon" not in _core.available_isas() else "avx512"])
def test_edgeinfer_isa_unusable_value_is_a_clear_error(value):
    if value in _core.available_isas():
        pytest.skip("every named ISA is available here")
    out = run_isa_probe(value)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ERROR"), out.stdout
    assert f"EDGEINFER_ISA={value}" in out.stdout
