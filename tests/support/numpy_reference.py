"""Plain numpy forward passes: the oracles for the core on the tiny random models
(support/tiny_llama.py, support/tiny_gemma3.py), and the ops and attention they are made of.

They compute in float64 from the weights as stored (dequantized), with K and V rounded to float16
the way the core's (and llama.cpp's default) KV cache stores them. They deliberately do not
reproduce the core's other roundings (8-bit activations, F16 attention accumulators, Gemma's F16
GELU table): the tests compare with a tolerance that covers those (rel_err)."""
from __future__ import annotations

import numpy as np

from support.tiny_gemma3 import TinyGemma3Config
from support.tiny_llama import TinyConfig


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max |want|: the error relative to the largest value (logits' scale)."""
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


# ---- ops ---------------------------------------------------------------------------------------

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


def rope_neox(x: np.ndarray, pos: np.ndarray, base: float) -> np.ndarray:
    """x: [n, heads, head_dim]; dim i pairs with dim i + head_dim/2 (llama.cpp's neox mode)."""
    hd = x.shape[-1]
    half = hd // 2
    inv = base ** (-np.arange(0, hd, 2) / hd)
    ang = pos[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x0, x1 = x[..., :half], x[..., half:]
    return np.concatenate([x0 * cos - x1 * sin, x0 * sin + x1 * cos], axis=-1)


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * x * (1.0 + 0.044715 * x * x)))


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1 + np.exp(-x))


# ---- attention ---------------------------------------------------------------------------------

