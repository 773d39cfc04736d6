"""A tiny random nomic-bert (NomicBertModel, nomic-embed-text v1 / v1.5) and its checkpoint folder.

The checkpoints on the hub carry their own modeling_hf_nomic_bert.py (transformers 5's NomicBertModel
is another layout: split q/k/v, hidden_size, ...) and the tests run offline, so the reference is
written here from that file's equations, with its parameter names (the ones llama.cpp's tensor map
accepts for nomic-bert):

  x = emb_ln(embeddings.word_embeddings[ids] + embeddings.token_type_embeddings[0])
  for each encoder.layers.i (post-LN, prenorm false):
    q | k | v = attn.Wqkv x                    ("... (three h d) -> ... three h d", no bias)
    q, k = rotary(q, k)                        (rotate-half, inv_freq = base^(-2j / head_dim))
    x = norm1(x + attn.out_proj softmax(q k^T / sqrt(head_dim)) v)
    x = norm2(x + mlp.fc2(mlp.fc11(x) * silu(mlp.fc12(x))))
"""
from __future__ import annotations

import json
from pathlib import Path

from support.tiny_bert import save_sentence_transformers_pooling, wordpiece_vocab

N_EMBD, N_LAYER, N_HEAD, N_INNER, ROPE_BASE, EPS = 64, 3, 4, 96, 1000.0, 1e-12


def nomic_config(**changes) -> dict:
    """config.json of the tiny model, with nomic-embed-text-v1.5's keys (its n_positions and
    max_trained_positions too, the pair llama.cpp's converter recognises, and its auto_map to the
    repo's own code)."""
    cfg = {"architectures": ["NomicBertModel"], "model_type": "nomic_bert",
           "auto_map": {"AutoConfig": "nomic-ai/nomic-bert-2048--configuration_hf_nomic_bert.NomicBertConfig",
                        "AutoModel": "nomic-ai/nomic-bert-2048--modeling_hf_nomic_bert.NomicBertModel"}, "vocab_size": len(wordpiece_vocab()),
           "n_embd": N_EMBD, "n_layer": N_LAYER, "n_head": N_HEAD, "n_inner": N_INNER, "n_positions": 8192,
           "max_trained_positions": 2048, "rotary_emb_base": ROPE_BASE, "rotary_emb_fraction": 1.0,
           "rotary_emb_interleaved": False, "rotary_emb_scale_base": None, "layer_norm_epsilon": EPS,
           "type_vocab_size": 2, "prenorm": False, "qkv_proj_bias": False, "mlp_fc1_bias": False,
           "mlp_fc2_bias": False, "activation_function": "swiglu", "causal": False, "pad_token_id": 0}
    cfg.update(changes)
    return cfg


def make_nomic_weights() -> dict:
    """Seeded random float32 weights under the HF checkpoint's names (LayerNorms away from 1 and 0)."""
    import torch

    g = torch.Generator().manual_seed(0)

    def rnd(*shape, scale=0.2):
        return torch.randn(*shape, generator=g) * scale

    d, ff = N_EMBD, N_INNER
    w = {"embeddings.word_embeddings.weight": rnd(len(wordpiece_vocab()), d, scale=1.0),
         "embeddings.token_type_embeddings.weight": rnd(2, d, scale=1.0),
         "emb_ln.weight": 1 + rnd(d), "emb_ln.bias": rnd(d)}
    for i in range(N_LAYER):
        p = f"encoder.layers.{i}."
        w |= {p + "attn.Wqkv.weight": rnd(3 * d, d), p + "attn.out_proj.weight": rnd(d, d),
              p + "norm1.weight": 1 + rnd(d), p + "norm1.bias": rnd(d),
              p + "mlp.fc11.weight": rnd(ff, d), p + "mlp.fc12.weight": rnd(ff, d), p + "mlp.fc2.weight": rnd(d, ff),
              p + "norm2.weight": 1 + rnd(d), p + "norm2.bias": rnd(d)}
    return w


def _rotary(x, base: float):
    """x: [n][h][head_dim], rotated by position (rotate-half pairs j and j + head_dim / 2)."""
    import torch

    n, hd = x.shape[0], x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    freqs = torch.outer(torch.arange(n, dtype=torch.float32), inv_freq)   # [n][hd / 2]
    cos, sin = (torch.cat([f, f], dim=-1)[:, None, :] for f in (freqs.cos(), freqs.sin()))
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def nomic_hidden(w: dict, ids: list[int]):
    """The reference's last hidden states [n][n_embd] of one input (token type 0), float64."""
    import torch
    import torch.nn.functional as F

    w = {k: v.double() for k, v in w.items()}
    n, d, hd = len(ids), N_EMBD, N_EMBD // N_HEAD

    def ln(x, name):
        return F.layer_norm(x, (d,), w[name + ".weight"], w[name + ".bias"], EPS)

    x = ln(w["embeddings.word_embeddings.weight"][ids] + w["embeddings.token_type_embeddings.weight"][0], "emb_ln")
    for i in range(N_LAYER):
        p = f"encoder.layers.{i}."
        q, k, v = (x @ w[p + "attn.Wqkv.weight"].T).view(n, 3, N_HEAD, hd).unbind(1)
        q, k = _rotary(q, ROPE_BASE), _rotary(k, ROPE_BASE)
        a = torch.softmax(torch.einsum("qhd,khd->hqk", q, k) / hd ** 0.5, dim=-1)
        o = torch.einsum("hqk,khd->qhd", a, v).reshape(n, d)
        x = ln(x + o @ w[p + "attn.out_proj.weight"].T, p + "norm1")
        up, gate = x @ w[p + "mlp.fc11.weight"].T, x @ w[p + "mlp.fc12.weight"].T
        x = ln(x + (up * F.silu(gate)) @ w[p + "mlp.fc2.weight"].T, p + "norm2")
    return x.numpy()


def save_nomic_folder(folder: Path, weights: dict, **config_changes) -> None:
    """The checkpoint folder: model.safetensors, config.json, a WordPiece tokenizer (as
    nomic-embed-text's bert-base-uncased one) and sentence-transformers' mean pooling."""
    from safetensors.torch import save_file
    from transformers import BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(wordpiece_vocab()) + "\n", encoding="utf-8")
    BertTokenizerFast(vocab=str(folder / "vocab.txt"), do_lower_case=True).save_pretrained(folder)
    save_file({k: v.contiguous() for k, v in weights.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(nomic_config(**config_changes), indent=1))
    save_sentence_transformers_pooling(folder, N_EMBD, "mean")
