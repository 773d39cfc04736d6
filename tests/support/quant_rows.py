"""Rows for the kernel tests: random quantized blocks whose scales decode to finite values,
activations, machine-independent weight rows for quantizer digests, a seeded generator per test
case, and gguf-py's dequantization as the reference."""
from __future__ import annotations

from fractions import Fraction

import gguf
import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T

# Byte offset of a block's fp16 scale d (the k-quants keep theirs after the quants and scales).
SCALE_OFFSET = {T.Q4_0: 0, T.Q4_1: 0, T.Q5_0: 0, T.Q5_1: 0, T.Q8_0: 0,
                T.Q2_K: 80, T.Q3_K: 108, T.Q4_K: 0, T.Q5_K: 0, T.Q6_K: 208, T.IQ4_NL: 0, T.IQ4_XS: 0,
                T.MXFP4: 0,
                T.IQ2_XXS: 0, T.IQ2_XS: 0, T.IQ2_S: 0, T.IQ3_XXS: 0, T.IQ3_S: 0,
                T.IQ1_S: 0, T.TQ1_0: 52, T.TQ2_0: 64}
# IQ1_M has no d field: its fp16 d is the top nibbles of its four scale words (with_scale).
NIBBLE_SCALE = {T.IQ1_M}
# Types whose scale is an E8M0 byte (2^(e - 127), a bare exponent; halved for MXFP4's doubled
# table) rather than an fp16 d: random_blocks gives it 2^-5..2^0.
E8M0_SCALE = {T.MXFP4}
# Types with an fp16 minimum right after d: the legacy block minimum m, the k-quants' dmin.
HAS_MIN = {T.Q4_1, T.Q5_1, T.Q2_K, T.Q4_K, T.Q5_K}
_KQUANTS = {T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K}


def rng_for(*key) -> np.random.Generator:
    """A generator seeded by the test case (types, sizes, a case number), the same in every run."""
    return np.random.default_rng(abs(hash(tuple(int(k) for k in key))) % (2**32))


def random_blocks(qtype: T, n: int, rng: np.random.Generator, d_scale: float | None = None,
                  signed_d: bool = False) -> np.ndarray:
    """The bytes of n values of `qtype` blocks: every byte random but the fp16 scale d, |N(0, 1)|
    d_scale (N(0, 1) d_scale with `signed_d`), and the minimum after it where the type has one: a
    legacy block's m is N(0, 1) 0.5, a k-quant's dmin (subtracted) |N(0, 1)| d_scale. d_scale
    defaults to 0.05, and 0.02 for the k-quants. An E8M0 scale byte (MXFP4) is uniform over the
    exponents of 2^-5..2^0 instead (it has no sign, and d_scale does not apply). IQ1_M's d goes
    where with_scale puts it."""
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    kquant = qtype in _KQUANTS
    d_scale = d_scale if d_scale is not None else 0.02 if kquant else 0.05
    nb = n // block_size
    blocks = rng.integers(0, 256, size=(nb, type_size), dtype=np.uint8)
    if qtype in NIBBLE_SCALE:
        d = rng.standard_normal(nb)
        return with_scale(qtype, blocks, (d if signed_d else np.abs(d)) * d_scale).reshape(-1)
    o = SCALE_OFFSET[qtype]
    if qtype in E8M0_SCALE:
        blocks[:, o] = rng.integers(128 - 5, 128 + 1, size=nb)  # MXFP4 decodes 2^(e - 128)
        return blocks.reshape(-1)
    d = rng.standard_normal((nb, 1))
    blocks[:, o:o + 2] = ((d if signed_d else np.abs(d)) * d_scale).astype(np.float16).view(np.uint8)
    if qtype in HAS_MIN:
        m = np.abs(rng.standard_normal((nb, 1))) * d_scale if kquant else rng.standard_normal((nb, 1)) * 0.5
        blocks[:, o + 2:o + 4] = m.astype(np.float16).view(np.uint8)
    return blocks.reshape(-1)


def with_scale(qtype: T, blocks: np.ndarray, d: np.ndarray) -> np.ndarray:
    """blocks [nb, type_size] (uint8) with their fp16 super-block scale set to d [nb]: at
    SCALE_OFFSET, or for IQ1_M in the top nibbles of its four scale words (bytes 48..55)."""
    h = d.astype(np.float16).view(np.uint16)
    if qtype in NIBBLE_SCALE:
        words = blocks[:, 48:56].copy().view(np.uint16) & np.uint16(0x0FFF)
        for k in range(4):
            words[:, k] |= ((h >> np.uint16(4 * k)) & np.uint16(15)) << np.uint16(12)
        blocks[:, 48:56] = words.view(np.uint8)
    else:
        o = SCALE_OFFSET[qtype]
        blocks[:, o:o + 2] = h.view(np.uint8).reshape(-1, 2)
    return blocks


