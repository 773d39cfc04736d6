"""Writes a tiny random-weight gemma3 GGUF and runs the matching numpy reference forward pass.

The file has the keys and tensor names llama.cpp's gemma3 loader reads (QK norms, post-attention
and post-FFN norms, a sliding window, a tied output) and a small SentencePiece vocabulary. The
reference computes in float64 from the stored weights, with K and V rounded to float16 like the
KV cache; it does not reproduce the core's other roundings (F16 GELU table, F16 attention
accumulator, 8-bit activations): the tests allow for those."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np


@dataclass
class TinyGemma3Config:
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 1
    head_dim: int = 32          # key_length: independent of n_embd / n_head, as in Gemma 3
    n_layer: int = 7            # layers 0-4 and 6 local, layer 5 global (pattern 6)
    n_ff: int = 96
    n_ctx_train: int = 256
    sliding_window: int = 4
    rope_base_global: float = 1_000_000.0
    rope_base_local: float | None = None  # gemma3.rope.freq_base_swa; None: no key, as files
                                          # written before it existed (their local base: 10000)
    norm_eps: float = 1e-6
    weight_type: str = "F32"    # F32, F16 or Q8_0 for the 2-D matmul weights

    def is_local(self, layer: int) -> bool:
        return self.sliding_window > 0 and layer % 6 < 5

    def local_base(self) -> float:
        return 10_000.0 if self.rope_base_local is None else self.rope_base_local


def tiny_spm_vocab() -> tuple[list[str], list[float], list[int]]:
    """<pad> <eos> <bos> <unk>, the 256 byte tokens, then a few pieces."""
    tokens = ["<pad>", "<eos>", "<bos>", "<unk>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [3, 3, 3, 2] + [6] * 256
    pieces = ["▁", "▁the", "e", "t", "h", "▁a", "in", "s", "o", "n"]
    tokens += pieces
    types += [1] * len(pieces)
    scores = [0.0] * 260 + [-float(i) for i in range(len(pieces))]
    return tokens, scores, types


def make_weights(cfg: TinyGemma3Config, n_vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights keyed by GGUF tensor name; matrices are [rows=out][cols=in] in numpy order."""
    rng = np.random.default_rng(seed)
    d, hd, ff = cfg.n_embd, cfg.head_dim, cfg.n_ff

    def mat(out_dim: int, in_dim: int) -> np.ndarray:
        return (rng.standard_normal((out_dim, in_dim)) / np.sqrt(in_dim)).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    # Embeddings are scaled by sqrt(n_embd) in the forward pass, so keep them small.
    w = {"token_embd.weight": (rng.standard_normal((n_vocab, d)) / np.sqrt(d)).astype(np.float32)}
    for il in range(cfg.n_layer):
        p = f"blk.{il}."
        w[p + "attn_norm.weight"] = norm(d)
        w[p + "attn_q.weight"] = mat(cfg.n_head * hd, d)
        w[p + "attn_k.weight"] = mat(cfg.n_head_kv * hd, d)
        w[p + "attn_v.weight"] = mat(cfg.n_head_kv * hd, d)
        w[p + "attn_q_norm.weight"] = norm(hd)
        w[p + "attn_k_norm.weight"] = norm(hd)
        w[p + "attn_output.weight"] = mat(d, cfg.n_head * hd)
        w[p + "post_attention_norm.weight"] = norm(d)
        w[p + "ffn_norm.weight"] = norm(d)
        w[p + "ffn_gate.weight"] = mat(ff, d)
        w[p + "ffn_up.weight"] = mat(ff, d)
        w[p + "ffn_down.weight"] = mat(d, ff)
        w[p + "post_ffw_norm.weight"] = norm(d)
    w["output_norm.weight"] = norm(d)
    return w


