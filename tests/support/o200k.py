"""A small stand-in for gpt-oss's o200k_harmony tokenizer, which is not available offline: a
byte-level BPE trained here by Hugging Face tokenizers with the same pre-tokenizer as the real
tokenizer.json (a Split on the o200k regex, then ByteLevel without its own regex) and the harmony
special tokens, written as a GGUF vocabulary with tokenizer.ggml.pre = "gpt-4o"; and a fuzz
corpus that reaches every alternative of the regex."""
from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import gguf

from support.gguf_writing import write_out

# The pattern of gpt-oss's (and GPT-4o's) tokenizer.json, as written there.
O200K_PATTERN = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# o200k_harmony's special tokens (a subset: the ones the harmony format and the vocab rules use).
HARMONY_SPECIALS = ["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>",
                    "<|start|>", "<|end|>", "<|message|>", "<|call|>"]

# Pieces that stress the regex: case runs (Lu, Ll, Lt, Lm, Lo), contractions in any case,
# digit runs, combining marks, CJK, emoji, \r\n runs, spaces before newlines, punctuation
# followed by newlines and slashes, non-ASCII white space.
FRAGMENTS = [
    "Hello", "WORLD", "camelCase", "HTTPServer", "iPhone", "XMLHttpRequest", "aBcDeF", "ABCdef",
    "don't", "DON'T", "He'S", "we'Ve", "it'LL", "I'M", "you'RE", "she'd", "'s", "'S", "'", "O'Neil", "it'\u017f",
    "1", "12", "123", "12345678", "3.14159", "1,000,000", "x²", "Ⅻ", "٣٤٥",
    "我想在apple工作", "日本語のテキスト", "한국어", "café", "cafe\u0301", "ÉCOLE", "École", "naïve",
    "ǅemal", "ǅ", "ʰello", "ʰ", "МОСКВА", "Москва", "straße", "ΑΘΗΝΑ", "नमस्ते", "ภาษาไทย",
    "\u0301", "\u0300A", "a\u0308\u0301", "🚀", "😶\u200d🌫️", "👍🏽", "🦙🦙",
    "\r\n", "\r\n\r\n", "\n", "\n\n\n", "  \n", " \n\n", "\t\n", "\r", "\t", "   ", "\u00a0", "\u3000",
    "!!!\n", "?/", "...\r\n", "a/b/c", "http://x.y/z?q=1", "//\n", " // ", "(x)", "{[<>]}", "#!/bin",
    "--", "==>", "$100", "@user", "__init__", "snake_case", "_", "'''", "\"quoted\"",
]
SEPARATORS = ["", "", " ", " ", "  ", "\n", " \n", "\t", "\r\n"]


def fuzz_texts(n: int, seed: int = 0) -> list[str]:
    """n texts, each 1..12 fragments joined by random separators."""
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        parts = [rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 12))]
        texts.append("".join(p + rng.choice(SEPARATORS) for p in parts))
    return texts


def train_o200k_tokenizer(vocab_size: int = 380) -> Any:
    """A tokenizers.Tokenizer shaped as gpt-oss's: the o200k Split (isolated), ByteLevel without
    its regex, BPE over bytes, the harmony special tokens."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(O200K_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=HARMONY_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(fuzz_texts(400, seed=1) * 3, trainer=trainer)
    return tok


def write_o200k_vocab(path: Path, tok: Any, *, n_vocab: int | None = None, arch: str = "llama",
                      extra: dict[str, Any] | None = None) -> Path:
    """`tok` as a GGUF vocabulary (pre "gpt-4o", harmony specials as control tokens, EOS
    <|return|>), padded with unused control tokens to n_vocab if given. `extra`: more string
    keys (a chat template)."""
    w = gguf.GGUFWriter(str(path), arch=arch)
    add_o200k_vocab(w, tok, n_vocab=n_vocab)
    for key, value in (extra or {}).items():
        w.add_string(key, value)
    write_out(w)
    return path


def add_o200k_vocab(w: gguf.GGUFWriter, tok: Any, *, n_vocab: int | None = None) -> None:
    vocab = tok.get_vocab()
    tokens = sorted(vocab, key=vocab.__getitem__)
    assert [vocab[t] for t in tokens] == list(range(len(tokens)))
    types = [3 if t in HARMONY_SPECIALS else 1 for t in tokens]
    for i in range(len(tokens), n_vocab or 0):   # as o200k_harmony's <|reserved_200013|> ...
        tokens.append(f"<|reserved_{i}|>")
        types.append(3)
    merges = json.loads(tok.to_str())["model"]["merges"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-4o")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    w.add_bos_token_id(vocab["<|startoftext|>"])
    w.add_eos_token_id(vocab["<|return|>"])
    w.add_add_bos_token(False)


def with_o200k_vocab(src: Path, dst: Path, tok: Any, chat_template: str | None = None) -> Path:
    """A copy of the F32 model file `src` whose vocabulary is `tok` (padded to the model's
    n_vocab), so that a converted tiny model runs with an o200k-style tokenizer."""
    r = gguf.GGUFReader(str(src))
    arch = r.fields["general.architecture"].contents()
    embd = next(t for t in r.tensors if t.name == "token_embd.weight")
    w = gguf.GGUFWriter(str(dst), arch=arch)
    for name, field in r.fields.items():
        if name.startswith(("GGUF.", "tokenizer.")) or name == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(name, field.contents(), vtype, sub)
    add_o200k_vocab(w, tok, n_vocab=int(embd.shape[1]))
    if chat_template is not None:
        w.add_chat_template(chat_template)
    for t in r.tensors:
        assert t.tensor_type == gguf.GGMLQuantizationType.F32, t.name
        w.add_tensor(t.name, t.data)
    write_out(w)
    return dst
