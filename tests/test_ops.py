"""The float ops of the kernel table (attention row, SwiGLU, RoPE rotation) on every ISA this
machine runs, against the scalar reference and against numpy formulas in float64.

The ISA versions mirror ggml's SIMD builds (its accumulator layout, expf polynomial and FMA
contractions) and the scalar one mirrors ggml without SIMD, so they differ by a few roundings;
the bounds below say how many:
- SwiGLU: ggml_v_expf is within 1.45 + 0.5 ulp of expf, and 1 + e, the division and the
  product add an ulp each: |isa - scalar| <= 8 ulp(|result|), |any - exact| <= 2^-20 relative.
- RoPE: the fused form rounds one product fewer: |isa - scalar| and |any - exact| are at most
  2^-23 * (|x0 cos| + |x1 sin|) (and likewise for the odd element).
- Attention: V is accumulated in F16, whose rounding (2^-11 relative) happens once per cached
  position in both versions, and the F16 rounding of q moves the scores by 2^-11 relative:
  |out - exact(q16)| <= (n_kv + 2) * 2^-10 * max|v|; two versions differ by at most twice that.
"""
from __future__ import annotations

import numpy as np
import pytest

from edgeinfer import _core
from edgeinfer import _testing
from support.isas import isas_under_test
from support.numpy_reference import gelu_tanh

ISAS = isas_under_test()
SIMD_ISAS = [isa for isa in ISAS if isa in ("avx2", "avx512")]


def ulp(x: np.ndarray) -> np.ndarray:
    return np.spacing(np.abs(x).astype(np.float32)).astype(np.float64)


# ---- SwiGLU ------------------------------------------------------------------------------


def swiglu_inputs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    gate = (rng.standard_normal(n) * 4).astype(np.float32)
    edges = np.array([-100, -88.5, -30, -1e-3, 0, 1e-3, 30, 88.5, 100], dtype=np.float32)
    m = min(n, len(edges))
    gate[:m] = edges[:m]  # saturated exp, overflow of exp(-x), and values around 0
    up = rng.standard_normal(n).astype(np.float32)
    return gate, up


def swiglu_exact(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    g = gate.astype(np.float64)
    with np.errstate(over="ignore"):
        return g / (1.0 + np.exp(-g)) * up.astype(np.float64)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("n", [1, 15, 16, 1536, 1536 + 13])  # 1536: SmolLM2's n_ff; odd tails
def test_swiglu_every_isa_matches_scalar(isa, n):
    gate, up = swiglu_inputs(n, seed=n)
    ref = _testing.swiglu(gate, up, isa="scalar")
    got = _testing.swiglu(gate, up, isa=isa)
    assert np.all(np.abs(got.astype(np.float64) - ref) <= 8 * ulp(ref) + 1e-30)


@pytest.mark.parametrize("isa", ISAS)
def test_swiglu_is_silu_times_up(isa):
    gate, up = swiglu_inputs(1536 + 13, seed=7)
    want = swiglu_exact(gate, up)
    got = _testing.swiglu(gate, up, isa=isa).astype(np.float64)
    assert np.all(np.abs(got - want) <= 2.0**-20 * np.abs(want) + 1e-30)


def test_swiglu_in_the_table_of_every_isa_handles_empty_input():
    for isa in ISAS:
        assert _testing.swiglu(np.zeros(0, np.float32), np.zeros(0, np.float32), isa=isa).shape == (0,)


# ---- RoPE rotation -----------------------------------------------------------------------


def rope_inputs(n_heads: int, head_dim: int, n_rot: int, pos: int, seed: int):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n_heads, head_dim)).astype(np.float32) * 3
    theta = pos * 10000.0 ** (-np.arange(0, n_rot, 2) / n_rot)
    cs = np.empty(n_rot, dtype=np.float32)
    cs[0::2], cs[1::2] = np.cos(theta), np.sin(theta)
    return x, cs


