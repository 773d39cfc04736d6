"""Decoder-based embedders and rerankers (issue 26), as tiny random transformers checkpoints in their
sentence-transformers layout, converted by `edgeinfer convert` and by llama.cpp's converter:

- Qwen3-Embedding: a qwen3 file whose pooling (last) and EOS appended by the tokenizer come from the
  folder; the embedding is transformers' normed last hidden state of the last token (EOS).
- Qwen3-Reranker: the lm_head rows of "yes" and "no" as cls.output, rank pooling and the rerank
  prompt in the file; Model.rerank scores P(yes) = softmax(yes, no logits of the last token)[0], as
  llama.cpp does and the model card computes.
- EmbeddingGemma (gemma-embedding): Gemma 3 layers attending both ways within the symmetric
  sliding window, mean pooling, then the two Dense projections, normalised.

Each within cosine 0.9999 (scores 1e-3) of transformers; a batch gives each input exactly what it
gets alone; llama.cpp's converter's file gives exactly our file's outputs (skipped without it)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from edgeinfer import Model, _core  # noqa: E402
from edgeinfer.convert import convert_checkpoint  # noqa: E402
from support.hf_tiny import (SAMPLE_TEXTS, gemma_hf_tokenizer, make_tiny_checkpoint,  # noqa: E402
                             train_sentencepiece, write_tokenizer_config)
from support.llamacpp_venv import llamacpp_converter, start_llamacpp_converter  # noqa: E402
from support.sentence_transformers_folder import write_sentence_transformers  # noqa: E402

TEXTS = SAMPLE_TEXTS[:6]
QUERY = "what does the quick brown fox do?"
# llama.cpp's converter, with extra arguments (argv[2]) after the usual ones.
RUN_WITH_ARGS = """
import runpy, sys
converter, extra = sys.argv[1], sys.argv[2]
sys.path.insert(0, converter.rsplit("/", 1)[0])
sys.argv = [converter] + sys.argv[3:] + extra.split()
runpy.run_path(converter, run_name="__main__")
"""


def _qwen3_embedding(folder: Path, spm: Path):
    """Qwen3-Embedding's layout: last-token pooling, EOS appended, no BOS."""
    model = make_tiny_checkpoint(folder, "qwen3", spm)
    write_tokenizer_config(folder, add_bos_token=False, add_eos_token=True)
    write_sentence_transformers(folder, 64, "lasttoken")
    return model


def _qwen3_reranker(folder: Path, spm: Path):
    """A Qwen3ForCausalLM named as a Qwen3-Reranker, with a tokenizer transformers loads (llama.cpp's
    converter looks "yes" and "no" up with it)."""
    # the rerank prompt is some 400 tokens of this tiny vocabulary
    model = make_tiny_checkpoint(folder, "qwen3", spm, seed=1, max_position_embeddings=1024)
    gemma_hf_tokenizer(spm).save_pretrained(folder)
    return model


def _embedding_gemma(folder: Path, spm: Path):
    """(the Gemma3TextModel, [dense_2 [96][64], dense_3 [64][96]])."""
    rng = np.random.default_rng(0)
    model = make_tiny_checkpoint(folder, "embeddinggemma", spm)
    config = json.loads((folder / "config.json").read_text())
    config["sliding_window"] = 8   # the checkpoint's own value (transformers saved its halved one)
    (folder / "config.json").write_text(json.dumps(config))
    write_tokenizer_config(folder, add_eos_token=True)
    dense = [rng.normal(0, 0.2, (96, 64)).astype(np.float32), rng.normal(0, 0.2, (64, 96)).astype(np.float32)]
    write_sentence_transformers(folder, 64, "mean", dense)
    return model, dense


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """name -> (reference, our F32 file, llama.cpp's F32 file or None). The llama.cpp converter runs
    (mostly importing torch) go side by side with ours."""
    tmp = tmp_path_factory.mktemp("qwen3-gemma-embed")
    spm = train_sentencepiece(tmp / "spm", user_defined_symbols=("yes", "no"))
    spm_gemma = train_sentencepiece(tmp / "spm-gemma", add_dummy_prefix=False)
    refs = {"Qwen3-Embedding-tiny": _qwen3_embedding(tmp / "Qwen3-Embedding-tiny", spm),
            "Qwen3-Reranker-tiny": _qwen3_reranker(tmp / "Qwen3-Reranker-tiny", spm),
            "embeddinggemma-tiny": _embedding_gemma(tmp / "embeddinggemma-tiny", spm_gemma)}
    converter = llamacpp_converter()
    runs = {}
    if converter is not None:
        for name in refs:
            extra = "--sentence-transformers-dense-modules" if "gemma" in name else ""
            runs[name] = start_llamacpp_converter(converter, tmp / name, tmp / f"{name}-llamacpp.gguf",
                                                  run_as=(RUN_WITH_ARGS, extra))
    for name in refs:
        convert_checkpoint(tmp / name, tmp / f"{name}.gguf", "f32")
    for name, run in runs.items():
        log, _ = run.communicate(timeout=300)
        assert run.returncode == 0, f"{name}: convert_hf_to_gguf.py failed:\n{log[-3000:]}"
    return {name: (ref, tmp / f"{name}.gguf", tmp / f"{name}-llamacpp.gguf" if runs else None)
            for name, ref in refs.items()}


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def _hidden(model, ids: list[int]) -> np.ndarray:
    """transformers' final-normed hidden states [n][n_embd] of one input."""
    import torch

    base = getattr(model, "model", model)
    with torch.no_grad():
        return base(torch.tensor([ids])).last_hidden_state[0].float().numpy()


