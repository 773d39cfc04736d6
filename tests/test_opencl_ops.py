"""Every OpenCL device op against the CPU reference, in the manner of llama.cpp's test-backend-ops:
random inputs, the op run on the device and on the CPU, an error bound per op and weight type.

Most ops mirror the CPU's arithmetic (the x86 AVX2 kernels, which the AVX-512 build shares for
these products) and must give its bits exactly, where this CPU has those kernels:
- matmul of quantized weights: the activations quantized to the weight type's vec_dot type (the
  CPU's from_float bytes), then per block the exact integers and the float order of the CPU's
  256-bit vec_dot (or of the repacked / tiled GEMM order cpu/matmul.cpp picks for the batch).
  The i-quants IQ4_NL and IQ4_XS too: their table (kIq4nlValues) reaches the device through the
  generated prelude, checked here value for value; and the 2- and 3-bit lattice i-quants (IQ2_XXS,
  IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) and 1-bit ones (IQ1_S, IQ1_M), whose grids (quant/iq_grids.h,
  iq1_grids.h) reach it as generated files; the ternary TQ1_0, TQ2_0; and MXFP4 (IQ4_NL's loop with
  its own table and E8M0 scale).
  F32/F16 weights multiply float activations (the CPU rounds them to F16 for F16 weights): a bound.
- attention over an F16 cache: ggml's one-row kernel (Q in F16, F16 accumulator), exactly but
  for exp where the device lacks doubles. Over a quantized cache the device attends in float
  (the CPU quantizes Q to 8 bits): bounds. The K/V store writes the CPU cache's bytes exactly,
  K rotated and centered with its F16 sink rows and means included (gpu/device_kv.h).
- swiglu (ggml's expf polynomial), geglu (ggml's F16 table), add, LFM2's short convolution (against
  a float32 numpy formula in the CPU's order): exact. rope (the CPU's own
  cos/sin table, its FMA rounding) and rms_norm (squares summed in double) are checked here
  against numpy formulas within bounds; the forward tests (test_opencl_offload.py) check that a
  whole model's logits are the CPU's bits.

Also here: the block layouts of the generated prelude equal the core's, the program cache
(compile errors with the build log, binaries reused from disk, corrupt files rebuilt) and bad
input. PoCL is installed by scripts/test.sh; without a device these tests skip, except under
CI=true or EDGEINFER_REQUIRE_MODELS=1, where they fail (conftest.py's device fixtures).
"""
from __future__ import annotations

import os

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from edgeinfer import _core
from edgeinfer import _testing
from edgeinfer.gpu.devices import list_devices, opencl_library
from support.numpy_reference import causal_attention
from support.quant_rows import random_blocks

# The lattice i-quants: one float order for the five 2- and 3-bit ones (cpu/x86/iq23_256.h), one
# each for the 1-bit ones (cpu/x86/iq1_tq_256.h).
IQ23_TYPES = [T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS, T.IQ3_S]
LATTICE_TYPES = IQ23_TYPES + [T.IQ1_S, T.IQ1_M]
TERNARY_TYPES = [T.TQ1_0, T.TQ2_0]
QUANTIZED_TYPES = ([T.Q4_0, T.Q4_1, T.Q5_0, T.Q8_0, T.Q4_K, T.Q6_K, T.IQ4_NL, T.IQ4_XS] + LATTICE_TYPES + TERNARY_TYPES
                   + [T.MXFP4])
MATMUL_TYPES = [T.F32, T.F16] + QUANTIZED_TYPES
# Weights as random blocks rather than the quantizer's output: every byte random but d, so the
# rows reach every table index, grid point, sign pattern and sub-block scale (IQ4_XS's 6-bit
# ls - 32 from -32 to 31; TQ2_0's unused digit 3 too), which a quantizer's rows of Gaussian weights
# use only a part of.
RANDOM_BLOCK_TYPES = {T.IQ4_NL, T.IQ4_XS, *LATTICE_TYPES, *TERNARY_TYPES, T.MXFP4}

# The reference kernels the device mirrors (x86 only; elsewhere the exactness tests skip).
HAS_AVX2 = "avx2" in _core.available_isas()
needs_avx2 = pytest.mark.skipif(not HAS_AVX2, reason="the device mirrors the x86 AVX2 kernels")

# Normalized mean squared error of the float weight types, device vs the CPU kernel
# (test-backend-ops allows 5e-4 for mul_mat). Measured on PoCL: F32 ~3e-14, F16 ~8e-8 (the CPU
# rounds the activations to F16); the bounds leave >= 10x room. Against the exact float64
# product both measured ~1.5e-14.
NMSE_VS_CPU = {T.F32: 1e-12, T.F16: 1e-6}
NMSE_VS_EXACT = 1e-10  # float32 sums of exactly the weights the blocks encode
# Quantized weights where the AVX2 kernels are missing: the same integers, another float order.
NMSE_QUANTIZED_OTHER_ORDER = 1e-10


@pytest.fixture(scope="module")
def dev(device_index, tmp_path_factory) -> _testing.OpenCLDevice:
    cache = tmp_path_factory.mktemp("opencl-cache")
    return _testing.OpenCLDevice(device_index, library=opencl_library(),
                              cache_dir=str(cache))


def nmse(got: np.ndarray, want: np.ndarray) -> float:
    want = np.asarray(want, dtype=np.float64)
    return float(np.sum((np.asarray(got, np.float64) - want) ** 2) / np.sum(want ** 2))


