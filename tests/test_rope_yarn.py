"""YaRN's rotation (layers/params.h rope_cos_sin with ext_factor != 0), the cos and sin every
backend rotates by: against a float64 transcription of ggml's rope_yarn (within float rounding),
and against ggml's own rope_ext run through ctypes (bit for bit, where a llama.cpp build is here).
The model-level checks (converted checkpoints against transformers, llama.cpp's converter, the
OpenCL offload, context shift) are in tests/test_convert_yarn.py."""
from __future__ import annotations

import math

import numpy as np
import pytest

from edgeinfer import _testing
from support import ggml_cpu

POSITIONS = [0, 1, 7, 31, 32, 33, 100, 127, 1000, 40000]

# (n_rot, freq_base, factor, n_ctx_orig, beta_fast, beta_slow, ext_factor, attn_factor): the tiny
# test models' settings, Qwen 2.5's (base 1e6, 32768 positions, factor 4), transformers-style
# non-default betas, a partial extrapolation mix, and a correction range that collapses to one dim.
CASES = [
    (64, 10000.0, 4.0, 32, 32.0, 1.0, 1.0, 0.9),
    (128, 1000000.0, 4.0, 32768, 32.0, 1.0, 1.0, 0.9896),
    (32, 10000.0, 8.0, 64, 16.0, 2.0, 1.0, 1.0),
    (64, 500000.0, 2.5, 8192, 32.0, 1.0, 0.5, 1.2),
    (16, 10000.0, 4.0, 64, 4.0, 4.0, 1.0, 1.0),
]


def yarn_reference(n_rot, positions, freq_base, freq_scale, ext_factor, attn_factor, n_ctx_orig, beta_fast,
                   beta_slow, freq_factors=None) -> np.ndarray:
    """ggml's rope_yarn and ggml_rope_yarn_corr_dims in float64: [len(positions)][n_rot]."""
    def corr_dim(n_rotations):
        return n_rot * math.log(n_ctx_orig / (n_rotations * 2 * math.pi)) / (2 * math.log(freq_base))

    low = max(0.0, math.floor(corr_dim(beta_fast)))
    high = min(n_rot - 1.0, math.ceil(corr_dim(beta_slow)))
    i = np.arange(n_rot // 2, dtype=np.float64)
    ff = np.ones(n_rot // 2) if freq_factors is None else np.asarray(freq_factors, np.float64)
    mix = (1.0 - np.clip((i - low) / max(0.001, high - low), 0.0, 1.0)) * ext_factor
    mscale = attn_factor * ((1.0 + 0.1 * math.log(1.0 / freq_scale)) if ext_factor != 0 else 1.0)
    out = np.empty((len(positions), n_rot))
    for row, pos in enumerate(positions):
        extrap = pos * freq_base ** (-2.0 * i / n_rot) / ff
        angle = freq_scale * extrap * (1.0 - mix) + extrap * mix
        out[row, 0::2] = np.cos(angle) * mscale
        out[row, 1::2] = np.sin(angle) * mscale
    return out


def float_bound(positions: list[int], n_rot: int, mscale: float) -> np.ndarray:
    """Float32 rounding of the angles (theta_i formed by repeated multiplication: a relative error
    growing with i) and of cos, sin and the products: per position, generous."""
    return mscale * (2e-6 + 4e-7 * np.asarray(positions, np.float64)[:, None] * np.ones(n_rot))


@pytest.mark.parametrize("case", CASES, ids=[f"rot{c[0]}-base{c[1]:g}-x{c[2]:g}-orig{c[3]}" for c in CASES])
def test_yarn_cos_sin_are_ggmls_formula(case):
    n_rot, base, factor, n_ctx_orig, beta_fast, beta_slow, ext, attn = case
    scale = np.float32(1.0) / np.float32(factor)
    got = _testing.rope_cos_sin(n_rot, POSITIONS, base, scale, attn_factor=attn, ext_factor=ext,
                                n_ctx_orig=n_ctx_orig, beta_fast=beta_fast, beta_slow=beta_slow).astype(np.float64)
    want = yarn_reference(n_rot, POSITIONS, base, float(scale), ext, attn, n_ctx_orig, beta_fast, beta_slow)
    mscale = attn * (1 + 0.1 * math.log(factor))
    assert np.all(np.abs(got - want) <= float_bound(POSITIONS, n_rot, mscale))
    # Not vacuous: YaRN is neither plain RoPE nor linear scaling at these positions.
    linear = _testing.rope_cos_sin(n_rot, POSITIONS, base, scale).astype(np.float64)
    plain = _testing.rope_cos_sin(n_rot, POSITIONS, base, 1.0).astype(np.float64)
    assert np.abs(got - linear).max() > 0.1 and np.abs(got - plain).max() > 0.1


def test_yarn_with_freq_factors_divides_the_extrapolated_angle():
    factors = np.linspace(1.0, 3.0, 32).astype(np.float32)
    scale = np.float32(0.25)
    got = _testing.rope_cos_sin(64, POSITIONS, 10000.0, scale, freq_factors=factors, ext_factor=1.0,
                                n_ctx_orig=32).astype(np.float64)
    want = yarn_reference(64, POSITIONS, 10000.0, float(scale), 1.0, 1.0, 32, 32.0, 1.0, factors)
    assert np.all(np.abs(got - want) <= float_bound(POSITIONS, 64, 1 + 0.1 * math.log(4)))


def test_unscaled_rotation_has_the_angle_only():
    """A context shift rotates cached keys by the angle alone (they hold their magnitude)."""
    kwargs = dict(ext_factor=1.0, n_ctx_orig=32, attn_factor=0.9)
    scaled = _testing.rope_cos_sin(64, POSITIONS, 10000.0, 0.25, **kwargs).astype(np.float64)
    unit = _testing.rope_cos_sin(64, POSITIONS, 10000.0, 0.25, scale_magnitude=False, **kwargs).astype(np.float64)
    np.testing.assert_allclose(unit[:, 0::2] ** 2 + unit[:, 1::2] ** 2, 1.0, atol=1e-6)
    np.testing.assert_allclose(unit * 0.9 * (1 + 0.1 * math.log(4)), scaled, atol=1e-6)


GGML_CASES = CASES + [
    (64, 10000.0, 1.0, 32, 32.0, 1.0, 0.0, 1.0),    # no YaRN: plain RoPE
    (64, 10000.0, 4.0, 32, 32.0, 1.0, 0.0, 1.3),    # linear scaling with an attention factor
]


@pytest.mark.parametrize("case", GGML_CASES)
@pytest.mark.parametrize("with_factors", [False, True])
def test_cos_sin_are_ggmls_bits(case, with_factors):
    """The same floats as ggml-cpu's rope (this machine's llama.cpp build; its rope_yarn with the
    FMAs GCC forms there): what makes YaRN models give llama.cpp's logits bit for bit."""
    n_rot, base, factor, n_ctx_orig, beta_fast, beta_slow, ext, attn = case
    scale = float(np.float32(1.0) / np.float32(factor))
    factors = np.linspace(1.0, 5.0, n_rot // 2).astype(np.float32) if with_factors else None
    kwargs = dict(freq_factors=factors, attn_factor=attn, ext_factor=ext, n_ctx_orig=n_ctx_orig,
                  beta_fast=beta_fast, beta_slow=beta_slow)
    theirs = ggml_cpu.rope_cos_sin(n_rot, POSITIONS, base, scale, **kwargs)
    ours = _testing.rope_cos_sin(n_rot, POSITIONS, base, scale, **kwargs)
    assert np.array_equal(ours, theirs), np.abs(ours - theirs).max()
