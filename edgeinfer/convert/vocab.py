"""The tokenizer of a checkpoint as GGUF vocabulary metadata, the way llama.cpp's converter
writes it (so that llama.cpp and our core tokenize the converted file alike):

- ``tokenizer.model`` (SentencePiece) -> ``tokenizer.ggml.model = "llama"``: pieces, scores and
  types read with the ``sentencepiece`` package, plus added tokens from added_tokens.json and
  tokenizer_config.json's added_tokens_decoder.
- ``tokenizer.json`` with a BPE model -> ``"gpt2"``: the vocabulary and merges parsed from the JSON
  here; the pre-tokenizer named by its check hash (pretokenizer.py).
- ``tokenizer.json`` with a WordPiece model (or ``vocab.txt``) -> ``"bert"``.
- XLM-RoBERTa's ``sentencepiece.bpe.model``, else a ``tokenizer.json`` with a Unigram model ->
  ``"t5"``: pieces and scores, the normalizer's precompiled charsmap and space flags, as llama.cpp's
  XLMRobertaModel reads them (load_unigram_vocabulary).

Special token ids, the add-BOS/EOS flags, merges and the chat template come from gguf-py's
SpecialVocab, which reads tokenizer.json, tokenizer_config.json and config.json as llama.cpp does.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gguf import GGUFWriter, SpecialVocab, TokenType

from edgeinfer.convert.pretokenizer import identify_pre_tokenizer
from edgeinfer.convert.sentencepiece_proto import UNIGRAM, read_normalizer
from edgeinfer.errors import ModelFormatError

_SPM_SPACE = "\u2581"


@dataclass
class Vocabulary:
    model: str                       # tokenizer.ggml.model: "llama" (SentencePiece), "gpt2" (BPE), "bert"
                                     # (WordPiece), "t5" (Unigram)
    pre: str                         # tokenizer.ggml.pre
    tokens: list[str]
    types: list[int]                 # gguf.TokenType per token
    scores: list[float] | None       # SentencePiece and Unigram only
    special: SpecialVocab
    options: dict[str, Any] = field(default_factory=dict)   # add_space_prefix, ...

    def write(self, w: GGUFWriter) -> None:
        w.add_tokenizer_model(self.model)
        w.add_tokenizer_pre(self.pre)
        w.add_token_list(self.tokens)
        if self.scores is not None:
            w.add_token_scores(self.scores)
        w.add_token_types(self.types)
        if "add_space_prefix" in self.options:
            w.add_add_space_prefix(self.options["add_space_prefix"])
        if "remove_extra_whitespaces" in self.options:          # Unigram
            w.add_remove_extra_whitespaces(self.options["remove_extra_whitespaces"])
        if self.options.get("precompiled_charsmap"):
            w.add_precompiled_charsmap(self.options["precompiled_charsmap"])
        if "normalizer_lowercase" in self.options:   # WordPiece (llama.cpp's key names)
            w.add_bool("tokenizer.ggml.normalizer.lowercase", self.options["normalizer_lowercase"])
        if "normalizer_strip_accents" in self.options:
            w.add_bool("tokenizer.ggml.normalizer.strip_accents", self.options["normalizer_strip_accents"])
        self.special.add_to_gguf(w, quiet=True)


def looks_special(text: str) -> bool:
    """Added tokens some models forget to mark special (llama.cpp's does_token_look_special)."""
    return (text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (text.startswith("<|") and text.endswith("|>"))
            or (text.startswith("<\uff5c") and text.endswith("\uff5c>"))
            or (text.startswith("<unused") and text.endswith(">")))


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ModelFormatError(f"{path}: invalid JSON ({exc})") from None


def _tokenizer_config(folder: Path) -> dict[str, Any]:
    path = folder / "tokenizer_config.json"
    return _read_json(path) if path.is_file() else {}


def _sentencepiece(folder: Path, n_vocab: int | None) -> Vocabulary:
    try:
        from sentencepiece import SentencePieceProcessor
    except ImportError:
        raise ModelFormatError("converting a SentencePiece tokenizer (tokenizer.model) needs the "
                               "'sentencepiece' package: pip install sentencepiece") from None
    sp = SentencePieceProcessor()
    try:
        sp.LoadFromFile(str(folder / "tokenizer.model"))
    except (OSError, RuntimeError) as exc:
        raise ModelFormatError(f"{folder / 'tokenizer.model'}: not a SentencePiece model ({exc})") from None
    n = n_vocab or sp.vocab_size()
    tokens = [f"[PAD{i}]" for i in range(n)]
    scores = [-10000.0] * n
    types = [int(TokenType.UNUSED)] * n
    for i in range(min(n, sp.vocab_size())):
        tokens[i] = sp.IdToPiece(i)
        scores[i] = sp.GetScore(i)
        types[i] = int(TokenType.UNKNOWN if sp.IsUnknown(i) else TokenType.CONTROL if sp.IsControl(i)
                       else TokenType.UNUSED if sp.IsUnused(i) else TokenType.BYTE if sp.IsByte(i)
                       else TokenType.NORMAL)
    added = folder / "added_tokens.json"
    if added.is_file():
        for text, i in _read_json(added).items():
            if 0 <= i < n:
                tokens[i], scores[i], types[i] = text, -1000.0, int(TokenType.USER_DEFINED)
    for key, entry in _tokenizer_config(folder).get("added_tokens_decoder", {}).items():
        i, text = int(key), entry["content"]
        if not 0 <= i < n:
            continue
        if entry.get("special") or looks_special(text):
            types[i] = int(TokenType.CONTROL)
        else:
            text = text.replace(_SPM_SPACE, " ")   # llama.cpp expects user-defined tokens pre-normalized
            types[i] = int(TokenType.USER_DEFINED)
        tokens[i], scores[i] = text, -1000.0
    special = SpecialVocab(folder, n_vocab=n)
    # Ids the configs do not name (no tokenizer.json to look token texts up in): the model's own.
    for kind, tid in (("unk", sp.unk_id()), ("bos", sp.bos_id()), ("eos", sp.eos_id()), ("pad", sp.pad_id())):
        if 0 <= tid < n:
            special.special_token_ids.setdefault(kind, tid)
    return Vocabulary("llama", "default", tokens, types, scores, special)


def _bpe(folder: Path, n_vocab: int | None) -> Vocabulary:
    path = folder / "tokenizer.json"
    tj = _read_json(path)
    model = tj.get("model") or {}
    if model.get("type") != "BPE" or not isinstance(model.get("vocab"), dict):
        raise ModelFormatError(f"{path}: tokenizer model {model.get('type')!r} is not supported "
                               "(byte-level BPE or a SentencePiece tokenizer.model are)")
    vocab: dict[str, int] = dict(model["vocab"])
    added = {t["content"]: t for t in tj.get("added_tokens", [])}
    for text, t in added.items():
        vocab[text] = int(t["id"])
    n = n_vocab or (max(vocab.values()) + 1)
    if max(vocab.values()) >= n:
        raise ModelFormatError(f"{path}: token id {max(vocab.values())} is beyond the model's vocab_size {n}")
    by_id = {i: text for text, i in vocab.items()}
    tokens, types = [], []
    for i in range(n):
        text = by_id.get(i)
        if text is None:
            tokens.append(f"[PAD{i}]")
            types.append(int(TokenType.UNUSED))
            continue
        kind = TokenType.NORMAL
        if text in added:
            if added[text].get("special") or looks_special(text):
                kind = TokenType.CONTROL
            else:
                text, kind = text.replace(_SPM_SPACE, " "), TokenType.USER_DEFINED
        tokens.append(text)
        types.append(int(kind))
    return Vocabulary("gpt2", identify_pre_tokenizer(path), tokens, types, None,
                      SpecialVocab(folder, load_merges=True, n_vocab=n))


def _is_wordpiece(folder: Path) -> bool:
    path = folder / "tokenizer.json"
    if path.is_file():
        return (_read_json(path).get("model") or {}).get("type") == "WordPiece"
    return (folder / "vocab.txt").is_file()


def _wordpiece(folder: Path, n_vocab: int | None) -> Vocabulary:
    """A WordPiece vocabulary (BERT's tokenizer.json, or vocab.txt) as llama.cpp's BertModel writes
    it: "##" continuations without the "##", every other normal token with a '▁' in front (its
    "phantom space"), special tokens as they are; the BertNormalizer's lowercase / strip_accents
    flags as tokenizer.ggml.normalizer.* (llama.cpp's SpecialVocab)."""
    path = folder / "tokenizer.json"
    tj = _read_json(path) if path.is_file() else {}
    model = tj.get("model") or {}
    if isinstance(model.get("vocab"), dict):
        vocab = dict(model["vocab"])
    else:
        lines = (folder / "vocab.txt").read_text(encoding="utf-8").splitlines()
        vocab = {text: i for i, text in enumerate(lines)}
    special = {t["content"] for t in tj.get("added_tokens", []) if t.get("special")}
    for key, entry in _tokenizer_config(folder).get("added_tokens_decoder", {}).items():
        if entry.get("special"):
            special.add(entry["content"])
    n = n_vocab or (max(vocab.values()) + 1)
    by_id = {i: text for text, i in vocab.items()}
    tokens, types = [], []
    for i in range(n):
        text = by_id.get(i)
        if text is None:
            tokens.append(f"[PAD{i}]")
            types.append(int(TokenType.UNUSED))
        elif text in special:
            tokens.append(text)
            types.append(int(TokenType.CONTROL))
        else:
            tokens.append(text[2:] if text.startswith("##") else _SPM_SPACE + text)
            types.append(int(TokenType.NORMAL))
    options: dict[str, Any] = {}
    normalizers = [tj.get("normalizer") or {}]
    while normalizers:
        norm = normalizers.pop()
        if norm.get("type") == "Sequence":
            normalizers.extend(norm.get("normalizers", []))
        elif norm.get("type") == "Lowercase":
            options["normalizer_lowercase"] = True
        elif norm.get("type") == "StripAccents":
            options["normalizer_strip_accents"] = True
        elif norm.get("type") == "BertNormalizer":
            for key in ("lowercase", "strip_accents"):
                if norm.get(key) is not None:
                    options["normalizer_" + key] = bool(norm[key])
    return Vocabulary("bert", "default", tokens, types, None, SpecialVocab(folder, n_vocab=n), options)


def _tokenizer_model_type(folder: Path) -> str | None:
    path = folder / "tokenizer.json"
    return (_read_json(path).get("model") or {}).get("type") if path.is_file() else None


def _precompiled_charsmap(normalizer: dict[str, Any] | None) -> bytes:
    """The Precompiled normalizer's charsmap: the normalizer itself or one of a Sequence's."""
    import base64

    for norm in [normalizer or {}] + list((normalizer or {}).get("normalizers") or []):
        if norm.get("type") == "Precompiled" and norm.get("precompiled_charsmap"):
            return base64.b64decode(norm["precompiled_charsmap"])
    return b""


def _unigram(folder: Path, n_vocab: int | None) -> Vocabulary:
    """A Unigram tokenizer.json (XLM-RoBERTa: bge-m3, multilingual-e5, bge-reranker-v2-m3) as
    llama.cpp's XLMRobertaModel writes it from that file: the pieces with their scores (ids past
    the tokenizer's [PAD<i>], unused, -10000); the unknown token UNKNOWN, the special tokens CONTROL,
    other added tokens USER_DEFINED; add_space_prefix from the tokenizer's add_prefix_space and
    remove_extra_whitespaces from its clean_up_tokenization_spaces (transformers' defaults True and
    False), and the normalizer's precompiled charsmap."""
    path = folder / "tokenizer.json"
    tj = _read_json(path)
    pieces = (tj.get("model") or {}).get("vocab")
    if not isinstance(pieces, list):
        raise ModelFormatError(f"{path}: a Unigram model without its list of [piece, score]")
    config = _tokenizer_config(folder)
    added = {t["content"]: int(t["id"]) for t in tj.get("added_tokens", [])}
    special_ids = {int(t["id"]) for t in tj.get("added_tokens", []) if t.get("special")}
    for key in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
        text = config.get(key)
        text = text.get("content") if isinstance(text, dict) else text
        if isinstance(text, str) and text in added:
            special_ids.add(added[text])
    unk_text = config.get("unk_token")
    unk_id = added.get(unk_text) if isinstance(unk_text, str) and unk_text in added else tj["model"].get("unk_id", 3)
    n = max(n_vocab or 0, len(pieces))
    tokens = [f"[PAD{i}]" for i in range(n)]
    scores = [-10000.0] * n
    types = [int(TokenType.UNUSED)] * n
    for i, (piece, score) in enumerate(pieces):
        tokens[i], scores[i] = piece, float(score)
        types[i] = int(TokenType.UNKNOWN if i == unk_id else TokenType.CONTROL if i in special_ids
                       else TokenType.USER_DEFINED if i in added.values() else TokenType.NORMAL)
    options = {"add_space_prefix": bool(config.get("add_prefix_space", True)),
               "remove_extra_whitespaces": bool(config.get("clean_up_tokenization_spaces", False)),
               "precompiled_charsmap": _precompiled_charsmap(tj.get("normalizer"))}
    return Vocabulary("t5", "default", tokens, types, scores, SpecialVocab(folder, n_vocab=n), options)


def _fairseq_sentencepiece(folder: Path, n_vocab: int | None) -> Vocabulary:
    """XLM-RoBERTa's sentencepiece.bpe.model as llama.cpp's XLMRobertaModel writes it: the pieces
    realigned to fairseq's ids (<s> <pad> </s> <unk> first, every other piece one id later, the
    last entry of the padded list dropped: so the id past the pieces, <mask> in HF, stays an unused
    [PAD<i>]), and the normalizer's charsmap and flags."""
    try:
        from sentencepiece import SentencePieceProcessor
    except ImportError:
        raise ModelFormatError("converting sentencepiece.bpe.model needs the 'sentencepiece' package: "
                               "pip install sentencepiece") from None
    path = folder / "sentencepiece.bpe.model"
    data = path.read_bytes()
    norm = read_normalizer(data)
    if norm.model_type != UNIGRAM:
        raise ModelFormatError(f"{path}: a SentencePiece model of type {norm.model_type}, not Unigram (1)")
    sp = SentencePieceProcessor()
    try:
        sp.LoadFromSerializedProto(data)
    except (OSError, RuntimeError) as exc:
        raise ModelFormatError(f"{path}: not a SentencePiece model ({exc})") from None
    n = max(n_vocab or 0, sp.vocab_size())
    tokens = [f"[PAD{i}]" for i in range(n)]
    scores = [-10000.0] * n
    types = [int(TokenType.UNUSED)] * n
    for i in range(sp.vocab_size()):
        tokens[i], scores[i] = sp.IdToPiece(i), sp.GetScore(i)
        types[i] = int(TokenType.UNKNOWN if sp.IsUnknown(i) else TokenType.CONTROL if sp.IsControl(i)
                       else TokenType.UNUSED if sp.IsUnused(i) else TokenType.BYTE if sp.IsByte(i)
                       else TokenType.NORMAL)
    tokens = ["<s>", "<pad>", "</s>", "<unk>"] + tokens[3:-1]
    scores = [0.0] * 4 + scores[3:-1]
    types = [int(TokenType.CONTROL)] * 3 + [int(TokenType.UNKNOWN)] + types[3:-1]
    options = {"add_space_prefix": norm.add_dummy_prefix, "remove_extra_whitespaces": norm.remove_extra_whitespaces,
               "precompiled_charsmap": norm.precompiled_charsmap}
    return Vocabulary("t5", "default", tokens, types, scores, SpecialVocab(folder, n_vocab=len(tokens)), options)


def load_unigram_vocabulary(folder: str | Path, n_vocab: int | None) -> Vocabulary:
    """XLM-RoBERTa's tokenizer, in llama.cpp's order: sentencepiece.bpe.model if there is one,
    else tokenizer.json (which must hold a Unigram model)."""
    folder = Path(folder)
    if (folder / "sentencepiece.bpe.model").is_file():
        return _fairseq_sentencepiece(folder, n_vocab)
    if _tokenizer_model_type(folder) != "Unigram":
        raise ModelFormatError(f"{folder}: XLM-RoBERTa needs sentencepiece.bpe.model or a tokenizer.json "
                               "with a Unigram model")
    return _unigram(folder, n_vocab)


def load_vocabulary(folder: str | Path, n_vocab: int | None, add_space_prefix: bool | None = None) -> Vocabulary:
    """The checkpoint's tokenizer: tokenizer.model if there is one (llama.cpp's order), else
    tokenizer.json. `add_space_prefix`, if given, is the model family's own setting and wins
    over tokenizer_config.json's add_prefix_space."""
    folder = Path(folder)
    if (folder / "tokenizer.model").is_file():
        vocab = _sentencepiece(folder, n_vocab)
    elif _is_wordpiece(folder):
        vocab = _wordpiece(folder, n_vocab)
    elif (folder / "tokenizer.json").is_file():
        vocab = _bpe(folder, n_vocab)
    else:
        raise ModelFormatError(f"{folder}: no tokenizer.model or tokenizer.json")
    config = _tokenizer_config(folder)
    if add_space_prefix is not None:
        vocab.options["add_space_prefix"] = add_space_prefix
    elif isinstance(config.get("add_prefix_space"), bool):
        vocab.options["add_space_prefix"] = config["add_prefix_space"]
    return vocab