def weight_rows(type_: T, rows: int, cols: int, rng: np.random.Generator) -> np.ndarray:
    """Random weights as rows of `type_` blocks (uint8 [rows, row_bytes])."""
    w = rng.standard_normal((rows, cols)).astype(np.float32)
    if type_ == T.F32:
        return w.view(np.uint8).reshape(rows, -1)
    if type_ == T.F16:
        return w.astype(np.float16).view(np.uint8).reshape(rows, -1)
    if type_ in RANDOM_BLOCK_TYPES:
        return random_blocks(type_, rows * cols, rng, signed_d=True).reshape(rows, -1)
    return _core.quantize_rows(int(type_), w)


def dequantized(type_: T, w: np.ndarray, cols: int) -> np.ndarray:
    return np.stack([_core.dequantize(int(type_), row, cols) for row in w]).astype(np.float64)


# ---- block layouts --------------------------------------------------------------------------

def _type_ids_by_name() -> dict[str, int]:
    ids = {}
    for t in T:
        try:
            ids[_core.type_info(int(t))["name"]] = int(t)
        except _core.EdgeInferError:
            pass
    return ids


def test_prelude_defines_every_block_of_the_core():
    prelude = _testing.opencl_block_prelude()
    host = _testing.opencl_host_block_layouts()
    blocks = {b for b, _, _ in host}
    assert {"block_q4_0", "block_q4_K", "block_q6_K", "block_q8_K"} <= blocks
    for b in blocks:
        assert f"}} {b};" in prelude
    assert "#define QK_K 256" in prelude and "#define QK4_0 32" in prelude


def test_host_block_sizes_are_the_type_tables():
    ids = _type_ids_by_name()
    sizes = {b: v for b, f, v in _testing.opencl_host_block_layouts() if f == ""}
    for block, size in sizes.items():
        name = block.removeprefix("block_")
        assert size == _core.type_info(ids[name])["type_size"], block


def test_device_lays_out_the_prelude_as_the_core_does(dev):
    host = _testing.opencl_host_block_layouts()
    assert dev.block_layouts() == host
    assert len(host) > 40  # every field of every struct, not only the sizes


def test_device_reads_the_preludes_tables_as_the_core_has_them(dev):
    # The i-quants' and MXFP4's 16 values: defined once (quant/blocks.h), generated into the prelude;
    # the lattice grids of
    # quant/iq_grids.h and iq1_grids.h (checked against gguf-py's in test_iq23.py, test_iq1_tq.py),
    # generated into iq_grids.cl / iq1_grids.cl, 64-bit points compared as their bit patterns.
    host = _testing.opencl_host_block_tables()
    assert list(host) == ["kIq4nlValues", "kMxfp4Values", "kIq2xxsGrid", "kIq2xsGrid", "kIq2sGrid",
                          "kIq3xxsGrid", "kIq3sGrid", "kIq1sGrid"]
    assert [len(host[g]) for g in ("kIq2xxsGrid", "kIq2xsGrid", "kIq2sGrid", "kIq3xxsGrid", "kIq3sGrid",
                                   "kIq1sGrid")] == [256, 512, 1024, 256, 512, 2048]
    assert tuple(host["kIq4nlValues"]) == tuple(gguf.quants.IQ4_NL.kvalues)  # ggml's kvalues_iq4nl
    assert tuple(host["kMxfp4Values"]) == tuple(gguf.quants.MXFP4.kvalues)  # ggml's kvalues_mxfp4
    assert "__constant char kIq4nlValues[16] = {" in _testing.opencl_block_prelude()
    assert dev.block_tables() == host


# ---- matmul ---------------------------------------------------------------------------------

@pytest.mark.parametrize("type_", [T.F32, T.F16], ids=lambda t: t.name)
@pytest.mark.parametrize("n", [1, 3, 11])  # mat-vec; mat-mat within one tile; across tiles of 8
def test_float_matmul_matches_the_cpu(dev, type_, n):
    rng = np.random.default_rng(int(type_) * 100 + n)
    rows, cols = 37, 512
    w = weight_rows(type_, rows, cols, rng)
    x = rng.standard_normal((n, cols)).astype(np.float32)
    got = dev.matmul(int(type_), w, x)
    assert got.shape == (n, rows)
    exact = x.astype(np.float64) @ dequantized(type_, w, cols).T
    assert nmse(got, exact) < NMSE_VS_EXACT
    cpu = _testing.gemm(int(type_), w, rows, x, by_vec_dot=True)
    assert nmse(got, cpu) < NMSE_VS_CPU[type_]


def cpu_order(type_: T, rows: int, n: int, t: int) -> str:
    """The float order cpu/matmul.cpp uses for activation row t of a batch of n."""
    if type_ == T.Q4_K and rows % 8 == 0:  # repacked like llama.cpp: GEMM on whole groups of 4
        return "repacked_gemm" if t < n - n % 4 else "repacked"
    # ggml's tiled GEMM (llama.cpp 11434's for IQ4_XS)
    if type_ in (T.Q4_K, T.Q6_K, T.IQ4_XS, *LATTICE_TYPES) and n >= 8:
        return "tiled"
    return "vec_dot"


