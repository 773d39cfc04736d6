"""Writes tiny random-weight llama GGUF files for unit tests (never a stand-in for the real models).

The vocabulary is byte-level BPE: the 256 GPT-2 byte symbols plus a few merges and two control
tokens, enough for the tokenizer to load and round-trip text."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import gguf
import numpy as np

# Ids of the vocabulary's control tokens (tiny_vocab): <|endoftext|> 0, <|im_start|> 1 (the BOS),
# <|im_end|> 2 (the EOS: end of generation).
BOS = 1
IM_END = 2


@dataclass
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
    weight_type: str = "F32"  # F32, F16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 for the 2-D matmul weights

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


def _byte_symbols() -> list[str]:
    """GPT-2's reversible byte -> printable-unicode mapping (the byte-level BPE alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


def tiny_vocab() -> tuple[list[str], list[int], list[str]]:
    symbols = _byte_symbols()
    merges = ["Ġ t", "h e", "Ġt he", "i n"]
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + symbols + [m.replace(" ", "") for m in merges]
    types = [3, 3, 3] + [1] * (len(tokens) - 3)
    return tokens, types, merges


def make_weights(cfg: TinyConfig, n_vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random weights keyed by GGUF tensor name; matrices are [rows=out][cols=in] in numpy order."""
    rng = np.random.default_rng(seed)
    d, hd, ff = cfg.n_embd, cfg.head_dim, cfg.n_ff

    def mat(out_dim: int, in_dim: int) -> np.ndarray:
        return (rng.standard_normal((out_dim, in_dim)) / np.sqrt(in_dim)).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = {"token_embd.weight": rng.standard_normal((n_vocab, d)).astype(np.float32)}
    for il in range(cfg.n_layer):
        p = f"blk.{il}."
        w[p + "attn_norm.weight"] = norm(d)
        w[p + "attn_q.weight"] = mat(cfg.n_head * hd, d)
        w[p + "attn_k.weight"] = mat(cfg.n_head_kv * hd, d)
        w[p + "attn_v.weight"] = mat(cfg.n_head_kv * hd, d)
        w[p + "attn_output.weight"] = mat(d, cfg.n_head * hd)
        w[p + "ffn_norm.weight"] = norm(d)
        w[p + "ffn_gate.weight"] = mat(ff, d)
        w[p + "ffn_up.weight"] = mat(ff, d)
        w[p + "ffn_down.weight"] = mat(d, ff)
    if cfg.rope_freq_factors:
        w["rope_freqs.weight"] = np.linspace(1.0, 8.0, hd // 2).astype(np.float32)
    w["output_norm.weight"] = norm(d)
    if not cfg.tied_output:
        w["output.weight"] = mat(n_vocab, d)
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
    qtype = gguf.GGMLQuantizationType[cfg.weight_type]

    writer = gguf.GGUFWriter(str(path), "llama")
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

    stored: dict[str, np.ndarray] = {}
    for name, value in weights.items():
        is_matrix = value.ndim == 2 and name != "token_embd.weight" or (name == "token_embd.weight" and cfg.tied_output)
        if is_matrix and qtype != gguf.GGMLQuantizationType.F32:
            if qtype == gguf.GGMLQuantizationType.F16:
                data = value.astype(np.float16)
                writer.add_tensor(name, data)
                stored[name] = data.astype(np.float32)
            else:
                data = gguf.quants.quantize(value, qtype)
                writer.add_tensor(name, data, raw_dtype=qtype)
                stored[name] = gguf.quants.dequantize(data, qtype).reshape(value.shape).astype(np.float32)
        else:
            writer.add_tensor(name, value)
            stored[name] = value
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return stored
