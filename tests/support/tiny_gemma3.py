"""Writes tiny random-weight gemma3 GGUF files for unit tests (support/numpy_reference.py has the
matching forward pass).

The file has the keys and tensor names llama.cpp's gemma3 loader reads (QK norms, post-attention
and post-FFN norms, a sliding window, a tied output) and a small SentencePiece vocabulary."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from support.gguf_writing import add_weights, write_out
from support.tiny_weights import RandomWeights


@dataclass(frozen=True)
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
    """Random weights keyed by GGUF tensor name."""
    draw = RandomWeights(seed)
    d, hd, ff = cfg.n_embd, cfg.head_dim, cfg.n_ff
    # Embeddings are scaled by sqrt(n_embd) in the forward pass, so keep them small.
    w = {"token_embd.weight": draw.matrix(n_vocab, d)}
    for il in range(cfg.n_layer):
        p = f"blk.{il}."
        w[p + "attn_norm.weight"] = draw.norm(d, 0.2)
        w[p + "attn_q.weight"] = draw.matrix(cfg.n_head * hd, d)
        w[p + "attn_k.weight"] = draw.matrix(cfg.n_head_kv * hd, d)
        w[p + "attn_v.weight"] = draw.matrix(cfg.n_head_kv * hd, d)
        w[p + "attn_q_norm.weight"] = draw.norm(hd, 0.2)
        w[p + "attn_k_norm.weight"] = draw.norm(hd, 0.2)
        w[p + "attn_output.weight"] = draw.matrix(d, cfg.n_head * hd)
        w[p + "post_attention_norm.weight"] = draw.norm(d, 0.2)
        w[p + "ffn_norm.weight"] = draw.norm(d, 0.2)
        w[p + "ffn_gate.weight"] = draw.matrix(ff, d)
        w[p + "ffn_up.weight"] = draw.matrix(ff, d)
        w[p + "ffn_down.weight"] = draw.matrix(d, ff)
        w[p + "post_ffw_norm.weight"] = draw.norm(d, 0.2)
    w["output_norm.weight"] = draw.norm(d, 0.2)
    return w


def write_tiny_gemma3(path: Path, cfg: TinyGemma3Config = TinyGemma3Config(),
                      seed: int = 0) -> dict[str, np.ndarray]:
    """Writes the model; returns the weights as stored, dequantized to float32."""
    tokens, scores, types = tiny_spm_vocab()
    weights = make_weights(cfg, len(tokens), seed)

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

    stored = add_weights(w, weights, cfg.weight_type)   # the embedding (tied output) too
    write_out(w)
    return stored
