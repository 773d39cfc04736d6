"""Writes a Hugging Face-style checkpoint (config.json, sharded safetensors, tokenizer files) from
a GGUF model, every tensor dequantized to F32: the round-trip tests convert it back with
`edgeinfer convert` and expect the original file's weights and logits. The HF names here are
written out by hand, independently of the converter's table (gguf-py's TensorNameMap), so the
round trip checks the mapping both ways."""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, TokenType
from gguf.quants import dequantize

from edgeinfer import _core

# GGUF name (without "blk.N." and ".weight") -> HF name (with "{}" for the layer)
_GLOBAL = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_LAYER = {
    "llama": {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
              "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
              "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
              "ffn_down": "mlp.down_proj"},
    "gemma3": {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
               "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
               "attn_k_norm": "self_attn.k_norm", "post_attention_norm": "post_attention_layernorm",
               "ffn_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm",
               "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"},
}


class GGUFModel:
    """A GGUF file through the core's reader (gguf-py's takes tens of seconds on a large
    vocabulary); values are dequantized by gguf-py, bit-identical to llama.cpp."""

    def __init__(self, path: Path):
        self.file = _core.GgufFile(str(path))
        self.arch = self.get("general.architecture")

    def get(self, key: str, default: Any = None) -> Any:
        return self.file.get(key, default)

    def a(self, key: str, default: Any = None) -> Any:
        return self.get(f"{self.arch}.{key}", default)

    def raw(self, name: str) -> np.ndarray:
        return self.file.tensor_data(name)

    def tensors(self) -> dict[str, np.ndarray]:
        """name -> F32 values in numpy order (rows first)."""
        out = {}
        for t in self.file.tensors():
            shape = tuple(reversed(t["shape"]))
            qtype = GGMLQuantizationType(t["type"])
            out[t["name"]] = dequantize(self.raw(t["name"]), qtype).reshape(shape).astype(np.float32)
        return out


def unpermute_rope_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp's Q/K permutation: pairs back to HF's halves."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _hf_name(arch: str, name: str) -> str:
    base = name.removesuffix(".weight")
    if base in _GLOBAL:
        return _GLOBAL[base] + ".weight"
    _, layer, kind = base.split(".", 2)
    return f"model.layers.{layer}.{_LAYER[arch][kind]}.weight"


def _config(m: GGUFModel, tied: bool) -> dict[str, Any]:
    n_embd, n_head = m.a("embedding_length"), m.a("attention.head_count")
    common = {
        "hidden_size": n_embd, "intermediate_size": m.a("feed_forward_length"),
        "num_hidden_layers": m.a("block_count"), "num_attention_heads": n_head,
        "num_key_value_heads": m.a("attention.head_count_kv", n_head),
        "max_position_embeddings": m.a("context_length"), "rms_norm_eps": m.a("attention.layer_norm_rms_epsilon"),
        "vocab_size": len(m.get("tokenizer.ggml.tokens")), "tie_word_embeddings": tied,
        "bos_token_id": m.get("tokenizer.ggml.bos_token_id"), "eos_token_id": m.get("tokenizer.ggml.eos_token_id"),
        "torch_dtype": "float32",
    }
    if m.arch == "llama":
        return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
                "rope_theta": m.a("rope.freq_base"), **common}
    assert m.arch == "gemma3"
    head_dim = m.a("attention.key_length")
    return {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "head_dim": head_dim,
            "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": head_dim,
            "sliding_window": m.a("attention.sliding_window"), "rope_theta": m.a("rope.freq_base"),
            "rope_local_base_freq": 10000.0, "final_logit_softcapping": None, "attn_logit_softcapping": None,
            "pad_token_id": m.get("tokenizer.ggml.padding_token_id"), **common}


def _bpe_tokenizer_json(m: GGUFModel, pre_tokenizer: dict[str, Any]) -> dict[str, Any]:
    tokens, types = m.get("tokenizer.ggml.tokens"), m.get("tokenizer.ggml.token_type")
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True}
             for i, (t, k) in enumerate(zip(tokens, types)) if k == TokenType.CONTROL]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": pre_tokenizer, "post_processor": byte_level, "decoder": byte_level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": False, "vocab": {t: i for i, t in enumerate(tokens)},
                      "merges": m.get("tokenizer.ggml.merges")}}


