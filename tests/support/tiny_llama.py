"""Writes tiny random-weight llama GGUF files for unit tests (never a stand-in for the real models).

The vocabulary is byte-level BPE: the 256 GPT-2 byte symbols plus a few merges and three control
tokens, enough for the tokenizer to load and round-trip text."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import gguf
import numpy as np

from support.byte_level import BYTE_CHARS
from support.gguf_writing import add_weights, write_out
from support.tiny_weights import RandomWeights

# Ids of the vocabulary's control tokens (tiny_vocab): <|endoftext|> 0, <|im_start|> 1 (the BOS),
# <|im_end|> 2 (the EOS: end of generation).
BOS = 1
IM_END = 2


@dataclass(frozen=True)
class TinyConfig:
    n_embd: int = 64
    n_head: int = 4
    n_head_kv: int = 2
    n_layer: int = 2
    n_ff: int = 96
    n_ctx_train: int = 256
    rope_base: float = 10000.0
    norm_eps: float = 1e-5
    tied_output: bool = False
    rope_freq_factors: bool = False   # a Llama-3.1-style rope_freqs tensor
    rope_linear_factor: float = 0.0   # rope.scaling.type linear with this factor (0 = none)
    weight_type: str = "F32"  # F32, F16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, IQ2_XXS, ... for the
                              # 2-D matmul weights (gguf_writing.add_weights)
    arch: str = "llama"       # general.architecture: "smollm3" is the same file with every fourth
                              # layer unroped (the numpy reference knows llama only)

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


# head_dim 32: the smallest head whose K/V rows a quantized KV cache takes (blocks of 32 values).
HD32 = TinyConfig(n_embd=128, n_head=4, n_head_kv=2)
# Rows of 256 and 512 values: every matrix fits the k-quants' super-blocks of 256, so the file can
# be quantized to every preset.
KQUANTIZABLE = TinyConfig(n_embd=256, n_head=4, n_head_kv=2, n_ff=512)


def tiny_vocab() -> tuple[list[str], list[int], list[str]]:
    """(tokens, llama.cpp token types, merges): three control tokens, the byte alphabet, 4 merges."""
    symbols = list(BYTE_CHARS)
    merges = ["Ġ t", "h e", "Ġt he", "i n"]
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + symbols + [m.replace(" ", "") for m in merges]
    types = [3, 3, 3] + [1] * (len(tokens) - 3)
    return tokens, types, merges


def make_weights(cfg: TinyConfig, n_vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights keyed by GGUF tensor name."""
    draw = RandomWeights(seed)
    d, hd, ff = cfg.n_embd, cfg.head_dim, cfg.n_ff
    w = {"token_embd.weight": draw.rng.standard_normal((n_vocab, d)).astype(np.float32)}
    for il in range(cfg.n_layer):
        p = f"blk.{il}."
        w[p + "attn_norm.weight"] = draw.norm(d, 0.1)
        w[p + "attn_q.weight"] = draw.matrix(cfg.n_head * hd, d)
        w[p + "attn_k.weight"] = draw.matrix(cfg.n_head_kv * hd, d)
        w[p + "attn_v.weight"] = draw.matrix(cfg.n_head_kv * hd, d)
        w[p + "attn_output.weight"] = draw.matrix(d, cfg.n_head * hd)
        w[p + "ffn_norm.weight"] = draw.norm(d, 0.1)
        w[p + "ffn_gate.weight"] = draw.matrix(ff, d)
        w[p + "ffn_up.weight"] = draw.matrix(ff, d)
        w[p + "ffn_down.weight"] = draw.matrix(d, ff)
    if cfg.rope_freq_factors:
        w["rope_freqs.weight"] = np.linspace(1.0, 8.0, hd // 2).astype(np.float32)
    w["output_norm.weight"] = draw.norm(d, 0.1)
    if not cfg.tied_output:
        w["output.weight"] = draw.matrix(n_vocab, d)
    return w


def write_tiny_llama(path: Path, cfg: TinyConfig = TinyConfig(), seed: int = 0,
                     extra_tokens: Sequence[tuple[str, int]] = (), chat_template: str | None = None
                     ) -> dict[str, np.ndarray]:
    """Writes the model; returns the weights as the file stores them, dequantized to float32
    (what an exact reference must compute with). `extra_tokens` (text, llama.cpp token type)
    are appended to the vocabulary, e.g. a template family's special tokens."""
    tokens, types, merges = tiny_vocab()
    tokens += [text for text, _ in extra_tokens]
    types += [kind for _, kind in extra_tokens]
    weights = make_weights(cfg, len(tokens), seed)

    writer = gguf.GGUFWriter(str(path), cfg.arch)
    writer.add_name("tiny-random-llama")
    writer.add_context_length(cfg.n_ctx_train)
    writer.add_embedding_length(cfg.n_embd)
    writer.add_block_count(cfg.n_layer)
    writer.add_feed_forward_length(cfg.n_ff)
    writer.add_head_count(cfg.n_head)
    writer.add_head_count_kv(cfg.n_head_kv)
    writer.add_rope_dimension_count(cfg.head_dim)
    writer.add_rope_freq_base(cfg.rope_base)
    writer.add_layer_norm_rms_eps(cfg.norm_eps)
    if cfg.rope_linear_factor:
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(cfg.rope_linear_factor)
    writer.add_file_type(0 if cfg.weight_type == "F32" else 1)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(BOS)
    writer.add_eos_token_id(IM_END)
    writer.add_add_bos_token(False)
    if chat_template is not None:
        writer.add_chat_template(chat_template)

    # A tied output is the embedding matrix: then it is stored as the weight type too.
    stored = add_weights(writer, weights, cfg.weight_type, plain=() if cfg.tied_output else ("token_embd.weight",))
    write_out(writer)
    return stored
