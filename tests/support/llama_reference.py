"""A plain numpy llama forward pass: the oracle for the core on tiny random models.

It computes in float64 from the weights as stored (dequantized), with K and V rounded to float16
the way the core's (and llama.cpp's default) KV cache stores them. It deliberately does not
reproduce the core's other roundings (Q8 activations, F16 attention accumulators): the tests
compare with a tolerance that covers those."""
from __future__ import annotations

import numpy as np

from support.tiny_llama import TinyConfig


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x: np.ndarray, pos: np.ndarray, base: float, factors: np.ndarray | None = None,
         scale: float = 1.0) -> np.ndarray:
    """x: [n, heads, head_dim]; rotates adjacent pairs (llama.cpp's normal mode). Angles are
    divided by `factors` (rope_freqs) and multiplied by `scale` (linear scaling = 1/factor)."""
    hd = x.shape[-1]
    inv = base ** (-np.arange(0, hd, 2) / hd)
    if factors is not None:
        inv = inv / factors
    ang = scale * pos[:, None] * inv[None, :]            # [n, hd/2]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


class LlamaReference:
    def __init__(self, cfg: TinyConfig, weights: dict[str, np.ndarray]):
        self.cfg = cfg
        self.w = {k: v.astype(np.float64) for k, v in weights.items()}
        self.k_cache: list[np.ndarray] = [np.zeros((0, cfg.n_head_kv, cfg.head_dim))] * cfg.n_layer
        self.v_cache: list[np.ndarray] = [np.zeros((0, cfg.n_head_kv, cfg.head_dim))] * cfg.n_layer

    def forward(self, tokens: list[int]) -> np.ndarray:
        """Appends tokens after the cached ones; returns logits for each: [n, n_vocab]."""
        c, w = self.cfg, self.w
        n = len(tokens)
        pos0 = self.k_cache[0].shape[0]
        pos = np.arange(pos0, pos0 + n, dtype=np.float64)
        x = w["token_embd.weight"][tokens]
        group = c.n_head // c.n_head_kv
        for il in range(c.n_layer):
            p = f"blk.{il}."
            h = rms_norm(x, w[p + "attn_norm.weight"], c.norm_eps)
            q = (h @ w[p + "attn_q.weight"].T).reshape(n, c.n_head, c.head_dim)
            k = (h @ w[p + "attn_k.weight"].T).reshape(n, c.n_head_kv, c.head_dim)
            v = (h @ w[p + "attn_v.weight"].T).reshape(n, c.n_head_kv, c.head_dim)
            factors = w.get("rope_freqs.weight")
            scale = 1.0 / c.rope_linear_factor if c.rope_linear_factor else 1.0
            q, k = rope(q, pos, c.rope_base, factors, scale), rope(k, pos, c.rope_base, factors, scale)
            k16 = k.astype(np.float16).astype(np.float64)
            v16 = v.astype(np.float16).astype(np.float64)
            self.k_cache[il] = np.concatenate([self.k_cache[il], k16])
            self.v_cache[il] = np.concatenate([self.v_cache[il], v16])
            K, V = self.k_cache[il], self.v_cache[il]
            att = np.zeros((n, c.n_head, c.head_dim))
            for t in range(n):
                last = pos0 + t
                for hh in range(c.n_head):
                    kh = hh // group
                    s = K[: last + 1, kh, :] @ q[t, hh] / np.sqrt(c.head_dim)
                    pr = np.exp(s - s.max())
                    pr /= pr.sum()
                    att[t, hh] = pr @ V[: last + 1, kh, :]
            x = x + att.reshape(n, -1) @ w[p + "attn_output.weight"].T
            h = rms_norm(x, w[p + "ffn_norm.weight"], c.norm_eps)
            g = h @ w[p + "ffn_gate.weight"].T
            u = h @ w[p + "ffn_up.weight"].T
            x = x + (g / (1 + np.exp(-g)) * u) @ w[p + "ffn_down.weight"].T
        out_w = w.get("output.weight", w["token_embd.weight"])
        return rms_norm(x, w["output_norm.weight"], c.norm_eps) @ out_w.T
