"""RoPE as checkpoints describe it and as GGUF files hold it: the settings read from either
config.json spelling, YaRN's keys as llama.cpp's converter writes them, Llama 3.1's frequency
factors, and the row order of Q/K that turns HF's rotate-half RoPE into llama.cpp's adjacent pairs."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from gguf import GGUFWriter, RopeScalingType

from edgeinfer.errors import ModelFormatError


def rope_parameters(cfg: dict[str, Any], layer_type: str = "full_attention") -> dict[str, Any]:
    """RoPE settings as one dict (rope_theta, rope_type, factor, ...) from either spelling:
    transformers 5's ``rope_parameters`` (per layer type for Gemma 3) or the older top-level
    ``rope_theta`` + ``rope_scaling``."""
    params = dict(cfg.get("rope_parameters") or {})
    if layer_type in params and isinstance(params[layer_type], dict):
        params = dict(params[layer_type])
    params.update(cfg.get("rope_scaling") or {})
    if "rope_theta" not in params and cfg.get("rope_theta") is not None:
        params["rope_theta"] = cfg["rope_theta"]
    if "original_max_position_embeddings" not in params and cfg.get("original_max_position_embeddings") is not None:
        params["original_max_position_embeddings"] = cfg["original_max_position_embeddings"]   # as llama.cpp's
    params["rope_type"] = params.get("rope_type", params.get("type", "default")) or "default"
    return params


def yarn_metadata(rope: dict[str, Any], allow_untruncated: bool = False) -> dict[str, float | int]:
    """YaRN's keys as llama.cpp's converter writes them (factor, original context, and the
    optional extrapolation_factor, attention_factor, beta_fast, beta_slow where config.json has
    them), for the settings the core computes as transformers does; anything else is refused.
    `allow_untruncated`: a family whose GGUF files are all run with ggml's truncated correction
    range whatever config.json says (gpt-oss: its released config has truncate: false)."""
    if rope.get("factor") is None:
        # transformers would derive max_position_embeddings / original; llama.cpp's converter
        # writes no scaling at all.
        raise ModelFormatError("rope scaling 'yarn' without a factor is not supported")
    if rope.get("original_max_position_embeddings") is None:
        raise ModelFormatError("rope scaling 'yarn' needs original_max_position_embeddings")
    if rope.get("truncate") is False and not allow_untruncated:
        raise ModelFormatError("rope scaling 'yarn' with truncate: false is not supported (ggml always "
                               "rounds the correction range to whole dims)")
    attention_factor = rope.get("attention_factor", rope.get("attn_factor"))
    if attention_factor is None and rope.get("mscale") and rope.get("mscale_all_dim"):
        raise ModelFormatError("rope scaling 'yarn' with mscale and mscale_all_dim is not supported")
    out: dict[str, float | int] = {"factor": float(rope["factor"]),
                                   "orig_ctx_len": int(rope["original_max_position_embeddings"])}
    if not (math.isfinite(out["factor"]) and out["factor"] > 0):
        raise ModelFormatError(f"rope scaling 'yarn': factor {out['factor']} must be positive")
    for config_key, key in (("extrapolation_factor", "ext_factor"), ("beta_fast", "beta_fast"),
                            ("beta_slow", "beta_slow")):
        if rope.get(config_key) is not None:
            out[key] = float(rope[config_key])
    if attention_factor is not None:
        out["attn_factor"] = float(attention_factor)
    return out


def write_rope_scaling(w: GGUFWriter, rope: dict[str, Any], allow_untruncated: bool = False) -> None:
    """The rope.scaling.* keys of the linear and YaRN scalings (no keys for none; llama3 and
    LongRoPE are tensors their families write)."""
    if rope["rope_type"] == "linear":
        w.add_rope_scaling_type(RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(float(rope["factor"]))
    elif rope["rope_type"] == "yarn":
        yarn = yarn_metadata(rope, allow_untruncated)
        w.add_rope_scaling_type(RopeScalingType.YARN)
        w.add_rope_scaling_factor(yarn["factor"])
        w.add_rope_scaling_orig_ctx_len(int(yarn["orig_ctx_len"]))
        if "ext_factor" in yarn:
            w.add_rope_scaling_yarn_ext_factor(yarn["ext_factor"])
        if "attn_factor" in yarn:
            w.add_rope_scaling_yarn_attn_factor(yarn["attn_factor"])
        if "beta_fast" in yarn:
            w.add_rope_scaling_yarn_beta_fast(yarn["beta_fast"])
        if "beta_slow" in yarn:
            w.add_rope_scaling_yarn_beta_slow(yarn["beta_slow"])


def permute_rope_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Rows of each head reordered from halves [x0..x(d/2-1), y0..] to pairs [x0, y0, x1, y1, ...],
    so that llama.cpp's adjacent-pair RoPE computes HF's rotate-half RoPE (llama.cpp's permute)."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(rope: dict[str, Any], head_dim: int) -> np.ndarray:
    """Llama 3.1's per-frequency divisors [head_dim / 2]: 1 for short wavelengths, `factor` for
    long ones, a smooth blend between (transformers' _compute_llama3_parameters)."""
    base = float(rope.get("rope_theta", 10000.0))
    factor = float(rope.get("factor", 8.0))
    low, high = float(rope.get("low_freq_factor", 1.0)), float(rope.get("high_freq_factor", 4.0))
    old_ctx = float(rope.get("original_max_position_embeddings", 8192))
    low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
    factors = []
    for i in range(0, head_dim, 2):
        freq = 1.0 / base ** (i / head_dim)
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            factors.append(1.0)
        elif wavelen > low_wavelen:
            factors.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            factors.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(factors, dtype=np.float32)
