"""k-quant kernels (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K weights, Q8_K activations) on every ISA this
machine runs, against the gguf package, numpy models of ggml's formulas, and a float reference.

Notation: a weight element is w = dl * q - ml, with dl = d * sc and ml = dmin * m the factors of
its sub-block (ml = 0 for q3_K/q6_K); activations are quantized per 256-element block to
y = d_y * q8 with iscale = fl(-127 / max), d_y = fl(1 / iscale), q8 = rint(fl(iscale * x)).

Bounds used below:
- SIMD vs scalar: the same exact integers per super-block (or per lane), combined in float in a
  different order: the scalar does 2 products and 2 adds per block (plus the int -> float
  conversion, exact below 2^24, else 2^-24 relative), the SIMD an fma per block and lane plus
  3 adds across lanes. Every rounding is at most 2^-24 of a partial sum bounded by
  T = sum_i (|dl_i q_i| + |ml_i|) |y_i|, so |dot_simd - dot_scalar| <= (3 nb + 8) 2^-24 T,
  under 4e-6 T for nb <= 8 super-blocks (n <= 2048); the tests use 4e-6 T.
- Quantized dot vs float reference np.dot(w, x): per activation,
  |y - x| <= |d_y| (1/2 + 127 2^-24) + |x| 2^-23   (grid rounding of fl(iscale x), the rounding
  of that product, and d_y * iscale = 1 + delta with |delta| <= 2^-23 from two divisions),
  and |x| <= 127 |d_y| (1 + 2^-23), so e_b = |d_y| (1/2 + 2^-15) bounds it; then
  |dot - exact| <= sum_b e_b sum_{i in b} |w_i| + 4e-6 T  (T with |x_i| + e_b for |y_i|).
  The bsums used for the minimum term are exact sums of q8, so they add no error of their own.
- SIMD vs a float32 model of ggml's x86 code: bit-identical (same lane integers, same fma and
  add sequence). The model's fma is exact-then-round via fractions.
"""
from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T  # noqa: E402

from edgeinfer import _core  # noqa: E402
from edgeinfer import _testing  # noqa: E402
from support.isas import avx512_against_avx2, isas_under_test  # noqa: E402
from support.quant_rows import (HAS_MIN, SCALE_OFFSET, bits, fma32, gguf_dequantize, random_blocks,  # noqa: E402
                               rng_for)

ISAS = isas_under_test()
SIMD_ISAS = [isa for isa in ISAS if isa != "scalar"]
KQUANTS = [T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]
# Gemma 3 270M's k-quant rows are 1024 (attn_output) and 2048 (ffn_down). Its n_embd, 640, is not
# a multiple of 256, which is why its 640-wide matrices are Q5_0/Q8_0 (see the rejection test).
ROW_LENGTHS = [256, 512, 1024, 2048]
QK_K = 256

SUB_BLOCK = {T.Q2_K: 16, T.Q3_K: 16, T.Q4_K: 32, T.Q5_K: 32, T.Q6_K: 16}
F16_ONE = np.array([1.0], np.float16).view(np.uint8)
F16_ZERO = np.zeros(2, np.uint8)


def with_super_scales(qtype: T, raw: np.ndarray, d: np.ndarray, dmin: np.ndarray) -> np.ndarray:
    blocks = raw.reshape(-1, GGML_QUANT_SIZES[qtype][1]).copy()
    o = SCALE_OFFSET[qtype]
    blocks[:, o:o + 2] = d
    if qtype in HAS_MIN:
        blocks[:, o + 2:o + 4] = dmin
    return blocks.reshape(-1)


