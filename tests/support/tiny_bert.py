"""Tiny random BERT checkpoints with a WordPiece vocabulary and the sentence-transformers folder
layout (modules.json, 1_Pooling), for the embedding and reranking tests."""
from __future__ import annotations

import json
from pathlib import Path

WORDS = ["the", "quick", "brown", "fox", "jump", "over", "lazy", "dog", "hello", "world", "and", "new",
         "line", "more", "space", "lead", "trail", "tab", "cafe", "naive", "char", "act", "er", "apple",
         "un", "believ", "able", "play", "upper", "lower", "mixed", "symbol", "emoji", "ecole", "stra"]
SUFFIXES = ["s", "es", "ing", "ed", "er", "able", "ers", "ly", "ss", "e"]
CJK = "我想在工作天"


def wordpiece_vocab() -> list[str]:
    vocab = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = [chr(c) for c in range(33, 127) if not chr(c).isupper()] + list(CJK) + ["ß", "ç", "～"]
    vocab += chars + ["##" + c for c in chars if c.isalnum()]
    vocab += WORDS + ["##" + s for s in SUFFIXES] + ["##" + w for w in WORDS[:10]]
    seen, out = set(), []
    for t in vocab:
        if t not in seen:
            seen.add(t)
            out.append(t)
    return out


def save_bert_folder(folder: Path, model, pooling: str) -> None:
    from transformers import BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(wordpiece_vocab()) + "\n", encoding="utf-8")
    tok = BertTokenizerFast(vocab=str(folder / "vocab.txt"), do_lower_case=True)
    tok.save_pretrained(folder)
    model.save_pretrained(folder, safe_serialization=True)
    save_sentence_transformers_pooling(folder, model.config.hidden_size, pooling)


def save_sentence_transformers_pooling(folder: Path, n_embd: int, pooling: str) -> None:
    """modules.json and 1_Pooling/config.json saying `pooling` ("mean" or "cls")."""
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (folder / "1_Pooling").mkdir(exist_ok=True)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": n_embd, f"pooling_mode_{pooling}_token"
         if pooling == "cls" else "pooling_mode_mean_tokens": True}))


def make_bert(cls_name: str = "BertModel", **extra):
    import transformers

    config = transformers.BertConfig(vocab_size=len(wordpiece_vocab()), hidden_size=64, num_hidden_layers=3,
                                     num_attention_heads=4, intermediate_size=128, max_position_embeddings=64,
                                     type_vocab_size=2, layer_norm_eps=1e-12, initializer_range=0.2, **extra)
    return random_model(cls_name, config)


def random_model(cls_name: str, config):
    """transformers' `cls_name` of `config` with seeded random weights, in float32 eval mode."""
    import torch
    import transformers

    torch.manual_seed(0)
    model = getattr(transformers, cls_name)(config).eval().to(torch.float32)
    with torch.no_grad():  # norm weights away from 1, biases away from 0: the test must see them
        for _, p in model.named_parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * 0.2)
    return model


def write_cross_encoder(folder: Path):
    """A tiny BertForSequenceClassification (one score) with its tokenizer, saved in `folder`."""
    from transformers import BertTokenizerFast

    model = make_bert("BertForSequenceClassification", num_labels=1)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(wordpiece_vocab()) + "\n", encoding="utf-8")
    BertTokenizerFast(vocab=str(folder / "vocab.txt")).save_pretrained(folder)
    model.save_pretrained(folder, safe_serialization=True)
    return model