def cpu_matmul_avx2(type_: T, w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """[n, rows] as the CPU's AVX2 matmul computes it, one vec_dot call per output."""
    act = _testing.vec_dot_type(int(type_))
    rows, (n, cols) = w.shape[0], x.shape
    y = np.empty((n, rows), np.float32)
    for t in range(n):
        a = _testing.quantize(act, x[t], isa="avx2")
        order = cpu_order(type_, rows, n, t)
        for r in range(rows):
            y[t, r] = _testing.vec_dot_raw(int(type_), w[r], a, cols, isa="avx2", order=order)
    return y


@pytest.mark.parametrize("type_", QUANTIZED_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("rows", [37, 40])  # Q4_K: 40 rows are repacked on the CPU, 37 not
@pytest.mark.parametrize("n", [1, 3, 6, 8, 11])  # single rows; GEMM groups of 4 + rest; tiled from 8
def test_quantized_matmul_is_the_cpus_bit_for_bit(dev, type_, rows, n):
    rng = np.random.default_rng(int(type_) * 1000 + rows * 10 + n)
    cols = 512  # 2 k-quant super-blocks, 16 blocks of 32
    w = weight_rows(type_, rows, cols, rng)
    # Some large values, as real activations have: they make 8-bit roundings matter.
    x = (rng.standard_normal((n, cols)) * rng.choice([1.0, 40.0], (n, cols), p=[0.98, 0.02])).astype(np.float32)
    got = dev.matmul(int(type_), w, x)
    assert got.shape == (n, rows)
    if HAS_AVX2:
        np.testing.assert_array_equal(got, cpu_matmul_avx2(type_, w, x))
    else:
        assert nmse(got, _testing.gemm(int(type_), w, rows, x, by_vec_dot=True)) < NMSE_QUANTIZED_OTHER_ORDER


@needs_avx2
@pytest.mark.parametrize("type_", [T.Q4_0, T.Q4_K, T.Q6_K, T.IQ4_NL, T.IQ4_XS, T.IQ2_XXS, T.IQ3_S, T.IQ1_M,
                                   T.TQ1_0], ids=lambda t: t.name)
def test_quantized_matmul_of_long_rows(dev, type_):
    # 96 blocks of 32 (12 super-blocks) a row, the longest the models have is 64.
    rng = np.random.default_rng(7)
    rows, cols = 8, 3072
    w = weight_rows(type_, rows, cols, rng)
    x = (rng.standard_normal((9, cols)) * 3).astype(np.float32)
    np.testing.assert_array_equal(dev.matmul(int(type_), w, x[:1]), cpu_matmul_avx2(type_, w, x[:1]))
    np.testing.assert_array_equal(dev.matmul(int(type_), w, x), cpu_matmul_avx2(type_, w, x))


@pytest.mark.parametrize("type_", [T.IQ4_NL, T.MXFP4], ids=lambda t: t.name)
@pytest.mark.parametrize("cols", [32, 96, 544])  # 1, 3 and 17 blocks
@pytest.mark.parametrize("n", [1, 5])
def test_table4_matmul_of_an_odd_block_count(dev, type_, cols, n):
    # The CPU takes IQ4_NL and MXFP4 blocks in pairs and the last of an odd count apart (its own
    # rounding, added after the lanes' sum): rows of 512 values above never have one.
    rng = np.random.default_rng(int(type_) * 10000 + cols * 10 + n)
    rows = 13
    w = weight_rows(type_, rows, cols, rng)
    x = (rng.standard_normal((n, cols)) * 3).astype(np.float32)
    got = dev.matmul(int(type_), w, x)
    if HAS_AVX2:
        np.testing.assert_array_equal(got, cpu_matmul_avx2(type_, w, x))
    else:
        assert nmse(got, _testing.gemm(int(type_), w, rows, x, by_vec_dot=True)) < NMSE_QUANTIZED_OTHER_ORDER


@needs_avx2
def test_mxfp4_matmul_over_every_scale_byte(dev):
    # The E8M0 scale 2^(e - 128) for every e: the subnormals of e = 0, 1, the top ones whose products
    # overflow (inf, and NaN where infinities of both signs meet, on both sides alike).
    rng = np.random.default_rng(4)
    rows, cols = 16, 512  # 256 blocks
    w = weight_rows(T.MXFP4, rows, cols, rng).reshape(256, -1)
    w[:, 0] = np.arange(256)
    w = w.reshape(rows, -1)
    x = (rng.standard_normal((3, cols)) * 3).astype(np.float32)
    np.testing.assert_array_equal(dev.matmul(int(T.MXFP4), w, x), cpu_matmul_avx2(T.MXFP4, w, x))


@needs_avx2
@pytest.mark.parametrize("type_", LATTICE_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("n", [1, 8])  # vec_dot's order; the tiled one
def test_lattice_iquant_matmul_over_every_grid_point(dev, type_, n):
    # 256 rows of 4 super-blocks: 32768 random groups, so every point of the largest grid (IQ1's
    # 2048) and every sign code and scale is all but certainly drawn, where the rows above hold
    # 2368 groups.
    rng = np.random.default_rng(int(type_) * 10 + n)
    rows, cols = 256, 1024
    w = weight_rows(type_, rows, cols, rng)
    x = (rng.standard_normal((n, cols)) * 3).astype(np.float32)
    np.testing.assert_array_equal(dev.matmul(int(type_), w, x), cpu_matmul_avx2(type_, w, x))


@pytest.mark.parametrize("act", [T.Q8_0, T.Q8_1, T.Q8_K], ids=lambda t: t.name)
def test_activation_quantizers_write_the_cpus_bytes(dev, act):
    rng = np.random.default_rng(int(act))
    x = rng.standard_normal((6, 512)).astype(np.float32)
    x[1] = 0.0                                      # all-zero blocks
    x[2] = np.round(x[2] * 8) / 8                   # values on a coarse grid: rounding ties
    x[3] *= 1e-30                                   # tiny scales
    x[4, ::37] = 300.0                              # outliers set the block scale
    x[5, :256] = -x[5, :256].max()                  # equal magnitudes: the first one wins (Q8_K)
    got = dev.quantize(int(act), x)
    want = np.stack([_testing.quantize(int(act), row) for row in x])
    np.testing.assert_array_equal(got, want)


def test_matmul_refuses_an_unsupported_type_and_a_bad_shape(dev):
    rng = np.random.default_rng(0)
    w = weight_rows(T.Q4_0, 4, 64, rng)
    with pytest.raises(_core.EdgeInferError, match="no OpenCL matmul for weight type q5_1"):
        dev.matmul(int(T.Q5_1), _core.quantize_rows(int(T.Q5_1), np.ones((4, 64), np.float32)),
                   np.ones((1, 64), np.float32))
    with pytest.raises(_core.EdgeInferError, match="each weight row"):
        dev.matmul(int(T.Q4_0), w, np.ones((1, 96), np.float32))
    f32 = np.ones((2, 48), np.float32).view(np.uint8).reshape(2, -1)
    with pytest.raises(_core.EdgeInferError, match="not a whole number of 32-value chunks"):
        dev.matmul(int(T.F32), f32, np.ones((1, 48), np.float32))


# ---- norm, rope, activations, add -----------------------------------------------------------

def test_rms_norm_matches_the_cpu_formula(dev):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((5, 576)) * 3).astype(np.float32)
    w = rng.standard_normal(576).astype(np.float32)
    eps = 1e-5
    # The CPU's rms_norm (layers/cpu_blocks.cpp): sum of squares in double, two float multiplies.
    x64 = x.astype(np.float64)
    scale = (1.0 / np.sqrt((x64 ** 2).mean(axis=1, keepdims=True) + eps)).astype(np.float32)
    want = (x * scale) * w
    got = dev.rms_norm(x, w, eps)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


def rope_cs(pos: int, n_rot: int, base: float, scale: float, factors=None) -> np.ndarray:
    """The CPU's angle table (layers/cpu_blocks.cpp rope_apply): float32 repeated products."""
    theta_scale = np.float32(base) ** np.float32(-2.0 / n_rot)
    theta = np.float32(pos)
    cs = np.empty(n_rot, np.float32)
    for i0 in range(0, n_rot, 2):
        ff = np.float32(1.0 if factors is None else factors[i0 // 2])
        angle = np.float32(scale) * (theta / ff)
        cs[i0], cs[i0 + 1] = np.cos(angle), np.sin(angle)
        theta = np.float32(theta * theta_scale)
    return cs


@pytest.mark.parametrize("neox", [False, True], ids=["normal", "neox"])
@pytest.mark.parametrize("n_rot", [64, 32], ids=["full", "partial"])
def test_rope_matches_the_cpu(dev, neox, n_rot):
    rng = np.random.default_rng(2)
    n, heads, head_dim = 4, 3, 64
    x = rng.standard_normal((n, heads, head_dim)).astype(np.float32)
    pos = np.array([0, 1, 17, 1000], np.int32)
    factors = (1.0 + rng.random(n_rot // 2)).astype(np.float32) if n_rot == 32 else None
    got = dev.rope(x, pos, n_rot, 10000.0, freq_scale=0.5, neox=neox, freq_factors=factors)
    rotate = _testing.rope_rotate_neox if neox else _testing.rope_rotate
    want = np.stack([rotate(x[t], rope_cs(int(pos[t]), n_rot, 10000.0, 0.5, factors))
                     for t in range(n)])
    # Angles up to 500 rad: float32 angle rounding alone is ~3e-5 there.
    np.testing.assert_allclose(got, want, atol=2e-4)
    np.testing.assert_array_equal(got[..., n_rot:], x[..., n_rot:])  # unrotated dims untouched


def test_swiglu_and_geglu_match_the_cpu(dev):
    rng = np.random.default_rng(3)
    gate = (rng.standard_normal(3000) * 4).astype(np.float32)
    gate[:4] = [-12.0, 12.0, 0.0, -10.5]  # the clamps at |g| > 10
    up = rng.standard_normal(3000).astype(np.float32)
    np.testing.assert_allclose(dev.swiglu(gate, up), _testing.swiglu(gate, up), rtol=1e-5, atol=1e-6)
    # The CPU rounds gate to F16 for its table lookup: an F16 ulp of gate (2^-11 relative) times
    # gelu's slope (<= 1.13) times |up|.
    cpu = _testing.geglu(gate, up)
    bound = 1.2 * np.abs(gate) * 2.0 ** -10 * np.abs(up) + 1e-6
    assert np.all(np.abs(dev.geglu(gate, up) - cpu) <= bound)
    if HAS_AVX2:  # the kernels the device mirrors: ggml's expf polynomial, the FMA-built F16 table
        np.testing.assert_array_equal(dev.swiglu(gate, up), _testing.swiglu(gate, up, isa="avx2"))
        np.testing.assert_array_equal(dev.geglu(gate, up), _testing.geglu(gate, up, isa="avx2"))


def test_add_is_exact(dev):
    rng = np.random.default_rng(4)
    y, x = rng.standard_normal((2, 1000)).astype(np.float32)
    np.testing.assert_array_equal(dev.add(y, x), y + x)


def short_conv_reference(bcx: np.ndarray, taps: np.ndarray, state: np.ndarray, fresh: bool):
    """LFM2's short convolution in float32, rounding where layers/cpu_shortconv.cpp does: B*x,
    each product, each partial sum from the oldest tap, then C times the sum."""
    d, l = taps.shape
    window = np.concatenate([np.zeros_like(state) if fresh else state, (bcx[:, :d] * bcx[:, 2 * d:]).T], axis=1)
    y = np.empty((len(bcx), d), np.float32)
    for t in range(len(bcx)):
        acc = np.zeros(d, np.float32)
        for j in range(l):
            acc = acc + window[:, t + j] * taps[:, j]
        y[t] = bcx[t, d:2 * d] * acc
    return y, window[:, len(bcx):]


@pytest.mark.parametrize("n, l", [(1, 3), (2, 4), (7, 3), (5, 64)])
def test_short_conv_is_the_cpus_order_exactly(dev, n, l):
    # Fewer rows than the state (the state shifts through), more, and llama.cpp's largest kernel;
    # a state carried from a previous call and a fresh sequence (whose stale state is ignored).
    rng = np.random.default_rng(n * 100 + l)
    d = 40
    bcx = rng.standard_normal((n, 3 * d)).astype(np.float32)
    taps = rng.standard_normal((d, l)).astype(np.float32)
    state = rng.standard_normal((d, l - 1)).astype(np.float32)
    for fresh in (False, True):
        y, new_state = dev.short_conv(bcx, taps, state, fresh)
        want_y, want_state = short_conv_reference(bcx, taps, state, fresh)
        np.testing.assert_array_equal(y, want_y, err_msg=f"fresh={fresh}")
        np.testing.assert_array_equal(new_state, want_state, err_msg=f"fresh={fresh}")


# ---- attention over the device KV cache -----------------------------------------------------

KV_TYPES = [T.F16, T.Q8_0, T.Q4_0]


def stored_rows(type_: T, raw: np.ndarray, shape: tuple) -> np.ndarray:
    """The device's cache rows (uint8 [n_kv, row_bytes]) dequantized to float64 [n_kv, Hkv, d]."""
    width = shape[1] * shape[2]
    return np.stack([_core.dequantize(int(type_), row, width) for row in raw]).reshape(shape).astype(np.float64)


def type_name(type_: T) -> str:
    return _core.type_info(int(type_))["name"]


def cpu_stored_bytes(type_: T, rows: np.ndarray) -> np.ndarray:
    """What the CPU's cache stores for these rows [n_kv, n_head_kv, head_dim]: F16 bits, or its
    quantizer's blocks (the K rows of a one-layer cache's rows blob), [n_kv, row_bytes]."""
    flat = rows.reshape(rows.shape[0], -1)
    if type_ == T.F16:
        return flat.astype(np.float16).view(np.uint8)  # numpy rounds to nearest even, as the core
    q = np.zeros((1, rows.shape[1], rows.shape[2]), np.float32)
    blob = _testing.kv_cache_attention(q, rows, rows, pos0=rows.shape[0] - 1, type_k=type_name(type_),
                                    type_v=type_name(type_))[1]
    return blob[:blob.size // 2].reshape(rows.shape[0], -1)


def cpu_attention_f16(q, k_raw, v_raw, shape, pos0, window, scale) -> np.ndarray:
    """The CPU's one-row F16 kernel (AVX2) for every query and head over the stored rows."""
    n, n_head, d = q.shape
    n_kv, n_head_kv = shape[0], shape[1]
    k16 = k_raw.view(np.uint16).reshape(n_kv, n_head_kv, d)
    v16 = v_raw.view(np.uint16).reshape(n_kv, n_head_kv, d)
    out = np.empty(q.shape, np.float32)
    for t in range(n):
        last = pos0 + t
        first = max(0, last - window + 1) if window > 0 else 0
        for h in range(n_head):
            hk = h // (n_head // n_head_kv)
            out[t, h] = _testing.attn_f16_row(q[t, h], np.ascontiguousarray(k16[first:last + 1, hk]),
                                           np.ascontiguousarray(v16[first:last + 1, hk]), scale, isa="avx2")
    return out


@pytest.mark.parametrize("type_k,type_v", [(T.F16, T.F16), (T.Q8_0, T.Q8_0), (T.Q4_0, T.Q4_0), (T.Q8_0, T.F16)],
                         ids=["f16", "q8_0", "q4_0", "q8_0-f16"])
@pytest.mark.parametrize("n,pos0,window", [(1, 99, 0), (5, 70, 0), (70, 0, 0), (6, 100, 32)],
                         ids=["decode", "chunk-after-prompt", "prompt-over-a-tile", "window"])
def test_attention_matches_the_oracle_on_the_stored_cache(dev, type_k, type_v, n, pos0, window):
    rng = np.random.default_rng(5)
    n_head, n_head_kv, d = 6, 2, 64
    n_kv = pos0 + n
    q = rng.standard_normal((n, n_head, d)).astype(np.float32)
    k = rng.standard_normal((n_kv, n_head_kv, d)).astype(np.float32)
    v = rng.standard_normal((n_kv, n_head_kv, d)).astype(np.float32)
    scale = 1.0 / np.sqrt(d)
    got, k_raw, v_raw = dev.attention(q, k, v, pos0=pos0, window=window, scale=scale,
                                      type_k=int(type_k), type_v=int(type_v))
    # The device stores exactly the CPU cache's bytes (F16 rounding, the cache's quantizers).
    np.testing.assert_array_equal(k_raw, cpu_stored_bytes(type_k, k))
    np.testing.assert_array_equal(v_raw, cpu_stored_bytes(type_v, v))
    if type_k == T.F16 and type_v == T.F16:
        # ggml's one-row kernel, F16 accumulator and all: the CPU's bits (where this CPU has the
        # AVX2 kernels the device mirrors), else within its F16 rounding of the oracle.
        if HAS_AVX2:
            np.testing.assert_array_equal(got, cpu_attention_f16(q, k_raw, v_raw, k.shape, pos0, window, scale))
        else:
            k64, v64 = stored_rows(type_k, k_raw, k.shape), stored_rows(type_v, v_raw, v.shape)
            np.testing.assert_allclose(got, causal_attention(q, k64, v64, pos0, window, scale), atol=4e-3)
        return
    k64, v64 = stored_rows(type_k, k_raw, k.shape), stored_rows(type_v, v_raw, v.shape)
    np.testing.assert_allclose(got, causal_attention(q, k64, v64, pos0, window, scale), atol=2e-5)


@pytest.mark.parametrize("head_dim", [64, 256])  # SmolLM2's and Gemma 3's head sizes
@pytest.mark.parametrize("kv", KV_TYPES, ids=lambda t: t.name)
def test_attention_matches_the_cpu_kernel_for_a_decode_step(dev, head_dim, kv):
    rng = np.random.default_rng(6)
    n_head, n_head_kv, n_kv = 4, 2, 300
    q = rng.standard_normal((n_head, head_dim)).astype(np.float32)
    k = rng.standard_normal((n_kv, n_head_kv, head_dim)).astype(np.float32)
    v = rng.standard_normal((n_kv, n_head_kv, head_dim)).astype(np.float32)
    name = _core.type_info(int(kv))["name"]
    cpu, _, _ = _testing.attention_kv(q, k, v, type_k=name, type_v=name)  # last position over all rows
    got, _, _ = dev.attention(q[None], k, v, pos0=n_kv - 1, scale=1.0 / np.sqrt(head_dim),
                              type_k=int(kv), type_v=int(kv))
    # Quantized caches: the CPU rounds Q to 8 bits (for integer dot products), the device attends
    # in float (its result equals the float64 oracle over the stored rows, above): measured up
    # to ~3.3e-2 (Q4_0) of |V| ~ 1. F16: the same kernel on both, so equal (below).
    np.testing.assert_allclose(got[0], cpu, atol=4e-3 if kv == T.F16 else 5e-2)
    if kv == T.F16 and HAS_AVX2:  # the device runs the CPU's F16 kernel: its bits
        k_raw = k.astype(np.float16).view(np.uint8).reshape(n_kv, -1)
        v_raw = v.astype(np.float16).view(np.uint8).reshape(n_kv, -1)
        want = cpu_attention_f16(q[None], k_raw, v_raw, k.shape, n_kv - 1, 0, 1.0 / np.sqrt(head_dim))
        np.testing.assert_array_equal(got, want)


# ---- a rotated and centered K cache (kv/hadamard.h, kv/centered_k.h) on the device -----------

def oracle_over_cpu_rows(q, k_floats, v_floats, pos0, window):
    """causal_attention over the rows as the CPU cache's attention sees them (dequantized,
    un-rotated, un-centered: _testing.kv_cache_attention's K and V)."""
    return causal_attention(q, k_floats, v_floats, pos0, window)


def kv_rows(rng, n_kv, n_head_kv, d):
    """K rows with a large common direction per head (what centering removes), V rows around a
    mean: [n_kv, n_head_kv, d] each."""
    k = rng.standard_normal((n_kv, n_head_kv, d)) + 3 * rng.standard_normal((n_head_kv, d))
    v = rng.standard_normal((n_kv, n_head_kv, d)) + rng.standard_normal((n_head_kv, d))
    return k.astype(np.float32), v.astype(np.float32)


@pytest.mark.parametrize("head_dim", [64, 256])
def test_rotated_f16_keys_are_the_cpus_bits(dev, head_dim):
    # An F16 K holds R k exactly rounded, and R q meets it in the F16 kernel: both rotations
    # (keys on store, queries before attention) must be the CPU's to the bit.
    rng = np.random.default_rng(11)
    n_head, n_head_kv, pos0, n = 4, 2, 70, 3
    q = rng.standard_normal((n, n_head, head_dim)).astype(np.float32)
    k, v = kv_rows(rng, pos0 + n, n_head_kv, head_dim)
    isa = "avx2" if HAS_AVX2 else None
    cpu, blob, k_floats, v_floats = _testing.kv_cache_attention(q, k, v, pos0, "f16", "f16", rotate_k=True, isa=isa)
    got, dev_blob = dev.kv_cache_attention(q, k, v, pos0, int(T.F16), int(T.F16), rotate_k=True, chunk=32)
    np.testing.assert_array_equal(dev_blob, blob)
    assert not np.array_equal(blob[:k.size * 2], k.astype(np.float16).view(np.uint8).ravel())  # K was rotated
    if HAS_AVX2:
        np.testing.assert_array_equal(got, cpu)
    else:
        np.testing.assert_allclose(got, oracle_over_cpu_rows(q, k_floats, v_floats, pos0, 0), atol=4e-3)


# (pos0, n, chunk, window): queries at positions pos0 .. pos0 + n - 1 over rows stored `chunk`
# positions at a time; SmolLM2's head size (64) in every case, Gemma 3's (256) in the shorter ones.
_POSITIONS = {"below-the-sink": (30, 4, 16, 0), "across-in-a-step": (60, 8, 64, 0), "decode": (90, 5, 40, 0),
              "prompt-across": (0, 100, 100, 0), "window": (120, 6, 32, 48)}
CENTERED_CASES = [(hd, *case) for hd in (64, 256) for case in _POSITIONS.values() if hd == 64 or sum(case[:2]) <= 100]
CENTERED_CASE_IDS = [f"{name}-{hd}" for hd in (64, 256) for name, case in _POSITIONS.items()
                     if hd == 64 or sum(case[:2]) <= 100]


@pytest.mark.parametrize("types,rotate", [(("q4_0", "q4_0"), True), (("q4_0", "f16"), True), (("q4_0", "q8_0"), True),
                                          (("q8_0", "q8_0"), True), (("q4_0", "q4_0"), False)],
                         ids=["q4_0", "q4_0-f16", "q4_0-q8_0", "q8_0", "q4_0-unrotated"])
@pytest.mark.parametrize("head_dim,pos0,n,chunk,window", CENTERED_CASES, ids=CENTERED_CASE_IDS)
def test_centered_cache_stores_the_cpus_bytes_and_attends_over_them(dev, types, rotate, pos0, n, chunk, window,
                                                                     head_dim):
    # The rows blob (copy_rows_out: quantized rows, F16 sink rows of positions < 64, mu / s / nu)
    # after storing `chunk` positions at a time on the device equals the CPU cache's byte for
    # byte: centering, rotation, the q4_0 scale search, the sink rows and mu / s / nu (computed
    # on the host from the device's sink rows). Attention over it is float on the device: within
    # float rounding of the float64 oracle over the rows as stored (measured <= 3.4e-6 on PoCL).
    # The CPU's own attention rounds Q to 8 bits for its integer dot products (measured <= 8.3e-3).
    rng = np.random.default_rng(12)
    n_head, n_head_kv = 4, 2
    q = rng.standard_normal((n, n_head, head_dim)).astype(np.float32)
    k, v = kv_rows(rng, pos0 + n, n_head_kv, head_dim)
    tk, tv = types
    cpu, blob, k_floats, v_floats = _testing.kv_cache_attention(q, k, v, pos0, tk, tv, rotate_k=rotate, center_k=True,
                                                             window=window)
    got, dev_blob = dev.kv_cache_attention(q, k, v, pos0, int(T[tk.upper()]), int(T[tv.upper()]), rotate_k=rotate,
                                           center_k=True, window=window, chunk=chunk)
    np.testing.assert_array_equal(dev_blob, blob)
    np.testing.assert_allclose(got, oracle_over_cpu_rows(q, k_floats, v_floats, pos0, window), atol=1e-5)
    np.testing.assert_allclose(got, cpu, atol=2e-2)


# ---- attention sinks (gpt-oss: a per-head logit in the softmax's denominator) -----------------

# (pos0, n, chunk, window): prompt rows, a chunk after a prompt, a decode step, a sliding window
# (gpt-oss alternates windowed and full layers); rows stored `chunk` positions at a time.
_SINK_POSITIONS = {"prompt": (0, 12, 12, 0), "chunk-after-prompt": (70, 5, 35, 0), "decode": (99, 1, 50, 0),
                   "window": (100, 6, 53, 32), "window-decode": (120, 1, 60, 16)}


def sink_logits(rng, n_head: int) -> np.ndarray:
    """Per-head sinks on both sides of the heads' largest scores: one far above (the sink becomes
    the maximum and rescales the sum), one far below (it adds next to nothing), the rest near."""
    sinks = rng.normal(0.0, 1.5, n_head).astype(np.float32)
    sinks[0], sinks[1] = 30.0, -30.0
    return sinks


@pytest.mark.parametrize("types,rotate,center", [(("f16", "f16"), False, False), (("q8_0", "q8_0"), False, False),
                                                 (("q4_0", "q4_0"), True, True)],
                         ids=["f16", "q8_0", "q4_0-centered"])
@pytest.mark.parametrize("pos0,n,chunk,window", list(_SINK_POSITIONS.values()), ids=list(_SINK_POSITIONS))
def test_attention_with_sinks_is_the_cpus(dev, types, rotate, center, pos0, n, chunk, window):
    # Six query heads over two KV heads (grouped), the sink applied once per query after its
    # positions: over an F16 cache the CPU's one-row kernel's bits (the sink's step on M and S
    # with the CPU's fma and exp); over quantized caches the device attends in float, within
    # float rounding of the float64 oracle (the CPU rounds Q to 8 bits: a looser bound).
    rng = np.random.default_rng(21)
    n_head, n_head_kv, d = 6, 2, 64
    q = rng.standard_normal((n, n_head, d)).astype(np.float32)
    k, v = kv_rows(rng, pos0 + n, n_head_kv, d)
    sinks = sink_logits(rng, n_head)
    tk, tv = types
    isa = "avx2" if HAS_AVX2 else None
    cpu, blob, k_floats, v_floats = _testing.kv_cache_attention(q, k, v, pos0, tk, tv, rotate_k=rotate,
                                                                center_k=center, window=window, isa=isa, sinks=sinks)
    got, dev_blob = dev.kv_cache_attention(q, k, v, pos0, int(T[tk.upper()]), int(T[tv.upper()]), rotate_k=rotate,
                                           center_k=center, window=window, chunk=chunk, sinks=sinks)
    np.testing.assert_array_equal(dev_blob, blob)
    oracle = causal_attention(q, k_floats, v_floats, pos0, window, sinks=sinks)
    # The sinks matter here: far from attention without them (head 0 puts almost no weight anywhere).
    assert np.abs(oracle - causal_attention(q, k_floats, v_floats, pos0, window)).max() > 0.1
    if tk == "f16":
        if HAS_AVX2:
            np.testing.assert_array_equal(got, cpu)
        else:
            np.testing.assert_allclose(got, oracle, atol=4e-3)
        return
    np.testing.assert_allclose(got, oracle, atol=1e-5)
    np.testing.assert_allclose(got, cpu, atol=5e-2)  # the CPU's 8-bit Q: measured up to 2.6e-2


def test_attention_refuses_a_head_dim_over_the_kernel_limit(dev):
    q = np.zeros((1, 1, 320), np.float32)
    with pytest.raises(_core.EdgeInferError, match="head_dim 320 is over the kernel's 256"):
        dev.attention(q, q, q, pos0=0, scale=1.0)


# ---- program cache --------------------------------------------------------------------------

GOOD_SOURCE = "__kernel void twice(__global float* x) { x[get_global_id(0)] *= 2.0f; }\n"


def test_a_compile_error_carries_the_build_log(dev):
    bad = "__kernel void broken(__global float* x) { x[0] = undeclared_name; }\n"
    with pytest.raises(_core.EdgeInferError) as info:
        dev.build_program("broken", bad)
    message = str(info.value)
    assert "OpenCL program 'broken' failed to build" in message
    assert "CL_BUILD_PROGRAM_FAILURE (-11)" in message
    assert "undeclared_name" in message  # the compiler's own words, from the build log


def test_binaries_are_cached_on_disk_and_reused(device_index, tmp_path):
    library = opencl_library()
    first = _testing.OpenCLDevice(device_index, library=library, cache_dir=str(tmp_path))
    first.build_program("twice", GOOD_SOURCE)
    first.build_program("twice", GOOD_SOURCE)  # in memory the second time
    assert (first.programs_compiled, first.programs_loaded) == (1, 0)
    path = first.binary_path("twice", GOOD_SOURCE)
    assert os.path.dirname(path) == str(tmp_path) and os.path.getsize(path) > 0

    second = _testing.OpenCLDevice(device_index, library=library, cache_dir=str(tmp_path))
    second.build_program("twice", GOOD_SOURCE)
    assert (second.programs_compiled, second.programs_loaded) == (0, 1)

    # Another source (or options) is another key, so an edited kernel never meets an old binary.
    assert second.binary_path("twice", GOOD_SOURCE + "\n") != path
    assert second.binary_path("twice", GOOD_SOURCE, "-DX=1") != path


def test_a_corrupt_binary_is_rebuilt_from_source(device_index, tmp_path):
    library = opencl_library()
    first = _testing.OpenCLDevice(device_index, library=library, cache_dir=str(tmp_path))
    first.build_program("twice", GOOD_SOURCE)
    path = first.binary_path("twice", GOOD_SOURCE)
    data = bytearray(open(path, "rb").read())
    data[-1] ^= 0xFF
    open(path, "wb").write(bytes(data))

    second = _testing.OpenCLDevice(device_index, library=library, cache_dir=str(tmp_path))
    second.build_program("twice", GOOD_SOURCE)
    assert (second.programs_compiled, second.programs_loaded) == (1, 0)
    third = _testing.OpenCLDevice(device_index, library=library, cache_dir=str(tmp_path))
    third.build_program("twice", GOOD_SOURCE)
    assert third.programs_loaded == 1  # the rebuilt binary replaced the corrupt one


def test_without_a_cache_folder_nothing_is_written(device_index):
    d = _testing.OpenCLDevice(device_index, library=opencl_library())
    d.build_program("twice", GOOD_SOURCE)
    assert d.binary_path("twice", GOOD_SOURCE) == "" and d.programs_compiled == 1


# ---- opening a device -----------------------------------------------------------------------

def test_a_device_index_out_of_range_is_a_clear_error(device_index):
    with pytest.raises(_core.EdgeInferError, match=r"OpenCL device 99 does not exist .*edgeinfer devices"):
        _testing.OpenCLDevice(99, library=opencl_library())


def test_no_library_is_a_clear_error():
    with pytest.raises(_core.EdgeInferError, match=r"cannot open an OpenCL device: no OpenCL library"):
        _testing.OpenCLDevice(0, library="/nonexistent/libOpenCL.so")


def test_the_device_reports_what_it_is(dev, opencl_devices):
    assert dev.info == opencl_devices[0]
    assert dev.driver_version