def causal_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, pos0: int, window: int = 0,
                     scale: float | None = None, sinks: np.ndarray | None = None) -> np.ndarray:
    """float64 causal softmax attention: q [n, n_head, d] at positions pos0 .. pos0 + n - 1 over
    k, v [n_kv, n_head_kv, d] at positions 0 .. (grouped heads: query head h reads K/V head
    h // (n_head / n_head_kv)). Position p sees keys 0 .. p, or with a `window` only the last
    `window` of them (llama.cpp's SWA mask: key kp is visible iff p - kp < window). `scale`
    defaults to 1 / sqrt(d). sinks [n_head] (gpt-oss): each head's logit joins the softmax's
    denominator with no value. Returns [n, n_head, d]."""
    n, n_head, d = q.shape
    group = n_head // k.shape[1]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    out = np.empty((n, n_head, d))
    for t in range(n):
        last = pos0 + t
        first = max(0, last - window + 1) if window > 0 else 0
        for h in range(n_head):
            kk = k[first:last + 1, h // group].astype(np.float64)
            vv = v[first:last + 1, h // group].astype(np.float64)
            s = kk @ q[t, h].astype(np.float64) * scale
            sink = -np.inf if sinks is None else float(sinks[h])
            top = max(s.max(), sink)
            p = np.exp(s - top)
            out[t, h] = (p / (p.sum() + np.exp(sink - top))) @ vv
    return out


def last_position_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, window: int = 0) -> np.ndarray:
    """causal_attention of one query, q [n_head, d], at the last of the n_kv positions: [n_head, d]."""
    return causal_attention(q[None], k, v, len(k) - 1, window)[0]


# ---- forward passes ----------------------------------------------------------------------------

class LlamaReference:
    def __init__(self, cfg: TinyConfig, weights: dict[str, np.ndarray]):
        self.cfg = cfg
        self.w = {k: v.astype(np.float64) for k, v in weights.items()}
        self.k_cache: list[np.ndarray] = [np.zeros((0, cfg.n_head_kv, cfg.head_dim))] * cfg.n_layer
        self.v_cache: list[np.ndarray] = [np.zeros((0, cfg.n_head_kv, cfg.head_dim))] * cfg.n_layer

    def forward(self, tokens: list[int], on_matmul=None) -> np.ndarray:
        """Appends tokens after the cached ones; returns logits for each: [n, n_vocab].
        on_matmul(weight name, input rows) is called before each matrix product."""
        c, w = self.cfg, self.w

        def mm(x: np.ndarray, name: str) -> np.ndarray:
            if on_matmul:
                on_matmul(name, x)
            return x @ w[name].T

        n = len(tokens)
        pos0 = self.k_cache[0].shape[0]
        pos = np.arange(pos0, pos0 + n, dtype=np.float64)
        x = w["token_embd.weight"][tokens]
        factors = w.get("rope_freqs.weight")
        scale = 1.0 / c.rope_linear_factor if c.rope_linear_factor else 1.0
        for il in range(c.n_layer):
            p = f"blk.{il}."
            h = rms_norm(x, w[p + "attn_norm.weight"], c.norm_eps)
            q = mm(h, p + "attn_q.weight").reshape(n, c.n_head, c.head_dim)
            k = mm(h, p + "attn_k.weight").reshape(n, c.n_head_kv, c.head_dim)
            v = mm(h, p + "attn_v.weight").reshape(n, c.n_head_kv, c.head_dim)
            q, k = rope(q, pos, c.rope_base, factors, scale), rope(k, pos, c.rope_base, factors, scale)
            self.k_cache[il] = np.concatenate([self.k_cache[il], k.astype(np.float16).astype(np.float64)])
            self.v_cache[il] = np.concatenate([self.v_cache[il], v.astype(np.float16).astype(np.float64)])
            att = causal_attention(q, self.k_cache[il], self.v_cache[il], pos0)
            x = x + mm(att.reshape(n, -1), p + "attn_output.weight")
            h = rms_norm(x, w[p + "ffn_norm.weight"], c.norm_eps)
            x = x + mm(silu(mm(h, p + "ffn_gate.weight")) * mm(h, p + "ffn_up.weight"), p + "ffn_down.weight")
        out_name = "output.weight" if "output.weight" in w else "token_embd.weight"
        return mm(rms_norm(x, w["output_norm.weight"], c.norm_eps), out_name)


class Gemma3Reference:
    def __init__(self, cfg: TinyGemma3Config, weights: dict[str, np.ndarray]):
        self.cfg = cfg
        self.w = {k: v.astype(np.float64) for k, v in weights.items()}
        empty = np.zeros((0, cfg.n_head_kv, cfg.head_dim))
        self.k_cache = [empty] * cfg.n_layer
        self.v_cache = [empty] * cfg.n_layer

    def forward(self, tokens: list[int]) -> np.ndarray:
        """Appends tokens after the cached ones; returns logits for each: [n, n_vocab]."""
        c, w = self.cfg, self.w
        n, hd, eps = len(tokens), c.head_dim, c.norm_eps
        pos0 = self.k_cache[0].shape[0]
        pos = np.arange(pos0, pos0 + n, dtype=np.float64)
        x = w["token_embd.weight"][tokens] * np.sqrt(c.n_embd)
        for il in range(c.n_layer):
            p = f"blk.{il}."
            local = c.is_local(il)
            base = c.local_base() if local else c.rope_base_global
            h = rms_norm(x, w[p + "attn_norm.weight"], eps)
            q = (h @ w[p + "attn_q.weight"].T).reshape(n, c.n_head, hd)
            k = (h @ w[p + "attn_k.weight"].T).reshape(n, c.n_head_kv, hd)
            v = (h @ w[p + "attn_v.weight"].T).reshape(n, c.n_head_kv, hd)
            q = rope_neox(rms_norm(q, w[p + "attn_q_norm.weight"], eps), pos, base)
            k = rope_neox(rms_norm(k, w[p + "attn_k_norm.weight"], eps), pos, base)
            self.k_cache[il] = np.concatenate([self.k_cache[il], k.astype(np.float16).astype(np.float64)])
            self.v_cache[il] = np.concatenate([self.v_cache[il], v.astype(np.float16).astype(np.float64)])
            att = causal_attention(q, self.k_cache[il], self.v_cache[il], pos0, c.sliding_window if local else 0)
            a = att.reshape(n, -1) @ w[p + "attn_output.weight"].T
            x = x + rms_norm(a, w[p + "post_attention_norm.weight"], eps)
            h = rms_norm(x, w[p + "ffn_norm.weight"], eps)
            g = gelu_tanh(h @ w[p + "ffn_gate.weight"].T) * (h @ w[p + "ffn_up.weight"].T)
            x = x + rms_norm(g @ w[p + "ffn_down.weight"].T, w[p + "post_ffw_norm.weight"], eps)
        return rms_norm(x, w["output_norm.weight"], eps) @ w["token_embd.weight"].T
