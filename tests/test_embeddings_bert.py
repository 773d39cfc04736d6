"""BERT encoders (GGUF architecture bert) end to end: a tiny random transformers BertModel with a
WordPiece tokenizer (BertTokenizerFast over a small vocabulary written here) and a
sentence-transformers folder layout (modules.json, 1_Pooling), converted by `edgeinfer convert`:
the WordPiece tokens are the HF tokenizer's on varied text (accents, punctuation, unknown words,
CJK), the embeddings are transformers' pooled last_hidden_state within cosine 0.9999 for mean and
cls pooling, and a batch of inputs of mixed lengths gives each exactly what it gets alone. A
BertForSequenceClassification cross-encoder reranks with transformers' logits."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from edgeinfer import Model, _core  # noqa: E402
from edgeinfer.cli import main as cli_main  # noqa: E402
from edgeinfer.errors import ContextOverflowError, EdgeInferError  # noqa: E402
from support.tiny_bert import make_bert, save_bert_folder, wordpiece_vocab  # noqa: E402

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! 12345 + 678 = 13023?",
    "  leading spaces, trailing spaces   ",
    "tabs\tand\nnew lines\n\nand more",
    "Ünïcödé çharacters: naïve café, Straße, ÉCOLE.",
    "我想在apple工作 1314151天～",
    "emoji 🚀🦙 ✅ and symbols @#$%^&*()_+-=[]{}|;':\",./<>?",
    "unbelievable xyzzyq foxes jumped playing",
    "UPPER lower MiXeD",
    "a",
]
@pytest.fixture(scope="module", params=["mean", "cls"])
def converted(request, tmp_path_factory):
    """(the transformers model, its tokenizer, edgeinfer's F32 file, the pooling)."""
    from transformers import BertTokenizerFast

    tmp = tmp_path_factory.mktemp(f"bert-{request.param}")
    model = make_bert()
    save_bert_folder(tmp / "hf", model, request.param)
    assert cli_main(["convert", str(tmp / "hf"), str(tmp / "model.gguf"), "--outtype", "f32"]) == 0
    return model, BertTokenizerFast.from_pretrained(tmp / "hf"), tmp / "model.gguf", request.param


def test_converted_file_has_llamacpps_keys(converted):
    _, _, path, pooling = converted
    f = _core.GgufFile(str(path))
    assert f.get("general.architecture") == "bert"
    assert f.get("bert.pooling_type") == {"mean": 1, "cls": 2}[pooling]
    assert f.get("bert.attention.causal") is False
    assert f.get("tokenizer.ggml.model") == "bert"
    names = {t["name"] for t in f.tensors()}
    assert {"token_types.weight", "position_embd.weight", "token_embd_norm.bias",
            "blk.0.attn_output_norm.weight", "blk.2.layer_output_norm.bias"} <= names
    assert not any(n.startswith("pooler") for n in names)


def test_wordpiece_tokens_match_the_hf_tokenizer(converted):
    _, tok, path, _ = converted
    m = Model.load(path, n_ctx=64)
    for text in TEXTS:
        assert m.tokenize(text) == tok(text)["input_ids"], text


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_embeddings_match_transformers(converted):
    import torch

    hf, tok, path, pooling = converted
    m = Model.load(path, n_ctx=64)
    assert m.can_embed and m.pooling == pooling and m.n_embd_out == 64 and not m.can_rerank
    got = m.embed(TEXTS, normalize=False)
    assert got.shape == (len(TEXTS), 64)
    for text, row in zip(TEXTS, got):
        with torch.no_grad():
            h = hf(**tok(text, return_tensors="pt")).last_hidden_state[0].numpy()
        ref = h.mean(axis=0) if pooling == "mean" else h[0]
        assert _cos(row, ref) >= 0.9999, text
    np.testing.assert_allclose(np.linalg.norm(m.embed(TEXTS), axis=1), 1.0, rtol=1e-5)


def _packing_is_invisible(path):
    """Inputs packed into shared passes (n_batch 512: all of them; 24: a few at a time; 4: each
    alone, a longer one in one pass of its own) get the bits each gets embedded by itself."""
    alone = np.stack([Model.load(path, n_ctx=64).embed(t)[0] for t in TEXTS])
    for n_batch in (512, 24, 4):
        together = Model.load(path, n_ctx=64, n_batch=n_batch).embed(TEXTS)
        assert together.tobytes() == alone.tobytes(), n_batch


def test_a_batch_of_mixed_lengths_gives_each_what_it_gets_alone(converted):
    _packing_is_invisible(converted[2])


def test_pooling_none_and_overlong_inputs(converted):
    _, _, path, _ = converted
    m = Model.load(path, n_ctx=16, pooling="none")
    rows = m.embed(["hello world", "the quick brown fox"])
    assert [r.shape for r in rows] == [(4, 64), (6, 64)]
    long = " ".join(["fox"] * 30)
    with pytest.raises(ContextOverflowError, match="32 tokens"):
        m.embed(long)
    (cut,) = m.embed(long, truncate=True)
    assert cut.shape == (16, 64)


def test_a_cross_encoder_reranks_as_transformers(tmp_path):
    import torch
    from transformers import BertTokenizerFast

    hf = make_bert("BertForSequenceClassification", num_labels=1)
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "vocab.txt").write_text("\n".join(wordpiece_vocab()) + "\n", encoding="utf-8")
    BertTokenizerFast(vocab=str(folder / "vocab.txt")).save_pretrained(folder)
    hf.save_pretrained(folder, safe_serialization=True)
    assert cli_main(["convert", str(folder), str(tmp_path / "rank.gguf"), "--outtype", "f32"]) == 0
    assert _core.GgufFile(str(tmp_path / "rank.gguf")).get("bert.pooling_type") == 4   # rank
    m = Model.load(tmp_path / "rank.gguf", n_ctx=64)
    assert m.pooling == "rank" and m.can_rerank and m.n_embd_out == 1
    pair = m.tokenize("quick fox") + m.tokenize("the quick brown fox", add_special=False) + [102]
    assert m.embed([pair]).tolist() == [m.rerank("quick fox", ["the quick brown fox"]).tolist()]   # raw scores
    docs = ["the quick brown fox", "hello world", "a lazy dog jumps"]
    got = m.rerank("quick fox", docs)
    tok = BertTokenizerFast.from_pretrained(folder)
    with torch.no_grad():
        for doc, score in zip(docs, got):
            enc = tok("quick fox", doc, return_tensors="pt")
            enc["token_type_ids"] = torch.zeros_like(enc["token_type_ids"])   # llama.cpp: all type 0
            ref = hf(**enc).logits[0, 0].item()
            assert abs(score - ref) <= 1e-3 * max(1.0, abs(ref)), doc
    with pytest.raises(EdgeInferError, match="rerank"):
        Model.load(tmp_path / "rank.gguf", n_ctx=64, pooling="cls").rerank("q", ["d"])