def write_tiny_gemma3(path: Path, cfg: TinyGemma3Config = TinyGemma3Config(),
                      seed: int = 0) -> dict[str, np.ndarray]:
    """Writes the model; returns the weights as stored, dequantized to float32."""
    tokens, scores, types = tiny_spm_vocab()
    weights = make_weights(cfg, len(tokens), seed)
    qtype = gguf.GGMLQuantizationType[cfg.weight_type]

    w = gguf.GGUFWriter(str(path), "gemma3")
    w.add_name("tiny-random-gemma3")
    w.add_context_length(cfg.n_ctx_train)
    w.add_embedding_length(cfg.n_embd)
    w.add_block_count(cfg.n_layer)
    w.add_feed_forward_length(cfg.n_ff)
    w.add_head_count(cfg.n_head)
    w.add_head_count_kv(cfg.n_head_kv)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_rope_freq_base(cfg.rope_base_global)
    if cfg.rope_base_local is not None:
        w.add_rope_freq_base_swa(cfg.rope_base_local)
    w.add_sliding_window(cfg.sliding_window)
    w.add_layer_norm_rms_eps(cfg.norm_eps)
    w.add_file_type(0 if cfg.weight_type == "F32" else 1)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(2)
    w.add_eos_token_id(1)
    w.add_unk_token_id(3)
    w.add_pad_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(False)

    stored: dict[str, np.ndarray] = {}
    for name, value in weights.items():
        if value.ndim == 2 and qtype != gguf.GGMLQuantizationType.F32:
            if qtype == gguf.GGMLQuantizationType.F16:
                data = value.astype(np.float16)
                w.add_tensor(name, data)
                stored[name] = data.astype(np.float32)
            else:
                data = gguf.quants.quantize(value, qtype)
                w.add_tensor(name, data, raw_dtype=qtype)
                stored[name] = gguf.quants.dequantize(data, qtype).reshape(value.shape).astype(np.float32)
        else:
            w.add_tensor(name, value)
            stored[name] = value
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return stored


# ---- numpy reference ------------------------------------------------------------------------


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


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
        group = c.n_head // c.n_head_kv
        for il in range(c.n_layer):
            p = f"blk.{il}."
            local = c.is_local(il)
            base = c.local_base() if local else c.rope_base_global
            h = rms_norm(x, w[p + "attn_norm.weight"], eps)
            q = (h @ w[p + "attn_q.weight"].T).reshape(n, c.n_head, hd)
            k = (h @ w[p + "attn_k.weight"].T).reshape(n, c.n_head_kv, hd)
            v = (h @ w[p + "attn_v.weight"].T).reshape(n, c.n_head_kv, hd)
            q = rope_neox(rms_norm(q, w[p + "attn_q_norm.weight"], eps), pos, base) / np.sqrt(hd)
            k = rope_neox(rms_norm(k, w[p + "attn_k_norm.weight"], eps), pos, base)
            self.k_cache[il] = np.concatenate([self.k_cache[il], k.astype(np.float16).astype(np.float64)])
            self.v_cache[il] = np.concatenate([self.v_cache[il], v.astype(np.float16).astype(np.float64)])
            K, V = self.k_cache[il], self.v_cache[il]
            att = np.zeros((n, c.n_head, hd))
            for t in range(n):
                last = pos0 + t
                # llama.cpp's SWA mask: key position kp is visible iff last - kp < sliding_window.
                first = max(0, last - c.sliding_window + 1) if local else 0
                for hh in range(c.n_head):
                    kh = hh // group
                    s = K[first:last + 1, kh, :] @ q[t, hh]
                    pr = np.exp(s - s.max())
                    att[t, hh] = (pr / pr.sum()) @ V[first:last + 1, kh, :]
            a = att.reshape(n, -1) @ w[p + "attn_output.weight"].T
            x = x + rms_norm(a, w[p + "post_attention_norm.weight"], eps)
            h = rms_norm(x, w[p + "ffn_norm.weight"], eps)
            g = gelu_tanh(h @ w[p + "ffn_gate.weight"].T) * (h @ w[p + "ffn_up.weight"].T)
            x = x + rms_norm(g @ w[p + "ffn_down.weight"].T, w[p + "post_ffw_norm.weight"], eps)
        return rms_norm(x, w["output_norm.weight"], eps) @ w["token_embd.weight"].T