def activations(n: int, rng: np.random.Generator) -> np.ndarray:
    """n float32 activations, N(0, 1) scaled per 32-element block by 0.1..4, and with n >= 64 an
    all-zero second block (a Q8 block with d = 0)."""
    x = rng.standard_normal(n).astype(np.float32) * rng.uniform(0.1, 4.0, size=n // 32).repeat(32).astype(np.float32)
    if n >= 64:
        x[32:64] = 0.0
    return x


def integer_rows(rows: int, n: int, seed: int) -> np.ndarray:
    """Weight-like float32 rows from integer arithmetic alone (the same values on every machine and
    numpy version), for golden digests of quantizer bytes: a 32-bit LCG's values, scaled per row,
    with a heavier tail from their squares, some exact zeros, a constant row and an all-zero row."""
    state = (np.arange(rows * n, dtype=np.uint64) * np.uint64(2654435761) + np.uint64(seed)) % np.uint64(2**32)
    state = (state * np.uint64(1103515245) + np.uint64(12345)) % np.uint64(2**32)
    u = (state.astype(np.int64) - 2**31).astype(np.float64) / 2**31        # [-1, 1), exact
    x = (u + 0.5 * u ** 3) * (1 + np.arange(rows)[:, None].repeat(n, 1).reshape(-1) % 7)
    x = x.astype(np.float32).reshape(rows, n)
    x[1, ::5] = 0.0
    x[2] = 0.75
    x[3] = 0.0
    return x


def integer_imatrix(n: int, seed: int) -> np.ndarray:
    """Importance weights from integer arithmetic alone (exact in float32, the same on every
    machine): a 12-bit mantissa times 2^-20..2^19, every ninth one zero, and one zero 32-column
    slice (a block, or a k-quant sub-block, that counts for nothing)."""
    k = (np.arange(n, dtype=np.uint64) * np.uint64(2246822519) + np.uint64(seed)) % np.uint64(2**32)
    mantissa = ((k >> np.uint64(8)) % np.uint64(4096) + np.uint64(1)).astype(np.float64)
    exponent = (k % np.uint64(40)).astype(np.int64) - 20
    w = np.ldexp(mantissa, exponent).astype(np.float32)
    w[::9] = 0.0
    w[64:96] = 0.0
    return w


def gguf_dequantize(qtype: T, raw: np.ndarray) -> np.ndarray:
    """gguf-py's dequantization of a row's bytes (bit-identical to ggml's), as float32."""
    return gguf.quants.dequantize(raw.reshape(-1, GGML_QUANT_SIZES[qtype][1]), qtype).reshape(-1).astype(np.float32)


def q8_k_values(raw: np.ndarray) -> np.ndarray:
    """A Q8_K row's values d * q (not in gguf-py: float d, 256 int8, 16 int16 sums)."""
    blocks = raw.reshape(-1, 292)
    d = blocks[:, 0:4].copy().view(np.float32).astype(np.float64)
    return (blocks[:, 4:260].copy().view(np.int8).astype(np.float64) * d).reshape(-1)


def bits(a: np.ndarray) -> np.ndarray:
    """The float32 values' bit patterns, to compare floats exactly (NaNs and signed zeros too)."""
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def f32_round(r: Fraction) -> np.float32:
    """The float32 nearest to r, ties to even (exactly: compare the neighbours as fractions)."""
    f = np.float32(float(r))
    cands = [f, np.nextafter(f, np.float32(np.inf)), np.nextafter(f, np.float32(-np.inf))]
    best = min(cands, key=lambda c: (abs(Fraction(float(c)) - r), int(np.array(c).view(np.uint32)) & 1))
    return np.float32(best)


def fma32(a, b, c) -> np.float32:
    """float32 fma(a, b, c): the exact a * b + c rounded once, as the hardware instruction."""
    return f32_round(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)))


def tiled_order_dot(int_values: np.ndarray, d_x: np.ndarray, y: np.ndarray) -> np.float32:
    """One output in the order of ggml-cpu's tiled GEMM (tiled.cpp), float by float: per 256-element
    super-block b the exact integer sum of int_values (the weight's values as integers, sub-block
    scales included) times the Q8_K codes, r = f32(sum) * d_x[b] (the float32 weight scale, with
    any constant the integers leave out folded in), acc = fma(r, d_y, acc)."""
    raw = y.reshape(-1, 292)
    d_y = raw[:, 0:4].copy().view(np.float32).reshape(-1)
    qs = raw[:, 4:260].copy().view(np.int8).astype(np.int64)
    acc = np.float32(0)
    for b in range(d_y.size):
        isum = int((int_values[256 * b:256 * (b + 1)].astype(np.int64) * qs[b]).sum())
        acc = fma32(np.float32(np.float32(isum) * np.float32(d_x[b])), d_y[b], acc)
    return acc