def rope_bound(x: np.ndarray, cs: np.ndarray, n_rot: int) -> np.ndarray:
    """2^-23 * (|x0 cos| + |x1 sin|) for y0 and (|x0 sin| + |x1 cos|) for y1."""
    x0, x1 = np.abs(x[:, 0:n_rot:2]).astype(np.float64), np.abs(x[:, 1:n_rot:2]).astype(np.float64)
    c, s = np.abs(cs[0::2]).astype(np.float64), np.abs(cs[1::2]).astype(np.float64)
    b = np.zeros_like(x, dtype=np.float64)
    b[:, 0:n_rot:2] = x0 * c + x1 * s
    b[:, 1:n_rot:2] = x0 * s + x1 * c
    return 2.0**-23 * b


ROPE_SHAPES = [(9, 64, 64), (3, 64, 64), (4, 256, 256), (2, 64, 36), (2, 64, 6)]  # partial n_rot: tails


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("n_heads,head_dim,n_rot", ROPE_SHAPES)
def test_rope_rotate_is_the_rotation(isa, n_heads, head_dim, n_rot):
    x, cs = rope_inputs(n_heads, head_dim, n_rot, pos=37, seed=head_dim + n_rot)
    got = _testing.rope_rotate(x, cs, isa=isa).astype(np.float64)
    xd, c, s = x.astype(np.float64), cs[0::2].astype(np.float64), cs[1::2].astype(np.float64)
    want = xd.copy()
    want[:, 0:n_rot:2] = xd[:, 0:n_rot:2] * c - xd[:, 1:n_rot:2] * s
    want[:, 1:n_rot:2] = xd[:, 0:n_rot:2] * s + xd[:, 1:n_rot:2] * c
    assert np.all(np.abs(got - want) <= rope_bound(x, cs, n_rot))
    assert np.array_equal(got[:, n_rot:], xd[:, n_rot:])  # the unrotated dims are copied


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("n_heads,head_dim,n_rot", ROPE_SHAPES)
def test_rope_rotate_every_isa_matches_scalar(isa, n_heads, head_dim, n_rot):
    x, cs = rope_inputs(n_heads, head_dim, n_rot, pos=1000, seed=n_heads)
    ref = _testing.rope_rotate(x, cs, isa="scalar").astype(np.float64)
    got = _testing.rope_rotate(x, cs, isa=isa).astype(np.float64)
    assert np.all(np.abs(got - ref) <= rope_bound(x, cs, n_rot))


@pytest.mark.parametrize("isa", SIMD_ISAS)
def test_simd_rope_rounds_like_gccs_vfmaddsub(isa):
    """Whole groups of 4 pairs: y0 = fma(x0, c, -round(x1 s)), y1 = fma(x0, s, round(x1 c)),
    i.e. the x0 products exact (float64 holds them), the x1 products rounded to float32."""
    x, cs = rope_inputs(9, 64, 64, pos=11, seed=3)
    c, s = cs[0::2].astype(np.float64), cs[1::2].astype(np.float64)
    x0 = x[:, 0::2].astype(np.float64)
    want = np.empty_like(x)
    want[:, 0::2] = (x0 * c - (x[:, 1::2] * cs[1::2]).astype(np.float64)).astype(np.float32)
    want[:, 1::2] = (x0 * s + (x[:, 1::2] * cs[0::2]).astype(np.float64)).astype(np.float32)
    assert np.array_equal(_testing.rope_rotate(x, cs, isa=isa), want)


# ---- attention row -----------------------------------------------------------------------


def attn_inputs(head_dim: int, n_kv: int, seed: int):
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal(head_dim) * 2).astype(np.float32)
    k = (rng.standard_normal((n_kv, head_dim)) * 2).astype(np.float16)
    v = rng.standard_normal((n_kv, head_dim)).astype(np.float16)
    return q, k, v