# SmolLM's pre-tokenizer: every digit alone, then GPT-2's byte-level split.
SMOLLM_PRE_TOKENIZER = {"type": "Sequence", "pretokenizers": [
    {"type": "Digits", "individual_digits": True},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}


def _token_config(m: GGUFModel) -> dict[str, Any]:
    tokens = m.get("tokenizer.ggml.tokens")
    config: dict[str, Any] = {}
    for kind, key in (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("unk", "unknown_token_id"),
                      ("pad", "padding_token_id")):
        tid = m.get(f"tokenizer.ggml.{key}")
        if tid is not None:
            config[f"{kind}_token"] = tokens[tid]
    for flag in ("add_bos_token", "add_eos_token"):
        if m.get(f"tokenizer.ggml.{flag}") is not None:
            config[flag] = bool(m.get(f"tokenizer.ggml.{flag}"))
    if m.get("tokenizer.ggml.add_space_prefix") is not None:
        config["add_prefix_space"] = bool(m.get("tokenizer.ggml.add_space_prefix"))
    if m.get("tokenizer.chat_template") is not None:
        config["chat_template"] = m.get("tokenizer.chat_template")
    if m.get("tokenizer.ggml.model") == "llama":
        # SentencePiece has no "user defined" type that llama.cpp reads: those tokens come from
        # tokenizer_config.json's added_tokens_decoder, as in Gemma's real files.
        types = m.get("tokenizer.ggml.token_type")
        config["added_tokens_decoder"] = {
            str(i): {"content": tokens[i], "special": False, "normalized": False, "lstrip": False,
                     "rstrip": False, "single_word": False}
            for i, kind in enumerate(types) if kind == TokenType.USER_DEFINED}
        unk = m.get("tokenizer.ggml.unknown_token_id")
        if unk is not None and types[unk] == TokenType.CONTROL:
            config["added_tokens_decoder"][str(unk)] = {"content": tokens[unk], "special": True}
    return config


def write_hf_checkpoint(gguf_path: Path, folder: Path, pre_tokenizer: dict[str, Any] | None = None,
                        n_shards: int = 2) -> None:
    """folder <- config.json, model-0000i-of-0000n.safetensors + index, tokenizer files."""
    from safetensors.numpy import save_file

    m = GGUFModel(gguf_path)
    folder.mkdir(parents=True, exist_ok=True)
    gguf_tensors = m.tensors()
    tied = "output.weight" not in gguf_tensors
    n_head, n_head_kv = m.a("attention.head_count"), m.a("attention.head_count_kv")
    hf: dict[str, np.ndarray] = {}
    for name, data in gguf_tensors.items():
        if m.arch == "llama" and name.endswith("attn_q.weight"):
            data = unpermute_rope_rows(data, n_head)
        elif m.arch == "llama" and name.endswith("attn_k.weight"):
            data = unpermute_rope_rows(data, n_head_kv)
        elif m.arch == "gemma3" and name.endswith("norm.weight"):
            data = data - np.float32(1.0)   # HF stores w, the GGUF (1 + w)
        hf[_hf_name(m.arch, name)] = np.ascontiguousarray(data)
    names = list(hf)
    weight_map = {}
    for i in range(n_shards):
        shard = f"model-{i + 1:05d}-of-{n_shards:05d}.safetensors"
        part = {n: hf[n] for n in names[i::n_shards]}
        save_file(part, str(folder / shard), metadata={"format": "pt"})
        weight_map.update({n: shard for n in part})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (folder / "config.json").write_text(json.dumps(_config(m, tied), indent=1))
    (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": m.get("tokenizer.ggml.bos_token_id"),
                                                               "eos_token_id": m.get("tokenizer.ggml.eos_token_id")}))
    (folder / "tokenizer_config.json").write_text(json.dumps(_token_config(m), indent=1))
    if m.get("tokenizer.ggml.model") == "gpt2":
        tj = _bpe_tokenizer_json(m, pre_tokenizer or SMOLLM_PRE_TOKENIZER)
        (folder / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False))
    else:
        (folder / "tokenizer.model").write_bytes(sentencepiece_model_bytes(m))


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, wire: int, payload: bytes) -> bytes:
    key = _varint(number << 3 | wire)
    return key + (_varint(len(payload)) + payload if wire == 2 else payload)


def sentencepiece_model_bytes(m: GGUFModel) -> bytes:
    """A SentencePiece ModelProto (sentencepiece_model.proto) with the GGUF's pieces, scores and
    types (GGUF token types use SentencePiece's numbering): a BPE model with byte fallback and no
    text normalization, as Gemma's. Written by hand: protobuf is not a dependency."""
    tokens, scores, types = m.get("tokenizer.ggml.tokens"), m.get("tokenizer.ggml.scores"), m.get("tokenizer.ggml.token_type")
    unk = m.get("tokenizer.ggml.unknown_token_id")
    out = bytearray()
    for i, (text, score, kind) in enumerate(zip(tokens, scores, types)):
        if i == unk:
            kind = TokenType.UNKNOWN   # llama.cpp made it CONTROL from added_tokens_decoder (_token_config)
        piece = (_field(1, 2, text.encode("utf-8")) + _field(2, 5, struct.pack("<f", score))
                 + _field(3, 0, _varint(kind)))
        out += _field(1, 2, piece)
    special = {"unk": m.get("tokenizer.ggml.unknown_token_id"), "bos": m.get("tokenizer.ggml.bos_token_id"),
               "eos": m.get("tokenizer.ggml.eos_token_id"), "pad": m.get("tokenizer.ggml.padding_token_id", -1)}
    trainer = (_field(3, 0, _varint(2)) + _field(35, 0, _varint(1))        # model_type BPE, byte_fallback
               + b"".join(_field(n, 0, _varint(special[k] & 0xFFFFFFFFFFFFFFFF))
                          for n, k in ((40, "unk"), (41, "bos"), (42, "eos"), (43, "pad")))
               + b"".join(_field(n, 2, tokens[special[k]].encode("utf-8"))   # unk/bos/eos/pad_piece
                          for n, k in ((45, "unk"), (46, "bos"), (47, "eos"), (48, "pad")) if special[k] >= 0))
    add_prefix = bool(m.get("tokenizer.ggml.add_space_prefix", True))
    normalizer = (_field(1, 2, b"identity") + _field(3, 0, _varint(int(add_prefix)))
                  + _field(4, 0, _varint(0)) + _field(5, 0, _varint(1)))
    out += _field(2, 2, trainer) + _field(3, 2, normalizer)
    return bytes(out)
