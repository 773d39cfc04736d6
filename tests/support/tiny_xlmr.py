"""Tiny random XLM-RoBERTa checkpoints (XLMRobertaModel, XLMRobertaForSequenceClassification) with
a tiny Unigram tokenizer shaped like the real ones' tokenizer.json (bge-m3, multilingual-e5,
bge-reranker-v2-m3): a SentencePiece unigram model trained here on a small multilingual corpus with
the nmt_nfkc normalization (so the file carries a real precompiled charsmap), its pieces behind the
fairseq specials <s> <pad> </s> <unk> and <mask> last, a Metaspace pre-tokenizer and the
<s> A </s></s> B </s> post-processor. The SentencePiece model itself (fairseq's
sentencepiece.bpe.model) is saved only when asked: llama.cpp's converter reads it with protobuf,
which is not installed here."""
from __future__ import annotations

import base64
import io
import json
from pathlib import Path

from edgeinfer.convert.sentencepiece_proto import read_normalizer
from support.tiny_bert import random_model, save_sentence_transformers_pooling

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! 12345 + 678 = 13023?",
    "Le renard brun rapide saute par-dessus le chien paresseux.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "El rápido zorro marrón salta sobre el perro perezoso.",
    "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "我想在苹果公司工作。",
    "素早い茶色の狐がのろまな犬を飛び越える。",
    "빠른 갈색 여우가 게으른 개를 뛰어넘는다.",
    "Ünïcödé çharacters: naïve café, Straße, ÉCOLE.",
    "ﬁnancial ＦＵＬＬＷＩＤＴＨ ①②③ ㍿ reranking embeddings",
]
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]   # fairseq's order: ids 0..3, <mask> after the pieces


def unigram_pieces() -> tuple[list[tuple[str, float]], bytes]:
    """The trained pieces with their scores (fairseq ids: specials first, <mask> last) and the
    serialized SentencePiece model (<unk> <s> </s> then the pieces: each one id before HF's)."""
    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(CORPUS * 20), model_writer=buf, vocab_size=300,
                                   model_type="unigram", normalization_rule_name="nmt_nfkc",
                                   character_coverage=0.98, hard_vocab_limit=False, num_threads=1,
                                   unk_id=0, bos_id=1, eos_id=2, pad_id=-1, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_proto=buf.getvalue())
    pieces = [(t, 0.0) for t in SPECIALS]
    pieces += [(sp.IdToPiece(i), sp.GetScore(i)) for i in range(3, sp.vocab_size())]
    pieces.append(("<mask>", 0.0))
    return pieces, buf.getvalue()


def save_unigram_tokenizer(folder: Path, with_sentencepiece_model: bool = False) -> int:
    """tokenizer.json + tokenizer_config.json as XLM-R checkpoints ship them (and their
    sentencepiece.bpe.model if asked); returns the vocabulary size."""
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import Unigram

    pieces, sp_model = unigram_pieces()
    charsmap = read_normalizer(sp_model).precompiled_charsmap
    tok = Tokenizer(Unigram(pieces, unk_id=3, byte_fallback=False))
    tok.normalizer = normalizers.Precompiled(charsmap)   # as xlm-roberta-base's tokenizer.json
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    tok.add_special_tokens([AddedToken(t, special=True) for t in SPECIALS + ["<mask>"]])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    if with_sentencepiece_model:
        (folder / "sentencepiece.bpe.model").write_bytes(sp_model)
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "XLMRobertaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>",
        "cls_token": "<s>", "unk_token": "<unk>", "pad_token": "<pad>", "mask_token": "<mask>",
        "model_max_length": 62, "clean_up_tokenization_spaces": True}))
    (folder / "special_tokens_map.json").write_text(json.dumps({
        "bos_token": "<s>", "eos_token": "</s>", "sep_token": "</s>", "cls_token": "<s>", "unk_token": "<unk>",
        "pad_token": "<pad>", "mask_token": "<mask>"}))
    return len(pieces)


def make_xlmr(n_vocab: int, cls_name: str = "XLMRobertaModel", **extra):
    """A tiny random model; positions start at padding_idx + 1 = 2, as in XLM-R."""
    import transformers

    config = transformers.XLMRobertaConfig(
        vocab_size=n_vocab, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, intermediate_size=128,
        max_position_embeddings=66, type_vocab_size=1, layer_norm_eps=1e-5, initializer_range=0.2,
        pad_token_id=1, bos_token_id=0, eos_token_id=2,
        attn_implementation="eager", **extra)   # SDPA's first calls take seconds; the test calls it a few times
    return random_model(cls_name, config)


def save_xlmr_folder(folder: Path, cls_name: str = "XLMRobertaModel", pooling: str | None = "mean",
                     with_sentencepiece_model: bool = False, **extra):
    """Tokenizer, model and (with a pooling) the sentence-transformers layout in `folder`."""
    n_vocab = save_unigram_tokenizer(folder, with_sentencepiece_model)
    model = make_xlmr(n_vocab, cls_name, **extra)
    model.save_pretrained(folder, safe_serialization=True)
    if pooling is not None:
        save_sentence_transformers_pooling(folder, model.config.hidden_size, pooling)
    return model


def charsmap_of(folder: Path) -> bytes:
    """The precompiled charsmap the folder's tokenizer.json carries."""
    tj = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    return base64.b64decode(tj["normalizer"]["precompiled_charsmap"])