def attn_exact(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    q16 = q.astype(np.float16).astype(np.float64)
    s = k.astype(np.float64) @ q16 * scale
    w = np.exp(s - s.max())
    return (w / w.sum()) @ v.astype(np.float64)


def attn_bound(v: np.ndarray) -> float:
    return (len(v) + 2) * 2.0**-10 * float(np.abs(v.astype(np.float64)).max())


ATTN_SHAPES = [(64, 1), (64, 7), (64, 100), (80, 33), (256, 40)]  # 80: vector body + tail


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("head_dim,n_kv", ATTN_SHAPES)
def test_attention_row_is_softmax_attention(isa, head_dim, n_kv):
    q, k, v = attn_inputs(head_dim, n_kv, seed=head_dim * 1000 + n_kv)
    scale = 1.0 / np.sqrt(head_dim)
    got = _testing.attn_f16_row(q, k.view(np.uint16), v.view(np.uint16), scale, isa=isa).astype(np.float64)
    assert np.all(np.abs(got - attn_exact(q, k, v, scale)) <= attn_bound(v))


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("head_dim,n_kv", ATTN_SHAPES)
def test_attention_row_every_isa_matches_scalar(isa, head_dim, n_kv):
    q, k, v = attn_inputs(head_dim, n_kv, seed=n_kv)
    scale = 1.0 / np.sqrt(head_dim)
    ref = _testing.attn_f16_row(q, k.view(np.uint16), v.view(np.uint16), scale, isa="scalar").astype(np.float64)
    got = _testing.attn_f16_row(q, k.view(np.uint16), v.view(np.uint16), scale, isa=isa).astype(np.float64)
    assert np.all(np.abs(got - ref) <= 2 * attn_bound(v))


@pytest.mark.parametrize("isa", ISAS)
def test_queries_attended_together_get_the_bits_each_gets_alone(isa):
    """A GQA group or a batch's rows in one call (attn_f16_rows): each query over its own range
    of positions (causal rows, a sliding window) is computed exactly as alone."""
    head_dim, n_kv, m = 64, 50, 7
    rng = np.random.default_rng(11)
    q = (rng.standard_normal((m, head_dim)) * 2).astype(np.float32)
    _, k, v = attn_inputs(head_dim, n_kv, seed=12)
    first = [0, 0, 3, 10, 0, 40, 49]
    last = [49, 20, 30, 10, 0, 49, 49]
    got = _testing.attn_f16_rows(q, first, last, k.view(np.uint16), v.view(np.uint16), 0.125, isa=isa)
    for j in range(m):
        rows = slice(first[j], last[j] + 1)
        alone = _testing.attn_f16_row(q[j], np.ascontiguousarray(k[rows]).view(np.uint16),
                                      np.ascontiguousarray(v[rows]).view(np.uint16), 0.125, isa=isa)
        assert np.array_equal(got[j].view(np.uint32), alone.view(np.uint32)), j


@pytest.mark.parametrize("isa", ISAS)
def test_attention_over_one_position_returns_its_value(isa):
    q, k, v = attn_inputs(64, 1, seed=1)
    got = _testing.attn_f16_row(q, k.view(np.uint16), v.view(np.uint16), 0.125, isa=isa)
    assert np.array_equal(got, v[0].astype(np.float32))


def test_attention_rejects_mismatched_shapes():
    q, k, v = attn_inputs(64, 3, seed=2)
    with pytest.raises(_core.EdgeInferError, match="head_dim"):
        _testing.attn_f16_row(q[:32], k.view(np.uint16), v.view(np.uint16), 0.125)


# ---- GEGLU (ggml's F16 GELU table) --------------------------------------------------------
# ggml rounds the gate to F16 and looks gelu_tanh up in an F16 table, so the result is
# gelu(f16(gate)) rounded to F16 (2^-11 relative), times up: |got - gelu(f16(g)) up| <=
# 2^-10 |gelu(f16(g)) up|. The table is built with the inner term fused on FMA ISAs and not in
# the scalar one, which can move an entry by one F16 step: the same bound covers that. For
# large negative gates the float32 formula cancels (1 + tanh(z) with tanh(z) near -1), adding up
# to 2^-22 |gate up| absolute: that is in ggml's table too.


def geglu_inputs(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    gate = (rng.standard_normal(n) * 3).astype(np.float32)
    edges = np.array([-12, -10, -9.99, -1e-3, 0, 1e-3, 9.99, 10, 12], dtype=np.float32)
    m = min(n, len(edges))
    gate[:m] = edges[:m]  # both saturated branches and the table around 0
    return gate, rng.standard_normal(n).astype(np.float32)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("n", [1, 9, 2048 + 7])  # 2048: Gemma 3 270M's n_ff
def test_geglu_is_table_gelu_times_up(isa, n):
    gate, up = geglu_inputs(n, seed=n)
    got = _testing.geglu(gate, up, isa=isa).astype(np.float64)
    g16 = gate.astype(np.float16).astype(np.float64)
    want = gelu_tanh(g16) * up
    want = np.where(gate <= -10, 0.0, np.where(gate >= 10, gate.astype(np.float64) * up, want))
    assert np.all(np.abs(got - want) <= 2.0**-10 * np.abs(want) + 2.0**-22 * np.abs(g16 * up) + 1e-30)
    assert np.array_equal(got[gate >= 10], (gate * up)[gate >= 10])  # the formula, not the table
    assert np.all(got[gate <= -10] == 0)


@pytest.mark.parametrize("isa", ISAS)
def test_geglu_every_isa_matches_scalar(isa):
    gate, up = geglu_inputs(4096, seed=5)
    ref = _testing.geglu(gate, up, isa="scalar").astype(np.float64)
    got = _testing.geglu(gate, up, isa=isa).astype(np.float64)
    assert np.all(np.abs(got - ref) <= 2.0**-10 * np.abs(ref) + 1e-30)


@pytest.mark.parametrize("isa", ISAS)
def test_geglu_vector_loop_gives_the_table_loops_bits(isa):
    """The x86 kernels take 8 gates at a time and finish the tail with ggml's scalar table loop:
    calls of 7 gates run that loop alone, over the same table, and must give the same bits."""
    gate, up = geglu_inputs(4096 + 5, seed=9)
    gate[100:120] = np.float32(np.nan)   # NaN takes the table path in both
    whole = _testing.geglu(gate, up, isa=isa)
    pieces = np.concatenate([_testing.geglu(gate[i:i + 7], up[i:i + 7], isa=isa) for i in range(0, len(gate), 7)])
    finite = ~np.isnan(gate)
    assert np.array_equal(whole[finite].view(np.uint32), pieces[finite].view(np.uint32))
    assert np.all(np.isnan(whole[~finite]))


def test_geglu_depends_on_the_gate_only_through_its_f16_value():
    gate = np.array([1.0, np.nextafter(np.float32(1.0), np.float32(2.0))], dtype=np.float32)
    out = _testing.geglu(gate, np.ones(2, np.float32))
    assert out[0] == out[1]


# ---- RoPE neox rotation ------------------------------------------------------------------


def neox_bound(x: np.ndarray, cs: np.ndarray, n_rot: int) -> np.ndarray:
    half = n_rot // 2
    x0, x1 = np.abs(x[:, :half]).astype(np.float64), np.abs(x[:, half:n_rot]).astype(np.float64)
    c, s = np.abs(cs[0::2]).astype(np.float64), np.abs(cs[1::2]).astype(np.float64)
    b = np.zeros_like(x, dtype=np.float64)
    b[:, :half] = x0 * c + x1 * s
    b[:, half:n_rot] = x0 * s + x1 * c
    return 2.0**-23 * b


NEOX_SHAPES = [(4, 256, 256), (1, 256, 256), (2, 64, 32), (2, 64, 6)]  # Gemma 3; partial n_rot


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("n_heads,head_dim,n_rot", NEOX_SHAPES)
def test_rope_rotate_neox_is_the_rotation(isa, n_heads, head_dim, n_rot):
    x, cs = rope_inputs(n_heads, head_dim, n_rot, pos=37, seed=head_dim + n_rot)
    got = _testing.rope_rotate_neox(x, cs, isa=isa).astype(np.float64)
    half = n_rot // 2
    xd, c, s = x.astype(np.float64), cs[0::2].astype(np.float64), cs[1::2].astype(np.float64)
    want = xd.copy()
    want[:, :half] = xd[:, :half] * c - xd[:, half:n_rot] * s
    want[:, half:n_rot] = xd[:, :half] * s + xd[:, half:n_rot] * c
    assert np.all(np.abs(got - want) <= neox_bound(x, cs, n_rot))
    assert np.array_equal(got[:, n_rot:], xd[:, n_rot:])


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("n_heads,head_dim,n_rot", NEOX_SHAPES)
def test_rope_rotate_neox_every_isa_matches_scalar(isa, n_heads, head_dim, n_rot):
    x, cs = rope_inputs(n_heads, head_dim, n_rot, pos=1000, seed=n_heads)
    ref = _testing.rope_rotate_neox(x, cs, isa="scalar").astype(np.float64)
    got = _testing.rope_rotate_neox(x, cs, isa=isa).astype(np.float64)
    assert np.all(np.abs(got - ref) <= neox_bound(x, cs, n_rot))


@pytest.mark.parametrize("isa", SIMD_ISAS)
def test_simd_rope_neox_fuses_the_x0_products(isa):
    """y[i] = fma(x0, c, -round(x1 s)), y[i + half] = fma(x0, s, round(x1 c)), as GCC contracts
    ggml's loop: the x0 products exact (float64 holds them), the x1 products rounded."""
    x, cs = rope_inputs(4, 256, 256, pos=11, seed=3)
    c, s = cs[0::2].astype(np.float64), cs[1::2].astype(np.float64)
    x0 = x[:, :128].astype(np.float64)
    want = np.empty_like(x)
    want[:, :128] = (x0 * c - (x[:, 128:] * cs[1::2]).astype(np.float64)).astype(np.float32)
    want[:, 128:] = (x0 * s + (x[:, 128:] * cs[0::2]).astype(np.float64)).astype(np.float32)
    assert np.array_equal(_testing.rope_rotate_neox(x, cs, isa=isa), want)


# ---- softmax exponentials (the MoE router's ggml_soft_max) ----------------------------------


def soft_max_inputs(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n) * 3).astype(np.float32)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("n", [1, 4, 15, 16, 128, 128 + 5])  # 128: Qwen3-30B-A3B's experts
def test_soft_max_every_isa_matches_scalar(isa, n):
    """ggml_v_expf is within 1.45 + 0.5 ulp of expf: a few ulp per value, and the sums (of
    values below 1 each) within n ulp(1) of each other."""
    x = soft_max_inputs(n, seed=n)
    ref, ref_sum = _testing.soft_max(x, float(x.max()), isa="scalar")
    got, got_sum = _testing.soft_max(x, float(x.max()), isa=isa)
    assert np.all(np.abs(got.astype(np.float64) - ref) <= 4 * ulp(ref) + 1e-30)
    assert abs(got_sum - ref_sum) <= n * 2.0**-23
    assert ref_sum == pytest.approx(np.exp(x.astype(np.float64) - x.max()).sum(), rel=1e-6)


@pytest.mark.parametrize("n", [4, 16, 128, 128 + 5])
def test_soft_max_is_ggmls_bits_on_the_reference_kernels(n):
    """On the kernel set that mirrors the reference build, the values and the double sum are
    ggml_vec_soft_max_f32's own (called from the build's libggml-cpu)."""
    import ctypes

    from support.ggml_cpu import load_ggml_cpu, require_isa_build
    from support.reference_build import require_reference_kernels

    require_reference_kernels()
    lib = load_ggml_cpu()
    require_isa_build(lib, _core.isa())
    lib.ggml_vec_soft_max_f32.restype = ctypes.c_double
    lib.ggml_vec_soft_max_f32.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_float]
    x = soft_max_inputs(n, seed=100 + n)
    want = np.empty(n, np.float32)
    want_sum = lib.ggml_vec_soft_max_f32(n, want.ctypes.data, x.ctypes.data, float(x.max()))
    got, got_sum = _testing.soft_max(x, float(x.max()))
    assert np.array_equal(got, want) and got_sum == want_sum
