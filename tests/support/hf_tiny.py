"""Tiny random-weight Hugging Face checkpoints for the converter tests: a config per family
(a few layers, hidden 64, a vocabulary of a few hundred), saved with transformers'
save_pretrained (safetensors), with a small SentencePiece tokenizer trained here."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

# A varied text: ASCII prose, digits, punctuation, whitespace runs, accents, CJK, emoji.
SAMPLE_TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! 12345 + 678 = 13023?",
    "  leading spaces, trailing spaces   ",
    "tabs\tand\nnew lines\n\nand more",
    "Ünïcödé çharacters: naïve café, Straße, Ελληνικά, русский.",
    "我想在apple工作 1314151天～",
    "emoji 🚀🦙 ✅ and symbols @#$%^&*()_+-=[]{}|;':\",./<>?",
    "I've been 'told he's there, 'RE you sure? We'Ve a'lL",
    "x" * 40 + " " + "ab" * 20,
    "def f(x):\n    return x ** 2  # square\n",
]


def train_sentencepiece(folder: Path, vocab_size: int = 400, add_dummy_prefix: bool = True,
                        user_defined_symbols: tuple[str, ...] = ()) -> Path:
    """A BPE SentencePiece model with byte fallback (as Llama 2's), trained on SAMPLE_TEXTS
    repeated; written to folder/tokenizer.model. Without `add_dummy_prefix` it puts no space
    before the text, as Gemma's does. `user_defined_symbols`: pieces it always has (a reranker's
    "yes" and "no")."""
    import sentencepiece as spm

    folder.mkdir(parents=True, exist_ok=True)
    corpus = folder / "corpus.txt"
    lines = [t.replace("\n", " ") for t in SAMPLE_TEXTS] * 20
    lines += [" ".join(f"word{i} token{i * 7 % 13} piece{i % 5}" for i in range(j, j + 12)) for j in range(200)]
    corpus.write_text("\n".join(lines), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(folder / "tokenizer"), vocab_size=vocab_size, model_type="bpe",
        byte_fallback=True, character_coverage=1.0, normalization_rule_name="identity",
        split_digits=True, allow_whitespace_only_pieces=True, remove_extra_whitespaces=False,
        add_dummy_prefix=add_dummy_prefix, user_defined_symbols=list(user_defined_symbols), unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)
    corpus.unlink()
    (folder / "tokenizer.vocab").unlink()
    return folder / "tokenizer.model"


def gemma_hf_tokenizer(tokenizer_model: Path) -> Any:
    """transformers' Gemma tokenizer over the SentencePiece model's pieces: what a Gemma
    checkpoint's tokenizer.json holds (BPE with byte fallback, never a prefix space), with the
    merges transformers derives from the pieces when it converts a tokenizer.model itself (which
    needs protobuf, not a dependency here)."""
    import sentencepiece as spm
    from transformers import GemmaTokenizer
    from transformers.tokenization_utils_base import generate_merges

    sp = spm.SentencePieceProcessor(model_file=str(tokenizer_model))
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    unk = sp.id_to_piece(sp.unk_id())
    return GemmaTokenizer(vocab=vocab, merges=generate_merges(vocab), bos_token=sp.id_to_piece(sp.bos_id()),
                          eos_token=sp.id_to_piece(sp.eos_id()), unk_token=unk, pad_token=unk, mask_token=unk,
                          add_bos_token=True)


def write_tokenizer_config(folder: Path, **extra: Any) -> None:
    config = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
              "add_eos_token": False,
              "chat_template": "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"}
    config.update(extra)
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")


# family -> (transformers config class name, model class name, config values)
FAMILIES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM",
              dict(num_attention_heads=4, num_key_value_heads=2)),
    # head_dim * heads != hidden (as Mistral Nemo): the llama path with attention.key_length
    "mistral": ("MistralConfig", "MistralForCausalLM",
                dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32, sliding_window=None)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM",
              dict(num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM",
              dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32)),
    # 4 experts of width 32, 2 a token, weights renormalized (as every Qwen 3 MoE checkpoint)
    "qwen3moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                 dict(num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_experts=4,
                      num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True)),
    # 4 layers alternating sliding window (8 positions, so the test prompts pass it) and global;
    # 4 experts of width 32, 2 a token; YaRN as the released models (truncated: ggml's form)
    "gptoss": ("GptOssConfig", "GptOssForCausalLM",
               dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_hidden_layers=4,
                    num_local_experts=4, num_experts_per_tok=2, intermediate_size=32, sliding_window=8,
                    rope_parameters=dict(rope_type="yarn", rope_theta=150000.0, factor=4.0, beta_fast=32.0,
                                         beta_slow=1.0, truncate=True, original_max_position_embeddings=64))),
    # 6 layers: five sliding-window (local) layers and one global, as Gemma 3's pattern has them
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM",
               dict(num_attention_heads=4, num_key_value_heads=1, head_dim=32, num_hidden_layers=6,
                    sliding_window=16, query_pre_attn_scalar=32, pad_token_id=0)),
    # EmbeddingGemma's shape: Gemma 3 layers attending both ways (transformers halves the sliding
    # window on load: 8 positions here attend 4 either side), no output head
    "embeddinggemma": ("Gemma3TextConfig", "Gemma3TextModel",
                       dict(num_attention_heads=4, num_key_value_heads=1, head_dim=32, num_hidden_layers=6,
                            sliding_window=8, query_pre_attn_scalar=32, pad_token_id=0,
                            use_bidirectional_attention=True)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM",
             dict(num_attention_heads=4, num_key_value_heads=4, pad_token_id=0, sliding_window=None)),
    # 5 layers: the fourth skips RoPE (NoPE) and is not the last; tied output, as SmolLM3's
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM",
                dict(num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=5, pad_token_id=0)),
    # Granite 3.3-2B's embedding, residual and logits multipliers; an attention multiplier away
    # from 1/sqrt(head_dim) = 0.25, so that a dropped one shows
    "granite": ("GraniteConfig", "GraniteForCausalLM",
                dict(num_attention_heads=4, num_key_value_heads=2, embedding_multiplier=12.0,
                     attention_multiplier=0.1, residual_multiplier=0.22, logits_scaling=8.0)),
    # 5 layers, convolutions around two attention layers, the last a convolution (as LFM2-350M's);
    # the feed-forward auto-adjusted (2/3 of 128, rounded up to 32: 96), as LFM2's configs do
    "lfm2": ("Lfm2Config", "Lfm2ForCausalLM",
             dict(num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=5,
                  layer_types=["conv", "full_attention", "conv", "full_attention", "conv"],
                  conv_L_cache=3, block_auto_adjust_ff_dim=True, block_ffn_dim_multiplier=1.0,
                  block_multiple_of=32, norm_eps=1e-5, pad_token_id=0)),
    # LFM2's 5 layers with the first one's feed-forward dense and the rest 4 experts of width 32,
    # 2 a token (sigmoid router, selection bias), as LFM2-8B-A1B's pattern
    "lfm2moe": ("Lfm2MoeConfig", "Lfm2MoeForCausalLM",
                dict(num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=5,
                     layer_types=["conv", "full_attention", "conv", "full_attention", "conv"],
                     conv_L_cache=3, num_dense_layers=1, num_experts=4, num_experts_per_tok=2,
                     moe_intermediate_size=32, norm_eps=1e-5, pad_token_id=0)),
}


def make_tiny_checkpoint(folder: Path, family: str, tokenizer_model: Path, seed: int = 0,
                         **overrides: Any) -> Any:
    """Saves a random tiny `family` model with the SentencePiece tokenizer into `folder`;
    returns the transformers model (eval mode, float32)."""
    import shutil

    import torch
    import transformers

    config_cls, model_cls, values = FAMILIES[family]
    import sentencepiece as spm

    vocab_size = spm.SentencePieceProcessor(model_file=str(tokenizer_model)).vocab_size()
    defaults = dict(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                    max_position_embeddings=256, rms_norm_eps=1e-5, initializer_range=0.2,
                    bos_token_id=1, eos_token_id=2)
    config = getattr(transformers, config_cls)(**{**defaults, **values, **overrides})
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(config).eval().to(torch.float32)
    with torch.no_grad():  # norm weights away from 1, biases away from 0: the tests must see them
        for name, p in model.named_parameters():
            if p.ndim == 1 or name.endswith("_bias"):   # (gpt-oss's per-expert biases are 2-D)
                p.add_(torch.randn_like(p) * 0.2)
        for name, b in model.named_buffers():   # LFM2-MoE's selection bias is a buffer
            if name.endswith("expert_bias"):
                b.add_(torch.randn_like(b) * 0.2)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    shutil.copy(tokenizer_model, folder / "tokenizer.model")
    write_tokenizer_config(folder)
    return model


def hf_logits(model: Any, ids: list[int]) -> np.ndarray:
    """[len(ids)][n_vocab] logits of one forward pass over ids."""
    import torch

    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float().numpy()


def hf_decode_logits(model: Any, ids: list[int]) -> np.ndarray:
    """The same logits computed one token at a time through transformers' KV cache."""
    import torch

    rows, past = [], None
    with torch.no_grad():
        for t in ids:
            out = model(torch.tensor([[t]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
            rows.append(out.logits[0, -1].float().numpy())
    return np.stack(rows)