def integer_parts(qtype: T, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per element: the integer weight sc * q (centred q for q3_K/q6_K) and the integer minimum
    m of its sub-block (0 without one), read through gguf's dequantization with d = 1, dmin = 0
    and d = 0, dmin = 1 (both exact in float)."""
    scaled_q = gguf_dequantize(qtype, with_super_scales(qtype, raw, F16_ONE, F16_ZERO))
    if qtype not in HAS_MIN:
        return scaled_q.astype(np.int64), np.zeros(scaled_q.size, np.int64)
    mins = -gguf_dequantize(qtype, with_super_scales(qtype, raw, F16_ZERO, F16_ONE))
    return scaled_q.astype(np.int64), mins.astype(np.int64)


def super_scales(qtype: T, raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    blocks = raw.reshape(-1, GGML_QUANT_SIZES[qtype][1])
    o = SCALE_OFFSET[qtype]
    d = blocks[:, o:o + 2].copy().view(np.float16).astype(np.float32).reshape(-1)
    dmin = blocks[:, o + 2:o + 4].copy().view(np.float16).astype(np.float32).reshape(-1) if qtype in HAS_MIN else 0 * d
    return d, dmin


def activations(n: int, rng: np.random.Generator) -> np.ndarray:
    # Heavy-ish tails with a per-256 scale, like real hidden states.
    x = rng.standard_normal(n).astype(np.float32) * rng.uniform(0.1, 4.0, size=n // QK_K).repeat(QK_K).astype(np.float32)
    x[rng.integers(0, n, size=n // 64)] *= 8  # outliers
    return x


# ---- Q8_K layout and a numpy model of ggml's quantize_row_q8_K_ref --------------------------


def split_q8_K(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    blocks = raw.reshape(-1, 292)
    d = blocks[:, 0:4].copy().view(np.float32).reshape(-1)
    qs = blocks[:, 4:260].copy().view(np.int8)
    bsums = blocks[:, 260:292].copy().view(np.int16)
    return d, qs, bsums


def numpy_quantize_q8_K(x: np.ndarray) -> np.ndarray:
    out = []
    for b in x.reshape(-1, QK_K).astype(np.float32):
        a = np.abs(b)
        if a.max() == 0:
            out.append(np.zeros(292, np.uint8))
            continue
        mx = b[int(np.argmax(a))]  # first element of largest magnitude, with its sign
        iscale = np.float32(-127) / mx
        q = np.minimum(np.rint(iscale * b), 127).astype(np.int8)  # float32 product, half to even
        d = np.float32(1) / iscale
        bsums = q.astype(np.int16).reshape(16, 16).sum(axis=1).astype(np.int16)
        out.append(np.concatenate([np.array([d], np.float32).view(np.uint8), q.view(np.uint8), bsums.view(np.uint8)]))
    return np.concatenate(out)


# ---- type table --------------------------------------------------------------------------


def test_row_of_640_is_rejected_for_k_quants():
    with pytest.raises(_core.EdgeInferError, match="multiple"):
        _testing.vec_dot(int(T.Q4_K), np.zeros(2 * 144, np.uint8), np.zeros(640, np.float32))
    with pytest.raises(_core.EdgeInferError, match="multiple"):
        _testing.quantize(int(T.Q8_K), np.zeros(640, np.float32))


def test_vec_dot_type_of_every_k_quant_is_q8_K():
    for qtype in KQUANTS:
        assert _testing.vec_dot_type(int(qtype)) == int(T.Q8_K), qtype.name


# ---- dequantization ----------------------------------------------------------------------


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype", KQUANTS)
def test_dequantize_random_blocks_bit_identical_to_gguf(qtype, isa):
    n = 2048
    raw = random_blocks(qtype, n, rng_for(qtype, 1))
    got = _core.dequantize(int(qtype), raw, n, isa=isa)
    np.testing.assert_array_equal(bits(got), bits(gguf_dequantize(qtype, raw)))


@pytest.mark.parametrize("qtype", KQUANTS)
def test_dequantize_gguf_quantized_blocks_bit_identical(qtype):
    x = rng_for(qtype, 2).standard_normal(512).astype(np.float32)
    try:
        raw = gguf.quants.quantize(x.reshape(1, -1), qtype).reshape(-1)
    except NotImplementedError:
        pytest.skip(f"gguf {gguf.__version__ if hasattr(gguf, '__version__') else ''} cannot quantize {qtype.name}")
    for isa in ISAS:
        got = _core.dequantize(int(qtype), raw, 512, isa=isa)
        np.testing.assert_array_equal(bits(got), bits(gguf_dequantize(qtype, raw)))


def test_dequantize_q8_K_is_d_times_q():
    x = activations(512, rng_for(3))
    raw = _testing.quantize(int(T.Q8_K), x)
    d, qs, _ = split_q8_K(raw)
    expected = (d[:, None] * qs.astype(np.float32)).reshape(-1)
    np.testing.assert_array_equal(bits(_core.dequantize(int(T.Q8_K), raw, 512)), bits(expected))


# ---- Q8_K activation quantization --------------------------------------------------------


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("n", ROW_LENGTHS)
def test_q8_K_quantizer_matches_ggml_formula(n, isa):
    x = activations(n, rng_for(n, 4))
    if n >= 512:
        x[256:512] = 0.0  # the all-zero block: d = 0, q = 0, bsums = 0
    np.testing.assert_array_equal(_testing.quantize(int(T.Q8_K), x, isa=isa), numpy_quantize_q8_K(x))


@pytest.mark.parametrize("isa", ISAS)
def test_q8_K_quantizer_bit_identical_across_isas(isa):
    x = activations(2048, rng_for(5))
    np.testing.assert_array_equal(_testing.quantize(int(T.Q8_K), x, isa=isa), _testing.quantize(int(T.Q8_K), x, isa="scalar"))


@pytest.mark.parametrize("isa", ISAS)
def test_q8_K_scale_takes_the_sign_of_the_first_largest_element(isa):
    # max = -127 gives iscale = -127 / max = 1 and d = 1 exactly: ties round half to even.
    x = np.zeros(QK_K, np.float32)
    x[:9] = [-127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 127.0]
    d, qs, bsums = split_q8_K(_testing.quantize(int(T.Q8_K), x, isa=isa))
    assert d[0] == np.float32(1.0)
    assert list(qs[0, :9]) == [-127, 0, 2, 2, 0, -2, -2, 4, 127]
    assert bsums[0, 0] == sum([-127, 0, 2, 2, 0, -2, -2, 4, 127])
    # The same magnitudes with the + first: iscale = d = -1, so every q flips sign.
    x[0], x[8] = 127.0, -127.0
    d, qs, _ = split_q8_K(_testing.quantize(int(T.Q8_K), x, isa=isa))
    assert d[0] == np.float32(-1.0)
    assert list(qs[0, :9]) == [-127, 0, -2, -2, 0, 2, 2, -4, 127]


# ---- dot products ------------------------------------------------------------------------


def abs_terms(qtype: T, raw: np.ndarray, y_abs: np.ndarray) -> float:
    """T = sum_i (|dl_i q_i| + |ml_i|) |y_i|."""
    scaled_q, mins = integer_parts(qtype, raw)
    d, dmin = super_scales(qtype, raw)
    dl_q = np.abs(scaled_q.reshape(-1, QK_K) * d[:, None].astype(np.float64))
    ml = np.abs(mins.reshape(-1, QK_K) * dmin[:, None].astype(np.float64))
    return float(((dl_q + ml) * y_abs.reshape(-1, QK_K)).sum()) + 1e-30


@pytest.mark.parametrize("n", ROW_LENGTHS)
@pytest.mark.parametrize("qtype", KQUANTS)
def test_vec_dot_every_isa_matches_scalar(qtype, n):
    rng = rng_for(qtype, n, 6)
    w, x = random_blocks(qtype, n, rng), activations(n, rng)
    y = _testing.quantize(int(T.Q8_K), x)
    d_y, qs, _ = split_q8_K(y)
    bound = 4e-6 * abs_terms(qtype, w, np.abs(d_y[:, None] * qs.astype(np.float64)))
    ref = _testing.vec_dot_raw(int(qtype), w, y, n, isa="scalar")
    results = {isa: _testing.vec_dot_raw(int(qtype), w, y, n, isa=isa) for isa in ISAS}
    for isa, got in results.items():
        assert abs(got - ref) <= bound, (isa, got, ref, bound)
    if avx512_against_avx2():
        # Same kernel source and the same integers: the same floats.
        assert results["avx512"] == _testing.vec_dot_raw(int(qtype), w, y, n, isa="avx2")


@pytest.mark.parametrize("n", ROW_LENGTHS)
@pytest.mark.parametrize("qtype", KQUANTS)
def test_vec_dot_within_derived_bound_of_float_reference(qtype, n):
    rng = rng_for(qtype, n, 7)
    w, x = random_blocks(qtype, n, rng), activations(n, rng)
    wf = gguf_dequantize(qtype, w).astype(np.float64)
    exact = float(np.dot(wf, x.astype(np.float64)))
    xb = x.reshape(-1, QK_K).astype(np.float64)
    e_b = np.abs(xb).max(axis=1) / 127 * (1 + 2.0**-23) * (0.5 + 2.0**-15)
    bound = float((e_b * np.abs(wf.reshape(-1, QK_K)).sum(axis=1)).sum())
    bound += 4e-6 * abs_terms(qtype, w, (np.abs(xb) + e_b[:, None]).reshape(-1))
    for isa in ISAS:
        got = _testing.vec_dot(int(qtype), w, x, isa=isa)
        assert abs(got - exact) <= bound, (isa, got, exact, bound)


# -- a float32 model of ggml's x86 AVX2 kernels (arch/x86/quants.c, ggml_vec_dot_qN_K_q8_K) --


def hsum_float_8(v: list) -> np.float32:
    r = [np.float32(v[i + 4] + v[i]) for i in range(4)]  # high half + low half
    r = [np.float32(r[0] + r[2]), np.float32(r[1] + r[3])]  # + movehl
    return np.float32(r[0] + r[1])  # + movehdup


def model_vec_dot(qtype: T, w: np.ndarray, y: np.ndarray) -> np.float32:
    scaled_q, mins = integer_parts(qtype, w)
    d_x, dmin_x = super_scales(qtype, w)
    d_y, qs, bsums = split_q8_K(y)
    lane = (np.arange(QK_K) % 32) // 4  # int32 lane of each element: index mod 32, in fours
    acc = [np.float32(0)] * 8
    acc_m = [np.float32(0)] * 4
    summs = np.float32(0)
    for b in range(d_y.size):
        prod = scaled_q[b * QK_K:(b + 1) * QK_K] * qs[b].astype(np.int64)
        sumi = [int(prod[lane == k].sum()) for k in range(8)]
        if qtype == T.Q6_K:
            # ggml sums the unsigned q (0..63) per lane and takes the -32 off per super-block as
            # 32 * (sc[2k] bsums[2k] + sc[2k+1] bsums[2k+1]) in lane k: move each element's
            # offset 32 sc q8 from its product's lane to the lane of its 16-element sub-block.
            sc = w.reshape(-1, GGML_QUANT_SIZES[qtype][1])[b, 192:208].view(np.int8).astype(np.int64)
            off = 32 * sc.repeat(16) * qs[b].astype(np.int64)
            bs6 = bsums[b].astype(np.int64)
            sumi = [sumi[k] + int(off[lane == k].sum()) - 32 * int(sc[2 * k] * bs6[2 * k] + sc[2 * k + 1] * bs6[2 * k + 1])
                    for k in range(8)]
        d = np.float32(d_y[b] * d_x[b])
        dmin = np.float32(-d_y[b] * dmin_x[b])
        m = mins[b * QK_K:(b + 1) * QK_K]
        bs = bsums[b].astype(np.int64)
        if qtype == T.Q2_K:  # lane k: m[2k] bsums[2k] + m[2k+1] bsums[2k+1] (16-element groups)
            mprod = [int(m[32 * k] * bs[2 * k] + m[32 * k + 16] * bs[2 * k + 1]) for k in range(8)]
            acc = [fma32(dmin, np.float32(mprod[k]), acc[k]) for k in range(8)]
        elif qtype in (T.Q4_K, T.Q5_K):  # lane k: sub-blocks 2k, 2k+1 of 32, bsums summed in pairs
            pair = bs[0::2] + bs[1::2]
            mprod = [int(m[64 * k] * pair[2 * k] + m[64 * k + 32] * pair[2 * k + 1]) for k in range(4)]
            if qtype == T.Q4_K:
                acc_m = [fma32(dmin, np.float32(mprod[k]), acc_m[k]) for k in range(4)]
            else:
                summs = fma32(dmin, np.float32(sum(mprod)), summs)
        acc = [fma32(d, np.float32(sumi[k]), acc[k]) for k in range(8)]
    total = hsum_float_8(acc)
    if qtype == T.Q4_K:
        total = np.float32(total + np.float32(np.float32(acc_m[0] + acc_m[2]) + np.float32(acc_m[1] + acc_m[3])))
    elif qtype == T.Q5_K:
        total = np.float32(total + summs)
    return total


@pytest.mark.skipif(not SIMD_ISAS, reason="no SIMD kernels on this machine")
@pytest.mark.parametrize("n", ROW_LENGTHS)
@pytest.mark.parametrize("qtype", KQUANTS)
def test_simd_vec_dot_is_ggml_x86_float_sequence_bit_for_bit(qtype, n):
    rng = rng_for(qtype, n, 8)
    w, x = random_blocks(qtype, n, rng), activations(n, rng)
    y = _testing.quantize(int(T.Q8_K), x)
    expected = model_vec_dot(qtype, w, y)
    for isa in SIMD_ISAS:
        got = np.float32(_testing.vec_dot_raw(int(qtype), w, y, n, isa=isa))
        assert bits(got) == bits(expected), (isa, got, expected)


# -- the tiled GEMM's order (ggml-cpu tiled.cpp: batches of 8+ rows on non-repacked k-quants) --


def model_tiled_vec_dot(qtype: T, w: np.ndarray, y: np.ndarray) -> np.float32:
    """Per super-block: exact integer sums, r = f32(sumi) * d_x (minus dmin_x * summ in one FMA
    for the types with a minimum), acc = fma(r, d_y, acc)."""
    scaled_q, mins = integer_parts(qtype, w)
    d_x, dmin_x = super_scales(qtype, w)
    d_y, qs, bsums = split_q8_K(y)
    acc = np.float32(0)
    for b in range(d_y.size):
        blk = slice(b * QK_K, (b + 1) * QK_K)
        sumi = int((scaled_q[blk] * qs[b].astype(np.int64)).sum())
        r = np.float32(np.float32(sumi) * d_x[b])
        if qtype in HAS_MIN:
            summ = int((mins[blk] * qs[b].astype(np.int64)).sum())  # = sum over sub-blocks of m * bsum
            r = fma32(-dmin_x[b], np.float32(summ), r)
        acc = fma32(r, d_y[b], acc)
    return acc


@pytest.mark.parametrize("n", ROW_LENGTHS)
@pytest.mark.parametrize("qtype", KQUANTS)
def test_tiled_vec_dot_is_ggml_tiled_float_sequence_on_every_isa(qtype, n):
    rng = rng_for(qtype, n, 10)
    w, x = random_blocks(qtype, n, rng), activations(n, rng)
    y = _testing.quantize(int(T.Q8_K), x)
    expected = model_tiled_vec_dot(qtype, w, y)
    for isa in ISAS:
        got = np.float32(_testing.vec_dot_raw(int(qtype), w, y, n, isa=isa, order="tiled"))
        assert bits(got) == bits(expected), (isa, got, expected)
    # the same value as vec_dot up to float rounding, not a different dot product
    ref = _testing.vec_dot_raw(int(qtype), w, y, n, isa="scalar")
    d_y, qs, _ = split_q8_K(y)
    assert abs(float(expected) - ref) <= 4e-6 * abs_terms(qtype, w, np.abs(d_y[:, None] * qs.astype(np.float64)))


def test_vec_dot_raw_rejects_an_unknown_order():
    w = random_blocks(T.Q6_K, 256, rng_for(T.Q6_K, 11))
    y = _testing.quantize(int(T.Q8_K), np.ones(256, np.float32))
    with pytest.raises(Exception, match="order must be"):
        _testing.vec_dot_raw(int(T.Q6_K), w, y, 256, order="sideways")


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype", KQUANTS)
def test_vec_dot_of_zero_activations_is_zero(qtype, isa):
    w = random_blocks(qtype, 512, rng_for(qtype, 9))
    assert _testing.vec_dot(int(qtype), w, np.zeros(512, np.float32), isa=isa) == 0.0


# ---- real Gemma 3 tensors ----------------------------------------------------------------


def gemma_rows(path, type_name: str, count: int):
    f = _core.GgufFile(str(path))
    infos = [t for t in f.tensors() if t["type_name"] == type_name][:count]
    assert infos, f"no {type_name} tensor in {path}"
    for info in infos:
        n = info["shape"][0]
        row_bytes = n // QK_K * GGML_QUANT_SIZES[T.Q4_K if type_name == "q4_K" else T.Q6_K][1]
        data = f.tensor_data(info["name"])
        rows = data.size // row_bytes
        for r in (0, rows // 2, rows - 1):
            yield info["name"], n, data[r * row_bytes:(r + 1) * row_bytes]


@pytest.mark.realmodel
@pytest.mark.parametrize("qtype", [T.Q4_K, T.Q6_K])
def test_gemma3_rows_dequantize_bit_identical_and_dot_agrees(gemma3_path, qtype):
    x = activations(2048, rng_for(qtype, 10))
    for name, n, row in gemma_rows(gemma3_path, "q4_K" if qtype == T.Q4_K else "q6_K", 3):
        wf = gguf_dequantize(qtype, row)
        for isa in ISAS:
            np.testing.assert_array_equal(bits(_core.dequantize(int(qtype), row, n, isa=isa)), bits(wf), err_msg=name)
        y = _testing.quantize(int(T.Q8_K), x[:n])
        d_y, qs, _ = split_q8_K(y)
        bound = 4e-6 * abs_terms(qtype, row, np.abs(d_y[:, None] * qs.astype(np.float64)))
        ref = _testing.vec_dot_raw(int(qtype), row, y, n, isa="scalar")
        for isa in SIMD_ISAS:
            got = _testing.vec_dot_raw(int(qtype), row, y, n, isa=isa)
            assert abs(got - ref) <= bound, (name, isa, got, ref)
            assert bits(np.float32(got)) == bits(model_vec_dot(qtype, row, y)), (name, isa)


# ---- the Q8_K activation quantizer ---------------------------------------------------------------

def q8_K_rows() -> list[np.ndarray]:
    """Blocks that probe the quantizer's choices: random scales, the largest magnitude negative,
    the same magnitude twice with opposite signs (the first one sets the scale), an all-zero block,
    values that land on .5 steps of the scale, denormals beside large values."""
    rng = np.random.default_rng(8)
    rows = [(rng.standard_normal(1024) * rng.uniform(1e-3, 50)).astype(np.float32) for _ in range(6)]
    ties = np.zeros(512, np.float32)
    ties[:256] = rng.standard_normal(256)
    ties[7], ties[100] = 3.0, -3.0     # +3 first: iscale = -127 / 3
    ties[256 + 9], ties[256 + 40] = -2.0, 2.0   # -2 first
    halves = (np.arange(256, dtype=np.float32) - 127.5) / 127.5   # iscale * x on .5 steps
    tiny = rng.standard_normal(256).astype(np.float32)
    tiny[::3] = 1e-42
    rows += [ties, np.zeros(256, np.float32), halves, -halves, tiny]
    return rows


@pytest.mark.parametrize("isa", [isa for isa in ISAS if isa != "scalar"])
def test_q8_K_activations_are_the_reference_bytes(isa):
    for row in q8_K_rows():
        want = _testing.quantize(int(T.Q8_K), row, "scalar")
        got = _testing.quantize(int(T.Q8_K), row, isa)
        assert np.array_equal(got, want), (isa, np.flatnonzero(got != want)[:8])