def test_llamacpps_converter_writes_the_same_file(tmp_path):
    from support.llamacpp_venv import (WORDPIECE_PRE_DEFAULT, assert_same_encoder_file, llamacpp_converter,
                                       start_llamacpp_converter)

    converter = llamacpp_converter()
    if converter is None:
        pytest.skip("no llama.cpp source tree (scripts/llamacpp_bin.py unpacks one)")
    save_bert_folder(tmp_path / "hf", make_bert(), "mean")
    run = start_llamacpp_converter(converter, tmp_path / "hf", tmp_path / "theirs.gguf",
                                   run_as=(WORDPIECE_PRE_DEFAULT, ""))
    assert cli_main(["convert", str(tmp_path / "hf"), str(tmp_path / "ours.gguf"), "--outtype", "f32"]) == 0
    log, _ = run.communicate(timeout=300)
    assert run.returncode == 0, log[-2000:]
    assert_same_encoder_file(tmp_path / "theirs.gguf", tmp_path / "ours.gguf", TEXTS)


@pytest.mark.parametrize("outtype, min_cos", [("f16", 0.99999), ("q8_0", 0.999), ("q4_0", 0.85)])  # q4_0: 4 bits on 64-wide random rows
def test_quantized_files_stay_close(converted, outtype, min_cos, tmp_path):
    from edgeinfer.convert import convert_checkpoint

    _, _, path, _ = converted
    convert_checkpoint(path.parent / "hf", tmp_path / "q.gguf", outtype)
    ref = Model.load(path, n_ctx=64).embed(TEXTS)
    got = Model.load(tmp_path / "q.gguf", n_ctx=64).embed(TEXTS)
    assert float(np.min(np.sum(ref * got, axis=1))) >= min_cos
    _packing_is_invisible(tmp_path / "q.gguf")


def test_an_encoder_stays_on_the_cpu(converted):
    """An encoder has no decoder layers to offload: asked for some it says so; "auto" runs it on
    the CPU."""
    path = converted[2]
    assert Model.load(path, n_ctx=32, gpu_layers="auto").placement is None
    with pytest.raises(EdgeInferError, match="encoder .* runs on the CPU"):
        Model.load(path, n_ctx=32, gpu_layers="all")