def _llamacpp_file(models, name: str) -> Path:
    path = models[name][2]
    if path is None:
        pytest.skip("no llama.cpp source tree (scripts/llamacpp_bin.py unpacks one)")
    return path


# --- Qwen3-Embedding -------------------------------------------------------------------------------
def test_qwen3_embedding_file_says_last_pooling_and_eos(models):
    _, path, _ = models["Qwen3-Embedding-tiny"]
    f = _core.GgufFile(str(path))
    assert f.get("qwen3.pooling_type") == 3
    assert f.get("tokenizer.ggml.add_eos_token") is True and f.get("tokenizer.ggml.add_bos_token") is False
    m = Model.load(path, n_ctx=128)
    assert m.can_embed and m.pooling == "last" and not m.can_rerank
    assert all(m.tokenize(t)[-1] == 2 and m.tokenize(t)[0] != 1 for t in TEXTS)


def test_qwen3_embedding_matches_transformers(models):
    hf, path, _ = models["Qwen3-Embedding-tiny"]
    m = Model.load(path, n_ctx=128)
    got = m.embed(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)
    for row, text in zip(got, TEXTS):
        assert _cos(row, _hidden(hf, m.tokenize(text))[-1]) >= 0.9999
    alone = np.stack([m.embed(t)[0] for t in reversed(TEXTS)][::-1])
    assert got.tobytes() == alone.tobytes()


def test_qwen3_embedding_from_llamacpps_converter(models):
    theirs = Model.load(_llamacpp_file(models, "Qwen3-Embedding-tiny"), n_ctx=128)
    ours = Model.load(models["Qwen3-Embedding-tiny"][1], n_ctx=128)
    assert theirs.pooling == "last"
    assert [theirs.tokenize(t) for t in TEXTS] == [ours.tokenize(t) for t in TEXTS]
    assert theirs.embed(TEXTS).tobytes() == ours.embed(TEXTS).tobytes()


# --- Qwen3-Reranker --------------------------------------------------------------------------------
def _yes_probability(hf, ids: list[int], yes: int, no: int) -> float:
    """The model card's score: softmax over the last token's [no, yes] logits, the yes part."""
    import torch

    with torch.no_grad():
        logits = hf(torch.tensor([ids])).logits[0, -1].double()
    return float(torch.softmax(logits[[no, yes]], dim=0)[1])


def test_qwen3_reranker_file_has_the_yes_no_head_and_prompt(models):
    _, path, _ = models["Qwen3-Reranker-tiny"]
    f = _core.GgufFile(str(path))
    shapes = {t["name"]: t["shape"] for t in f.tensors()}
    assert shapes["cls.output.weight"] == [64, 2] and "output.weight" not in shapes
    meta = f.metadata()
    assert meta["qwen3.pooling_type"] == 4
    assert "{query}" in meta["tokenizer.chat_template.rerank"] and "{document}" in meta["tokenizer.chat_template.rerank"]
    m = Model.load(path, n_ctx=512)
    assert m.can_rerank and m.n_embd_out == 2


def test_qwen3_reranker_scores_are_transformers_yes_probability(models):
    hf, path, _ = models["Qwen3-Reranker-tiny"]
    m = Model.load(path, n_ctx=512)
    yes, no = (m.metadata["tokenizer.ggml.tokens"].index(t) for t in ("yes", "no"))
    template = m.metadata["tokenizer.chat_template.rerank"]
    scores = m.rerank(QUERY, TEXTS)
    assert scores.shape == (len(TEXTS),) and scores.dtype == np.float32
    for score, doc in zip(scores, TEXTS):
        ids = m.tokenize(template.replace("{query}", QUERY).replace("{document}", doc), add_special=False,
                         parse_special=True)
        assert abs(float(score) - _yes_probability(hf, ids, yes, no)) < 1e-3
    assert len({round(float(s), 4) for s in scores}) > 1   # the documents are told apart
    alone = np.array([m.rerank(QUERY, [d])[0] for d in TEXTS], dtype=np.float32)
    assert scores.tobytes() == alone.tobytes()


def test_a_tied_qwen3_reranker_keeps_its_embedding(tmp_path):
    spm = train_sentencepiece(tmp_path / "spm", user_defined_symbols=("yes", "no"))
    hf = make_tiny_checkpoint(tmp_path / "Qwen3-Reranker-tied", "qwen3", spm, seed=2, tie_word_embeddings=True,
                              max_position_embeddings=1024)
    convert_checkpoint(tmp_path / "Qwen3-Reranker-tied", tmp_path / "tied.gguf", "f32")
    m = Model.load(tmp_path / "tied.gguf", n_ctx=512)
    names = {t["name"] for t in _core.GgufFile(str(tmp_path / "tied.gguf")).tensors()}
    assert {"token_embd.weight", "cls.output.weight"} <= names and "output.weight" not in names
    yes, no = (m.metadata["tokenizer.ggml.tokens"].index(t) for t in ("yes", "no"))
    prompt = m.metadata["tokenizer.chat_template.rerank"].replace("{query}", QUERY).replace("{document}", TEXTS[0])
    ids = m.tokenize(prompt, add_special=False, parse_special=True)
    assert abs(float(m.rerank(QUERY, TEXTS[:1])[0]) - _yes_probability(hf, ids, yes, no)) < 1e-3


def test_qwen3_reranker_from_llamacpps_converter(models):
    theirs = Model.load(_llamacpp_file(models, "Qwen3-Reranker-tiny"), n_ctx=512)
    ours = Model.load(models["Qwen3-Reranker-tiny"][1], n_ctx=512)
    assert theirs.can_rerank
    assert theirs.metadata["tokenizer.chat_template.rerank"] == ours.metadata["tokenizer.chat_template.rerank"]
    assert theirs.rerank(QUERY, TEXTS).tobytes() == ours.rerank(QUERY, TEXTS).tobytes()


# --- EmbeddingGemma --------------------------------------------------------------------------------
def _gemma_reference(hf, dense, ids: list[int]) -> np.ndarray:
    """sentence-transformers' pipeline: mean of the hidden states, Dense, Dense, normalise."""
    x = _hidden(hf, ids).astype(np.float64).mean(axis=0)
    for w in dense:
        x = w.astype(np.float64) @ x
    return x / np.linalg.norm(x)


def test_embedding_gemma_file(models):
    _, path, _ = models["embeddinggemma-tiny"]
    f = _core.GgufFile(str(path))
    meta = f.metadata()
    assert meta["general.architecture"] == "gemma-embedding"
    assert meta["gemma-embedding.pooling_type"] == 1 and meta["gemma-embedding.attention.sliding_window"] == 8
    assert (meta["gemma-embedding.dense_2_feat_in"], meta["gemma-embedding.dense_2_feat_out"]) == (64, 96)
    shapes = {t["name"]: t["shape"] for t in f.tensors()}
    assert shapes["dense_2.weight"] == [64, 96] and shapes["dense_3.weight"] == [96, 64]
    m = Model.load(path, n_ctx=128)
    assert m.is_encoder and m.can_embed and m.pooling == "mean" and m.n_embd_out == 64


def test_embedding_gemma_matches_sentence_transformers(models):
    (hf, dense), path, _ = models["embeddinggemma-tiny"]
    m = Model.load(path, n_ctx=128)
    ids = [m.tokenize(t) for t in TEXTS]
    assert max(len(i) for i in ids) > 16   # longer than the window: the local layers see part of it
    got = m.embed(ids)
    for row, i in zip(got, ids):
        assert i[0] == 1 and i[-1] == 2
        assert _cos(row, _gemma_reference(hf, dense, i)) >= 0.9999
    alone = np.stack([m.embed(i)[0] for i in reversed(ids)][::-1])
    assert got.tobytes() == alone.tobytes()
    # pooling none: every token's hidden state through the projections
    (rows,) = Model.load(path, n_ctx=128, pooling="none").embed([ids[0]], normalize=False)
    ref = _hidden(hf, ids[0]) @ dense[0].T @ dense[1].T
    assert rows.shape == ref.shape and min(_cos(a, b) for a, b in zip(rows, ref)) >= 0.9999


def test_embedding_gemma_from_llamacpps_converter(models):
    theirs = Model.load(_llamacpp_file(models, "embeddinggemma-tiny"), n_ctx=128)
    ours = Model.load(models["embeddinggemma-tiny"][1], n_ctx=128)
    assert theirs.pooling == "mean" and theirs.n_embd_out == 64
    assert [theirs.tokenize(t) for t in TEXTS] == [ours.tokenize(t) for t in TEXTS]
    assert theirs.embed(TEXTS).tobytes() == ours.embed(TEXTS).tobytes()
